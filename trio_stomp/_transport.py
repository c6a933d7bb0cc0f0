"""Opening the byte stream a STOMP session runs over.

:func:`open_stream` turns one :class:`Endpoint` into a connected Trio stream:
TCP, then TLS when the URL asks for it, then the WebSocket upgrade when the
URL is ``ws://`` or ``wss://``. The client speaks STOMP over whatever it
returns (see ``wrap_stream``), and reconnect and failover call it once per
attempt. Every failure to reach the broker comes out as
:class:`ConnectFailed` with the cause in words; on any failure the partial
stream is closed.

Nothing here starts a task: the returned stream is just an object, so it
cannot outlive the ``async with`` that closes it.
"""

from __future__ import annotations

import functools
import importlib
import ssl
from types import ModuleType

import trio

from ._errors import ConnectFailed
from ._url import Endpoint

WEBSOCKET_EXTRA_HINT = "pip install 'trio-stomp[websocket]'"


async def open_stream(
    endpoint: Endpoint, *, ssl_context: ssl.SSLContext | None = None
) -> trio.abc.Stream:
    """Connect to ``endpoint`` and return the stream, ready for CONNECT.

    The caller bounds the time it takes (``connect()`` applies its
    ``connect_timeout``).

    Args:
      endpoint: where and how to connect (see :class:`Endpoint`).
      ssl_context: the TLS settings for a TLS endpoint (``stomp+ssl://``,
        ``wss://``). None means :func:`ssl.create_default_context`: the
        system's trusted CAs, and the certificate must name ``endpoint.host``
        (unlike stomp.py, which verifies nothing unless told to).

    Returns:
      A :class:`trio.SocketStream`, a :class:`trio.SSLStream` over one, or a
      WebSocket stream over either.

    Raises:
      ConnectFailed: the address refused or could not be reached, the TLS
        handshake failed (the message says why: an untrusted certificate, a
        certificate for another host, not a TLS port), or the WebSocket
        upgrade was refused.
      ValueError: ``ssl_context`` was given for an endpoint without TLS (a
        plain ``stomp://`` URL would silently ignore it).
      ImportError: a WebSocket endpoint, and the ``websocket`` extra is not
        installed.
    """
    if ssl_context is not None and not endpoint.tls:
        raise ValueError(
            f"ssl_context was given but {endpoint.url} does not use TLS; "
            "use a stomp+ssl:// or wss:// URL"
        )
    websocket = load_websocket() if endpoint.transport == "websocket" else None
    try:
        stream: trio.abc.Stream = await trio.open_tcp_stream(endpoint.host, endpoint.port)
    except OSError as exc:
        raise ConnectFailed(f"cannot connect to {endpoint.url}: {_why(exc)}") from exc
    try:
        if endpoint.tls:
            stream = await _start_tls(stream, endpoint, ssl_context)
        if websocket is not None:
            try:
                stream = await websocket.connect_websocket(
                    stream,
                    host=endpoint.host,
                    port=endpoint.port,
                    resource=endpoint.path,
                    tls=endpoint.tls,
                )
            except trio.BrokenResourceError as exc:
                raise ConnectFailed(
                    f"the connection to {endpoint.url} broke during the WebSocket upgrade: {exc}"
                ) from exc
    except BaseException:
        await trio.aclose_forcefully(stream)
        raise
    return stream


def load_websocket() -> ModuleType:
    """Import the WebSocket support, which needs the optional ``websocket`` extra.

    Raises:
      ImportError: wsproto is not installed; the message says how to get it.
    """
    try:
        return importlib.import_module(f"{__package__}._websocket")
    except ImportError as exc:
        raise ImportError(
            f"STOMP over WebSocket needs the websocket extra: {WEBSOCKET_EXTRA_HINT} ({exc})"
        ) from exc


@functools.cache
def _default_context() -> ssl.SSLContext:
    # Loading the system CAs takes milliseconds: once per process, not per
    # (re)connection attempt. Nothing here changes the context afterwards.
    return ssl.create_default_context()


async def _start_tls(
    stream: trio.abc.Stream, endpoint: Endpoint, ssl_context: ssl.SSLContext | None
) -> trio.SSLStream[trio.abc.Stream]:
    """Run the TLS handshake over ``stream``; map its failures to ConnectFailed."""
    context = ssl_context if ssl_context is not None else _default_context()
    # https_compatible: no close_notify is required of the broker on close.
    # STOMP frames delimit themselves, so a truncated stream cannot pass for
    # a complete frame, and brokers that drop the TCP connection after an
    # ERROR then read as a clean end rather than a TLS error.
    tls = trio.SSLStream(stream, context, server_hostname=endpoint.host, https_compatible=True)
    try:
        await tls.do_handshake()
    except trio.BrokenResourceError as exc:
        raise ConnectFailed(_tls_failure(endpoint, exc.__cause__)) from exc
    return tls


def _tls_failure(endpoint: Endpoint, cause: BaseException | None) -> str:
    where = endpoint.url
    if isinstance(cause, ssl.SSLCertVerificationError):
        detail = cause.verify_message or str(cause)
        if cause.verify_code in (62, 64):  # X509_V_ERR_HOSTNAME/IP_ADDRESS_MISMATCH
            hint = f"the certificate does not name {endpoint.host!r}"
        else:
            hint = "pass ssl_context= with the CA that signed the broker's certificate"
        return f"TLS certificate verification failed for {where}: {detail} ({hint})"
    if isinstance(cause, ssl.SSLEOFError) or cause is None:
        return f"{where} closed the connection during the TLS handshake"
    if isinstance(cause, ssl.SSLError):
        reason = cause.reason or str(cause)
        hint = " (is that port speaking TLS?)" if "WRONG_VERSION" in reason else ""
        return f"the TLS handshake with {where} failed: {reason}{hint}"
    return f"the TLS handshake with {where} failed: {cause!r}"


def _why(exc: OSError) -> str:
    """The reason a TCP connect failed, e.g. "Connection refused".

    Trio raises one OSError for all addresses tried, with the per-address
    errors in an ExceptionGroup as its cause; their strerror says why.
    """
    causes = exc.__cause__.exceptions if isinstance(exc.__cause__, BaseExceptionGroup) else ()
    reasons = sorted({c.strerror for c in causes if isinstance(c, OSError) and c.strerror})
    return ", ".join(reasons) or exc.strerror or str(exc)
