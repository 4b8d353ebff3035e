"""Gateway overhead: the gateway vs the same fast fake engine served directly, side by side.

Both servers run as separate processes with the same fake engine (fixed 16-token answers,
no model), so the difference is the gateway itself: auth and rollout lookup, chat-template
rendering, delta encoding, Avro encoding and the durable produce of every call's events to
a real Kafka broker (acks=all, idempotent) before replying. The gateway is served by its own
entry point (`gateway.server.serve`), start-up settings included. Load comes from wrk (64
connections = 64 concurrent agents, one rollout each).

    python bench/gateway.py [--rounds 3] [--duration 5] [--connections 64] [--warmup 5]
                            [--prompt-repeat 1]
    (uses FORGE_KAFKA_BOOTSTRAP, else starts a throwaway local broker)

Each server first gets an untimed wrk run of --warmup seconds: a freshly started broker's JVM
compiles as it goes, which a long run does not see. Then the two are measured in turns,
--rounds times --duration seconds each: this machine's speed drifts by a fifth or more over a
minute, and one long run of each would put that drift into the ratio. Totals are over all
rounds (latencies: the median of the rounds'), and each round's ratio is shown.

The prompt is two short messages (54 tokens); --prompt-repeat K sends the user's question K
times in its message, as an agent's growing conversation does: tokenizing grows with it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil
from rich.console import Console
from rich.table import Table

from infra.machine import machine_line

# This script shares its name with the `gateway` package: keep bench/ off the import path.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]

ADMIN = "bench-admin-key-0123456789"
MESSAGES = [
    {"role": "system", "content": "You are a helpful agent. Use tools when they help."},
    {"role": "user", "content": "What is 12 plus 30? Answer with the number only."},
]


class FakeEngine:
    """Answers instantly with 16 fixed tokens: what remains to measure is the server."""

    def __init__(self, tokenizer_dir: Path) -> None:
        from gateway.engines.chat_tokenizer import ChatTokenizer

        self.tokenizer = ChatTokenizer(tokenizer_dir)
        self.policy_version = 0
        self.tokens = np.arange(16, dtype=np.int32) + 100
        self.logprobs = np.full(16, -0.5, dtype=np.float32)

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def load_policy(self, version: int, uri: str) -> None: ...

    async def generate(self, prompt_ids, params):
        from gateway.engines.engine import Generation

        text = "The answer is 42."
        return [Generation(self.tokens, self.logprobs, text, "stop", 0)] * params.n


def serve(mode: str, port: int, bootstrap: str, topics: list[str], tokenizer_dir: Path) -> None:
    """The gateway through its own entry point (its start-up settings included); the direct
    server as a bare FastAPI route on the same uvicorn set-up."""
    engine = FakeEngine(tokenizer_dir)
    if mode == "gateway":
        from gateway.config import GatewaySettings
        from gateway.server import serve as serve_gateway

        settings = GatewaySettings(
            admin_key=ADMIN, port=port, events_topic=topics[0], queue_topic=topics[1],
            policy_topic=topics[2], follow_policy=False,
        )  # fmt: skip
        serve_gateway(settings, bootstrap, tokenizer_dir, settings.domains(), engine)
        return
    import uvicorn
    from fastapi import FastAPI

    from gateway.engines.engine import SamplingParams

    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def direct(body: dict[str, Any]) -> dict[str, Any]:
        ids = engine.tokenizer.encode_chat(body["messages"])
        (g,) = await engine.generate(ids, SamplingParams(max_tokens=16))
        message = {"role": "assistant", "content": g.text}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        return {"object": "chat.completion", "model": body["model"], "choices": [choice]}

    uvicorn.run(app, host="127.0.0.1", port=port, loop="uvloop", http="httptools",
                log_level="warning", access_log=False)  # fmt: skip


LUA = """
paths = {PATHS}
counter = 0
request = function()
  counter = counter + 1
  return wrk.format("POST", paths[(counter %% #paths) + 1])
end
"""


def run_wrk(
    url: str, paths: list[str], headers: dict[str, str], body: str, args
) -> dict[str, float]:
    script = LUA.replace("%%", "%").replace(
        "{PATHS}", "{" + ",".join(json.dumps(p) for p in paths) + "}"
    )
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(script)
        f.write(f"wrk.body = {json.dumps(body)}\n")
        for k, v in headers.items():
            f.write(f'wrk.headers["{k}"] = "{v}"\n')
    threads = str(min(2, args.connections))
    cmd = ["wrk", "-t", threads, "-c", str(args.connections), "-d", f"{args.duration}s",
           "--latency", "--timeout", "10s", "-s", f.name, url]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    os.unlink(f.name)
    return {
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
        "p50": _ms(re.search(r"50%\s+([\d.]+\w+)", out).group(1)),
        "p99": _ms(re.search(r"99%\s+([\d.]+\w+)", out).group(1)),
        "errors": float(sum(int(n) for n in re.findall(r"Non-2xx or 3xx responses: (\d+)", out))),
    }


def _ms(value: str) -> float:
    number, unit = re.match(r"([\d.]+)(\w+)", value).groups()
    return float(number) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]


def start(mode: str, port: int, bootstrap: str, topics: list[str], tok: Path) -> subprocess.Popen:
    cmd = [sys.executable, __file__, "--serve", mode, "--port", str(port), "--bootstrap", bootstrap,
           "--tokenizer-dir", str(tok), "--topics", *topics]  # fmt: skip
    proc = subprocess.Popen(cmd, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    for _ in range(600):
        try:
            httpx.get(f"http://127.0.0.1:{port}/docs", timeout=1)
            return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"{mode} server did not start")


def cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def measured(
    url: str, paths: list[str], headers: dict[str, str], body: str, args, pids: dict[str, int]
) -> dict[str, float]:
    """A wrk run, and the CPU each process spent in it, in ms per call: where the time of a
    server on 2 shared cores goes (wrk itself is a waited-for child: RUSAGE_CHILDREN)."""
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = run_wrk(url, paths, headers, body, args)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    calls = result["rps"] * args.duration
    for name, pid in pids.items():
        result[f"cpu {name}"] = (cpu_seconds(pid) - before[name]) * 1000 / calls
    wrk_s = after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime
    result["cpu wrk"] = wrk_s * 1000 / calls
    return result


def combined(rounds: list[dict[str, float]]) -> dict[str, float]:
    """Several rounds of one server as one: calls and CPU summed, latencies' median."""
    calls = [r["rps"] for r in rounds]  # equal durations: calls are proportional to rps
    total = sum(calls)
    out = {"rps": total / len(rounds), "errors": sum(r["errors"] for r in rounds)}
    for key in ("p50", "p99"):
        out[key] = float(np.median([r[key] for r in rounds]))
    for key in rounds[0]:
        if key.startswith("cpu "):
            out[key] = sum(r[key] * c for r, c in zip(rounds, calls, strict=True)) / total
    return out


def watch_peak_rss(pid: int, stop: threading.Event, peak: list[int]) -> None:
    proc = psutil.Process(pid)
    while not stop.is_set():
        peak[0] = max(peak[0], proc.memory_info().rss)
        time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=int, default=5, help="seconds per server per round")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--warmup", type=int, default=5, metavar="SECONDS",
                        help="an untimed wrk run of each server first (0: none)")  # fmt: skip
    parser.add_argument("--prompt-repeat", type=int, default=1, metavar="K",
                        help="the user's question K times in its message")  # fmt: skip
    parser.add_argument("--serve", choices=["gateway", "direct"], help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--topics", nargs="*", help=argparse.SUPPRESS)
    parser.add_argument("--tokenizer-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    print(machine_line(), flush=True)
    if args.serve:
        serve(args.serve, args.port, args.bootstrap, args.topics, Path(args.tokenizer_dir))
        return
    if shutil.which("wrk") is None:
        sys.exit("wrk is needed (apt-get install wrk)")

    from infra.config import InfraSettings
    from infra.kafka_clients import ensure_topics
    from infra.local_broker import LocalBroker, free_port
    from schemas.topics import EVENTS, POLICY, QUEUE, TopicSpec

    console = Console(width=160)
    home = Path(tempfile.mkdtemp(prefix="forge-bench-"))
    broker, broker_pid = None, None
    bootstrap = os.environ.get("FORGE_KAFKA_BOOTSTRAP")
    if bootstrap is None:
        broker = LocalBroker(home / "kafka", version="4.4.0", cache_dir=InfraSettings().cache_dir,
                             port=0, controller_port=0)  # fmt: skip
        state = broker.up()
        bootstrap, broker_pid = state.bootstrap, state.pid
    suffix = str(int(time.time()))
    specs = tuple(TopicSpec(f"bench.{s.name}.{suffix}", s.record, s.partitions, s.configs)
                  for s in (EVENTS, QUEUE, POLICY))  # fmt: skip
    ensure_topics(bootstrap, specs, 30)
    topics = [s.name for s in specs]
    procs = []
    try:
        gw_port, direct_port = free_port(), free_port()
        from gateway.engines.chat_tokenizer import ChatTokenizer
        from infra.tiny_model import build_tokenizer

        build_tokenizer().save_pretrained(home / "tokenizer")
        procs.append(start("direct", direct_port, bootstrap, topics, home / "tokenizer"))
        procs.append(start("gateway", gw_port, bootstrap, topics, home / "tokenizer"))
        admin = {"Authorization": f"Bearer {ADMIN}"}
        paths = []
        with httpx.Client(base_url=f"http://127.0.0.1:{gw_port}", headers=admin) as client:
            for i in range(args.connections):
                rid = client.post("/rollouts", json={"task_id": f"bench-{i}"}).json()["rollout_id"]
                paths.append(f"/rollouts/{rid}/v1/chat/completions")
        messages = [MESSAGES[0], {**MESSAGES[1], "content": " ".join(
            [MESSAGES[1]["content"]] * args.prompt_repeat)}]  # fmt: skip
        body = json.dumps({"model": "m", "messages": messages, "max_tokens": 16})
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {ADMIN}"}
        prompt_tokens = len(ChatTokenizer(home / "tokenizer").encode_chat(messages))
        console.print(
            f"wrk: {args.connections} connections, {args.rounds} rounds of {args.duration}s on "
            f"each server in turn, prompts of {prompt_tokens} tokens, Kafka {bootstrap}"
        )
        broker_cpu = {} if broker_pid is None else {"broker": broker_pid}
        if args.warmup:
            untimed = argparse.Namespace(connections=args.connections, duration=args.warmup)
            with console.status(f"warming up: {args.warmup}s of wrk on each server, untimed…"):
                run_wrk(f"http://127.0.0.1:{direct_port}", ["/v1/chat/completions"], headers,
                        body, untimed)  # fmt: skip
                run_wrk(f"http://127.0.0.1:{gw_port}", paths, headers, body, untimed)
        stop, peak = threading.Event(), [0]
        watcher = threading.Thread(target=watch_peak_rss, args=(procs[1].pid, stop, peak))
        watcher.start()
        rounds: dict[str, list[dict[str, float]]] = {"direct": [], "gateway": []}
        for i in range(args.rounds):
            with console.status(f"round {i + 1} of {args.rounds}: direct, then gateway…"):
                rounds["direct"].append(measured(
                    f"http://127.0.0.1:{direct_port}", ["/v1/chat/completions"], headers, body,
                    args, {"server": procs[0].pid, **broker_cpu},
                ))  # fmt: skip
                rounds["gateway"].append(measured(
                    f"http://127.0.0.1:{gw_port}", paths, headers, body, args,
                    {"server": procs[1].pid, **broker_cpu},
                ))  # fmt: skip
            ratio = rounds["gateway"][-1]["rps"] / rounds["direct"][-1]["rps"]
            console.print(f"round {i + 1}: gateway/direct {ratio:.2f}")
        stop.set()
        watcher.join()
        direct, gateway = combined(rounds["direct"]), combined(rounds["gateway"])
        cpu = ["server", "wrk", *broker_cpu]
        table = Table("server", "calls/s", "p50 ms", "p99 ms", "non-2xx",
                      *(f"CPU ms/call: {name}" for name in cpu))  # fmt: skip
        for name, r in (("direct fake engine", direct), ("gateway (durable produce)", gateway)):
            table.add_row(
                name, f"{r['rps']:.0f}", f"{r['p50']:.2f}", f"{r['p99']:.2f}", f"{r['errors']:.0f}",
                *(f"{r[f'cpu {n}']:.3f}" for n in cpu),
            )  # fmt: skip
        console.print(table)
        console.print(
            f"added latency: p50 {gateway['p50'] - direct['p50']:.2f} ms, "
            f"p99 {gateway['p99'] - direct['p99']:.2f} ms; gateway/direct throughput "
            f"{gateway['rps'] / direct['rps']:.2f}; gateway peak RSS {peak[0] / 2**20:.0f} MiB"
        )
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(10)
        if broker is not None:
            broker.down(purge=True)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
