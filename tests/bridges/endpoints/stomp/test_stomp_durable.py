"""The stomp sink is durable by default on a real broker, and says so when it is not."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import trio

import trio_stomp
from bridges import Context, Route, open_shared
from bridges._cli import EXIT_FAILED, EXIT_OK, EXIT_WEAKER, main
from bridges.endpoints.stomp import EMBEDDED_BROKER, StompSink, StompSinkConfig
from bridges.service import Stopped
from bridges.testing import FakeSource, messages
from trio_stomp.broker import open_broker

from conftest import REAL_BROKERS, require_real_broker

CTX = Context(route="s", role="sink")


async def received(url: str, destination: str, count: int) -> list[trio_stomp.Message]:
    got: list[trio_stomp.Message] = []
    async with trio_stomp.connect(url) as client:
        async with client.subscribe(destination, ack="client-individual") as sub:
            with trio.move_on_after(10):
                async for message in sub:
                    await message.ack()
                    got.append(message)
                    if len(got) == count:
                        break
    return got


@pytest.mark.parametrize("broker", ["rabbitmq", "activemq"])
async def test_the_stomp_sink_sends_persistent_messages_to_a_real_broker_by_default(
    broker: str, unique: Callable[[str], str]
) -> None:
    require_real_broker(broker)
    url = REAL_BROKERS[broker]
    destination = unique("queue")
    sink = StompSink(StompSinkConfig(url=url, destination=destination), CTX)
    assert sink.persistent
    assert sink.check_warnings() == []
    await Route("s", FakeSource(messages(3)), sink, batch_time=0).run()
    got = await received(url, destination, 3)
    # Both RabbitMQ and ActiveMQ mark a message they keep on disk persistent:true.
    assert [m.headers.get("persistent") for m in got] == ["true"] * 3


@pytest.mark.parametrize("broker", ["rabbitmq", "activemq"])
async def test_persistent_false_is_kept_and_said_to_be_at_most_once(
    broker: str, unique: Callable[[str], str]
) -> None:
    require_real_broker(broker)
    url = REAL_BROKERS[broker]
    destination = unique("queue")
    config = StompSinkConfig(url=url, destination=destination, persistent=False)
    sink = StompSink(config, CTX)
    assert not sink.persistent
    [warning] = sink.check_warnings()
    assert "AT MOST ONCE across a broker restart" in warning
    assert sink.weaker_guarantee() is not None
    await Route("s", FakeSource(messages(2)), sink, batch_time=0).run()
    got = await received(url, destination, 2)
    assert [m.headers.get("persistent") for m in got] != ["true"] * 2


async def test_the_embedded_broker_gets_no_persistent_header_and_no_warning() -> None:
    async with open_broker() as broker, open_shared() as shared:
        shared.provide(EMBEDDED_BROKER, broker)
        context = Context(route="s", role="sink", embedded=True, shared=shared)
        sink = StompSink(StompSinkConfig(url="embedded", destination="/queue/e"), context)
        assert sink.check_warnings() == []
        assert sink.weaker_guarantee() is None
        # Its address reaches it too: known once it runs.
        by_address = StompSink(StompSinkConfig(url=broker.url, destination="/queue/e"), context)
        assert "persistent" not in by_address.send_headers()
        await Route("s", FakeSource(messages(2)), sink, batch_time=0).run()
        got = await received(broker.url, "/queue/e", 2)
    assert [m.headers.get("persistent") for m in got] == [None, None]


def test_a_topic_destination_is_warned_about() -> None:
    sink = StompSink(StompSinkConfig(destination="/topic/orders"), CTX)
    [warning] = sink.check_warnings()
    assert "no subscriber" in warning or "no " in warning
    assert "/queue/" in warning


def test_persistent_cannot_be_set_twice() -> None:
    with pytest.raises(ValueError, match=r"headers\.persistent"):
        StompSink(
            StompSinkConfig(destination="/queue/a", persistent=True, headers={"persistent": "x"}),
            CTX,
        )


def test_check_and_the_last_line_name_a_non_persistent_route(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "b.toml"
    config.write_text(
        "[routes.r]\n"
        'source = { type = "file", path = "in" }\n'
        'sink = { type = "stomp", url = "stomp://127.0.0.1:61613", destination = "/queue/x",'
        " persistent = false }\n"
    )
    assert main(["check", str(config)]) == 0
    err = capsys.readouterr().err
    assert "r: warning: stomp sink with persistent = false" in err
    assert "AT MOST ONCE across a broker restart" in err
    stopped = Stopped(at_most_once=("r",))
    assert stopped.exit_status == 0
    assert "route(s) r wrote AT MOST ONCE across a restart of their target" in stopped.summary()


def probe(tmp_path: Path, sink: str) -> int:
    config = tmp_path / "b.toml"
    config.write_text(
        f'[routes.r]\nsource = {{ type = "file", path = "{tmp_path / "in"}" }}\nsink = {sink}\n'
    )
    return main(["check", "--probe", str(config)])


@pytest.mark.parametrize("broker", ["rabbitmq", "activemq"])
def test_check_probe_gives_each_stomp_routes_real_guarantee(
    broker: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    require_real_broker(broker)
    url = REAL_BROKERS[broker]
    sink = f'{{ type = "stomp", url = "{url}", destination = "/queue/probe" }}'
    assert probe(tmp_path, sink) == EXIT_OK
    assert "r: durable (" in capsys.readouterr().err
    off = sink.replace(" }", ", persistent = false }")
    assert probe(tmp_path, off) == EXIT_WEAKER
    assert "r: at most once across a target restart (its sink's target: persistent = false" in (
        capsys.readouterr().err
    )
    topic = sink.replace("/queue/probe", "/topic/probe")
    assert probe(tmp_path, topic) == EXIT_WEAKER
    assert "no subscriber takes" in capsys.readouterr().err


def test_check_probe_exits_1_when_a_target_cannot_be_reached(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sink = '{ type = "stomp", url = "stomp://127.0.0.1:9", destination = "/queue/a" }'
    assert probe(tmp_path, sink) == EXIT_FAILED
    assert "r: sink not reached: ConnectFailed" in capsys.readouterr().err


def test_the_stop_names_the_routes_that_wrote_at_most_once() -> None:
    from bridges.service._process import _Stopping

    weak = StompSink(StompSinkConfig(destination="/queue/a", persistent=False), CTX)
    strong = StompSink(StompSinkConfig(destination="/queue/a"), CTX)
    routes = [Route("weak", FakeSource([]), weak), Route("strong", FakeSource([]), strong)]
    assert _Stopping(routes=routes).result().at_most_once == ("weak",)
