"""Every file in examples/ runs as its header (or docstring) says, against its real server.

Each test puts a message in with the header's Send line, sees it come out
with its Read line, stops the bridge with SIGINT, and checks the exit status
and the last line a user sees. The examples whose embedded broker keeps what
they accept (``data_dir``) are also stopped with a message accepted but not
yet read: the stop says where it is kept, and the next start hands it to
the Read line. The systemd unit has tests of its own.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import time
import tomllib
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import attrs
import pytest
import trio
from example_kit import BIN, Example, environment
from family_kit import EXAMPLES, ROOT

import trio_stomp

from conftest import require_real_broker

FAMILIES = ("mqtt", "redis", "nats", "kafka")
sys.path[:0] = [str(ROOT / "tests/bridges/endpoints" / name) for name in FAMILIES]
sys.path[:0] = [str(ROOT / "tests/bridges/endpoints/amqp")]
from amqp_servers import rabbit, require_amqp  # noqa: E402
from kafka_servers import require_kafka  # noqa: E402
from mqtt_servers import require_mqtt  # noqa: E402
from nats_servers import require_nats  # noqa: E402
from redis_servers import require_redis  # noqa: E402

WEBHOOKS = (ROOT / "docs" / "howto" / "webhooks.md").read_text()
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def snippet(kind: str) -> str:
    """The block under ``<!-- test: example: webhook-sender KIND -->`` in docs/howto/webhooks.md."""
    marker = f"<!-- test: example: webhook-sender {kind} -->"
    found = re.search(rf"{re.escape(marker)}\n```\w+\n(.*?)```", WEBHOOKS, re.S)
    assert found is not None, kind
    return found[1]


def token() -> str:
    return f"hello-{uuid.uuid4().hex[:12]}"


def stomp_url(read: str) -> tuple[str, str]:
    """The URL and destination of a ``trio-stomp listen -u URL DEST`` line."""
    words = read.split()
    return words[words.index("-u") + 1], words[-1]


async def peek(url: str, destination: str, body: str) -> None:
    """Receive BODY from DESTINATION and leave without acking it: it goes back to the queue."""
    async with trio_stomp.connect(url) as client:
        async with client.subscribe(destination, ack="client-individual") as sub:
            async for message in sub:
                if message.text == body:
                    return


# --- the examples whose embedded broker keeps what they accept -----------------------------


async def send_webhook(example: Example, kind: str) -> None:
    """The webhooks how-to's sender of KIND, as documented: 204."""
    if kind == "sh":
        said = await example.sh(snippet("sh"))
    else:
        (example.cwd / "sender.py").write_text(snippet("python"))
        done = await trio.run_process(
            [str(BIN / "python"), "sender.py"],
            cwd=example.cwd,
            env=environment(ORDERS_SECRET=SECRET),
            capture_stdout=True,
        )
        said = done.stdout.decode()
    assert "204" in said, said


@attrs.frozen
class Kept:
    """An example with a data_dir whose Read destination no route reads."""

    require: Callable[[], object]
    #: Puts a message in (None: the header's Send line); what then arrives.
    send: Callable[[Example, str], Awaitable[str]] | None = None


async def webhook_in(example: Example, kind: str) -> str:
    await send_webhook(example, kind)
    return '{"order": 17}'


KEPT = {
    "mqtt-stomp.toml": Kept(require_mqtt),
    "redis-stomp.toml": Kept(require_redis),
    "nats-stomp.toml": Kept(require_nats),
    "kafka-stomp.toml": Kept(require_kafka),
    "amqp-stomp.toml": Kept(require_amqp),
    "webhook-to-stomp.toml": Kept(lambda: None, webhook_in),
}


@pytest.mark.deadline(60)
@pytest.mark.parametrize("name", sorted(KEPT))
async def test_an_example_keeps_what_it_accepted_and_says_where(name: str, tmp_path: Path) -> None:
    case = KEPT[name]
    case.require()
    example = Example(name, tmp_path)
    url, destination = stomp_url(example.fields["Read"])
    text = (EXAMPLES / name).read_text()
    data_dir = tomllib.loads(text)["broker"]["data_dir"]
    assert data_dir == f"state/{name.removesuffix('.toml')}"
    assert f"kept on disk in ./{data_dir}" in re.sub(r"\n#\s+", " ", text)  # Waits: says so

    async def put_in(kind: str) -> str:
        if case.send is not None:
            return await case.send(example, kind)
        body = token()
        await example.send(body)
        return body

    async with example.running() as bridge:
        first = await put_in("sh")
        assert first in await example.read(first)
        second = await put_in("python")
        await peek(url, destination, second)  # accepted, not read
        status, last = await bridge.stop()
    assert status == 3, bytes(bridge.output)
    assert re.fullmatch(
        rf"bridges: stopped; 1 message\(s\) kept in \S*{data_dir}: {destination} \(1\)", last
    ), last
    async with example.running() as bridge:
        assert second in await example.read(second)
        status, last = await bridge.stop()
    assert (status, last) == (0, "bridges: stopped"), bytes(bridge.output)


# --- the others -----------------------------------------------------------------------------


@pytest.mark.deadline(30)
async def test_the_quickstart_moves_a_file_from_inbox_to_outbox(tmp_path: Path) -> None:
    example = Example("quickstart.toml", tmp_path)
    async with example.running() as bridge:
        body = token()
        await example.send(body)
        assert (await example.read(body)).strip() == body
        status, last = await bridge.stop()
    assert (status, last) == (0, "bridges: stopped"), bytes(bridge.output)
    assert (tmp_path / "inbox" / "done" / "hello.txt").read_text().strip() == body


@pytest.mark.deadline(40)
async def test_the_jsonl_example_sends_each_line_to_its_topic(tmp_path: Path) -> None:
    require_real_broker("rabbitmq")
    example = Example("jsonl-to-stomp.toml", tmp_path)
    async with example.running() as bridge:
        body = token()
        shown = await example.read(body, resend=body)
        status, last = await bridge.stop()
    assert f'"note": "{body}"' in shown
    assert (status, last) == (0, "bridges: stopped"), bytes(bridge.output)


@pytest.mark.deadline(40)
async def test_the_rabbitmq_archive_example_writes_a_json_line(tmp_path: Path) -> None:
    require_real_broker("rabbitmq")
    example = Example("rabbitmq-to-jsonl.toml", tmp_path)
    body = token()
    shown = await example.round_trip(body)
    archived = [json.loads(line) for line in shown.splitlines()]
    mine = [line for line in archived if body in line["body"]]
    assert len(mine) == 1, archived
    assert mine[0]["headers"]["order-id"] == "7"  # json_extract ran (the body's id)


@pytest.mark.deadline(40)
async def test_the_rabbitmq_stomp_example_reaches_an_amqp_queue(tmp_path: Path) -> None:
    url = require_amqp()
    example = Example("amqp-via-rabbitmq-stomp.toml", tmp_path)
    async with rabbit(url) as (aio, channel):  # no queue orders from an earlier run
        await aio.run(channel.queue_delete, "orders")
    # The Needs: line's own command makes the queue and its binding.
    comments = (EXAMPLES / example.name).read_text()
    (make,) = re.findall(r"^#\s+(timeout 3 trio-stomp listen .*)$", comments, re.M)
    await example.sh(make, check=False)  # (timeout's exit status is 124)
    async with rabbit(url) as (aio, channel):  # it exists; the round trip needs its binding
        await aio.run(channel.declare_queue, "orders", durable=True, passive=True)
    body = token()
    shown = await example.round_trip(body)
    lines = [json.loads(line) for line in shown.splitlines()]
    assert any(
        line["body"] == f"{body}\n" and line["headers"]["file-name"] == "hello.txt"
        for line in lines
    ), lines


@pytest.mark.deadline(40)
async def test_the_spark_jsonl_example_runs_on_the_local_engine(tmp_path: Path) -> None:
    """Its second Run line; the Spark engine runs it in tests/bridges/spark/test_spark_engine.py."""
    require_real_broker("rabbitmq")
    example = Example("spark-jsonl-to-stomp.toml", tmp_path)
    example.fields["Run"] = "bridges run --engine local examples/spark-jsonl-to-stomp.toml"
    body = token()
    shown = await example.round_trip(body)
    assert f'"note": "{body}"' in shown


@pytest.mark.deadline(120)
async def test_the_parquet_example_runs_on_spark_without_pyspark_python(tmp_path: Path) -> None:
    require_real_broker("rabbitmq")
    example = Example("spark-stomp-to-parquet.toml", tmp_path)
    # python3 on PATH is not the venv's: the workers must still run the venv's python.
    async with example.running(b"on Spark", venv_on_path=False) as bridge:
        body = token()
        await example.send(body)
        shown = await example.read(body)
        status, last = await bridge.stop(within=60)
    assert body in shown
    assert (status, last) == (0, "bridges: stopped"), bytes(bridge.output)


# --- the Python examples ----------------------------------------------------------------------


def python_example(name: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """``python examples/NAME ARGS...`` from the repository's top folder, as its docstring says."""
    return subprocess.run(
        [str(BIN / "python"), str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=ROOT,
    )


def hello(*args: str) -> subprocess.CompletedProcess[str]:
    return python_example("hello.py", *args)


def test_hello_tours_the_embedded_broker_and_lives_through_its_restart() -> None:
    result = hello()
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("embedded broker on stomp://127.0.0.1:")
    url = lines[0].split()[-1]
    assert lines[1] == "connected: STOMP 1.2 to trio-stomp/0.1.0"
    received = [line.split("'")[1] for line in lines if line.startswith("received")]
    assert received == ["hello, world", "first of two", "second of two", *received[3:]]
    assert received[3:] == ["sent by the reconnecting client"]
    stopping = "broker shutting down: the broker is stopping"  # (ERROR's message: its body)
    assert f"connection lost to {url} ({stopping}); reconnecting" in lines
    assert any(
        re.fullmatch(rf"connection restored to {url} after \d+ attempt\(s\), [\d.]+ s down", line)
        for line in lines
    ), lines


def test_hello_with_a_url_nobody_answers_fails_at_once_with_one_line() -> None:
    result = hello("stomp://127.0.0.1:1")
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith("hello: cannot connect to stomp://127.0.0.1:1: ")
    assert "Connection refused" in result.stderr
    assert len(result.stderr.splitlines()) == 1  # no traceback


def test_hello_with_a_peer_that_never_answers_gives_up_after_its_connect_timeout() -> None:
    with socket.socket() as silent:  # the kernel completes the handshake; nobody speaks
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"stomp://127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        result = hello(url)
    assert 5 <= time.monotonic() - started < 15  # CONNECT_TIMEOUT, then out at once
    assert result.returncode == 1
    assert result.stderr == f"hello: no CONNECTED from {url} within 5.0 s\n"


def test_request_reply_answers_on_the_embedded_broker_and_gives_up_on_nobody() -> None:
    result = python_example("request_reply.py")
    assert result.returncode == 0, result.stderr
    *answers, gave_up = result.stdout.splitlines()
    assert sorted(answers) == ["'one' -> 'ONE'", "'three' -> 'THREE'", "'two' -> 'TWO'"]
    assert gave_up.startswith("gave up: no reply to the request to '/queue/nobody-serves-this'")


@pytest.mark.deadline(40)
async def test_request_reply_on_rabbitmq_leaves_no_queue_holding_its_unanswered_request() -> None:
    url = require_amqp()
    result = await trio.to_thread.run_sync(
        python_example, "request_reply.py", "stomp://guest:guest@127.0.0.1:61613/?vhost=/"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].startswith("gave up: no reply")
    await trio.sleep(2.5)  # UNANSWERED: the queue expires 2 s after its last use
    async with rabbit(url) as (aio, channel):
        with pytest.raises(Exception, match="NOT_FOUND"):
            await aio.run(channel.declare_queue, "nobody-serves-this", passive=True)


def test_read_lake_reads_only_what_sparks_log_committed(tmp_path: Path) -> None:
    """The parquet example's Read line: a half-written file is never read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    lake = tmp_path / "orders"
    (lake / "_spark_metadata").mkdir(parents=True)
    for name in "abc":
        pq.write_table(pa.table({"id": [ord(name)], "body": [name]}), lake / f"{name}.parquet")
    (lake / "d.parquet").write_bytes(b"PAR1 half written")  # not committed yet

    def log(name: str, *files: str) -> None:
        entries = [
            json.dumps({"path": f"file://{lake / f}.parquet", "action": "add"}) for f in files
        ]
        (lake / "_spark_metadata" / name).write_text("\n".join(["v1", *entries]) + "\n")

    log("0", "a")
    log("1.compact", "a", "b")  # every batch so far
    log("2", "c")
    result = python_example("read_lake.py", str(lake), "body")
    assert result.returncode == 0, result.stderr
    assert [line.split()[-1] for line in result.stdout.splitlines()[1:]] == ["a", "b", "c"]
    empty = python_example("read_lake.py", str(tmp_path / "nothing-yet"))
    assert (empty.returncode, empty.stdout) == (0, "")


def test_durable_subscription_keeps_orders_across_a_restart_then_is_removed() -> None:
    result = python_example("durable_subscription.py")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "got 'order 1'",
        "published 'order 2', 'order 3' while it was away; restarting the broker",
        "got 'order 2' (redelivered: kept in the store)",
        "got 'order 3' (redelivered: kept in the store)",
        "kept: billing orders /topic/orders (0 held)",
        "removed; left: []",
    ]


@pytest.mark.deadline(120)
async def test_spark_stream_upper_cases_on_its_own_broker(tmp_path: Path) -> None:
    from trio_stomp.broker import open_broker

    docs = (EXAMPLES / "spark_stream.py").read_text()
    assert "python examples/spark_stream.py stomp://127.0.0.1:61640" in docs
    (tmp_path / "examples").symlink_to(EXAMPLES)
    async with open_broker() as broker:  # what `trio-stomp broker --listen` runs
        process = await trio.lowlevel.open_process(
            [str(BIN / "python"), "examples/spark_stream.py", broker.url],
            cwd=tmp_path,
            env=environment(venv_on_path=False),  # python3 on PATH is not the venv's
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        try:
            async with trio_stomp.connect(broker.url) as client:
                await client.send("/queue/raw", "hello", receipt=True)
                async with client.subscribe("/queue/upper") as sub:
                    message = await sub.__anext__()
            assert message.text == "HELLO"
            process.send_signal(signal.SIGINT)
            with trio.fail_after(60):
                assert process.stdout is not None
                said = b""
                while chunk := await process.stdout.receive_some(4096):
                    said += chunk
                status = await process.wait()
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    assert status == 0
    assert said.decode().splitlines()[-1] == "spark_stream: stopped"


def test_every_example_has_a_test_here() -> None:
    """An example nobody tests is deleted (the systemd unit's tests are elsewhere)."""
    tested = {
        *KEPT,
        "quickstart.toml",
        "jsonl-to-stomp.toml",
        "rabbitmq-to-jsonl.toml",
        "amqp-via-rabbitmq-stomp.toml",
        "spark-jsonl-to-stomp.toml",
        "spark-stomp-to-parquet.toml",
        "hello.py",
        "request_reply.py",
        "durable_subscription.py",
        "selector_tour.py",
        "spark_stream.py",
        "read_lake.py",  # the parquet example's Read line
        "systemd",
    }
    assert {path.name for path in EXAMPLES.iterdir()} == tested


def test_every_page_an_example_sends_the_reader_to_has_the_section_it_names() -> None:
    """``docs/howto/x.md, "Some heading"`` in an example's comments: the page and the heading
    exist (bridges/README.md, now a pointer to the site, was named for sections it lost)."""
    problems = []
    for example in sorted(EXAMPLES.glob("*.toml")):
        lines = example.read_text(encoding="utf-8").splitlines()
        comments = " ".join(line.lstrip("# ") for line in lines if line.startswith("#"))
        for page, section in re.findall(r'([\w/.-]+\.md)(?:, "([^"]+)")?', comments):
            if not (ROOT / page).is_file():
                problems.append(f"{example.name}: {page} does not exist")
                continue
            headings = re.findall(r"^#+ (.+)$", (ROOT / page).read_text(), re.MULTILINE)
            if page == "bridges/README.md":
                problems.append(f"{example.name}: {page} only points to the site now")
            elif section and section not in headings:
                problems.append(f"{example.name}: {page} has no section {section!r}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("broker", ["embedded", "activemq"])
def test_selector_tour_gives_each_consumer_what_it_selects(broker: str) -> None:
    args = []
    if broker == "activemq":
        require_real_broker("activemq")
        args = ["stomp://guest:guest@127.0.0.1:61623/"]
    result = python_example("selector_tour.py", *args, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:-1] == [
        "eu      got order eu size 5",
        "eu      got order eu size 42",
        "us      got order us size 40",
        "us      got order us size 12",
        "size>10 got order us size 40",
        "size>10 got order eu size 42",
        "size>10 got order us size 12",
        "anyone  got order apac size 7",
    ]
    assert lines[-1].startswith("refused: ")
    if broker == "embedded":
        assert lines[-1] == (
            "refused: invalid selector: at position 10: "
            "expected a value, a header name or '(', found the end: region ="
        )
