"""The STOMP wire format, sans-IO: bytes in, events out; events in, bytes out.

Nothing in this package does I/O or reads a clock, and importing it imports
neither Trio nor the client (Spark executors use it without an event loop).

- :class:`FrameParser` (bytes in, :class:`Frame` and :data:`HEARTBEAT` out) and
  :func:`encode` (a frame in, bytes out), for STOMP 1.0, 1.1 and 1.2.
- :class:`FrameSplitter`: cuts a stream of encoded frames at frame
  boundaries (one WebSocket message per frame).
- :class:`Headers`: ordered, repeatable, first value wins on lookup.
- The error family: :class:`LocalProtocolError` (we were asked to produce
  something invalid), :class:`RemoteProtocolError` (the peer sent it).
- The protocol's names: ack modes, prefetch headers, reserved header sets.
- :data:`compiled`: True when the parser runs compiled (mypyc: a wheel built
  where a C compiler was, or ``scripts/compile-codec`` in a clone), False when
  it is pure Python.
"""

from typing import Final as _Final

from . import _parser as _parser_module
from ._encoder import encode as encode
from ._errors import LocalProtocolError as LocalProtocolError
from ._errors import ProtocolError as ProtocolError
from ._errors import RemoteProtocolError as RemoteProtocolError
from ._errors import StompError as StompError
from ._frame import HEARTBEAT as HEARTBEAT
from ._frame import VERSIONS as VERSIONS
from ._frame import Frame as Frame
from ._frame import Heartbeat as Heartbeat
from ._frame import Version as Version
from ._headers import Headers as Headers
from ._headers import HeadersLike as HeadersLike
from ._parser import Event as Event
from ._parser import FrameParser as FrameParser
from ._spec import ACK_MODES as ACK_MODES
from ._spec import CONNECT_RESERVED_HEADERS as CONNECT_RESERVED_HEADERS
from ._spec import DEFAULT_PREFETCH as DEFAULT_PREFETCH
from ._spec import DELIVERY_HEADERS as DELIVERY_HEADERS
from ._spec import PREFETCH_HEADERS as PREFETCH_HEADERS
from ._spec import RESERVED_HEADERS as RESERVED_HEADERS
from ._spec import SEND_RESERVED_HEADERS as SEND_RESERVED_HEADERS
from ._spec import SUBSCRIBE_RESERVED_HEADERS as SUBSCRIBE_RESERVED_HEADERS
from ._spec import AckMode as AckMode
from ._splitter import FrameSplitter as FrameSplitter

#: True when the parser's modules are the compiled (mypyc) build, False when
#: they are the pure-Python ones (an editable install, a build without a C
#: compiler or with TRIO_STOMP_PURE=1: see setup.py).
compiled: _Final[bool] = not (_parser_module.__file__ or "").endswith(".py")


def _class_doc_from_source(module: object, name: str) -> str | None:
    """The docstring of class ``name`` in the ``.py`` source of a compiled ``module``
    (it lies in this package): mypyc drops class docstrings, and
    ``help(FrameParser)`` should not be empty."""
    import ast
    import pathlib

    source = str(getattr(module, "__name__", "")).rpartition(".")[2] + ".py"
    try:
        tree = ast.parse(pathlib.Path(__file__).with_name(source).read_text())
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return ast.get_docstring(node, clean=False)
    return None


if compiled:
    from . import _frame as _frame_module
    from . import _headers as _headers_module

    for _module, _class in (
        (_parser_module, FrameParser),
        (_headers_module, Headers),
        (_frame_module, Frame),
        (_frame_module, Heartbeat),
    ):
        if not _class.__doc__:
            _class.__doc__ = _class_doc_from_source(_module, _class.__name__)
