"""RabbitMQ killed under the amqp sink: nothing it confirmed is lost.

A small run of ``bench/crash/target_crash.py`` (file inbox -> amqp sink,
delivery mode 2 and publisher confirms, into a durable queue); RabbitMQ is
SIGKILLed once mid-stream (``scripts/brokers kill``, then ``start``, data kept).
"""

from __future__ import annotations

from amqp_servers import require_amqp
from family_kit import target_crash_run


def test_rabbitmq_sigkill_loses_nothing_confirmed() -> None:
    require_amqp()
    target_crash_run(["amqp"], ["rabbitmq"])
