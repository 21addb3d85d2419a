"""`mlcost derive --lake`: the derived tables computed with DuckDB from a lake's committed loads
and written back under derived/, with the SQL the Spark job runs (docs/spark.md).

The visible rows of the base tables (as every reader sees them: ingest/lake/visible.py, latest
committed load winning per key) are copied into a private DuckDB file with the warehouse schema;
there ingest/derived/sql.run_duckdb runs the derived tables' portable SELECTs (GPU rollups, run
GPU time and energy, bill lines' runs, the bill's allocation by day, idle cost, the allocation by
month and team, budget burn, the run cost estimates, the settings rows), the same text
mlcost/spark_job.py runs translated to Spark SQL. Each stored table is written to
derived/<table>/generation=<id>/0.parquet, and derived/_current.json, naming the generation, its
files and the loads it covers, last.
"""
from __future__ import annotations

import tempfile
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

from ingest.lake import layout, views
from ingest.lake.store import open_lake

FORMAT = 1
BASE_TABLES = ("runs", "gpu_samples", "billing_lines", "serving_windows")  # what the derived SQL reads


def derive(url: str, timings: dict | None = None) -> dict:
    """Compute and publish a new generation of the derived tables; returns its _current.json
    record. `timings` (if given) gets the seconds of reading, computing and writing."""
    from ingest.derived import sql as derived_sql
    from ingest.engine import wh_connection
    from ingest.settings import config

    timings = {} if timings is None else timings
    lake = open_lake(url)
    lake.entries(fresh=True)
    settings = config.load()
    started = datetime.now(timezone.utc)
    generation = f"{started:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"
    record: dict = {"format": FORMAT, "generation": generation, "engine": "duckdb", "tables": {}, "rows": {}}
    with tempfile.TemporaryDirectory(prefix="mlcost-derive-") as scratch:
        private = Path(scratch) / "derive.duckdb"
        with wh_connection.private(private), wh_connection.connect(private) as con:
            at = time.perf_counter()
            db = '"' + con.execute("SELECT current_database()").fetchone()[0].replace('"', '""') + '"'
            views.attach(con, url, with_estimates=False, with_derived=False)
            record["loads"] = [str(load) for (load,) in con.execute("SELECT load_id FROM lake_loads ORDER BY seq").fetchall()]
            for table in BASE_TABLES:  # computed once here; the steps read them many times
                con.execute(f"INSERT INTO {db}.main.{table} BY NAME SELECT * FROM temp.main.{table}")
            for table in layout.LOADED:
                con.execute(f"DROP VIEW temp.main.{table}")
            timings["read"] = time.perf_counter() - at
            at = time.perf_counter()
            stored = derived_sql.run_duckdb(con, derived_sql.Settings.of(settings), settings.budgets)
            timings["compute"] = time.perf_counter() - at
            at = time.perf_counter()
            for table in stored:
                local = Path(scratch) / f"{table}.parquet"
                con.execute(f"COPY (SELECT * FROM temp.main.{table}) TO '{local}' (FORMAT parquet, COMPRESSION zstd)")
                record["rows"][table] = con.execute(f"SELECT count(*) FROM temp.main.{table}").fetchone()[0]
                folder = f"{layout.DERIVED_DIR}/{table}/generation={generation}"
                lake.put_file(local, f"{folder}/0.parquet")
                record["tables"][table] = folder
            timings["write"] = time.perf_counter() - at
    record["written_at"] = datetime.now(timezone.utc).isoformat(timespec="microseconds")
    lake.put_json(layout.CURRENT, record)
    return record
