"""Client throughput against real brokers: trio_stomp, stomp.py 9 and the raw-socket limit.

    .venv/bin/python bench/speed/throughput.py [--count 50000] [--size 100]
        [--brokers rabbitmq,activemq,embedded] [--rounds 2] [--profile DIR] [--json PATH]

Needs the brokers of ``scripts/brokers up`` (RabbitMQ STOMP on 127.0.0.1:61613,
ActiveMQ STOMP on 127.0.0.1:61623); a broker that does not answer is
reported and skipped. ``embedded`` runs ``trio-stomp broker`` in a
subprocess of its own, like the real brokers.

Three columns, each for every client against every broker:

- send: ``count`` SEND frames of ``size`` bytes to a fresh queue, each with
  a header of its own (``seq``: its number, as users send headers); the
  clock runs from the first send until the RECEIPT of the DISCONNECT that
  follows, so everything sent has reached the broker.
- receive auto / receive client-individual: the clock runs from SUBSCRIBE
  until the last of ``count`` messages was handled, client-individual
  acking each by its ``ack`` header as it comes. The queue is full before
  the consumer starts: an auto cell consumes the queue that the send cell
  just before it filled (which also checks that all of it arrived, and
  keeps at most one full queue in the broker: ActiveMQ keeps them on its
  heap); a client-individual cell gets a queue pre-filled (untimed) by the
  raw producer (destination, content-length, body: no ``seq``).

When trio_stomp's auto subscription overflows (``SubscriptionOverflow``:
its reader outruns its consumer, see the report), the cell is measured
again with ``buffer_size=count`` and marked ``*``. A cell that fails
because its broker went away (test suites restart the shared brokers) is
run again once the broker answers; what a failed cell leaves in its queue
is drained.

Every consumer asks for the same window: ``prefetch-count: 1000`` and
``activemq.prefetchSize: 1000`` (trio_stomp's default). Heart-beats are off.

The clients, each with its ordinary API:

- trio_stomp: ``connect``, ``client.send(dest, body, headers={"seq": ...})``,
  ``client.subscribe`` iterated with ``async for`` and ``await message.ack()``.
- stomp.py 9: ``Connection12(..., heartbeats=(0, 0), vhost="/")``,
  ``conn.send(dest, body, headers={"seq": ...})``, ``conn.disconnect(receipt=...)``;
  receives through a ``ConnectionListener.on_message`` on its own receiver thread, acking with
  ``conn.ack(frame.headers["ack"])`` (STOMP 1.2's ``ack(id)``; its second
  argument is a transaction, not the subscription).
- raw socket: pre-encoded frames (the ``seq`` headers in them), a blocking
  socket, 64 KiB writes and reads,
  MESSAGE frames counted with ``bytes.count`` and ACK frames for a whole
  read built with one regex and one join. No parsing, no object per message.

Every cell runs in a fresh interpreter (``--child``), so its CPU time is its
own: ``time.process_time()`` (all threads, so stomp.py's receiver thread
counts) over the timed window, reported per 10,000 messages. Brokers share
the machine's cores with the client; on a busy or 2-core machine absolute
numbers move from run to run, the ratios much less (``--rounds N`` keeps the
best rate and the lowest CPU of N interleaved runs, and takes trio_stomp's
rate over raw's round by round).

The targets printed at the end, judged by the median of the per-round
ratios (the two ran next to each other in each round, so their ratio moves
less than either): trio_stomp at least 95% of the raw limit's rate, and at
most half of stomp.py's CPU per message, in every column. ``--profile DIR``
runs the trio_stomp cells under cProfile and writes one ``.prof`` per cell
there (the table is then not for quoting). ``--json PATH`` writes the table
(``bench/_base.write_report``: msg/s per broker and column, one series per
client, with CPU per message and the per-round ratios).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, Final

from _common import (
    ACK_MODES,
    EMBEDDED,
    WINDOW_HEADERS,
    BenchError,
    Meter,
    RawClient,
    Result,
    Target,
    add_cell_options,
    bench_command,
    body_of,
    broker_went_away,
    check_cell_options,
    check_raw_count,
    child_main,
    consume_count,
    drain_rest,
    environment_line,
    fmt_rate,
    fmt_ratio,
    open_targets,
    parse_brokers,
    prefill,
    print_elapsed,
    run_child,
    run_trio_cell,
    send_frames,
    unique_queue,
    write_report,
)

CLIENTS: Final = ("raw", "trio_stomp", "stomp.py")
CLIENT_LABELS: Final = {"raw": "raw socket", "trio_stomp": "trio_stomp", "stomp.py": "stomp.py 9"}
MODES: Final = ("send", *ACK_MODES)
MODE_LABELS: Final = {
    "send": "send",
    "auto": "receive auto",
    "client-individual": "receive client-indiv",
}
RATE_TARGET: Final = 0.95  # trio_stomp / raw, at least
CPU_TARGET: Final = 0.5  # trio_stomp CPU / stomp.py CPU, at most


# -- the children: one measurement each -------------------------------------------


def run_raw(spec: dict[str, Any], meter: Meter) -> None:
    target = Target(**spec["target"])
    count, destination, mode = spec["count"], spec["destination"], spec["mode"]
    client = RawClient(target, timeout=spec["timeout"])
    if mode == "send":
        body = body_of(spec["size"])
        data = b"".join(send_frames(destination, body, 1, {"seq": str(i)}) for i in range(count))
        meter.start()
        client.write(data)
        client.disconnect()
        meter.stop(count)
    else:
        meter.start()
        client.subscribe(destination, mode)
        got = client.consume(count, ack=mode != "auto")
        meter.stop(count)
        check_raw_count(got, count)
        client.disconnect()


def run_trio_stomp(spec: dict[str, Any], meter: Meter) -> None:
    import trio

    import trio_stomp

    target = Target(**spec["target"])
    count, destination, mode = spec["count"], spec["destination"], spec["mode"]
    body = body_of(spec["size"])

    async def send() -> None:
        # The broker may take longer than the default 5 s to answer DISCONNECT: it
        # has the whole backlog of the socket's buffers to read first (the raw
        # socket and stomp.py wait as long for it).
        timeout = spec["timeout"]
        async with trio_stomp.connect(
            target.url, heartbeat=(0, 0), disconnect_timeout=timeout
        ) as client:
            meter.start()
            for i in range(count):
                await client.send(destination, body, headers={"seq": str(i)})
        meter.stop(count)  # the block's exit waited for the DISCONNECT receipt

    async def receive() -> None:
        async with trio_stomp.connect(target.url, heartbeat=(0, 0)) as client:
            meter.start()
            subscription = client.subscribe(
                destination, ack=mode, headers=WINDOW_HEADERS, buffer_size=spec.get("buffer_size")
            )
            async with subscription as sub:
                await consume_count(sub, count, mode != "auto", meter)

    async def main() -> None:
        with trio.fail_after(spec["timeout"]):
            await (send() if mode == "send" else receive())

    run_trio_cell(main, spec["timeout"])


def run_stomp_py(spec: dict[str, Any], meter: Meter) -> None:
    import stomp

    target = Target(**spec["target"])
    count, destination, mode = spec["count"], spec["destination"], spec["mode"]
    timeout = spec["timeout"]
    done = threading.Event()
    errors: list[str] = []

    conn = stomp.Connection12([("127.0.0.1", target.port)], heartbeats=(0, 0), vhost="/")

    class Listener(stomp.ConnectionListener):  # type: ignore[misc]
        def __init__(self) -> None:
            self.got = 0

        def on_error(self, frame: Any) -> None:
            errors.append(str(frame.headers.get("message", frame.body))[:200])
            done.set()

        def on_message(self, frame: Any) -> None:
            if acking:
                conn.ack(frame.headers["ack"])
            self.got += 1
            if self.got == count:
                done.set()

    acking = mode == "client-individual"
    listener = Listener()
    conn.set_listener("bench", listener)
    conn.connect(target.login, target.passcode, wait=True)
    if mode == "send":
        body = body_of(spec["size"])
        meter.start()
        for i in range(count):
            conn.send(destination, body, headers={"seq": str(i)})
        conn.disconnect(receipt="bench-bye")  # returns once the RECEIPT came
        meter.stop(count)
    else:
        meter.start()
        conn.subscribe(destination, id="1", ack=mode, headers=dict(WINDOW_HEADERS))
        finished = done.wait(timeout)
        meter.stop(listener.got)
        conn.disconnect(receipt="bench-bye")
        if errors:
            raise BenchError(f"ERROR from the broker: {errors[0]}")
        if not finished:
            raise BenchError(f"received {listener.got} of {count} within {timeout} s")
    if errors:
        raise BenchError(f"ERROR from the broker: {errors[0]}")


RUNNERS: Final = {"raw": run_raw, "trio_stomp": run_trio_stomp, "stomp.py": run_stomp_py}


def child(spec_json: str) -> None:
    spec = json.loads(spec_json)
    child_main(RUNNERS[spec["client"]], spec)


# -- the parent: every cell, then the table ---------------------------------------

Cell = Result | str  # a measurement or why there is none


def spec_for(
    target: Target, client: str, mode: str, destination: str, args: argparse.Namespace
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "client": client,
        "mode": mode,
        "target": target.as_spec(),
        "destination": destination,
        "count": args.count,
        "size": args.size,
        "timeout": args.timeout,
    }
    if args.profile and client == "trio_stomp":
        spec["profile"] = str(Path(args.profile) / f"throughput-{target.name}-{mode}.prof")
    return spec


def measure(
    target: Target, client: str, mode: str, args: argparse.Namespace, filled: list[str]
) -> Cell:
    """:func:`measure_once`, and once more if the broker went away meanwhile."""
    cell = measure_once(target, client, mode, args, filled)
    if isinstance(cell, str) and broker_went_away(target, cell, args.timeout):
        cell = measure_once(target, client, mode, args, filled)
    return cell


def measure_once(
    target: Target, client: str, mode: str, args: argparse.Namespace, filled: list[str]
) -> Cell:
    """One cell, in a fresh process, on a queue of its own.

    A send cell leaves its full queue in ``filled``; the receive-auto cell
    run right after it consumes that queue (which saves a pre-fill and a
    drain, and keeps at most one full queue in the broker); a
    client-individual cell gets a queue that the raw producer pre-fills. A
    receive cell fails unless all ``count`` messages arrive, which also
    checks what the send cell before it sent. Whatever a failed (or
    interrupted) cell leaves in its queue is drained.
    """
    handed_over = mode == "auto" and bool(filled)
    destination = filled.pop() if handed_over else unique_queue(target.name, client, mode)
    spec = spec_for(target, client, mode, destination, args)
    done = False
    try:
        if mode != "send" and not handed_over:
            prefill(target, destination, body_of(args.size), args.count, args.timeout)
        result = run_child(os.path.abspath(__file__), spec, args.timeout + 15)
        done = True
    except (BenchError, OSError) as exc:
        if client == "trio_stomp" and mode == "auto" and "SubscriptionOverflow" in str(exc):
            drain_rest(target, destination)
            done = True
            return retry_unbounded(target, args, str(exc))
        return str(exc)
    finally:
        if not done:
            drain_rest(target, destination)
    if mode == "send":
        filled.append(destination)
    return result


def retry_unbounded(target: Target, args: argparse.Namespace, error: str) -> Cell:
    """trio_stomp's auto subscription overflowed: measure again with buffer_size=count.

    The failure is a finding in itself (it is listed below the table); the
    number from the second run, marked, still shows the cost per message.
    """
    destination = unique_queue(target.name, "trio_stomp", "auto-unbounded")
    spec = spec_for(target, "trio_stomp", "auto", destination, args)
    spec["buffer_size"] = args.count
    try:
        prefill(target, destination, body_of(args.size), args.count, args.timeout)
        result = run_child(os.path.abspath(__file__), spec, args.timeout + 15)
    except (BenchError, OSError) as exc:
        drain_rest(target, destination)
        return f"{error}; again with buffer_size={args.count}: {exc}"
    return Result(result.count, result.elapsed, result.cpu, note="overflow")


def best(cells: list[Cell]) -> Cell:
    """Best rate and lowest CPU of the runs that succeeded (else the first failure)."""
    ok = [cell for cell in cells if isinstance(cell, Result)]
    if not ok:
        return cells[0]
    fastest = max(ok, key=lambda r: r.rate)
    cpu = min(r.cpu_per_10k for r in ok)
    overflowed = sum(1 for r in ok if r.note)
    note = f"{overflowed} of {len(ok)}" if overflowed else ""
    return Result(fastest.count, fastest.elapsed, cpu * fastest.count / 10_000, note)


Runs = dict[tuple[str, str, str], list[Cell]]


def run_all(targets: list[Target], args: argparse.Namespace) -> Runs:
    """Every cell: per broker and round, send then receive-auto for each client, then
    client-individual for each.

    The clients' order turns by one each round, so none always runs first.
    """
    runs: dict[tuple[str, str, str], list[Cell]] = {}
    for target in targets:
        for round_ in range(args.rounds):
            shift = round_ % len(CLIENTS)
            order = CLIENTS[shift:] + CLIENTS[:shift]
            plan = [(c, m) for c in order for m in ("send", "auto")]
            plan += [(c, "client-individual") for c in order]
            filled: list[str] = []
            try:
                for client, mode in plan:
                    cell = measure(target, client, mode, args, filled)
                    runs.setdefault((target.name, client, mode), []).append(cell)
                    progress(target, client, mode, cell)
            finally:
                for destination in filled:  # left when a receive cell could not run
                    drain_rest(target, destination)
    return runs


def spread(values: list[float], fmt: str) -> str:
    return f"{min(values):{fmt}}-{max(values):{fmt}}" if values else "-"


def median_of(ratios: list[float]) -> str:
    return f"{statistics.median(ratios):.2f}x" if ratios else "-"


def round_ratios(runs: Runs, target: Target, mode: str) -> tuple[list[float], list[float]]:
    """trio_stomp's rate over raw's and its CPU per message over stomp.py's, round by round."""
    cells = [runs.get((target.name, client, mode), []) for client in CLIENTS]
    by_rate, by_cpu = [], []
    for raw, ours, peer in zip(*cells, strict=False):  # CLIENTS order
        if isinstance(ours, Result) and isinstance(raw, Result):
            by_rate.append(ours.rate / raw.rate)
        if isinstance(ours, Result) and isinstance(peer, Result):
            by_cpu.append(ours.cpu_per_10k / peer.cpu_per_10k)
    return by_rate, by_cpu


def print_spread(targets: list[Target], runs: Runs, rounds: int) -> None:
    """Every cell's range over the rounds: msg/s, CPU us per message, and trio_stomp's
    rate over raw's and CPU over stomp.py's taken round by round (the two ran
    next to each other in each round, so their ratio moves less than either),
    and the median of those per-round ratios: the figure load that drifts
    during the run disturbs least."""
    print(f"\nspread over {rounds} rounds (min-max): msg/s; client CPU us/msg")
    for target in targets:
        for mode in MODES:
            print(f"{target.label} {MODE_LABELS[mode]}")
            cells = {client: runs.get((target.name, client, mode), []) for client in CLIENTS}
            for client, results in cells.items():
                ok = [r for r in results if isinstance(r, Result)]
                rates = spread([r.rate for r in ok], ",.0f")
                cpus = spread([r.cpu / r.count * 1e6 for r in ok], ".2f")
                print(f"  {CLIENT_LABELS[client]:<12}{rates:>20} msg/s {cpus:>14} us/msg")
            by_rate, by_cpu = round_ratios(runs, target, mode)
            print(
                f"  {'trio_stomp/raw rate by round':<32}{spread(by_rate, '.2f')}x "
                f"(median {median_of(by_rate)}); "
                f"CPU/stomp.py by round {spread(by_cpu, '.2f')}x (median {median_of(by_cpu)})"
            )


def progress(target: Target, client: str, mode: str, cell: Cell) -> None:
    if isinstance(cell, Result):
        status = f"{cell.rate:,.0f} msg/s, {cell.cpu_per_10k:.3f} CPU s/10k"
        status += " (buffer_size raised after an overflow)" if cell.note else ""
    else:
        status = f"FAILED: {cell}"
    print(
        f"  {target.label:<9}{MODE_LABELS[mode]:<23}{CLIENT_LABELS[client]:<12}{status}",
        file=sys.stderr,
        flush=True,
    )


def rate_of(cell: Cell | None) -> float | None:
    return cell.rate if isinstance(cell, Result) else None


def cpu_of(cell: Cell | None) -> float | None:
    return cell.cpu_per_10k if isinstance(cell, Result) else None


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def print_table(
    targets: list[Target], cells: dict[tuple[str, str, str], Cell], args: argparse.Namespace
) -> list[str]:
    """Print the table and the targets; return the footnotes to print below them."""
    notes: list[str] = []
    print(environment_line())
    print(
        f"STOMP client throughput: {args.count:,} messages of {args.size} B per cell, "
        f"best of {args.rounds} round(s); msg/s and client CPU seconds per 10,000 messages"
    )
    print()
    print(f"{'':<34}" + "".join(f"{MODE_LABELS[mode]:<24}" for mode in MODES))
    print(f"{'broker':<10}{'client':<24}" + f"{'msg/s':>9}{'CPU s/10k':>11}    " * len(MODES))
    print("-" * (34 + 24 * len(MODES)))
    for target in targets:
        label = target.label
        for client in CLIENTS:
            row = f"{label:<10}{CLIENT_LABELS[client]:<24}"
            label = ""
            for mode in MODES:
                cell = cells[(target.name, client, mode)]
                where = f"{target.label} {MODE_LABELS[mode]} {CLIENT_LABELS[client]}"
                if isinstance(cell, Result):
                    mark = " "
                    if cell.note:
                        mark = "*"
                        notes.append(
                            f"* {where}: measured with buffer_size={args.count}; with the "
                            f"default buffer the subscription raised SubscriptionOverflow "
                            f"({cell.note} runs)"
                        )
                    row += f"{fmt_rate(cell.rate):>9}{mark}{cell.cpu_per_10k:>10.3f}    "
                else:
                    row += f"{'FAILED':>9} {'-':>10}    "
                    notes.append(f"FAILED {where}: {cell}")
            print(row)
        rates = f"{'':<10}{'trio_stomp/raw rate':<24}"
        cpus = f"{'':<10}{'trio_stomp/stomp.py CPU':<24}"
        for mode in MODES:
            ours = cells[(target.name, "trio_stomp", mode)]
            raw = cells[(target.name, "raw", mode)]
            peer = cells[(target.name, "stomp.py", mode)]
            rates += f"{fmt_ratio(ratio(rate_of(ours), rate_of(raw))):>9}{'':>15}"
            cpus += f"{'':>9}{fmt_ratio(ratio(cpu_of(ours), cpu_of(peer))):>11}    "
        print(rates)
        print(cpus)
        print()
    return notes


def print_targets(targets: list[Target], runs: Runs) -> None:
    """Each target met or not, judged by the median of the per-round ratios."""
    print(
        f"targets, by the median of the per-round ratios: trio_stomp rate >= "
        f"{RATE_TARGET:.2f}x raw; trio_stomp CPU per message <= {CPU_TARGET:.2f}x stomp.py's"
    )
    for target in targets:
        label = target.label
        for what, which, needed in (
            ("rate vs raw", 0, RATE_TARGET),
            ("CPU vs stomp.py", 1, CPU_TARGET),
        ):
            row = f"{label:<10}{what:<24}"
            label = ""
            for mode in MODES:
                ratios = round_ratios(runs, target, mode)[which]
                value = statistics.median(ratios) if ratios else None
                met = value is not None and (value >= needed if which == 0 else value <= needed)
                verdict = "n/a" if value is None else "met" if met else "NOT MET"
                shown = "-" if value is None else f"{value:.3f}x"
                row += f"{shown:>9} {verdict:<14}"
            print(row)


def report_rows(targets: list[Target], runs: Runs) -> list[dict[str, Any]]:
    """The figures for ``--json``: each client's best rate per broker and column, its
    lowest CPU per message, and trio_stomp's per-round ratios and their median."""
    rows: list[dict[str, Any]] = []
    for target in targets:
        for mode in MODES:
            by_rate, by_cpu = round_ratios(runs, target, mode)
            for client in CLIENTS:
                cell = best(runs.get((target.name, client, mode), ["not run"]))
                if not isinstance(cell, Result):
                    continue
                row: dict[str, Any] = {
                    "series": CLIENT_LABELS[client],
                    "label": f"{target.label} {MODE_LABELS[mode]}",
                    "value": round(cell.rate),
                    "cpu_us": round(cell.cpu / cell.count * 1e6, 3),
                }
                if client == "trio_stomp":
                    row["ratio_vs_raw_by_round"] = [round(r, 3) for r in by_rate]
                    row["ratio_vs_raw_median"] = (
                        round(statistics.median(by_rate), 3) if by_rate else None
                    )
                    row["cpu_vs_stomp_py_median"] = (
                        round(statistics.median(by_cpu), 3) if by_cpu else None
                    )
                rows.append(row)
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description="STOMP client throughput: trio_stomp vs stomp.py vs raw sockets."
    )
    parser.add_argument("--count", type=int, default=50_000, help="messages per cell")
    parser.add_argument("--size", type=int, default=100, help="body size in bytes")
    parser.add_argument(
        "--brokers",
        type=parse_brokers,
        default=["rabbitmq", "activemq", EMBEDDED],
        help="comma-separated: rabbitmq, activemq, embedded (default: all three)",
    )
    parser.add_argument(
        "--rounds", type=int, default=2, help="interleaved runs per cell; best kept"
    )
    parser.add_argument("--json", metavar="PATH", help="write the figures there as JSON")
    add_cell_options(parser)
    args = parser.parse_args(argv)
    if args.child is not None:
        child(args.child)
        return 0
    check_cell_options(parser, args)

    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        targets = open_targets(stack, args.brokers)
        if not targets:
            print("no broker to measure against; start them with: scripts/brokers up")
            return 1
        runs = run_all(targets, args)
    cells = {key: best(results) for key, results in runs.items()}
    print()
    notes = print_table(targets, cells, args)
    print_targets(targets, runs)
    print_spread(targets, runs, args.rounds)
    if args.json:
        write_report(
            args.json,
            bench="throughput",
            command=bench_command(__file__, argv),
            unit="msg/s",
            rows=report_rows(targets, runs),
        )
    if notes:
        print()
        for note in notes:
            print(note)
    print_elapsed(started, args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
