"""The nats source's pull requests: their waits, what a close waits for, ids from ack subjects."""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st
from nats.aio.msg import Msg
from nats_servers import require_nats, stream

from bridges import Context, Message
from bridges.endpoints.nats import NatsSource, NatsSourceConfig
from bridges.endpoints.nats.source import FETCH_WAIT, FIRST_WAIT, _NatsReceiver, _stream_sequence


async def test_a_source_closed_after_its_last_message_waits_ms_not_the_fetch_wait() -> None:
    url = require_nats()
    async with stream(url) as (name, aio, js):
        for i in range(20):
            await aio.run(js.publish, f"{name}.a", b"%d" % i)
        config = NatsSourceConfig(url=url, stream=name, subject=f"{name}.>", durable="bridge")
        source = NatsSource(config, Context(in_flight=50))
        with trio.fail_after(10):
            async with source.open() as receiver:
                taken: list[Any] = []
                while len(taken) < 20:
                    taken += await receiver.receive_some(50)
                for envelope in taken:
                    await envelope.ack()
                closing = trio.current_time()
            # The request under way asked for more than there was: it ends within
            # its expiry, which starts at FIRST_WAIT after a delivery.
            assert trio.current_time() - closing < FETCH_WAIT
            assert sorted(int(e.message.body) for e in taken) == list(range(20))
            async with source.open() as receiver:
                with trio.move_on_after(0.3) as quiet:
                    await receiver.receive()
                assert quiet.cancelled_caught  # (the acks reached the server)


class _Aio:
    """Runs "asyncio" calls in place: enough for the receiver's requests."""

    async def run(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any, **kw: Any) -> Any:
        return await fn(*args, **kw)


class _Client:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.sent = trio.Event()

    def new_inbox(self) -> str:
        return "_INBOX.test"

    async def publish(self, subject: str, payload: bytes, reply: str = "") -> None:
        self.requests.append(json.loads(payload))
        self.sent.set()


def _status(code: str) -> Msg:
    return Msg(None, subject="_INBOX.test", headers={"Status": code})  # type: ignore[arg-type]


def _delivery(sequence: int) -> Msg:
    reply = f"$JS.ACK.S.bridge.1.{sequence}.{sequence}.1700000000000000000.0"
    return Msg(None, subject="S.a", reply=reply, data=b"m")  # type: ignore[arg-type]


async def test_pull_requests_wait_longer_while_nothing_comes_and_short_after_a_delivery() -> None:
    client = _Client()
    config = NatsSourceConfig(stream="S", durable="bridge")
    receiver = _NatsReceiver(_Aio(), client, config, window=10, fetch=10)  # type: ignore[arg-type]

    async def answer(*msgs: Msg) -> dict[str, Any]:
        """The request under way, once ``msgs`` answered it (and the next one is out)."""
        await trio.testing.wait_all_tasks_blocked()
        request = client.requests[-1]
        client.sent = trio.Event()
        for msg in msgs:
            await receiver.on_message(msg)
        await client.sent.wait()
        return request

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(receiver.pull_forever)
            first = await answer(_status("408"))  # nothing came within its expiry
            second = await answer(_delivery(1), _status("408"))  # one, then its expiry
            third = await answer(_status("404"))  # (a server's "nothing": the same)
            fourth = client.requests[-1]
            nursery.cancel_scope.cancel()
    assert first == {"batch": 10, "expires": int(FIRST_WAIT * 1e9)}
    assert second == {"batch": 10, "expires": int(2 * FIRST_WAIT * 1e9)}
    # After a delivery: back to the shortest wait, for what the window has room for.
    assert third == {"batch": 9, "expires": int(FIRST_WAIT * 1e9)}
    assert fourth == {"batch": 9, "expires": int(2 * FIRST_WAIT * 1e9)}
    assert [envelope.message.id for envelope in await receiver.receive_some(5)] == ["S:1"]


_token = st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZ_-0123456789", min_size=1, max_size=12)
_number = st.integers(min_value=1, max_value=2**63 - 1).map(str)


@given(
    stream=_token,
    consumer=_token,
    numbers=st.lists(_number, min_size=5, max_size=5),
    v2=st.none() | st.tuples(_token, _token, _token),
)
def test_the_stream_sequence_is_read_from_the_ack_subject_as_nats_py_reads_it(
    stream: str, consumer: str, numbers: list[str], v2: tuple[str, str, str] | None
) -> None:
    delivered, sequence, consumer_sequence, timestamp, pending = numbers
    tail = [stream, consumer, delivered, sequence, consumer_sequence, timestamp, pending]
    if v2 is None:
        tokens = ["$JS", "ACK", *tail]
    else:
        domain, account, token = v2
        tokens = ["$JS", "ACK", domain, account, *tail, token]
    reply = ".".join(tokens)
    assert _stream_sequence(reply) == Msg.Metadata._from_reply(reply).sequence.stream
    assert Message(b"", {}, f"S:{_stream_sequence(reply)}").id == f"S:{int(sequence)}"
