#!/usr/bin/env bash
# The test command: set-up, lint, type-check, then unit and integration tests against a real
# Kafka broker the test session starts itself (or FORGE_KAFKA_BOOTSTRAP) and real ClickHouse.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The real vLLM server's own environment (cached; ~5 min and 6 GB on a fresh machine): the
# tests marked `vllm` run against it. A failed build fails here, not as skipped tests.
scripts/setup_vllm.sh >/dev/null
# The real clients and agent CLIs the conformance suites drive (tests/clients, tests/agents):
# pinned, from PyPI and npm, cached. A failed install fails here.
scripts/setup_agents.sh >/dev/null
VENV=${FORGE_VENV:-.venv}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
"$VENV/bin/ruff" format --check .
"$VENV/bin/ruff" check .
"$VENV/bin/mypy"
exec "$VENV/bin/python" -m pytest "$@"
