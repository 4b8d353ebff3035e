# One image for gateway, streams worker and trainer (CPU); vLLM runs from its own image
# (docker-compose.yml, profile gpu). State lives in FORGE_HOME, a volume in docker-compose.yml.
FROM python:3.11-slim
ENV PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1 DS_BUILD_OPS=0 FORGE_HOME=/var/lib/forge
WORKDIR /app
COPY scripts/constraints.txt scripts/constraints.txt
RUN pip install -c scripts/constraints.txt torch \
 && pip install -c scripts/constraints.txt --no-build-isolation deepspeed
COPY . .
RUN pip install -c scripts/constraints.txt .
# gateway HTTP (and its /metrics), streams web port, FORGE_METRICS_PORT in docker-compose.yml
EXPOSE 8000 6066 9100
ENTRYPOINT ["forge-rl"]
