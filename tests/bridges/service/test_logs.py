"""``--log-format json`` and syslog priorities under journald."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from bridges.service._logs import configure_logging, priority


@pytest.fixture
def restore_root() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.usefixtures("restore_root")
def test_json_lines_carry_route_event_and_counters() -> None:
    out = io.StringIO()
    say = configure_logging("info", "json", journal=False, stream=out)
    log = logging.getLogger("bridges.route")
    log.warning("route %r failed: %s; starting again in %.2f s", "orders", "refused", 0.5)
    log.info("counters", extra={"route": "orders", "counters": {"received": 3}})
    log.debug("not shown at info")
    say("running 1 route(s)")
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(lines) == 3
    failed, counters, status = lines
    assert failed["level"] == "warning"
    assert failed["route"] == "orders"
    assert failed["event"] == "route %r failed: %s; starting again in %.2f s"
    assert failed["message"] == "route 'orders' failed: refused; starting again in 0.50 s"
    assert counters["counters"] == {"received": 3}
    assert (status["event"], status["message"]) == ("status", "running 1 route(s)")


@pytest.mark.usefixtures("restore_root")
def test_under_journald_each_line_starts_with_its_priority() -> None:
    out = io.StringIO()
    say = configure_logging("debug", "text", journal=True, stream=out)
    log = logging.getLogger("bridges.test")
    log.error("bad")
    log.warning("meh")
    log.info("fine")
    log.debug("detail")
    say("stopped")
    prefixes = [line[:3] for line in out.getvalue().splitlines()]
    assert prefixes == ["<3>", "<4>", "<6>", "<7>", "<5>"]
    assert out.getvalue().splitlines()[-1] == "<5>bridges: stopped"
    assert priority(logging.CRITICAL) == 2
