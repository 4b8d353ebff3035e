#!/usr/bin/env bash
# The main job, set-up included. Until `forge-rl run` lands this brings the local
# infrastructure up and shows where everything runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
VENV=${FORGE_VENV:-.venv}
"$VENV/bin/forge-rl" infra up
exec "$VENV/bin/forge-rl" infra status
