"""bridges beside Benthos v4.60.0 (the MIT core of Redpanda Connect), on the same routes.

    .venv/bin/python bench/speed/benthos.py [--count 20000] [--size 100] [--senders 16]
        [--rounds 5] [--scenarios webhook,http-out] [--baseline BRIDGES] [--cache DIR]
        [--json PATH]

What it builds, with ``go``, into ``--cache`` (default
``$XDG_CACHE_HOME/trio-stomp-bench``, else ``~/.cache/trio-stomp-bench``), once:

- Benthos's own command (``cmd/benthos`` of ``github.com/redpanda-data/benthos/v4``
  v4.60.0, fetched through the Go module proxy by ``go mod download``). Only the
  core, whose licence is MIT: not ``redpanda-data/connect``;
- ``bench/speed/go/loadgen``: COUNT posts of SIZE bytes from SENDERS keep-alive
  connections in a closed loop; it counts 2xx answers and the posts' latency;
- ``bench/speed/go/receiver``: answers every POST with 204 and counts them.

The load is in Go so that its own cost does not cap the faster tool: on two cores a
Python sender would.

Scenarios, each tool in its own process, started afresh for each run:

- ``webhook``: webhooks in -> a JSON-lines file. bridges: an ``http`` source (its
  answer once the batch is fsynced) and a ``file`` sink, ``format = "jsonl"``.
  Benthos: ``http_server`` input (its answer once the output has the message) and
  ``file`` output (lines). The loader warms each up with 500 posts, then times
  COUNT; CPU per message is the tool's user + system time (``/proc/PID/stat``)
  over the timed posts. Benthos never fsyncs its file output (v4.60.0 has no
  option for it), so bridges runs twice: as shipped (fsync per batch) and with
  ``fsync = false`` (the durability Benthos gives).
- ``http-out``: a JSON-lines file of COUNT lines -> HTTP POST, one message per
  request, to the Go receiver. bridges: a ``file`` source (``mode = "jsonl"``,
  ``lines = "raw"``) and an ``http`` sink; Benthos: ``file`` input (lines) and
  ``http_client`` output. Both at their shipped defaults (bridges: 8 requests in
  flight; Benthos: 64). Timed at the receiver, first request to last; CPU over the
  same span.

``--baseline BRIDGES`` adds a third bridges, another checkout's ``bridges`` command
(``/work/main/.venv/bin/bridges``: main's engine), as shipped, to the ``webhook``
scenario. Each round runs every tool once, in an order that turns each round; the
table shows medians over the rounds and the median of the per-round ratios to
Benthos.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from _common import (
    HOST,
    BenchError,
    bench_command,
    bridges_command,
    environment_line,
    free_port,
    process_cpu,
    stop_process,
    wait_port,
    write_report,
)

BENTHOS_MODULE: Final = "github.com/redpanda-data/benthos/v4"
BENTHOS_VERSION: Final = "v4.60.0"
GO_SOURCES: Final = Path(__file__).resolve().parent / "go"
WARMUP: Final = 500
BASELINE: Final = "bridges, baseline"
#: How long one run may take before it is called failed, s.
RUN_LIMIT: Final = 300.0


#: How long a tool may take to listen, s (a loaded machine starts Python slowly).
START_LIMIT: Final = 60.0


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "trio-stomp-bench"


def go(*args: str, cwd: Path | None = None) -> str:
    """Run ``go ARGS`` (its own toolchain, never a download of another); its output."""
    if shutil.which("go") is None:
        raise BenchError("`go` is not on PATH: install Go 1.22 or later to build Benthos")
    env = {**os.environ, "GOTOOLCHAIN": "local", "CGO_ENABLED": "0"}
    done = subprocess.run(
        ["go", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise BenchError(f"go {' '.join(args)} failed: {done.stderr.strip()[-800:]}")
    return done.stdout


def build(cache: Path) -> dict[str, Path]:
    """Benthos (once per version), the load generator and the receiver, in ``cache``."""
    benthos = cache / f"benthos-{BENTHOS_VERSION}" / "benthos"
    if not benthos.exists():
        print(f"building Benthos {BENTHOS_VERSION} into {benthos.parent} (minutes, once)")
        module = json.loads(go("mod", "download", "-json", f"{BENTHOS_MODULE}@{BENTHOS_VERSION}"))
        partial = benthos.with_suffix(".part")
        go("build", "-trimpath", "-o", str(partial), "./cmd/benthos", cwd=Path(module["Dir"]))
        partial.rename(benthos)
    tools = {"benthos": benthos}
    for name in ("loadgen", "receiver"):  # (go build is incremental: cheap when unchanged)
        tools[name] = cache / "go" / name
        go("build", "-trimpath", "-o", str(tools[name]), f"./{name}", cwd=GO_SOURCES)
    return tools


@dataclass
class Run:
    rate: float  # messages/s
    cpu_ms: float | None  # the tool's CPU per message, ms
    p50_ms: float | None = None
    p99_ms: float | None = None


@dataclass
class Tool:
    name: str
    #: (work dir, in port or input file, out file or receiver URL) -> command
    command: Callable[[Path, str, str], list[str]]


def bridges_webhook(bridges: list[str], fsync: bool) -> Callable[[Path, str, str], list[str]]:
    def command(work: Path, port: str, out: str) -> list[str]:
        config = work / "bridge.toml"
        config.write_text(
            f"""[bridge]
log_level = "warning"

[routes.hooks]
source = {{ type = "http", listen = "{HOST}:{port}", path = "/hooks" }}
sink = {{ type = "file", path = "{out}", format = "jsonl", fsync = {str(fsync).lower()} }}
"""
        )
        return [*bridges, "run", str(config)]

    return command


def benthos_webhook(benthos: Path) -> Callable[[Path, str, str], list[str]]:
    def command(work: Path, port: str, out: str) -> list[str]:
        config = work / "benthos.yaml"
        config.write_text(
            f"""http:
  enabled: false
input:
  http_server:
    address: {HOST}:{port}
    path: /hooks
output:
  file:
    path: {out}/out.jsonl
    codec: lines
logger:
  level: WARN
"""
        )
        return [str(benthos), "-c", str(config)]

    return command


def bridges_out(bridges: list[str]) -> Callable[[Path, str, str], list[str]]:
    def command(work: Path, source: str, url: str) -> list[str]:
        config = work / "bridge.toml"
        config.write_text(
            f"""[bridge]
log_level = "warning"

[routes.out]
source = {{ type = "file", path = "{source}", mode = "jsonl", lines = "raw", \
position_file = "{work}/position" }}
sink = {{ type = "http", url = "{url}" }}
"""
        )
        return [*bridges, "run", str(config)]

    return command


def benthos_out(benthos: Path) -> Callable[[Path, str, str], list[str]]:
    def command(work: Path, source: str, url: str) -> list[str]:
        config = work / "benthos.yaml"
        config.write_text(
            f"""http:
  enabled: false
input:
  file:
    paths: [{source}]
output:
  http_client:
    url: {url}
    verb: POST
logger:
  level: WARN
"""
        )
        return [str(benthos), "-c", str(config)]

    return command


def loadgen(tools: dict[str, Path], url: str, count: int, args: argparse.Namespace) -> Any:
    done = subprocess.run(
        [str(tools["loadgen"]), f"-url={url}", f"-count={count}", f"-senders={args.senders}",
         f"-size={args.size}"],
        capture_output=True, text=True, timeout=RUN_LIMIT, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise BenchError(f"loadgen failed: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout)


def lines_in(folder: Path) -> int:
    return sum(
        path.read_bytes().count(b"\n") for path in folder.rglob("*") if path.is_file()
    )  # fmt: skip


def run_webhook(tool: Tool, tools: dict[str, Path], args: argparse.Namespace) -> Run:
    with tempfile.TemporaryDirectory(prefix="bench-benthos-") as tmp:
        work = Path(tmp)
        out = work / "out"
        out.mkdir()
        port = free_port()
        log = (work / "tool.log").open("wb")
        process = subprocess.Popen(
            tool.command(work, str(port), str(out)), cwd=work, stdout=log, stderr=log
        )
        try:
            wait_port(port, process, tool.name, START_LIMIT)
            url = f"http://{HOST}:{port}/hooks"
            warm = loadgen(tools, url, WARMUP, args)
            before = process_cpu(process.pid)
            got = loadgen(tools, url, args.count, args)
            after = process_cpu(process.pid)
        finally:
            stop_process(process)
            log.close()
        if got["ok"] != args.count or warm["ok"] != WARMUP:
            tail = (work / "tool.log").read_text(errors="replace")[-400:]
            raise BenchError(f"{tool.name}: {got['ok']} of {args.count} answered 2xx: {tail}")
        written = lines_in(out)
        if written < args.count + WARMUP:
            raise BenchError(f"{tool.name}: {written} lines written, {args.count + WARMUP} sent")
        cpu = None if before is None or after is None else (after - before) / args.count * 1000
        return Run(got["rate"], cpu, got["p50_ms"], got["p99_ms"])


def stats(url: str) -> dict[str, int]:
    with urllib.request.urlopen(url, timeout=5) as response:
        result: dict[str, int] = json.loads(response.read())
        return result


def run_http_out(tool: Tool, tools: dict[str, Path], args: argparse.Namespace) -> Run:
    with tempfile.TemporaryDirectory(prefix="bench-benthos-") as tmp:
        work = Path(tmp)
        source = work / "in.jsonl"
        line = b'{"p":"' + b"x" * (args.size - 8) + b'"}\n'
        source.write_bytes(line * args.count)
        port = free_port()
        receiver_log = (work / "receiver.log").open("wb")
        receiver = subprocess.Popen(
            [str(tools["receiver"]), f"-listen={HOST}:{port}"], stdout=receiver_log,
            stderr=receiver_log,
        )  # fmt: skip
        log = (work / "tool.log").open("wb")
        process: subprocess.Popen[bytes] | None = None
        try:
            wait_port(port, receiver, "receiver", START_LIMIT)
            url = f"http://{HOST}:{port}"
            process = subprocess.Popen(
                tool.command(work, str(source), f"{url}/in"), cwd=work, stdout=log, stderr=log
            )
            deadline = time.monotonic() + RUN_LIMIT
            before = None
            while (seen := stats(f"{url}/stats"))["count"] < args.count:
                if before is None and seen["count"] > 0:
                    before = process_cpu(process.pid)
                if time.monotonic() > deadline or process.poll() is not None:
                    tail = (work / "tool.log").read_text(errors="replace")[-400:]
                    raise BenchError(f"{tool.name}: {seen['count']} of {args.count}: {tail}")
                time.sleep(0.005)
            after = process_cpu(process.pid)
        finally:
            if process is not None:
                stop_process(process)
            stop_process(receiver)
            log.close()
            receiver_log.close()
        seconds = (seen["last_ns"] - seen["first_ns"]) / 1e9
        cpu = None if before is None or after is None else (after - before) / args.count * 1000
        return Run(args.count / seconds, cpu)


def median(values: list[float]) -> float:
    return statistics.median(values)


def report_scenario(
    scenario: str, results: dict[str, list[Run]], rows: list[dict[str, Any]]
) -> None:
    """Print the scenario's table; add its rows (rate and CPU per message) to ``rows``."""
    peer = results["benthos"]
    print(f"\n{scenario}: rate, latency p50/p99, CPU per message; ratio: median of per-round")
    print(f"{'tool':<32} {'msg/s':>9} {'p50 ms':>7} {'p99 ms':>7} {'CPU ms':>7} "
          f"{'rate / Benthos':>15} {'CPU / Benthos':>14}")  # fmt: skip
    for name, runs in results.items():
        rate = median([r.rate for r in runs])
        ratio = median([r.rate / p.rate for r, p in zip(runs, peer, strict=True)])
        cpus = [r.cpu_ms for r in runs if r.cpu_ms is not None]
        cpu = median(cpus) if cpus else None
        peer_cpu = [p.cpu_ms for p in peer if p.cpu_ms]
        cpu_ratio = (
            median([r.cpu_ms / p.cpu_ms for r, p in zip(runs, peer, strict=True)
                    if r.cpu_ms is not None and p.cpu_ms])
            if cpus and peer_cpu else None
        )  # fmt: skip
        p50 = median([r.p50_ms for r in runs if r.p50_ms is not None] or [float("nan")])
        p99 = median([r.p99_ms for r in runs if r.p99_ms is not None] or [float("nan")])
        p50_text, p99_text = ("-", "-") if p50 != p50 else (f"{p50:.2f}", f"{p99:.2f}")
        print(
            f"{name:<32} {rate:>9,.0f} {p50_text:>7} {p99_text:>7} "
            f"{'-' if cpu is None else f'{cpu:.3f}':>7} {ratio:>15.3f} "
            f"{'-' if cpu_ratio is None else f'{cpu_ratio:.2f}':>14}"
        )
        rows.append({
            "series": "rate, x Benthos", "label": f"{scenario}: {name}",
            "value": round(ratio, 4), "rate": round(rate, 1), "rounds": len(runs),
            **({"p50_ms": round(p50, 3), "p99_ms": round(p99, 3)} if p50 == p50 else {}),
        })  # fmt: skip
        if cpu is not None and cpu_ratio is not None:
            rows.append({
                "series": "CPU per message, x Benthos", "label": f"{scenario}: {name}",
                "value": round(cpu_ratio, 3), "cpu_us": round(cpu * 1000, 1),
            })  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--senders", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--scenarios", default="webhook,http-out")
    parser.add_argument("--baseline", help="another checkout's bridges command, for webhook")
    parser.add_argument("--cache", type=Path, default=default_cache())
    parser.add_argument("--json", help="write the figures here (docs/performance/data)")
    args = parser.parse_args()
    scenarios = args.scenarios.split(",")
    if set(scenarios) - {"webhook", "http-out"} or args.size < 8:
        parser.error("--scenarios: webhook and/or http-out; --size at least 8")
    print(environment_line())
    tools = build(args.cache)
    bridges = bridges_command()
    lineup: dict[str, tuple[list[Tool], Callable[..., Run]]] = {
        "webhook": (
            [
                Tool("bridges", bridges_webhook(bridges, fsync=True)),
                Tool("bridges, fsync = false", bridges_webhook(bridges, fsync=False)),
                Tool("benthos", benthos_webhook(tools["benthos"])),
                *(
                    [Tool(BASELINE, bridges_webhook([args.baseline], fsync=True))]
                    if args.baseline else []
                ),
            ],
            run_webhook,
        ),
        "http-out": (
            [Tool("bridges", bridges_out(bridges)), Tool("benthos", benthos_out(tools["benthos"]))],
            run_http_out,
        ),
    }  # fmt: skip
    print(
        f"{args.count} x {args.size} B; webhook: {args.senders} keep-alive senders (Go), "
        f"{WARMUP} posts to warm up; {args.rounds} rounds, tools alternating"
    )
    rows: list[dict[str, Any]] = []
    for scenario in scenarios:
        lineup_tools, run = lineup[scenario]
        results: dict[str, list[Run]] = {tool.name: [] for tool in lineup_tools}
        for round_number in range(args.rounds):
            turn = round_number % len(lineup_tools)
            for tool in lineup_tools[turn:] + lineup_tools[:turn]:
                result = run(tool, tools, args)
                results[tool.name].append(result)
                print(
                    f"  round {round_number + 1} {scenario} {tool.name}: {result.rate:,.0f} msg/s"
                    + ("" if result.cpu_ms is None else f", {result.cpu_ms:.3f} ms CPU/msg")
                    + ("" if result.p99_ms is None else f", p99 {result.p99_ms:.1f} ms"),
                    flush=True,
                )
        report_scenario(scenario, results, rows)
        if BASELINE in results:  # before and after, in the same run
            base = results[BASELINE]
            for name in (n for n in results if n.startswith("bridges") and n != BASELINE):
                each = [r.rate / b.rate for r, b in zip(results[name], base, strict=True)]
                print(
                    f"{name} / {BASELINE}: median of per-round rate ratios {median(each):.2f} "
                    f"({', '.join(f'{x:.2f}' for x in each)})"
                )
                rows.append({
                    "series": "rate, x baseline", "label": f"{scenario}: {name}",
                    "value": round(median(each), 3), "rounds": [round(x, 3) for x in each],
                })  # fmt: skip
    print(f"\nload average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        write_report(
            args.json,
            bench="bridges beside Benthos v4.60.0",
            command=bench_command(__file__, sys.argv[1:]),
            unit="ratio (median of per-round ratios)",
            rows=rows,
        )


if __name__ == "__main__":
    main()
