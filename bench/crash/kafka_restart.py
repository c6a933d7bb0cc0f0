"""How long a kafka source's partitions take to come back after ``bridges run`` is SIGKILLed.

    .venv/bin/python bench/crash/kafka_restart.py [--rounds 3] [--source 'KEY = VALUE, ...']

A route reads a one-partition topic into a JSON-lines file (kafka -> file).
Each round: a record is written and waited for in the file, the bridge is
killed with SIGKILL, another record is written, and the bridge is started
again; the figure is the time from that start to the new record in the file.
The first start of each run (a new group: no member to wait for) is printed
beside it as the floor (process start, joining, the first fetch).

Without static membership the group coordinator waits for the killed
member's session to expire (``session.timeout.ms``, librdkafka's default
45 s) before it gives the partition to the new one; with ``instance_id``
(``group.instance.id``) the restarted member takes its partition back at
once. ``--source`` adds keys to the source's inline table, e.g.
``--source 'instance_id = "a"'`` or ``--source 'session_timeout = 10.0'``.

Kafka is the one of ``scripts/brokers up kafka`` (``TRIO_STOMP_KAFKA_SERVERS``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import confluent_kafka
from _crash import bridges_command
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

SERVERS = os.environ.get("TRIO_STOMP_KAFKA_SERVERS", "127.0.0.1:9092")
#: The most a round waits for its record, s.
LIMIT = 120.0


def produce(topic: str, body: str) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": SERVERS, "acks": "all"})
    producer.produce(topic, body.encode())
    if producer.flush(30):
        raise SystemExit("kafka did not acknowledge a record in 30 s")


def bodies(outbox: Path) -> set[str]:
    found = set()
    for path in outbox.glob("messages-*.jsonl*"):
        data = path.read_bytes()
        for line in data[: data.rfind(b"\n") + 1].splitlines():
            found.add(json.loads(line)["body"])
    return found


def wait_for(body: str, outbox: Path, process: subprocess.Popen[bytes]) -> float:
    """Seconds until ``body`` is in the outbox (polled every 20 ms)."""
    start = time.monotonic()
    while body not in bodies(outbox):
        if process.poll() is not None:
            raise SystemExit(f"bridges exited ({process.returncode}); see its log")
        if time.monotonic() - start > LIMIT:
            raise SystemExit(f"{body!r} did not arrive in {LIMIT:g} s")
        time.sleep(0.02)
    return time.monotonic() - start


def run(rounds: int, source_keys: str) -> dict[str, object]:
    topic = f"restart-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": SERVERS})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    extra = f", {source_keys}" if source_keys else ""
    source = f'type = "kafka", bootstrap_servers = "{SERVERS}", topic = "{topic}"'
    config = f"""
[routes.r]
source = {{ {source}, group = "g-{topic}"{extra} }}
sink = {{ type = "file", path = "outbox", format = "jsonl" }}
"""
    with tempfile.TemporaryDirectory(prefix="kafka-restart-") as folder:
        work = Path(folder)
        (work / "bridge.toml").write_text(config)
        outbox = work / "outbox"
        log = (work / "bridge.log").open("ab")
        command = [*bridges_command(), "run", "bridge.toml"]
        produce(topic, "m-0")
        process = subprocess.Popen(command, cwd=work, stdout=log, stderr=log)
        try:
            first = wait_for("m-0", outbox, process)
            restarts = []
            for n in range(1, rounds + 1):
                process.kill()
                process.wait()
                produce(topic, f"m-{n}")
                process = subprocess.Popen(command, cwd=work, stdout=log, stderr=log)
                restarts.append(wait_for(f"m-{n}", outbox, process))
        finally:
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    return {"source": source_keys, "first_start": first, "restarts": restarts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--source", default="", help="keys added to the source's table")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args.rounds, args.source)
    if args.json:
        print(json.dumps(result))
        return
    restarts = result["restarts"]
    assert isinstance(restarts, list)
    print(f"source keys: {args.source or '(defaults)'}; load {os.getloadavg()[0]:.2f}")
    print(f"first start (a new group): {result['first_start']:.2f} s")
    print("after SIGKILL, start to first record: " + ", ".join(f"{t:.2f} s" for t in restarts))


if __name__ == "__main__":
    main()
