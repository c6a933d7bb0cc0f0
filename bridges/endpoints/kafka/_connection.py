"""What both ``kafka`` endpoints share: settings, header names, error wording, the thread rule.

The client is confluent-kafka (librdkafka, C; its wheels carry the library).
Its calls that wait (``consume``, ``flush``, ``commit``, ``close``, admin
requests) run in a Trio worker thread through :func:`in_thread`, each with a
short timeout of its own, so a cancelled route waits at most that long and
no thread is ever abandoned: when the endpoint's ``async with`` ends, no
call of ours is still running. Calls that only queue work (``produce``,
an asynchronous ``commit``) run on the event loop: they never block.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any, Final, TypeVar

import attrs
import confluent_kafka
from attrs.validators import ge

from bridges import InvalidSetting, blocking

T = TypeVar("T")

#: The header that carries a message's stable id (as the stomp, redis and nats families).
ID_HEADER: Final = "bridge-id"
#: Headers a source adds that describe one delivery: a sink never writes them as record headers.
TOPIC_HEADER: Final = "kafka-topic"
PARTITION_HEADER: Final = "kafka-partition"
OFFSET_HEADER: Final = "kafka-offset"
TIMESTAMP_HEADER: Final = "kafka-timestamp"
KEY_HEADER: Final = "kafka-key"
#: A tombstone (a record with a null value): its body is empty, this header says it was null.
TOMBSTONE_HEADER: Final = "kafka-tombstone"
DELIVERY_HEADERS: Final = frozenset(
    {TOPIC_HEADER, PARTITION_HEADER, OFFSET_HEADER, TIMESTAMP_HEADER, KEY_HEADER, TOMBSTONE_HEADER}
)
#: Kafka's own rule for topic names.
_TOPIC: Final = re.compile(r"[A-Za-z0-9._-]{1,249}")
_SERVER: Final = re.compile(r"[A-Za-z0-9.:\[\]_-]+:\d{1,5}")


class KafkaEndpointError(Exception):
    """A Kafka endpoint failed; the message names the servers and why."""


@attrs.frozen
class KafkaConnection:
    """Connection settings both ``kafka`` endpoints share.

    Attributes:
      bootstrap_servers: the brokers to ask first, ``HOST:PORT`` separated
        by commas (Kafka's own ``bootstrap.servers``).
      topic: required: the topic (for the sink, a template).
      client_id: the client id the brokers log; default: ``bridge-ROUTE``.
      timeout: how long one request (metadata, commit, a batch's
        acknowledgements) may take before the endpoint fails, s.
    """

    bootstrap_servers: str = "127.0.0.1:9092"
    topic: str = ""
    client_id: str | None = None
    timeout: float = attrs.field(default=30.0, validator=ge(0.5))


def check_servers(servers: str) -> str:
    """``servers`` checked (``HOST:PORT`` separated by commas).

    Raises:
      InvalidSetting: not in that form.
    """
    items = [item.strip() for item in servers.split(",")]
    if not items or not all(_SERVER.fullmatch(item) for item in items):
        raise InvalidSetting("bootstrap_servers", f"{servers[:80]!r} is not HOST:PORT[,HOST:PORT]")
    return ",".join(items)


def check_topic(topic: str) -> None:
    """Raises ValueError for a name Kafka refuses (1 to 249 of ``A-Z a-z 0-9 . _ -``)."""
    if not _TOPIC.fullmatch(topic) or topic in (".", ".."):
        raise ValueError(f"{topic[:60]!r} is not a valid Kafka topic name")


def one_line(error: object) -> str:
    """A librdkafka error (a KafkaError, or the KafkaException that carries one) as one line."""
    if isinstance(error, confluent_kafka.KafkaException) and error.args:
        error = error.args[0]
    if isinstance(error, confluent_kafka.KafkaError):
        return f"{error.str()} ({error.name()})"
    return str(error) or type(error).__name__


async def in_thread(call: Callable[..., T], *args: Any) -> T:
    """``call(*args)`` through :func:`bridges.blocking`, never abandoned (its own
    timeout bounds it): librdkafka's calls change the client's state."""
    what = f"kafka {getattr(call, '__name__', 'call')}"
    return await blocking(functools.partial(call, *args), what=what)
