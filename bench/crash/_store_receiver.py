"""A webhook receiver that stores before it answers: the http target of ``target_crash.py``.

    python bench/crash/_store_receiver.py PORT STORE

Each POST's body is appended to STORE as one line and fsynced; only then is
204 sent. So a 2xx means "on disk", and SIGKILL at any moment loses nothing
that was answered. On start, a torn last line (a write cut by SIGKILL, never
answered) is cut off, so the next line starts clean. Standard library only:
the receiver must not share a line of code with the bridge it checks.
"""

from __future__ import annotations

import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def main() -> None:
    port, store = int(sys.argv[1]), Path(sys.argv[2])
    if store.exists():
        data = store.read_bytes()
        with store.open("r+b") as file:
            file.truncate(data.rfind(b"\n") + 1)
    out = store.open("ab")
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with lock:
                out.write(body.replace(b"\n", b" ") + b"\n")
                out.flush()
                os.fsync(out.fileno())
            self.send_response(204)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
