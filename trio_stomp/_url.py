"""Broker addresses: ``stomp://login:passcode@host:port/?vhost=/`` and friends.

One URL names one way to reach a broker. The scheme picks the transport:

==============================================  ==========================  ============
scheme                                          transport                   default port
==============================================  ==========================  ============
``stomp://`` (alias ``tcp://``)                 STOMP over TCP              61613
``stomp+ssl://`` (aliases ``ssl://``,           STOMP over TLS              61614
``stomps://``)
``ws://``                                       STOMP over WebSocket        80
``wss://``                                      STOMP over WebSocket + TLS  443
==============================================  ==========================  ============

Only WebSocket URLs carry a path (the HTTP resource of the upgrade, e.g.
RabbitMQ's ``/ws``). The only query parameter is ``vhost`` (the CONNECT
``host`` header); anything else is refused rather than ignored, so a typo
cannot silently change what is sent. Credentials may be percent-escaped
(``stomp://us%40er:p%2Fss@host``); they must be when they hold ``/ ? # @``,
and a URL with an ``@`` after its host is refused rather than guessed at.
Error messages quote the URL through :func:`redact_url`, never as given.

Parsing is pure: no DNS, no sockets (see :func:`trio_stomp._transport.open_stream`).
"""

from __future__ import annotations

from typing import Final, Literal
from urllib.parse import parse_qs, unquote, urlsplit

import attrs

from ._address import bracket_host

DEFAULT_PORT: Final = 61613
DEFAULT_TLS_PORT: Final = 61614

Transport = Literal["tcp", "websocket"]

#: scheme -> (transport, tls, default port)
_SCHEMES: Final[dict[str, tuple[Transport, bool, int]]] = {
    "stomp": ("tcp", False, DEFAULT_PORT),
    "tcp": ("tcp", False, DEFAULT_PORT),
    "stomp+ssl": ("tcp", True, DEFAULT_TLS_PORT),
    "ssl": ("tcp", True, DEFAULT_TLS_PORT),
    "stomps": ("tcp", True, DEFAULT_TLS_PORT),
    "ws": ("websocket", False, 80),
    "wss": ("websocket", True, 443),
}
SCHEMES: Final = tuple(_SCHEMES)
_QUERY_PARAMETERS: Final = frozenset({"vhost"})


@attrs.frozen
class Endpoint:
    """Where and how to connect: parsed from a URL and/or keyword arguments.

    Attributes:
      host, port: the broker's address.
      login, passcode: credentials for CONNECT, if the URL had them. The
        passcode is left out of ``repr()`` so that it does not end up in logs.
      vhost: the ``vhost`` query parameter (the CONNECT ``host`` header).
      transport: "tcp" (STOMP frames straight on the byte stream) or
        "websocket" (each frame in a WebSocket message).
      tls: whether the stream is wrapped in TLS (``stomp+ssl://``, ``wss://``).
      path: the WebSocket resource (``/ws``); "/" for TCP.
    """

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    login: str | None = None
    passcode: str | None = attrs.field(default=None, repr=False)
    vhost: str | None = None
    transport: Transport = "tcp"
    tls: bool = False
    path: str = "/"

    @property
    def scheme(self) -> str:
        """The canonical scheme: ``stomp``, ``stomp+ssl``, ``ws`` or ``wss``."""
        if self.transport == "websocket":
            return "wss" if self.tls else "ws"
        return "stomp+ssl" if self.tls else "stomp"

    @property
    def url(self) -> str:
        """The address as a URL without credentials or query, for messages and logs.

        ``stomp+ssl://broker.example:61614``, ``ws://127.0.0.1:15674/ws``.
        """
        path = self.path if self.transport == "websocket" else ""
        return f"{self.scheme}://{bracket_host(self.host)}:{self.port}{path}"

    @classmethod
    def from_url(cls, url: str) -> Endpoint:
        """Parse ``SCHEME://[login[:passcode]@]host[:port][/path][?vhost=NAME]``.

        See the module documentation for the schemes and their default ports.
        A missing host means 127.0.0.1.

        Raises:
          ValueError: an unknown scheme, a bad port (not a number, 0, above
            65535), a path on a non-WebSocket URL, a fragment, a query
            parameter other than one ``vhost``, or an ``@`` after the host
            (an unescaped ``/ ? #`` in the credentials). The message shows
            the URL without its passcode.
        """
        if not isinstance(url, str):
            raise TypeError(f"a broker URL must be str, got {type(url).__name__}")
        try:
            parts = urlsplit(url)
        except ValueError:
            raise ValueError(f"malformed URL {redact_url(url)!r}") from None
        if "@" in url.partition("://")[2] and "@" not in parts.netloc:
            raise ValueError(
                f"unexpected '@' after the host in URL {redact_url(url)!r}: percent-escape "
                "'/', '?', '#' and '@' in a login or passcode (%2F, %3F, %23, %40)"
            )
        scheme = parts.scheme.lower()
        if scheme not in _SCHEMES:
            raise ValueError(
                f"unsupported URL scheme {parts.scheme!r} in {redact_url(url)!r}; expected one of "
                + ", ".join(f"{s}://" for s in SCHEMES)
            )
        transport, tls, default_port = _SCHEMES[scheme]
        try:
            port = parts.port
        except ValueError:
            raise ValueError(f"bad port in URL {redact_url(url)!r}") from None
        if port == 0:
            raise ValueError(f"port 0 in URL {redact_url(url)!r}: cannot connect to it")
        if parts.fragment:
            raise ValueError(f"unexpected fragment in URL {redact_url(url)!r}")
        if transport == "websocket":
            path = parts.path or "/"
        elif parts.path in ("", "/"):
            path = "/"
        else:
            raise ValueError(
                f"unexpected path {parts.path!r} in URL {redact_url(url)!r} "
                "(only ws:// and wss:// URLs have a path)"
            )
        query = parse_qs(parts.query, keep_blank_values=True)
        unknown = set(query) - _QUERY_PARAMETERS
        if unknown:
            raise ValueError(
                f"unknown URL parameter(s) {sorted(unknown)} in {redact_url(url)!r}; "
                f"known: {sorted(_QUERY_PARAMETERS)}"
            )
        vhosts = query.get("vhost", [])
        if len(vhosts) > 1:
            raise ValueError(
                f"URL parameter 'vhost' given {len(vhosts)} times in {redact_url(url)!r}"
            )
        return cls(
            host=parts.hostname or "127.0.0.1",
            port=port if port is not None else default_port,
            login=unquote(parts.username) if parts.username is not None else None,
            passcode=unquote(parts.password) if parts.password is not None else None,
            vhost=vhosts[0] if vhosts else None,
            transport=transport,
            tls=tls,
            path=path,
        )


def redact_url(url: str) -> str:
    """``url`` fit for a message or a log: ``LOGIN:***@`` in place of the credentials.

    The credentials are everything between ``://`` and the *last* ``@``, not
    what a URL parser would call the user info: a passcode may hold an
    unescaped ``/``, ``?``, ``#``, ``@`` or ``:`` (then the URL does not parse
    as meant), and it must stay hidden all the same. This may hide more than
    the credentials (an ``@`` in a query), never less. Text without ``://``
    is treated the same way (everything before its last ``@`` is hidden).
    """
    scheme, separator, rest = url.partition("://")
    if not separator:
        scheme, rest = "", url
    userinfo, at, after = rest.rpartition("@")
    if not at:
        return url
    login, colon, _ = userinfo.partition(":")
    return f"{scheme}{separator}{login}{':***' if colon else ''}@{after}"


def typed_passcode(url: str) -> str | None:
    """The passcode as typed in ``url``, found the way :func:`redact_url` finds it
    (after the first ``:`` of everything before the last ``@``), for scrubbing it
    from text that quotes it; None when there is none."""
    rest = url.partition("://")[2] or url
    userinfo, at, _ = rest.rpartition("@")
    passcode = userinfo.partition(":")[2] if at else ""
    return passcode or None
