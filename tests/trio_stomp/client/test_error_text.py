"""An ERROR frame's explanation reaches ``str()`` of the exception, bounded and on one line."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

import trio_stomp
from trio_stomp._errors import MAX_EXPLANATION_CHARS
from trio_stomp.broker import open_broker
from trio_stomp.frame import Frame
from trio_stomp.testing import FakePeer

from conftest import REAL_BROKERS, require_real_broker

RABBITMQ = REAL_BROKERS["rabbitmq"]


async def consume(url: str, destination: str, headers: dict[str, str] | None = None) -> None:
    async with trio_stomp.connect(url) as client:
        async with client.subscribe(destination, headers=headers) as sub:
            with trio.fail_after(10):
                async for _ in sub:
                    pass


def test_the_message_header_and_the_body_both_show() -> None:
    frame = Frame("ERROR", {"message": "not_found"}, b"NOT_FOUND - no queue 'x' in vhost '/'\n")
    error = trio_stomp.ServerError("not_found", frame)
    assert str(error) == "not_found: NOT_FOUND - no queue 'x' in vhost '/'"
    assert error.message == "not_found"


@given(st.text(max_size=300), st.binary(max_size=2000))
def test_the_text_is_one_bounded_line(message: str, body: bytes) -> None:
    text = str(trio_stomp.ServerError(message, Frame("ERROR", {"message": message}, body)))
    assert text
    assert not any(ord(char) < 32 or ord(char) == 127 for char in text)
    assert len(text) <= 2 * (MAX_EXPLANATION_CHARS * 4 + 3) + 2  # (escapes are 4 chars at most)


async def test_rabbitmq_says_which_queue_is_missing(unique: Callable[[str], str]) -> None:
    require_real_broker("rabbitmq")
    missing = "/amq/queue/" + unique("queue").rsplit("/", 1)[1]
    with pytest.raises(trio_stomp.ServerError) as caught:
        await consume(RABBITMQ, missing)
    assert "not_found: NOT_FOUND - no queue" in str(caught.value)


async def test_rabbitmq_says_why_the_login_was_refused() -> None:
    require_real_broker("rabbitmq")
    url = "stomp://guest:not-the-passcode@127.0.0.1:61613/?vhost=/"
    with pytest.raises(trio_stomp.ConnectFailed) as caught:
        async with trio_stomp.connect(url):
            pass
    text = str(caught.value)
    assert "Bad CONNECT: Access refused for user 'guest'" in text
    assert "not-the-passcode" not in text


async def test_the_embedded_brokers_error_shows_whole() -> None:
    async with open_broker() as broker:
        with pytest.raises(trio_stomp.ServerError) as caught:
            await consume(broker.url, "/queue/a", {"selector": "a >>> 5"})
    text = str(caught.value)
    # The header names the problem, the body's first line the selector.
    assert text.startswith("invalid selector: at position 4")
    assert text.endswith("found '>': a >>> 5")


async def test_a_connect_error_that_echoes_the_passcode_does_not_show_it() -> None:
    client_end, server_end = trio.testing.memory_stream_pair()
    peer = FakePeer(server_end)
    async with trio.open_nursery() as nursery:

        async def serve() -> None:
            connect = await peer.receive()
            echoed = f"passcode:{connect.headers['passcode']}\n\nbad".encode()
            await peer.send("ERROR", {"message": "Bad CONNECT"}, echoed)
            await server_end.aclose()

        nursery.start_soon(serve)
        with pytest.raises(trio_stomp.ConnectFailed) as caught:
            async with trio_stomp.wrap_stream(client_end, login="u", passcode="hunter22"):
                pytest.fail("the block must not run")
    assert str(caught.value) == "the broker refused the connection: Bad CONNECT: passcode:***"
