"""The STOMP wire format, sans-IO: bytes in, events out; events in, bytes out.

Nothing in this package does I/O or reads a clock.
"""

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
