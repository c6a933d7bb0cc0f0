"""Header escaping, per STOMP version (1.1 section "Value Encoding", 1.2 likewise).

1.0 has no escaping at all. 1.1 escapes newline, colon and backslash; 1.2 adds
carriage return. Headers of CONNECT, STOMP and CONNECTED are never escaped,
since they travel before the version is agreed.
"""

from __future__ import annotations

from typing import Final

from .._errors import RemoteProtocolError

DECODE: Final[dict[str, dict[str, str]]] = {
    "1.1": {"n": "\n", "c": ":", "\\": "\\"},
    "1.2": {"n": "\n", "c": ":", "\\": "\\", "r": "\r"},
}

ENCODE: Final[dict[str, dict[int, str]]] = {
    "1.1": str.maketrans({"\\": "\\\\", "\n": "\\n", ":": "\\c"}),
    "1.2": str.maketrans({"\\": "\\\\", "\n": "\\n", ":": "\\c", "\r": "\\r"}),
}


def unescape(text: str, table: dict[str, str], lenient: bool) -> str:
    """Undo header escaping in ``text``.

    An undefined escape (``\\t``, or a lone trailing backslash) is fatal by the
    1.2 spec; with ``lenient`` it is kept literally instead, for peers that send
    raw backslashes.
    """
    out: list[str] = []
    start = 0
    while True:
        slash = text.find("\\", start)
        if slash < 0:
            out.append(text[start:])
            return "".join(out)
        out.append(text[start:slash])
        code = text[slash + 1 : slash + 2]
        replacement = table.get(code)
        if replacement is not None:
            out.append(replacement)
            start = slash + 2
        elif lenient:
            out.append("\\")
            start = slash + 1
        else:
            raise RemoteProtocolError(f"undefined escape sequence \\{code} in header {text!r}")
