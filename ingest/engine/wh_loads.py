"""The load ledger: earlier loads of a file, the options it was read with, removing a load, and
recomputing GPU rollups.

Imported through ingest/engine/warehouse.py (the one entry point).
"""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import duckdb

from ingest.derived import derived, gpu_rollups, pending
from ingest.engine import staging
from ingest.engine.wh_connection import attached, connect, db_path, ensure_schema, read, refuse_in_lake


def find_load(sha256: str, kind: str, path: Path | None = None, options: str | None = None) -> int | None:
    """The load_id of an earlier load of this exact content as this kind, if any; with `options`
    (load_options() text), only one read with the same options."""
    with read(path) as con:
        row = con.execute(
            "SELECT load_id FROM loads WHERE sha256 = ? AND kind = ? "
            "AND (CAST(? AS VARCHAR) IS NULL OR coalesce(options, '') = ?)",
            [sha256, kind, options, options or ""],
        ).fetchone()
    return row[0] if row else None


def earlier_loads(stage: duckdb.DuckDBPyConnection, sha256: str, path: Path | None = None) -> list[tuple[int, str, str]]:
    """Every load of this exact content, oldest first: (load_id, kind, options text, '' for none).
    Read with the warehouse attached read-only to the file's staging connection (a few ms) rather
    than a connection of its own (20-60 ms each under load; once per file)."""
    path = path or db_path()
    ensure_schema(path)
    with attached(stage, path, read_only=True):
        return [tuple(row) for row in stage.execute(
            "SELECT load_id, kind, coalesce(options, '') FROM wh.loads WHERE sha256 = ? ORDER BY load_id",
            [sha256]).fetchall()]


def load_options(tz_name: str | None = None, host: str | None = None, at: datetime | None = None,
                 started_at: datetime | None = None, scrape_interval_s: float | None = None) -> str:
    """The options that change how a file is read, as canonical text for the ledger ('' for none):
    'tz=Europe/Paris host=gpu-node-1 at=2025-11-20T10:00:00+00:00'."""
    given = {"tz": None if tz_name in (None, "", "UTC") else tz_name, "host": host or None,
             "at": at.astimezone(timezone.utc).isoformat() if at else None,
             "started_at": started_at.astimezone(timezone.utc).isoformat() if started_at else None,
             "scrape_interval_s": None if scrape_interval_s is None else f"{scrape_interval_s:g}"}
    return " ".join(f"{key}={value}" for key, value in given.items() if value is not None)


def loads_of_content(sha256: str, path: Path | None = None) -> list[int]:
    """Every load of this exact content (any kind, any options), oldest first."""
    with read(path) as con:
        rows = con.execute("SELECT load_id FROM loads WHERE sha256 = ? ORDER BY load_id", [sha256]).fetchall()
    return [row[0] for row in rows]


def unload(load_id: int, reason: str = "unloaded", path: Path | None = None) -> dict[str, int] | None:
    """Remove one load, every row it brought and its rejects, in one transaction; returns the rows
    removed per table, or None when there is no such load (remove_load says what goes)."""
    refuse_in_lake("remove a load")
    with connect(path) as con:
        con.execute("BEGIN TRANSACTION")
        try:
            removed = remove_load(con, load_id, reason)
            con.execute("COMMIT" if removed is not None else "ROLLBACK")
        except BaseException:
            con.execute("ROLLBACK")
            raise
    return removed


def remove_load(con: duckdb.DuckDBPyConnection, load_id: int, reason: str) -> dict[str, int] | None:
    """Within the caller's transaction, on a connection whose current database is the warehouse:
    remove one load, every row it brought and its rejects; the rows removed per table, or None
    when there is no such load.

    Latest wins: a row this load had replaced (an older version of a run, a bill line) is not
    brought back, it was gone when this load came. When samples go, the GPU rollups are recomputed
    from the samples that stay; per-run energy and bill lines' runs are stored again."""
    ledger = con.execute("SELECT path, sha256, kind, options FROM loads WHERE load_id = ?",
                         [load_id]).fetchone()
    if ledger is None:
        return None
    # what earlier trace loads left for later is stored first: what follows redoes only this load's
    pending.settle(con)
    removed = {"run_evals": con.execute(
        "DELETE FROM run_evals WHERE run_id IN (SELECT run_id FROM runs WHERE load_id = ?)",
        [load_id]).fetchone()[0]}
    # The first removed sample of each GPU bounds what its rollups must recompute.
    con.execute("CREATE OR REPLACE TEMP TABLE removed_samples AS SELECT host, gpu_index, "
                "min(sampled_at) AS sampled_at FROM gpu_samples WHERE load_id = ? "
                "GROUP BY host, gpu_index", [load_id])
    # the runs and bill lines that go: what is stored of them and for them is redone
    con.execute("CREATE OR REPLACE TEMP TABLE changed_runs AS SELECT run_id FROM runs WHERE load_id = ?",
                [load_id])
    con.execute("CREATE OR REPLACE TEMP TABLE changed_lines AS SELECT line_key FROM billing_lines "
                "WHERE load_id = ?", [load_id])
    derived.note_allocation_inputs(con, [part for part in (
        derived.touched_rows(table, f"load_id = {int(load_id)}") for table in _tables_with_load_id(con))
        if part])
    for table in _tables_with_load_id(con):
        removed[table] = con.execute(f"DELETE FROM {table} WHERE load_id = ?", [load_id]).fetchone()[0]
    samples_gone = con.execute("SELECT count(*) FROM removed_samples").fetchone()[0] > 0
    rebuilt = False
    if samples_gone:
        from ingest.settings import config

        db = '"' + con.execute("SELECT current_database()").fetchone()[0].replace('"', '""') + '"'
        # the rollups of the GPUs whose samples went, and what depends on them
        if gpu_rollups.unloaded(con, db, config.load().gpu, gpu_rollups.stored_settings(con, db)):
            derived.update_run_energy(con, runs=True, gpus=True)
        else:  # other [gpu] settings: every GPU's minutes were computed again
            derived.refresh_run_energy(con)
            rebuilt = True
    elif removed.get("runs"):
        derived.update_run_energy(con, runs=True, gpus=False)
    if removed.get("runs") or removed.get("billing_lines"):
        derived.update_billing_runs(con, runs=bool(removed.get("runs")),
                                    lines=bool(removed.get("billing_lines")))
    if rebuilt:
        derived.refresh_allocation(con)
    elif derived.ALLOCATION_SOURCES.intersection(name for name, count in removed.items() if count):
        derived.update_allocation(con, runs=bool(removed.get("runs")), gpus=samples_gone)
    con.execute("DELETE FROM loads WHERE load_id = ?", [load_id])
    con.execute("INSERT INTO unloads VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [load_id, *ledger, sum(n for t, n in removed.items() if t != "rejects"),
                 datetime.now(timezone.utc), reason])
    return {table: count for table, count in removed.items() if count}


def _tables_with_load_id(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Every base table whose rows carry the load they came from (the ledger itself aside)."""
    return [name for (name,) in con.execute(
        "SELECT c.table_name FROM information_schema.columns c JOIN information_schema.tables t "
        "USING (table_catalog, table_schema, table_name) WHERE c.column_name = 'load_id' "
        "AND t.table_type = 'BASE TABLE' AND c.table_name NOT IN ('loads', 'unloads') "
        "AND t.table_catalog = current_database() AND t.table_schema = 'main' ORDER BY 1").fetchall()]


def rebuild_gpu_rollups(path: Path | None = None) -> int:
    """Recompute every GPU's rollups with the current [gpu] settings; returns the GPUs done."""
    from ingest.settings import config

    refuse_in_lake("recompute the GPU rollups")
    gpu = config.load().gpu
    with connect(path) as con:
        db = '"' + con.execute("SELECT current_database()").fetchone()[0].replace('"', '""') + '"'
        con.execute("BEGIN TRANSACTION")
        try:
            gpus = gpu_rollups.rebuild(con, db, gpu, gpu_rollups.stored_settings(con, db))
            pending.clear(con)  # everything is stored again
            derived.refresh_run_energy(con)
            derived.refresh_allocation(con)
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
    return gpus


def settle_derived(path: Path | None = None) -> bool:
    """Store what trace loads left for later (ingest/derived/pending.py: per-run GPU time and
    energy, GPU days, the allocation of the bill) in one transaction; False when nothing was left.
    Run as a merge runs, on a staging connection with the warehouse attached, so under the
    staging memory limit."""
    refuse_in_lake("store the derived tables")
    path = path or db_path()
    if not path.exists():  # no warehouse: nothing was loaded, nothing to store (none is created)
        return False
    ensure_schema(path)
    stage = staging.open_stage(shaped=False)  # the work is the warehouse's (USE wh): no staging tables
    try:
        with attached(stage, path):
            stage.execute("BEGIN TRANSACTION")
            stage.execute("USE wh")  # the derived tables and the views they come from are the warehouse's
            try:
                settled = pending.settle(stage)
            except BaseException:  # an aborted transaction takes no USE: roll back first
                stage.execute("ROLLBACK")
                stage.execute("USE memory")
                raise
            stage.execute("USE memory")
            stage.execute("COMMIT")
    finally:
        stage.close()
    return settled
