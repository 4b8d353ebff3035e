"""The least a live Faust worker spends on each event: an agent that only reads and decodes.

One Faust agent, built as the live worker's (its transport, fetch size, raw serializers, no
acks), reads a topic of forge.events records from the start and decodes each as the
assembler does; nothing is held, sent or committed. It times itself from its first record to
its ``count``-th (start-up and the group's join left out) and prints one JSON line: records,
seconds, CPU seconds (the whole process: Faust's consumer thread too). bench/streams.py runs
it beside the replay and the live worker.

    python bench/faust_read_floor.py BOOTSTRAP TOPIC COUNT DATADIR
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

# Keep bench/ off the import path: bench/streams.py shares its name with the package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

import faust  # noqa: E402

from schemas import codec  # noqa: E402
from schemas.records import Envelope  # noqa: E402
from schemas.topics import MAX_MESSAGE_BYTES  # noqa: E402
from streams import faust_transport  # noqa: E402


def main() -> None:
    bootstrap, topic, count, datadir = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    app = faust.App(
        f"bench-floor-{uuid.uuid4().hex[:8]}",
        broker=f"kafka://{bootstrap}",
        store="memory://",
        datadir=datadir,
        value_serializer="raw",
        key_serializer="raw",
        web_enabled=False,
        topic_replication_factor=1,
        consumer_max_fetch_size=MAX_MESSAGE_BYTES * 2,
        consumer_auto_offset_reset="earliest",
    )
    app.transport = faust_transport.Transport(app.conf.broker_consumer, app)
    events = app.topic(topic, key_type=bytes, value_type=bytes, acks=False)
    started: list[float] = []

    @app.agent(events)
    async def read(stream: Any) -> None:
        seen = 0
        async for event in stream.events():
            if not started:
                started.extend((time.perf_counter(), time.process_time()))
            codec.decode(event.value, Envelope)
            seen += 1
            if seen == count:
                wall, cpu = time.perf_counter() - started[0], time.process_time() - started[1]
                print(json.dumps({"records": seen, "seconds": wall, "cpu_s": cpu}), flush=True)
                os._exit(0)  # measured: Faust's orderly shutdown is not

    sys.argv = [sys.argv[0], "worker", "--loglevel", "warn"]
    app.main()


if __name__ == "__main__":
    main()
