"""Crash test for effectively-once pairs: ``bridges run`` killed with SIGKILL, 0 duplicates wanted.

    .venv/bin/python bench/crash/once_crash.py [--count 10000] [--kills 5]
        [--only jsonl-to-files,jsonl-to-jsonl,redis-to-nats,nats-to-redis] [--seed N] [--json]

Each scenario is a pair whose source gives stable ids and whose sink makes a
repeated id a no-op at the target (bridges/README.md, "Delivery guarantees"):

    jsonl-to-files:  file events.jsonl (id NAME:OFFSET)  ->  file outbox/, a file per message
                     named by its id
    jsonl-to-jsonl:  file events.jsonl  ->  file outbox/, JSON lines (read back on open)
    redis-to-nats:   a stream of ``count`` entries without bridge-id (id: the entry id)
                     ->  nats (JetStream, Nats-Msg-Id, the stream's 2-minute window)
    nats-to-redis:   a JetStream stream (id: STREAM:SEQ)  ->  redis (the idempotent append)

and two controls, the same pairs with the sink's de-duplication off
(``dedup_window = 0``), held to the at-least-once bound only: they show that
the kills do make the source send messages again (``--only`` them to see).

    jsonl-to-jsonl-off, nats-to-redis-off

Redis and NATS are private servers (``redis-server`` with AOF and appendfsync
always, ``nats-server -js``), in temporary directories. The harness is
``bench/crash/_crash.py``: ``bridges run`` is killed with SIGKILL once the far
side holds a random share of the messages (plus 0-50 ms), ``--kills``
times, then runs to the end and stops on SIGTERM. Duplicates are counted at
the target by body (each body is one message): the bound is 0.
"""

from __future__ import annotations

import functools
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from _crash import HOST, Factory, Scenario, Server, main, private_servers
from mqtt_redis_crash import redis_bodies, redis_command, redis_fill, redis_length
from queues_crash import (
    FILE_SINK,
    JSONL_SOURCE,
    nats_bodies,
    nats_call,
    nats_command,
    nats_fill,
    nats_stored,
    nats_url,
    outbox_bodies,
)

FILES_SINK: Final = '{ type = "file", path = "outbox", format = "files" }'


def files_bodies(outbox: Path) -> Counter[str]:
    """Copies per body of the files in ``outbox`` (temporary files left out)."""
    copies: Counter[str] = Counter()
    if not outbox.exists():
        return copies
    for path in outbox.iterdir():
        if path.name.startswith("."):
            continue
        try:
            copies[path.read_text()] += 1
        except FileNotFoundError:
            continue
    return copies


def jsonl_to_files(work: Path, ids: list[str]) -> Scenario:
    (work / "events.jsonl").write_text("".join(f"{i}\n" for i in ids))
    outbox = work / "outbox"
    return Scenario(
        JSONL_SOURCE,
        FILES_SINK,
        lambda: sum(files_bodies(outbox).values()),
        lambda: files_bodies(outbox),
        lambda: len(files_bodies(outbox)) >= len(ids),
        lambda: None,
        once=True,
    )


def jsonl_to_jsonl(work: Path, ids: list[str], *, off: bool = False) -> Scenario:
    (work / "events.jsonl").write_text("".join(f"{i}\n" for i in ids))
    outbox = work / "outbox"
    return Scenario(
        JSONL_SOURCE,
        FILE_SINK.replace(" }", ", dedup_window = 0 }") if off else FILE_SINK,
        lambda: sum(outbox_bodies(outbox).values()),
        lambda: outbox_bodies(outbox),
        lambda: len(outbox_bodies(outbox)) >= len(ids),
        lambda: None,
        once=not off,
    )


def redis_to_nats(work: Path, ids: list[str], redis: Server, nats: Server) -> Scenario:
    redis_url, stream = f"redis://{HOST}:{redis.port}/0", f"once-{uuid.uuid4().hex[:8]}"
    url, subject = nats_url(nats), f"ONCE{uuid.uuid4().hex[:8].upper()}"
    redis_fill(redis_url, stream, ids, stable=False)
    nats_call(url, lambda _, js: js.add_stream(name=subject, subjects=[f"{subject}.>"]))
    source = (
        f'{{ type = "redis", url = "{redis_url}", stream = "{stream}", start = "0", '
        'consumer = "crash", block = 0.1 }'
    )
    sink = f'{{ type = "nats", url = "{url}", subject = "{subject}.out" }}'
    return Scenario(
        source,
        sink,
        lambda: nats_stored(url, subject),
        lambda: nats_bodies(url, subject),
        lambda: nats_stored(url, subject) >= len(ids),
        redis.restart,
        once=True,
    )


def nats_to_redis(
    work: Path, ids: list[str], redis: Server, nats: Server, *, off: bool = False
) -> Scenario:
    url, subject = nats_url(nats), f"ONCE{uuid.uuid4().hex[:8].upper()}"
    redis_url, stream = f"redis://{HOST}:{redis.port}/0", f"once-{uuid.uuid4().hex[:8]}"
    nats_fill(url, subject, ids)
    source = (
        f'{{ type = "nats", url = "{url}", stream = "{subject}", durable = "crash", '
        f'subject = "{subject}.>", ack_wait = 5.0 }}'
    )
    window = ", dedup_window = 0" if off else ""
    sink = f'{{ type = "redis", url = "{redis_url}", stream = "{stream}"{window} }}'

    def finished() -> bool:
        return len(redis_bodies(redis_url, stream)) >= len(ids)

    return Scenario(
        source,
        sink,
        lambda: redis_length(redis_url, stream),
        lambda: redis_bodies(redis_url, stream),
        finished,
        redis.restart,
        once=not off,
    )


SCENARIOS: Final = [
    "jsonl-to-files",
    "jsonl-to-jsonl",
    "redis-to-nats",
    "nats-to-redis",
    "jsonl-to-jsonl-off",
    "nats-to-redis-off",
]


@contextmanager
def setup(names: list[str]) -> Iterator[dict[str, Factory]]:
    """Private redis-server and nats-server when NAMES need them; a factory per scenario."""
    servers_needed = any("redis" in name for name in names)
    wanted = {
        "redis": Server(redis_command, "redis-server") if servers_needed else None,
        "nats": Server(nats_command, "nats-server", down=0.5) if servers_needed else None,
    }
    with private_servers(wanted) as servers:
        factories: dict[str, Factory] = {
            "jsonl-to-files": jsonl_to_files,
            "jsonl-to-jsonl": jsonl_to_jsonl,
            "jsonl-to-jsonl-off": functools.partial(jsonl_to_jsonl, off=True),
        }
        if servers:
            redis, nats = servers["redis"], servers["nats"]
            factories["redis-to-nats"] = functools.partial(redis_to_nats, redis=redis, nats=nats)
            factories["nats-to-redis"] = functools.partial(nats_to_redis, redis=redis, nats=nats)
            factories["nats-to-redis-off"] = functools.partial(
                nats_to_redis, redis=redis, nats=nats, off=True
            )
        yield factories


if __name__ == "__main__":
    sys.exit(main(__doc__ or "", SCENARIOS, setup))
