"""Headless Chromium for the site tests, driven through the DevTools protocol.

:func:`open_chromium` starts Debian's ``chromium`` on a throw-away profile
inside the caller's ``async with`` (it is killed when the block ends, however
it ends) and yields a :class:`Page`: one tab, over a WebSocket
(trio-websocket). A page records what the browser reports as an error while
it loads: uncaught exceptions, ``console.error``, and failed loads (a missing
image, script or style sheet).
"""

from __future__ import annotations

import base64
import functools
import itertools
import json
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import trio
from trio_websocket import WebSocketConnection, open_websocket_url

#: The largest DevTools message read: a screenshot, base64.
MAX_MESSAGE: Final = 64 * 1024 * 1024
#: Flags for a browser that is alone on a shared machine, as root, with no display.
FLAGS = (
    "--headless=new",
    "--no-sandbox",  # (root in CI: the sandbox needs a user namespace)
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-extensions",
    "--disable-background-networking",
    "--window-size=1280,1024",
)


def chromium_path() -> str | None:
    """Debian's ``chromium``, or None when it is not installed."""
    return shutil.which("chromium")


class DevToolsError(Exception):
    """The browser answered a command with an error."""


class Page:
    """One tab: commands, and the events it reported."""

    def __init__(self, socket: WebSocketConnection) -> None:
        self._socket = socket
        self._ids = itertools.count(1)
        self._answers: dict[int, trio.MemorySendChannel[dict[str, Any]]] = {}
        self._loaded = trio.Event()
        #: What the browser reported as an error since :meth:`clear_errors`.
        self.errors: list[str] = []

    async def read(self) -> None:
        """Dispatch answers and events until the socket closes (run it in a nursery)."""
        async for text in _messages(self._socket):
            message = json.loads(text)
            if "id" in message:
                send = self._answers.pop(message["id"], None)
                if send is not None:
                    send.send_nowait(message)
            else:
                self._event(message["method"], message.get("params", {}))
        for send in self._answers.values():  # closed: no answer will come
            send.close()

    def _event(self, method: str, params: dict[str, Any]) -> None:
        if method == "Page.loadEventFired":
            self._loaded.set()
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            exception = details.get("exception", {}).get("description", details.get("text"))
            self.errors.append(f"uncaught: {exception}")
        elif method == "Runtime.consoleAPICalled" and params["type"] == "error":
            self.errors.append("console.error: " + " ".join(_arg(a) for a in params["args"]))
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            entry = params["entry"]
            self.errors.append(f"{entry['text']} {entry.get('url', '')}".strip())

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command; its result."""
        number = next(self._ids)
        send, receive = trio.open_memory_channel[dict[str, Any]](1)
        self._answers[number] = send
        command = {"id": number, "method": method, "params": params}
        await self._socket.send_message(json.dumps(command))
        try:
            answer = await receive.receive()
        except trio.EndOfChannel:
            raise DevToolsError(f"{method}: the browser closed the connection") from None
        if "error" in answer:
            raise DevToolsError(f"{method}: {answer['error']}")
        result: dict[str, Any] = answer["result"]
        return result

    async def open(self, url: str) -> None:
        """Load ``url`` and wait for its ``load`` event (images and style sheets are in)."""
        self._loaded = trio.Event()
        await self.call("Page.navigate", url=url)
        await self._loaded.wait()

    async def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression (awaited when it is a promise)."""
        result = await self.call(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise DevToolsError(f"{expression!r}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def wait_for(self, expression: str, *, interval: float = 0.1) -> Any:
        """Evaluate ``expression`` until it is truthy (the caller bounds the wait); its value."""
        # The page's state has no event to wait on: polled, as a person would look again.
        while not (value := await self.evaluate(expression)):  # noqa: ASYNC110
            await trio.sleep(interval)
        return value

    async def screenshot(self, path: Path) -> Path:
        """Save what the window shows (scrolled to the URL's anchor) as a PNG at ``path``."""
        shot = await self.call("Page.captureScreenshot", format="png")
        await trio.Path(path).write_bytes(base64.b64decode(shot["data"]))
        return path


def _arg(remote: dict[str, Any]) -> str:
    return str(remote.get("value", remote.get("description", "")))


async def _messages(socket: WebSocketConnection) -> AsyncIterator[str]:
    from trio_websocket import ConnectionClosed

    while True:
        try:
            message = await socket.get_message()
        except ConnectionClosed:
            return
        yield message if isinstance(message, str) else message.decode()


async def _devtools_address(profile: Path) -> tuple[int, str]:
    """The port Chromium chose (``--remote-debugging-port=0``) and the browser's path,
    once it has written them."""
    active = profile / "DevToolsActivePort"
    # Chromium writes the file once it listens; nothing to wait on but the file itself.
    while not active.exists() or len(active.read_text().splitlines()) < 2:  # noqa: ASYNC110
        await trio.sleep(0.05)
    port, path = active.read_text().splitlines()[:2]
    return int(port), path


@asynccontextmanager
async def open_chromium(executable: str) -> AsyncIterator[Page]:
    """Start headless Chromium; yield one tab. Chromium is killed when the block ends."""
    # (its helper processes may still be leaving as the profile is removed)
    profiles = tempfile.TemporaryDirectory(prefix="site-chromium-", ignore_cleanup_errors=True)
    with profiles as profile:
        command = [executable, *FLAGS, "--remote-debugging-port=0", f"--user-data-dir={profile}"]
        async with trio.open_nursery() as nursery:
            run = functools.partial(
                trio.run_process,
                [*command, "about:blank"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=False,
            )
            process: trio.Process = await nursery.start(run)
            try:
                port, browser = await _devtools_address(Path(profile))
                url = f"ws://127.0.0.1:{port}"
                connect = functools.partial(open_websocket_url, max_message_size=MAX_MESSAGE)
                async with connect(url + browser) as socket:
                    session = Page(socket)
                    nursery.start_soon(session.read)
                    targets = (await session.call("Target.getTargets"))["targetInfos"]
                tab = next(t["targetId"] for t in targets if t["type"] == "page")
                async with connect(f"{url}/devtools/page/{tab}") as socket:
                    page = Page(socket)
                    nursery.start_soon(page.read)
                    for domain in ("Page", "Runtime", "Log"):
                        await page.call(f"{domain}.enable")
                    yield page
            finally:
                process.kill()
                nursery.cancel_scope.cancel()
