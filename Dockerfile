# Images by role, from one file (docker-compose.yml picks the target): `service` for the gateway,
# the streams worker and infra — forge-rl alone, no DeepSpeed, no matplotlib — and `trainer`,
# which adds DeepSpeed built against the installed torch. vLLM runs from its own image
# (docker-compose.yml, profile gpu). State lives in FORGE_HOME, a volume in docker-compose.yml.
FROM python:3.11-slim AS service
ENV PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1 FORGE_HOME=/var/lib/forge
WORKDIR /app
COPY scripts/constraints.txt scripts/constraints.txt
RUN pip install -c scripts/constraints.txt torch
COPY . .
RUN pip install -c scripts/constraints.txt .
# gateway HTTP (and its /metrics), streams web port, FORGE_METRICS_PORT in docker-compose.yml
EXPOSE 8000 6066 9100
ENTRYPOINT ["forge-rl"]

FROM service AS trainer
ENV DS_BUILD_OPS=0
RUN pip install -c scripts/constraints.txt --no-build-isolation deepspeed \
 && pip install -c scripts/constraints.txt ".[trainer]"
