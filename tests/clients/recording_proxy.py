"""A pass-through HTTP proxy in front of the gateway that keeps what each model call sent and
the call id it was answered with: the conformance suites compare the recorded prompt with an
independent rendering of exactly the messages the client sent."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host",
              "content-encoding"}  # fmt: skip


@dataclass
class Exchange:
    path: str
    body: Any
    status: int
    call_id: str | None


@dataclass
class RecordingProxy:
    url: str
    exchanges: list[Exchange] = field(default_factory=list)

    def calls(self, suffix: str) -> list[Exchange]:
        """Answered model calls to paths ending in ``suffix``."""
        return [e for e in self.exchanges if e.path.split("?")[0].endswith(suffix) and e.call_id]


@contextmanager
def recording_proxy(upstream: str) -> Iterator[RecordingProxy]:
    client = httpx.Client(base_url=upstream, timeout=600)
    proxy = RecordingProxy("")

    class Handler(BaseHTTPRequestHandler):
        def _forward(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            content = self.rfile.read(length) if length else b""
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            answer = client.request(self.command, self.path, content=content, headers=headers)
            try:
                body = json.loads(content) if content else None
            except ValueError:
                body = None
            call_id = answer.headers.get("x-forge-call-id")
            proxy.exchanges.append(Exchange(self.path, body, answer.status_code, call_id))
            self.send_response(answer.status_code)
            for key, value in answer.headers.items():
                if key.lower() not in HOP_BY_HOP:
                    self.send_header(key, value)
            self.send_header("content-length", str(len(answer.content)))
            self.end_headers()
            self.wfile.write(answer.content)

        do_GET = do_POST = _forward

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    proxy.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        server.shutdown()
        thread.join(10)
        client.close()
