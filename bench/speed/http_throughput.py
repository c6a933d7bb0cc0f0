"""Throughput of the http endpoints, each against its peer measured in the same run.

    .venv/bin/python bench/speed/http_throughput.py [--count 5000] [--size 1024]
        [--senders 32] [--concurrency 8] [--broker embedded|rabbitmq] [--rounds 3]

**Inbound** (webhooks/s into a STOMP queue): ``senders`` concurrent
keep-alive senders (httpx, in this process) post ``count`` webhooks of
``size`` bytes to ``bridges run`` (http source -> stomp sink, receipt per
batch; a 2xx only once the broker holds the message), and then, with the
same senders, to a bare hypercorn endpoint that answers 204 and stores
nothing (hypercorn's Trio worker, its own process, like the bridge). The
ratio is the share of HTTP's own cost left after storing durably; the
engine's batching lets concurrent requests share one receipt. Every webhook
is then counted in the queue.

**Outbound** (messages/s STOMP -> HTTP): ``count`` messages are put in a
queue; ``bridges run`` (stomp source -> http sink, ``concurrency`` requests
in flight) posts them to a receiver in this process (hypercorn, answering
204); then a plain httpx loop (its own process, the same ``concurrency``,
one keep-alive pool) posts the same bodies to the same receiver. Rates are
timed at the receiver, first request to last, so start-up is not counted.

Each pair runs ``rounds`` times, alternating; the table shows the best of
each (the machine is shared). The broker runs in its own process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Any, Final

import httpx
import trio
from _common import (
    EMBEDDED,
    START_LIMIT,
    TARGETS,
    BenchError,
    Target,
    bridges_command,
    check_target,
    child,
    drain_rest,
    embedded_broker,
    environment_line,
    free_port,
    wait_healthy,
)

import trio_stomp
from bridges.endpoints.http import ListenAddress, open_listener

HOST: Final = "127.0.0.1"

_BARE_SERVER: Final = """
import sys, trio
from hypercorn.config import Config
from hypercorn.trio import serve

async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            if message["type"] == "lifespan.shutdown":
                return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})

config = Config()
config.bind = [sys.argv[1]]
config.accesslog = None
trio.run(serve, app, config)
"""

_HTTPX_LOOP: Final = """
import sys, time, httpx, trio
url, count, concurrency, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
body = b"x" * size

async def main():
    todo = list(range(count))
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=30, trust_env=False) as client:
        async def worker():
            while todo:
                i = todo.pop()
                headers = {"webhook-id": f"plain-{i}", "content-type": "application/octet-stream"}
                response = await client.post(url, content=body, headers=headers)
                assert 200 <= response.status_code < 300, response.status_code
        async with trio.open_nursery() as nursery:
            for _ in range(concurrency):
                nursery.start_soon(worker)

trio.run(main)
"""


async def post_all(url: str, count: int, senders: int, size: int, tag: str) -> float:
    """Post ``count`` bodies with ``senders`` concurrent keep-alive senders; seconds taken."""
    todo = list(range(count))
    body = b'{"pad": "' + b"x" * max(size - 11, 0) + b'"}'
    limits = httpx.Limits(max_connections=senders, max_keepalive_connections=senders)
    async with httpx.AsyncClient(limits=limits, timeout=60, trust_env=False) as client:

        async def sender() -> None:
            while todo:
                i = todo.pop()
                headers = {"webhook-id": f"{tag}-{i}", "content-type": "application/json"}
                response = await client.post(url, content=body, headers=headers)
                if not 200 <= response.status_code < 300:
                    raise BenchError(f"{url} answered {response.status_code}")

        # One request per connection first, so that connecting is not timed.
        async with trio.open_nursery() as nursery:
            for _ in range(senders):
                nursery.start_soon(partial(client.post, url, content=b"{}"))
        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(senders):
                nursery.start_soon(sender)
        return time.perf_counter() - started


def inbound_config(target: Target, port: int, queue: str) -> str:
    return f"""
[bridge]
log_level = "warning"

[routes.in]
in_flight = 1000
batch = {{ count = 100, time = 0.002 }}
source = {{ type = "http", listen = "{HOST}:{port}", path = "/hooks" }}
sink = {{ type = "stomp", url = "stomp://{HOST}:{target.port}", login = "{target.login}", \
passcode = "{target.passcode}", destination = "{queue}" }}
"""


def outbound_config(target: Target, url: str, queue: str, concurrency: int) -> str:
    return f"""
[bridge]
log_level = "warning"

[routes.out]
in_flight = 1000
batch = {{ count = 100, time = 0.002 }}
source = {{ type = "stomp", url = "stomp://{HOST}:{target.port}", login = "{target.login}", \
passcode = "{target.passcode}", destination = "{queue}" }}
sink = {{ type = "http", url = "{url}", concurrency = {concurrency} }}
"""


async def count_queue(target: Target, queue: str, expect: int) -> int:
    seen = 0
    async with trio_stomp.connect(target.url) as client:
        async with client.subscribe(queue, ack="auto") as sub:
            while seen < expect:
                with trio.move_on_after(5) as waited:
                    await sub.__anext__()
                if waited.cancelled_caught:
                    break
                seen += 1
    return seen


async def inbound_bridge(target: Target, args: argparse.Namespace, work: Path) -> float:
    port = free_port()
    queue = f"/queue/http-bench-{uuid.uuid4().hex[:10]}"
    config = work / "in.toml"
    config.write_text(inbound_config(target, port, queue))
    with child([*bridges_command(), "run", str(config)], work, "bridge-in") as process:
        await wait_healthy(f"http://{HOST}:{port}/healthz", process)
        seconds = await post_all(
            f"http://{HOST}:{port}/hooks", args.count, args.senders, args.size, "in"
        )
    stored = await count_queue(target, queue, args.count + args.senders)
    if stored < args.count + args.senders:
        raise BenchError(f"only {stored} of {args.count + args.senders} webhooks in the queue")
    count: int = args.count
    return count / seconds


async def inbound_bare(args: argparse.Namespace, work: Path) -> float:
    port = free_port()
    command = [sys.executable, "-c", _BARE_SERVER, f"{HOST}:{port}"]
    with child(command, work, "bare") as process:
        await wait_healthy(f"http://{HOST}:{port}/", process)
        seconds = await post_all(f"http://{HOST}:{port}/", args.count, args.senders, args.size, "b")
    count: int = args.count
    return count / seconds


class Receiver:
    """Counts requests and times the first and the last."""

    def __init__(self) -> None:
        self.count = 0
        self.first = 0.0
        self.last = 0.0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        while True:
            event = await receive()
            if event["type"] == "http.disconnect":
                return
            if not event.get("more_body"):
                break
        now = time.perf_counter()
        if self.count == 0:
            self.first = now
        self.count += 1
        self.last = now
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    def rate(self) -> float:
        return (self.count - 1) / (self.last - self.first) if self.last > self.first else 0.0


async def wait_count(receiver: Receiver, count: int, process: subprocess.Popen[bytes]) -> None:
    deadline = trio.current_time() + START_LIMIT + count / 100
    while receiver.count < count:
        if process.poll() is not None and receiver.count < count:
            raise BenchError(f"the sender exited ({process.returncode}) at {receiver.count}")
        if trio.current_time() > deadline:
            raise BenchError(f"only {receiver.count} of {count} arrived")
        await trio.sleep(0.01)


async def outbound(target: Target, args: argparse.Namespace, work: Path, bridge: bool) -> float:
    receiver = Receiver()
    async with open_listener(ListenAddress(HOST, 0)) as server:
        with server.mount("/in", receiver):
            url = server.url + "/in"
            if bridge:
                queue = f"/queue/http-bench-{uuid.uuid4().hex[:10]}"
                body = b"x" * args.size
                async with trio_stomp.connect(target.url) as client:
                    for i in range(args.count):
                        await client.send(queue, body, headers={"bridge-id": f"o-{i}"})
                    await client.send(queue, body, receipt=True)
                config = work / "out.toml"
                config.write_text(outbound_config(target, url, queue, args.concurrency))
                command = [*bridges_command(), "run", str(config)]
                count = args.count + 1
            else:
                command = [
                    sys.executable,
                    "-c",
                    _HTTPX_LOOP,
                    url,
                    str(args.count),
                    str(args.concurrency),
                    str(args.size),
                ]
                count = args.count
            with child(command, work, "bridge-out" if bridge else "httpx-loop") as process:
                await wait_count(receiver, count, process)
    return receiver.rate()


def fmt(rate: float) -> str:
    return f"{rate:,.0f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--senders", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--broker", default=EMBEDDED, choices=[EMBEDDED, *TARGETS])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    best: dict[str, float] = {}
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="http-bench-") as tmp:
        work = Path(tmp)
        if args.broker == EMBEDDED:
            target = stack.enter_context(embedded_broker())
        else:
            target = TARGETS[args.broker]
            reason = check_target(target)
            if reason is not None:
                print(f"{args.broker}: {reason}", file=sys.stderr)
                return 1
        try:
            for _ in range(args.rounds):
                cells: dict[str, Callable[[], float]] = {
                    "in_bare": partial(trio.run, inbound_bare, args, work),
                    "in_bridge": partial(trio.run, inbound_bridge, target, args, work),
                    "out_httpx": partial(trio.run, outbound, target, args, work, False),
                    "out_bridge": partial(trio.run, outbound, target, args, work, True),
                }
                for name, run in cells.items():
                    best[name] = max(best.get(name, 0.0), run())
        except BenchError as exc:
            print(f"error: {exc}", file=sys.stderr)
            for log in sorted(work.glob("*.log")):
                print(f"--- {log.name}\n{log.read_text(errors='replace')[-1500:]}", file=sys.stderr)
            return 1
        finally:
            if args.broker != EMBEDDED:
                drain_rest(target, "/queue/http-bench-none", idle=0.1)
    if args.json:
        print(json.dumps(best))
        return 0
    print(f"http endpoints throughput ({environment_line()}; cpus: {os.cpu_count()})")
    print(
        f"{args.count:,} messages of {args.size} B, best of {args.rounds} rounds; "
        f"broker: {target.label} (own process)"
    )
    print("| direction | bridges | peer (same run) | peer rate | ratio |")
    print("|---|---:|---|---:|---:|")
    print(
        f"| inbound: webhooks/s into a STOMP queue, {args.senders} senders "
        f"| {fmt(best['in_bridge'])} | bare hypercorn 204 endpoint | {fmt(best['in_bare'])} "
        f"| {best['in_bridge'] / best['in_bare']:.0%} |"
    )
    print(
        f"| outbound: messages/s STOMP -> HTTP, concurrency {args.concurrency} "
        f"| {fmt(best['out_bridge'])} | plain httpx loop | {fmt(best['out_httpx'])} "
        f"| {best['out_bridge'] / best['out_httpx']:.0%} |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
