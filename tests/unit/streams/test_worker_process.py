"""A worker that does not stop after SIGTERM exits anyway, naming what it was waiting for."""

from __future__ import annotations

import asyncio
import signal
import threading

import faust

from streams import worker_process
from streams.worker_process import BoundedStopWorker


def test_a_stop_that_hangs_ends_the_process_after_the_timeout(monkeypatch, caplog):
    exited = threading.Event()
    monkeypatch.setattr(worker_process.os, "_exit", lambda status: exited.set())
    loop = asyncio.new_event_loop()
    try:
        app = faust.App("test-bounded-stop", broker="kafka://127.0.0.1:1", loop=loop)
        worker = BoundedStopWorker(app, stop_timeout_s=0.2, loop=loop, quiet=True)
        hanging = loop.create_task(asyncio.Event().wait(), name="a stop that never ends")
        worker._schedule_shutdown(signal.SIGTERM)
        assert exited.wait(5), "the process was not ended"
        assert "did not stop within 0 s of SIGTERM" in caplog.text
        assert "Event.wait" in caplog.text  # the pending task, for whoever debugs it
        hanging.cancel()
    finally:
        for task in asyncio.all_tasks(loop):
            task.cancel()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()
