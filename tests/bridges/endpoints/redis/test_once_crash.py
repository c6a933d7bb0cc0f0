"""Kill -9 and effectively once: 0 duplicates through the pairs that claim it.

A small run of the crash bench (bench/crash/once_crash.py), one SIGKILL at a
random moment, for each pair whose source gives stable ids and whose sink makes
a repeated id a no-op at the target: JSON lines -> a file per message, JSON
lines -> JSON lines, redis -> nats, nats -> redis. ``crash_run`` asserts that
every message arrived and that duplicates stay within the bound, which for these
pairs is 0. (Here, beside the redis tests: two of the four pairs need the
private redis-server and nats-server the bench starts.)
"""

from __future__ import annotations

import shutil

from family_kit import crash_run, require_programs
from redis_servers import private_redis_available

NATS_SERVER = shutil.which("nats-server") or "/usr/sbin/nats-server"


def test_sigkill_repeats_nothing_between_json_lines_and_files() -> None:
    crash_run("once_crash.py", ["jsonl-to-files", "jsonl-to-jsonl"], count=600, seed=5)


def test_sigkill_repeats_nothing_between_redis_and_nats() -> None:
    private_redis_available()
    require_programs(NATS_SERVER)
    crash_run("once_crash.py", ["redis-to-nats", "nats-to-redis"], count=600, seed=5)
