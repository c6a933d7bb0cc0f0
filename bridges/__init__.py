"""bridges: config-driven processes that move messages between STOMP and other systems.

A *route* takes envelopes from a source, runs transforms, writes batches to
a sink, and acks each envelope only once the sink holds it durably (at
least once: a crash may repeat a message, never lose one). A process runs
any number of routes; ``bridges run CONFIG`` reads them from TOML (see
``docs/reference/config.rst``).

Programmatic use, with your own endpoints::

    registry = bridges.Registry()            # empty: only what you register
    registry.register("source", "mine", MyConfig, MySource)
    config = bridges.load_config("bridge.toml", registry)

or build :class:`Route` objects directly and ``await route.run()``.
"""

from ._blocking import Worker as Worker
from ._blocking import blocking as blocking
from ._blocking import worker_thread as worker_thread
from ._builtins import default_registry as default_registry
from ._carry import CarryingSink as CarryingSink
from ._carry import CarryingWriter as CarryingWriter
from ._config import BridgeSettings as BridgeSettings
from ._config import BrokerSettings as BrokerSettings
from ._config import Config as Config
from ._config import RouteConfig as RouteConfig
from ._config import SparkSettings as SparkSettings
from ._config import load_config as load_config
from ._config import parse_config as parse_config
from ._convert import ConfigError as ConfigError
from ._convert import Problem as Problem
from ._endpoint import BatchRefused as BatchRefused
from ._endpoint import BulkReceiver as BulkReceiver
from ._endpoint import Context as Context
from ._endpoint import InvalidSetting as InvalidSetting
from ._endpoint import InvalidSettings as InvalidSettings
from ._endpoint import MessageRejected as MessageRejected
from ._endpoint import Receiver as Receiver
from ._endpoint import Sink as Sink
from ._endpoint import Source as Source
from ._endpoint import Writer as Writer
from ._endpoint import prepare_each as prepare_each
from ._endpoint import shared_resource as shared_resource
from ._engine import Route as Route
from ._engine import run_routes as run_routes
from ._flow import RouteStats as RouteStats
from ._message import Envelope as Envelope
from ._message import Message as Message
from ._message import UnreadableEnvelope as UnreadableEnvelope
from ._positions import PositionError as PositionError
from ._positions import Positions as Positions
from ._redact import redact as redact
from ._redact import redacting as redacting
from ._registry import ENTRY_POINT_GROUP as ENTRY_POINT_GROUP
from ._registry import Plugin as Plugin
from ._registry import Registry as Registry
from ._registry import Unavailable as Unavailable
from ._retry import RetryPolicy as RetryPolicy
from ._shared import Shared as Shared
from ._shared import open_shared as open_shared
from ._template import Template as Template
from ._template import TemplateError as TemplateError
from ._transforms import Transform as Transform
from .service import build_routes as build_routes
from .service import run_bridge as run_bridge
