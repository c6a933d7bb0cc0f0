"""Signed webhooks under slowloris: how many get a 2xx, and how fast.

    .venv/bin/python bench/crash/http_flood.py [--attackers 300] [--webhooks 50] [--every 0.1]

``bridges run`` serves an http source (``standard-webhooks``, default
limits; sink: files) on loopback, in its own process. For each scenario a
fresh bridge is started; then ``attackers`` connections send a request head
with forged signature headers (only the body could show the forgery) and a
1000-byte body one byte every 0.5 s, each opening again 0.1 s after it is
cut off. Once every head is in, ``webhooks`` correctly signed webhooks are
posted from 127.0.0.1, one every ``every`` s, each on its own connection;
the table counts their answers and the latency of the 2xx.

Scenarios: no attack; the attackers each from their own loopback address
(127.0.1.1 ...: only eviction keeps places free, since each address has
one connection); all of them from 127.0.0.2 (the per-address bound). All
on loopback, bounded in count and time. ``refused`` is what the bridge's
``/metrics`` says it refused (``bridges_http_refused_total``; "-" when it
has no such metric).
"""

from __future__ import annotations

import argparse
import base64
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

import httpx
import trio
from _crash import BenchError, bridges_command, child, environment_line, free_port, wait_healthy

from bridges.endpoints.http.signatures import secret_key, sign_headers

HOST: Final = "127.0.0.1"
SECRET: Final = "whsec_" + base64.b64encode(b"bench-flood-secret-0123456789abc").decode()
LENGTH: Final = 1000


def config_text(port: int, out: Path) -> str:
    return f"""
[bridge]
log_level = "warning"
http = "{HOST}:{port}"

[routes.hooks]
source = {{ type = "http", listen = "{HOST}:{port}", path = "/hooks", \
signature = "standard-webhooks", secret = "{SECRET}" }}
sink = {{ type = "file", path = "{out}", format = "jsonl", fsync = false }}
"""


def forged_head() -> bytes:
    return (
        f"POST /hooks HTTP/1.1\r\nhost: {HOST}\r\ncontent-type: application/json\r\n"
        f"webhook-id: evil\r\nwebhook-timestamp: {int(time.time())}\r\n"
        f"webhook-signature: v1,{base64.b64encode(bytes(32)).decode()}\r\n"
        f"content-length: {LENGTH}\r\n\r\n{{"
    ).encode()


async def drip(stream: trio.SocketStream) -> None:
    try:
        while True:
            await trio.sleep(0.5)
            await stream.send_all(b" ")
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass


async def attacker(port: int, local: str, opened: list[str], answers: dict[str, int]) -> None:
    """One slow body after another from ``local``; counts how each was answered."""
    while True:
        try:
            stream = await trio.open_tcp_stream(HOST, port, local_address=local)
        except OSError:
            answers["connect failed"] = answers.get("connect failed", 0) + 1
            await trio.sleep(0.1)
            continue
        async with stream, trio.open_nursery() as nursery:
            try:
                await stream.send_all(forged_head())
                opened.append(local)
                nursery.start_soon(drip, stream)
                answer = await stream.receive_some(4096)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                answer = b""
            nursery.cancel_scope.cancel()
        status = answer[9:12].decode(errors="replace") if answer else "closed"
        answers[status] = answers.get(status, 0) + 1
        await trio.sleep(0.1)


async def post_signed(
    client: httpx.AsyncClient, url: str, i: int, results: list[tuple[int, float]]
) -> None:
    body = b'{"order": %d}' % i
    headers = sign_headers(
        "standard-webhooks", [secret_key(SECRET)], f"bench-{i}", int(time.time()), body
    )
    headers["content-type"] = "application/json"
    started = time.perf_counter()
    try:
        status = (await client.post(url, content=body, headers=headers)).status_code
    except httpx.HTTPError:
        status = 0
    results.append((status, time.perf_counter() - started))


async def metrics_text(client: httpx.AsyncClient, port: int) -> str:
    for _ in range(50):  # (the route may be restarting: see restarts)
        try:
            response = await client.get(f"http://{HOST}:{port}/metrics")
            if response.status_code == 200:
                return response.text
        except httpx.HTTPError:
            pass
        await trio.sleep(0.1)
    raise BenchError("no /metrics")


def restarts(text: str) -> str:
    found = re.search(r'^bridges_route_restarts_total\{route="hooks"\} (\S+)$', text, re.MULTILINE)
    return "-" if found is None else f"{float(found[1]):,.0f}"


def refused_counts(text: str) -> str:
    found = re.findall(r'^bridges_http_refused_total\{reason="(\w+)",route="hooks"\} (\S+)$',
                       text, re.MULTILINE)  # fmt: skip
    if not found:
        return "-"
    return ", ".join(f"{reason} {float(n):,.0f}" for reason, n in found if float(n)) or "0"


async def scenario(args: argparse.Namespace, work: Path, locals_: list[str]) -> dict[str, str]:
    port = free_port()
    config = work / f"flood-{port}.toml"
    config.write_text(config_text(port, work / f"out-{port}"))
    url = f"http://{HOST}:{port}/hooks"
    results: list[tuple[int, float]] = []
    opened: list[str] = []
    answers: dict[str, int] = {}
    limits = httpx.Limits(max_keepalive_connections=0)
    with child([*bridges_command(), "run", str(config)], work, f"bridge-{port}") as process:
        await wait_healthy(f"http://{HOST}:{port}/healthz", process)
        async with httpx.AsyncClient(trust_env=False, timeout=40, limits=limits) as client:
            async with trio.open_nursery() as attack:
                for local in locals_:
                    attack.start_soon(attacker, port, local, opened, answers)
                with trio.move_on_after(30):
                    while len(opened) < len(locals_):  # noqa: ASYNC110  # (counted by the tasks)
                        await trio.sleep(0.05)
                await trio.sleep(0.5)
                async with trio.open_nursery() as senders:
                    for i in range(args.webhooks):
                        senders.start_soon(post_signed, client, url, i, results)
                        await trio.sleep(args.every)
                attack.cancel_scope.cancel()
            await trio.sleep(1.0)  # (the attackers' last connections close)
            text = await metrics_text(client, port)
        if process.poll() is not None:
            raise BenchError("the bridge exited during the attack")
    ok = sorted(seconds for status, seconds in results if 200 <= status < 300)
    busy = sum(1 for status, _ in results if status == 503)
    other = len(results) - len(ok) - busy

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value * 1000:,.0f}"

    p99 = ok[min(len(ok) - 1, int(len(ok) * 0.99))] if ok else None
    return {
        "2xx": f"{len(ok)} / {len(results)}",
        "503": str(busy),
        "other": str(other),
        "p50": ms(statistics.median(ok) if ok else None),
        "p99": ms(p99),
        "max": ms(ok[-1] if ok else None),
        "attackers": ", ".join(f"{k} {v:,}" for k, v in sorted(answers.items())) or "-",
        "refused": refused_counts(text),
        "restarts": restarts(text),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attackers", type=int, default=300)
    parser.add_argument("--webhooks", type=int, default=50)
    parser.add_argument("--every", type=float, default=0.1)
    args = parser.parse_args()
    if not 0 < args.attackers <= 1000 or not 0 < args.webhooks <= 1000:
        parser.error("--attackers and --webhooks: 1 to 1000")
    spread = [f"127.0.{1 + i // 250}.{1 + i % 250}" for i in range(args.attackers)]
    scenarios = {
        "none": [],
        f"{args.attackers} slow bodies, one per address": spread,
        f"{args.attackers} slow bodies from 127.0.0.2": ["127.0.0.2"] * args.attackers,
    }
    rows = []
    with tempfile.TemporaryDirectory(prefix="http-flood-") as tmp:
        work = Path(tmp)
        try:
            for name, locals_ in scenarios.items():
                rows.append((name, trio.run(scenario, args, work, locals_)))
        except BenchError as exc:
            print(f"error: {exc}", file=sys.stderr)
            for log in sorted(work.glob("*.log")):
                print(f"--- {log.name}\n{log.read_text(errors='replace')[-1500:]}", file=sys.stderr)
            return 1
    print(f"http source under slowloris ({environment_line()})")
    print(
        f"{args.webhooks} signed webhooks, one every {args.every} s, each on a new connection; "
        "bridge: default limits, its own process"
    )
    print()
    print("| attack | signed 2xx | 503 | other | p50 ms | p99 ms | max ms | attackers' answers "
          "| refused (/metrics) | route restarts |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---|---|---:|")
    for name, row in rows:
        print(
            f"| {name} | {row['2xx']} | {row['503']} | {row['other']} | {row['p50']} "
            f"| {row['p99']} | {row['max']} | {row['attackers']} | {row['refused']} "
            f"| {row['restarts']} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
