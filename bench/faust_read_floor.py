"""The least a live Faust worker spends on each event: an agent that only reads and decodes.

One Faust agent, built as the live worker's (its transport, a fetched batch a Faust event, its
fetch size, raw serializers, no acks), reads a topic of forge.events records from the start
and decodes each as the assembler does; nothing is held, sent or committed. It times itself
from its first record to its ``count``-th (start-up and the group's join left out) and writes
one JSON object to ``out``: records, seconds, CPU seconds (the whole process: Faust's consumer
thread too).
bench/streams.py runs it beside the replay and the live worker.

    python bench/faust_read_floor.py BOOTSTRAP TOPIC COUNT DATADIR OUT
"""

from __future__ import annotations

import argparse
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

from infra.machine import machine_line  # noqa: E402
from schemas import codec  # noqa: E402
from schemas.records import Envelope  # noqa: E402
from schemas.topics import MAX_MESSAGE_BYTES  # noqa: E402
from streams.faust_transport import BATCHES_BUFFERED, Transport, current_records  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("bootstrap", help="the Kafka bootstrap address")
    parser.add_argument("topic", help="a topic of forge.events records")
    parser.add_argument("count", type=int, help="records to read")
    parser.add_argument("datadir", help="Faust's data directory")
    parser.add_argument("out", type=Path, help="where the result is written (JSON)")
    args = parser.parse_args()
    print(machine_line(), flush=True)
    count = args.count
    app = faust.App(
        f"bench-floor-{uuid.uuid4().hex[:8]}",
        broker=f"kafka://{args.bootstrap}",
        store="memory://",
        datadir=args.datadir,
        value_serializer="raw",
        key_serializer="raw",
        web_enabled=False,
        topic_replication_factor=1,
        consumer_max_fetch_size=MAX_MESSAGE_BYTES * 2,
        consumer_auto_offset_reset="earliest",
    )
    app.transport = Transport(app.conf.broker_consumer, app, batched_topics=(args.topic,))
    events = app.topic(args.topic, key_type=bytes, value_type=bytes, acks=False,
                       maxsize=BATCHES_BUFFERED)  # fmt: skip
    started: list[float] = []

    @app.agent(events)
    async def read(stream: Any) -> None:
        seen = 0
        async for event in stream.events():
            if not started:
                started.extend((time.perf_counter(), time.process_time()))
            for record in current_records(app, event):  # as the worker's agents take them
                codec.decode(record.value, Envelope)
                seen += 1
            if seen >= count:
                wall, cpu = time.perf_counter() - started[0], time.process_time() - started[1]
                args.out.write_text(json.dumps({"records": seen, "seconds": wall, "cpu_s": cpu}))
                os._exit(0)  # measured: Faust's orderly shutdown is not

    sys.argv = [sys.argv[0], "worker", "--loglevel", "warn"]
    app.main()


if __name__ == "__main__":
    main()
