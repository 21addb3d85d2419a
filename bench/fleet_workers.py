"""What bench/fleet.py runs in child processes (so each one's peak RSS is its own).

    python bench/fleet_workers.py duckdb csv|json OUT.duckdb FILE...   bare DuckDB: read into a table
    python bench/fleet_workers.py pandas FILE...                        pandas.read_csv(dtype=str)
    python bench/fleet_workers.py json FILE...                          json.loads of every line, kept
    python bench/fleet_workers.py reader DB STOP_FILE                   a page read in a loop until STOP_FILE
    python bench/fleet_workers.py queries DB REPEATS                    the idle query against the naive one
    python bench/fleet_workers.py pages DB                              every page cold and warm (AppTest)

Each prints one JSON object on its last line of stdout: rows read, or the figures measured.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from bench_runs import best_of  # run as a script from bench/: one timing helper for every benchmark

REPO_ROOT = Path(__file__).resolve().parents[1]


def bare_duckdb(fmt: str, out: str, files: list[str]) -> dict:
    """Every file read by DuckDB's own reader into one table of a fresh database file; rows."""
    import duckdb

    reader = ("read_csv($files, all_varchar = true, header = true)" if fmt == "csv"
              else "read_json($files, format = 'newline_delimited')")
    con = duckdb.connect(out)
    try:
        con.execute(f"CREATE TABLE bare AS SELECT * FROM {reader}", {"files": files})
        rows = con.execute("SELECT count(*) FROM bare").fetchone()[0]
    finally:
        con.close()
    return {"rows": rows}


def pandas_csv(files: list[str]) -> dict:
    """Every file through pandas.read_csv as text columns, one file held at a time; rows."""
    import pandas as pd

    return {"rows": sum(len(pd.read_csv(path, dtype=str, keep_default_na=False)) for path in files)}


def json_lines(files: list[str]) -> dict:
    """Every line of every file through json.loads, all kept in memory (what a naive loader holds); rows."""
    records = []
    for path in files:
        with open(path, encoding="utf-8") as lines:
            records.extend(json.loads(line) for line in lines if line.strip())
    return {"rows": len(records)}


SLOW_READ_S = 0.5  # a read this long waited for a lock (or for CPU): the merge's, or another one
PAGE_READ = "SELECT count(*) AS gpus, sum(idle_s) / 3600 AS idle_h FROM gpu_minutes"


def reader(db: str, stop_file: str) -> dict:
    """A dashboard read (short-lived connection, the warehouse's own lock backoff) every 0.1 s
    until stop_file exists: each read's seconds, and how long it took when nothing held the lock."""
    os.environ["MLCOST_DB"] = db
    os.environ["MLCOST_LOCK_WAIT_S"] = "3600"
    from ingest.engine import warehouse

    warehouse.query("SELECT 1")  # the schema is in place before the ingest starts
    print("ready", flush=True)
    reads = []
    while not Path(stop_file).exists():
        began = time.perf_counter()
        warehouse.query(PAGE_READ)
        reads.append(time.perf_counter() - began)
        time.sleep(0.1)
    idle = []
    for _ in range(5):
        began = time.perf_counter()
        warehouse.query(PAGE_READ)
        idle.append(time.perf_counter() - began)
    slow = sorted((wait for wait in reads if wait > SLOW_READ_S), reverse=True)
    return {"reads": len(reads), "max_wait_s": max(reads, default=0.0), "unlocked_read_s": min(idle),
            "total_wait_s": sum(reads), "slow_reads_s": [round(wait, 2) for wait in slow[:10]],
            "slow_reads": len(slow)}


def naive_idle_sql() -> str:
    """Idle and observed GPU-hours per GPU computed from the raw samples with window functions,
    by the same rule as the stored rollups (ingest/derived/gpu_rollups.py SAMPLE_INTERVALS)."""
    from ingest.derived import gpu_rollups

    return ("WITH labels AS (" + gpu_rollups.LABELS.format(source="gpu_samples") + "), "
            "samples AS (" + gpu_rollups.SAMPLE_INTERVALS.format(source="gpu_samples", labels="labels") + ") "
            "SELECT g.host, g.gpu_index, sum(interval_s) FILTER (WHERE idle) / 3600 AS idle_h, "
            "sum(interval_s) / 3600 AS observed_h FROM samples "
            "JOIN (SELECT DISTINCT gpu_key, host, gpu_index FROM labels) g USING (gpu_key) GROUP BY g.host, g.gpu_index")


def queries(db: str, repeats: int) -> dict:
    """The Idle GPUs page's per-GPU query (rollups) and the naive window query: best seconds each."""
    os.environ["MLCOST_DB"] = db
    from metrics import queries as page_queries
    from app.filters import Filters
    from ingest.engine import warehouse
    from ingest.settings import config

    gpu = config.load().gpu
    params = {"max_gap_s": gpu.max_gap_s, "idle_util_max_pct": gpu.idle_util_max_pct,
              "idle_power_max_w": gpu.idle_power_max_w, "idle_min_s": gpu.idle_min_s}
    idle = best_of(repeats, lambda: page_queries.idle_by_gpu(Filters()))
    naive_sql = naive_idle_sql()
    naive = best_of(repeats, lambda: warehouse.query(naive_sql, params))
    page_h = float(page_queries.idle_by_gpu(Filters())["idle_h"].sum())
    naive_h = float(warehouse.query(naive_sql, params)["idle_h"].sum())
    return {"idle_query_s": idle, "naive_query_s": naive, "idle_h_rollups": page_h, "idle_h_naive": naive_h}


def pages(db: str) -> dict:
    """(page, cold_s, warm_s, max_points, error or None) of every page, timed by bench/page_timings.py."""
    os.environ["MLCOST_DB"] = db
    sys.path.insert(0, str(Path(__file__).parent))
    from page_timings import time_pages

    source = "bench/page_timings.py"
    # a page that raised is timed too, but its figures mean nothing: its error goes with them
    rows = [[*row, timing.error] for timing in time_pages(Path(db)) for row in [list(timing)]]
    return {"source": source, "pages": rows}


def main(argv: list[str]) -> None:
    mode, rest = argv[0], argv[1:]
    if mode == "duckdb":
        result = bare_duckdb(rest[0], rest[1], rest[2:])
    elif mode == "pandas":
        result = pandas_csv(rest)
    elif mode == "json":
        result = json_lines(rest)
    elif mode == "reader":
        result = reader(rest[0], rest[1])
    elif mode == "queries":
        result = queries(rest[0], int(rest[1]))
    elif mode == "pages":
        result = pages(rest[0])
    else:
        raise SystemExit(f"unknown mode {mode!r}; see the docstring")
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(1, str(REPO_ROOT))
    main(sys.argv[1:])
