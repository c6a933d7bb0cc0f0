"""Stop timing: ``bridges run`` against a frozen broker, stopped by SIGTERM and by a second signal.

    .venv/bin/python bench/crash/bridge_stop.py [--runs 5] [--timeout 1.0]

A loopback server plays a broker that hangs: it answers CONNECT, then reads
every frame and answers nothing (no RECEIPT, no heart-beat, no close). Two
configs run against it, each ``--runs`` times:

- ``file -> stomp``: three files are sent and wait for their RECEIPT for
  ever (3 messages in flight);
- ``stomp -> file``: a subscription that never gets a message.

Each is stopped by one SIGTERM (the bound: ``shutdown_timeout`` + 1 s) and by
a SIGTERM followed 0.3 s later by a second one (the bound: 1 s after the
second). The table gives the time from the last signal to the process's exit
(median and worst of the runs), the exit status and whether the last line
names what was left unacknowledged. The ratio column is the worst time
against its bound, measured in the same run: it must stay below 1.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import trio
from _crash import bridges_command

HOST = "127.0.0.1"


@asynccontextmanager
async def frozen_broker() -> AsyncIterator[int]:
    """A broker that answers CONNECT and then nothing; yields its port."""

    async def serve(stream: trio.SocketStream) -> None:
        data = b""
        while b"\0" not in data:
            chunk = await stream.receive_some(65536)
            if not chunk:
                return
            data += chunk
        await stream.send_all(b"CONNECTED\nversion:1.2\nheart-beat:0,0\n\n\0")
        while await stream.receive_some(65536):
            pass
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, serve, 0, host=HOST))
        yield listeners[0].socket.getsockname()[1]
        nursery.cancel_scope.cancel()


CONFIGS = {
    "file -> stomp": (
        'source = {{ type = "file", path = "inbox", settle = 0, poll_interval = 0.05 }}\n'
        'sink = {{ type = "stomp", url = "stomp://{host}:{port}", destination = "/queue/x", '
        "heartbeat = [0, 0] }}\n"
    ),
    "stomp -> file": (
        'source = {{ type = "stomp", url = "stomp://{host}:{port}", destination = "/queue/x", '
        "heartbeat = [0, 0] }}\n"
        'sink = {{ type = "file", path = "outbox" }}\n'
    ),
}


async def one_run(
    port: int, route: str, shutdown_timeout: float, second: bool
) -> tuple[float, int, str]:
    """Start, wait until frozen, signal: (s from the last signal to the exit, status, last line)."""
    timeout = shutdown_timeout
    with tempfile.TemporaryDirectory(prefix="bridge-stop-") as tmp:
        work = Path(tmp)
        (work / "inbox").mkdir()
        for i in range(3):
            (work / "inbox" / f"f{i}").write_text(str(i))
        config = work / "bridge.toml"
        config.write_text(
            f"[bridge]\nshutdown_timeout = {timeout}\n\n[routes.r]\n"
            + CONFIGS[route].format(host=HOST, port=port)
        )
        process = await trio.lowlevel.open_process(
            [*bridges_command(), "run", str(config)], cwd=work, stderr=subprocess.PIPE
        )
        assert process.stderr is not None
        output = bytearray()
        try:
            with trio.fail_after(15):
                while b"running 1 route(s)" not in output:
                    chunk = await process.stderr.receive_some(65536)
                    if not chunk:
                        raise RuntimeError(f"bridges ended early: {output.decode()}")
                    output += chunk
            await trio.sleep(0.5)  # the batch is sent and waits for its receipt
            process.send_signal(signal.SIGTERM)
            last = time.monotonic()
            if second:
                await trio.sleep(0.3)
                process.send_signal(signal.SIGTERM)
                last = time.monotonic()
            with trio.fail_after(timeout + 15):
                while chunk := await process.stderr.receive_some(65536):
                    output += chunk
                status = await process.wait()
            took = time.monotonic() - last
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        return took, status, output.decode().strip().splitlines()[-1]


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=1.0, help="shutdown_timeout, s")
    args = parser.parse_args()
    rows = []
    async with frozen_broker() as port:
        for route in CONFIGS:
            for second in (False, True):
                times, statuses, lasts = [], set(), set()
                for _ in range(args.runs):
                    took, status, last = await one_run(port, route, args.timeout, second)
                    times.append(took)
                    statuses.add(status)
                    lasts.add(last.removeprefix("bridges: "))
                bound = 1.0 if second else args.timeout + 1.0
                rows.append(
                    (route, second, statistics.median(times), max(times), bound, statuses, lasts)
                )
    print(
        f"\nbridges run against a frozen broker, shutdown_timeout = {args.timeout:g} s, "
        f"{args.runs} runs each\n"
    )
    print(
        "| route         | stopped by          | median s | worst s | bound s | worst/bound "
        "| exit | last line |"
    )
    print(
        "|---------------|---------------------|----------|---------|---------|-------------"
        "|------|-----------|"
    )
    ok = True
    for route, second, median, worst, bound, statuses, lasts in rows:
        ok = ok and worst < bound
        how = "SIGTERM, SIGTERM" if second else "SIGTERM"
        print(
            f"| {route:<13} | {how:<19} | {median:8.2f} | {worst:7.2f} | {bound:7.2f} "
            f"| {worst / bound:11.2f} | {','.join(map(str, sorted(statuses))):<4} "
            f"| {' / '.join(sorted(lasts))} |"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(trio.run(main))
