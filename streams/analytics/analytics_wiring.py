"""The live worker's analytics, wired into its Faust app: rows buffered
(``streams.analytics.sinks``) and inserted as Faust commits and every ``sink_flush_s``; the
trainer's steps read from forge.metrics; read-only SQL served for other processes, since this
worker owns the embedded store (``streams.analytics.sql_endpoint``)."""

from __future__ import annotations

import asyncio
from typing import Any

import faust

from infra.analytics import analytics_client, ensure_tables
from infra.config import InfraSettings
from schemas.records import TrainStep
from streams.analytics.sinks import SinkBuffer
from streams.analytics.sql_endpoint import open_endpoint
from streams.config import StreamsSettings
from streams.stage.dead_letters import DeadLetters


class FlushSinkBeforeCommit(faust.Sensor):  # type: ignore[misc]
    """Inserts the buffered rows as one of Faust's own commits (forge.metrics) begins: a
    committed step's row is stored unless the store is down (then it waits in the buffer)."""

    def __init__(self, buffer: SinkBuffer) -> None:
        super().__init__()
        self.buffer = buffer

    def on_commit_initiated(self, consumer: Any) -> None:
        self.buffer.flush()


def wire_analytics(
    app: faust.App, settings: StreamsSettings, infra: InfraSettings, letters: DeadLetters
) -> SinkBuffer | None:
    """The buffer the worker's rows go through, its agent, task and SQL page added to ``app``;
    None when the worker writes no analytics (``settings.sink`` off)."""
    if not settings.sink:
        return None
    sink = analytics_client(infra)
    ensure_tables(sink)
    buffer = SinkBuffer(sink)
    app.sensors.add(FlushSinkBeforeCommit(buffer))

    @app.agent(app.topic(settings.metrics_topic, key_type=bytes, value_type=bytes))
    async def train_steps(stream: faust.StreamT) -> None:
        """The trainer's rows reach ClickHouse only through forge.metrics."""
        async for event in stream.events():
            step = await letters.decoded(event.message, TrainStep)
            if step is not None:
                buffer.add(train_steps=[step])

    @app.task
    async def flush_sink() -> None:
        """Batches reach ClickHouse every ``sink_flush_s`` (later while the store fails:
        ``SinkBuffer`` backs off), and once more at shutdown."""
        try:
            while True:
                await asyncio.sleep(settings.sink_flush_s)
                buffer.flush()
        finally:
            buffer.flush(force=True)

    sql = open_endpoint(settings, infra, before_query=buffer.flush)

    @app.page("/query/")
    async def query(web: Any, request: Any) -> Any:
        """Read-only SQL for other processes: this worker owns the embedded store."""
        reply = await sql.answer(request.headers.get("Authorization"), request.query.get("sql", ""))
        return web.json(reply.body, status=reply.status)

    return buffer
