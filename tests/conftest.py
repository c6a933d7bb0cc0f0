"""Shared test set-up: per-test deadlines and the brokers the suite runs against.

Every async test runs under ``trio.fail_after`` (30 s, or the seconds given by
``@pytest.mark.deadline(N)``). Hypothesis has no per-example deadline and no
too-slow health check: a loaded CI machine's pause is not a bug, and the
test's own deadline still bounds it.

The ``target`` fixture parametrizes a test over the embedded broker and the
real ones started by ``scripts/brokers up``. A real broker that does not answer
skips its parameter with the reason, or fails the test when
``STOMP_REQUIRE_BROKERS=1`` (as CI sets it): CI never silently skips.
"""

from __future__ import annotations

import functools
import inspect
import socket
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import attrs
import pytest
import trio
import trio.lowlevel
from family_kit import unavailable
from hypothesis import HealthCheck, settings

settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")

DEFAULT_DEADLINE = 30.0


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "deadline(seconds): bound on an async test's run time")
    config.addinivalue_line("markers", "conformance: behaviour x broker table row")


BROKER_NAMES = ("embedded", "rabbitmq", "activemq")
_conformance: dict[str, dict[str, str]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Record conformance outcomes: row = behaviour (+ its parameters), column = broker."""
    if "conformance" not in report.keywords:  # (the mark: test_conformance.py, test_request.py)
        return
    if report.when != "call" and not (report.failed or report.skipped):
        return
    name, _, params = report.nodeid.split("::", 1)[1].partition("[")
    parts = params.rstrip("]").split("-") if params else []
    brokers = [p for p in parts if p in BROKER_NAMES]
    if not brokers:
        return
    row = name.removeprefix("test_") + "".join(f" [{p}]" for p in parts if p not in BROKER_NAMES)
    outcome = "pass" if report.passed else "FAIL" if report.failed else "skip"
    cells = _conformance.setdefault(row, {})
    if cells.get(brokers[0]) != "FAIL":
        cells[brokers[0]] = outcome


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print the behaviour x broker conformance table (docs/explanation/stomp-dialects.md)."""
    if not _conformance:
        return
    width = max(len(row) for row in _conformance)
    terminalreporter.section("conformance: behaviour x broker")
    header = f"| {'behaviour'.ljust(width)} | " + " | ".join(BROKER_NAMES) + " |"
    terminalreporter.write_line(header)
    terminalreporter.write_line(
        f"|{'-' * (width + 2)}|" + "|".join("-" * (len(b) + 2) for b in BROKER_NAMES) + "|"
    )
    for row, cells in _conformance.items():
        line = " | ".join(cells.get(b, "-").ljust(len(b)) for b in BROKER_NAMES)
        terminalreporter.write_line(f"| {row.ljust(width)} | {line} |")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    test = getattr(item, "obj", None)
    if test is not None and inspect.iscoroutinefunction(test):
        marker = item.get_closest_marker("deadline")
        seconds = float(marker.args[0]) if marker else DEFAULT_DEADLINE

        @functools.wraps(test)
        async def bounded(**kwargs: Any) -> Any:
            with trio.fail_after(seconds):
                return await test(**kwargs)

        item.obj = bounded  # type: ignore[attr-defined]
    yield


def all_tasks() -> set[trio.lowlevel.Task]:
    """Every task below the current one (a broker fixture's tasks are elsewhere):
    compare before and after a block to prove that no task outlived it."""
    tasks: set[trio.lowlevel.Task] = set()
    pending: list[trio.lowlevel.Task | None] = [trio.lowlevel.current_task()]
    while pending:
        task = pending.pop()
        if task is None:
            continue
        tasks.add(task)
        for nursery in task.child_nurseries:
            pending.extend(nursery.child_tasks)
    return tasks


@attrs.frozen
class Target:
    """A broker a test talks to."""

    name: str
    url: str

    @property
    def real(self) -> bool:
        return self.name != "embedded"


REAL_BROKERS = {
    "rabbitmq": "stomp://guest:guest@127.0.0.1:61613/?vhost=/",
    "activemq": "stomp://guest:guest@127.0.0.1:61623/",
}
_probe_cache: dict[str, str | None] = {}


def _probe(name: str) -> str | None:
    """None when the broker answers CONNECT with CONNECTED, else why not."""
    if name not in _probe_cache:
        port = int(REAL_BROKERS[name].rsplit(":", 1)[1].strip("/").split("/")[0])
        frame = b"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\0"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                sock.sendall(frame)
                reply = sock.recv(4096)
            _probe_cache[name] = (
                None if reply.startswith(b"CONNECTED") else f"{name} answered {reply[:60]!r}"
            )
        except OSError as exc:
            _probe_cache[name] = (
                f"{name} is not running on 127.0.0.1:{port} ({exc}); start it with "
                "`scripts/brokers up`"
            )
    return _probe_cache[name]


def require_real_broker(name: str) -> None:
    """Skip (locally) or fail (CI) when the named real broker is not up."""
    reason = _probe(name)
    if reason is not None:
        unavailable(reason)


@pytest.fixture(params=["embedded", "rabbitmq", "activemq"])
async def target(request: pytest.FixtureRequest) -> AsyncIterator[Target]:
    """Each broker in turn: the embedded one, RabbitMQ and ActiveMQ."""
    name: str = request.param
    if name == "embedded":
        from trio_stomp.broker import open_broker

        async with open_broker() as broker:
            yield Target("embedded", broker.url)
    else:
        require_real_broker(name)
        yield Target(name, REAL_BROKERS[name])


@pytest.fixture
async def embedded() -> AsyncIterator[Target]:
    """The embedded broker only."""
    from trio_stomp.broker import open_broker

    async with open_broker() as broker:
        yield Target("embedded", broker.url)


@pytest.fixture
def unique() -> Callable[[str], str]:
    """A destination name no other test (or earlier run) uses: ``unique("queue")``."""
    run = uuid.uuid4().hex[:12]

    def make(kind: str = "queue") -> str:
        return f"/{kind}/trio-stomp-test-{run}-{uuid.uuid4().hex[:6]}"

    return make
