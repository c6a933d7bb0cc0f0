"""Header escaping, per STOMP version (1.1 section "Value Encoding", 1.2 likewise).

1.0 has no escaping at all. 1.1 escapes newline, colon and backslash; 1.2 adds
carriage return. Headers of CONNECT, STOMP and CONNECTED are never escaped,
since they travel before the version is agreed.
"""

from __future__ import annotations

from ._errors import RemoteProtocolError


def escape(text: str, version: str) -> str:
    """Escape ``text`` for a header of an escaped frame under ``version`` (1.1 or 1.2).

    Chained ``str.replace`` calls: each is one C-level pass that does nothing
    when its character is absent, which is several times faster than
    ``str.translate`` on the short strings headers are.
    """
    if "\\" in text:
        text = text.replace("\\", "\\\\")
    if "\n" in text:
        text = text.replace("\n", "\\n")
    if ":" in text:
        text = text.replace(":", "\\c")
    if version == "1.2" and "\r" in text:
        text = text.replace("\r", "\\r")
    return text


def unescape(text: str, version: str, lenient: bool) -> str:
    """Undo header escaping in ``text``, which must not contain NUL.

    An undefined escape (``\\t``, or a lone trailing backslash) is fatal by the
    1.2 spec; with ``lenient`` it is kept literally instead, for peers that send
    raw backslashes.

    Works with whole-string replacements instead of a character loop: escaped
    backslash pairs are first parked on NUL (which a frame head cannot
    contain), so that every backslash left starts an escape sequence; pairing
    backslashes from the left is exactly how a left-to-right decoder reads them.
    """
    parked = "\\\\" in text
    out = text.replace("\\\\", "\0") if parked else text
    # \c first: colons in message ids are by far the most common escape.
    out = out.replace("\\c", ":")
    if "\\" in out:
        out = out.replace("\\n", "\n")
        if version == "1.2":
            out = out.replace("\\r", "\r")
        if "\\" in out and not lenient:
            slash = out.index("\\")
            code = out[slash + 1 : slash + 2]
            raise RemoteProtocolError(f"undefined escape sequence \\{code} in header {text[:64]!r}")
    return out.replace("\0", "\\") if parked else out
