"""Broker addresses: ``stomp://login:passcode@host:port/?vhost=/``."""

from __future__ import annotations

from urllib.parse import parse_qs, unquote, urlsplit

import attrs

DEFAULT_PORT = 61613
SCHEMES = ("stomp", "tcp")


@attrs.frozen
class Endpoint:
    """Where and how to connect: parsed from a URL and/or keyword arguments."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    login: str | None = None
    passcode: str | None = None
    vhost: str | None = None

    @classmethod
    def from_url(cls, url: str) -> Endpoint:
        """Parse ``stomp://[login[:passcode]@]host[:port][/][?vhost=NAME]``.

        Raises:
          ValueError: the URL has another scheme, a bad port, or unknown
            query parameters.
        """
        parts = urlsplit(url)
        if parts.scheme not in SCHEMES:
            raise ValueError(
                f"unsupported URL scheme {parts.scheme!r} in {url!r}; expected stomp://"
            )
        try:
            port = parts.port or DEFAULT_PORT
        except ValueError:
            raise ValueError(f"bad port in URL {url!r}") from None
        if parts.path not in ("", "/"):
            raise ValueError(f"unexpected path {parts.path!r} in URL {url!r}")
        query = parse_qs(parts.query, keep_blank_values=True)
        unknown = set(query) - {"vhost"}
        if unknown:
            raise ValueError(f"unknown URL parameter(s) {sorted(unknown)} in {url!r}")
        vhost = query["vhost"][0] if "vhost" in query else None
        return cls(
            host=parts.hostname or "127.0.0.1",
            port=port,
            login=unquote(parts.username) if parts.username is not None else None,
            passcode=unquote(parts.password) if parts.password is not None else None,
            vhost=vhost,
        )
