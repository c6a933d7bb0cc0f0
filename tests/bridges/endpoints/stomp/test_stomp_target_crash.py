"""The target killed, not the bridge: nothing the stomp sink acknowledged is lost.

A small run of ``bench/crash/target_crash.py``: files dropped into an inbox
go through ``bridges run`` into RabbitMQ, ActiveMQ (``persistent = true``) and
the embedded broker with a data dir (its own process); the broker is
SIGKILLed once mid-stream and started again with its data. Every file moved
to ``done/`` (acknowledged upstream) must be in the queue afterwards
(``family_kit.target_crash_run``).
"""

from __future__ import annotations

from family_kit import target_crash_run

from conftest import require_real_broker


def test_rabbitmq_sigkill_loses_nothing_acknowledged_after_the_kill() -> None:
    # Open: RabbitMQ 3.10.8 has lost, in about 1 run of 7 under load, the messages
    # it receipted on a just-created queue before the kill (msg-000000 to the
    # kill point; README and delivery-guarantees.md give the figures). Those are
    # allowed here, and only those: anything acknowledged after the kill must be there.
    require_real_broker("rabbitmq")
    target_crash_run(["stomp-rabbitmq"], ["rabbitmq"], open_loss=True)


def test_activemq_sigkill_loses_nothing_acknowledged() -> None:
    require_real_broker("activemq")
    target_crash_run(["stomp-activemq"], ["activemq"])


def test_embedded_broker_sigkill_loses_nothing_acknowledged() -> None:
    results = target_crash_run(["embedded"], [])
    assert results[0]["duplicates"] == 0  # its duplicate window on bridge-id
    # Every lost id is reported, in runs, and split by the kill: none here.
    assert results[0]["lost_ids"] == []
    assert 0 < results[0]["acked_before_kill"] <= results[0]["acked"]
