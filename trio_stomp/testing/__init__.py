"""Tools for testing STOMP code, the way :mod:`trio.testing` serves Trio code.

- :class:`FakePeer`: a scripted broker over a memory stream, for exact control
  of what a client hears and when (heart-beats, ERROR, silence).
- :class:`RawClient` / :func:`open_raw_client`: a STOMP peer with no client
  logic, for testing servers on the wire.
- :class:`FaultProxy` / :func:`fault_proxy`: a loopback TCP proxy that cuts,
  stalls, delays and splits connections on command.
- :func:`lossless_run`: the at-least-once check: numbered messages through two
  reconnecting clients while something disrupts them; the :class:`Tally` says
  what was lost and duplicated.
- The pytest plugin (:mod:`trio_stomp.testing.pytest_plugin`, loaded by pytest
  automatically) gives a ``stomp_broker`` fixture. This package itself does not
  import pytest.
"""

from ._fake_peer import FakePeer as FakePeer
from ._fault_proxy import FaultProxy as FaultProxy
from ._fault_proxy import Tally as Tally
from ._fault_proxy import fault_proxy as fault_proxy
from ._fault_proxy import lossless_run as lossless_run
from ._raw_client import Listening as Listening
from ._raw_client import RawClient as RawClient
from ._raw_client import open_raw_client as open_raw_client
