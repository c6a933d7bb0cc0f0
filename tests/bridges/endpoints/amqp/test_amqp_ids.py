"""The amqp source's id: bridge-id, else message_id; else empty, or a content digest by choice."""

from __future__ import annotations

from typing import Any

from pamqp import commands

from bridges.endpoints.amqp._channel import Delivery
from bridges.endpoints.amqp._headers import to_headers


def delivered(body: bytes, *, redelivered: bool = False, **properties: Any) -> Delivery:
    return Delivery(body, commands.Basic.Properties(**properties), "", "q", redelivered, 1)


def test_bridge_id_then_message_id() -> None:
    with_both = delivered(b"x", message_id="m-1", headers={"bridge-id": "b-1"})
    assert to_headers(with_both)[1] == "b-1"
    assert to_headers(delivered(b"x", message_id="m-1"))[1] == "m-1"
    # A bridge-id was namespaced where it was set; a message_id goes under the route's.
    assert to_headers(with_both, namespace="r/")[1] == "b-1"
    assert to_headers(delivered(b"x", message_id="m-1"), namespace="r/")[1] == "r/m-1"


def test_without_either_the_id_is_empty_unless_chosen_from_the_content() -> None:
    first = delivered(b"21.5", headers={"k": "v"})
    again = delivered(b"21.5", headers={"k": "v"}, redelivered=True)
    headers, stable = to_headers(again)
    assert stable == ""
    assert headers["amqp-redelivered"] == "true"
    chosen = to_headers(first, id_from_content=True)[1]
    assert chosen.startswith("sha256:")
    assert to_headers(again, id_from_content=True)[1] == chosen  # a redelivery: the same
    other = delivered(b"21.6", headers={"k": "v"})
    assert to_headers(other, id_from_content=True)[1] != chosen
