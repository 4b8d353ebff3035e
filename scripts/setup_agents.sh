#!/usr/bin/env bash
# Idempotent set-up of the real clients and agent CLIs the conformance suites drive, cached like
# the Kafka jars: a Python environment with the client libraries and mini-swe-agent
# (scripts/agents-constraints.txt), and the npm CLIs Claude Code, Codex and OpenCode, pinned.
# Rebuilt only when this script or the constraints change. Prints the environment's directory.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/forge-rl
want=$(cat scripts/setup_agents.sh scripts/agents-constraints.txt | sha256sum | cut -c1-12)
ENV_DIR=${FORGE_AGENTS_ENV:-$CACHE/agents-$want}
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
NPM_PACKAGES=(@anthropic-ai/claude-code@2.1.332 @openai/codex@0.171.0 opencode-ai@1.18.33)

if [ -f "$ENV_DIR/.forge-setup" ]; then
  echo "$ENV_DIR"
  exit 0
fi
rm -rf "$ENV_DIR"
"$PY" -m venv "$ENV_DIR/python"
"$ENV_DIR/python/bin/python" -m pip install -q --upgrade pip
"$ENV_DIR/python/bin/python" -m pip install -q -r scripts/agents-constraints.txt
# The CLIs ship native binaries their postinstall scripts put in place.
npm install --silent --no-audit --no-fund --prefix "$ENV_DIR/npm" "${NPM_PACKAGES[@]}" >/dev/null
for bin in claude codex opencode; do
  "$ENV_DIR/npm/node_modules/.bin/$bin" --version >/dev/null
done
"$ENV_DIR/python/bin/mini" --help >/dev/null
touch "$ENV_DIR/.forge-setup"
echo "$ENV_DIR"
