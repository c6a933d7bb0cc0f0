"""Test kit for bridges and for endpoint plugin authors, like :mod:`trio.testing` is for Trio.

- :func:`check_source` / :func:`check_sink`: the Source and Sink contracts
  (ack only after durable, nack, close, cancellation), run against a real
  server through a factory of :class:`SourceCase` / :class:`SinkCase`. Every
  endpoint family's tests call them; see "Write an endpoint plugin" in
  ``docs/howto/transforms-plugins.md``.
- :class:`FakeSource` / :class:`FakeSink`: in-memory endpoints that record
  everything, for testing routes, transforms and the engine;
  :class:`FakeBulkSource` hands out many envelopes per call (``receive_some``).
- :func:`check_poison`: the Sink contract's poison rule on its own, for a
  mix of good and hostile messages that a test chooses (Hypothesis draws
  them); :func:`check_sink` runs it with every hostile message once.
- :func:`messages`, :func:`wait_until`: small helpers those tests need.
"""

from ._cases import ContractViolation as ContractViolation
from ._cases import SinkCase as SinkCase
from ._cases import SinkFactory as SinkFactory
from ._cases import SourceCase as SourceCase
from ._cases import SourceFactory as SourceFactory
from ._contract import check_sink as check_sink
from ._contract import check_source as check_source
from ._contract import contract_messages as contract_messages
from ._fakes import FakeBulkSource as FakeBulkSource
from ._fakes import FakeSink as FakeSink
from ._fakes import FakeSource as FakeSource
from ._fakes import messages as messages
from ._fakes import wait_until as wait_until
from ._poison import HOSTILE as HOSTILE
from ._poison import PoisonOutcome as PoisonOutcome
from ._poison import check_poison as check_poison
