"""systemd's notification protocol (``sd_notify``): readiness, status, reload, watchdog.

A service of ``Type=notify`` tells systemd how it is doing by sending
datagrams of ``KEY=VALUE`` lines to the Unix socket named in
``$NOTIFY_SOCKET`` (a path, or ``@name`` for the abstract namespace)::

    READY=1                      every route is open, or has failed once and is retrying
    STATUS=2 routes: 2 running   one line, shown by ``systemctl status``
    RELOADING=1                  a reload started (with MONOTONIC_USEC=, as
    MONOTONIC_USEC=...           Type=notify-reload wants), READY=1 when done
    STOPPING=1                   shutdown started
    WATCHDOG=1                   alive (with WatchdogSec=: at half the interval)

Without ``$NOTIFY_SOCKET`` (not under systemd, or ``NotifyAccess=none``)
every call does nothing. A send that fails is logged once at debug level
and otherwise ignored: systemd going away must not stop the bridge.

The protocol is a few lines on a datagram socket, so it is written here
rather than taken from a library (the maintained ones are C bindings).
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Mapping

from .._redact import redact

log = logging.getLogger("bridges.service")


class Notifier:
    """Sends ``sd_notify`` messages to ``$NOTIFY_SOCKET``; does nothing without one.

    Args:
      environ: where to read ``NOTIFY_SOCKET``, ``WATCHDOG_USEC`` and
        ``WATCHDOG_PID`` (default: the process environment).
    """

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self._address = _address(env.get("NOTIFY_SOCKET", ""))
        self._socket: socket.socket | None = None
        self._failed = False
        self.watchdog_interval = _watchdog_interval(env)
        self._status: str | None = None

    @property
    def enabled(self) -> bool:
        """True when there is a socket to notify."""
        return self._address is not None

    def send(self, **fields: str | int) -> None:
        """Send one message: ``send(READY=1, STATUS="...")``; newlines in values become
        spaces, and secrets ``***`` (:mod:`bridges._redact`)."""
        if self._address is None:
            return
        lines = [
            f"{key}={' '.join(redact(str(value)).splitlines())}" for key, value in fields.items()
        ]
        data = ("\n".join(lines) + "\n").encode("utf-8", "replace")
        try:
            if self._socket is None:
                kind = socket.SOCK_DGRAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK
                self._socket = socket.socket(socket.AF_UNIX, kind)
            self._socket.sendto(data, self._address)
        except OSError as exc:
            if not self._failed:
                self._failed = True
                log.debug("cannot notify systemd at %r: %s", self._address, exc)

    def status(self, line: str) -> None:
        """``STATUS=line``, sent only when it differs from the last one."""
        if line != self._status:
            self._status = line
            self.send(STATUS=line)

    def ready(self, status: str) -> None:
        """``READY=1`` with the status line."""
        self._status = status
        self.send(READY=1, STATUS=status)

    def reloading(self) -> None:
        """``RELOADING=1`` and ``MONOTONIC_USEC`` (systemd's reload protocol)."""
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        self.send(RELOADING=1, MONOTONIC_USEC=usec)

    def stopping(self, status: str) -> None:
        """``STOPPING=1`` with the status line."""
        self._status = status
        self.send(STOPPING=1, STATUS=status)

    def watchdog(self) -> None:
        """``WATCHDOG=1``: the process is healthy."""
        self.send(WATCHDOG=1)

    def close(self) -> None:
        """Close the socket (a later send opens it again)."""
        if self._socket is not None:
            self._socket.close()
            self._socket = None


def _address(value: str) -> str | bytes | None:
    if not value:
        return None
    if value.startswith("@"):  # the abstract namespace: a leading NUL byte
        return b"\0" + value[1:].encode()
    if value.startswith("/"):
        return value
    log.debug("NOTIFY_SOCKET %r is neither a path nor @abstract: not notifying", value)
    return None


def _watchdog_interval(environ: Mapping[str, str]) -> float | None:
    """systemd's watchdog interval in s, or None when it is off or meant for another process."""
    usec = environ.get("WATCHDOG_USEC", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    pid = environ.get("WATCHDOG_PID", "")
    if pid and pid != str(os.getpid()):
        return None
    return int(usec) / 1_000_000
