"""The ``bridges-route`` sink's executor side without a JVM: ``write_all`` on a sink that
refuses a batch for a message it cannot name, and the redaction of what it reports."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import trio

import bridges
from bridges.spark._bridged import RouteRef, RouteStreamWriter, write_all
from bridges.testing import FakeSink

SECRET = "tok-SECRET-0123456789"


class RefusingSink(FakeSink):
    """Refuses (BatchRefused, quoting a secret) any batch holding a ``poison`` message."""

    async def write(self, batch: Sequence[bridges.Message]) -> None:
        if any("poison" in message.headers for message in batch):
            self.calls += 1
            raise bridges.BatchRefused(f"ERROR frame: refused (you sent passcode:{SECRET})")
        await super().write(batch)


async def test_write_all_halves_a_refused_batch_until_the_message_is_alone() -> None:
    messages = [
        bridges.Message(b"m", {"poison": "1"} if i == 6 else {}, f"m{i}") for i in range(16)
    ]
    sink = RefusingSink()
    retry = bridges.RetryPolicy(attempts=2, initial=0.0, max=0.0, jitter=0.0)
    with trio.fail_after(10), bridges.redacting([SECRET]):
        rejected = await write_all(sink, messages, 16, retry)
    assert sorted(sink.written, key=lambda i: int(i[1:])) == [f"m{i}" for i in range(16) if i != 6]
    assert [(message.id, reason) for message, reason in rejected] == [
        ("m6", "ERROR frame: refused (you sent passcode:***)")
    ]
    # 16 -> 8 -> 4 -> 2 -> 1: a handful of opens, not one per message.
    assert sink.opens <= 2 * 4 + 2 + 1, sink.opens


async def _echo_in_a_400(stream: trio.SocketStream) -> None:
    """An HTTP target that answers 400 quoting the request's Authorization header."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += await stream.receive_some(65536)
    head = data.partition(b"\r\n\r\n")[0].decode("latin-1")
    auth = next(line for line in head.split("\r\n") if line.lower().startswith("authorization"))
    echo = f"bad request; you sent {auth}".encode()
    answer = b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\n"
    answer += f"content-length: {len(echo)}\r\n\r\n".encode() + echo
    await stream.send_all(answer)
    await stream.aclose()


async def test_an_executor_redacts_the_bridge_error_of_its_dead_letters(tmp_path: Path) -> None:
    (tmp_path / "token").write_text(SECRET)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(trio.serve_tcp, _echo_in_a_400, 0)
        port = listeners[0].socket.getsockname()[1]
        config = tmp_path / "bridge.toml"
        config.write_text(
            '[spark]\ncheckpoint = "ck"\n[routes.r]\n'
            'source = { type = "file", path = "in" }\n'
            f'sink = {{ type = "http", url = "http://127.0.0.1:{port}/hook", '
            'bearer_token_file = "token" }\n'
            'dead_letter = { type = "file", path = "dead" }\n'
        )
        writer = RouteStreamWriter(RouteRef(str(config), "r", str(tmp_path)))
        with trio.fail_after(20):
            dead = await writer._write([bridges.Message(b"x", {}, "m1")])
        nursery.cancel_scope.cancel()
    assert dead == 1
    letters = [json.loads(line) for p in (tmp_path / "dead").glob("*") for line in p.open()]
    error = letters[0]["headers"]["bridge-error"]
    assert "HTTP 400" in error, error
    assert "Bearer ***" in error, error
    assert SECRET not in error
