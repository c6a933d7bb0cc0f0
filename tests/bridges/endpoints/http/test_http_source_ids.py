"""The http source's id: the sender's webhook-id, else a random one, or what id_template says."""

from __future__ import annotations

import httpx
import pytest
from http_helpers import running_source

from bridges import Context, InvalidSetting, Message
from bridges.endpoints._id_template import IdTemplate
from bridges.endpoints.http import HttpSource, HttpSourceConfig
from bridges.testing import FakeSink, wait_until


async def test_without_webhook_id_a_retry_gets_a_new_id_unless_a_template_names_one() -> None:
    for template in (None, "{header:http-x-order|}-{body_hash}"):
        sink = FakeSink()
        async with running_source(sink, id_template=template, keep_headers=["x-order"]) as (
            url,
            _,
            _,
        ):
            async with httpx.AsyncClient() as client:
                for _ in range(2):  # the sender's retry: the same request again
                    answer = await client.post(
                        url + "/hooks", content=b"paid", headers={"x-order": "o-7"}
                    )
                    assert answer.status_code == 204
            await wait_until(lambda: len(sink.written) == 2)  # noqa: B023 (awaited here)
        first, second = sink.written
        if template is None:
            assert first != second  # a random id each time: not stable
        else:
            digest = IdTemplate.parse("{body_hash}").render(Message(b"paid"))
            assert first == second == f"o-7-{digest}"


def test_an_id_template_is_checked_when_the_config_is() -> None:
    with pytest.raises(InvalidSetting) as info:
        HttpSource(
            HttpSourceConfig(listen="127.0.0.1:0", path="/h", id_template="{nope}"), Context()
        )
    assert info.value.key == "id_template"


def test_the_template_fields() -> None:
    message = Message(b"body", {"a": "1"}, "own")
    assert IdTemplate.parse("{header:a}:{id}").render(message) == "1:own"
    assert IdTemplate.parse("{header:missing}").render(message) == ""  # never merged
    assert IdTemplate.parse("{header:missing|d}").render(message) == "d"
    digest = IdTemplate.parse("{body_hash}").render(message)
    assert len(digest) == 32
    assert digest != IdTemplate.parse("{body_hash}").render(Message(b"other"))
    assert IdTemplate.parse("{{body_hash}}").render(message) == "{body_hash}"
    with pytest.raises(ValueError, match="empty"):
        IdTemplate.parse("")


async def test_two_senders_with_one_webhook_id_on_two_routes_are_two_ids() -> None:
    # Two senders (two routes, here on their own paths) both number from 1: each id goes
    # under its route's name; a sender's retry on one route keeps its id.
    written: list[str] = []
    for route in ("github", "stripe"):
        sink = FakeSink()
        context = Context(route=route)
        async with running_source(sink, context=context, path=f"/{route}") as (url, _, _):
            async with httpx.AsyncClient() as client:
                for _ in range(2):  # (the sender's retry)
                    answer = await client.post(
                        f"{url}/{route}", content=b"event", headers={"webhook-id": "1"}
                    )
                    assert answer.status_code == 204
            await wait_until(lambda: len(sink.written) == 2)  # noqa: B023 (awaited here)
        written.extend(sink.written)
    assert written == ["github/1", "github/1", "stripe/1", "stripe/1"]
