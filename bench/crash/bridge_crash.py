"""Crash test: file -> STOMP -> file through ``bridges run``, killed with SIGKILL again and again.

    .venv/bin/python bench/crash/bridge_crash.py [--count 10000] [--kills 10]
        [--brokers embedded,rabbitmq] [--seed N] [--json]

For each broker: ``count`` files (each body its own id) are put in ``inbox/``
of a fresh directory; a config with two routes is written next to them::

    in:  file inbox/  -> stomp /queue/<fresh>       (receipt per batch)
    out: stomp /queue/<fresh> -> file outbox/ (JSON lines, fsync per batch)

``bridges run`` is started and killed with SIGKILL at a random point of the
transfer (once ``outbox/`` holds a random share of the messages, plus a random
0-50 ms), started again, ``--kills`` times; then it runs until every id is in
``outbox/`` and ``inbox/`` is empty, and is stopped with SIGTERM (a clean
exit is required). The broker runs in its own process and survives every
kill: ``embedded`` is ``trio-stomp broker --listen 127.0.0.1:0``; RabbitMQ is
the one of ``scripts/brokers up``.

The figures: messages that arrived (must be all), duplicates (lines for ids
already seen) and the most copies of one id, against the bound at-least-once
promises: each kill can repeat at most what was in flight, so at most
``kills * (in_flight of in + in_flight of out)``; lines that are not valid
JSON (must be none: a killed write is cut back at the next start); and
``inbox/done/`` must hold each file once.

``--json`` prints the figures of each broker as one JSON object per line
(the test suite runs a small version of this script).
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, Final

from _crash import (
    EMBEDDED,
    TARGETS,
    BenchError,
    Target,
    bridges_command,
    check_target,
    embedded_broker,
)

IN_FLIGHT: Final = 200  # per route: the duplicate bound per kill is twice this
BATCH: Final = 100
STARTUP_LIMIT: Final = 60.0


def write_config(work: Path, target: Target, queue: str) -> Path:
    url = f"stomp://127.0.0.1:{target.port}"
    login = f'login = "{target.login}", passcode = "{target.passcode}"'
    config = f"""
[bridge]
shutdown_timeout = 20
log_level = "warning"

[routes.in]
in_flight = {IN_FLIGHT}
batch = {{ count = {BATCH}, time = 0.01 }}
retry = {{ attempts = 3, initial = 0.05, max = 1.0 }}
source = {{ type = "file", path = "inbox", settle = 0, poll_interval = 0.05 }}
sink = {{ type = "stomp", url = "{url}", {login}, destination = "{queue}", persistent = true }}

[routes.out]
in_flight = {IN_FLIGHT}
batch = {{ count = {BATCH}, time = 0.01 }}
retry = {{ attempts = 3, initial = 0.05, max = 1.0 }}
source = {{ type = "stomp", url = "{url}", {login}, destination = "{queue}", \
           prefetch = {IN_FLIGHT} }}
sink = {{ type = "file", path = "outbox", format = "jsonl", rotate_bytes = 65536 }}
"""
    path = work / "bridge.toml"
    path.write_text(config)
    return path


def count_outbox(outbox: Path) -> tuple[Counter[str], int]:
    """Copies per body, and the lines that are not valid records."""
    while True:
        try:
            return _count_outbox(outbox)
        except FileNotFoundError:  # a .part was renamed under us (a live bridge): again
            continue


def _count_outbox(outbox: Path) -> tuple[Counter[str], int]:
    copies: Counter[str] = Counter()
    bad = 0
    for path in outbox.glob("messages-*.jsonl*"):
        data = path.read_bytes()
        complete = data[: data.rfind(b"\n") + 1]  # a live .part may end mid-line
        for line in complete.splitlines():
            try:
                copies[json.loads(line)["body"]] += 1
            except (ValueError, KeyError):
                bad += 1
    return copies, bad


def is_running(log: Path, start: int) -> bool:
    """True once the bridge started at log offset ``start`` said it runs every route."""
    with log.open("rb") as text:
        text.seek(start)
        return b"running 2 route(s)" in text.read()


def lines_in(outbox: Path) -> int:
    """Lines written so far (duplicates included): a cheap measure of progress."""
    total = 0
    for path in outbox.glob("messages-*.jsonl*"):
        try:
            total += path.read_bytes().count(b"\n")
        except FileNotFoundError:  # renamed under us
            continue
    return total


def wait_for_lines(outbox: Path, lines: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + STARTUP_LIMIT
    while lines_in(outbox) < lines:
        if process.poll() is not None or time.monotonic() > deadline:
            raise BenchError(f"no progress to {lines} lines; see the log")
        time.sleep(0.005)


def run_one(target: Target, count: int, kills: int, rng: random.Random) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bridge-crash-") as tmp:
        work = Path(tmp)
        inbox, outbox = work / "inbox", work / "outbox"
        inbox.mkdir()
        ids = [f"msg-{i:06d}" for i in range(count)]
        for name in ids:
            (inbox / name).write_text(name)
        queue = f"/queue/bridge-crash-{uuid.uuid4().hex[:10]}"
        config = write_config(work, target, queue)
        log = (work / "bridge.log").open("w")
        command = [*bridges_command(), "run", str(config)]
        started = time.monotonic()
        moments = []
        progress = []
        # Each kill comes at a random point of the transfer: once the outbox
        # holds a random share of the messages (rising from kill to kill),
        # plus a random 0-50 ms, so that every kill lands mid-flight.
        shares = sorted(rng.uniform(0.05, 0.95) for _ in range(kills))
        for share in shares:
            log.flush()
            log_start = (work / "bridge.log").stat().st_size
            started_at = time.monotonic()
            process = subprocess.Popen(command, cwd=work, stdout=log, stderr=log)
            wait_for_lines(outbox, int(share * count), process)
            time.sleep(rng.uniform(0.0, 0.05))
            if process.poll() is not None:
                raise BenchError(f"bridges exited by itself ({process.returncode}); see the log")
            process.send_signal(signal.SIGKILL)
            process.wait()
            moments.append(round(time.monotonic() - started_at, 2))
            progress.append(len(count_outbox(outbox)[0]))
        log.flush()
        log_start = (work / "bridge.log").stat().st_size
        process = subprocess.Popen(command, cwd=work, stdout=log, stderr=log)
        deadline = time.monotonic() + max(STARTUP_LIMIT, count / 100)
        try:
            while True:
                copies, bad = count_outbox(outbox)
                pending = [p for p in inbox.iterdir() if p.is_file()]
                running = is_running(work / "bridge.log", log_start)
                if len(copies) >= count and not pending and running:
                    break  # (SIGTERM before the bridge handles signals would just kill it)
                if process.poll() is not None or time.monotonic() > deadline:
                    raise BenchError(
                        f"{len(copies)} of {count} arrived, {len(pending)} files still in inbox "
                        f"(bridge {'exited' if process.poll() is not None else 'still running'})"
                    )
                time.sleep(0.2)
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                status = process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                status = -9
            log.close()
        elapsed = time.monotonic() - started
        copies, bad = count_outbox(outbox)
        done = sorted(p.name for p in (inbox / "done").iterdir())
        total = sum(copies.values())
        return {
            "broker": target.label,
            "messages": count,
            "kills": kills,
            "killed_after_s": moments,
            "arrived_at_kills": progress,
            "arrived": len(set(copies) & set(ids)),
            "missing": len(set(ids) - set(copies)),
            "unexpected": len(set(copies) - set(ids)),
            "duplicates": total - len(copies),
            "max_copies": max(copies.values(), default=0),
            "bound": kills * 2 * IN_FLIGHT,
            "bad_lines": bad,
            "done_files": len(done),
            "exit_status": status,
            "seconds": round(elapsed, 1),
            "log_tail": (work / "bridge.log").read_text()[-2000:] if status != 0 else "",
        }


def ok(result: dict[str, Any]) -> bool:
    return bool(
        result["missing"] == 0
        and result["unexpected"] == 0
        and result["bad_lines"] == 0
        and result["duplicates"] <= result["bound"]
        and result["done_files"] == result["messages"]
        and result["exit_status"] == 0
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--brokers", default="embedded,rabbitmq")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--json", action="store_true", help="one JSON object per broker")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    results = []
    for name in [n.strip() for n in args.brokers.split(",") if n.strip()]:
        try:
            if name == EMBEDDED:
                with embedded_broker() as target:
                    results.append(run_one(target, args.count, args.kills, rng))
            else:
                target = TARGETS[name]
                reason = check_target(target)
                if reason is not None:
                    raise BenchError(reason)
                results.append(run_one(target, args.count, args.kills, rng))
        except BenchError as exc:
            results.append({"broker": name, "error": str(exc)})
    if args.json:
        for result in results:
            print(json.dumps(result))
        return 0 if all("error" not in r and ok(r) for r in results) else 1
    print(f"bridge crash test, seed {seed}: file -> STOMP -> file, SIGKILL at random moments")
    print(
        "| broker   | messages | kills | arrived | missing | duplicates | max copies "
        "| dup bound | bad lines | exit | time, s | verdict |"
    )
    print(
        "|----------|----------|-------|---------|---------|------------|------------"
        "|-----------|-----------|------|---------|---------|"
    )
    for r in results:
        if "error" in r:
            print(f"| {r['broker']:<8} | error: {r['error']}")
            continue
        print(
            f"| {r['broker']:<8} | {r['messages']:>8,} | {r['kills']:>5} | {r['arrived']:>7,} "
            f"| {r['missing']:>7} | {r['duplicates']:>10} | {r['max_copies']:>10} "
            f"| {r['bound']:>9,} | {r['bad_lines']:>9} | {r['exit_status']:>4} "
            f"| {r['seconds']:>7} | {'ok' if ok(r) else 'FAIL':<7} |"
        )
        print(f"  killed (s after its start): {r['killed_after_s']}")
        print(f"  messages in outbox/ at each kill: {r['arrived_at_kills']}")
        if r["log_tail"]:
            print(r["log_tail"])
    return 0 if all("error" not in r and ok(r) for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
