"""`mlcost derive --lake`: the derived tables computed with DuckDB from a lake's committed loads
and written back under derived/, with the embedded warehouse's own SQL.

The visible rows of every loaded table (as readers see them, latest load winning per key) are
copied into a private DuckDB file with the warehouse schema; there ingest/derived/gpu_rollups.py rebuilds
the per-minute GPU rollups and ingest/derived/derived.py stores per-run GPU time and energy, trace-priced
run costs, bill lines' runs and the bill's allocation by day, exactly as `mlcost rollup` does in
the embedded file. Each derived table is written to derived/<table>/generation=<id>/0.parquet, and
derived/_current.json, naming the generation, its files and the loads it covers, last.
"""
from __future__ import annotations

import tempfile
import uuid
from datetime import datetime, timezone
from pathlib import Path

from ingest.lake import layout, views
from ingest.lake.store import open_lake

FORMAT = 1


def derive(url: str) -> dict:
    """Compute and publish a new generation of the derived tables; returns its _current.json record."""
    from ingest.derived import derived, gpu_rollups, run_trace_costs
    from ingest.engine import wh_connection
    from ingest.settings import config

    lake = open_lake(url)
    lake.entries(fresh=True)
    gpu = config.load().gpu
    started = datetime.now(timezone.utc)
    generation = f"{started:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"
    record: dict = {"format": FORMAT, "generation": generation, "engine": "duckdb", "tables": {}, "rows": {}}
    with tempfile.TemporaryDirectory(prefix="mlcost-derive-") as scratch:
        private = Path(scratch) / "derive.duckdb"
        with wh_connection.private(private), wh_connection.connect(private) as con:
            db = '"' + con.execute("SELECT current_database()").fetchone()[0].replace('"', '""') + '"'
            views.attach(con, url, with_estimates=False, with_derived=False)
            record["loads"] = [str(load) for (load,) in con.execute("SELECT load_id FROM lake_loads ORDER BY seq").fetchall()]
            for table in layout.LOADED:
                con.execute(f"INSERT INTO {db}.main.{table} BY NAME SELECT * FROM temp.main.{table}")
            con.execute(f"INSERT INTO {db}.main.loads SELECT * FROM temp.main.loads")
            for table in (*layout.LOADED, "loads"):
                con.execute(f"DROP VIEW temp.main.{table}")
            with wh_connection.transaction(con):
                gpu_rollups.rebuild(con, db, gpu, None)
                derived.refresh_run_energy(con)
                derived.refresh_billing_runs(con)
                derived.refresh_allocation(con)
            kinds = ", ".join(f"'{kind}'" for kind in run_trace_costs.KINDS)
            selects = {table: f"SELECT * FROM {db}.main.{table}" for table in layout.DERIVED
                       if table != "run_cost_estimates"}
            selects["run_cost_estimates"] = (f"SELECT run_id, load_id, {', '.join(layout.RUN_COST_COLUMNS)} "
                                             f"FROM {db}.main.runs WHERE source_kind IN ({kinds})")
            for table, select in selects.items():
                local = Path(scratch) / f"{table}.parquet"
                con.execute(f"COPY ({select}) TO '{local}' (FORMAT parquet, COMPRESSION zstd)")
                record["rows"][table] = con.execute(f"SELECT count(*) FROM ({select})").fetchone()[0]
                folder = f"{layout.DERIVED_DIR}/{table}/generation={generation}"
                lake.put_file(local, f"{folder}/0.parquet")
                record["tables"][table] = folder
    record["written_at"] = datetime.now(timezone.utc).isoformat(timespec="microseconds")
    lake.put_json(layout.CURRENT, record)
    return record
