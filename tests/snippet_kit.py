"""Running the docs' code blocks as a reader would; tests/test_docs_snippets.py runs them.

Every fenced block of README.md and of the site's pages (docs/) is run:

- ``python``: as a program, in a fresh interpreter, from an empty folder. A block
  that awaits at its top level (``async with trio_stomp.connect(...)``: what a
  reader writes inside an ``async def``) runs inside ``trio.run``.
- ``toml``: a bridge config, loaded and built as ``bridges check`` does. A
  fragment (one source, one sink, a transform) is completed with ``file``
  endpoints; every ``${NAME}`` gets a value and every absolute ``*_file`` (and
  ``certfile``, ``keyfile``, ``cafile``) a file of the test's own, since those
  are the reader's. A config with an embedded broker also runs: ``bridges run``
  until its routes are up, then Ctrl-C, which must stop it cleanly.
- shell blocks (``sh``): on a tutorial page, in order, as written, from a copy
  of the checkout with the venv on PATH (as ``source .venv/bin/activate`` puts
  it). Elsewhere tests/test_docs_commands.py checks them: the program exists,
  the paths exist, the arguments parse. It checks the commands of a plain
  block (no language) too, which a tutorial may not have.

A marker on the line before a fence says how to run a block otherwise, as an
HTML comment that neither the site nor the forge shows:
``<!-- test: KIND -->`` or ``<!-- test: KIND: ARGUMENT -->``.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import trustme
from docs_kit import BIN, DOCUMENTS, ROOT, SHELL_LANGUAGES, Block, split_page

#: What each marker means.
MARKERS = {
    "skip": "not run; the argument says why (shown in the test's output)",
    "needs": "runs against the real server named (rabbitmq, activemq, mqtt, redis, nats, amqp)",
    "file": "a file the page has the reader save, written at the path given before the page's"
    " configs are checked or its tutorial runs (not run by itself)",
    "background": "a tutorial's shell block that runs until stopped: Ctrl-C at the page's end",
    "eventually": "a tutorial's shell block retried until it succeeds (what arrives in its time)",
    "exit": "a tutorial's shell block that must exit with the status given",
    "example": "run by tests/examples/test_examples.py, which finds it by the name given",
}
SERVERS = ("rabbitmq", "activemq", "mqtt", "redis", "nats", "amqp")
#: Blocks that are not code: output, and Sphinx's directives (``{toctree}``,
#: ``{eval-rst}``...; a ``{literalinclude}`` shows a file the test suite runs elsewhere).
NOT_CODE = ("text", "directive")
TUTORIALS = "docs/tutorials/"
#: How long a block may run; a background block's routes may take to come up.
TIMEOUT = 60.0
EVENTUALLY = 20.0
SECRET = "snippet-secret-value"
SECRET_FILE_KEY = re.compile(r"""((?:\w+_file|certfile|keyfile|cafile)\s*=\s*)"(/[^"]*)\"""")
LISTEN = re.compile(r"""^(listen\s*=\s*)"([\w.]+):(\d+)\"""", re.MULTILINE)


def blocks() -> list[Block]:
    """Every fenced block of every document, in order."""
    found: list[Block] = []
    for page in DOCUMENTS:
        found += split_page(page, (ROOT / page).read_text(encoding="utf-8"))[0]
    return found


def language(block: Block) -> str:
    """The block's language as the runners know it: python, toml, sh, or what it says."""
    if block.language in SHELL_LANGUAGES:
        return "sh"
    return "directive" if block.language.startswith("{") else block.language


def marker_problem(block: Block) -> str | None:
    """What is wrong with how the block is marked, or None."""
    kind, lang = block.marker, language(block)
    tutorial = block.page.startswith(TUTORIALS)
    if lang == "" and not tutorial:
        return None  # output, or commands that tests/test_docs_commands.py checks
    if lang not in ("python", "toml", "sh", *NOT_CODE):
        return f"a {lang or 'plain'} block: give it a language the snippet tests run, or text"
    if kind and kind not in MARKERS:
        return f"unknown marker {kind!r} (known: {', '.join(MARKERS)})"
    if kind in ("skip", "needs", "file", "exit", "example") and not block.argument:
        return f"the {kind} marker needs an argument: {MARKERS[kind]}"
    if kind == "needs" and block.argument not in SERVERS:
        return f"needs: {block.argument!r} is none of {', '.join(SERVERS)}"
    if kind in ("background", "eventually", "exit") and not (tutorial and lang == "sh"):
        return f"{kind}: only a tutorial's shell blocks run in sequence"
    if kind == "example":
        runner = (ROOT / "tests/examples/test_examples.py").read_text(encoding="utf-8")
        if block.argument.split()[0] not in runner:
            return f"example: {block.argument!r} is not run by tests/examples/test_examples.py"
    return None


# -- python ------------------------------------------------------------------------------

#: Runs a block as a program; with an await at its top level, inside trio.run.
PYTHON_RUNNER = r"""
import ast, sys
path = sys.argv[1]
code = compile(open(path).read(), path, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
awaiting = eval(code, {"__name__": "__main__"})
if awaiting is not None:
    import trio

    async def main():
        await awaiting

    trio.run(main)
"""


def run_python(block: Block, folder: Path) -> subprocess.CompletedProcess[str]:
    script = folder / "snippet.py"
    script.write_text(block.text + "\n", encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-c", PYTHON_RUNNER, str(script)],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


# -- toml --------------------------------------------------------------------------------


def bridge_config(block: Block, folder: Path) -> tuple[str, dict[str, str]]:
    """The block as a whole config the test can load, and the environment it needs."""
    text = SECRET_FILE_KEY.sub(lambda m: f'{m[1]}"{_reader_file(folder, m[1], m[2])}"', block.text)
    parsed = tomllib.loads(text)
    endpoints = [e for r in parsed.get("routes", {}).values() for e in r.values()]
    urls = [e.get("url") for e in endpoints if isinstance(e, dict)]
    if "embedded" in urls and "broker" not in parsed:  # a fragment of a config that has one
        text = f"[broker]\nembedded = true\n{text}"
    routes = parsed.get("routes") or {"snippet": {}}
    for name, route in routes.items():
        for role in ("source", "sink"):
            if role not in route:
                text += f'\n[routes."{name}".{role}]\ntype = "file"\npath = "snippet-{role}"\n'
    env = {name: SECRET for name in re.findall(r"\$\{(\w+)\}", text)}
    return text, env


def _reader_file(folder: Path, key: str, original: str) -> Path:
    """A file of the test's own for a path of the reader's: a secret, or TLS material."""
    path = folder / "readers" / original.strip("/").replace("/", "_")
    path.parent.mkdir(exist_ok=True)
    ca, server = _tls()
    if key.startswith(("ca_file", "cafile", "ssl_ca_file")):
        ca.cert_pem.write_to_path(str(path))
    elif key.startswith(("certfile", "ssl_cert_file")):
        server.cert_chain_pems[0].write_to_path(str(path))
    elif key.startswith(("keyfile", "ssl_key_file")):
        server.private_key_pem.write_to_path(str(path))
    else:
        path.write_text(SECRET, encoding="utf-8")
    return path


@functools.cache
def _tls() -> tuple[trustme.CA, trustme.LeafCert]:
    ca = trustme.CA()
    return ca, ca.issue_cert("127.0.0.1")


def write_page_files(page: str, folder: Path) -> None:
    """The files a page has the reader save (its ``file`` blocks), written into ``folder``."""
    for block in split_page(page, (ROOT / page).read_text(encoding="utf-8"))[0]:
        if block.marker == "file":
            target = folder / block.argument
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.text + "\n", encoding="utf-8")


def free_listen(text: str) -> str:
    """``text`` with its embedded broker on a free port (and the old address replaced)."""
    match = LISTEN.search(text)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    if match is None:
        return text.replace("[broker]", f'[broker]\nlisten = "127.0.0.1:{port}"', 1)
    return text.replace(f"{match[2]}:{match[3]}", f"{match[2]}:{port}")


def run_briefly(config: Path, env: dict[str, str]) -> str | None:
    """``bridges run CONFIG`` until its routes run, then Ctrl-C: what went wrong, or None."""
    log = config.with_suffix(".log")
    with log.open("wb") as output:
        bridge = subprocess.Popen(
            [str(BIN / "bridges"), "run", config.name],
            cwd=config.parent,
            env={**os.environ, **env},
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + TIMEOUT
        while bridge.poll() is None and time.monotonic() < deadline:
            if re.search(r"running \d+ route", log.read_text(encoding="utf-8", errors="replace")):
                break
            time.sleep(0.1)
        bridge.send_signal(signal.SIGINT)
        status = bridge.wait(timeout=TIMEOUT)
    finally:
        if bridge.poll() is None:
            bridge.kill()
            bridge.wait()
    said = log.read_text(encoding="utf-8", errors="replace")
    if status not in (0, 3) or not re.search(r"running \d+ route", said):
        return f"bridges run exited {status}:\n{said}"
    return None


# -- tutorials ---------------------------------------------------------------------------


def checkout_copy(folder: Path) -> Path:
    """The checkout's files (tracked, and new ones not ignored) copied to ``folder``,
    with the venv of this test run as its ``.venv`` (made by ``scripts/quickstart``)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, folder / name)
    (folder / ".venv").symlink_to(BIN.parent)
    return folder


class Tutorial:
    """A tutorial page's files and shell blocks, run in order in a checkout copy."""

    def __init__(self, page: str, folder: Path) -> None:
        self.page = page
        self.folder = folder
        venv = folder / ".venv"
        path = f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
        self.env = {**os.environ, "PATH": path, "VIRTUAL_ENV": str(venv)}
        self.env.pop("PYTHONPATH", None)
        self.background: list[tuple[Block, subprocess.Popen[bytes], Path]] = []
        self.ran: list[str] = []

    def steps(self) -> Iterator[Block]:
        for block in split_page(self.page, (ROOT / self.page).read_text(encoding="utf-8"))[0]:
            if block.marker == "file" or (language(block) == "sh" and block.marker != "skip"):
                yield block

    def run(self) -> None:
        try:
            for block in self.steps():
                self._step(block)
            for block, process, log in self.background:
                assert process.poll() is None, self._said(block, log, "it stopped on its own")
        finally:
            self._stop()

    def _step(self, block: Block) -> None:
        where = f"{block.page}:{block.line}"
        if block.marker == "file":
            target = self.folder / block.argument
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.text + "\n", encoding="utf-8")
            return
        self.ran.append(where)
        command = ["bash", "-e", "-o", "pipefail", "-c", block.text]
        if block.marker == "background":
            log = self.folder / f"background-{len(self.background)}.log"
            with log.open("wb") as output:  # a file: a pipe nobody reads would fill up
                process = subprocess.Popen(
                    command,
                    cwd=self.folder,
                    env=self.env,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            self.background.append((block, process, log))
            return
        expected = int(block.argument) if block.marker == "exit" else 0
        deadline = time.monotonic() + (EVENTUALLY if block.marker == "eventually" else 0)
        while True:
            done = subprocess.run(
                command,
                cwd=self.folder,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
                check=False,
            )
            if done.returncode == expected or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert done.returncode == expected, (
            f"{where}: `{block.text}` exited {done.returncode}, not {expected}:\n"
            f"{done.stdout}{done.stderr}"
        )

    def _stop(self) -> None:
        """Ctrl-C to every background block, as the reader stops it; it must stop cleanly."""
        problems = []
        for block, process, log in self.background:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            if process.returncode not in (0, 3):
                problems.append(self._said(block, log, f"Ctrl-C: exit {process.returncode}"))
        assert not problems, "\n".join(problems)

    @staticmethod
    def _said(block: Block, log: Path, what: str) -> str:
        output = log.read_text(encoding="utf-8", errors="replace")
        return f"{block.page}:{block.line}: `{block.text}`: {what}:\n{output}"
