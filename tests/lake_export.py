"""A quick stand-in for `mlcost load --lake` (docs/lake.md): export an embedded warehouse's base
tables into the lake layout with DuckDB COPY and commit them as one load.

    <lake>/tables/<table>/month=YYYY-MM/<load_id>-<n>.parquet   (UTC month of the table's time column)
    <lake>/_ledger/<load_id>.json                                  (written last: commits the load)

As the real writer, every row's load_id is the lake load's id (a positive integer), which is how
readers give each row its load's place in the commit order (ingest/lake/visible.py).
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import duckdb

# The base tables the derived tables read, each with its time column (Hive partition by its UTC month).
TABLES = {"runs": "started_at", "gpu_samples": "sampled_at", "billing_lines": "charge_period_start",
          "serving_windows": "window_start"}


def export(db: Path, lake: Path, load_id: int = 1, tables: dict[str, str] = TABLES,
           uncommitted: bool = False) -> None:
    """Copy `tables` of warehouse `db` into `lake` as load `load_id` (no ledger entry with `uncommitted`)."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        con.execute("SET TimeZone = 'UTC'")
        for table, column in tables.items():
            target = lake / "tables" / table
            target.mkdir(parents=True, exist_ok=True)
            con.execute(f"COPY (SELECT * REPLACE (CAST({int(load_id)} AS BIGINT) AS load_id), "
                        f"strftime({column}, '%Y-%m') AS month FROM {table}) TO '{target}' "
                        f"(FORMAT parquet, PARTITION_BY (month), OVERWRITE_OR_IGNORE, "
                        f"FILENAME_PATTERN '{load_id}-{{i}}')")
    finally:
        con.close()
    if not uncommitted:
        (lake / "_ledger").mkdir(parents=True, exist_ok=True)
        (lake / "_ledger" / f"{load_id}.json").write_text(json.dumps(
            {"load_id": str(load_id), "tables": sorted(tables), "supersedes": [],
             "committed_at": datetime.now(timezone.utc).isoformat()}))


def committed_files(lake: Path, table: str) -> list[str]:
    """The Parquet files of `table` whose load is in the ledger (and not superseded)."""
    ledger = [json.loads(p.read_text()) for p in (lake / "_ledger").glob("*.json")]
    loads = {str(entry["load_id"]) for entry in ledger} - {str(s) for entry in ledger for s in entry.get("supersedes", [])}
    return sorted(str(p) for p in (lake / "tables" / table).rglob("*.parquet")
                  if p.name.rsplit("-", 1)[0] in loads)


def duckdb_over(lake: Path) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with each base table of `lake` as a view over its committed files."""
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    for table in TABLES:
        files = committed_files(lake, table)
        con.execute(f"CREATE VIEW {table} AS SELECT * EXCLUDE (month) FROM read_parquet({files!r}, "
                    "hive_partitioning = true)")
    return con


def month_warehouse(source: Path, target: Path, start: str, end: str) -> Path:
    """A new warehouse `target` holding the base rows of warehouse `source` whose time column is in
    [start, end) (ISO dates, UTC), with every derived table computed by the embedded path
    (gpu_rollups.rebuild, derived.refresh_*), as a smaller case for the engines to agree on."""
    from ingest.derived import derived, gpu_rollups
    from ingest.engine import warehouse
    from ingest.settings import config

    with warehouse.connect(target) as con:
        con.execute(f"ATTACH '{source}' AS src (READ_ONLY)")
        for table, column in TABLES.items():
            con.execute(f"INSERT INTO {table} SELECT * FROM src.{table} "
                        f"WHERE {column} >= CAST(? AS TIMESTAMPTZ) AND {column} < CAST(? AS TIMESTAMPTZ)",
                        [f"{start} 00:00:00+00", f"{end} 00:00:00+00"])
        con.execute("DETACH src")
        db = '"' + con.execute("SELECT current_database()").fetchone()[0] + '"'
        con.execute("BEGIN TRANSACTION")
        gpu_rollups.rebuild(con, db, config.load().gpu, None)
        derived.refresh_run_energy(con)
        derived.refresh_billing_runs(con)
        derived.refresh_allocation(con)
        con.execute("COMMIT")
    return target
