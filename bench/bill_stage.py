"""Time the columnar bill staging against bare DuckDB reading the same file, in one run.

python bench/bill_stage.py FILE KIND [--only bare|stage|old] [--old] [--repeat N]
    KIND: billing_focus | billing_aws | billing_gcp | billing_azure | billing_aws_dbr (ingest/formats/billing)
Prints wall and CPU seconds of bare DuckDB loading the file (the team's baseline, as
bench/fleet_workers.py `bare_duckdb`: `CREATE TABLE bare AS SELECT * FROM read_csv(FILE,
all_varchar=true, header=true)`, `read_json(FILE)` for JSON lines or `read_parquet(FILE)` for a
.parquet file, into a fresh DuckDB file) and of KIND's stage() into a fresh
staging database, and their ratio (bare / stage: 1.0 means as fast as bare DuckDB; the target is 0.7);
with --old also billing.py's parse() of the whole text (as JSON lines were read before). --repeat N
runs each N times, alternating, and keeps the best. For peak memory run each half in its own
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

from ingest.engine.contract import ParseContext, numbered
from ingest.engine.staging import Source, open_stage


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
        with src.open_binary() as stream:
            json_lines = stream.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"{"
        if path.suffix == ".parquet":  # a Parquet bill: bare DuckDB's own Parquet reader
            con.execute("CREATE TABLE bare AS SELECT * FROM read_parquet(?)", [str(path)])
        elif json_lines:
            con.execute("CREATE TABLE bare AS SELECT * FROM read_json(?, format='newline_delimited', "
                        "compression=?)", [str(path), src.duckdb_compression])
        else:
            con.execute("CREATE TABLE bare AS SELECT * FROM read_csv(?, all_varchar=true, header=true, "
                        "compression=?)", [str(path), src.duckdb_compression])
        rows = con.execute("SELECT count(*) FROM bare").fetchone()[0]
        con.close()
        return rows


def stage(path: Path, kind: str) -> int:
    module = importlib.import_module(f"ingest.formats.billing.{kind}")
    con = open_stage()
    src = Source.of(path)
    return module.stage(src, con, ParseContext(src.name, timezone.utc)).accepted


def old(path: Path, kind: str) -> int:
    """Records billing.py's parse() accepts reading the whole text (lines held in memory)."""
    module = importlib.import_module(f"ingest.formats.billing.{kind}")
    with Source.of(path).open_binary() as stream:
        text = stream.read().decode("utf-8-sig")
    return module.parse(numbered(text.split("\n")), ParseContext(str(path), timezone.utc)).accepted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("kind")
    parser.add_argument("--only", choices=("bare", "stage", "old"))
    parser.add_argument("--old", action="store_true", help="also time billing.py's parse() of the whole text")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    runs = {"bare": lambda: bare(args.file), "stage": lambda: stage(args.file, args.kind),
            "old": lambda: old(args.file, args.kind)}
    chosen = [args.only] if args.only else ["bare", "stage"] + (["old"] if args.old else [])
    figures: dict = {}
    for _ in range(args.repeat):  # alternating, so a busy spell of the machine hits each alike
        for name in chosen:
            result = timed(runs[name])
            print(f"  ({name}: wall {result[0]:.2f} s, cpu {result[1]:.2f} s)", flush=True)
            best = figures.get(name)
            figures[name] = result if best is None else (min(best[0], result[0]), min(best[1], result[1]), result[2])
    for name, (wall, cpu, rows) in figures.items():
        print(f"{name:6} rows {rows:>10,}  wall {wall:7.2f} s  cpu {cpu:7.2f} s")
    for other in ("stage", "old"):
        if "bare" in figures and other in figures:
            print(f"throughput ratio (bare/{other}): wall {figures['bare'][0] / figures[other][0]:.2f}  "
                  f"cpu {figures['bare'][1] / figures[other][1]:.2f}")


if __name__ == "__main__":
    main()
