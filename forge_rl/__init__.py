"""The `forge-rl` command line: thin glue over the services.

Each module is marked pure (no Kafka, network, files, processes or terminal) or I/O.

The command line:
- cli — the `forge-rl` entry point (I/O)
- cli_root — the command group: its options, error handling, what every command shares (I/O)
- cli_services — commands that start things: infrastructure, each service, the main job (I/O)
- cli_data — commands over a run's data: replay, analytics, queries, reports, export,
  tracking (I/O)
- extras — which optional install a command needs (trainer, plots), and the error naming it
  (I/O: import lookup)

The main job, `forge-rl run`, in the order a run goes:
- run_config — settings of `forge-rl run`, from the config file and environment (I/O)
- run — infra, gateway, worker and trainer as supervised processes, plus the fleet (I/O)
- supervisor — child services: started with their logs in files, watched, stopped (I/O)
- local_vllm — the run's own vLLM CPU server, serving an untied base policy (I/O)
- pipeline_watch — event counts, samples and training steps, read from the topics (I/O)
- progress — live progress: a table on a terminal, a plain line otherwise (I/O: terminal)
- learning — did the agent get better: the first and last fifth of its rewards (pure)
- closing_report — what a run prints and keeps when its agents stop (I/O)

Reports and tracking:
- report_data — the picture report's SQL, limited to a run's span (I/O: reads summary.json)
- report — PNG pictures of a run and one HTML page showing them (I/O: files)
- tracking — TrainStep records from forge.metrics to TensorBoard or MLflow (I/O)
"""
