"""The bridges config file: TOML into typed classes, then into running routes.

Layout (see ``docs/reference/config.rst`` for every key)::

    [bridge]                 # optional: process settings (engine = "local" or "spark")
    [broker]                 # optional: embedded = true starts a broker
    [spark]                  # optional: how engine = "spark" runs the routes
    [routes.NAME]            # one table per route
    source = { type = "...", ... }
    sink = { type = "...", ... }
    dead_letter = { ... }    # optional
    [[routes.NAME.transforms]]
    type = "..."

Relative paths (directories, ``*_file`` secrets) are resolved against the
current working directory of the process, like any command-line tool's
arguments, and printed in full when the bridge starts.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

import attrs
from attrs.validators import ge, gt

from ._convert import INVALID, ConfigError, Problem, Where, describe, structure
from ._endpoint import Context, InvalidSetting, InvalidSettings
from ._readfile import MAX_CONFIG_BYTES, FileRefused, read_file
from ._registry import Kind, Registry
from ._retry import RetryPolicy


def _listen(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    host, colon, port = value.rpartition(":")
    if not colon or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"expected HOST:PORT, got {value!r}")


def _data_dir(instance: Any, attribute: attrs.Attribute[str | None], value: str | None) -> None:
    if value is not None and not value:
        raise ValueError("expected a directory, got an empty string")


#: The engines that run a config's routes.
ENGINES: Final = ("local", "spark")
_TRIGGER = re.compile(r"^\d+(\.\d+)? *(ms|milliseconds?|s|seconds?|min|minutes?)$")


def _trigger(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not _TRIGGER.match(value):
        raise ValueError(f'expected an interval like "1 second" or "500 ms", got {value!r}')


@attrs.frozen
class BridgeSettings:
    """``[bridge]``: the process.

    Attributes:
      shutdown_timeout: on SIGTERM/SIGINT, how long in-flight messages may
        take to finish before they are nacked, s.
      hint: a line printed once every route is running (the quickstart
        says what to do).
      log_level: "debug", "info", "warning" or "error".
      stall_timeout: a route that has messages in flight and settles none
        of them for this long is stuck: systemd's watchdog is no longer fed
        (so it restarts the process) and ``/healthz`` fails, s.
      http: ``HOST:PORT`` to serve ``/metrics``, ``/healthz`` and
        ``/readyz`` on (shared with webhook routes on the same address), or
        None for no such server.
      engine: "local" runs the routes in this process; "spark" runs each
        as a Spark Structured Streaming query (see ``[spark]``).
      follow_secret_links: a ``*_file`` secret may be a symbolic link (as
        Kubernetes mounts them); by default a link is refused.
    """

    shutdown_timeout: float = attrs.field(default=10.0, validator=ge(0.0))
    hint: str | None = None
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    stall_timeout: float = attrs.field(default=60.0, validator=gt(0.0))
    http: str | None = attrs.field(default=None, validator=attrs.validators.optional(_listen))
    engine: Literal["local", "spark"] = "local"
    follow_secret_links: bool = False


@attrs.frozen
class SparkSettings:
    """``[spark]``: how ``engine = "spark"`` runs the routes (needs ``trio-stomp[spark]``).

    Attributes:
      master: the Spark master URL (``local[*]``, ``spark://host:7077``...).
      checkpoint: the directory under which each route's query keeps its
        checkpoint (and its source's write-ahead log): ``CHECKPOINT/ROUTE``.
        Required with ``engine = "spark"``; on a cluster, on storage every
        node sees.
      trigger: how often a micro-batch starts: an interval ("1 second",
        "500 ms", "2 min").
      conf: any Spark setting, ``spark.NAME = "value"`` in the table.
    """

    master: str = "local[*]"
    checkpoint: str | None = None
    trigger: str = attrs.field(default="1 second", validator=_trigger)
    conf: dict[str, str] = attrs.field(factory=dict)


@attrs.frozen
class BrokerSettings:
    """``[broker]``: an embedded broker started (and stopped) with the process.

    Without ``data_dir`` it is volatile: it keeps messages in memory, what
    is still queued when the process stops is lost, so shutdown first drains
    the routes that read from it (and ``bridges run`` exits 4 when some are
    left). With ``data_dir`` its queue messages are on disk (SQLite, fsync
    before each RECEIPT) and delivered again at the next start (what shutdown
    could not drain is kept there: exit 3). A store that lost messages since
    the broker last wrote it (a damaged write-ahead log, an emptied file, a
    damaged row) is refused, naming how many and from which store key on,
    unless ``accept_damage`` (then the loss is logged and the broker starts).
    ``stomp`` endpoints reach it with ``url = "embedded"``.

    Attributes:
      embedded: true starts an embedded STOMP broker with the process, and
        stops it with the process.
      listen: ``HOST:PORT`` the embedded broker listens on (port 0 picks a
        free one).
      data_dir: keep the embedded broker's queue messages on disk in this
        directory (SQLite, fsynced before each RECEIPT), across stops and
        crashes; without it, what is queued at a stop is lost. Needs
        ``embedded = true``.
      accept_damage: start even when the store in ``data_dir`` is damaged
        (it lost messages since the broker last wrote it); the loss is
        logged. Needs ``data_dir``.
      duplicate_window: how many ``bridge-id`` values the embedded broker
        remembers per destination (10,000; 0: off): a SEND repeating an id it
        accepted for the same destination gets its RECEIPT and is dropped, so
        the stomp sink to it is effectively once (the sources' ids are
        namespaced by route, so two distinct messages never share one); with
        ``data_dir`` the ids are kept in the store, written with the messages.
        On here, off by default in ``trio_stomp.broker.Limits``. Drops are
        counted (``bridges_duplicates_dropped_total``) and logged at INFO.
      duplicate_window_seconds: how long it remembers an id, s (600).
    """

    embedded: bool = False
    listen: str = attrs.field(default="127.0.0.1:61613", validator=_listen)
    data_dir: str | None = attrs.field(default=None, validator=_data_dir)
    accept_damage: bool = False
    duplicate_window: int = attrs.field(default=10_000, validator=ge(0))
    duplicate_window_seconds: float = attrs.field(default=600.0, validator=ge(0.0))

    @property
    def address(self) -> tuple[str, int]:
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]"), int(port)


@attrs.frozen
class Batching:
    """``batch = { count = 100, time = 0 }``: group commit. The sink writes as soon
    as it is idle, and what arrives during a write goes into the next one, up to
    ``count`` messages: a lone message waits for no timer, and under load the
    batches grow by themselves.

    Attributes:
      count: the most messages one write to the sink carries.
      time: 0 (the default): never wait for more. > 0: an upper bound for a
        sink whose every write costs much: a batch not yet full waits for more
        until ``time`` s after its first message arrived, s.
    """

    count: int = attrs.field(default=100, validator=ge(1))
    time: float = attrs.field(default=0.0, validator=ge(0.0))


@attrs.frozen
class EndpointConfig:
    """A ``type = "..."`` table, structured into its plugin's config class."""

    kind: Kind
    type: str
    key: str  # where it sits in the route: "source", "transforms[1]"...
    config: Any


@attrs.frozen
class RouteConfig:
    """One ``[routes.NAME]`` table."""

    name: str
    source: EndpointConfig
    sink: EndpointConfig
    transforms: tuple[EndpointConfig, ...] = ()
    dead_letter: EndpointConfig | None = None
    in_flight: int = 1000
    batch: Batching = attrs.field(factory=Batching)
    retry: RetryPolicy = attrs.field(factory=RetryPolicy)


@attrs.frozen
class _RouteTable:
    """One ``[routes.NAME]`` table: where messages come from, where they go, and how.

    Attributes:
      source: where messages come from: ``{ type = "...", ... }``, a source
        type below.
      sink: where they are written: ``{ type = "...", ... }``, a sink type
        below. A message is acked to the source only once the sink holds it
        durably.
      transforms: applied in order to each message (``[[routes.NAME.transforms]]``
        tables, each with a transform ``type``).
      dead_letter: a sink for the messages that the sink rejects or that keep
        failing after ``retry``; without one they are nacked.
      in_flight: the most messages taken from the source and not yet settled
        (the route's window; a source's prefetch follows it unless set).
      batch: how many messages one write carries, and how long to wait for
        them (below).
      retry: how a failed write is tried again (below).
    """

    source: dict[str, Any]
    sink: dict[str, Any]
    transforms: list[dict[str, Any]] = attrs.field(factory=list)
    dead_letter: dict[str, Any] | None = None
    in_flight: int = attrs.field(default=1000, validator=gt(0))
    batch: Batching = attrs.field(factory=Batching)
    retry: RetryPolicy = attrs.field(factory=RetryPolicy)


@attrs.frozen
class Config:
    """A whole config file, checked."""

    routes: tuple[RouteConfig, ...]
    bridge: BridgeSettings = BridgeSettings()
    broker: BrokerSettings = BrokerSettings()
    file: str | None = None
    base_dir: Path = attrs.field(factory=Path.cwd)
    spark: SparkSettings = SparkSettings()
    #: Every secret value the config resolved (see :mod:`bridges._redact`): redacted
    #: from what the process says while it runs this config.
    secrets: frozenset[str] = attrs.field(default=frozenset(), eq=False, repr=False)


def load_config(
    path: str | Path,
    registry: Registry,
    *,
    base_dir: Path | None = None,
    engine: Literal["local", "spark"] | None = None,
) -> Config:
    """Read and check the TOML config at ``path``.

    Args:
      registry: the endpoint and transform types the config may name.
      base_dir: what relative paths are relative to (default: the cwd).
      engine: overrides ``[bridge] engine`` (``bridges run --engine``).

    The file is read as :func:`~bridges._readfile.read_file` reads one: a
    regular file (a link is followed) of at most
    :data:`~bridges._readfile.MAX_CONFIG_BYTES`, within
    :data:`~bridges._readfile.READ_TIMEOUT` s.

    Raises:
      ConfigError: the file cannot be read, is not TOML, or has problems;
        each names the file, the route and the key.
    """
    name = str(path)
    try:
        text = read_file(path, limit=MAX_CONFIG_BYTES, follow_links=True, what="cannot read")
        data = tomllib.loads(text.decode("utf-8"))
    except FileRefused as exc:
        raise ConfigError([Problem(name, None, "", str(exc))]) from None
    except UnicodeDecodeError:
        raise ConfigError([Problem(name, None, "", "not UTF-8 text")]) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([Problem(name, None, "", f"not valid TOML: {exc}")]) from None
    return parse_config(data, registry, file=name, base_dir=base_dir, engine=engine)


def parse_config(
    data: Mapping[str, Any],
    registry: Registry,
    *,
    file: str | None = None,
    base_dir: Path | None = None,
    engine: Literal["local", "spark"] | None = None,
) -> Config:
    """Check an already-parsed TOML document; see :func:`load_config`.

    Each section and route is checked on its own, and every route that
    parses is also built (as ``bridges check`` does, creating nothing), so
    that one run reports every problem of the file.
    """
    base = base_dir if base_dir is not None else Path.cwd()
    where = Where(file=file, base_dir=base)
    for key in data:
        if key not in ("bridge", "broker", "routes", "spark"):
            where.at(key).problem("unknown key (known: bridge, broker, routes, spark)")
    bridge = structure(BridgeSettings, data.get("bridge", {}), where.at("bridge"))
    if engine is not None and bridge is not INVALID:
        bridge = attrs.evolve(bridge, engine=engine)
    where.follow_links = bridge is not INVALID and bridge.follow_secret_links
    spark = _parse_spark(data.get("spark", {}), where.at("spark"))
    broker = structure(BrokerSettings, data.get("broker", {}), where.at("broker"))
    if broker is not INVALID and broker.data_dir is not None and not broker.embedded:
        where.at("broker").at("data_dir").problem("needs embedded = true (the broker it keeps)")
    if broker is not INVALID and broker.accept_damage and broker.data_dir is None:
        where.at("broker").at("accept_damage").problem("needs data_dir (the store it accepts)")
    tables = data.get("routes")
    if tables is None:
        where.at("routes").problem("missing (required)")
        tables = {}
    elif not isinstance(tables, dict):
        where.at("routes").problem(f"expected a table, got {describe(tables)}")
        tables = {}
    elif not tables:
        where.at("routes").problem("no routes: add a [routes.NAME] table")
    routes = []
    embedded = broker is INVALID or broker.embedded  # (unknown: do not also complain)
    for name, table in tables.items():
        route_where = Where(file, name, (), base, where.problems, where.secrets, where.follow_links)
        parsed: list[EndpointConfig] = []
        route = _parse_route(name, table, registry, route_where, parsed)
        # Every endpoint whose table parsed is built too, whatever else of its
        # route failed: all of a config's problems come in one round.
        in_flight = route.in_flight if route is not None else _in_flight(table)
        context = Context(name, "-", base, embedded, checking=True, in_flight=in_flight)
        _check_build(parsed, registry, context, where)
        if route is not None:
            routes.append(route)
    if bridge is not INVALID and broker is not INVALID and spark is not INVALID:
        _check_engine(bridge, broker, spark, routes, where)
    where.check()
    return Config(tuple(routes), bridge, broker, file, base, spark, frozenset(where.secrets))


def _parse_spark(table: object, where: Where) -> SparkSettings | Any:
    """``[spark]``: the known keys, and every ``spark.*`` key as Spark conf."""
    if not isinstance(table, dict):
        where.problem(f"expected a table, got {describe(table)}")
        return INVALID
    rest = {k: v for k, v in table.items() if k != "spark" and not k.startswith("spark.")}
    conf: dict[str, str] = {}

    def flatten(prefix: str, value: object) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                flatten(f"{prefix}.{key}", inner)
        elif isinstance(value, str | int | float | bool):
            conf[prefix] = str(value).lower() if isinstance(value, bool) else str(value)
        else:
            where.at(prefix).problem(f"expected a string, number or boolean, got {describe(value)}")

    for key, value in table.items():
        if key == "spark" or key.startswith("spark."):
            flatten(key, value)
    if "conf" in rest:
        where.at("conf").problem('give Spark settings as spark.NAME = "value" keys')
        return INVALID
    return structure(SparkSettings, {**rest, "conf": conf}, where)


def _check_engine(
    bridge: BridgeSettings,
    broker: BrokerSettings,
    spark: SparkSettings,
    routes: list[RouteConfig],
    where: Where,
) -> None:
    """What one engine can run and the other cannot."""
    if bridge.engine == "spark":
        if spark.checkpoint is None:
            where.at("spark").at("checkpoint").problem(
                'missing (required with engine = "spark": each route\'s query keeps its '
                "checkpoint and source log there)"
            )
        if broker.embedded:
            where.at("broker").at("embedded").problem(
                'not with engine = "spark": run the broker on its own (trio-stomp broker)'
            )
    for route in routes:
        route_where = Where(file=where.file, route=route.name, problems=where.problems)
        if route.sink.type == "spark" and bridge.engine != "spark":
            route_where.at("sink").at("type").problem(
                '"spark" needs [bridge] engine = "spark" (or bridges run --engine spark)'
            )
        if (
            bridge.engine == "spark"
            and route.source.type == "stomp"
            and getattr(route.source.config, "connect_headers", None)
        ):
            # Its source becomes the Spark stomp source, which has no such option.
            route_where.at("source").at("connect_headers").problem(
                'not with engine = "spark" (the Spark stomp source sends none)'
            )
        if route.dead_letter is not None and route.dead_letter.type == "spark":
            route_where.at("dead_letter").at("type").problem('"spark" is not a dead-letter sink')


def _in_flight(table: object) -> int:
    """A route table's ``in_flight`` when it is a usable number, else the default
    (to build its endpoints when the route itself has problems)."""
    value = table.get("in_flight") if isinstance(table, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    default = attrs.fields(_RouteTable).in_flight.default
    return default if isinstance(default, int) else 1


def _check_build(
    endpoints: list[EndpointConfig], registry: Registry, context: Context, where: Where
) -> None:
    for endpoint in endpoints:
        role = "transform" if endpoint.kind == "transform" else endpoint.key.split("[")[0]
        build_endpoint(
            endpoint, registry, attrs.evolve(context, role=role), where.problems, where.file
        )


def _parse_route(
    name: str, table: object, registry: Registry, where: Where, parsed: list[EndpointConfig]
) -> RouteConfig | None:
    """The route, or None when it has problems; ``parsed`` gets every endpoint
    whose own table parsed, either way (their constructors are checked too)."""
    raw = structure(_RouteTable, table, where)
    if raw is INVALID:
        # Report the endpoints' own problems too, when their tables are there.
        if isinstance(table, dict):
            for role in ("source", "sink", "dead_letter"):
                if isinstance(table.get(role), dict):
                    kind: Kind = "source" if role == "source" else "sink"
                    found = _parse_endpoint(kind, table[role], registry, where.at(role))
                    if found is not None:
                        parsed.append(found)
        return None
    source = _parse_endpoint("source", raw.source, registry, where.at("source"))
    sink = _parse_endpoint("sink", raw.sink, registry, where.at("sink"))
    dead_letter = (
        None
        if raw.dead_letter is None
        else _parse_endpoint("sink", raw.dead_letter, registry, where.at("dead_letter"))
    )
    transforms = [
        _parse_endpoint("transform", t, registry, where.at("transforms").at(i))
        for i, t in enumerate(raw.transforms)
    ]
    parsed.extend(e for e in (source, sink, *transforms, dead_letter) if e is not None)
    if source is None or sink is None or (raw.dead_letter is not None and dead_letter is None):
        return None
    if any(t is None for t in transforms):
        return None
    return RouteConfig(
        name,
        source,
        sink,
        tuple(t for t in transforms if t is not None),
        dead_letter,
        raw.in_flight,
        raw.batch,
        raw.retry,
    )


def _parse_endpoint(
    kind: Kind, table: Mapping[str, Any], registry: Registry, where: Where
) -> EndpointConfig | None:
    rest = dict(table)
    type_name = rest.pop("type", None)
    if not isinstance(type_name, str):
        known = ", ".join(registry.names(kind)) or "none registered"
        got = "missing" if type_name is None else f"got {type_name!r}"
        where.at("type").problem(f"a {kind} needs type = one of: {known} ({got})")
        return None
    try:
        plugin = registry.get(kind, type_name)
    except KeyError as exc:
        where.at("type").problem(str(exc.args[0]))
        return None
    config = structure(plugin.config, rest, where)
    if config is INVALID:
        return None
    return EndpointConfig(kind, type_name, where.key, config)


def build_endpoint(
    endpoint: EndpointConfig,
    registry: Registry,
    context: Context,
    problems: list[Problem],
    file: str | None,
) -> Any:
    """Construct one endpoint or transform; record an :class:`InvalidSetting` as a problem."""
    plugin = registry.get(endpoint.kind, endpoint.type)
    try:
        return plugin.build(endpoint.config, context)
    except InvalidSettings as exc:
        for each in exc.found:
            problems.append(
                Problem(file, context.route, f"{endpoint.key}.{each.key}", each.message)
            )
    except InvalidSetting as exc:
        problems.append(Problem(file, context.route, f"{endpoint.key}.{exc.key}", exc.message))
    except ValueError as exc:
        problems.append(Problem(file, context.route, endpoint.key, str(exc)))
    return None
