"""What librdkafka said about the connection, so a failure names its cause.

librdkafka never gives up on a broker: a wrong SASL password, a
certificate the broker does not trust or a CA that did not sign the
broker's are retried for ever, and a write would wait its whole
``timeout`` to fail with "Message timed out". A :class:`Refusals` is the
client's ``error_cb``: it keeps the last connection error, and the
endpoint asks it between its waits. A refusal no retry of the same
settings can fix (authentication, a TLS handshake that failed
verification) fails the endpoint at once, in Kafka's words; any other
error (a broker down, a connection reset) is only named when a timeout
comes, beside it.

``note`` runs in librdkafka's callbacks, on whichever thread is in a
``poll``, ``flush`` or ``consume``: it only assigns attributes.
"""

from __future__ import annotations

from typing import Final

import confluent_kafka

from ._connection import KafkaEndpointError, one_line

#: librdkafka's errors that the same settings will meet again on every retry.
REFUSED: Final = frozenset(
    {
        confluent_kafka.KafkaError._AUTHENTICATION,  # noqa: SLF001 (librdkafka's local errors)
        confluent_kafka.KafkaError._SSL,  # noqa: SLF001
    }
)

#: librdkafka's timeouts: a connection error before one is likely its cause.
_TIMEOUTS: Final = frozenset(
    {
        confluent_kafka.KafkaError._MSG_TIMED_OUT,  # noqa: SLF001
        confluent_kafka.KafkaError._TIMED_OUT,  # noqa: SLF001
    }
)


class Refusals:
    """A client's ``error_cb``: the last error seen, and the last refusal."""

    __slots__ = ("last", "refused")

    def __init__(self) -> None:
        #: The last error librdkafka reported, as one line (None: none yet).
        self.last: str | None = None
        #: The last error of :data:`REFUSED` (None: none yet).
        self.refused: str | None = None

    def note(self, error: confluent_kafka.KafkaError) -> None:
        """librdkafka's ``error_cb``."""
        text = f"{error.str()} ({error.name()})"
        self.last = text
        if error.code() in REFUSED:
            self.refused = text

    def check(self, describe: str) -> None:
        """Raise when the brokers refused the connection as configured.

        Raises:
          KafkaEndpointError: ``describe``, and Kafka's reason.
        """
        if self.refused is not None:
            refused = self.refused
            raise KafkaEndpointError(f"{describe}: the brokers refused the connection: {refused}")

    def explain(self, error: object) -> str:
        """``error`` (a KafkaError or KafkaException) as one line; a timeout with the last
        connection error beside it, when there was one."""
        text = one_line(error)
        if isinstance(error, confluent_kafka.KafkaException) and error.args:
            error = error.args[0]
        timeout = isinstance(error, confluent_kafka.KafkaError) and error.code() in _TIMEOUTS
        if not timeout or self.last is None:
            return text
        return f"{text}; the last connection error: {self.last}"
