"""The crash scripts' harness (``bench/crash/``): ``bridges run`` SIGKILLed at random moments.

A crash script (``mqtt_redis_crash.py``, ``queues_crash.py``) names its
scenarios, each a function that fills the near side, says the route's
source and sink, and how to watch the far side (:class:`Scenario`). This
module runs them all the same way: ``bridges run`` is started and killed
with SIGKILL once the far side holds a random share of the messages (plus
0-50 ms), ``--kills`` times (with ``--restart`` the server is also restarted,
under the running bridge, just before ``--restarts`` of the kills: one by
default), then runs until everything arrived and is stopped with SIGTERM (a
clean exit is required). Figures: arrived (must be
all), missing, duplicates and the most copies of one id, against the bound
at-least-once promises (``kills * in_flight``, per route), or 0 for a scenario whose
source and sink claim effectively once together (``Scenario.once``).

Every script in ``bench/crash/`` imports from here; what it shares with the
throughput benchmarks (``bench/_base.py``, ``bench/_brokers.py``,
``bench/_spark.py``, one folder up) is re-exported.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import Any, Final

import trio

import trio_stomp

# The layer under both bench folders (bench/: _base, _brokers, _http, _spark), for the
# scripts here: they are run by path, so only their own folder is on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _base import HOST as HOST
from _base import BenchError as BenchError
from _base import bench_command as bench_command
from _base import bridges_command as bridges_command
from _base import environment_line as environment_line
from _base import free_port as free_port
from _base import stop_process as stop_process
from _base import wait_port as wait_port
from _base import write_report as write_report
from _brokers import EMBEDDED as EMBEDDED
from _brokers import TARGETS as TARGETS
from _brokers import Target as Target
from _brokers import check_target as check_target
from _brokers import embedded_broker as embedded_broker
from _brokers import start_embedded_broker as start_embedded_broker
from _http import START_LIMIT as START_LIMIT
from _http import child as child
from _http import wait_healthy as wait_healthy
from _spark import committed_files as committed_files

IN_FLIGHT: Final = 200
BATCH: Final = 100
LIMIT: Final = 120.0


class Server:
    """A private server (mosquitto, redis-server, nats-server, ...) that the run may
    restart (:meth:`restart`) or SIGKILL and start again (:meth:`crash`).

    COMMAND gives its command line for a port and a working directory (kept
    across restarts and crashes, removed by :meth:`close`); it must save its
    data on SIGTERM.
    """

    def __init__(
        self, command: Callable[[int, Path], list[str]], what: str, down: float = 0.3
    ) -> None:
        self.port = free_port()
        self.work = Path(tempfile.mkdtemp(prefix=f"{what}-"))
        self._command = command(self.port, self.work)
        self._what = what
        self._down = down
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self._process = subprocess.Popen(
            self._command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_port(self.port, self._process, self._what)

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(30)
            self._process = None

    def restart(self) -> None:
        self.stop()
        time.sleep(self._down)
        self.start()

    def crash(self, while_down: Callable[[], None] = lambda: None) -> float:
        """SIGKILL it, call ``while_down()``, and start it again with its
        data; the seconds it was away."""
        began = time.monotonic()
        if self._process is not None:
            self._process.send_signal(signal.SIGKILL)
            self._process.wait()
        while_down()
        self.start()
        return round(time.monotonic() - began, 1)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.work, ignore_errors=True)


@contextmanager
def private_servers(wanted: Mapping[str, Server | None]) -> Iterator[dict[str, Server]]:
    """The servers WANTED (None: not needed this run), started; stopped and removed after."""
    with ExitStack() as stack:
        servers = {name: server for name, server in wanted.items() if server is not None}
        for server in servers.values():
            stack.callback(server.close)
            server.start()
        yield servers


def route_table(name: str, source: str, sink: str) -> str:
    """A ``[routes.NAME]`` table with the harness's window, batches and retries."""
    return f"""
[routes.{name}]
in_flight = {IN_FLIGHT}
batch = {{ count = {BATCH}, time = 0.01 }}
retry = {{ attempts = 1000, initial = 0.05, max = 1.0 }}
source = {source}
sink = {sink}
"""


def route_config(source: str, sink: str, extra: str = "") -> str:
    return f"""
[bridge]
shutdown_timeout = 20
log_level = "warning"
{route_table("crash", source, sink)}{extra}"""


@dataclasses.dataclass
class Scenario:
    """One scenario's route (source and sink tables) and the means to watch the far side."""

    source: str
    sink: str
    held: Callable[[], int]  # messages the far side holds now (duplicates included)
    final: Callable[[], Counter[str]]  # copies per body (id) at the end
    finished: Callable[[], bool]  # everything arrived (and the source is drained)
    restart_server: Callable[[], None]
    once: bool = False  # source and sink claim effectively once: the bound is 0 duplicates
    extra: str = ""  # more of the config: an embedded broker, a second route
    routes: int = 1  # routes in the config: each may send its in-flight window again


@dataclasses.dataclass(frozen=True)
class Direct:
    """A scenario with a harness of its own (a webhook sender, an HTTP receiver).

    ``run(count, kills, rng)`` gives a result with the keys :func:`run_scenario`'s has;
    with ``restarts`` set it is called as ``run(count, kills, rng, restarts=N)``, N the
    server restarts ``--restart`` asks for (0 without it).
    """

    run: Callable[..., dict[str, Any]]
    restarts: bool = False


#: Builds a scenario in a working directory for the message ids (or runs it: Direct).
Factory = Callable[[Path, list[str]], Scenario] | Direct

_RUNNING: Final = re.compile(rb"running \d+ route\(s\)")


def phase(text: str) -> None:
    """Say on stderr what the run does now (``phase: ...``): a caller that must give up
    on a stalled run (``tests/family_kit.py``'s ``crash_run``) names the last one."""
    print(f"phase: {text}", file=sys.stderr, flush=True)


def wait_for(
    condition: Callable[[], bool],
    process: subprocess.Popen[bytes],
    limit: float = LIMIT,
    what: str = "the condition",
) -> None:
    """Until ``condition()``; BenchError naming WHAT when the bridge exits or LIMIT s pass."""
    deadline = time.monotonic() + limit
    while True:
        try:
            if condition():
                return
        except Exception:  # the server is restarting: look again
            pass
        if process.poll() is not None:
            raise BenchError(
                f"no progress: the bridge exited ({process.returncode}) waiting for {what}"
            )
        if time.monotonic() > deadline:
            raise BenchError(f"no progress: {limit:g} s passed waiting for {what}")
        time.sleep(0.05)


def _kill_at_random_moments(
    name: str,
    scenario: Scenario,
    run: Callable[[], subprocess.Popen[bytes]],
    goals: list[int],
    restart_at: set[int],
    rng: random.Random,
) -> list[int]:
    progress = []
    for n, goal in enumerate(goals):
        phase(f"{name}: run {n + 1} of {len(goals) + 1}: waiting for {goal} held, then SIGKILL")
        process = run()
        try:
            what = f"{goal} held (run {n + 1})"
            wait_for(lambda goal=goal: scenario.held() >= goal, process, what=what)  # type: ignore[misc]
            time.sleep(rng.uniform(0.0, 0.05))
            if n in restart_at:
                phase(f"{name}: run {n + 1}: restarting the server")
                scenario.restart_server()
                time.sleep(1.0)
            if process.poll() is not None:
                raise BenchError(f"{name}: bridges exited by itself; see its bridge.log")
        finally:
            # (the planned SIGKILL, or, when the wait failed, no bridge left running)
            if process.poll() is None:
                process.send_signal(signal.SIGKILL)
            process.wait()
        progress.append(scenario.held())
    return progress


def _run_to_the_end(
    scenario: Scenario, run: Callable[[], subprocess.Popen[bytes]], log: Path, limit: float
) -> int:
    """The last run: until everything arrived, then SIGTERM; its exit status."""
    log_start = log.stat().st_size
    process = run()

    def finished() -> bool:
        # (a SIGTERM before the bridge handles signals would just kill it)
        with log.open("rb") as text:
            text.seek(log_start)
            running = _RUNNING.search(text.read()) is not None
        return running and scenario.finished()

    try:
        wait_for(finished, process, limit, what="every message (the last run)")
        time.sleep(0.5)
    finally:
        phase("the last run: stopping (SIGTERM; SIGKILL after 30 s)")
        stop_process(process, 30)  # (SIGTERM; SIGKILL after 30 s: status -9)
    return process.returncode


def run_scenario(
    name: str, make: Factory, count: int, kills: int, restarts: int, rng: random.Random
) -> dict[str, Any]:
    """One run of scenario NAME; the server restarted at RESTARTS of the KILLS (0: never)."""
    if isinstance(make, Direct):
        phase(f"{name}: running ({kills} kill(s), its own steps)")
        more = {"restarts": restarts} if make.restarts else {}
        return {"scenario": name, **make.run(count, kills, rng, **more)}
    ids = [f"msg-{i:06d}" for i in range(count)]
    with tempfile.TemporaryDirectory(prefix=f"crash-{name}-") as tmp:
        work = Path(tmp)
        scenario = make(work, ids)
        config = route_config(scenario.source, scenario.sink, scenario.extra)
        (work / "bridge.toml").write_text(config)
        log_path = work / "bridge.log"
        command = [*bridges_command(), "run", str(work / "bridge.toml")]
        started = time.monotonic()
        shares = sorted(rng.uniform(0.05, 0.9) for _ in range(kills))
        goals = [int(share * count) for share in shares]
        restart_at = set(rng.sample(range(kills), min(restarts, kills)))
        with log_path.open("w") as log:

            def run() -> subprocess.Popen[bytes]:
                log.flush()
                return subprocess.Popen(command, cwd=work, stdout=log, stderr=log)

            progress = _kill_at_random_moments(name, scenario, run, goals, restart_at, rng)
            log.flush()
            phase(f"{name}: the last run: waiting for all {count}, then SIGTERM")
            status = _run_to_the_end(scenario, run, log_path, LIMIT + count / 100)
        phase(f"{name}: reading what arrived")
        copies = scenario.final()
        total = sum(copies.values())
        return {
            "scenario": name,
            "messages": count,
            "kills": kills,
            "server_restarts": len(restart_at),
            "held_at_kills": progress,
            "arrived": len(set(copies) & set(ids)),
            "missing": len(set(ids) - set(copies)),
            "duplicates": total - len(copies),
            "max_copies": max(copies.values(), default=0),
            "bound": 0 if scenario.once else kills * IN_FLIGHT * scenario.routes,
            "exit_status": status,
            "seconds": round(time.monotonic() - started, 1),
            "log_tail": log_path.read_text()[-1500:] if status != 0 else "",
        }


def ok(result: dict[str, Any]) -> bool:
    return bool(
        result["missing"] == 0
        and result["duplicates"] <= result["bound"]
        and result["exit_status"] == 0
    )


def print_table(title: str, results: list[dict[str, Any]]) -> None:
    width = max([14, *(len(r["scenario"]) for r in results)])
    print(title)
    print(
        f"| {'scenario':<{width}} | messages | kills | restart | arrived | missing | duplicates "
        "| max copies | dup bound | exit | time, s | verdict |"
    )
    print(
        f"|{'-' * (width + 2)}|----------|-------|---------|---------|---------|------------"
        "|------------|-----------|------|---------|---------|"
    )
    for r in results:
        if "error" in r:
            print(f"| {r['scenario']:<{width}} | error: {r['error']}")
            continue
        print(
            f"| {r['scenario']:<{width}} | {r['messages']:>8,} | {r['kills']:>5} "
            f"| {r['server_restarts']:>7} | {r['arrived']:>7,} "
            f"| {r['missing']:>7} | {r['duplicates']:>10} | {r['max_copies']:>10} "
            f"| {r['bound']:>9,} | {r['exit_status']:>4} | {r['seconds']:>7} "
            f"| {'ok' if ok(r) else 'FAIL':<7} |"
        )
        if r["log_tail"]:
            print(r["log_tail"])


def main(
    doc: str,
    scenarios: list[str],
    setup: Callable[[list[str]], AbstractContextManager[Mapping[str, Factory]]],
    restarts: int = 1,
) -> int:
    """A crash script's command line: ``--count --kills --only --restart --restarts --seed
    --json --report`` (RESTARTS: ``--restarts``' default).

    SETUP, given the scenario names to run, yields a factory for each (having
    started what they need: servers, a broker). ``--seed A,B`` runs every
    scenario once per seed; ``--report PATH`` writes the figures of every run
    (:func:`_base.write_report`: lost and duplicates per scenario and seed).
    """
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--only", default=",".join(scenarios))
    parser.add_argument("--restart", action="store_true", help="restart the server, too")
    parser.add_argument(
        "--restarts",
        type=int,
        default=restarts,
        help=f"with --restart: at how many of the kills (default {restarts})",
    )
    parser.add_argument("--seed", default=None, help="a seed, or several: 11,12")
    parser.add_argument("--json", action="store_true", help="one JSON object per run")
    parser.add_argument("--report", metavar="PATH", help="write the figures here (JSON)")
    args = parser.parse_args()
    names = [name for name in args.only.split(",") if name]
    unknown = set(names) - set(scenarios)
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    seeds = [int(seed) for seed in args.seed.split(",")] if args.seed else [random.randrange(2**32)]
    if not args.json:
        print(environment_line(), flush=True)
    results = []
    with setup(names) as factories:
        for seed in seeds:
            rng = random.Random(seed)
            for name in names:
                try:
                    result = run_scenario(
                        name,
                        factories[name],
                        args.count,
                        args.kills,
                        args.restarts if args.restart else 0,
                        rng,
                    )
                except BenchError as exc:
                    result = {"scenario": name, "error": str(exc)}
                phase(f"{name}: done")
                result["seed"] = seed
                results.append(result)
                if args.json:
                    print(json.dumps(result), flush=True)
    if not args.json:
        for seed in seeds:
            print_table(
                f"{args.count} messages per scenario, {args.kills} SIGKILLs at random moments, "
                f"in_flight {IN_FLIGHT}, seed {seed}",
                [r for r in results if r["seed"] == seed],
            )
    if args.report:
        write_report(
            args.report,
            bench=Path(sys.argv[0]).stem,
            command=bench_command(sys.argv[0], sys.argv[1:]),
            unit="messages",
            rows=report_rows(results),
        )
    return 0 if all("error" not in r and ok(r) for r in results) else 1


def report_rows(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Lost and duplicates per scenario (label) and seed (series), with what rides along."""
    rows = []
    for r in results:
        if "error" in r:
            continue
        kept = ("messages", "kills", "bound", "max_copies", "exit_status", "requests_repeated")
        along = {k: r[k] for k in kept if k in r}
        along |= {"seconds": r["seconds"], "verdict": "ok" if ok(r) else "FAIL"}
        for series, key in (("lost", "missing"), ("duplicates", "duplicates")):
            rows.append(
                {"series": f"{series}, seed {r['seed']}", "label": r["scenario"], "value": r[key]}
                | along
            )
    return rows


# -- what a target holds after a crash -------------------------------------------------------


def stomp_drain(
    target: Target,
    queue: str,
    idle: float = 2.0,
    expect: frozenset[str] = frozenset(),
    patience: float = 30.0,
) -> Counter[str]:
    """Every message in ``queue`` (acked), counted by body.

    A pass ends after ``idle`` s with nothing new; passes on new connections
    follow until one finds nothing. A broker that has just recovered a queue
    from disk can pause longer than ``idle`` before its next delivery (seen
    on a loaded RabbitMQ), and a message it still holds is not lost: so while
    any of ``expect`` is missing, passes go on until ``patience`` s have
    brought nothing new. A message missing after that is reported lost.
    """

    async def one_pass(copies: Counter[str]) -> int:
        found = 0
        async with trio_stomp.connect(target.url) as client:
            window = {"prefetch-count": "1000", "activemq.prefetchSize": "1000"}
            async with client.subscribe(queue, ack="client-individual", headers=window) as sub:
                while True:
                    with trio.move_on_after(idle) as waited:
                        message = await sub.__anext__()
                    if waited.cancelled_caught:
                        return found
                    copies[bytes(message.body).decode()] += 1
                    found += 1
                    await message.ack()

    async def drain() -> Counter[str]:
        copies: Counter[str] = Counter()
        last_new = trio.current_time()
        while True:
            if await one_pass(copies):
                last_new = trio.current_time()
                continue
            waiting = trio.current_time() - last_new < patience
            if not (expect - set(copies)) or not waiting:
                return copies

    result: Counter[str] = trio.run(drain)
    return result


def id_ranges(ids: set[str]) -> list[str]:
    """``ids`` (``msg-NNNNNN``) as sorted runs: ``["msg-000000..msg-000027", "msg-000031"]``.

    Every lost id, short enough to print: a run from the first id up to the
    kill is a queue that lost what it held; a run at the end is a drain that
    stopped early; scattered ones are neither.
    """
    numbers = sorted(int(name.rsplit("-", 1)[1]) for name in ids)
    runs: list[list[int]] = []
    for number in numbers:
        if runs and number == runs[-1][1] + 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    return [f"msg-{a:06d}" if a == b else f"msg-{a:06d}..msg-{b:06d}" for a, b in runs]
