"""Shared infrastructure: settings, the local Kafka broker, Kafka clients and the analytics store.

A library every service may import; it never imports a service. Beside the modules, ``kafka/``
holds the broker's Maven pom and configs, ``prometheus/`` and ``grafana/`` the scrape config
and dashboards. Each module is marked pure (no Kafka, network, files or processes) or I/O.

Settings:
- settings — settings loading for every service: defaults < config file < environment (I/O)
- config — where local state lives and how Kafka and ClickHouse are reached (I/O: settings)

The broker, started and set up:
- kafka_runtime — finds Java and the broker's jars, resolved once with Maven (I/O)
- local_broker — a real single-node Kafka broker, run as a child process (I/O)
- lifecycle — `infra up/down/status`: the broker, its topics, the analytics tables (I/O)

Records to and from Kafka:
- partitioner — Kafka's key partitioning, each key's hash remembered (pure)
- kafka_clients — producers and consumers configured for forge-rl's records, the DLQ (I/O)
- log_reader — a bounded range of a topic's log, by offset or by timestamp, for replays (I/O)

Stores, metrics and models:
- analytics — the analytics store: a ClickHouse server or embedded chDB (I/O)
- metrics_server — Prometheus /metrics of the streams worker and the trainer (I/O: HTTP)
- tiny_model — a tiny causal LM and its tokenizer, built locally from a config (I/O: files)
- machine — the one line every bench prints: CPU, cores, load, Python, torch, Kafka (I/O)
"""
