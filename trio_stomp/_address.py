"""Addresses without URLs: ``HOST:PORT`` parsing and IPv6 bracketing (pure, no DNS)."""

from __future__ import annotations


def parse_host_port(text: str, *, default_host: str | None = None) -> tuple[str, int]:
    """Parse ``HOST:PORT`` or ``[V6]:PORT`` into ``(host, port)``; port 0 is allowed (a
    listener's "pick a free one").

    Args:
      text: the address, e.g. ``127.0.0.1:61613``, ``[::1]:61613``, ``broker:61613``.
      default_host: the host of ``:PORT``; None makes an empty host an error.

    Raises:
      ValueError: not of that shape, an unbalanced bracket, a bare IPv6 address
        (``::1:61613`` is ambiguous), or a port above 65535. The message quotes
        ``text``, which is an address, not a secret.
    """
    host, colon, port_text = text.rpartition(":")
    if not colon or not port_text.isascii() or not port_text.isdigit():
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    if host.startswith("[") or host.endswith("]"):
        if not (host.startswith("[") and host.endswith("]")) or len(host) < 3:
            raise ValueError(f"expected [IPV6]:PORT, got {text!r}")
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"an IPv6 address needs brackets: [{host}]:{port_text}, got {text!r}")
    if not host:
        if default_host is None:
            raise ValueError(f"expected HOST:PORT, got {text!r} (no host)")
        host = default_host
    port = int(port_text)
    if port > 65535:
        raise ValueError(f"port {port} is out of range (0-65535) in {text!r}")
    return host, port


def bracket_host(host: str) -> str:
    """``host`` as it goes before ``:PORT`` in an address or a URL: IPv6 in brackets."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def format_host_port(host: str, port: int) -> str:
    """``HOST:PORT``, with an IPv6 host in brackets (the inverse of :func:`parse_host_port`)."""
    return f"{bracket_host(host)}:{port}"
