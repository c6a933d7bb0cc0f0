"""Crash test of the quickstart: ``bridges run examples/quickstart.toml`` killed again and again.

    .venv/bin/python bench/crash/quickstart_crash.py [--count 3000] [--kills 6] [--seed N]
        [--full-disk] [--json]

The quickstart as written (embedded broker with its data dir, file source,
file sink, dead letters), in a fresh directory; only ``listen`` is moved to a
free port. ``count`` files (each body names its file) are put in ``inbox/``,
then ``bridges run`` is started and killed with SIGKILL at ``kills`` random
moments (each once ``outbox/`` holds a random share of the files, plus a
random 0-50 ms), started again each time; the last run goes until every file
is out of ``inbox/`` and in ``outbox/``, and stops with SIGTERM (exit 0
required).

Printed (and checked):

- lost: files that left ``inbox/`` (they are in ``inbox/done/``) and are
  neither in ``outbox/`` (same content) nor in the dead letters. Must be 0.
- duplicates: files written to ``outbox/`` again after a restart (the inode
  changed between two kills), and copies in the dead letters; a redelivered
  copy the sink finds already written (same content) is not written again
  and is not counted.

``--full-disk``: the outbox on a 1 MiB tmpfs mounted for the run (needs
root), 60 files of 64 KiB: the disk fills, then SIGTERM. Checked: a non-zero
exit, and 0 lost: each file that left ``inbox/`` is in ``outbox/``, the dead
letters, or still in the broker's store (counted by a second run with the
outbox on a normal disk, until every file is there).

``--json`` prints the figures as one JSON object (the test suite runs a
small version).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from _crash import bridges_command, free_port

ROOT: Final = Path(__file__).resolve().parents[2]
QUICKSTART: Final = ROOT / "examples" / "quickstart.toml"
LIMIT: Final = 120.0  # s: the most one phase may take without progress


class CrashError(Exception):
    """The run could not be made (not a finding)."""


#: --volatile: the quickstart without its data dir (the broker as it was before it had one).
VOLATILE = False


def write_config(work: Path, outbox: str = "outbox", dead: str = "dead-letters") -> Path:
    text = QUICKSTART.read_text()
    moved = re.sub(r'listen = "127\.0\.0\.1:\d+"', f'listen = "127.0.0.1:{free_port()}"', text)
    if VOLATILE:
        moved = re.sub(r"(?m)^data_dir = .*$", "", moved)
    if outbox != "outbox":
        moved = moved.replace('path = "outbox"', f"path = {json.dumps(outbox)}")
    if dead != "dead-letters":
        moved = moved.replace('path = "dead-letters"', f"path = {json.dumps(dead)}")
    assert moved != text
    path = work / "quickstart.toml"
    path.write_text(moved)
    return path


class Bridge:
    """One ``bridges run`` of the config in ``work``, its output in ``work/bridge.log``."""

    def __init__(self, work: Path, config: Path) -> None:
        self.work = work
        self.log = (work / "bridge.log").open("ab")
        self.start = self.log.tell()
        self.process = subprocess.Popen(
            [*bridges_command(), "run", str(config)],
            cwd=work,
            stdout=self.log,
            stderr=self.log,
        )

    def output(self) -> str:
        with (self.work / "bridge.log").open("rb") as text:
            text.seek(self.start)
            return text.read().decode(errors="replace")

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        self.log.close()

    def stop(self, timeout: float = 60.0) -> int:
        self.process.send_signal(signal.SIGTERM)
        try:
            status = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            status = self.process.wait()
        self.log.close()
        return status


def put_files(inbox: Path, names: list[str], size: int = 0) -> None:
    inbox.mkdir(parents=True, exist_ok=True)
    for name in names:
        body = f"file {name}\n".encode()
        (inbox / name).write_bytes(body + b"." * max(0, size - len(body)))


def listing(directory: Path) -> dict[str, int]:
    """name -> inode of the regular files in ``directory`` (final names only)."""
    if not directory.is_dir():
        return {}
    found = {}
    for path in directory.iterdir():
        try:
            stat = path.lstat()
        except FileNotFoundError:
            continue
        if path.is_file() and not path.name.startswith("."):
            found[path.name] = stat.st_ino
    return found


def dead_letters(directory: Path) -> list[str]:
    """The ``file-name`` header of each record in the dead-letter JSON lines."""
    names = []
    for path in directory.glob("*.jsonl*") if directory.is_dir() else []:
        for line in path.read_bytes().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            headers = record.get("headers", {})
            if isinstance(headers, dict) and "file-name" in headers:
                names.append(headers["file-name"])
    return names


def wait_for(condition: Any, bridge: Bridge, what: str, limit: float = LIMIT) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        if bridge.process.poll() is not None:
            raise CrashError(
                f"bridges run ended while waiting for {what}: {bridge.output()[-800:]}"
            )
        if time.monotonic() > deadline:
            raise CrashError(f"no {what} within {limit:g} s: {bridge.output()[-800:]}")
        time.sleep(0.005)


def wait_until(condition: Any, bridge: Bridge, limit: float, quiet: float = 0.0) -> None:
    """Until ``condition()``, or ``limit`` s, or (with ``quiet``) outbox/ still that long."""
    deadline = time.monotonic() + limit
    last, still_since = None, time.monotonic()
    while not condition() and time.monotonic() < deadline and bridge.process.poll() is None:
        if quiet:
            now = listing(bridge.work / "outbox")
            if now != last:
                last, still_since = now, time.monotonic()
            elif time.monotonic() - still_since > quiet:
                return
        time.sleep(0.005)


def account(work: Path, names: list[str], outbox: Path) -> dict[str, Any]:
    """What left the inbox, and where it is."""
    inbox = work / "inbox"
    still = set(listing(inbox))
    left = [name for name in names if name not in still]
    out = listing(outbox)
    wrong = [
        n
        for n in out
        if n in names and not (outbox / n).read_bytes().startswith(f"file {n}\n".encode())
    ]
    dead = dead_letters(work / "dead-letters")
    lost = [name for name in left if name not in out and name not in dead]
    return {
        "left_inbox": len(left),
        "in_outbox": len(out),
        "dead": len(dead),
        "lost": lost,
        "wrong": wrong,
    }


def crash_run(count: int, kills: int, rng: random.Random) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="quickstart-crash-") as tmp:
        work = Path(tmp)
        config = write_config(work)
        names = [f"{i:05d}.txt" for i in range(count)]
        put_files(work / "inbox", names)
        outbox = work / "outbox"
        shares = sorted(rng.uniform(0.05, 0.9) for _ in range(kills))
        rewritten = 0
        at_kills: list[tuple[int, int]] = []  # (files in outbox/, in inbox/done/) at each kill
        before: dict[str, int] = {}
        started = time.monotonic()
        done = work / "inbox" / "done"

        def progress() -> int:  # 0 .. 2 * count: files sent, plus files written
            return len(listing(done)) + len(listing(outbox))

        for share in shares:
            bridge = Bridge(work, config)
            # (at least one more file moved in this run: the kill is mid-transfer)
            target = max(int(share * 2 * count), progress() + 1)
            # (a volatile broker loses files: then the kill comes after 3 s at most)
            wait_until(lambda t=target: progress() >= t, bridge, 3.0)
            time.sleep(rng.uniform(0, 0.05))
            bridge.kill()
            after = listing(outbox)
            at_kills.append((len(after), len(listing(work / "inbox" / "done"))))
            rewritten += sum(1 for n, ino in before.items() if after.get(n, ino) != ino)
            before = after
        bridge = Bridge(work, config)
        wait_for(lambda: not listing(work / "inbox"), bridge, "an empty inbox/")
        wait_until(lambda: len(listing(outbox)) >= count, bridge, 10.0, quiet=2.0)
        status = bridge.stop()
        elapsed = time.monotonic() - started
        after = listing(outbox)
        rewritten += sum(1 for n, ino in before.items() if after.get(n, ino) != ino)
        figures = account(work, names, outbox)
        dead = dead_letters(work / "dead-letters")
        return {
            "case": "crash",
            "files": count,
            "kills": kills,
            "lost": len(figures["lost"]),
            "lost_names": figures["lost"][:10],
            "wrong_content": len(figures["wrong"]),
            "duplicates": rewritten + sum(1 for n in dead if n in after),
            "dead_letters": len(dead),
            "final_exit": status,
            "seconds": round(elapsed, 1),
            "at_kills": at_kills,
        }


@contextmanager
def tiny_filesystem(path: Path, size: str) -> Iterator[Path]:
    path.mkdir(parents=True)
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode:
        raise CrashError(f"cannot mount a tmpfs (root needed): {result.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def full_disk_run(files: int = 60, size: int = 64 * 1024) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="quickstart-full-") as tmp:
        work = Path(tmp)
        names = [f"{i:05d}.bin" for i in range(files)]
        put_files(work / "inbox", names, size)
        with tiny_filesystem(work / "small", "1m") as small:
            # The outbox and the dead letters on one small disk, as they would be.
            config = write_config(work, str(small / "outbox"), str(small / "dead-letters"))
            bridge = Bridge(work, config)
            done = work / "inbox" / "done"
            wait_for(lambda: len(listing(done)) == files, bridge, "every file sent")
            # The disk fills up: wait until the outbox stops growing, then SIGTERM.
            seen, quiet = -1, 0
            while quiet < 20:
                now = len(listing(small / "outbox"))
                quiet = quiet + 1 if now == seen else 0
                seen = now
                time.sleep(0.1)
            status = bridge.stop()
            output = bridge.output()
            # What the small disk holds moves to a disk with room (a file cut
            # short by the full disk is not one: the bridge writes it again).
            outbox = work / "outbox"
            outbox.mkdir()
            complete = 0
            for name in listing(small / "outbox"):
                data = (small / "outbox" / name).read_bytes()
                if len(data) == size:
                    (outbox / name).write_bytes(data)
                    complete += 1
            (work / "dead-letters").mkdir()
            for path in (small / "dead-letters").glob("*.jsonl"):
                (work / "dead-letters" / path.name).write_bytes(path.read_bytes())
        # The rest must still be in the broker's store: run again with room.
        bridge = Bridge(work, write_config(work))
        wait_for(lambda: "running 2 route(s)" in bridge.output(), bridge, "the routes running")
        wait_until(lambda: len(listing(outbox)) >= files, bridge, 30.0, quiet=3.0)
        second = bridge.stop()
        figures = account(work, names, outbox)
        return {
            "case": "full-disk",
            "files": files,
            "in_small_outbox": complete,
            "exit_at_sigterm": status,
            "last_line": output.strip().splitlines()[-1] if output.strip() else "",
            "lost": len(figures["lost"]),
            "wrong_content": len(figures["wrong"]),
            "dead_letters": figures["dead"],
            "second_exit": second,
            "second_last_line": bridge.output().strip().splitlines()[-1],
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=3000)
    parser.add_argument("--kills", type=int, default=6)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--full-disk", action="store_true", help="also the full-disk case")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--volatile", action="store_true", help="without the broker's data dir (to see it fail)"
    )
    args = parser.parse_args()
    global VOLATILE
    VOLATILE = args.volatile
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    results = []
    try:
        results.append(crash_run(args.count, args.kills, random.Random(seed)))
        if args.full_disk:
            results.append(full_disk_run())
    except CrashError as exc:
        print(f"quickstart_crash: {exc}", file=sys.stderr)
        return 2
    ok = True
    for result in results:
        if args.json:
            print(json.dumps(result))
            continue
        if result["case"] == "crash":
            print(
                f"crash (seed {seed}): {result['files']} files, {result['kills']} SIGKILLs, "
                f"{result['seconds']} s: lost {result['lost']}, duplicates "
                f"{result['duplicates']}, dead letters {result['dead_letters']}, wrong content "
                f"{result['wrong_content']}, final exit {result['final_exit']}"
            )
            print(f"  at each kill (files in outbox/, in inbox/done/): {result['at_kills']}")
            ok = ok and result["lost"] == 0 and result["final_exit"] == 0
        else:
            print(
                f"full disk: {result['files']} files, {result['in_small_outbox']} fit; SIGTERM "
                f"exit {result['exit_at_sigterm']} ({result['last_line']!r}); after a restart "
                f"with room: lost {result['lost']}, wrong content {result['wrong_content']}"
            )
            ok = ok and result["lost"] == 0 and result["exit_at_sigterm"] != 0
        ok = ok and result["wrong_content"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
