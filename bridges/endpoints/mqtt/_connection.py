"""Connection settings both ``mqtt`` endpoints share, and the URL they parse.

``mqtt://HOST:PORT`` (1883 by default) or ``mqtts://HOST:PORT`` (8883, TLS
verified against the system CAs or ``ca_file``); ``user:password@`` in the URL
works, but ``username`` / ``password`` (or ``password_file``) keep the secret
out of the URL, which appears in logs without it either way.
"""

from __future__ import annotations

import re
import ssl
from typing import Final, Literal
from urllib.parse import unquote, urlsplit

import attrs
from attrs.validators import ge, le

from bridges import Context, InvalidSetting
from bridges._readfile import checked_cafile, open_verifying_context


class MqttError(Exception):
    """An MQTT endpoint failed; the message names the broker (never the password) and why."""


@attrs.frozen
class MqttConnection:
    """Connection settings both ``mqtt`` endpoints share.

    Attributes:
      url: the broker: ``mqtt://HOST:PORT``, or ``mqtts://`` for TLS
        (verified; port 8883); credentials in it are never logged.
      username: the user name (or in the URL, ``mqtt://user:pass@host``).
      password: the password.
      protocol: ``5`` (MQTT 5), or ``4`` for MQTT 3.1.1 (no headers).
      client_id: the MQTT client id; default: ``bridge-ROUTE`` for a source
        (it must be unique: the broker keeps its session), and
        ``bridge-ROUTE-RANDOM`` for a sink (a clean session).
      keepalive: the MQTT keep-alive interval, s.
      connect_timeout: how long connecting may take, s.
      ca_file: for ``mqtts://``: trust the CAs in this file (PEM) instead of
        the system's.
      qos: ``1`` (at least once), or ``0`` (at most once: ``bridges check``
        warns); ``2`` is refused (paho answers PUBREC before the sink holds
        the message).
      max_bytes: the largest packet accepted (MQTT 5), bytes.
    """

    url: str = "mqtt://127.0.0.1:1883"
    username: str | None = None
    password: str | None = attrs.field(default=None, metadata={"secret": True}, repr=False)
    protocol: Literal[4, 5] = 5
    client_id: str | None = None
    keepalive: int = attrs.field(default=60, validator=[ge(5), le(65535)])
    connect_timeout: float = attrs.field(default=10.0, validator=ge(0.1))
    ca_file: str | None = None
    qos: Literal[0, 1, 2] = 1
    max_bytes: int = attrs.field(default=16 * 1024 * 1024, validator=[ge(1), le(268_435_455)])


@attrs.frozen
class Broker:
    """A parsed ``mqtt://`` / ``mqtts://`` URL plus the endpoint's credentials."""

    host: str
    port: int
    tls: bool
    username: str | None = None
    password: str | None = attrs.field(default=None, repr=False)

    @property
    def where(self) -> str:
        """The URL without credentials, for logs and errors."""
        return f"{'mqtts' if self.tls else 'mqtt'}://{self.host}:{self.port}"

    @classmethod
    def from_config(cls, config: MqttConnection) -> Broker:
        """Parse ``config.url``; ``username``/``password`` settings win over the URL's.

        Raises:
          InvalidSetting: not an mqtt URL.
        """
        try:
            parts = urlsplit(config.url)
            tls = parts.scheme == "mqtts"
            port = parts.port or (8883 if tls else 1883)
        except ValueError as exc:
            raise InvalidSetting("url", f"not a URL: {exc}") from None
        if parts.scheme not in ("mqtt", "mqtts"):
            raise InvalidSetting("url", "expected mqtt://HOST:PORT or mqtts://HOST:PORT")
        if not parts.hostname:
            raise InvalidSetting("url", "no host")
        if parts.path.strip("/") or parts.query:
            raise InvalidSetting("url", "an mqtt URL has no path or query")
        username = config.username or (unquote(parts.username) if parts.username else None)
        password = config.password or (unquote(parts.password) if parts.password else None)
        if password is not None and username is None:
            raise InvalidSetting("password", "a password needs a username")
        return cls(parts.hostname, port, tls, username, password)

    async def ssl_context(self, config: MqttConnection, context: Context) -> ssl.SSLContext | None:
        """A verifying TLS context for ``mqtts://`` (system CAs, or ``ca_file``),
        made off the event loop."""
        if not self.tls:
            return None
        return await open_verifying_context(checked_cafile("ca_file", config.ca_file, context))


#: What MQTT strings should not hold and Mosquitto refuses by dropping the connection:
#: NUL and the other control characters (C0, DEL, C1), and the Unicode noncharacters.
_NONCHARACTERS: Final = "".join(
    chr(plane * 0x10000 + low) for plane in range(1, 17) for low in (0xFFFE, 0xFFFF)
)
_NOT_IN_MQTT_STRINGS: Final = re.compile(
    f"[\x00-\x1f\x7f-\x9f\ufdd0-\ufdef\ufffe\uffff{_NONCHARACTERS}]"
)


def check_string(text: str, what: str) -> str | None:
    """Why ``text`` cannot be an MQTT string (a topic, a user property), or None.

    A broker that gets one drops the connection, which would fail the whole
    batch at every retry; rejecting the one message is the better outcome.
    """
    bad = _NOT_IN_MQTT_STRINGS.search(text)
    if bad is not None:
        return f"{what} holds {bad.group()!r}, which MQTT strings cannot carry"
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return f"{what} is not valid UTF-8 text"
    if size > 65535:
        return f"{what} is longer than 65,535 bytes"
    return None


def check_topic(topic: str, *, filter: bool) -> str | None:
    """Why ``topic`` is not a valid topic name (or filter, when ``filter``), or None.

    Names carry no wildcards; filters may, but ``#`` only as the last level
    and each wildcard as a whole level. Neither may be empty, or fail
    :func:`check_string` (control characters, over 65,535 bytes).
    """
    if not topic:
        return "an empty topic"
    problem = check_string(topic, f"topic {topic[:100]!r}")
    if problem is not None:
        return problem
    if not filter:
        if "+" in topic or "#" in topic:
            return f"topic {topic!r} holds a wildcard (+ or #); a topic name cannot"
        return None
    levels = topic.split("/")
    for index, level in enumerate(levels):
        if "#" in level and (level != "#" or index != len(levels) - 1):
            return f"topic filter {topic!r}: '#' must be a whole last level"
        if "+" in level and level != "+":
            return f"topic filter {topic!r}: '+' must be a whole level"
    return None
