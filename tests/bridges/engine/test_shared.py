"""Process-wide shared resources: opened once, kept across users, closed with the process."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

import bridges


class Tracker:
    def __init__(self) -> None:
        self.opened = 0
        self.closed = 0
        self.fail_next = False

    @asynccontextmanager
    async def open(self) -> AsyncIterator[int]:
        await trio.sleep(0.01)  # an opening takes time: concurrent users must wait for it
        if self.fail_next:
            self.fail_next = False
            raise OSError("cannot bind")
        self.opened += 1
        try:
            yield self.opened
        finally:
            self.closed += 1


async def test_first_user_opens_later_users_share_and_process_end_closes() -> None:
    tracker = Tracker()
    seen: list[int] = []
    async with bridges.open_shared() as shared:

        async def user() -> None:
            async with shared.use("loop", tracker.open) as value:
                seen.append(value)

        async with trio.open_nursery() as nursery:
            for _ in range(5):
                nursery.start_soon(user)
        # Every user has left its block, the resource is still open.
        assert (tracker.opened, tracker.closed) == (1, 0)
        async with shared.use("loop", tracker.open) as again:
            assert again == 1
    assert seen == [1] * 5
    assert (tracker.opened, tracker.closed) == (1, 1)


async def test_failed_opening_reaches_the_caller_and_the_next_use_retries() -> None:
    tracker = Tracker()
    tracker.fail_next = True
    async with bridges.open_shared() as shared:
        with pytest.raises(OSError, match="cannot bind"):
            async with shared.use("http", tracker.open):
                pass  # pragma: no cover - never entered
        async with shared.use("http", tracker.open) as value:
            assert value == 1
    assert tracker.closed == 1


async def test_provided_values_and_shutdown() -> None:
    async with bridges.open_shared() as shared:
        assert shared.get("embedded-broker") is None
        shared.provide("embedded-broker", "broker")
        assert shared.get("embedded-broker") == "broker"
        with pytest.raises(ValueError, match="already provided"):
            shared.provide("embedded-broker", "other")
        shared.close()
        with pytest.raises(trio.ClosedResourceError):
            async with shared.use("new", Tracker().open):
                pass  # pragma: no cover - never entered


async def test_without_a_process_the_resource_is_private_to_the_caller() -> None:
    tracker = Tracker()
    context = bridges.Context()
    async with bridges.shared_resource(context, "loop", tracker.open) as value:
        assert value == 1
        assert tracker.closed == 0
    assert tracker.closed == 1
    async with bridges.open_shared() as shared:
        context = bridges.Context(shared=shared)
        async with bridges.shared_resource(context, "loop", tracker.open):
            pass
        assert tracker.closed == 1  # kept by the process
    assert tracker.closed == 2
