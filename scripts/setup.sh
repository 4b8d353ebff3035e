#!/usr/bin/env bash
# Idempotent set-up on a fresh machine: a venv in .venv with forge-rl and its pinned stack.
# Java 17+ and Maven are needed for the local Kafka broker (jars come from Maven Central on
# the first `forge-rl infra up` and are cached).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${FORGE_VENV:-.venv}
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
stamp="$VENV/.forge-setup"
want=$(cat pyproject.toml scripts/constraints.txt scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
pip=("$VENV/bin/python" -m pip)
"${pip[@]}" install -q --upgrade pip setuptools wheel
"${pip[@]}" install -q -c scripts/constraints.txt torch
# DeepSpeed is an sdist: build it against the installed torch (not an isolated one), no ops.
DS_BUILD_OPS=0 "${pip[@]}" install -q --no-build-isolation --no-cache-dir \
  -c scripts/constraints.txt deepspeed
"${pip[@]}" install -q -c scripts/constraints.txt -e ".[all,dev]"
"${pip[@]}" check
echo "$want" > "$stamp"
