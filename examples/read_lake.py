"""Print the rows Spark's file sink has committed to a folder, never a file it is still writing.

    python examples/read_lake.py lake/orders id body

Spark's streaming file sink writes each micro-batch's files straight into the
folder under their final names, and names the committed ones in
``_spark_metadata/``: one log file per batch, ``N.compact`` every tenth with
all of them so far. A reader of the bare folder (``pandas.read_parquet``, say)
can meet a file half written and fail, or read a batch that is then written
again after a crash. This reads only what the log names: the newest compact
file and the batches after it. Prints the columns given (all by default);
nothing before the first commit.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.parquet as pq


def committed(folder: Path) -> list[str]:
    """The files the sink's log names as committed (added and not deleted since)."""
    log = folder / "_spark_metadata"
    batches = sorted(
        (int(path.name.split(".")[0]), path)
        for path in (log.iterdir() if log.is_dir() else ())
        if path.name.split(".")[0].isdigit()  # (not .crc or temporary files)
    )
    compacts = [index for index, (_, path) in enumerate(batches) if path.suffix == ".compact"]
    files: dict[str, None] = {}
    for _, path in batches[compacts[-1] if compacts else 0 :]:
        for line in path.read_text(encoding="utf-8").splitlines()[1:]:  # (line 1: the version)
            entry = json.loads(line)
            name = unquote(urlparse(entry["path"]).path)
            if entry.get("action", "add") == "add":
                files[name] = None
            else:
                files.pop(name, None)
    return list(files)


def main(folder: str, *columns: str) -> None:
    files = committed(Path(folder))
    if not files:
        return
    table = pa.concat_tables([pq.read_table(file) for file in files])
    print((table.select(list(columns)) if columns else table).to_pandas().to_string())


if __name__ == "__main__":
    main(*sys.argv[1:])
