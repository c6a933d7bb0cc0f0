"""trio_stomp: a structured-concurrency STOMP client for Trio.

::

    async with trio_stomp.connect("stomp://guest:guest@127.0.0.1:61613/?vhost=/") as client:
        async with client.subscribe("/queue/a", ack="client-individual") as sub:
            await client.send("/queue/a", b"hello")
            async for message in sub:
                await message.ack()
                break

The wire format lives in :mod:`trio_stomp.frame` (sans-IO), the embedded
broker in :mod:`trio_stomp.broker`, the test kit in :mod:`trio_stomp.testing`,
pure helpers (URLs, addresses, backoff) in :mod:`trio_stomp.util`, the command
in :mod:`trio_stomp.cli`.

The client's names are imported on first use, not with the package: importing
:mod:`trio_stomp.frame` (a Spark executor, a codec user) must import neither
Trio nor anything of the client. ``from trio_stomp import connect``
and ``trio_stomp.connect`` work as usual.
"""

import importlib as _importlib
from typing import TYPE_CHECKING

from .frame import HEARTBEAT as HEARTBEAT
from .frame import VERSIONS as VERSIONS
from .frame import Frame as Frame
from .frame import FrameParser as FrameParser
from .frame import Headers as Headers
from .frame import Heartbeat as Heartbeat
from .frame import LocalProtocolError as LocalProtocolError
from .frame import ProtocolError as ProtocolError
from .frame import RemoteProtocolError as RemoteProtocolError
from .frame import StompError as StompError
from .frame import encode as encode

if TYPE_CHECKING:
    from ._client import Client as Client
    from ._connect import connect as connect
    from ._connect import wrap_stream as wrap_stream
    from ._errors import ClientClosed as ClientClosed
    from ._errors import ConnectFailed as ConnectFailed
    from ._errors import ConnectionLost as ConnectionLost
    from ._errors import RequestTimeout as RequestTimeout
    from ._errors import ServerError as ServerError
    from ._errors import SubscriptionOverflow as SubscriptionOverflow
    from ._errors import TransactionError as TransactionError
    from ._message import Message as Message
    from ._message import MessageBatch as MessageBatch
    from ._reconnect import ConnectionEvent as ConnectionEvent
    from ._reconnect import Reconnect as Reconnect
    from ._subscription import Subscription as Subscription
    from ._transaction import Transaction as Transaction

if TYPE_CHECKING:
    #: The installed version (pyproject.toml's), read on first use: see ``_version``.
    __version__: str

#: The client's names, loaded by :func:`__getattr__` on first use.
_LAZY: dict[str, str] = {
    "ClientClosed": "._errors",
    "ConnectFailed": "._errors",
    "ConnectionLost": "._errors",
    "RequestTimeout": "._errors",
    "ServerError": "._errors",
    "SubscriptionOverflow": "._errors",
    "TransactionError": "._errors",
    "ConnectionEvent": "._reconnect",
    "Reconnect": "._reconnect",
    "Client": "._client",
    "connect": "._connect",
    "wrap_stream": "._connect",
    "Message": "._message",
    "MessageBatch": "._message",
    "Subscription": "._subscription",
    "Transaction": "._transaction",
}


if not TYPE_CHECKING:  # for mypy the names above are plain imports: a typo stays an error

    def __getattr__(name: str) -> object:
        if name == "__version__":
            from ._version import version

            return version()
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(_importlib.import_module(module, __name__), name)
        globals()[name] = value  # later lookups do not come here
        return value


__all__ = [  # frame's names, then the client's (loaded on first use)
    "HEARTBEAT",
    "VERSIONS",
    "Frame",
    "FrameParser",
    "Headers",
    "Heartbeat",
    "LocalProtocolError",
    "ProtocolError",
    "RemoteProtocolError",
    "StompError",
    "encode",
    *_LAZY,
]


def __dir__() -> list[str]:
    return sorted({*(name for name in globals() if name != "TYPE_CHECKING"), *_LAZY})
