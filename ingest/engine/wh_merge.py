"""Merging a file's staging database into the warehouse: one short transaction per file.

Imported through ingest/engine/warehouse.py (the one entry point); see merge().
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import duckdb

from ingest.derived import derived, gpu_rollups, pending
from ingest.engine import staging, wh_loads
from ingest.engine.contract import Parsed
from ingest.engine.wh_connection import attached, db_path, ensure_schema, refuse_in_lake

# Rows that arrive again replace the older ones sharing these columns (latest load wins); a
# repeat within one file keeps its last line (staging.UNIQUE_BY).
REPLACE_BY: dict[str, str | tuple[str, ...]] = {
    "runs": "run_id", "run_evals": "run_id", "serving_windows": "window_key",
    "gpu_samples": ("host", "gpu_index", "sampled_at"),
    "billing_lines": "line_key",  # ingest/formats/billing/billing.py says how a bill line's key is made
}
# A serving window replaces the stored windows of its series (service, model version, host) whose
# span overlaps its own, not only the one with its start: the same range imported again with
# another step (or a file restating a period at another granularity) must not count twice.
# Stored windows are first narrowed to each series' span in the file. Then, rather than joining
# every stored window to every new one of its series (quadratic per series: 5.4 CPU s for 500k
# windows loaded again in 72 series), each stored window is matched (ASOF) to the new window of its
# series with the latest start before its end: `reach` is the latest end of the new windows starting
# no later than that one (peers included), so some new window overlaps it iff reach > its start.
OVERLAPPING_WINDOWS = """
CREATE OR REPLACE TEMP TABLE overlapped_windows AS
WITH span AS (
    SELECT service, model_version, coalesce(host, '') AS host, min(window_start) AS first_start,
           max(window_end) AS last_end
    FROM serving_windows GROUP BY ALL
), stored AS (
    SELECT w.window_key, w.service, w.model_version, coalesce(w.host, '') AS host, w.window_start, w.window_end
    FROM wh.serving_windows w JOIN span
      ON w.service = span.service AND w.model_version = span.model_version AND coalesce(w.host, '') = span.host
     AND w.window_start < span.last_end AND span.first_start < w.window_end
), new AS (  -- only the series with stored windows in their span (none in a fresh warehouse)
    SELECT n.service, n.model_version, coalesce(n.host, '') AS host, n.window_start,
           max(n.window_end) OVER (PARTITION BY n.service, n.model_version, coalesce(n.host, '')
                                   ORDER BY n.window_start) AS reach
    FROM serving_windows n SEMI JOIN (SELECT DISTINCT service, model_version, host FROM stored) s
      ON n.service = s.service AND n.model_version = s.model_version AND coalesce(n.host, '') = s.host
)
SELECT DISTINCT s.window_key FROM stored s ASOF JOIN new n
  ON s.service = n.service AND s.model_version = n.model_version AND s.host = n.host AND s.window_end > n.window_start
WHERE n.reach > s.window_start
"""


@dataclass(frozen=True)
class LoadResult:
    load_id: int | None
    rows_loaded: int
    rows_rejected: int
    already_loaded: bool
    lock_s: float = field(default=0.0, compare=False)  # seconds the merge held the warehouse locked
    replaced: list[int] = field(default_factory=list, compare=False)  # earlier loads this one replaced
    overlapped_windows: int = field(default=0, compare=False)  # stored serving windows its windows overlapped

    @property
    def warnings(self) -> list[str]:
        """What the merge did that the load's summary should say."""
        if not self.overlapped_windows:
            return []
        return [f"{self.overlapped_windows:,} stored serving windows overlapped this load's windows of the same "
                "service, model version and host and were replaced (latest wins: a range loaded again with another "
                "step or window length counts once)"]


def load(source: str, sha256: str, kind: str, parsed: Parsed, path: Path | None = None) -> LoadResult:
    """Record one parsed file in the ledger and load its rows and rejects (see merge)."""
    stage = staging.open_stage()
    try:
        staging.insert_parsed(stage, parsed, source)
        return merge(stage, source, sha256, kind, parsed.accepted, path)
    finally:
        stage.close()


def merge(stage: duckdb.DuckDBPyConnection, source: str, sha256: str, kind: str, accepted: int,
          path: Path | None = None, options: str | None = None, replaces: tuple[int, ...] = (),
          defer_derived: bool = False) -> LoadResult:
    """Merge a file's staging database (ingest/engine/staging.py) into the warehouse in one transaction:
    the ledger row (with `options`, load_options() text), its rows with their load_id, its
    rejects, the GPU rollups and the derived tables (ingest/derived/derived.py) it changes.

    A file already in the ledger (same sha256 and kind) is a no-op. The loads in `replaces` (the
    same file read before with other options) are removed in the same transaction: a merge that
    fails leaves them whole. Rows of a table in
    REPLACE_BY replace stored rows with the same key; within the file a repeated key keeps its
    last line. Everything that can be done without the warehouse (keeping the last of a key,
    the GPU rollups, from the samples near the new ones read beforehand with the warehouse
    attached read-only) is done first, so the warehouse is locked for the writes alone;
    `lock_s` says for how long.

    A load of GPU samples notes its GPUs in the warehouse (ingest/derived/pending.py) and stores
    what depends on them (per-run GPU time and energy, GPU days, the allocation of the bill) for
    every GPU noted so far; with `defer_derived`, a load of GPU samples alone leaves that to a
    later load or to settle_derived() (a load of many files does it once, after its last file).
    """
    from ingest.settings import config

    refuse_in_lake("load files")
    path = path or db_path()
    ensure_schema(path)
    tables = {name: with_id for name, with_id in _merged_tables(stage).items() if staging.count(stage, name)}
    for name in tables:
        if name in staging.UNIQUE_BY:
            staging.keep_last(stage, name)
    replaced = _replaced_keys(stage, tables)
    gpu = config.load().gpu if "gpu_samples" in tables else None
    new_runs, new_lines = "runs" in tables, "billing_lines" in tables
    snapshot = None
    if gpu is not None:
        gpu_rollups.touched(stage, gpu)
        if not derived.has_temp(stage, "file_intervals"):
            gpu_rollups.intervals(stage, "gpu_samples", "file_intervals", gpu)
        with attached(stage, path, read_only=True):  # pages read meanwhile
            snapshot = _gpu_snapshot(stage)
            with_context = gpu_rollups.context(stage, "wh", gpu) > 0
        gpu_rollups.derive(stage, gpu, with_context)
    rejected = staging.count(stage, "rejects")
    held: list[float] = []
    with attached(stage, path, held):
        stage.execute("BEGIN TRANSACTION")
        try:
            earlier = next(iter(stage.execute("SELECT load_id FROM wh.loads WHERE sha256 = ? AND kind = ? "
                                              "AND NOT list_contains(?, load_id)",
                                              [sha256, kind, list(replaces)]).fetchall()), None)
            if earlier:
                stage.execute("ROLLBACK")
                return LoadResult(earlier[0], 0, 0, already_loaded=True)
            gone = _remove_loads(stage, replaces)
            if new_runs:  # after the removals, which keep these temp tables of their own
                stage.execute("CREATE OR REPLACE TEMP TABLE changed_runs AS SELECT run_id FROM replaced_run_id")
            if new_lines:
                stage.execute("CREATE OR REPLACE TEMP TABLE changed_lines AS SELECT line_key FROM replaced_line_key")
            if gpu is not None and _gpu_snapshot(stage) != snapshot:  # another load came in between
                gpu_rollups.derive(stage, gpu, gpu_rollups.context(stage, "wh", gpu) > 0)
                snapshot = _gpu_snapshot(stage)
            load_id = stage.execute(
                "INSERT INTO wh.loads (path, sha256, kind, rows_loaded, rows_rejected, loaded_at, options) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING load_id",
                [source, sha256, kind, accepted, rejected, datetime.now(timezone.utc), options],
            ).fetchall()[0][0]
            if "serving_windows" in tables:  # stored windows of the same series its windows overlap
                stage.execute(OVERLAPPING_WINDOWS)
            overlaps = ["wh.serving_windows", "window_key IN (SELECT window_key FROM overlapped_windows)"]
            # what the allocation of the bill read: the rows that go and those that come
            derived.note_allocation_inputs(stage, [part for part in (
                *(derived.touched_rows(f"wh.{name}", f"{column} IN (SELECT {column} FROM replaced_{column})")
                  for name, column in replaced),
                *([derived.touched_rows(*overlaps)] if "serving_windows" in tables else []),
                *(derived.touched_rows(f"memory.main.{name}", "true") for name in tables)) if part])
            for name, column in replaced:
                stage.execute(f"DELETE FROM wh.{name} WHERE {column} IN (SELECT {column} FROM replaced_{column})")
            overlapped = (stage.execute(f"DELETE FROM {overlaps[0]} WHERE {overlaps[1]}").fetchall()[0][0]
                          if "serving_windows" in tables else 0)
            if "gpu_samples" in tables and snapshot[4]:  # only stored samples in the new ones' span can go
                stage.execute("DELETE FROM wh.gpu_samples AS s USING gpu_samples AS n WHERE s.host = n.host "
                              "AND s.gpu_index = n.gpu_index AND s.sampled_at = n.sampled_at")
            for name, with_id in tables.items():
                stage.execute(f"INSERT INTO wh.{name} BY NAME SELECT * REPLACE (CAST(? AS BIGINT) AS load_id) "
                              f"FROM {name}" if with_id else f"INSERT INTO wh.{name} BY NAME SELECT * FROM {name}",
                              [load_id] if with_id else [])
            stage.execute("INSERT INTO wh.rejects SELECT ?, path, line, reason, left(raw, 500) FROM rejects "
                          "ORDER BY line", [load_id])
            rebuilt = False
            if gpu is not None:
                _, _, stored, had_samples, _ = snapshot
                rebuilt = (stored is None and had_samples) or (stored is not None
                                                               and tuple(stored[:4]) != gpu_rollups.settings(gpu))
                if rebuilt:
                    gpu_rollups.rebuild(stage, "wh", gpu, stored)  # settings changed: every GPU again
                else:
                    pending.note(stage, "wh")  # before the rewrite: what the GPUs' minutes showed
                    gpu_rollups.replace(stage, "wh", gpu, stored)
            # GPU samples alone, in a load of many files: what depends on them is stored after the last
            deferred = defer_derived and set(tables) == {"gpu_samples"} and not rebuilt and not gone
            stage.execute("USE wh")  # the derived tables and the views they come from are the warehouse's
            try:
                gpus = False
                if rebuilt:
                    pending.clear(stage)  # everything is stored again
                elif not deferred:
                    gpus = pending.take(stage)  # this load's GPUs and those of earlier deferred loads
                if rebuilt:
                    derived.refresh_run_energy(stage)
                elif new_runs or gpus:
                    derived.update_run_energy(stage, runs=new_runs, gpus=gpus)
                if new_runs or new_lines:
                    derived.update_billing_runs(stage, runs=new_runs, lines=new_lines)
                if rebuilt:
                    derived.refresh_allocation(stage)
                elif not deferred and (gpus or derived.ALLOCATION_SOURCES.intersection(tables)):
                    derived.update_allocation(stage, runs=new_runs, gpus=gpus)
            except BaseException:  # an aborted transaction takes no USE: roll back first, so the
                _roll_back(stage)    # error raised is this one, not the detach's
                stage.execute("USE memory")
                raise
            stage.execute("USE memory")
            stage.execute("COMMIT")
        except BaseException:
            _roll_back(stage)
            raise
    return LoadResult(load_id, accepted, rejected, already_loaded=False, lock_s=held[0], replaced=gone,
                      overlapped_windows=overlapped)


def _remove_loads(stage: duckdb.DuckDBPyConnection, load_ids: tuple[int, ...]) -> list[int]:
    """Remove the earlier loads a merge replaces, inside its transaction; the ids that were there."""
    gone = []
    if not load_ids:
        return gone
    # a removal writes its own touched_gpus (the GPUs whose samples went): keep the new file's
    kept = derived.has_temp(stage, "touched_gpus")
    if kept:
        stage.execute("CREATE OR REPLACE TEMP TABLE merge_touched_gpus AS SELECT * FROM touched_gpus")
    stage.execute("USE wh")  # removal and its derived tables are the warehouse's
    try:
        gone = [load_id for load_id in load_ids if wh_loads.remove_load(stage, load_id, "replaced") is not None]
    except BaseException:  # an aborted transaction takes no USE: roll back first
        _roll_back(stage)
        stage.execute("USE memory")
        raise
    stage.execute("USE memory")
    if kept:
        stage.execute("CREATE OR REPLACE TEMP TABLE touched_gpus AS SELECT * FROM merge_touched_gpus")
        stage.execute("DROP TABLE merge_touched_gpus")
    return gone


def _roll_back(stage: duckdb.DuckDBPyConnection) -> None:
    """Roll the merge's transaction back, if one is still open."""
    try:
        stage.execute("ROLLBACK")
    except duckdb.TransactionException:  # already rolled back
        pass


def _merged_tables(stage: duckdb.DuckDBPyConnection) -> dict[str, bool]:
    """The staging tables that hold a load's rows (ledger and rejects aside): name -> whether
    its rows carry their load_id. Every table or view of the staging database with a load_id
    column is copied into the warehouse table of its name, so a format's working tables must be
    TEMP tables (or have no load_id column)."""
    rows = stage.execute("SELECT table_name, bool_or(column_name = 'load_id') FROM duckdb_columns() "
                         "WHERE database_name = 'memory' AND table_name NOT IN ('loads', 'rejects') "
                         "GROUP BY table_name ORDER BY table_name").fetchall()
    return {name: with_id for name, with_id in rows if with_id or name in REPLACE_BY}


def _replaced_keys(stage: duckdb.DuckDBPyConnection, tables: dict[str, bool]) -> list[tuple[str, str]]:
    """(table, key column) whose stored rows go where the load carries the key: every key that any
    staged table carries in that column (temp table replaced_<column>), so that a run replaced
    without eval points loses its old ones too."""
    by_column: dict[str, list[str]] = {}
    for name in tables:
        column = REPLACE_BY.get(name)
        if isinstance(column, str):
            by_column.setdefault(column, []).append(name)
    replaced = []
    for column, carriers in by_column.items():
        union = " UNION ".join(f"SELECT {column} FROM {name}" for name in carriers)
        stage.execute(f"CREATE OR REPLACE TEMP TABLE replaced_{column} AS {union}")
        replaced += [(name, column) for name, key in REPLACE_BY.items() if key == column]
    return replaced


def _gpu_snapshot(stage: duckdb.DuckDBPyConnection) -> tuple:
    """What the precomputed rollups assumed of the warehouse: its last load and how many loads
    it holds (a load or an unload in between changes one), the stored settings, whether it held
    samples and whether any of the touched GPUs' lie in the new samples' span."""
    last, loads = stage.execute("SELECT max(load_id), count(*) FROM wh.loads").fetchall()[0]
    has_samples = stage.execute("SELECT EXISTS (SELECT 1 FROM wh.gpu_samples)").fetchall()[0][0]
    overlaps = stage.execute("SELECT EXISTS (SELECT 1 FROM wh.gpu_samples s JOIN touched_gpus t USING (host, gpu_index) "
                             "WHERE s.sampled_at BETWEEN t.first_at AND t.last_at)").fetchall()[0][0]
    return last, loads, gpu_rollups.stored_settings(stage, "wh"), has_samples, overlaps
