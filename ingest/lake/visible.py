"""The rows a reader sees of a loaded lake table, written once as one SELECT both engines run:
DuckDB as it is (ingest/lake/views.py, so `mlcost derive --lake` and every page) and Spark
translated by sqlglot (mlcost/spark_job.py through ingest/derived/sql/spark.to_spark).

It reads two relations the caller provides:
- `lake_loads(load_id BIGINT, seq INTEGER)`: the visible loads (committed, not superseded) in
  commit order, seq 1, 2, ... as store.Lake.visible() sorts them (committed_at, then load id);
  visible_loads() gives those rows from the ledger's records;
- the table's rows from the visible loads' files (every row carries its load's `load_id`).

Latest committed load wins per layout.REPLACE_BY key (the embedded merge's rule,
ingest/engine/wh_merge.py): a row gives way to a row of a later load sharing its key; a serving
window also to a later load's window of the same series (service, model version, host) that
overlaps it; run_evals come whole from the latest load that brought evals of the run. The SQL
keeps to what DuckDB and Spark share (no QUALIFY, no `* EXCLUDE`): the result holds the files'
columns plus helper columns (`lake_seq`, `lake_rank`, `lake_last`), so callers pick the table's
columns by name.
"""
from __future__ import annotations

from ingest.lake import layout

SERVING_SERIES = ("service", "model_version")  # and coalesce(host, '')
HELPER_COLUMNS = ("lake_seq", "lake_rank", "lake_last")


def visible_loads(records: list[dict]) -> list[tuple[int, int]]:
    """(load_id, seq) of the visible loads among ledger entries `records` (each entry's JSON):
    not named in another's `supersedes`, in commit order (committed_at, then load id), seq from 1."""
    superseded = {int(old) for record in records for old in record.get("supersedes", [])}
    kept = sorted((record["committed_at"], int(record["load_id"])) for record in records
                  if int(record["load_id"]) not in superseded)
    return [(load, seq) for seq, (_, load) in enumerate(kept, start=1)]


def visible(table: str, rows: str) -> str:
    """The SELECT of `table`'s visible rows from relation `rows` (a table name or a parenthesised
    subquery / table function: the visible loads' rows of the table) and `lake_loads`."""
    seq = f"(SELECT f.*, l.seq AS lake_seq FROM {rows} f JOIN lake_loads l ON l.load_id = f.load_id)"
    if table == "serving_windows":
        series = " AND ".join(f"n.{c} = w.{c}" for c in SERVING_SERIES)
        # two anti-joins, each on equal keys (not one on an OR): both engines hash them
        return (f"SELECT w.* FROM {seq} w "
                f"WHERE NOT EXISTS (SELECT 1 FROM {seq} n WHERE n.window_key = w.window_key "
                "AND n.lake_seq > w.lake_seq) "
                f"AND NOT EXISTS (SELECT 1 FROM {seq} n WHERE {series} "
                "AND coalesce(n.host, '') = coalesce(w.host, '') AND n.lake_seq > w.lake_seq "
                "AND w.window_start < n.window_end AND n.window_start < w.window_end)")
    if table == "run_evals":
        return (f"SELECT * FROM (SELECT r.*, max(r.lake_seq) OVER (PARTITION BY r.run_id) AS lake_last "
                f"FROM {seq} r) ranked WHERE lake_seq = lake_last")
    keys = layout.REPLACE_BY.get(table)
    if not keys:
        return f"SELECT * FROM {seq} r"
    return (f"SELECT * FROM (SELECT r.*, row_number() OVER (PARTITION BY {', '.join('r.' + k for k in keys)} "
            f"ORDER BY r.lake_seq DESC) AS lake_rank FROM {seq} r) ranked WHERE lake_rank = 1")
