"""The ``stomp`` format's options, from Spark's string map into a typed value.

Spark hands a data source its ``.option(...)`` values as strings, with
case-insensitive names. They are checked here, on the driver, when the query
is defined: a bad option is a :class:`ValueError` naming it, before any
connection or thread exists. Secrets (``passcode``, a URL's password) never
appear in an error or a log line.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from typing import Final

import attrs

import trio_stomp
from trio_stomp.frame import VERSIONS
from trio_stomp.util import Endpoint

#: Options whose name starts with this are extra SUBSCRIBE headers (``header.selector``).
#: Spark lowercases option names: ``header.activemq.subscriptionName`` arrives as
#: ``activemq.subscriptionname``. :data:`HEADERS_OPTION` keeps case.
HEADER_PREFIX: Final = "header."
#: An option whose value is a JSON object of extra SUBSCRIBE headers, names as written
#: (``{"activemq.subscriptionName": "orders"}``): the way to give a header whose name
#: has capitals.
HEADERS_OPTION: Final = "headers"
#: The prefetch window (unacked messages in flight) when ``prefetch`` is not given.
DEFAULT_PREFETCH: Final = 1000
#: Smallest share of a batch that gets a partition of its own.
DEFAULT_ROWS_PER_PARTITION: Final = 2000
#: The sub-directory of ``checkpointLocation`` that holds the source's log.
WAL_DIR: Final = "stomp-wal"

_KNOWN: Final = frozenset(
    {
        "url",
        "destination",
        "login",
        "passcode",
        "vhost",
        "prefetch",
        "maxmessagespertrigger",
        "version",
        "checkpointlocation",
        "walpath",
        "numpartitions",
        "rowsperpartition",
        "transactional",
        "persistent",
        "connecttimeout",
        "path",  # Spark passes load(path) / start(path) as "path"
        HEADERS_OPTION,
    }
)


def _json_headers(raw: str | None) -> tuple[tuple[str, str], ...]:
    """The ``headers`` option: a JSON object of header names (case kept) to strings."""
    if raw is None:
        return ()
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and k and isinstance(v, str) for k, v in value.items()
    ):
        raise ValueError(
            f"stomp option {HEADERS_OPTION}: expected a JSON object of header names to "
            'strings, e.g. {"activemq.subscriptionName": "orders"}'
        )
    return tuple(value.items())


def _int(options: Mapping[str, str], name: str, default: int | None, low: int) -> int | None:
    raw = options.get(name.lower())
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"stomp option {name}: expected an integer, got {raw!r}") from None
    if value < low:
        raise ValueError(f"stomp option {name}: must be >= {low}, got {value}")
    return value


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    if raw.lower() in ("true", "1", "yes"):
        return True
    if raw.lower() in ("false", "0", "no"):
        return False
    raise ValueError(f"stomp option {name}: expected true or false, got {raw!r}")


def _urls(raw: str | None) -> tuple[str, ...]:
    if not raw:
        raise ValueError("stomp option url: missing (required), e.g. stomp://127.0.0.1:61613")
    urls = tuple(part.strip() for part in raw.split(",") if part.strip())
    for url in urls:
        try:
            Endpoint.from_url(url)
        except ValueError as exc:
            raise ValueError(f"stomp option url: {exc}") from None
    return urls


@attrs.frozen
class StompOptions:
    """The checked options of one ``stomp`` source or sink.

    Attributes:
      urls: the failover list (``url`` may list several, comma-separated).
      destination: what to subscribe to / send to ("" for a sink that takes
        a ``destination`` column).
      login, passcode, vhost: CONNECT credentials and host (a URL's own win).
      prefetch: the source's window of unacked messages.
      max_per_trigger: at most this many messages per micro-batch (None: all
        that are ready).
      versions: the STOMP versions accepted (``version`` names one).
      wal_path: the source's write-ahead log directory.
      partitions: at most this many partitions per batch.
      rows_per_partition: a batch gets one partition per this many rows.
      transactional: the sink sends each task's rows in one transaction.
      persistent: the sink sends each row ``persistent:true`` (RabbitMQ and
        ActiveMQ keep it on disk before the RECEIPT); false: at most once
        across a restart of the broker. A row's own ``persistent`` header wins.
      connect_timeout: bound on connecting, s.
      subscribe_headers: extra SUBSCRIBE headers (the ``headers`` option's JSON
        object, names as written, then ``header.NAME`` options, names lowercased
        by Spark).
    """

    urls: tuple[str, ...]
    destination: str = ""
    login: str | None = None
    passcode: str | None = attrs.field(default=None, repr=False)
    vhost: str | None = None
    prefetch: int = DEFAULT_PREFETCH
    max_per_trigger: int | None = None
    versions: tuple[str, ...] = VERSIONS
    wal_path: str | None = None
    partitions: int = 2
    rows_per_partition: int = DEFAULT_ROWS_PER_PARTITION
    transactional: bool = True
    persistent: bool = True
    connect_timeout: float = 10.0
    subscribe_headers: tuple[tuple[str, str], ...] = ()

    def connect(
        self, *, disconnect_timeout: float, reconnect: trio_stomp.Reconnect | None = None
    ) -> AbstractAsyncContextManager[trio_stomp.Client]:
        """``trio_stomp.connect`` to these URLs with these credentials and limits."""
        return trio_stomp.connect(
            list(self.urls),
            login=self.login,
            passcode=self.passcode,
            vhost=self.vhost,
            versions=self.versions,
            connect_timeout=self.connect_timeout,
            disconnect_timeout=disconnect_timeout,
            reconnect=reconnect,
        )

    @classmethod
    def from_options(cls, options: Mapping[str, str], *, role: str) -> StompOptions:
        """Check Spark's options for a ``role`` of "source" or "sink".

        Raises:
          ValueError: an unknown or bad option, or a required one missing.
        """
        lowered = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
        headers = _json_headers(lowered.get(HEADERS_OPTION)) + tuple(
            (k[len(HEADER_PREFIX) :], v) for k, v in lowered.items() if k.startswith(HEADER_PREFIX)
        )
        unknown = sorted(k for k in lowered if k not in _KNOWN and not k.startswith(HEADER_PREFIX))
        if unknown:
            raise ValueError(f"stomp: unknown option(s) {', '.join(unknown)}")
        destination = lowered.get("destination", "")
        version = lowered.get("version")
        if version is not None and version not in VERSIONS:
            raise ValueError(f"stomp option version: one of {', '.join(VERSIONS)}, got {version!r}")
        wal_path = lowered.get("walpath")
        if wal_path is None and "checkpointlocation" in lowered:
            wal_path = f"{lowered['checkpointlocation'].rstrip('/')}/{WAL_DIR}"
        if role == "source":
            if not destination:
                raise ValueError("stomp option destination: missing (required for a source)")
            if wal_path is None:
                raise ValueError(
                    "stomp option checkpointLocation: missing (required for a source: its "
                    "write-ahead log lives there; pass the query's checkpoint location)"
                )
        timeout = _int(lowered, "connectTimeout", 10, 1)
        return cls(
            urls=_urls(lowered.get("url")),
            destination=destination,
            login=lowered.get("login"),
            passcode=lowered.get("passcode"),
            vhost=lowered.get("vhost"),
            prefetch=_int(lowered, "prefetch", DEFAULT_PREFETCH, 1) or DEFAULT_PREFETCH,
            max_per_trigger=_int(lowered, "maxMessagesPerTrigger", None, 1),
            versions=VERSIONS if version is None else (version,),
            wal_path=wal_path.removeprefix("file:") if wal_path else None,
            partitions=_int(lowered, "numPartitions", 2, 1) or 2,
            rows_per_partition=_int(lowered, "rowsPerPartition", DEFAULT_ROWS_PER_PARTITION, 1)
            or DEFAULT_ROWS_PER_PARTITION,
            transactional=_bool(lowered, "transactional", True),
            persistent=_bool(lowered, "persistent", True),
            connect_timeout=float(timeout or 10),
            subscribe_headers=headers,
        )
