"""Whatever a target answers, no configured secret leaves the process: not in a log line,
a status line, ``STATUS=``, ``/metrics``, ``/healthz``, ``/readyz`` or a dead letter."""

from __future__ import annotations

import base64
import json
import re
import signal
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import httpx
import pytest
import trio
from family_kit import free_port
from notify_kit import drop, http_url, running_bridge

from bridges.testing import wait_until

#: One secret per endpoint type that takes one, each given another way.
BEARER = "tok-BEARER/1234 567890"  # http bearer_token_file; echoed encoded too (below)
BASIC_USER, BASIC = "webuser", "pw-BASIC-9876"  # http URL user info (Basic auth)
PASSCODE = "pc-STOMP-secret"  # stomp passcode_file
MQTT = "pw-MQTT-secret"  # mqtt password_file
REDIS = "pw-REDIS-secret"  # redis ${credential:NAME}
NATS = "pw-NATS-secret"  # nats ${NAME} in a secret field
AMQP = 'pw-AMQP-"quoted\\secret'  # amqp literal; escaped in JSON and repr
BASIC_B64 = base64.b64encode(f"{BASIC_USER}:{BASIC}".encode()).decode()
#: What must appear nowhere: a distinctive piece of each.
NEVER: tuple[str, ...] = ("567890", "BASIC-9876", BASIC_B64, "STOMP-secret")
NEVER += ("MQTT-secret", "REDIS-secret", "NATS-secret", "AMQP-")

CONFIG = """
[bridge]
http = "127.0.0.1:0"
shutdown_timeout = 2

[routes.bearer]
source = {{ type = "file", path = "inbox", settle = 0, poll_interval = 0.05 }}
sink = {{ type = "http", url = "http://127.0.0.1:{echo}/hook", bearer_token_file = "token" }}
dead_letter = {{ type = "file", path = "dead-bearer" }}

[routes.basic]
source = {{ type = "file", path = "inbox-basic", settle = 0, poll_interval = 0.05 }}
sink = {{ type = "http", url = "http://{user}:{basic}@127.0.0.1:{echo}/hook" }}
dead_letter = {{ type = "file", path = "dead-basic" }}

[routes.stomp]
source = {{ type = "stomp", url = "stomp://127.0.0.1:{peer}", destination = "/queue/x", login = "u", passcode_file = "passcode" }}
sink = {{ type = "file", path = "out" }}

[routes.mqtt]
source = {{ type = "file", path = "idle" }}
sink = {{ type = "mqtt", url = "mqtt://127.0.0.1:{closed}", topic = "t", username = "u", password_file = "mqtt" }}

[routes.redis]
source = {{ type = "file", path = "idle" }}
sink = {{ type = "redis", url = "redis://127.0.0.1:{closed}/0", stream = "s", password = "${{credential:redis}}" }}

[routes.nats]
source = {{ type = "file", path = "idle" }}
sink = {{ type = "nats", url = "nats://127.0.0.1:{closed}", subject = "s", user = "u", password = "${{NATS_PASS}}", connect_timeout = 0.5 }}

[routes.amqp]
source = {{ type = "file", path = "idle" }}
sink = {{ type = "amqp", url = "amqp://u@127.0.0.1:{closed}/%2f", exchange = "x", password = {amqp} }}
"""  # noqa: E501 - one endpoint per line reads best


async def echo_in_a_400(stream: trio.SocketStream) -> None:
    """An HTTP target that answers 400 with the request's Authorization and body."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += await stream.receive_some(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    fields = dict(line.split(": ", 1) for line in lines[1:])
    length = int(fields.get("content-length", fields.get("Content-Length", "0")))
    while len(body) < length:
        body += await stream.receive_some(65536)
    auth = fields.get("authorization", fields.get("Authorization", ""))
    # The forms issue 32 found unmasked: JSON with \/, lower-case percent-encoding,
    # a query string as httpx writes one (%20, / kept) and + for a space.
    lower = re.sub("%[0-9A-F]{2}", lambda m: m.group().lower(), quote(auth, safe=""))
    as_json = json.dumps(auth).replace("/", "\\/")
    forms = f"{as_json} {lower} {quote(auth, safe='/')} {quote_plus(auth)}"
    echo = f"bad request; you sent Authorization: {auth} ({forms}) and ".encode() + body
    answer = b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\nconnection: close\r\n"
    answer += f"content-length: {len(echo)}\r\n\r\n".encode() + echo
    await stream.send_all(answer)
    await stream.aclose()


async def error_quoting_connect(stream: trio.SocketStream) -> None:
    """A STOMP peer that refuses the login with an ERROR frame quoting the CONNECT frame."""
    data = b""
    while b"\0" not in data:
        chunk = await stream.receive_some(65536)
        if not chunk:
            return
        data += chunk
    connect = data.partition(b"\0")[0].decode()
    passcode = next(line for line in connect.split("\n") if line.startswith("passcode:"))
    body = f"The frame was:\n{connect}"
    error = f"ERROR\nmessage:bad login (passcode {passcode[9:]})\ncontent-type:text/plain\n"
    error += f"content-length:{len(body.encode())}\n\n{body}\0"
    await stream.send_all(error.encode())
    await stream.aclose()


async def serve(nursery: trio.Nursery, handler: Callable[[trio.SocketStream], Any]) -> int:
    listeners = await nursery.start(partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
    port: int = listeners[0].socket.getsockname()[1]
    return port


def assert_clean(where: str, text: str) -> None:
    for piece in NEVER:
        assert piece not in text, f"{piece!r} in {where}:\n{text}"


@pytest.mark.deadline(40)
async def test_no_secret_leaves_the_process_whatever_the_targets_echo(tmp_path: Path) -> None:
    for folder in ("inbox", "inbox-basic", "idle", "creds"):
        (tmp_path / folder).mkdir()
    (tmp_path / "token").write_text(BEARER + "\n")
    (tmp_path / "passcode").write_text(PASSCODE)
    (tmp_path / "mqtt").write_text(MQTT)
    (tmp_path / "creds" / "redis").write_text(REDIS)
    env = {"CREDENTIALS_DIRECTORY": str(tmp_path / "creds"), "NATS_PASS": NATS}
    async with trio.open_nursery() as servers:
        echo = await serve(servers, echo_in_a_400)
        peer = await serve(servers, error_quoting_connect)
        config = tmp_path / "bridge.toml"
        config.write_text(
            CONFIG.format(
                echo=echo, peer=peer, closed=free_port(), user=BASIC_USER, basic=BASIC,
                amqp=json.dumps(AMQP),
            )
        )  # fmt: skip
        # The message carries every other secret: the echo puts them in the answer.
        body = f"order 1; {MQTT} {REDIS} {NATS} {AMQP} {PASSCODE}"
        args = ("--log-format", "json")
        async with running_bridge(config, env=env, args=args) as (process, notify, output):
            await notify.wait_for(lambda f: f.get("READY") == "1")
            drop(tmp_path / "inbox" / "m1", body)
            drop(tmp_path / "inbox-basic" / "m2", body)
            dead = [tmp_path / "dead-bearer", tmp_path / "dead-basic"]

            def dead_letters() -> list[dict[str, object]]:
                found = []
                for folder in dead:
                    for path in folder.glob("*.jsonl*"):
                        found += [json.loads(line) for line in path.read_text().splitlines()]
                return found

            await wait_until(lambda: len(dead_letters()) == 2, 0.05)
            await notify.wait_for(lambda f: "stomp: " in f.get("STATUS", ""))
            url = await http_url(output)
            async with httpx.AsyncClient() as http:
                pages = {p: (await http.get(f"{url}/{p}")).text for p in ("metrics", "readyz")}
                pages["healthz"] = (await http.get(f"{url}/healthz")).text
            process.send_signal(signal.SIGTERM)
            with trio.fail_after(10):
                await process.wait()
        servers.cancel_scope.cancel()
    text = output.decode()
    assert_clean("the log", text)
    assert_clean("STATUS=", notify.text())
    for page, content in pages.items():
        assert_clean(f"/{page}", content)
    for letter in dead_letters():
        headers = letter["headers"]
        assert isinstance(headers, dict)
        error = headers["bridge-error"]
        assert_clean("bridge-error", error)
        # What the target said is still there, less the secrets.
        assert "HTTP 400 Bad Request: 'bad request; you sent Authorization: " in error, error
        assert "order 1; *** *** *** *** ***" in error, error
        assert letter["body"] == body  # (the message itself is the user's data: untouched)
    errors = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    stomp = [e for e in errors if "bad login" in str(e.get("message"))]
    assert stomp, text  # the ERROR frame was logged, and its passcode masked:
    assert "bad login (passcode ***)" in str(stomp[0]["message"]), stomp[0]
    assert any("Authorization: Bearer ***" in str(e.get("message")) for e in errors), text
    assert any("Authorization: Basic ***" in str(e.get("message")) for e in errors), text
    assert "retrying (" in notify.text()  # the routes' errors were in STATUS=, masked
    assert process.returncode in (0, 3), text
