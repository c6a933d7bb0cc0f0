"""A static file server on loopback for the site tests: the built site as a browser gets it.

Served over HTTP rather than opened as ``file://`` files: the search page
fetches the pages it finds (for their summaries), which a browser refuses
between ``file://`` URLs. GET only, one request per connection, files under
the root only; it lives in the caller's nursery.
"""

from __future__ import annotations

import functools
import mimetypes
import urllib.parse
from pathlib import Path

import trio

#: The longest request head read, bytes.
MAX_HEAD = 16 * 1024


async def _handle(root: Path, stream: trio.SocketStream) -> None:
    async with stream:
        try:
            await _answer(root, stream)
        except trio.BrokenResourceError:
            pass  # the browser went away (a page left before it loaded)


async def _answer(root: Path, stream: trio.SocketStream) -> None:
    head = b""
    while b"\r\n\r\n" not in head and len(head) < MAX_HEAD:
        chunk = await stream.receive_some(4096)
        if not chunk:
            return
        head += chunk
    method, _, rest = head.split(b"\r\n", 1)[0].decode("latin-1").partition(" ")
    target = urllib.parse.unquote(urllib.parse.urlsplit(rest.rpartition(" ")[0]).path)
    path = await (trio.Path(root) / target.lstrip("/")).resolve()
    if await path.is_dir():
        path = path / "index.html"
    if method != "GET" or not path.is_relative_to(root) or not await path.is_file():
        await stream.send_all(b"HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n")
        return
    body = await path.read_bytes()
    kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    status = f"HTTP/1.0 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n\r\n"
    await stream.send_all(status.encode() + body)


async def serve_site(
    root: Path, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED
) -> None:
    """Serve ``root`` on 127.0.0.1 until cancelled; starts with its base URL."""
    handler = functools.partial(_handle, Path(await trio.Path(root).resolve()))
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, handler, listeners)
        task_status.started(f"http://127.0.0.1:{port}/")
