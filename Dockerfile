# One image for gateway, streams and trainer (CPU). GPU training/serving uses the vllm image.
FROM python:3.11-slim
ENV PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1 DS_BUILD_OPS=0 FORGE_HOME=/var/lib/forge
WORKDIR /app
COPY scripts/constraints.txt scripts/constraints.txt
RUN pip install -c scripts/constraints.txt torch \
 && pip install -c scripts/constraints.txt --no-build-isolation deepspeed
COPY . .
RUN pip install -c scripts/constraints.txt .
ENTRYPOINT ["forge-rl"]
