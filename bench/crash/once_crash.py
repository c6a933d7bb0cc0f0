"""Crash test for effectively-once pairs: ``bridges run`` killed with SIGKILL, 0 duplicates wanted.

    .venv/bin/python bench/crash/once_crash.py [--count 10000] [--kills 5]
        [--only jsonl-to-files,jsonl-to-jsonl,redis-to-nats,nats-to-redis,...]
        [--seed N[,N...]] [--json] [--report PATH]

Each scenario is a pair whose source gives stable ids and whose sink makes a
repeated id a no-op at the target (docs/explanation/exactly-once.md):

    jsonl-to-files:  file events.jsonl (id ROUTE/NAME:OFFSET)  ->  file outbox/, a file per message
                     named by its id
    jsonl-to-jsonl:  file events.jsonl  ->  file outbox/, JSON lines (read back on open)
    redis-to-nats:   a stream of ``count`` entries without bridge-id (id: ROUTE/STREAM:ENTRY)
                     ->  nats (JetStream, Nats-Msg-Id, the stream's 2-minute window)
    nats-to-redis:   a JetStream stream (id: ROUTE/STREAM#CREATED:SEQ)  ->  redis (the
                     idempotent append)
    file-to-broker-to-jsonl:
                     file events.jsonl  ->  stomp sink to the embedded broker (its duplicate
                     window on bridge-id, kept in its data dir)  ->  stomp source  ->  file
                     outbox/, JSON lines; both routes and the broker in the one process
                     that is killed
    webhook-to-broker:
                     webhooks (webhook-id) posted by a sender that retries until its 2xx
                     ->  http source  ->  stomp sink to the embedded broker (its own
                     process, with a data dir); the queue is counted (bench/crash/http_crash.py)
    stomp-to-http:   the embedded broker's queue (bridge-id)  ->  http sink  ->  a receiver
                     that honours Idempotency-Key: duplicates are effects taken twice
                     (bench/crash/http_crash.py; requests repeated are in ``requests_repeated``)

and four controls, the same pairs with the sink's de-duplication off
(``dedup_window = 0``), held to the at-least-once bound only: they show that
the kills do make the source send messages again (``--only`` them to see).

    jsonl-to-jsonl-off, nats-to-redis-off,
    file-to-broker-to-jsonl-off (broker window and jsonl read-back both off),
    webhook-to-broker-off (the broker's window off)

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
import tempfile
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import http_crash
import trio
from _crash import (
    HOST,
    IN_FLIGHT,
    Direct,
    Factory,
    Scenario,
    Server,
    embedded_broker,
    free_port,
    main,
    private_servers,
    route_table,
)
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


def chain(
    work: Path,
    ids: list[str],
    route: tuple[str, str],
    back: str,
    restart_server: Callable[[], None],
    *,
    off: bool = False,
    extra: str = "",
) -> Scenario:
    """Two routes in one bridge: ROUTE (source, sink), then BACK (the source reading what
    that sink wrote) -> file outbox/, JSON lines, read back on open (OFF: not; a control).
    EXTRA is more config (the broker the two routes share)."""
    outbox = work / "outbox"
    sink = FILE_SINK.replace(" }", ", dedup_window = 0 }") if off else FILE_SINK
    return Scenario(
        *route,
        lambda: sum(outbox_bodies(outbox).values()),
        lambda: outbox_bodies(outbox),
        lambda: len(outbox_bodies(outbox)) >= len(ids),
        restart_server,
        once=not off,
        extra=extra + route_table("deliver", back, sink),
        routes=2,
    )


def through_broker(
    work: Path,
    ids: list[str],
    source: str,
    restart_server: Callable[[], None],
    *,
    off: bool = False,
) -> Scenario:
    """SOURCE -> stomp sink into the bridge's own embedded broker (``[broker]``, its data
    dir and its duplicate window on ``bridge-id``; OFF: no window) -> :func:`chain`'s
    jsonl outbox: the broker dies with every SIGKILL of the bridge. Shared with
    ``kafka_crash.py``'s kafka-broker."""
    stomp = '{ type = "stomp", url = "embedded", destination = "/queue/once" }'
    broker = f"""
[broker]
embedded = true
listen = "{HOST}:{free_port()}"
data_dir = "state"
duplicate_window = {0 if off else max(10_000, len(ids))}
"""
    return chain(work, ids, (source, stomp), stomp, restart_server, off=off, extra=broker)


def file_to_broker_to_jsonl(work: Path, ids: list[str], *, off: bool = False) -> Scenario:
    (work / "events.jsonl").write_text("".join(f"{i}\n" for i in ids))
    return through_broker(work, ids, JSONL_SOURCE, lambda: None, off=off)


def _http_result(result: dict[str, Any], **figures: Any) -> dict[str, Any]:
    """A bench/crash/http_crash.py result in this harness's form."""
    return {
        "messages": result["messages"],
        "kills": result["kills"],
        "server_restarts": 0,
        "held_at_kills": result["done_at_kills"],
        "arrived": result["acknowledged"] - result["lost"],
        "missing": result["lost"] + result["unexpected"],
        "max_copies": result["max_copies"],
        "exit_status": result["exit_status"],
        "seconds": result["seconds"],
        "log_tail": result["log_tail"],
        **figures,
    }


def webhook_to_broker(count: int, kills: int, rng: Any, *, off: bool = False) -> dict[str, Any]:
    options = ("--duplicate-window", "0") if off else ()
    with tempfile.TemporaryDirectory(prefix="once-broker-") as tmp:
        with embedded_broker(data_dir=Path(tmp), options=options) as target:
            result = trio.run(http_crash.inbound, target, count, kills, rng)
    return _http_result(
        result,
        duplicates=result["duplicates"],
        bound=kills * IN_FLIGHT if off else 0,
        # (posts beyond one per webhook: refused while the bridge was down, cut, 503)
        requests_repeated=sum(result["answers"].values()) - result["messages"],
    )


def stomp_to_http(count: int, kills: int, rng: Any) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="once-broker-") as tmp:
        with embedded_broker(data_dir=Path(tmp)) as target:
            result = trio.run(http_crash.outbound, target, count, kills, rng)
    wrong = result["effect_duplicates"] + result["keys_not_the_id"]
    return _http_result(result, duplicates=wrong, bound=0, requests_repeated=result["duplicates"])


SCENARIOS: Final = [
    "jsonl-to-files",
    "jsonl-to-jsonl",
    "redis-to-nats",
    "nats-to-redis",
    "file-to-broker-to-jsonl",
    "webhook-to-broker",
    "stomp-to-http",
    "jsonl-to-jsonl-off",
    "nats-to-redis-off",
    "file-to-broker-to-jsonl-off",
    "webhook-to-broker-off",
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
            "file-to-broker-to-jsonl": file_to_broker_to_jsonl,
            "file-to-broker-to-jsonl-off": functools.partial(file_to_broker_to_jsonl, off=True),
            "webhook-to-broker": Direct(webhook_to_broker),
            "webhook-to-broker-off": Direct(functools.partial(webhook_to_broker, off=True)),
            "stomp-to-http": Direct(stomp_to_http),
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
