"""MQTT endpoints against paho-mqtt used bare, on a private Mosquitto, in one run.

    .venv/bin/python bench/speed/mqtt_throughput.py [--count 20000] [--size 100] [--batch 100]
        [--rounds 5] [--json PATH]

Starts its own ``mosquitto`` (Debian's binary; loopback, a free port, no
persistence, no queue or in-flight limits) so that nothing else disturbs it,
and prints one table: messages/s and CPU time per message (this process,
all threads), medians over ``--rounds`` rounds, and the median of the
per-round ratios to the bare library in the same direction (each round runs
every case once: ``_endpoints.in_rounds``). Everything is MQTT 5, QoS 1.
The bridge rows run at the shipped defaults (``Context()``, a Route's own
in_flight, batch_count and batch_time); ``--batch`` is the bare publisher's.
``--json PATH`` writes the figures (``bench/_base.write_report``; series:
the client, label: the direction). ``bench/speed/queues_throughput.py`` runs
the bare and bridge cases of this bench beside the other queue families.

consume: ``count`` messages (each with a ``bridge-id`` user property, as the
mqtt sink sends them) wait in a persistent session; then

- *paho bare*: paho's own network thread (``loop_start``), ``manual_ack``,
  ``ack()`` called in ``on_message``: the plain loop, the limit;
- *paho thread + from_thread*: the design we did not choose: paho's thread
  hands each message to Trio with ``trio.from_thread.run_sync`` and Trio
  acks it;
- *paho driven by Trio (no route)*: the bridge's driver alone, acking in the
  message callback like the bare loop: the cost of the driver itself;
- *bridge mqtt source*: a route from the ``mqtt`` source (paho driven by Trio
  tasks, ``bridges/endpoints/mqtt/_driver.py``) to a sink that only counts:
  PUBACK after each batch.

publish: ``count`` messages,

- *paho bare*: the same messages (body, ``bridge-id`` user property), batches
  of ``--batch`` publishes, then every PUBACK awaited (``wait_for_publish``),
  on paho's own thread;
- *bridge mqtt sink*: a route from an in-memory source to the ``mqtt`` sink
  (the sink awaits every PUBACK of a batch).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import trio
from _common import HOST, environment_line
from _endpoints import (
    Case,
    in_rounds,
    private_server,
    run_from_memory,
    run_to_count,
    timed,
    write_rows,
)
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from bridges import Context
from bridges.endpoints.mqtt import MqttSink, MqttSinkConfig, MqttSource, MqttSourceConfig
from bridges.endpoints.mqtt._connection import Broker
from bridges.endpoints.mqtt._driver import PahoDriver, open_paho

CONSUME = "mqtt -> (consume)"
PUBLISH = "(publish) -> mqtt"
BARE = "paho bare (its thread)"
SOURCE = "bridge mqtt source"
SINK = "bridge mqtt sink"


def mosquitto_command(port: int, work: Path) -> list[str]:
    """A mosquitto of our own: no persistence, no queue or in-flight limits."""
    config = work / "mosquitto.conf"
    config.write_text(
        f"listener {port} {HOST}\nallow_anonymous true\npersistence false\n"
        "max_inflight_messages 0\nmax_queued_messages 0\nset_tcp_nodelay true\n"
    )
    return [shutil.which("mosquitto") or "/usr/sbin/mosquitto", "-c", str(config)]


def bare_client(client_id: str, *, manual_ack: bool = False) -> paho.Client:
    client = paho.Client(
        CallbackAPIVersion.VERSION2,
        client_id=client_id,
        protocol=paho.MQTTv5,
        manual_ack=manual_ack,
    )
    client.max_inflight_messages_set(0)
    client.max_queued_messages_set(0)
    return client


def session_properties() -> Properties:
    properties = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
    properties.SessionExpiryInterval = 3600
    return properties


def create_session(port: int, client_id: str, topic: str) -> None:
    """Connect once as ``client_id`` with a persistent session subscribed to ``topic``."""
    client = bare_client(client_id)
    subscribed = threading.Event()
    client.on_subscribe = lambda *args: subscribed.set()
    client.connect(HOST, port, clean_start=False, properties=session_properties())
    client.loop_start()
    client.subscribe(topic, qos=1)
    if not subscribed.wait(10):
        raise SystemExit("no SUBACK")
    client.disconnect()
    client.loop_stop()


def with_id(message_id: str) -> Properties:
    """The properties the mqtt sink sends with a message: its stable id as a user property."""
    properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
    properties.UserProperty = [("bridge-id", message_id)]
    return properties


def publish_bare(port: int, topic: str, count: int, size: int, batch: int) -> None:
    """``count`` QoS 1 messages (what the sink sends: body, ``bridge-id`` user property) in
    batches of ``batch``, each batch's PUBACKs awaited."""
    client = bare_client(f"pub-{uuid.uuid4().hex[:8]}")
    client.connect(HOST, port)
    client.loop_start()
    try:
        body = b"x" * size
        for start in range(0, count, batch):
            infos = [
                client.publish(topic, body, qos=1, properties=with_id(f"m{i}"))
                for i in range(start, min(count, start + batch))
            ]
            for info in infos:
                info.wait_for_publish(30)
    finally:
        client.disconnect()
        client.loop_stop()


def consume_bare(port: int, client_id: str, count: int) -> None:
    """Drain ``count`` messages from the session: PUBACK from on_message (manual_ack)."""
    client = bare_client(client_id, manual_ack=True)
    done = threading.Event()
    got = 0

    def on_message(client: paho.Client, userdata: Any, message: paho.MQTTMessage) -> None:
        nonlocal got
        client.ack(message.mid, message.qos)
        got += 1
        if got >= count:
            done.set()

    client.on_message = on_message
    client.connect(HOST, port, clean_start=False, properties=session_properties())
    client.loop_start()
    try:
        if not done.wait(120):
            raise SystemExit(f"paho bare got {got} of {count}")
    finally:
        client.disconnect()
        client.loop_stop()


async def consume_thread_bridged(port: int, client_id: str, count: int) -> None:
    """The alternative design: paho's thread hands each message to Trio, which acks it."""
    client = bare_client(client_id, manual_ack=True)
    send, receive = trio.open_memory_channel[paho.MQTTMessage](count)
    token = trio.lowlevel.current_trio_token()

    def on_message(client: paho.Client, userdata: Any, message: paho.MQTTMessage) -> None:
        trio.from_thread.run_sync(send.send_nowait, message, trio_token=token)

    client.on_message = on_message
    await trio.to_thread.run_sync(
        lambda: client.connect(HOST, port, clean_start=False, properties=session_properties())
    )
    client.loop_start()
    try:
        got = 0
        async for message in receive:
            client.ack(message.mid, message.qos)
            got += 1
            if got >= count:
                break
    finally:
        client.disconnect()
        await trio.to_thread.run_sync(client.loop_stop)


async def consume_driver(port: int, client_id: str, topic: str, count: int) -> None:
    """The bridge's paho driver without the route: PUBACK from the message callback."""
    config = MqttSourceConfig(url=f"mqtt://{HOST}:{port}", topics=[topic], client_id=client_id)
    done = trio.Event()
    got = 0
    driver: PahoDriver | None = None

    def on_message(message: paho.MQTTMessage) -> None:
        nonlocal got
        assert driver is not None
        driver.client.ack(message.mid, message.qos)
        driver.kick()
        got += 1
        if got >= count:
            done.set()

    broker = Broker.from_config(config)
    async with open_paho(
        config,
        broker,
        client_id,
        clean_start=False,
        ssl_context=None,
        properties=session_properties(),
        on_message=on_message,
    ) as opened:
        driver = opened
        with trio.fail_after(120):
            await done.wait()


async def consume_bridge(port: int, client_id: str, topic: str, count: int) -> None:
    """A route (shipped defaults) from the mqtt source to a counting sink."""
    config = MqttSourceConfig(url=f"mqtt://{HOST}:{port}", topics=[topic], client_id=client_id)
    await run_to_count(MqttSource(config, Context(route="bench")), count)


async def publish_bridge(port: int, topic: str, count: int, size: int) -> None:
    """A route (shipped defaults) from memory to the mqtt sink."""
    config = MqttSinkConfig(url=f"mqtt://{HOST}:{port}", topic=topic)
    await run_from_memory(MqttSink(config, Context(route="bench", role="sink")), count, size)


def cases(port: int, args: Any) -> list[Case]:
    """What this bench measures (the bare client first in each direction)."""
    count, size = args.count, args.size

    def on_session(runner: Callable[[str, str], None]) -> Callable[[], tuple[float, float]]:
        def once() -> tuple[float, float]:
            client_id, topic = f"bench-{uuid.uuid4().hex[:8]}", f"bench/{uuid.uuid4().hex[:8]}"
            create_session(port, client_id, topic)
            publish_bare(port, topic, count, size, 1000)
            return timed(lambda: runner(client_id, topic), count)

        return once

    def on_topic(runner: Callable[[str], None]) -> Callable[[], tuple[float, float]]:
        def once() -> tuple[float, float]:
            topic = f"bench/{uuid.uuid4().hex[:8]}"
            return timed(lambda: runner(topic), count)

        return once

    return [
        Case(CONSUME, BARE, on_session(lambda c, t: consume_bare(port, c, count))),
        Case(
            CONSUME,
            "paho thread + trio.from_thread",
            on_session(lambda c, t: trio.run(consume_thread_bridged, port, c, count)),
        ),
        Case(
            CONSUME,
            "paho driven by Trio (no route)",
            on_session(lambda c, t: trio.run(consume_driver, port, c, t, count)),
        ),
        Case(CONSUME, SOURCE, on_session(lambda c, t: trio.run(consume_bridge, port, c, t, count))),
        Case(PUBLISH, BARE, on_topic(lambda t: publish_bare(port, t, count, size, args.batch))),
        Case(PUBLISH, SINK, on_topic(lambda t: trio.run(publish_bridge, port, t, count, size))),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", metavar="PATH", help="write the figures here (write_report)")
    args = parser.parse_args()
    print(environment_line(), flush=True)
    with private_server(mosquitto_command, "mosquitto") as port:
        rows = in_rounds(cases(port, args), args.rounds)
    if args.json:
        write_rows(args.json, "mqtt_throughput", rows)
    print(
        f"MQTT 5, QoS 1, {args.count} messages of {args.size} B; bare: batch {args.batch}; "
        f"bridge: shipped defaults; {args.rounds} rounds, medians; mosquitto on loopback"
    )
    print(
        f"| {'direction':<18} | {'client':<31} | {'msg/s':>8} | {'CPU us/msg':>10} | "
        f"{'ratio':>6} | ratio per round"
    )
    print(f"|{'-' * 20}|{'-' * 33}|{'-' * 10}|{'-' * 12}|{'-' * 8}|{'-' * 20}")
    for row in rows:
        rounds = " ".join(f"{ratio:.2f}" for ratio in row["ratios"])
        print(
            f"| {row['direction']:<18} | {row['name']:<31} | {row['rate']:>8,.0f} | "
            f"{row['cpu_us']:>10.1f} | {row['ratio']:>5.0%} | {rounds}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
