"""MESSAGE frames from parts (broker/_wire.py) are the frames the careful encoder makes.

Both builds are held to it: the module as it runs (compiled, in a compiled
build) and its Python source, loaded on its own, so the pure fallback stays
tested whichever build runs the suite.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_broker_model import connected

import trio_stomp.broker._wire as running
from trio_stomp.broker._destinations import Router
from trio_stomp.broker._message import new_message
from trio_stomp.broker._negotiation import encode_message
from trio_stomp.frame import Frame, FrameParser


def _pure() -> ModuleType:
    source = Path(running.__file__).with_name("_wire.py")
    spec = importlib.util.spec_from_file_location("_wire_pure", source)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PURE = _pure()
BUILDS = pytest.mark.parametrize("wire", [running, PURE], ids=["running", "pure"])

#: Header text with everything escaping touches, and what takes the careful way.
text = st.text(st.sampled_from("ab:\\\r\n\0é"), max_size=5)
headers = st.lists(st.tuples(text, text), max_size=4).map(tuple)


@BUILDS
@given(
    destination=text,
    message_id=text,
    own=headers,
    body=st.binary(max_size=8),
    sub_id=text,
    ack_id=st.sampled_from(["", "7", "12"]),
    redelivered=st.booleans(),
    version=st.sampled_from(["1.1", "1.2"]),
)
def test_a_delivery_from_parts_is_the_careful_encoding(
    wire: ModuleType,
    destination: str,
    message_id: str,
    own: tuple[tuple[str, str], ...],
    body: bytes,
    sub_id: str,
    ack_id: str,
    redelivered: bool,
    version: str,
) -> None:
    head, tail = wire.message_parts(destination, message_id, own, len(body))
    line = wire.subscription_line(sub_id)
    pairs = [("destination", destination), ("message-id", message_id), ("subscription", sub_id)]
    careful = [*pairs, *own]
    if not (tail and line):  # the careful way, where some header needs it
        assert any("\r" in n + v or "\n" in n + v or "\0" in n + v or not n for n, v in careful)
        return
    expected_pairs = list(pairs)
    if ack_id:
        expected_pairs.append(("ack", ack_id))
    if redelivered:
        expected_pairs.append(("redelivered", "true"))
    expected = encode_message([*expected_pairs, *own], body, version)
    assert wire.delivery(head, line, ack_id, redelivered, tail, body) == expected


@BUILDS
def test_careful_headers_have_no_parts(wire: ModuleType) -> None:
    assert wire.message_parts("/queue/a", "m-1", (("x", "a\rb"),), 1) == (b"", b"")
    assert wire.message_parts("/queue/a\n", "m-1", (), 1) == (b"", b"")
    assert wire.message_parts("/queue/a", "m-1", (("", "v"),), 1) == (b"", b"")
    assert wire.subscription_line("a\0b") == b""
    head, tail = wire.message_parts("/queue/a:b", "m-1", (("k\\", "v"),), 0)
    assert head == b"MESSAGE\ndestination:/queue/a\\cb\nmessage-id:m-1\n"
    assert tail == b"k\\\\:v\n\n"  # (no content-length for an empty body)


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_a_message_with_a_carriage_return_is_delivered_the_careful_way(version: str) -> None:
    """Its parts are empty; each version still gets it, the header it cannot carry left out."""
    router = Router()
    consumer = connected(router, version)
    consumer.send("SUBSCRIBE", {"id": "s", "destination": "/queue/a", "ack": "client"})
    producer = connected(router)
    producer.send("SEND", {"destination": "/queue/a", "x": "a\rb", "y": "ok"}, b"body")
    (message,) = consumer.output()
    assert message.command == "MESSAGE"
    assert message.body == b"body"
    assert message.headers["y"] == "ok"
    assert message.headers.get("x") == ("a\rb" if version == "1.2" else None)
    if version == "1.2":
        assert message.headers["ack"]


def test_new_messages_carry_their_parts() -> None:
    message = new_message("m-1", "/queue/a", (("k", "v"),), b"xyz")
    assert message.head == b"MESSAGE\ndestination:/queue/a\nmessage-id:m-1\n"
    assert message.tail == b"k:v\ncontent-length:3\n\n"
    redelivered = message._replace(redelivered=True)
    assert (redelivered.head, redelivered.tail) == (message.head, message.tail)
    data = running.delivery(message.head, b"subscription:s\n", "", True, message.tail, b"xyz")
    (frame,) = FrameParser("1.2").feed(data)
    assert isinstance(frame, Frame)
    assert frame.headers.items() == (
        ("destination", "/queue/a"),
        ("message-id", "m-1"),
        ("subscription", "s"),
        ("redelivered", "true"),
        ("k", "v"),
        ("content-length", "3"),
    )


@BUILDS
@given(own=st.lists(st.tuples(st.sampled_from(["a", "receipt", "ack", "b"]), text)).map(tuple))
def test_kept_headers_leave_out_the_reserved(
    wire: ModuleType, own: tuple[tuple[str, str], ...]
) -> None:
    reserved = frozenset({"receipt", "ack"})
    assert wire.kept_headers(own, reserved) == tuple(p for p in own if p[0] not in reserved)
