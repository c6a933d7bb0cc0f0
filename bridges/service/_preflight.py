"""``bridges check --probe``: connect to each route's source and sink, and say what it will give.

A preflight to run before enabling a unit. Each endpoint that can ask its
server what it keeps (``probe()``: Redis's ``appendonly``, a JetStream
stream's storage, a STOMP broker's name with the sink's ``persistent`` and
destination) is asked, under a deadline; the others are named with what the
guarantee table says their target must be configured with. Per route, one
line: the weaker of what its source's server and its sink's target keep.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final

import trio

from .._flow import one_line
from .._guarantee import AT_MOST_ONCE, DURABLE, NOT_ASKED, PROBE_TIMEOUT, Guarantee

if TYPE_CHECKING:
    from .._config import BrokerSettings
    from .._engine import Route

#: How long one endpoint's probe may take, connecting included, s.
ENDPOINT_TIMEOUT: Final = PROBE_TIMEOUT + 10.0

#: What an endpoint that cannot ask its target rests on, by role and ``describe()``'s first word.
_NOT_ASKABLE: Final = {
    ("sink", "file"): "files on this machine's disk, fsynced",
    ("sink", "http"): "the receiver's 2xx: durable when it stores before answering",
    ("sink", "mqtt"): "Mosquitto cannot be asked: with persistence true its autosave_interval "
    "decides (1800 s by default: a SIGKILL loses what it PUBACKed since)",
    ("sink", "amqp"): "RabbitMQ cannot be asked whether the queue is durable over AMQP "
    "(rabbitmqctl list_queues name durable says)",
    ("source", "file"): "files on this machine's disk",
    ("source", "http"): "the sender keeps what it sent until the 2xx",
    ("source", "mqtt"): "Mosquitto keeps a persistent session's messages as its "
    "persistence and autosave_interval say (not asked)",
    ("source", "amqp"): "the queue keeps what its publishers sent persistent (not asked)",
}


async def _ask(role: str, endpoint: object) -> Guarantee:
    """The endpoint's answer; a failure to reach it raises (the caller names it)."""
    probe = getattr(endpoint, "probe", None)
    if probe is None:
        family = endpoint.describe().split(" ", 1)[0] if hasattr(endpoint, "describe") else "?"
        return Guarantee(NOT_ASKED, _NOT_ASKABLE.get((role, family), "nothing to ask"))
    with trio.fail_after(ENDPOINT_TIMEOUT):
        answer: Guarantee = await probe()
    return answer


def route_guarantee(source: Guarantee, sink: Guarantee) -> str:
    """One route's line: the weaker of what its source's server and its sink's target keep."""
    if sink.level == AT_MOST_ONCE:
        return f"{AT_MOST_ONCE} (its sink's target: {sink.reason})"
    if source.level == AT_MOST_ONCE:
        return f"at most once across a restart of its source's server ({source.reason})"
    if sink.level == DURABLE:
        return f"{DURABLE} ({sink.reason})"
    return f"as the guarantee table says for its sink ({sink.reason})"


def broker_line(broker: BrokerSettings) -> str | None:
    """What the embedded broker keeps, when the config starts one."""
    if not broker.embedded:
        return None
    if broker.data_dir is not None:
        return f"[broker] embedded, data_dir {broker.data_dir}: {DURABLE} (SQLite, fsynced)"
    return (
        f"[broker] embedded without data_dir: {AT_MOST_ONCE} (what its queues hold is lost "
        "at every stop: set data_dir)"
    )


async def probe_routes(
    routes: Sequence[Route], broker: BrokerSettings, say: Callable[[str], None]
) -> tuple[int, int]:
    """Ask every route's source and sink; say one line per route and per failure.

    Returns:
      (endpoints that could not be reached, routes weaker than durable).
    """
    unreachable = 0
    weaker = 0
    if (line := broker_line(broker)) is not None:
        say(f"  {line}")
        weaker += broker.data_dir is None
    for route in routes:
        answers: dict[str, Guarantee] = {}
        for role, endpoint in (("source", route.source), ("sink", route.sink)):
            try:
                answers[role] = await _ask(role, endpoint)
            except Exception as exc:  # (each family's own errors: named, never a traceback)
                unreachable += 1
                say(f"  {route.name}: {role} not reached: {one_line(exc)}")
        if len(answers) < 2:
            continue
        source, sink = answers["source"], answers["sink"]
        weaker += source.weaker or sink.weaker
        say(f"  {route.name}: {route_guarantee(source, sink)}")
        say(f"    source: {source}")
        say(f"    sink: {sink}")
    return unreachable, weaker
