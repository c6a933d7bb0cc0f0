"""The http sink's Idempotency-Key, and a receiver that honours it: one effect per message;
ids that are not visible ASCII, percent-encoded into the headers."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

import pytest
from http_helpers import Recorder, receiver
from hypothesis import assume, given
from hypothesis import strategies as st

from bridges import Context, InvalidSetting, Message, RetryPolicy, Route
from bridges.endpoints._header_id import header_id
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
        ['"m0"', '"m1"', '"say%20\\"hi\\"%20\\\\%20there"', None], key=str
    )  # no id: no key


async def test_idempotency_key_off_and_ids_it_cannot_carry() -> None:
    recorder = Recorder()
    async with receiver(recorder) as server:
        off = HttpSinkConfig(url=server.url + "/in", idempotency_key=False)
        await Route("o", FakeSource(messages(1)), HttpSink(off, CTX)).run()
    assert "idempotency-key" not in recorder.requests[0][2]
    assert recorder.ids() == ["m0"]  # webhook-id is always sent
    assert idempotency_key("tab\there") == '"tab%09here"'
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


@given(st.text())
def test_any_id_makes_a_valid_deterministic_and_distinct_header(message_id: str) -> None:
    value = header_id(message_id)
    assert value.isascii()
    assert all("!" <= c <= "~" for c in value)  # visible ASCII: no space, CR, LF, NUL, DEL
    assert header_id(message_id) == value  # the same message, the same key
    assert unquote(value, errors="surrogatepass") == message_id  # reversible: distinct ids,
    assert idempotency_key(message_id) == sfv_string(value)  # distinct keys


@given(st.text(), st.text())
def test_distinct_ids_never_share_a_key(one: str, other: str) -> None:
    assume(one != other)
    assert header_id(one) != header_id(other)
    assert idempotency_key(one) != idempotency_key(other)


def sfv_string(text: str) -> str:
    """``text`` as a Structured Fields string (RFC 8941 3.3.3), written out by hand."""
    return '"' + "".join("\\" + c if c in '\\"' else c for c in text) + '"'


async def test_ids_that_are_not_visible_ascii_are_sent_percent_encoded_not_dead_lettered() -> None:
    recorder = Recorder()
    odd = ["café.json@17", "line\r\nbreak", " padded ", "100%", "é" * 2000, "\udce9"]
    batch = [Message(b"x", {}, message_id) for message_id in odd]
    async with receiver(recorder) as server:
        sink = HttpSink(HttpSinkConfig(url=server.url + "/in", concurrency=1), CTX)
        await Route("o", FakeSource(batch), sink, retry=FAST).run()
    sent = [headers for _, _, headers, _ in recorder.requests]
    assert [h["webhook-id"] for h in sent] == [
        "caf%C3%A9.json@17",
        "line%0D%0Abreak",
        "%20padded%20",
        "100%25",
        "%C3%A9" * 2000,
        "%ED%B3%A9",
    ]
    assert [h["idempotency-key"] for h in sent] == [f'"{h["webhook-id"]}"' for h in sent]
