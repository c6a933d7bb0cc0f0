"""RabbitMQ's queues for the crash scripts: declared durably, counted, deleted.

Over AMQP (``queues_crash.amqp_call``), and ``scripts/brokers rabbitmqctl``
for what AMQP cannot ask (a dump of Mnesia's log).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, Final

import aio_pika
from _crash import BenchError
from queues_crash import amqp_call, amqp_depth, amqp_fill

_BROKERS: Final = Path(__file__).resolve().parents[2] / "scripts" / "brokers"


def rabbitmq_queue_delete(name: str) -> None:
    """Delete RabbitMQ's queue NAME (what a STOMP ``/queue/NAME`` is), if it is there."""

    async def delete(channel: Any) -> None:
        await channel.queue_delete(name)

    amqp_call(delete)


def rabbitmq_depth(name: str) -> int:
    """The messages RabbitMQ's queue NAME holds (-1: there is no such queue)."""
    try:
        return amqp_depth(name)
    except aio_pika.exceptions.ChannelNotFoundEntity:
        return -1


def rabbitmq_declare_synced(name: str) -> None:
    """Declare RabbitMQ's queue NAME durable, then make its definition durable too.

    A declare returns before its definition is on disk: RabbitMQ writes the
    queue in one Mnesia transaction over a RAM and a disc table, which Mnesia
    commits with its asymmetric protocol, and the ``committed`` decision is
    logged later by ``mnesia_recover`` (a cast); RabbitMQ's sync of the log
    can come first. A SIGKILL before the decision reaches the file makes
    Mnesia presume abort at the restart: the queue and every message in it
    are gone (delivery-guarantees.md). ``mnesia:dump_log()`` writes the
    table files from the log, waiting for the decision, so the queue
    survives a SIGKILL from then on.
    """
    amqp_fill(name, [])
    dump = [str(_BROKERS), "rabbitmqctl", "eval", "mnesia:dump_log()."]
    done = subprocess.run(dump, capture_output=True, text=True, check=False, timeout=120)
    if done.returncode != 0 or "dumped" not in done.stdout:
        raise BenchError(f"rabbitmqctl eval mnesia:dump_log(): {done.stdout}{done.stderr}")
