"""pytest plugin: a ``stomp_broker`` fixture, for testing your code against STOMP.

Installed with trio-stomp and loaded by pytest automatically (through the
``pytest11`` entry point), so there is nothing to configure. The fixture is
a Trio fixture: it needs pytest-trio, and a test marked ``@pytest.mark.trio``
(or ``trio_mode = true`` in the pytest configuration)::

    import pytest
    import trio_stomp

    @pytest.mark.trio
    async def test_order_is_published(stomp_broker):
        async with trio_stomp.connect(stomp_broker.url) as client:
            ...

Each test gets its own embedded broker (:func:`trio_stomp.broker.open_broker`)
on a free loopback port, with no users configured (any login is accepted) and
the default :class:`~trio_stomp.broker.Limits`. It stops when the test ends:
clients still connected then get an ERROR ("broker shutting down"). The
broker object gives ``url``, ``host``, ``port``, ``queue_depth(destination)``
and ``connection_count``. For other settings, write your own fixture the
same way: ``async with open_broker(users=..., limits=...) as broker: yield
broker``.

The broker's duplicate window is **off** (the default ``Limits``): every
SEND is delivered, also a second one that reuses a ``bridge-id`` header with
another body (any message that passed through a ``bridges`` route carries
one). To test a producer that relies on the broker dropping repeats, as the
``bridges`` embedded broker does, write a fixture with
``limits=Limits(duplicate_window=10_000)``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from ..broker import Broker, open_broker


@pytest.fixture
async def stomp_broker() -> AsyncIterator[Broker]:
    """A running embedded STOMP broker on a free loopback port, for one test."""
    async with open_broker() as broker:
        yield broker
