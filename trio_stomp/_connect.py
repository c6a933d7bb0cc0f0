"""The ways in: :func:`connect` (a broker URL, or several) and :func:`wrap_stream`.

Each is an async context manager that opens a nursery around the caller's
block, runs the client's tasks in it, and shuts the session down
(DISCONNECT with receipt, shielded and bounded) when the block is left. No
task outlives the block; no single-exception group escapes it.

Opening a connection is here too: the options of CONNECT (:class:`Options`),
and :func:`open_any`, which walks the failover list with the
:class:`Reconnect` policy's backoff and returns the first
:class:`Connection` that said CONNECTED. It makes the first connection and,
through the reconnect supervisor, every later one.
"""

from __future__ import annotations

import random
import ssl
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import attrs
import trio

from ._client import Client
from ._connection import Connection
from ._core import Core
from ._errors import ConnectFailed, RemoteProtocolError
from ._reconnect import EventCallback, Reconnect, Supervisor
from ._sender import HeaderArg, user_headers
from ._transport import open_stream
from ._url import Endpoint
from .frame import CONNECT_RESERVED_HEADERS, VERSIONS, Frame, encode


@attrs.frozen
class Options:
    """How to open and greet a connection (all of connect()'s connection arguments)."""

    login: str | None = None
    passcode: str | None = attrs.field(default=None, repr=False)  # never in a log or error
    vhost: str = "/"
    heartbeat: tuple[int, int] = (10_000, 10_000)
    versions: Sequence[str] = VERSIONS
    heartbeat_tolerance: float = 2.0
    connect_timeout: float = 10.0
    disconnect_timeout: float = 5.0
    lenient: bool = False
    max_frame_size: int | None = None
    ssl_context: ssl.SSLContext | None = None
    #: Extra CONNECT headers, checked by :func:`connect_headers`; a value may be
    #: a token, so they stay out of the repr.
    headers: tuple[tuple[str, str], ...] = attrs.field(default=(), repr=False)

    def __attrs_post_init__(self) -> None:
        # The message names the type only: the value may be a passcode.
        for name in ("login", "passcode"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{name} must be str or None, got {type(value).__name__}")

    async def greet(
        self,
        stream: trio.abc.Stream,
        url: str,
        login: str | None = None,
        passcode: str | None = None,
    ) -> Connection:
        """CONNECT over ``stream``; close it on any failure.

        Raises:
          ConnectFailed: with the reason (the stream is closed).
        """
        conn = Connection(
            stream,
            url,
            heartbeat_tolerance=self.heartbeat_tolerance,
            lenient=self.lenient,
            max_frame_size=self.max_frame_size,
        )
        try:
            with trio.fail_after(self.connect_timeout):
                await conn.handshake(
                    login=login if login is not None else self.login,
                    passcode=passcode if passcode is not None else self.passcode,
                    host=self.vhost,
                    heartbeat=self.heartbeat,
                    versions=self.versions,
                    headers=self.headers,
                )
        except trio.TooSlowError:
            await conn.aclose()
            raise ConnectFailed(
                f"no CONNECTED from {url} within {self.connect_timeout} s"
            ) from None
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            await conn.aclose()
            raise ConnectFailed(f"the connection to {url} failed during CONNECT: {exc!r}") from exc
        except RemoteProtocolError as exc:
            await conn.aclose()
            raise ConnectFailed(f"the reply of {url} to CONNECT is not valid STOMP: {exc}") from exc
        except BaseException:
            await conn.aclose()
            raise
        return conn


def connect_headers(headers: HeaderArg) -> tuple[tuple[str, str], ...]:
    """The extra CONNECT headers of connect(headers=...), checked before any I/O.

    Raises:
      LocalProtocolError: a name that connect() sets from its own arguments
        (:data:`~trio_stomp.frame.CONNECT_RESERVED_HEADERS`), or a header that
        CONNECT cannot carry (no escaping there: no line break, no NUL, no
        colon in a name, no empty name).
      TypeError: a name or value that is not a str.
    """
    pairs = tuple(user_headers(headers, CONNECT_RESERVED_HEADERS))
    if pairs:
        encode(Frame("CONNECT", pairs), "1.2")  # refuses what CONNECT cannot carry
    return pairs


@attrs.frozen
class Target:
    """One broker address of a failover list."""

    url: str
    endpoint: Endpoint


async def open_any(
    targets: Sequence[Target],
    options: Options,
    policy: Reconnect | None,
    rng: random.Random,
    *,
    start: int = 0,
    initial: bool,
) -> tuple[Connection, int]:
    """Connect to the first target that answers; return it and the attempts it took.

    Without a policy each target is tried once. With one, targets are tried
    in turn with backoff until one answers or ``max_attempts`` is reached.
    On the first connect, a broker that refuses (ERROR to CONNECT, no common
    version) ends the attempts at once: retrying would not change its mind.

    Raises:
      ConnectFailed: every attempt failed (the message lists why).
    """
    failures: list[str] = []
    count = len(targets)
    order = list(range(count))
    attempt = 0
    while True:
        if policy is not None and policy.shuffle and attempt % count == 0:
            rng.shuffle(order)
        target = targets[order[(start + attempt) % count]]
        attempt += 1
        try:
            with trio.fail_after(options.connect_timeout):
                stream = await open_stream(target.endpoint, ssl_context=options.ssl_context)
            # The connection is named by its credential-free URL (errors and logs).
            conn = await options.greet(
                stream, target.endpoint.url, target.endpoint.login, target.endpoint.passcode
            )
            return conn, attempt
        except trio.TooSlowError:
            failures.append(f"{target.endpoint.url}: timed out after {options.connect_timeout} s")
        except ConnectFailed as exc:
            if initial and exc.frame is not None:
                raise
            failures.append(f"{target.endpoint.url}: {exc}")
        if policy is None:
            if attempt >= count:
                break
        elif policy.max_attempts is not None and attempt >= policy.max_attempts:
            break
        elif attempt % count == 0:
            # Every URL failed this round: back off before the next one.
            await trio.sleep(policy.delay(attempt // count, rng))
    if len(failures) == 1:
        raise ConnectFailed(failures[0].split(": ", 1)[1])
    shown = "; ".join(failures[-count:])
    raise ConnectFailed(f"no broker answered after {attempt} attempts: {shown}")


@asynccontextmanager
async def wrap_stream(
    stream: trio.abc.Stream,
    *,
    login: str | None = None,
    passcode: str | None = None,
    host: str = "/",
    heartbeat: tuple[int, int] = (10_000, 10_000),
    versions: Sequence[str] = VERSIONS,
    heartbeat_tolerance: float = 2.0,
    connect_timeout: float = 10.0,
    disconnect_timeout: float = 5.0,
    lenient: bool = False,
    max_frame_size: int | None = None,
    headers: HeaderArg = None,
) -> AsyncIterator[Client]:
    """Speak STOMP over any Trio stream (TLS, WebSocket, memory): see :func:`connect`.

    There is no reconnecting here (there is only the one stream). The stream
    is closed when the block is left, whatever happens.
    """
    try:
        options = Options(
            login=login,
            passcode=passcode,
            vhost=host,
            heartbeat=heartbeat,
            versions=versions,
            heartbeat_tolerance=heartbeat_tolerance,
            connect_timeout=connect_timeout,
            disconnect_timeout=disconnect_timeout,
            lenient=lenient,
            max_frame_size=max_frame_size,
            headers=connect_headers(headers),
        )
    except BaseException:
        await trio.aclose_forcefully(stream)  # closed whatever happens, as documented
        raise
    conn = await options.greet(stream, "the stream")
    core = Core(conn, disconnect_timeout=disconnect_timeout)
    async with core.running():
        yield Client(core)


@asynccontextmanager
async def connect(
    url: str | Sequence[str] | None = None,
    *,
    host: str | None = None,
    port: int | None = None,
    login: str | None = None,
    passcode: str | None = None,
    vhost: str | None = None,
    heartbeat: tuple[int, int] = (10_000, 10_000),
    versions: Sequence[str] = VERSIONS,
    heartbeat_tolerance: float = 2.0,
    connect_timeout: float = 10.0,
    disconnect_timeout: float = 5.0,
    lenient: bool = False,
    max_frame_size: int | None = None,
    ssl_context: ssl.SSLContext | None = None,
    reconnect: Reconnect | None = None,
    on_event: EventCallback | None = None,
    headers: HeaderArg = None,
) -> AsyncIterator[Client]:
    """Connect to a STOMP broker for the duration of an ``async with`` block.

    ::

        async with trio_stomp.connect("stomp://guest:guest@127.0.0.1:61613/?vhost=/") as c:
            await c.send("/queue/a", b"hello", receipt=True)

    Keyword arguments override what the URL says.

    Args:
      url: ``stomp://[login[:passcode]@]host[:port][/?vhost=NAME]``, or a list
        of such URLs for failover: they are tried in order. Schemes:
        ``stomp://`` (TCP, port 61613), ``stomp+ssl://`` (TLS, port 61614),
        ``ws://`` and ``wss://`` (STOMP over WebSocket, e.g.
        ``ws://127.0.0.1:15674/ws`` for RabbitMQ Web-STOMP; needs the
        ``trio-stomp[websocket]`` extra).
      host, port: the broker's address (default 127.0.0.1:61613), for a
        single broker.
      login, passcode: credentials for CONNECT (a URL's own win for it).
      vhost: the CONNECT ``host`` header; RabbitMQ takes it as the virtual
        host ("/"). Defaults to "/".
      heartbeat: ``(cx, cy)`` in ms: how often we can send heart-beats and
        how often we want them; 0 turns a direction off. What CONNECTED
        answers is followed in every version, 1.0 included: RabbitMQ and
        ActiveMQ answer a 1.0 CONNECT's heart-beat and enforce it.
      versions: the STOMP versions we accept.
      heartbeat_tolerance: the broker is declared dead when nothing arrives
        for this many of its heart-beat intervals.
      connect_timeout: bound on TCP connect plus the CONNECT handshake, s.
      disconnect_timeout: bound on each cleanup on the wire (UNSUBSCRIBE,
        ABORT, DISCONNECT and its receipt), s.
      lenient: accept undefined escapes and raw colons in 1.2 headers:
        e.g. RabbitMQ escapes a CR as ``\\r`` even for a 1.1 consumer, which
        1.1 does not define; lenient keeps those two characters as they are.
      max_frame_size: the largest frame accepted from the broker, in bytes
        (None: the parser's default, 64 MiB); a larger one fails the
        connection with :class:`RemoteProtocolError`.
      ssl_context: the TLS settings for ``stomp+ssl://`` and ``wss://``.
      reconnect: a :class:`Reconnect` policy, or None (the default) to fail
        fast: any connection failure is raised at the ``async with``.
      on_event: called with a :class:`ConnectionEvent` each time the
        connection drops ("lost") and comes back ("restored").
      headers: extra CONNECT headers (a mapping or ``(name, value)`` pairs),
        sent after the client's own on every connection, reconnections
        included: e.g. ``{"client-id": "billing-1"}``, which ActiveMQ needs
        for a durable topic subscription. The names that the arguments
        above set (``accept-version``, ``host``, ``login``, ``passcode``,
        ``heart-beat``) are refused, as is what CONNECT cannot carry (it has
        no escaping: no line break, no NUL, no colon in a name).

    With a reconnect policy, when the connection drops (socket error, peer
    closed, missed heart-beats, an ERROR frame) the client connects again
    (the next URL first), re-subscribes every open subscription and waits for
    the broker to confirm each, then sends what was queued. Meanwhile:
    ``async for`` over a subscription just waits; messages received on the
    lost connection refuse ``ack()``/``nack()`` (the broker redelivers them);
    a ``send(receipt=True)`` still waiting is sent again (at least once); an
    open transaction fails with :class:`TransactionError` (the broker rolled
    it back) rather than being replayed.

    Leaving the block sends DISCONNECT and waits (bounded) for its receipt, so
    everything sent before has reached the broker; then the socket is closed.
    Every task of the connection ends within the block.

    Raises:
      LocalProtocolError: a header of ``headers`` is reserved or cannot be
        sent in CONNECT (raised before anything is connected).
      ConnectFailed: refused, timed out, bad credentials, no common version.
      ServerError: the broker sent ERROR during the session (fail-fast).
      ConnectionLost: the connection broke (including missed heart-beats), the
        reconnect attempts ran out, or the DISCONNECT receipt did not come.
      RemoteProtocolError: the broker sent bytes that are not valid STOMP, or
        a frame over a limit (fail-fast; with a reconnect policy it is one
        more reason to reconnect).
    """
    extra = connect_headers(headers)
    urls = [url] if isinstance(url, str) or url is None else list(url)
    if not urls:
        raise ValueError("connect() needs at least one URL")
    targets = []
    for item in urls:
        endpoint = Endpoint.from_url(item) if item is not None else Endpoint()
        if len(urls) == 1:
            endpoint = attrs.evolve(
                endpoint,
                host=host if host is not None else endpoint.host,
                port=port if port is not None else endpoint.port,
            )
        targets.append(Target(item or f"stomp://{endpoint.host}:{endpoint.port}", endpoint))
    first = targets[0].endpoint
    options = Options(
        login=login if login is not None else first.login,
        passcode=passcode if passcode is not None else first.passcode,
        vhost=vhost if vhost is not None else (first.vhost or "/"),
        heartbeat=heartbeat,
        versions=versions,
        heartbeat_tolerance=heartbeat_tolerance,
        connect_timeout=connect_timeout,
        disconnect_timeout=disconnect_timeout,
        lenient=lenient,
        max_frame_size=max_frame_size,
        ssl_context=ssl_context,
        headers=extra,
    )
    if login is not None or passcode is not None:
        targets = [
            Target(t.url, attrs.evolve(t.endpoint, login=options.login, passcode=options.passcode))
            for t in targets
        ]
    rng = random.Random()
    conn, _ = await open_any(targets, options, reconnect, rng, initial=True)
    supervisor = None
    if reconnect is not None:

        async def reopen(failed_url: str) -> tuple[Connection, int]:
            index = next((i for i, t in enumerate(targets) if t.endpoint.url == failed_url), -1)
            return await open_any(targets, options, reconnect, rng, start=index + 1, initial=False)

        supervisor = Supervisor(reconnect, reopen, on_event)
    core = Core(conn, disconnect_timeout=disconnect_timeout, supervisor=supervisor)
    async with core.running():
        yield Client(core)
