"""What trace loads leave for later: the GPUs whose per-run GPU time, GPU days, run energy and
allocation of the bill (ingest/derived/derived.py) are not stored yet.

A load of GPU samples rewrites its GPUs' per-minute rollups at once (ingest/derived/gpu_rollups.py)
and notes here which GPUs, from when (`since`), and which traced GPUs (host, index, uuid) their
minutes showed before. The tables that depend on them are then stored once for every GPU noted:
by the same load, or, when a load of many files defers them (ingest/pipeline/loader.py batch()),
after its last file (settle()). Redoing them once for the union of what several loads touched
stores the same rows as redoing them after each load: each update stores its rows from the data
as it is (derived.update_run_energy, update_allocation), and the union covers every row any of
them would have redone.

Two warehouse tables (ingest/schema.sql) hold the notes, so that a load that stops half way
leaves them for the next write (a load, an unload, `mlcost rollup`) to settle:
- derived_pending_gpus(host, gpu_index, since): a touched GPU, rewritten from `since` on (one row
  per load; the earliest `since` counts);
- derived_pending_traced(host, gpu_index, gpu_uuid, first_minute, last_minute): per touched GPU and
  uuid, the first and last minute its stored minutes showed before the first load that touched the
  GPU (enough to tell, for any `since`, which uuids were traced before it and from it on).

SQL only, on a connection ingest/engine/warehouse.py hands in, inside its transaction.
"""
from __future__ import annotations

from datetime import datetime, timezone

import duckdb

from ingest.derived import derived

GPUS, TRACED = "derived_pending_gpus", "derived_pending_traced"
# temp tables settle() leaves behind, dropped so that a later update does not read them
_TEMPORARY = ("touched_gpus", "traced_before", "traced_changed", "time_runs", "allocation_runs")


def note(con: duckdb.DuckDBPyConnection, db: str) -> None:
    """Note the GPUs of temp table touched_gpus (host, gpu_index, since) in database `db`, before
    their minutes are rewritten: the traced GPUs their stored minutes show (for those not noted
    yet: what they showed before the first pending load), then the GPUs and their `since`."""
    con.execute(f"""
        INSERT INTO {db}.{TRACED}
        SELECT m.host, m.gpu_index, m.gpu_uuid, min(m.minute), max(m.minute)
        FROM {db}.gpu_minutes m JOIN touched_gpus t USING (host, gpu_index)
        WHERE NOT EXISTS (SELECT 1 FROM {db}.{GPUS} p WHERE p.host = m.host AND p.gpu_index = m.gpu_index)
        GROUP BY ALL""")
    con.execute(f"INSERT INTO {db}.{GPUS} SELECT host, gpu_index, since FROM touched_gpus")


def waiting(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the current database has GPUs noted and not settled."""
    return con.execute(f"SELECT EXISTS (SELECT 1 FROM {GPUS})").fetchone()[0]


def take(con: duckdb.DuckDBPyConnection) -> bool:
    """On a connection whose current database is the warehouse: temp tables touched_gpus (every
    noted GPU from its earliest `since` on) and traced_before (what its minutes showed before, as
    derived.note_traced() records it) for derived.update_run_energy / update_allocation, and the
    notes cleared (the caller's transaction stores what depends on them). False when none."""
    if not waiting(con):
        return False
    con.execute(f"CREATE OR REPLACE TEMP TABLE touched_gpus AS SELECT host, gpu_index, min(since) AS since "
                f"FROM {GPUS} GROUP BY host, gpu_index")
    # a uuid was traced in the rewritten part (from `since` on) when its last minute is there, and
    # before it when its first minute is: derived.note_traced()'s rows, from the notes
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE traced_before AS
        SELECT p.host, p.gpu_index, p.gpu_uuid, true AS rewritten
        FROM {TRACED} p JOIN touched_gpus t USING (host, gpu_index) WHERE p.last_minute >= t.since
        UNION
        SELECT p.host, p.gpu_index, p.gpu_uuid, false
        FROM {TRACED} p JOIN touched_gpus t USING (host, gpu_index) WHERE p.first_minute < t.since""")
    clear(con)
    return True


def clear(con: duckdb.DuckDBPyConnection) -> None:
    """Forget the notes (everything was stored again from scratch, or take() read them)."""
    con.execute(f"DELETE FROM {GPUS}")
    con.execute(f"DELETE FROM {TRACED}")


def settle(con: duckdb.DuckDBPyConnection) -> bool:
    """Inside the caller's transaction, on a connection whose current database is the warehouse:
    store per-run GPU time and energy, GPU days and the allocation again for every noted GPU, and
    count it as a rollup computation (the dashboard's data version changes). False when nothing
    was noted."""
    if not take(con):
        return False
    derived.update_run_energy(con, runs=False, gpus=True)
    derived.update_allocation(con, runs=False, gpus=True)
    con.execute("UPDATE gpu_rollup_settings SET rollups = rollups + 1, computed_at = ?",
                [datetime.now(timezone.utc)])
    for table in _TEMPORARY:
        con.execute(f"DROP TABLE IF EXISTS {table}")
    return True
