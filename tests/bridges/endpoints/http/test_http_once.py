"""The http sink's Idempotency-Key, and a receiver that honours it: one effect per message."""

from __future__ import annotations

from typing import Any

import pytest
from http_helpers import Recorder, receiver

from bridges import Context, InvalidSetting, Message, RetryPolicy, Route
from bridges.endpoints.http import HttpSink, HttpSinkConfig
from bridges.endpoints.http.sink import idempotency_key
from bridges.testing import FakeSource, messages

CTX = Context(route="o", role="sink")
FAST = RetryPolicy(attempts=5, initial=0.02, max=0.1, jitter=0)


class Honouring:
    """A receiver keeping the contract: the key and the effect stored together, a repeat
    answered as the first was. ``lose`` answers: the first answers to new keys fail (500)
    after the effect was stored, as when an answer is lost on the way back."""

    def __init__(self, lose: int) -> None:
        self.lose = lose
        self.effects: list[bytes] = []
        self.answered: dict[str, int] = {}
        self.requests = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        body = b""
        while True:
            event = await receive()
            body += event.get("body", b"")
            if not event.get("more_body"):
                break
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        self.requests += 1
        key = headers["idempotency-key"]
        if key not in self.answered:
            self.effects.append(body)  # (one transaction with the key, in a real receiver)
            self.answered[key] = 200
        status = self.answered[key]
        if self.lose:
            self.lose -= 1
            status = 500
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b""})


async def test_every_request_carries_the_id_as_idempotency_key() -> None:
    recorder = Recorder(script=[(500, {}, b"boom")])
    batch = [*messages(2), Message(b"q", {}, 'say "hi" \\ there'), Message(b"none")]
    async with receiver(recorder) as server:
        sink = HttpSink(HttpSinkConfig(url=server.url + "/in", concurrency=1), CTX)
        await Route("o", FakeSource(batch), sink, retry=FAST).run()
    keys = [headers.get("idempotency-key") for _, _, headers, _ in recorder.requests]
    assert keys[0] == '"m0"'  # the first answer was 500: retried with the same key
    assert sorted(keys[1:], key=str) == sorted(
        ['"m0"', '"m1"', '"say \\"hi\\" \\\\ there"', None], key=str
    )  # no id: no key


async def test_idempotency_key_off_and_ids_it_cannot_carry() -> None:
    recorder = Recorder()
    async with receiver(recorder) as server:
        off = HttpSinkConfig(url=server.url + "/in", idempotency_key=False)
        await Route("o", FakeSource(messages(1)), HttpSink(off, CTX)).run()
    assert "idempotency-key" not in recorder.requests[0][2]
    assert recorder.ids() == ["m0"]  # webhook-id is always sent
    assert idempotency_key("tab\there") is None
    assert idempotency_key("") == '""'


def test_the_headers_setting_cannot_set_the_key() -> None:
    with pytest.raises(InvalidSetting) as info:
        HttpSink(HttpSinkConfig(url="http://x/", headers={"Idempotency-Key": "k"}), CTX)
    assert info.value.key == "headers.Idempotency-Key"


async def test_a_receiver_that_honours_the_key_sees_each_message_take_effect_once() -> None:
    app = Honouring(lose=3)
    async with receiver(app) as server:  # type: ignore[arg-type]
        sink = HttpSink(HttpSinkConfig(url=server.url + "/in"), CTX)
        await Route("o", FakeSource(messages(10)), sink, retry=FAST).run()
        # A crash before the acks: the source sends them all again.
        await Route("o", FakeSource(messages(10)), sink, retry=FAST).run()
    assert app.requests >= 23
    assert sorted(app.effects) == sorted(m.body for m in messages(10))
