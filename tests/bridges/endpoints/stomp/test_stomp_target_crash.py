"""The target killed, not the bridge: nothing the stomp sink acknowledged is lost.

A small run of ``bench/crash/target_crash.py``: files dropped into an inbox
go through ``bridges run`` into RabbitMQ (a queue the SEND creates, and one
declared beforehand), ActiveMQ (``persistent = true``) and
the embedded broker with a data dir (its own process); the broker is
SIGKILLed once mid-stream and started again with its data. Every file moved
to ``done/`` (acknowledged upstream) must be in the queue afterwards
(``family_kit.target_crash_run``).
"""

from __future__ import annotations

from family_kit import target_crash_run

from conftest import require_real_broker


def test_rabbitmq_sigkill_loses_nothing_acknowledged_after_the_kill() -> None:
    # RabbitMQ's own loss, found: the queue the first SEND creates is not durable
    # until Mnesia's "committed" decision for its declare reaches the log file,
    # which RabbitMQ's sync of the log can precede; a SIGKILL in between makes the
    # restart presume abort, dropping the queue and all it held (msg-000000 to the
    # kill point; delivery-guarantees.md, "What RabbitMQ's STOMP plugin does").
    # Those are allowed here, and only those: anything acknowledged after the
    # kill must be there.
    require_real_broker("rabbitmq")
    target_crash_run(["stomp-rabbitmq"], ["rabbitmq"], open_loss=True)


def test_rabbitmq_sigkill_loses_nothing_acknowledged_into_a_declared_queue() -> None:
    # The queue declared durable beforehand, and its definition written to
    # Mnesia's table files (mnesia:dump_log()): nothing acknowledged is lost.
    require_real_broker("rabbitmq")
    results = target_crash_run(["stomp-rabbitmq-declared"], ["rabbitmq"])
    # (what RabbitMQ held, read just before the kill, covers what was acked before that read)
    assert results[0]["held_at_kills"][0] >= results[0]["acked_when_held"][0] > 0


def test_activemq_sigkill_loses_nothing_acknowledged() -> None:
    require_real_broker("activemq")
    target_crash_run(["stomp-activemq"], ["activemq"])


def test_embedded_broker_sigkill_loses_nothing_acknowledged() -> None:
    results = target_crash_run(["embedded"], [])
    assert results[0]["duplicates"] == 0  # its duplicate window on bridge-id
    # Every lost id is reported, in runs, and split by the kill: none here.
    assert results[0]["lost_ids"] == []
    assert 0 < results[0]["acked_before_kill"] <= results[0]["acked"]
