"""``bridges check --probe``: one line per route, the weaker of its source's and sink's answers."""

from __future__ import annotations

from bridges import BrokerSettings, Route
from bridges._guarantee import AT_MOST_ONCE, DURABLE, NOT_ASKED, Guarantee
from bridges.service._preflight import probe_routes, route_guarantee
from bridges.testing import FakeSink, FakeSource


class Answers(FakeSink):
    def __init__(self, answer: Guarantee | Exception) -> None:
        super().__init__()
        self.answer = answer

    async def probe(self) -> Guarantee:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_the_route_takes_the_weaker_answer() -> None:
    durable = Guarantee(DURABLE, "appendonly yes")
    weak = Guarantee(AT_MOST_ONCE, "storage: memory")
    unknown = Guarantee(NOT_ASKED, "cannot be asked")
    assert route_guarantee(unknown, durable) == "durable (appendonly yes)"
    assert route_guarantee(durable, weak).startswith("at most once across a target restart")
    assert route_guarantee(weak, durable).startswith("at most once across a restart of its source")
    assert route_guarantee(unknown, unknown).startswith("as the guarantee table says")


async def test_probe_counts_the_unreachable_and_the_weaker() -> None:
    said: list[str] = []
    routes = [
        Route("ok", FakeSource([]), Answers(Guarantee(DURABLE, "fine"))),
        Route("weak", FakeSource([]), Answers(Guarantee(AT_MOST_ONCE, "memory"))),
        Route("down", FakeSource([]), Answers(OSError("Connection refused"))),
    ]
    unreachable, weaker = await probe_routes(routes, BrokerSettings(), said.append)
    assert (unreachable, weaker) == (1, 1)
    assert "  ok: durable (fine)" in said
    assert "  down: sink not reached: OSError: Connection refused" in said
    assert "    source: not asked (nothing to ask)" in said


async def test_a_volatile_embedded_broker_is_said_and_counted() -> None:
    said: list[str] = []
    assert await probe_routes([], BrokerSettings(embedded=True), said.append) == (0, 1)
    assert "without data_dir" in said[0]
