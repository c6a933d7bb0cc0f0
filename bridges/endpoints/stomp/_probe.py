"""What a STOMP broker keeps of what the ``stomp`` sink sends, from its CONNECTED and the settings.

STOMP has no frame that asks a broker how it stores a destination, so this
connects (the broker names itself in CONNECTED's ``server`` header) and
combines that with what the sink sends:

- ``persistent = false``: RabbitMQ and ActiveMQ keep the message in memory
  only, so their restart loses what they receipted.
- a ``/topic/`` (or RabbitMQ ``/exchange/``) destination: the broker
  receipts a message no subscriber is there to take, and keeps nothing.
- RabbitMQ ``/queue/NAME``: its STOMP plugin declares the queue durable, and
  a ``persistent:true`` message is written to disk before the RECEIPT.
  ``/amq/queue/NAME`` names a queue declared elsewhere, whose durability
  RabbitMQ tells only its management API (not enabled by scripts/brokers)
  or ``rabbitmqctl``: an AMQP passive declare cannot say, so it is "not
  asked".
- ActiveMQ ``/queue/NAME``: persistent messages go to its store (KahaDB)
  before the RECEIPT.
"""

from __future__ import annotations

from ..._guarantee import AT_MOST_ONCE, DURABLE, NOT_ASKED, Guarantee


def judge(server: str | None, destination: str | None, weaker: str | None) -> Guarantee:
    """The guarantee of a sink sending to ``destination`` on the broker named ``server``.

    Args:
      server: CONNECTED's ``server`` header (``RabbitMQ/3.10.8``), None if absent.
      destination: the sink's constant destination, None when per message.
      weaker: the sink's own reason for at most once (``persistent = false``).
    """
    name = (server or "").split("/", 1)[0]
    if weaker is not None:
        return Guarantee(AT_MOST_ONCE, weaker)
    if destination is None:
        return Guarantee(NOT_ASKED, "the destination is per message: each decides")
    if destination.startswith(("/topic/", "/exchange/")):
        return Guarantee(
            AT_MOST_ONCE,
            f"{destination} is a topic: the broker receipts a message that no subscriber "
            "takes, and keeps nothing",
        )
    if name == "RabbitMQ" and destination.startswith("/queue/"):
        return Guarantee(
            DURABLE, "RabbitMQ declares /queue/ destinations durable; messages persistent:true"
        )
    if name == "RabbitMQ" and destination.startswith("/amq/queue/"):
        return Guarantee(
            NOT_ASKED,
            "an existing RabbitMQ queue: STOMP cannot ask whether it is durable "
            "(rabbitmqctl list_queues name durable says); messages persistent:true",
        )
    if name == "ActiveMQ" and destination.startswith("/queue/"):
        return Guarantee(DURABLE, "ActiveMQ stores persistent:true messages before the RECEIPT")
    return Guarantee(NOT_ASKED, f"{server or 'a broker that does not name itself'}: not known here")
