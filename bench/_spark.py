"""What Spark's file sink committed: read the way Spark reads it, for the spark benches.

Used by ``bench/speed/spark_throughput.py`` and ``bench/crash/spark_crash.py``
(through their harnesses, which re-export it).
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import unquote, urlparse


def committed_files(output: Path) -> list[Path]:
    """The Parquet files the file sink's metadata log lists (as Spark reads them)."""
    log = output / "_spark_metadata"
    if not log.exists():
        return []
    entries: dict[int, Path] = {}
    for entry in log.iterdir():
        name = entry.name.removesuffix(".compact")
        if name.isdigit():
            entries[int(name)] = entry
    compacts = [b for b, p in entries.items() if p.name.endswith(".compact")]
    start = max(compacts) if compacts else -1
    files: set[str] = set()
    for batch in sorted(entries):
        if batch < start:
            continue
        for line in entries[batch].read_text().splitlines()[1:]:
            record = json.loads(line)
            path = unquote(urlparse(record["path"]).path)
            if record.get("action", "add") == "add":
                files.add(path)
            else:
                files.discard(path)
    return [Path(p) for p in sorted(files)]
