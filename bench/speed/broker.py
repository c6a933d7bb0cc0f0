"""Broker throughput, end to end: the embedded broker against RabbitMQ and ActiveMQ.

    .venv/bin/python bench/speed/broker.py [--count 50000] [--size 100]
        [--brokers embedded,rabbitmq,activemq] [--ack auto,client-individual]
        [--clients raw,trio_stomp] [--durable] [--rounds 2] [--json PATH]
        [--profile DIR] [--selector [SELECTOR]]

Needs the brokers of ``scripts/brokers up`` (RabbitMQ STOMP on 127.0.0.1:61613,
ActiveMQ STOMP on 127.0.0.1:61623); one that does not answer is reported and
skipped. The embedded broker runs as ``trio-stomp broker --listen
127.0.0.1:0`` in a process of its own, so that, like the real brokers, it
has its own interpreter (GIL) and can use the other core.

What is measured: one producer and one consumer, on two connections, through
one fresh queue; ``count`` messages of ``size`` bytes. The consumer's
SUBSCRIBE is confirmed by a RECEIPT first; the clock then runs from the first
SEND until the consumer has the last MESSAGE (and, with client-individual,
has acked it). Both ends run in one client process (on one core; the broker
gets the other), with the same client for every broker:

- trio_stomp: two ``trio_stomp.connect`` in one ``trio.run``, a producer
  task sending and the consumer iterating its subscription (``await
  message.ack()`` in client-individual). Its subscription gets
  ``buffer_size=count``, so that the auto-ack buffer overflow that
  bench/speed/throughput.py reports cannot end a run: this benchmark is about the
  brokers.
- raw socket: the method of bench/speed/throughput.py (pre-encoded SEND frames
  written in 64 KiB chunks by a producer thread; the consumer counts MESSAGE
  frames with ``bytes.count`` and sends pre-formatted ACKs).

Every consumer asks for a window of 1000 (``prefetch-count`` and
``activemq.prefetchSize``). Each cell runs in a fresh interpreter. Besides
msg/s it shows the client's CPU and the broker process's CPU (from
/proc/PID/stat, for the whole cell, connects included) per 10,000 messages;
the real brokers' CPU also counts anything else that uses them meanwhile.

``--durable`` adds a column: the producer's every SEND carries
``persistent:true`` and a ``receipt`` (at most :data:`RECEIPT_WINDOW`
outstanding), the consumer is ``client-individual``, and the clock stops
at the last MESSAGE's ACK and the last RECEIPT. The embedded broker is then
a second one, ``trio-stomp broker --data-dir`` (a fresh temporary dir: a
RECEIPT comes once the message is fsynced); RabbitMQ's queue is durable
and its RECEIPT waits for the publisher confirm; ActiveMQ persists to
KahaDB. Raw clients only.

Each round measures every broker once per cell, the brokers' order turning
each round; the tables show the best round, the ratios are the median of
the per-round ratios (embedded over each broker in the same round). The
targets printed at the end (:data:`TARGETS`), for the raw clients: the
embedded broker at least 1.5x ActiveMQ's rate and 4x RabbitMQ's, in auto and
client-individual; durable, at least 2x RabbitMQ's. ``--json PATH`` writes
the raw clients' median rates and ratios (``_common.write_report``).

``--selector``: what a selector costs. Every message then carries the
headers of :data:`SELECTOR_HEADERS`, and each cell runs twice: plain, and
with the consumer's SUBSCRIBE carrying the selector (by default
:data:`SELECTOR`, which selects every message: the cost is the evaluation,
not fewer messages). RabbitMQ has no selectors and is left out. A second
table shows, per broker, client and ack mode, the rate with the selector
over the rate without, and the broker's extra CPU per message.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
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
    child_main,
    consume_count,
    drain_rest,
    embedded_broker,
    environment_line,
    fmt_rate,
    listening_pid,
    open_targets,
    parse_brokers,
    print_elapsed,
    process_cpu,
    run_child,
    run_trio_cell,
    send_frames,
    unique_queue,
    write_report,
)

CLIENTS: Final = ("trio_stomp", "raw")
#: The headers every message carries in a --selector run (with or without it).
SELECTOR_HEADERS: Final = {"region": "eu", "tier": "gold", "size": "42", "kind": "order"}
#: A selector of the usual shape, true for every message of SELECTOR_HEADERS.
SELECTOR: Final = "region = 'eu' AND tier IN ('gold', 'silver') AND size > 10 AND kind LIKE 'ord%'"
CLIENT_LABELS: Final = {"trio_stomp": "trio_stomp", "raw": "raw socket"}
#: The --durable column's name (a mode beside the ack modes).
DURABLE: Final = "durable"
#: Receipts a durable producer keeps outstanding, at most.
RECEIPT_WINDOW: Final = 1000
#: (mode, other broker) -> the least median ratio embedded / other, raw clients.
TARGETS: Final = {
    ("auto", "activemq"): 1.5,
    ("client-individual", "activemq"): 1.5,
    ("auto", "rabbitmq"): 4.0,
    ("client-individual", "rabbitmq"): 4.0,
    (DURABLE, "rabbitmq"): 2.0,
}


# -- the children: one measurement each -------------------------------------------


def run_raw(spec: dict[str, Any], meter: Meter) -> None:
    target = Target(**spec["target"])
    count, destination, ack = spec["count"], spec["destination"], spec["ack"]
    consumer = RawClient(target, timeout=spec["timeout"])
    consumer.subscribe(destination, ack, receipt=True, selector=spec.get("selector"))
    producer = RawClient(target, timeout=spec["timeout"])
    body = body_of(spec["size"])
    durable = spec.get("durable", False)
    headers = spec.get("headers") or {}
    frames = [
        send_frames(destination, body, 1, {**headers, "persistent": "true", "receipt": str(i)})
        for i in range(count if durable else 0)
    ]
    data = b"" if durable else send_frames(destination, body, count, headers)
    failures: list[BaseException] = []

    def produce() -> None:
        try:
            if durable:
                send_with_receipts(producer, frames)
            else:
                producer.write(data)
            producer.disconnect()
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=produce, daemon=True)
    meter.start()
    thread.start()
    got = consumer.consume(count, ack=ack != "auto")
    if durable:  # (the clock runs until the last RECEIPT, too)
        thread.join(spec["timeout"])
    meter.stop(got)
    thread.join(spec["timeout"])
    if failures:
        raise BenchError(f"the producer failed: {failures[0]!r}")
    consumer.disconnect()


def send_with_receipts(producer: RawClient, frames: list[bytes]) -> None:
    """Write SEND ``frames`` that each ask for a RECEIPT, keeping at most
    RECEIPT_WINDOW outstanding; return once every RECEIPT is in."""
    count = len(frames)
    sent = received = 0
    tail = b""
    while received < count:
        if sent < count and sent - received < RECEIPT_WINDOW:
            n = min(100, count - sent)
            producer.write(b"".join(frames[sent : sent + n]))
            sent += n
            continue
        chunk = tail + producer.recv()
        received += chunk.count(b"RECEIPT\n")
        tail = chunk[-7:]
        if b"ERROR\n" in chunk:
            raise BenchError(f"{producer.target.label} sent ERROR: {chunk[:300]!r}")


def run_trio_stomp(spec: dict[str, Any], meter: Meter) -> None:
    import trio

    import trio_stomp

    target = Target(**spec["target"])
    count, destination, ack = spec["count"], spec["destination"], spec["ack"]
    body = body_of(spec["size"])
    headers = spec.get("headers") or {}
    window = dict(WINDOW_HEADERS)
    if spec.get("selector") is not None:
        window["selector"] = spec["selector"]

    async def produce(client: trio_stomp.Client) -> None:
        for _ in range(count):
            await client.send(destination, body, headers=headers)

    async def main() -> None:
        with trio.fail_after(spec["timeout"]):
            async with (
                trio_stomp.connect(target.url, heartbeat=(0, 0)) as consumer,
                trio_stomp.connect(target.url, heartbeat=(0, 0)) as producer,
            ):
                subscription = consumer.subscribe(
                    destination, ack=ack, headers=window, buffer_size=count, receipt=True
                )
                async with subscription as sub, trio.open_nursery() as nursery:
                    meter.start()
                    nursery.start_soon(produce, producer)
                    await consume_count(sub, count, ack != "auto", meter)

    run_trio_cell(main, spec["timeout"])


RUNNERS: Final = {"trio_stomp": run_trio_stomp, "raw": run_raw}


def child(spec_json: str) -> None:
    spec = json.loads(spec_json)
    child_main(RUNNERS[spec["client"]], spec)


# -- the parent --------------------------------------------------------------------

Cell = tuple[Result, float | None] | str  # (client result, broker CPU s) or why none


def measure(
    target: Target, client: str, ack: str, args: argparse.Namespace, selecting: bool = False
) -> Cell:
    """:func:`measure_once`, and once more if the broker went away meanwhile."""
    cell = measure_once(target, client, ack, args, selecting)
    if isinstance(cell, str) and broker_went_away(target, cell, args.timeout):
        cell = measure_once(target, client, ack, args, selecting)
    return cell


def measure_once(
    target: Target, client: str, ack: str, args: argparse.Namespace, selecting: bool = False
) -> Cell:
    """One cell, in a fresh process, on a fresh queue; drains the queue if it fails.

    With ``--selector``, every message carries SELECTOR_HEADERS, and the
    consumer subscribes with the selector when ``selecting``.
    """
    destination = unique_queue(target.name, client, ack)
    spec: dict[str, Any] = {
        "client": client,
        "ack": "client-individual" if ack == DURABLE else ack,
        "durable": ack == DURABLE,
        "target": target.as_spec(),
        "destination": destination,
        "count": args.count,
        "size": args.size,
        "timeout": args.timeout,
        "headers": SELECTOR_HEADERS if args.selector else None,
        "selector": args.selector if selecting else None,
    }
    if args.profile and client == "trio_stomp":
        spec["profile"] = str(Path(args.profile) / f"broker-{target.name}-{ack}.prof")
    pid = listening_pid(target.port)
    done = False
    try:
        before = process_cpu(pid)
        result = run_child(os.path.abspath(__file__), spec, args.timeout + 15)
        after = process_cpu(pid)
        done = True
    except (BenchError, OSError) as exc:
        return str(exc)
    finally:
        if not done:
            drain_rest(target, destination)
    broker_cpu = None if before is None or after is None else after - before
    return result, broker_cpu


def best(cells: list[Cell]) -> Cell:
    ok = [cell for cell in cells if not isinstance(cell, str)]
    if not ok:
        return cells[0]
    fastest = max(ok, key=lambda cell: cell[0].rate)
    client_cpu = min(cell[0].cpu for cell in ok)
    broker_cpus = [cell[1] for cell in ok if cell[1] is not None]
    result = fastest[0]
    return (
        Result(result.count, result.elapsed, client_cpu),
        min(broker_cpus) if broker_cpus else None,
    )


Cells = dict[tuple[str, str, str], Cell]
#: (broker, client, mode) -> that cell of every round, in order.
Rounds = dict[tuple[str, str, str], list[Cell]]


def run_all(
    targets: list[Target],
    durable_targets: list[Target],
    acks: list[str],
    args: argparse.Namespace,
) -> tuple[Rounds, Cells]:
    """Every cell of every round; for each mode and client, the brokers one after the other.

    The brokers' order turns by one each round, so none always runs first.
    The durable mode runs on ``durable_targets`` (the embedded broker with a
    data dir), raw clients only. Returns every round's plain cells, and
    (with ``--selector``) the best selecting ones.
    """
    runs: dict[tuple[str, str, str, bool], list[Cell]] = {}
    variants = (False, True) if args.selector else (False,)
    for round_ in range(args.rounds):
        for ack in acks:
            among = durable_targets if ack == DURABLE else targets
            shift = round_ % len(among)
            order = among[shift:] + among[:shift]
            for client in args.clients:
                if ack == DURABLE and client != "raw":
                    continue
                for target in order:
                    for selecting in variants:
                        cell = measure(target, client, ack, args, selecting)
                        runs.setdefault((target.name, client, ack, selecting), []).append(cell)
                        status = (
                            cell
                            if isinstance(cell, str)
                            else f"{cell[0].rate:,.0f} msg/s, {cell[0].cpu_per_10k:.3f} CPU s/10k"
                        )
                        print(
                            f"  {target.label:<9}{ack:<19}{CLIENT_LABELS[client]:<12}"
                            f"{'selector  ' if selecting else ''}{status}",
                            file=sys.stderr,
                            flush=True,
                        )
    plain = {key[:3]: cells for key, cells in runs.items() if not key[3]}
    selected = {key[:3]: best(cells) for key, cells in runs.items() if key[3]}
    return plain, selected


def median_ratio(rounds: Rounds, client: str, mode: str, other: str) -> float | None:
    """The median over rounds of embedded's rate over ``other``'s in the same round."""
    ours = rounds.get((EMBEDDED, client, mode), [])
    theirs = rounds.get((other, client, mode), [])
    ratios = [
        a[0].rate / b[0].rate
        for a, b in zip(ours, theirs, strict=False)
        if not isinstance(a, str) and not isinstance(b, str)
    ]
    return statistics.median(ratios) if ratios else None


def median_rate(cells: list[Cell]) -> float | None:
    rates = [cell[0].rate for cell in cells if not isinstance(cell, str)]
    return statistics.median(rates) if rates else None


def evaluation_us(selector: str, calls: int = 100_000) -> float:
    """Microseconds per evaluation of ``selector`` on SELECTOR_HEADERS, sans-IO (best of 3)."""
    from trio_stomp.broker._selector import compile_selector

    compiled = compile_selector(selector)
    headers = (("destination", "/queue/x"), *SELECTOR_HEADERS.items(), ("content-length", "100"))
    best_s = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(calls):
            compiled.matches(headers)
        best_s = min(best_s, time.perf_counter() - started)
    return best_s / calls * 1e6


def print_selector_table(
    targets: list[Target], acks: list[str], plain: Cells, selected: Cells, selector: str
) -> None:
    """Rate with the selector over the rate without; the broker's extra CPU per message."""
    print()
    print(f"selector cost: {selector}")
    print(f"(every message carries {', '.join(f'{k}:{v}' for k, v in SELECTOR_HEADERS.items())})")
    print(f"evaluation alone (Selector.matches, in this process): {evaluation_us(selector):.2f} us")
    print(
        f"{'broker':<10}{'client':<12}{'ack':<19}{'msg/s':>10}{'with':>10}{'ratio':>8}"
        f"{'broker CPU us/msg':>20}{'with':>8}{'extra':>8}"
    )
    for target in targets:
        for client in CLIENTS:
            for ack in acks:
                key = (target.name, client, ack)
                without, with_ = plain.get(key), selected.get(key)
                row = f"{target.label:<10}{CLIENT_LABELS[client]:<12}{ack:<19}"
                if (
                    without is None
                    or with_ is None
                    or isinstance(without, str)
                    or isinstance(with_, str)
                ):
                    print(row + "FAILED")
                    continue
                (a, a_cpu), (b, b_cpu) = without, with_
                row += f"{fmt_rate(a.rate):>10}{fmt_rate(b.rate):>10}{b.rate / a.rate:>8.2f}"
                if a_cpu is None or b_cpu is None:
                    print(row + f"{'-':>20}")
                    continue
                us_a, us_b = a_cpu / a.count * 1e6, b_cpu / b.count * 1e6
                print(row + f"{us_a:>20.1f}{us_b:>8.1f}{us_b - us_a:>8.1f}")


def print_table(
    names: list[tuple[str, str]],
    modes: list[str],
    rounds: Rounds,
    args: argparse.Namespace,
) -> None:
    """The best round of each cell, then the median per-round ratios and the targets."""
    cells = {key: best(value) for key, value in rounds.items()}
    print(environment_line())
    print(
        f"STOMP broker throughput: 1 producer -> 1 queue -> 1 consumer, {args.count:,} "
        f"messages of {args.size} B, first SEND to last MESSAGE; best of {args.rounds} round(s)"
    )
    print()
    group = 36
    print(f"{'':<22}" + "".join(f"{mode:<{group}}" for mode in modes))
    print(
        f"{'broker':<10}{'client':<12}"
        + f"{'msg/s':>10}{'client CPU':>12}{'broker CPU':>12}  " * len(modes)
    )
    print(f"{'':<22}" + f"{'':>10}{'s/10k':>12}{'s/10k':>12}  " * len(modes))
    print("-" * (22 + group * len(modes)))
    notes: list[str] = []
    for name, label in names:
        for client in args.clients:
            row = f"{label:<10}{CLIENT_LABELS[client]:<12}"
            label = ""
            for mode in modes:
                cell = cells.get((name, client, mode))
                if cell is None:
                    row += f"{'-':>10}{'-':>12}{'-':>12}  "
                elif isinstance(cell, str):
                    row += f"{'FAILED':>10}{'-':>12}{'-':>12}  "
                    notes.append(f"FAILED {name} {mode} {CLIENT_LABELS[client]}: {cell}")
                else:
                    result, broker_cpu = cell
                    shown = "-" if broker_cpu is None else f"{broker_cpu / result.count * 1e4:.3f}"
                    row += f"{fmt_rate(result.rate):>10}{result.cpu_per_10k:>12.3f}{shown:>12}  "
            print(row)
    print_ratios(names, modes, rounds, args.clients)
    if notes:
        print()
        for note in notes:
            print(note)


def print_ratios(
    names: list[tuple[str, str]], modes: list[str], rounds: Rounds, clients: list[str]
) -> None:
    """The median per-round ratios, embedded over each other broker, and the targets."""
    group = 36
    others = [(name, label) for name, label in names if name != EMBEDDED]
    if any(name == EMBEDDED for name, _ in names) and others:
        print()
        print(f"{'median per-round ratio':<32}" + "".join(f"{mode:<{group}}" for mode in modes))
        for name, label in others:
            for client in clients:
                row = f"{'embedded/' + label + ', ' + CLIENT_LABELS[client]:<32}"
                for mode in modes:
                    value = median_ratio(rounds, client, mode, name)
                    if value is None:
                        row += f"{'-':>9} {'':<{group - 10}}"
                        continue
                    target = TARGETS.get((mode, name)) if client == "raw" else None
                    verdict = "" if target is None else ("met" if value >= target else "NOT MET")
                    verdict += f" (>= {target:.1f}x)" if target is not None else ""
                    row += f"{value:>8.2f}x {verdict:<{group - 10}}"
                print(row)
        print(
            "(targets, raw clients: "
            + ", ".join(
                f"{mode} >= {value:.1f}x {other}" for (mode, other), value in TARGETS.items()
            )
            + ")"
        )


def report_rows(
    names: list[tuple[str, str]], modes: list[str], rounds: Rounds
) -> list[dict[str, Any]]:
    """The raw clients' median rates (one bar per broker and mode) for write_report,
    each with the broker's CPU per message (its best round) and, for the other
    brokers, the median ratio embedded / it."""
    rows: list[dict[str, Any]] = []
    for name, label in names:
        for mode in modes:
            rate = median_rate(rounds.get((name, "raw", mode), []))
            if rate is None:
                continue
            row: dict[str, Any] = {"series": label, "label": mode, "value": round(rate)}
            cell = best(rounds[(name, "raw", mode)])
            if not isinstance(cell, str) and cell[1] is not None:
                row["broker_cpu_us"] = round(cell[1] / cell[0].count * 1e6, 2)
            if name != EMBEDDED:
                ratio = median_ratio(rounds, "raw", mode, name)
                row["embedded_ratio"] = None if ratio is None else round(ratio, 3)
                row["target"] = TARGETS.get((mode, name))
            rows.append(row)
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description="Broker throughput end to end: embedded vs RabbitMQ vs ActiveMQ."
    )
    parser.add_argument("--count", type=int, default=50_000, help="messages per cell")
    parser.add_argument("--size", type=int, default=100, help="body size in bytes")
    parser.add_argument(
        "--brokers",
        type=parse_brokers,
        default=[EMBEDDED, "rabbitmq", "activemq"],
        help="comma-separated: embedded, rabbitmq, activemq (default: all three)",
    )
    parser.add_argument(
        "--ack",
        default=",".join(ACK_MODES),
        help="comma-separated ack modes: auto, client-individual (default: both)",
    )
    parser.add_argument(
        "--clients",
        default=",".join(CLIENTS),
        help=f"comma-separated clients: {', '.join(CLIENTS)} (default: both)",
    )
    parser.add_argument(
        "--durable",
        action="store_true",
        help="also measure persistent SENDs with receipts (the embedded broker with a data dir)",
    )
    parser.add_argument(
        "--rounds", type=int, default=2, help="rounds; best shown, ratios their median"
    )
    parser.add_argument("--json", metavar="PATH", help="write the raw clients' figures as JSON")
    parser.add_argument(
        "--selector",
        nargs="?",
        const=SELECTOR,
        default=None,
        help="also measure each cell with this selector on the SUBSCRIBE "
        f"(without a value: {SELECTOR!r}; RabbitMQ, which has none, is left out)".replace(
            "%", "%%"
        ),
    )
    add_cell_options(parser)
    args = parser.parse_args(argv)
    if args.child is not None:
        child(args.child)
        return 0
    acks = [ack.strip() for ack in args.ack.split(",") if ack.strip()]
    if not acks or any(ack not in ACK_MODES for ack in acks):
        parser.error(f"--ack: expected names from {','.join(ACK_MODES)}")
    args.clients = [name.strip() for name in args.clients.split(",") if name.strip()]
    if not args.clients or any(name not in CLIENTS for name in args.clients):
        parser.error(f"--clients: expected names from {','.join(CLIENTS)}")
    check_cell_options(parser, args)
    if args.selector:
        args.brokers = [name for name in args.brokers if name != "rabbitmq"]
        if args.durable:
            parser.error("--selector and --durable: one at a time")
    if args.durable and "raw" not in args.clients:
        parser.error("--durable measures raw clients only: add raw to --clients")

    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        targets = open_targets(stack, args.brokers)
        if not targets:
            print("no broker to measure; start them with: scripts/brokers up")
            return 1
        durable_targets = list(targets)
        modes = list(acks)
        if args.durable:
            modes.append(DURABLE)
            if EMBEDDED in args.brokers:
                data_dir = stack.enter_context(tempfile.TemporaryDirectory())
                durable = stack.enter_context(embedded_broker(data_dir=Path(data_dir)))
                durable_targets = [durable if t.name == EMBEDDED else t for t in targets]
            # ActiveMQ persists each message on its own (KahaDB): some 500-800 msg/s
            # here, minutes a cell; the durable target is against RabbitMQ.
            durable_targets = [t for t in durable_targets if t.name != "activemq"]
        rounds, selected = run_all(targets, durable_targets, modes, args)
    names = [(target.name, target.label) for target in targets]
    print()
    print_table(names, modes, rounds, args)
    if args.selector:
        cells = {key: best(value) for key, value in rounds.items()}
        print_selector_table(targets, acks, cells, selected, args.selector)
    if args.json:
        write_report(
            args.json,
            bench="broker",
            command=bench_command(__file__, argv),
            unit="msg/s",
            rows=report_rows(names, modes, rounds),
        )
        print(f"\nwrote {args.json}")
    print_elapsed(started, args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
