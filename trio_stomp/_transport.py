"""Opening the byte stream a STOMP session runs over.

:func:`open_stream` turns an :class:`Endpoint` into a connected Trio stream.
The client speaks STOMP over whatever it returns (see ``wrap_stream``).
"""

from __future__ import annotations

import ssl

import trio

from ._errors import ConnectFailed
from ._url import Endpoint


async def open_stream(
    endpoint: Endpoint, *, ssl_context: ssl.SSLContext | None = None
) -> trio.abc.Stream:
    """Connect to ``endpoint`` and return the stream.

    Raises:
      ConnectFailed: the address refused, or could not be reached.
    """
    try:
        return await trio.open_tcp_stream(endpoint.host, endpoint.port)
    except OSError as exc:
        raise ConnectFailed(
            f"cannot connect to {endpoint.host}:{endpoint.port}: {exc.strerror or exc}"
        ) from exc
