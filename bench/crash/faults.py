"""Fault-injection figures: lost, duplicated, reconnect time.

Runs the lossless-delivery workload of the test suite (trio_stomp.testing.lossless_run):
numbered messages sent with receipts by one reconnecting client and received
with client-individual acks by another, while connections are disrupted:

- ``cuts``: through a fault-injecting proxy to the embedded broker, every
  connection reset every ``--every`` messages (default 20,000 messages);
- ``rabbitmq-restart``: RabbitMQ itself stopped and restarted mid-stream with
  ``scripts/brokers restart rabbitmq`` (persistent messages).

Reproduce: ``.venv/bin/python bench/crash/faults.py`` (``--skip-rabbitmq`` without it).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import trio

from trio_stomp.broker import open_broker
from trio_stomp.testing import Tally, fault_proxy, lossless_run

ROOT = Path(__file__).resolve().parents[2]
RABBITMQ = "stomp://guest:guest@127.0.0.1:61613/?vhost=/"


def _row(name: str, count: int, disruptions: int, tally: Tally, elapsed: float) -> str:
    downtime = statistics.median(tally.downtimes) * 1000 if tally.downtimes else float("nan")
    worst = max(tally.downtimes) * 1000 if tally.downtimes else float("nan")
    return (
        f"| {name:<17} | {count:>8} | {disruptions:>11} | {tally.missing:>4} | "
        f"{tally.duplicates:>10} | {downtime:>17.1f} | {worst:>15.1f} | {count / elapsed:>7.0f} |"
    )


async def main(args: argparse.Namespace) -> None:
    print(
        "| scenario          | messages | disruptions | lost | duplicated |"
        " median reconnect ms | max reconnect ms | msgs/s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    async with open_broker() as broker, fault_proxy(broker.port) as proxy:

        async def cut(_: int) -> None:
            proxy.cut()

        start = time.perf_counter()
        tally = await lossless_run(
            proxy.url(), "/queue/bench-faults", args.count, disrupt=cut, every=args.every
        )
        print(_row("cuts (embedded)", args.count, proxy.cuts, tally, time.perf_counter() - start))
    if args.skip_rabbitmq:
        return
    restarts = 0

    async def restart(_: int) -> None:
        nonlocal restarts
        if restarts == 0:
            restarts += 1
            await trio.run_process([str(ROOT / "scripts" / "brokers"), "restart", "rabbitmq"])

    start = time.perf_counter()
    count = min(args.count, 5000)
    tally = await lossless_run(
        RABBITMQ,
        f"/queue/bench-faults-{time.time_ns()}",
        count,
        disrupt=restart,
        every=count // 3,
        headers={"persistent": "true"},
    )
    print(_row("rabbitmq-restart", count, restarts, tally, time.perf_counter() - start))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--every", type=int, default=500)
    parser.add_argument("--skip-rabbitmq", action="store_true")
    trio.run(main, parser.parse_args())
