"""Opening a connection: the options of CONNECT, failover targets, retries.

:func:`open_any` is how both the first connection and every reconnection are
made: it walks the failover list with the :class:`Reconnect` policy's
backoff and returns the first :class:`Connection` that said CONNECTED.
"""

from __future__ import annotations

import random
import ssl
from collections.abc import Sequence

import attrs
import trio

from ._connection import Connection
from ._errors import ConnectFailed, RemoteProtocolError
from ._reconnect import Reconnect
from ._transport import open_stream
from ._url import Endpoint
from .frame import VERSIONS


@attrs.frozen
class Options:
    """How to open and greet a connection (all of connect()'s connection arguments)."""

    login: str | None = None
    passcode: str | None = None
    vhost: str = "/"
    heartbeat: tuple[int, int] = (10_000, 10_000)
    versions: Sequence[str] = VERSIONS
    heartbeat_tolerance: float = 2.0
    connect_timeout: float = 10.0
    disconnect_timeout: float = 5.0
    lenient: bool = False
    max_frame_size: int | None = None
    ssl_context: ssl.SSLContext | None = None

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
