"""Test kit for bridges and for endpoint plugin authors, like :mod:`trio.testing` is for Trio.

- :class:`FakeSource` / :class:`FakeSink`: in-memory endpoints that record
  everything, for testing routes, transforms and the engine.
- :func:`messages`, :func:`wait_until`: small helpers those tests need.
"""

from ._fakes import FakeSink as FakeSink
from ._fakes import FakeSource as FakeSource
from ._fakes import messages as messages
from ._fakes import wait_until as wait_until
