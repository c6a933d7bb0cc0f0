"""The kafka source's topic id: asked with an admin request, in Kafka's text form.

The source asks for the topic's id once per open, and again when a
partition's offsets go back (the topic deleted and created again); its
message ids are ``TOPIC#TOPIC_ID:PARTITION:OFFSET``.
"""

from __future__ import annotations

import base64
import concurrent.futures
import logging
from typing import Any, Final

import confluent_kafka
import trio
from confluent_kafka.admin import AdminClient

from ._connection import KafkaEndpointError, in_thread
from ._refusals import Refusals

log = logging.getLogger("bridges.kafka")

#: How long one wait for the admin answer lasts in the worker thread, s (the bound on a cancel).
_WAIT: Final = 0.1


async def read_topic_id(
    admin: AdminClient,
    consumer: confluent_kafka.Consumer,
    topic: str,
    request_timeout: float,
    refusals: Refusals,
    describe: str,
) -> str:
    """``topic``'s id (Kafka's UUID of it, as :func:`topic_id_text` writes it), each
    describe request bounded by ``request_timeout``, s.

    A topic that does not exist yet is waited for (asked again every second,
    with one log line): the broker creates it when it allows auto-creation
    (``auto.create.topics.enable``), else a sink or an operator may.

    Raises:
      KafkaEndpointError: no broker answered, the brokers refused the
        connection (``refusals``: at once) or the client may not see it.
    """
    topics = confluent_kafka.TopicCollection([topic])
    said = False
    while True:
        future = admin.describe_topics(topics, request_timeout=request_timeout)[topic]
        while not future.done():
            await in_thread(answer_or_poll, future, admin, _WAIT)
            refusals.check(describe)
        try:
            description = future.result()
        except confluent_kafka.KafkaException as exc:
            unknown = confluent_kafka.KafkaError.UNKNOWN_TOPIC_OR_PART
            if exc.args and exc.args[0].code() == unknown:
                if not said:
                    log.info("%s: waiting for the topic to exist", describe)
                    said = True
                # A metadata request for the topic: the consumer's asks the broker to
                # create it (allow.auto.create.topics), as Kafka's own consumer does.
                await in_thread(consumer.list_topics, topic, 1.0)
                await trio.sleep(1.0)
                continue
            raise KafkaEndpointError(f"{describe}: {refusals.explain(exc)}") from None
        return topic_id_text(description.topic_id)


def answer_or_poll(future: concurrent.futures.Future[Any], admin: AdminClient, wait: float) -> None:
    """Wait up to ``wait`` seconds for ``future``'s answer (it returns as soon as it comes),
    then serve the admin client's callbacks (its ``error_cb``: a refused connection
    fails now, not at the timeout).

    (Polling for the whole wait instead made every lookup last 100 ms:
    librdkafka completes the future from its own thread, and ``poll`` returns
    only for a callback. The answer takes 3 to 5 ms on a quiet broker.)
    """
    concurrent.futures.wait([future], timeout=wait)
    admin.poll(0)


def topic_id_text(topic_id: Any) -> str:
    """A topic id as Kafka's own tools print it: URL-safe base64 of its 16 bytes, unpadded.

    (librdkafka's own text form is standard base64, whose ``/`` and ``+``
    would not survive an id used as a file name or a STOMP header as well.)
    """
    high = topic_id.get_most_significant_bits() & 0xFFFF_FFFF_FFFF_FFFF
    low = topic_id.get_least_significant_bits() & 0xFFFF_FFFF_FFFF_FFFF
    raw = high.to_bytes(8, "big") + low.to_bytes(8, "big")
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")
