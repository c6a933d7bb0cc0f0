"""trio_stomp: a structured-concurrency STOMP client for Trio."""

from ._errors import LocalProtocolError as LocalProtocolError
from ._errors import ProtocolError as ProtocolError
from ._errors import RemoteProtocolError as RemoteProtocolError
from ._errors import StompError as StompError
from .frame import HEARTBEAT as HEARTBEAT
from .frame import VERSIONS as VERSIONS
from .frame import Frame as Frame
from .frame import FrameParser as FrameParser
from .frame import Headers as Headers
from .frame import Heartbeat as Heartbeat
from .frame import encode as encode

__version__ = "0.1.0"
