"""The kafka source's topic id: waiting for an admin answer, and the id's text form.

The source asks for the topic's id once per open (ids are
``TOPIC#TOPIC_ID:PARTITION:OFFSET``); these are the two pieces of that
lookup with no state of the source's.
"""

from __future__ import annotations

import base64
import concurrent.futures
from typing import Any

from confluent_kafka.admin import AdminClient


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
