"""The contract between services: Avro schemas, typed records, topic names and the codec.

Every service imports this package; it imports none of them. ``avro/`` holds the schemas
records are written with, ``released/`` every released version, which the codec still reads.
Each module is marked pure (no Kafka, network, files or processes) or I/O.

In the order a record is configured, built, encoded and sent:
- pipeline_file — the pipeline file: rewards, tool-outcome rules, truncation, window,
  timeouts and domains (pure; ``read_pipeline_file`` reads the YAML file)
- records — typed records, one per Avro schema; token ids and log-probs as numpy (pure)
- tokens — small rules over records every service shares: common prefix, oldest policy (pure)
- tool_outcomes — process signals from a rollout's tool use, for gateway and scorer (pure)
- codec — records to and from Avro single-object bytes, resolved by schema fingerprint
  (pure; parses the packaged ``.avsc`` files once per process)
- topics — topic names, their record types and configs, defined in one place (pure)
- errors — the one error hierarchy every service raises and translates at its edge (pure)
"""
