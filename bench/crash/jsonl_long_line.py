"""A JSON-lines source fed one huge line: time, CPU and memory against reading the file raw.

    .venv/bin/python bench/crash/jsonl_long_line.py [--mib 150]

A file holds one line of ``--mib`` MiB, then ``ok``. The ``file`` source in
JSON-lines mode (``max_line`` 1 MiB, the default) must set the long line apart
(its first MiB, for the dead letter) and hand out ``ok``, with memory bounded by
``max_line`` plus one read. The raw limit, measured in the same run on the same
file: ``os.read`` of the whole file in 256 KiB chunks, with no parsing. Each
measurement runs in a fresh interpreter, so its peak RSS is its own.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parents[2]


def measure_raw(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        while os.read(fd, 256 * 1024):
            pass
    finally:
        os.close(fd)


async def measure_source(path: Path) -> None:
    from bridges import Context
    from bridges.endpoints.file import FileSource, FileSourceConfig

    config = FileSourceConfig(path.name, mode="jsonl", poll_interval=0.01)
    source = FileSource(config, Context(base_dir=path.parent))
    async with source.open() as receiver:
        while True:
            envelope = await receiver.receive()
            await envelope.ack()
            if envelope.message.body == b"ok":
                return


def child(kind: str, path: Path) -> None:
    sys.path.insert(0, str(ROOT))
    import bridges.endpoints.file  # noqa: F401 - imported before the clock starts

    start = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_SELF)
    if kind == "raw":
        measure_raw(path)
    else:
        trio.run(measure_source, path)
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    result = {"wall": time.perf_counter() - start, "cpu": cpu, "rss": after.ru_maxrss / 1024}
    print(json.dumps(result))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=150)
    parser.add_argument("--child", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], Path(args.child[1]))
        return 0
    with tempfile.TemporaryDirectory(prefix="long-line-") as tmp:
        path = Path(tmp) / "big.jsonl"
        with open(path, "wb") as file:
            block = b"x" * (1024 * 1024)
            for _ in range(args.mib):
                file.write(block)
            file.write(b"\nok\n")
        results = {}
        for kind in ("raw", "source"):
            done = subprocess.run(
                [sys.executable, __file__, "--child", kind, str(path)],
                capture_output=True,
                text=True,
                timeout=300,
                check=True,
            )
            results[kind] = json.loads(done.stdout.strip().splitlines()[-1])
    raw = results["raw"]
    print(f"\none line of {args.mib} MiB, then 'ok' (max_line = 1 MiB)\n")
    print("| reader                        | wall s | CPU s | peak RSS MiB | CPU vs raw |")
    print("|-------------------------------|-------:|------:|-------------:|-----------:|")
    for kind, label in (("raw", "os.read, 256 KiB chunks (raw)"), ("source", "file source, jsonl")):
        r = results[kind]
        print(
            f"| {label:<29} | {r['wall']:6.2f} | {r['cpu']:5.2f} | {r['rss']:12.0f} "
            f"| {r['cpu'] / max(raw['cpu'], 1e-6):10.1f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
