"""URL checks and one-line, redacted errors that the client-library families share (nats, amqp)."""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence

from bridges import InvalidSetting
from bridges._redact import redact as redact_all

__all__ = ["redact", "split_url"]


def split_url(url: str, schemes: Sequence[str]) -> tuple[urllib.parse.SplitResult, int | None]:
    """``url`` split, and its port; its scheme must be one of SCHEMES and it must name a host.

    Raises:
      InvalidSetting: (``url``) not a URL, another scheme, or no host.
    """
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidSetting("url", f"not a URL ({exc})") from None
    if parts.scheme not in schemes:
        expected = " or ".join(f"{scheme}://" for scheme in schemes)
        raise InvalidSetting("url", f"expected {expected}, got {parts.scheme or url!r}://")
    if not parts.hostname:
        raise InvalidSetting("url", "no host")
    return parts, port


def redact(text: str, secret: str | None) -> str:
    """TEXT on one line (white space folded), with SECRET and every secret of the
    process (:mod:`bridges._redact`) written ``***``."""
    if secret:
        text = text.replace(secret, "***")
    return " ".join(redact_all(text).split())
