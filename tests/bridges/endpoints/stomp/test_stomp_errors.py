"""A route's error says what the broker said in its ERROR frame, with secrets masked."""

from __future__ import annotations

from collections.abc import Callable

import trio

import trio_stomp
from bridges import Context, Route
from bridges._flow import one_line
from bridges._redact import redacting
from bridges.endpoints.stomp import StompSource, StompSourceConfig
from bridges.testing import FakeSink, wait_until
from trio_stomp.frame import Frame

from conftest import REAL_BROKERS, require_real_broker

RABBITMQ = REAL_BROKERS["rabbitmq"]


async def test_a_route_error_says_what_rabbitmq_said_and_keeps_secrets_out(
    unique: Callable[[str], str],
) -> None:
    require_real_broker("rabbitmq")
    name = unique("queue").rsplit("/", 1)[1]
    config = StompSourceConfig(url=RABBITMQ, destination=f"/amq/queue/{name}")
    route = Route("r", StompSource(config, Context(route="r")), FakeSink())
    with redacting({name}):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(route.run)
            with trio.fail_after(20):
                await wait_until(lambda: route.stats.error is not None)
            nursery.cancel_scope.cancel()
        error = route.stats.error
        assert error is not None
        assert "ServerError: not_found: NOT_FOUND - no queue '***' in vhost '/'" in error
        frame = Frame("ERROR", {"message": "bad"}, f"you sent {name}".encode())
        assert name not in one_line(trio_stomp.ServerError("bad", frame))
