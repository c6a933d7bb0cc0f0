"""trio_stomp: a structured-concurrency STOMP client for Trio.

::

    async with trio_stomp.connect("stomp://guest:guest@127.0.0.1:61613/?vhost=/") as client:
        async with client.subscribe("/queue/a", ack="client-individual") as sub:
            await client.send("/queue/a", b"hello")
            async for message in sub:
                await message.ack()
                break

The wire format lives in :mod:`trio_stomp.frame` (sans-IO), the embedded
broker in :mod:`trio_stomp.broker`.
"""

from ._client import Client as Client
from ._connect import connect as connect
from ._connect import wrap_stream as wrap_stream
from ._errors import ClientClosed as ClientClosed
from ._errors import ConnectFailed as ConnectFailed
from ._errors import ConnectionLost as ConnectionLost
from ._errors import LocalProtocolError as LocalProtocolError
from ._errors import ProtocolError as ProtocolError
from ._errors import RemoteProtocolError as RemoteProtocolError
from ._errors import ServerError as ServerError
from ._errors import StompError as StompError
from ._errors import SubscriptionOverflow as SubscriptionOverflow
from ._errors import TransactionError as TransactionError
from ._message import Message as Message
from ._reconnect import ConnectionEvent as ConnectionEvent
from ._reconnect import Reconnect as Reconnect
from ._subscription import Subscription as Subscription
from ._transaction import Transaction as Transaction
from .frame import HEARTBEAT as HEARTBEAT
from .frame import VERSIONS as VERSIONS
from .frame import Frame as Frame
from .frame import FrameParser as FrameParser
from .frame import Headers as Headers
from .frame import Heartbeat as Heartbeat
from .frame import encode as encode

__version__ = "0.1.0"
