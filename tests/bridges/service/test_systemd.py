"""``bridges run`` under systemd: READY, STATUS, STOPPING and the watchdog, from a real socket."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import pytest
import trio
from notify_kit import running_bridge

from bridges.service import Notifier


def write_config(tmp_path: Path, text: str) -> Path:
    (tmp_path / "inbox").mkdir(exist_ok=True)
    path = tmp_path / "bridge.toml"
    path.write_text(text)
    return path


FILE_ROUTE = """
[routes.files]
source = { type = "file", path = "inbox", settle = 0, poll_interval = 0.05 }
sink = { type = "file", path = "outbox", format = "files" }
"""


@pytest.mark.deadline(30)
async def test_ready_status_and_stopping_reach_the_notify_socket(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        FILE_ROUTE
        + """
[routes.refused]
source = { type = "file", path = "inbox2", settle = 0, poll_interval = 0.05 }
sink = { type = "stomp", url = "stomp://127.0.0.1:1", destination = "/queue/x" }
retry = { initial = 0.2, max = 0.2 }
""",
    )
    async with running_bridge(config) as (process, notify, output):
        ready = await notify.wait_for(lambda f: f.get("READY") == "1")
        # Ready once every route is open or has failed once: the refused one says why.
        assert ready["STATUS"].startswith("2 routes: 1 running, 1 retrying (refused: ")
        assert "Connection refused" in ready["STATUS"] or "refused" in ready["STATUS"]
        process.send_signal(signal.SIGTERM)
        stopping = await notify.wait_for(lambda f: f.get("STOPPING") == "1")
        assert "stopping" in stopping["STATUS"]
        with trio.fail_after(10):
            await process.wait()
    assert process.returncode == 0, bytes(output)
    ready_at = next(i for i, (_, f) in enumerate(notify.messages) if "READY" in f)
    stop_at = next(i for i, (_, f) in enumerate(notify.messages) if "STOPPING" in f)
    assert ready_at < stop_at


async def hang(stream: trio.SocketStream) -> None:
    """An HTTP server that reads the request and never answers."""
    await stream.receive_some(65536)
    await trio.sleep_forever()


@pytest.mark.deadline(30)
async def test_watchdog_pings_stop_while_a_route_is_stuck(tmp_path: Path) -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    config = write_config(
        tmp_path,
        f"""
[bridge]
stall_timeout = 1.0

[routes.hangs]
source = {{ type = "file", path = "inbox", settle = 0, poll_interval = 0.05 }}
sink = {{ type = "http", url = "http://127.0.0.1:{port}/hook", timeout = 60 }}
batch = {{ count = 1, time = 0 }}
""",
    )
    async with trio.open_nursery() as server:
        server.start_soon(trio.serve_listeners, hang, listeners)
        env = {"WATCHDOG_USEC": "300000"}  # pings every 0.15 s
        async with running_bridge(config, env) as (process, notify, output):
            await notify.wait_for(lambda f: f.get("READY") == "1")
            for _ in range(3):  # pings while healthy (each comes within its interval)
                with trio.fail_after(1.0):
                    await notify.wait_for(lambda f: "WATCHDOG" in f, len(notify.messages))
            (tmp_path / "inbox" / "a").write_text("stuck forever")
            await notify.wait_for(lambda f: "stuck (hangs)" in f.get("STATUS", ""))
            stuck_since = trio.current_time()
            await trio.sleep(1.0)
            late = [t for t, f in notify.messages if "WATCHDOG" in f and t > stuck_since]
            assert late == [], notify.text()
            process.send_signal(signal.SIGTERM)
        assert b"not feeding systemd's watchdog: stuck routes: hangs" in output
        server.cancel_scope.cancel()


async def test_the_notifier_does_nothing_without_a_socket() -> None:
    notifier = Notifier({})
    assert not notifier.enabled
    notifier.ready("x")  # no socket, no error
    assert notifier.watchdog_interval is None


async def test_the_notifier_speaks_to_abstract_and_path_sockets(tmp_path: Path) -> None:
    for name, address in (
        ("@bridges-unit-notify", b"\0bridges-unit-notify"),
        (str(tmp_path / "notify"), str(tmp_path / "notify")),
    ):
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.bind(address)
            notifier = Notifier({"NOTIFY_SOCKET": name})
            notifier.reloading()
            notifier.ready("1 route: 1 running\nsecond line")
            notifier.status("1 route: 1 running\nsecond line")  # unchanged: not sent again
            notifier.close()
            reloading = sock.recv(4096).decode()
            assert reloading.startswith("RELOADING=1\nMONOTONIC_USEC=")
            assert int(reloading.split("MONOTONIC_USEC=")[1]) > 0
            assert sock.recv(4096) == b"READY=1\nSTATUS=1 route: 1 running second line\n"
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):
                sock.recv(4096)


def test_the_watchdog_is_for_the_process_it_names() -> None:
    assert Notifier({"WATCHDOG_USEC": "2000000"}).watchdog_interval == 2.0
    mine = {"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": str(os.getpid())}
    assert Notifier(mine).watchdog_interval == 2.0
    other = {"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": str(os.getpid() + 1)}
    assert Notifier(other).watchdog_interval is None
    assert Notifier({"WATCHDOG_USEC": "0"}).watchdog_interval is None


def test_the_service_surface_is_pinned() -> None:
    import bridges.service

    assert sorted(bridges.service.__all__) == [
        "Notifier", "STOP_NOW_WITHIN", "Stopped", "build_routes", "freeze_heap",
        "open_embedded", "run_bridge", "shutdown", "volatile_backlog",
    ]  # fmt: skip
