"""The durable store's cost per commit: this tree against another revision, in lockstep.

    .venv/bin/python bench/speed/store_commit.py --against REV [--commits 3000] [--size 100]

Two child processes, one running this tree's ``trio_stomp`` and one running
``REV``'s (``git archive REV``, unpacked in a temporary directory), each with
its own store in a fresh temporary data dir. They commit in turns, one commit
each at a time (the order alternates), so that both see the same load on the
disk: each commit writes one message of ``size`` bytes and deletes the one
before it (a consumer that keeps up), with ``synchronous=FULL`` as the broker
runs it, and times ``Database.commit`` alone (the fsync included; no event
loop, no sockets). ``--no-sync`` turns the fsync off, to see the CPU part.

Printed: the median and 90th percentile of each, and the median of the
paired differences (this tree minus REV).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]

_CHILD: Final = """
import sys, tempfile, time
from pathlib import Path
from trio_stomp.broker._store_database import Database
from trio_stomp.broker._message import Message
size, sync = int(sys.argv[1]), sys.argv[2]
with tempfile.TemporaryDirectory(prefix="store-commit-") as tmp:
    db, _, key = Database.open(Path(tmp) / "broker.sqlite3")
    db.connection.execute(f"PRAGMA synchronous={sync}")
    body = b"x" * size
    for number, _line in enumerate(sys.stdin):
        message = Message(f"id-{key}", "/queue/a", (("h", "v"),), body, size + 80, key=key)
        start = time.perf_counter()
        db.commit([message], [key - 1] if number else [])
        print(time.perf_counter() - start, flush=True)
        key += 1
    db.close()
"""


def _child(tree: Path, size: int, sync: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(size), sync],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tempfile.gettempdir(),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", required=True, help="the git revision to compare with")
    parser.add_argument("--commits", type=int, default=3000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--no-sync", action="store_true", help="synchronous=OFF: the CPU part")
    args = parser.parse_args()
    sync = "OFF" if args.no_sync else "FULL"
    with tempfile.TemporaryDirectory(prefix="store-commit-rev-") as old:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", args.against, "trio_stomp"],
            capture_output=True,
            check=False,
        )
        if archive.returncode:
            print(archive.stderr.decode().strip(), file=sys.stderr)
            return 2
        subprocess.run(["tar", "-x", "-C", old], input=archive.stdout, check=True)
        children = {
            "this tree": _child(ROOT, args.size, sync),
            args.against: _child(Path(old), args.size, sync),
        }
        times: dict[str, list[float]] = {name: [] for name in children}
        names = list(children)
        for number in range(args.commits):
            for name in names if number % 2 else reversed(names):
                child = children[name]
                assert child.stdin is not None
                assert child.stdout is not None
                child.stdin.write("\n")
                child.stdin.flush()
                times[name].append(float(child.stdout.readline()))
        for child in children.values():
            assert child.stdin is not None
            child.stdin.close()
            child.wait()
    print(f"{args.commits} commits each of one {args.size} B message, synchronous={sync}")
    for name, values in times.items():
        values.sort()
        median = statistics.median(values) * 1e6
        p90 = values[int(len(values) * 0.9)] * 1e6
        print(f"  {name:<12} median {median:6.0f} us   p90 {p90:6.0f} us")
    paired = [new - old for new, old in zip(times[names[0]], times[names[1]], strict=True)]
    print(f"  this tree - {args.against}: {statistics.median(paired) * 1e6:+.0f} us per commit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
