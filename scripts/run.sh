#!/usr/bin/env bash
# The main job, set-up included: a tiny agent learns the built-in tool task end to end on this
# machine (Kafka, gateway, streams worker, trainer, agent fleet), with live progress and a
# closing analytics report. Extra arguments go to `forge-rl run` (e.g. --duration 120,
# --agent-for guess "python examples/agents/interval_agent.py").
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
VENV=${FORGE_VENV:-.venv}
export FORGE_HOME=${FORGE_HOME:-$PWD/.forge/quickstart}
export HF_HUB_OFFLINE=1
exec "$VENV/bin/forge-rl" --config examples/quickstart.yaml run --fresh "$@"
