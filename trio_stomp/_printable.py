"""Text fit for a terminal or a log: control characters written as escapes.

A name a peer chose (a destination, a header, a file in an inbox) may hold
bytes that a terminal obeys rather than shows: ``ESC ] 52`` writes the
clipboard, ``ESC [ 2 J`` clears the screen, ``ESC ] 0`` retitles the window,
the one byte ``0x9b`` is a CSI on terminals that take 8-bit controls, a CR
rewrites the line, and a newline forges a log line of its own. Bidi controls
(U+202E and friends) make a line read other than it is, and U+2028/U+2029
break lines in some viewers. Every printer of both packages passes what it
prints through :func:`printable`.
"""

from __future__ import annotations

import re
from typing import Final, Literal

#: What :func:`printable` escapes: C0 controls, DEL and C1 controls (which
#: include NEL, U+0085), U+061C, U+200E/U+200F and U+202A-U+202E, U+2066-U+2069
#: (bidi marks, embeddings, overrides and isolates), U+2028/U+2029 (line and
#: paragraph separators), and lone surrogates (a file name undecodable as
#: UTF-8, kept by ``surrogateescape``: it cannot even be encoded for output).
UNPRINTABLE: Final = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]"
)

_SHORT: Final = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _python(match: re.Match[str]) -> str:
    char = match.group()
    short = _SHORT.get(char)
    if short is not None:
        return short
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _json(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def printable(text: str, *, keep: str = "", style: Literal["python", "json"] = "python") -> str:
    r"""``text`` with every control character written as an escape, safe to print.

    The escapes are Python's own (``\x1b``, ``\x9b``, ``\u202e``, ``\n``),
    as ``repr`` writes them, so that a value quoted with ``%r`` elsewhere reads
    the same. Other text, backslashes included, is left as it is: escaping is
    for the terminal's sake, not a reversible encoding.

    Args:
      keep: characters to leave as they are: ``"\n"`` for a whole log record,
        whose traceback spans lines (its parts were escaped whole).
      style: ``"json"`` writes ``\u001b`` instead, for text already inside a
        JSON string (where ``\x1b`` would be invalid): the JSON still decodes to
        the original text.

    Examples:
      >>> printable("a\x1b]52;c;ZXZpbA==\x07b")
      'a\\x1b]52;c;ZXZpbA==\\x07b'
      >>> printable("line\nforged", keep="\n")
      'line\nforged'
    """
    replace = _json if style == "json" else _python
    if keep:
        return UNPRINTABLE.sub(lambda m: m.group() if m.group() in keep else replace(m), text)
    return UNPRINTABLE.sub(replace, text)
