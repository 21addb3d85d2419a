"""Time the columnar bill staging against bare DuckDB reading the same file, in one run.

python bench/bill_stage.py FILE KIND [--only bare|stage]
    KIND: billing_focus | billing_aws | billing_gcp | billing_azure
Prints wall and CPU seconds of bare DuckDB loading the file (the team's baseline, as
bench/fleet_workers.py `bare_duckdb`: `CREATE TABLE bare AS SELECT * FROM read_csv(FILE,
all_varchar=true, header=true)`, or `read_parquet(FILE)` for a .parquet file, into a fresh
DuckDB file) and of KIND's stage() into a fresh
staging database, and their ratio (bare / stage: 1.0 means as fast as bare DuckDB; the target is 0.7). For peak memory run each half in its own
process: /usr/bin/time -v python bench/bill_stage.py FILE KIND --only stage.
Big deterministic inputs: python bench/bill_files.py DIR --lines 1000000.
"""
from __future__ import annotations

import argparse
import importlib
import tempfile
import time
from datetime import timezone
from pathlib import Path

import duckdb

from ingest.contract import ParseContext
from ingest.staging import Source, open_stage


def timed(run) -> tuple[float, float, object]:
    """(wall seconds, CPU seconds of this process and its threads, result)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = run()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def bare(path: Path) -> int:
    """Rows bare DuckDB loads from the file into a table of a fresh database file."""
    with tempfile.TemporaryDirectory(prefix="bench-bare-") as folder:
        con = duckdb.connect(str(Path(folder) / "bare.duckdb"))
        src = Source.of(path)
        if path.suffix == ".parquet":  # a Parquet bill: bare DuckDB's own Parquet reader
            con.execute("CREATE TABLE bare AS SELECT * FROM read_parquet(?)", [str(path)])
        else:
            con.execute("CREATE TABLE bare AS SELECT * FROM read_csv(?, all_varchar=true, header=true, "
                        "compression=?)", [str(path), src.duckdb_compression])
        rows = con.execute("SELECT count(*) FROM bare").fetchone()[0]
        con.close()
        return rows


def stage(path: Path, kind: str) -> int:
    module = importlib.import_module(f"ingest.{kind}")
    con = open_stage()
    src = Source.of(path)
    return module.stage(src, con, ParseContext(src.name, timezone.utc)).accepted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("kind")
    parser.add_argument("--only", choices=("bare", "stage"))
    args = parser.parse_args()
    figures = {}
    if args.only != "stage":
        figures["bare"] = timed(lambda: bare(args.file))
    if args.only != "bare":
        figures["stage"] = timed(lambda: stage(args.file, args.kind))
    for name, (wall, cpu, rows) in figures.items():
        print(f"{name:6} rows {rows:>10,}  wall {wall:7.2f} s  cpu {cpu:7.2f} s")
    if len(figures) == 2:
        print(f"throughput ratio (bare/stage): wall {figures['bare'][0] / figures['stage'][0]:.2f}  "
              f"cpu {figures['bare'][1] / figures['stage'][1]:.2f}")


if __name__ == "__main__":
    main()
