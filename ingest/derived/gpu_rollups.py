"""GPU traces' derived tables: each sample's interval and energy, per-minute rollups, coverage holes.

SQL only, run on a connection ingest/engine/warehouse.py hands in (this module never opens the
warehouse). A load computes the intervals of its samples once, in its staging database: the
file's energy total comes from them and, when the warehouse holds no samples near the new
ones, so do the rollups the merge writes; otherwise they are recomputed over the new samples
and the stored ones around them (`context`). The SQL is rollup_sql.py's, which the lake path
runs too.

Each sample of a GPU stands for the interval up to that GPU's next sample. When the next
sample is more than max_gap_s away (or there is none), the interval is as long as the one
before it (a collector's usual spacing) and the rest, up to the next sample, is a coverage
hole (gpu_gaps); a sample with holes on both sides covers nothing.
Energy of an interval: the counter's delta (energy_mj, exact) where both ends have one and it
did not go down; a counter that went down was reset (reboot, driver reload), and as its new
value only covers the time since the reset, that interval falls back to power. Without a
counter: trapezoidal integration of power_w between the two samples, or power x interval for
the last interval before a hole.
Idle: a sample with gpu_util_pct <= idle_util_max_pct (and power_w <= idle_power_max_w when
set) inside a run of such samples, unbroken by a hole, whose intervals add up to at least
idle_min_s. Busy: any other sample with a utilization reading (short dips included).
"""
from __future__ import annotations

from datetime import datetime, timezone

import duckdb

from ingest.derived import derived
from ingest.derived.rollup_sql import GAPS_OF, LABELS, MINUTES_OF, SAMPLE_INTERVALS, params


def _run(con: duckdb.DuckDBPyConnection, sql: str, gpu) -> None:
    """Execute `sql` with those of the [gpu] settings it names."""
    con.execute(sql, {name: value for name, value in params(gpu).items() if f"${name}" in sql})


def settings(gpu) -> tuple:
    """The [gpu] settings as stored in gpu_rollup_settings (its first four columns)."""
    return gpu.idle_util_max_pct, gpu.idle_power_max_w, gpu.idle_min_s, gpu.max_gap_s


def margin_s(gpu) -> float:
    """How far before a new sample the stored rollups can change (see `context`)."""
    return gpu.max_gap_s + gpu.idle_min_s + 60


def intervals(con: duckdb.DuckDBPyConnection, source: str, into: str, gpu) -> None:
    """Temp table `into`: every sample of `source` (a table or subquery) with its interval,
    energy (J), end and idle flag; computed once and read by the energy, minutes and gaps.
    With temp table `into`_labels beside it (rollup_sql.LABELS: the GPUs and their uuids and names
    as numbers)."""
    labels = labels_of(into)
    con.execute(f"CREATE OR REPLACE TEMP TABLE {labels} AS " + LABELS.format(source=source))
    _run(con, f"CREATE OR REPLACE TEMP TABLE {into} AS " + SAMPLE_INTERVALS.format(labels=labels, source=source), gpu)


def labels_of(intervals: str) -> str:
    """The name of the labels table that goes with a table of intervals."""
    return f"{intervals}_labels"


def drop_intervals(con: duckdb.DuckDBPyConnection, table: str) -> None:
    """Drop a table of intervals and its labels (if they are there)."""
    con.execute(f"DROP TABLE IF EXISTS {table}")
    con.execute(f"DROP TABLE IF EXISTS {labels_of(table)}")


def _of(query: str, intervals: str) -> str:
    """MINUTES_OF or GAPS_OF over the table of intervals `intervals`."""
    return query.format(intervals=intervals, labels=labels_of(intervals))


def energy_kwh(con: duckdb.DuckDBPyConnection, table: str) -> float | None:
    """The energy (kWh) of a table of intervals; None when no interval has a reading."""
    return con.execute(f"SELECT sum(energy_j) FILTER (WHERE interval_s > 0) / 3.6e6 FROM {table}").fetchall()[0][0]


def touched(con: duckdb.DuckDBPyConnection, gpu) -> None:
    """Temp table touched_gpus: per GPU of the staged samples, its first and last new sample
    (first_at, last_at) and `since` = the first less the margin, to the minute (an earlier
    minute or hole cannot change: a new sample only changes the interval of a sample within
    max_gap_s before it, and the idle stretch of one within idle_min_s of it). Read from the
    staged samples' intervals (file_intervals, computed here when absent; the merge reads them
    next): two narrow columns rather than every staged sample with its text (a 4M-sample file
    spills the staged samples to disk, and each scan of them reads them back)."""
    if not derived.has_temp(con, "file_intervals"):
        intervals(con, "gpu_samples", "file_intervals", gpu)
    con.execute("CREATE OR REPLACE TEMP TABLE touched_gpus AS "
                "SELECT g.host, g.gpu_index, date_trunc('minute', make_timestamptz(i.first_us) - to_seconds($margin_s)) "
                "AS since, make_timestamptz(i.first_us) AS first_at, make_timestamptz(i.last_us) AS last_at "
                f"FROM ({SPANS.format(intervals='file_intervals')}) i "
                f"JOIN (SELECT DISTINCT gpu_key, host, gpu_index FROM {labels_of('file_intervals')}) g USING (gpu_key)",
                {"margin_s": margin_s(gpu)})


# Per GPU (gpu_key) of a table of intervals, its first and last sample (whole microseconds).
SPANS = "SELECT gpu_key, min(at_us) AS first_us, max(at_us) AS last_us FROM {intervals} GROUP BY gpu_key"


def spans(con: duckdb.DuckDBPyConnection, table: str) -> tuple[int, object, object]:
    """The GPUs of a table of intervals, its first and last sample (TIMESTAMPTZ; None without samples)."""
    return tuple(con.execute("SELECT count(*), make_timestamptz(min(first_us)), make_timestamptz(max(last_us)) "
                             f"FROM ({SPANS.format(intervals=table)})").fetchall()[0])


def context(con: duckdb.DuckDBPyConnection, db: str, gpu) -> int:
    """Temp table gpu_context: the stored samples (in database `db`) that the rollups of the
    touched GPUs from `since` on depend on, less those the staged ones replace: from the last
    sample at least the margin before `since`, so that intervals, holes and stretches reaching
    into the window are whole. Returns how many there are."""
    if not stored_any(con, db):  # new GPUs (a fleet's first load): nothing stored around them
        con.execute(f"CREATE OR REPLACE TEMP TABLE gpu_context AS SELECT * FROM {db}.gpu_samples LIMIT 0")
        return 0
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE gpu_context AS
        WITH starts AS (
            SELECT t.host, t.gpu_index,
                   (SELECT max(s.sampled_at) FROM {db}.gpu_samples s
                    WHERE s.host = t.host AND s.gpu_index = t.gpu_index
                      AND s.sampled_at <= t.since - to_seconds($margin_s)) AS context_from
            FROM touched_gpus t
        )
        SELECT s.* FROM {db}.gpu_samples s JOIN starts t USING (host, gpu_index)
        WHERE (t.context_from IS NULL OR s.sampled_at >= t.context_from)
          AND NOT EXISTS (SELECT 1 FROM gpu_samples n WHERE n.host = s.host AND n.gpu_index = s.gpu_index
                                                         AND n.sampled_at = s.sampled_at)""",
                {"margin_s": margin_s(gpu)})
    return con.execute("SELECT count(*) FROM gpu_context").fetchall()[0][0]


def stored_any(con: duckdb.DuckDBPyConnection, db: str) -> bool:
    """Whether database `db` holds any sample of the GPUs of temp table touched_gpus. The hosts
    are bound as constants, so the scan skips the row groups whose host range excludes them (a
    trace file is most often one host's, its rows stored together): the full context query
    joined the staged samples against every stored one, ~0.08 CPU s a file and growing with the
    warehouse."""
    hosts = [host for (host,) in con.execute("SELECT DISTINCT host FROM touched_gpus").fetchall()]
    if not hosts:
        return False
    marks = ", ".join("?" * len(hosts))
    return con.execute(f"SELECT EXISTS (SELECT 1 FROM {db}.gpu_samples s WHERE s.host IN ({marks}) AND EXISTS ("
                       "SELECT 1 FROM touched_gpus t WHERE t.host = s.host AND t.gpu_index = s.gpu_index))",
                       hosts).fetchall()[0][0]


def derive(con: duckdb.DuckDBPyConnection, gpu, with_context: bool) -> None:
    """Temp tables new_minutes and new_gaps: the touched GPUs' rollups from `since` on, from the
    staged samples' intervals (file_intervals, computed again if gone) or, with stored samples
    around them, from the intervals of both; the intervals are dropped after."""
    source = "file_intervals"
    if not with_context and not derived.has_temp(con, source):
        intervals(con, "gpu_samples", source, gpu)  # dropped by an earlier derive (another load came in between)
    if with_context:
        columns = "host, gpu_index, sampled_at, gpu_uuid, gpu_name, power_w, energy_mj, gpu_util_pct, mem_used_mib"
        intervals(con, f"(SELECT {columns} FROM gpu_samples UNION ALL SELECT {columns} FROM gpu_context)",
                  "gpu_intervals", gpu)
        source = "gpu_intervals"
    for table, query, column in (("new_minutes", MINUTES_OF, "minute"),
                                 ("new_gaps", GAPS_OF, "gap_end")):
        _run(con, f"CREATE OR REPLACE TEMP TABLE {table} AS SELECT r.* FROM ({_of(query, source)}) r "
                  f"JOIN touched_gpus t USING (host, gpu_index) WHERE r.{column} >= t.since", gpu)
    # The merge writes next: the intervals (as many rows as the samples) no longer hold memory then.
    drop_intervals(con, source)
    if with_context:
        drop_intervals(con, "file_intervals")


def replace(con: duckdb.DuckDBPyConnection, db: str, gpu, stored: tuple | None) -> None:
    """In database `db`: the touched GPUs' minutes and holes from `since` on become new_minutes
    and new_gaps, and the settings row says which [gpu] settings they were computed with."""
    for table, column in (("gpu_minutes", "minute"), ("gpu_gaps", "gap_end")):
        con.execute(f"DELETE FROM {db}.{table} USING touched_gpus t WHERE {db}.{table}.host = t.host "
                    f"AND {db}.{table}.gpu_index = t.gpu_index AND {db}.{table}.{column} >= t.since")
        con.execute(f"INSERT INTO {db}.{table} BY NAME SELECT * FROM new_{table.removeprefix('gpu_')}")
    record(con, db, gpu, stored)


def rebuild(con: duckdb.DuckDBPyConnection, db: str, gpu, stored: tuple | None) -> int:
    """Recompute every GPU's rollups in database `db` from all its samples; returns the GPUs."""
    intervals(con, f"{db}.gpu_samples", "all_intervals", gpu)
    con.execute(f"DELETE FROM {db}.gpu_minutes")
    con.execute(f"DELETE FROM {db}.gpu_gaps")
    _run(con, f"INSERT INTO {db}.gpu_minutes BY NAME {_of(MINUTES_OF, 'all_intervals')}", gpu)
    _run(con, f"INSERT INTO {db}.gpu_gaps BY NAME {_of(GAPS_OF, 'all_intervals')}", gpu)
    drop_intervals(con, "all_intervals")
    record(con, db, gpu, stored)
    return con.execute(f"SELECT count(*) FROM (SELECT DISTINCT host, gpu_index FROM {db}.gpu_samples)").fetchall()[0][0]


def unloaded(con: duckdb.DuckDBPyConnection, db: str, gpu, stored: tuple | None) -> bool:
    """After an unload deleted samples (temp table removed_samples: per GPU, the first removed
    `sampled_at`), recompute in database `db` the rollups of those GPUs only, from the first
    removed sample less the margin on (as a load does for its new ones), with touched_gpus and
    traced_before left for derived.update_run_energy. Returns False when the [gpu] settings
    differ from those the rollups were stored with: then every GPU was recomputed (rebuild)."""
    if stored is not None and tuple(stored[:4]) != settings(gpu):
        rebuild(con, db, gpu, stored)
        return False
    con.execute("CREATE OR REPLACE TEMP TABLE touched_gpus AS "
                "SELECT host, gpu_index, date_trunc('minute', sampled_at - to_seconds($margin_s)) AS since, "
                "sampled_at AS first_at, sampled_at AS last_at FROM removed_samples", {"margin_s": margin_s(gpu)})
    derived.note_traced(con, db)  # the traced GPUs before the rewrite, which update_run_energy compares
    # the samples that stay from the last one at least the margin before `since` (see context)
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE unload_context AS
        WITH starts AS (
            SELECT t.host, t.gpu_index,
                   (SELECT max(s.sampled_at) FROM {db}.gpu_samples s
                    WHERE s.host = t.host AND s.gpu_index = t.gpu_index
                      AND s.sampled_at <= t.since - to_seconds($margin_s)) AS context_from
            FROM touched_gpus t
        )
        SELECT s.host, s.gpu_index, s.sampled_at, s.gpu_uuid, s.gpu_name, s.power_w, s.energy_mj,
               s.gpu_util_pct, s.mem_used_mib
        FROM {db}.gpu_samples s JOIN starts t USING (host, gpu_index)
        WHERE t.context_from IS NULL OR s.sampled_at >= t.context_from""", {"margin_s": margin_s(gpu)})
    intervals(con, "unload_context", "gpu_intervals", gpu)
    for table, query, column in (("new_minutes", MINUTES_OF, "minute"),
                                 ("new_gaps", GAPS_OF, "gap_end")):
        _run(con, f"CREATE OR REPLACE TEMP TABLE {table} AS SELECT r.* FROM ({_of(query, 'gpu_intervals')}) r "
                  f"JOIN touched_gpus t USING (host, gpu_index) WHERE r.{column} >= t.since", gpu)
    replace(con, db, gpu, stored)
    return True


def stored_settings(con: duckdb.DuckDBPyConnection, db: str) -> tuple | None:
    """The stored settings row: idle_util_max_pct, idle_power_max_w, idle_min_s, max_gap_s, rollups."""
    rows = con.execute("SELECT idle_util_max_pct, idle_power_max_w, idle_min_s, max_gap_s, rollups "
                       f"FROM {db}.gpu_rollup_settings").fetchall()
    return rows[0] if rows else None


def record(con: duckdb.DuckDBPyConnection, db: str, gpu, stored: tuple | None) -> None:
    con.execute(f"DELETE FROM {db}.gpu_rollup_settings")
    con.execute(f"INSERT INTO {db}.gpu_rollup_settings VALUES (?, ?, ?, ?, ?, ?)",
                [*settings(gpu), (stored[4] if stored else 0) + 1, datetime.now(timezone.utc)])
