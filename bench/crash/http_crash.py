"""Crash test for the http endpoints: ``bridges run`` killed with SIGKILL, both directions.

    .venv/bin/python bench/crash/http_crash.py [--count 2000] [--kills 5]
        [--brokers embedded,rabbitmq] [--seed N] [--json]

**Inbound** (http -> stomp): a sender that behaves like GitHub or Stripe posts
``count`` webhooks (``webhook-id: wh-NNNNNN``), 32 at a time on keep-alive
connections, and retries each one (connection refused, reset, 503) until it
gets a 2xx. Meanwhile ``bridges run`` (route: http source -> stomp sink,
receipt per batch) is killed with SIGKILL at ``kills`` random moments (once a
random share of the webhooks got their 2xx, plus 0-50 ms) and started again.
Then the queue is drained: every webhook that got a 2xx must be there (0
lost); duplicates (a webhook stored, then the bridge killed before its 2xx
went out, then sent again) are counted by id; the embedded broker drops
them (its duplicate window on ``bridge-id``, which the stomp sink sets to the
``webhook-id``), so there the bound is 0, and RabbitMQ's is
``kills x in_flight``.

**Outbound** (stomp -> http): ``count`` messages (``bridge-id: out-NNNNNN``)
are put in a queue; ``bridges run`` (stomp source -> http sink) posts them to a
receiver in this process (the http family's server, answering 204), and is killed ``kills``
times the same way. The receiver must end with every message; duplicates are
identified by ``webhook-id`` and bounded by ``kills x in_flight``. The
receiver also honours ``Idempotency-Key`` (it takes effect once per key, as
docs/explanation/exactly-once.md's contract says): ``effects`` counts what took effect, and
must be one per message, 0 duplicates (a request without the key, or a key
that is not its message's id, would show here).

The broker runs in its own process and survives every kill: ``embedded`` is
``trio-stomp broker --listen 127.0.0.1:0``; RabbitMQ is the one of
``scripts/brokers up``. ``--json``: one JSON object per run (the test suite
runs a small version).
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Any, Final

import httpx
import trio
from _crash import (
    EMBEDDED,
    TARGETS,
    BenchError,
    Target,
    bridges_command,
    check_target,
    embedded_broker,
    free_port,
)

import trio_stomp
from bridges.endpoints.http import ListenAddress, open_listener

IN_FLIGHT: Final = 200
SENDERS: Final = 32
STEP_LIMIT: Final = 60.0


def stomp_settings(target: Target) -> str:
    return (
        f'url = "stomp://127.0.0.1:{target.port}", login = "{target.login}", '
        f'passcode = "{target.passcode}"'
    )


def inbound_config(target: Target, port: int, queue: str) -> str:
    return f"""
[bridge]
shutdown_timeout = 20
log_level = "warning"

[routes.in]
in_flight = {IN_FLIGHT}
batch = {{ count = 100, time = 0.005 }}
retry = {{ attempts = 3, initial = 0.05, max = 1.0 }}
source = {{ type = "http", listen = "127.0.0.1:{port}", path = "/hooks", retry_after = 1 }}
sink = {{ type = "stomp", {stomp_settings(target)}, destination = "{queue}", persistent = true }}
"""


def outbound_config(target: Target, url: str, queue: str) -> str:
    return f"""
[bridge]
shutdown_timeout = 20
log_level = "warning"

[routes.out]
in_flight = {IN_FLIGHT}
batch = {{ count = 50, time = 0.005 }}
retry = {{ attempts = 1000, initial = 0.05, max = 0.5 }}
source = {{ type = "stomp", {stomp_settings(target)}, destination = "{queue}", \
prefetch = {IN_FLIGHT} }}
sink = {{ type = "http", url = "{url}", concurrency = 8, timeout = 10.0 }}
"""


class Bridge:
    """``bridges run`` as a child process, killed and started again."""

    def __init__(self, work: Path, config: str) -> None:
        self.path = work / "bridge.toml"
        self.path.write_text(config)
        self.log_path = work / "bridge.log"
        self.log = self.log_path.open("ab")
        self.work = work
        self.process: trio.Process | None = None
        self._started_at = 0
        #: how long :func:`wait_for` waits for progress (longer while a server restarts)
        self.step_limit = STEP_LIMIT

    async def start(self) -> None:
        command = [*bridges_command(), "run", str(self.path)]
        self.log.flush()
        self._started_at = self.log_path.stat().st_size
        self.process = await trio.lowlevel.open_process(
            command, cwd=self.work, stdout=self.log, stderr=self.log
        )

    def running(self) -> bool:
        """The last start said ``bridges: running`` (it handles signals from then on)."""
        with self.log_path.open("rb") as text:
            text.seek(self._started_at)
            return b"bridges: running " in text.read()

    async def kill(self) -> None:
        assert self.process is not None
        if self.process.returncode is not None:
            raise BenchError(f"bridges exited by itself ({self.process.returncode}); see the log")
        self.process.kill()  # SIGKILL
        await self.process.wait()

    async def stop(self) -> int:
        """SIGTERM, and the exit status (a clean exit is 0)."""
        assert self.process is not None
        # A SIGTERM before the bridge handles signals would just kill it: when
        # every message had arrived before the last start, it comes that early.
        await wait_for(self.running, self, "bridges: running")
        self.process.send_signal(signal.SIGTERM)
        with trio.move_on_after(30):
            return await self.process.wait()
        self.process.kill()
        await self.process.wait()
        return -9

    def tail(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")[-2000:]


async def wait_for(condition: Callable[[], bool], bridge: Bridge, what: str) -> None:
    deadline = trio.current_time() + bridge.step_limit
    while not condition():
        process = bridge.process
        if process is not None and process.returncode is not None:
            raise BenchError(f"bridges exited ({process.returncode}) before {what}")
        if trio.current_time() > deadline:
            raise BenchError(f"no progress to {what} in {bridge.step_limit:g} s")
        await trio.sleep(0.005)


def reached(progress: Callable[[], int], goal: int) -> bool:
    return progress() >= goal


async def kill_at_random_moments(
    bridge: Bridge, kills: int, rng: random.Random, progress: Callable[[], int], count: int
) -> tuple[list[float], list[int]]:
    """Start and SIGKILL the bridge ``kills`` times, each once ``progress()`` passed a random
    share of ``count`` (rising), plus 0-50 ms; then start it for good."""
    moments, at_kill = [], []
    for share in sorted(rng.uniform(0.05, 0.95) for _ in range(kills)):
        started = trio.current_time()
        await bridge.start()
        # (at least a little further than before: each kill lands mid-flight)
        goal = min(count, max(int(share * count), progress() + 20))
        await wait_for(partial(reached, progress, goal), bridge, f"{goal} of {count}")
        await trio.sleep(rng.uniform(0.0, 0.05))
        await bridge.kill()
        moments.append(round(trio.current_time() - started, 2))
        at_kill.append(progress())
    await bridge.start()
    return moments, at_kill


async def drain(
    target: Target, queue: str, idle: float = 1.5, route: str = ""
) -> collections.Counter[str]:
    """Every message in ``queue`` (acked), counted by ``bridge-id`` (less ``ROUTE/``: the
    http source's id is the route's name and the ``webhook-id``)."""
    copies: collections.Counter[str] = collections.Counter()
    async with trio_stomp.connect(target.url) as client:
        window = {"prefetch-count": "1000", "activemq.prefetchSize": "1000"}
        async with client.subscribe(queue, ack="client-individual", headers=window) as sub:
            while True:
                with trio.move_on_after(idle) as waited:
                    message = await sub.__anext__()
                if waited.cancelled_caught:
                    return copies
                copies[message.headers.get("bridge-id", "?").removeprefix(route)] += 1
                await message.ack()


async def post_until_stored(
    bridge: Bridge, url: str, count: int, kills: int, rng: random.Random
) -> tuple[set[str], collections.Counter[str], list[float], list[int]]:
    """``count`` webhooks (ids ``wh-NNNNNN``) posted by SENDERS senders, each again
    until it gets a 2xx, while the bridge is SIGKILLed ``kills`` times and started
    again. Returns the ids answered 2xx, the answers by status or error, and the
    kill moments and progress at each kill (:func:`kill_at_random_moments`)."""
    todo = [f"wh-{i:06d}" for i in range(count)][::-1]
    stored: set[str] = set()
    answers: collections.Counter[str] = collections.Counter()

    async def sender(client: httpx.AsyncClient) -> None:
        while todo:
            msg_id = todo.pop()
            body = json.dumps({"id": msg_id, "pad": "x" * 200}).encode()
            headers = {"webhook-id": msg_id, "content-type": "application/json"}
            while True:
                try:
                    response = await client.post(url, content=body, headers=headers)
                    answers[str(response.status_code)] += 1
                    if 200 <= response.status_code < 300:
                        stored.add(msg_id)
                        break
                except httpx.TransportError as exc:
                    answers[type(exc).__name__] += 1
                await trio.sleep(0.02)  # a sender's retry delay, short for the test

    limits = httpx.Limits(max_connections=SENDERS, max_keepalive_connections=SENDERS)
    async with (
        httpx.AsyncClient(limits=limits, timeout=30, trust_env=False) as client,
        trio.open_nursery() as nursery,
    ):
        for _ in range(SENDERS):
            nursery.start_soon(sender, client)
        moments, at_kill = await kill_at_random_moments(
            bridge, kills, rng, lambda: len(stored), count
        )
        await wait_for(lambda: len(stored) == count, bridge, f"all {count} stored")
    return stored, answers, moments, at_kill


async def inbound(target: Target, count: int, kills: int, rng: random.Random) -> dict[str, Any]:
    """Webhooks posted until 2xx while the bridge is killed; then the queue is checked."""
    with tempfile.TemporaryDirectory(prefix="http-crash-in-") as tmp:
        port = free_port()
        queue = f"/queue/http-crash-{uuid.uuid4().hex[:10]}"
        bridge = Bridge(Path(tmp), inbound_config(target, port, queue))
        url = f"http://127.0.0.1:{port}/hooks"
        started = time.monotonic()
        stored, answers, moments, at_kill = await post_until_stored(bridge, url, count, kills, rng)
        status = await bridge.stop()
        copies = await drain(target, queue, route="in/")
        total = sum(copies.values())
        return {
            "direction": "http -> stomp",
            "broker": target.label,
            "messages": count,
            "kills": kills,
            "killed_after_s": moments,
            "done_at_kills": at_kill,
            "acknowledged": len(stored),
            "lost": len(stored - set(copies)),
            "unexpected": len(set(copies) - {f"wh-{i:06d}" for i in range(count)}),
            "duplicates": total - len(copies),
            "max_copies": max(copies.values(), default=0),
            # (the embedded broker drops a repeated bridge-id: its duplicate window)
            "bound": 0 if target.name == EMBEDDED else kills * IN_FLIGHT,
            "answers": dict(answers),
            "exit_status": status,
            "seconds": round(time.monotonic() - started, 1),
            "log_tail": bridge.tail() if status != 0 else "",
        }


async def outbound(target: Target, count: int, kills: int, rng: random.Random) -> dict[str, Any]:
    """Messages from a queue to an HTTP receiver while the bridge is killed."""
    with tempfile.TemporaryDirectory(prefix="http-crash-out-") as tmp:
        queue = f"/queue/http-crash-{uuid.uuid4().hex[:10]}"
        ids = [f"out-{i:06d}" for i in range(count)]
        async with trio_stomp.connect(target.url) as client:
            for msg_id in ids:
                await client.send(
                    queue, msg_id.encode(), headers={"bridge-id": msg_id, "persistent": "true"}
                )
            await client.send(queue, b"", headers={"bridge-id": "end"}, receipt=True)
        ids.append("end")
        received: collections.Counter[str] = collections.Counter()
        effects: dict[str, str] = {}  # Idempotency-Key -> webhook-id of its first request

        async def app(scope: Any, receive: Any, send: Any) -> None:
            while True:  # a request cut off by a kill is not received
                event = await receive()
                if event["type"] == "http.disconnect":
                    return
                if not event.get("more_body"):
                    break
            found = dict(scope["headers"])
            msg_id = found.get(b"webhook-id", b"").decode()
            received[msg_id] += 1
            key = found.get(b"idempotency-key", b"").decode()
            effects.setdefault(key or f"no key {len(effects)}", msg_id)
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})

        started = time.monotonic()
        bridge: Bridge | None = None
        try:
            async with open_listener(ListenAddress("127.0.0.1", 0)) as server:
                with server.mount("/in", app):
                    bridge = Bridge(Path(tmp), outbound_config(target, server.url + "/in", queue))
                    moments, at_kill = await kill_at_random_moments(
                        bridge, kills, rng, lambda: len(received), len(ids)
                    )
                    await wait_for(lambda: len(received) == len(ids), bridge, "all received")
                    status = await bridge.stop()
        except* BenchError as group:  # (raised inside the server's nursery)
            tail = bridge.tail()[-800:] if bridge is not None else ""
            raise BenchError(f"{group.exceptions[0]}; the bridge's log ends: {tail}") from None
        total = sum(received.values())
        return {
            "direction": "stomp -> http",
            "broker": target.label,
            "messages": len(ids),
            "kills": kills,
            "killed_after_s": moments,
            "done_at_kills": at_kill,
            "acknowledged": len(received),
            "lost": len(set(ids) - set(received)),
            "unexpected": len(set(received) - set(ids)),
            "duplicates": total - len(received),
            "max_copies": max(received.values(), default=0),
            "bound": kills * IN_FLIGHT,
            "effects": len(effects),
            "effect_duplicates": len(effects) - len(set(effects.values())),
            "keys_not_the_id": sum(key != f'"{i}"' for key, i in effects.items()),
            "answers": {},
            "exit_status": status,
            "seconds": round(time.monotonic() - started, 1),
            "log_tail": bridge.tail() if status != 0 else "",
        }


def ok(result: dict[str, Any]) -> bool:
    return bool(
        result["lost"] == 0
        and result["unexpected"] == 0
        and result["duplicates"] <= result["bound"]
        and result.get("effect_duplicates", 0) == 0
        and result.get("keys_not_the_id", 0) == 0
        and result["exit_status"] == 0
    )


Run = Callable[[Target, int, int, random.Random], Awaitable[dict[str, Any]]]


def run_all(names: list[str], count: int, kills: int, rng: random.Random) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    for name in names:
        with ExitStack() as stack:
            try:
                if name == EMBEDDED:
                    target = stack.enter_context(embedded_broker())
                else:
                    target = TARGETS[name]
                    reason = check_target(target)
                    if reason is not None:
                        raise BenchError(reason)
            except BenchError as exc:
                results.append({"broker": name, "error": str(exc)})
                continue
            run: Run
            for run in (inbound, outbound):
                try:
                    results.append(trio.run(run, target, count, kills, rng))
                except BenchError as exc:
                    results.append({"broker": name, "direction": run.__name__, "error": str(exc)})
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--brokers", default="embedded")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--json", action="store_true", help="one JSON object per run")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    names = [n.strip() for n in args.brokers.split(",") if n.strip()]
    results = run_all(names, args.count, args.kills, random.Random(seed))
    passed = all("error" not in r and ok(r) for r in results)
    if args.json:
        for result in results:
            print(json.dumps(result))
        return 0 if passed else 1
    print(f"http crash test, seed {seed}: bridges run killed with SIGKILL at random moments")
    print(
        "| direction     | broker   | messages | kills | 2xx / received | lost | duplicates "
        "| max copies | dup bound | exit | time, s | verdict |"
    )
    print(
        "|---------------|----------|----------|-------|----------------|------|------------"
        "|------------|-----------|------|---------|---------|"
    )
    for r in results:
        if "error" in r:
            print(f"| {r.get('direction', '?'):<13} | {r['broker']:<8} | error: {r['error']}")
            continue
        print(
            f"| {r['direction']:<13} | {r['broker']:<8} | {r['messages']:>8,} | {r['kills']:>5} "
            f"| {r['acknowledged']:>14,} | {r['lost']:>4} | {r['duplicates']:>10} "
            f"| {r['max_copies']:>10} | {r['bound']:>9,} | {r['exit_status']:>4} "
            f"| {r['seconds']:>7} | {'ok' if ok(r) else 'FAIL':<7} |"
        )
        print(
            f"  killed (s after its start): {r['killed_after_s']}; done then: {r['done_at_kills']}"
        )
        if r["answers"]:
            print(f"  answers the sender got: {r['answers']}")
        if "effects" in r:
            print(
                f"  an Idempotency-Key receiver: {r['effects']:,} effects, "
                f"{r['effect_duplicates']} duplicated, {r['keys_not_the_id']} keys not the id"
            )
        if r["log_tail"]:
            print(r["log_tail"])
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
