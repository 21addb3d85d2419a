"""The one definition of every run's GPU minutes and what is added up from them: run_gpu_time
(each minute a run held each traced GPU, and its seconds in it), gpu_minutes_allocated (those
seconds added over the runs, per GPU minute), run_gpu_days (per run, GPU and UTC day: utilization
while held) and run_gpu_energy (per run: its share of each held minute's energy).

One list of SELECTs (`steps()`, DuckDB's dialect, no connection) that three callers run:
- store_all(): a full refresh of the embedded warehouse (derived.refresh_run_energy);
- number(), store_minutes(), store_held(), store_days(): the incremental update, the same
  statements over the run-minutes a load reached (derived.update_run_energy);
- ingest/derived/sql's base_steps: the lake's batch job, on DuckDB or translated to Spark SQL.

Runs and GPUs are numbered with small integers (rm_runs, rm_gpus) and minutes are whole
microseconds since 1970: the run-minutes are worked out once, joined to the GPU minutes once and
grouped once per (run, GPU, UTC day), hashing numbers, not text (a fleet's 8.5M run-minutes:
arithmetic, truncation and series on TIMESTAMPTZ go through the ICU calendar, ~6x slower); text
comes back only for the stored rows. A run's energy adds up its days.
"""
from __future__ import annotations

import duckdb

# (host, gpu_index) -> gpu_key, every traced GPU (a run's GPUs are among them: run_gpus_of reads
# gpu_minutes); run_id -> run_key, every run with a span (the others hold no minute).
GPUS = ("SELECT host, gpu_index, CAST(row_number() OVER (ORDER BY host, gpu_index) AS INTEGER) AS gpu_key "
        "FROM (SELECT DISTINCT host, gpu_index FROM gpu_minutes) AS traced")
RUNS = ("SELECT run_id, CAST(row_number() OVER (ORDER BY run_id) AS INTEGER) AS run_key, "
        "epoch_us(started_at) AS started_us, epoch_us(ended_at) AS ended_us "
        "FROM runs WHERE ended_at > started_at")

# Every minute each run of {run_gpus} (rows of run_gpus_of: run_id, host, gpu_index, weight) held
# each of its GPUs: run_s = seconds of that minute inside [started_at, ended_at) x the share of the
# GPU it held (weight).
MINUTES = """
WITH held AS (
    SELECT k.run_key, d.gpu_key, g.weight, k.started_us, k.ended_us
    FROM {run_gpus} g JOIN rm_runs k USING (run_id) JOIN rm_gpus d USING (host, gpu_index)
), spans AS (
    SELECT run_key, gpu_key, weight, started_us, ended_us,
           unnest(generate_series(started_us - (started_us % 60000000 + 60000000) % 60000000,
                                  ended_us - 1, 60000000)) AS minute_us
    FROM held
)
SELECT run_key, gpu_key, minute_us,
       (least(ended_us, minute_us + 60000000) - greatest(started_us, minute_us)) / 1e6 * weight AS run_s
FROM spans
"""
# Stored run_gpu_time rows (t), numbered as MINUTES makes them ({only}: which ones, a clause).
STORED_MINUTES = """
SELECT k.run_key, d.gpu_key, epoch_us(t.minute) AS minute_us, t.run_s
FROM run_gpu_time t JOIN rm_runs k USING (run_id) JOIN rm_gpus d USING (host, gpu_index) {only}
"""

# Per GPU minute that runs held it: the seconds they held it, added over the runs (runs sharing a
# minute split its energy by these).
HELD = "SELECT gpu_key, minute_us, sum(run_s) AS held_s FROM rm_minutes GROUP BY gpu_key, minute_us"
# The GPU minutes of rm_minutes: what the incremental update reads of gpu_minutes_allocated
# (numbered as HELD makes them) and of gpu_minutes (GPU_MINUTES' {only}).
HELD_ONLY = ("SEMI JOIN (SELECT DISTINCT gpu_key, minute_us FROM rm_minutes) AS w "
             "ON w.gpu_key = d.gpu_key AND w.minute_us = epoch_us({table}.minute)")
STORED_HELD = ("SELECT d.gpu_key, epoch_us(a.minute) AS minute_us, a.held_s "
               "FROM gpu_minutes_allocated a JOIN rm_gpus d USING (host, gpu_index) " + HELD_ONLY.format(table="a"))

# Each GPU minute ({only}: which ones) with what the days and energy read of it, worked out once
# per GPU minute rather than per run-minute: its UTC day; named_util_us, the minute when it has a
# name and a utilization (a day's GPU name is that of its last such minute); util_coverage_s, its
# coverage when it has a utilization (NULL, which the sums skip, without); util_coverage,
# utilization x coverage; held_60, the seconds runs held it but at least 60 (a run's share of its
# energy is run_s / held_60).
GPU_MINUTES = """
SELECT m.gpu_key, m.minute_us, CAST(floor(m.minute_us / 86400000000) AS INTEGER) AS day_no,
       CASE WHEN m.gpu_name IS NOT NULL AND m.util_pct_mean IS NOT NULL THEN m.minute_us END AS named_util_us,
       CASE WHEN m.util_pct_mean IS NOT NULL THEN m.coverage_s END AS util_coverage_s,
       m.util_pct_mean * m.coverage_s AS util_coverage, m.energy_kwh, m.energy_s, greatest(60, h.held_s) AS held_60
FROM (SELECT d.gpu_key, epoch_us(m.minute) AS minute_us, m.gpu_name, m.coverage_s, m.util_pct_mean,
             m.energy_kwh, m.energy_s
      FROM gpu_minutes m JOIN rm_gpus d USING (host, gpu_index) {only}) AS m
LEFT JOIN rm_held h USING (gpu_key, minute_us)
"""

# Per run, GPU and UTC day, from one join of the run-minutes with the GPU minutes: the GPU-seconds
# held with a measured utilization (Σ coverage_s x run_s / 60 over the minutes with a utilization)
# and those seconds x the utilization; the energy (Σ energy_kwh x run_s / held_60) and the
# GPU-seconds with measured energy (Σ energy_s x run_s / 60) over every minute.
DAYS = """
SELECT r.run_key, r.gpu_key, m.day_no,
       max(m.named_util_us)                            AS gpu_name_us,
       count(m.util_coverage_s)                        AS util_minutes,
       sum(m.util_coverage_s * r.run_s / 60)           AS run_gpu_s,
       sum(m.util_coverage * r.run_s / 60)             AS util_pct_s,
       sum(m.energy_kwh * (r.run_s / m.held_60))       AS energy_kwh,
       sum(m.energy_s * (r.run_s / 60.0))              AS energy_s
FROM rm_minutes r JOIN rm_gpu_minutes m USING (gpu_key, minute_us)
GROUP BY r.run_key, r.gpu_key, m.day_no
"""

# The stored tables' rows, with text again.
RUN_GPU_TIME = """
SELECT k.run_id, d.host, d.gpu_index, make_timestamptz(r.minute_us) AS minute, r.run_s
FROM rm_minutes r JOIN rm_runs k USING (run_key) JOIN rm_gpus d USING (gpu_key)
"""
GPU_MINUTES_ALLOCATED = """
SELECT d.host, d.gpu_index, make_timestamptz(h.minute_us) AS minute, h.held_s
FROM rm_held h JOIN rm_gpus d USING (gpu_key)
"""
# the days with a utilization ({where}: which ones), the GPU's name read at the day's last named minute
RUN_GPU_DAYS = """
WITH days AS (
    SELECT k.run_id, d.host, d.gpu_index, DATE '1970-01-01' + t.day_no AS day,
           make_timestamptz(t.gpu_name_us) AS gpu_name_at, t.run_gpu_s, t.util_pct_s
    FROM rm_days t JOIN rm_runs k USING (run_key) JOIN rm_gpus d USING (gpu_key)
    WHERE t.util_minutes > 0
)
SELECT t.run_id, t.host, t.gpu_index, t.day, n.gpu_name, t.gpu_name_at, t.run_gpu_s, t.util_pct_s
FROM days t LEFT JOIN gpu_minutes n
  ON n.host = t.host AND n.gpu_index = t.gpu_index AND n.minute = t.gpu_name_at {where}
"""
# Per run ({where}: which ones): the GPUs traced, the energy and the GPU-seconds with measured
# energy of its days; coverage is those seconds over duration x the GPUs the run names.
RUN_GPU_ENERGY = """
WITH per_run AS (
    SELECT run_key, count(DISTINCT gpu_key) AS gpus_traced, sum(energy_kwh) AS gpu_energy_kwh,
           sum(energy_s) AS gpu_energy_s
    FROM rm_days GROUP BY run_key
)
SELECT k.run_id, p.gpus_traced, p.gpu_energy_kwh, p.gpu_energy_s,
       100.0 * p.gpu_energy_s
             / nullif(r.duration_s * coalesce(nullif(len(r.gpu_uuids), 0), nullif(len(r.gpu_indices), 0),
                                              r.gpu_count, p.gpus_traced), 0) AS gpu_energy_coverage_pct,
       CASE WHEN r.examples > 0 THEN p.gpu_energy_kwh * 1e6 / r.examples END AS gpu_energy_wh_per_1k_examples
FROM per_run p JOIN rm_runs k USING (run_key) JOIN runs r USING (run_id) {where}
"""


def steps(run_gpus: str = "run_gpus") -> list[tuple[str, str, bool]]:
    """Every run's rows of the four tables, from runs, gpu_minutes and the table `run_gpus` (rows of
    run_gpus_of('runs')): (name, SELECT, stored) in order, each reading the tables before it; the
    others (rm_*) are intermediates."""
    return [("rm_gpus", GPUS, False), ("rm_runs", RUNS, False),
            ("rm_minutes", MINUTES.format(run_gpus=run_gpus), False),
            ("run_gpu_time", RUN_GPU_TIME, True),
            ("rm_held", HELD, False), ("gpu_minutes_allocated", GPU_MINUTES_ALLOCATED, True),
            ("rm_gpu_minutes", GPU_MINUTES.format(only=""), False), ("rm_days", DAYS, False),
            ("run_gpu_days", RUN_GPU_DAYS.format(where=""), True),
            ("run_gpu_energy", RUN_GPU_ENERGY.format(where=""), True)]


def _temp(con: duckdb.DuckDBPyConnection, name: str, sql: str) -> None:
    con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS {sql}")


def store_all(con: duckdb.DuckDBPyConnection) -> None:
    """Insert every run's rows into the emptied run_gpu_time, gpu_minutes_allocated, run_gpu_days
    and run_gpu_energy (the caller deleted them), inside the caller's transaction, with the
    warehouse as the connection's current database. Each temp table goes once its last reader ran
    (a fleet's 8.5M run-minutes: ~200 MB), so that no more of them is held at once than the step
    needs (a failed statement leaves them to the caller's rollback)."""
    last_read = {"rm_held": "rm_gpu_minutes", "rm_minutes": "rm_days", "rm_gpu_minutes": "rm_days"}
    for name, sql, stored in steps():
        if stored:
            con.execute(f"INSERT INTO {name} {sql}")
        else:
            _temp(con, name, sql)
        for table in [t for t, reader in last_read.items() if reader == name]:
            con.execute(f"DROP TABLE {table}")
    for table in ("rm_days", "rm_runs", "rm_gpus"):
        con.execute(f"DROP TABLE {table}")


def number(con: duckdb.DuckDBPyConnection) -> None:
    """Temp tables rm_gpus and rm_runs: every traced GPU and every run with a span, numbered."""
    _temp(con, "rm_gpus", GPUS)
    _temp(con, "rm_runs", RUNS)


def store_minutes(con: duckdb.DuckDBPyConnection, run_gpus: str) -> None:
    """Insert into run_gpu_time the rows of the runs of `run_gpus` (rows of run_gpus_of; the caller
    deleted theirs), after number()."""
    _temp(con, "rm_minutes", MINUTES.format(run_gpus=run_gpus))
    con.execute(f"INSERT INTO run_gpu_time {RUN_GPU_TIME}")


def store_held(con: duckdb.DuckDBPyConnection, minutes: str) -> None:
    """Insert into gpu_minutes_allocated the rows of the GPU minutes of the stored run_gpu_time rows
    (t) `minutes` picks (a clause: every run's rows of those minutes; the caller deleted theirs),
    after number()."""
    _temp(con, "rm_minutes", STORED_MINUTES.format(only=minutes))
    _temp(con, "rm_held", HELD)
    con.execute(f"INSERT INTO gpu_minutes_allocated {GPU_MINUTES_ALLOCATED}")


def store_days(con: duckdb.DuckDBPyConnection, minutes: str, days: str, runs: str) -> None:
    """From the stored run_gpu_time rows (t) `minutes` picks (a clause: whole runs, or whole days of
    a run's GPU) and gpu_minutes_allocated, after number(): insert the run_gpu_days rows `days`
    picks (t: run_id, host, gpu_index, day) and the run_gpu_energy rows `runs` picks (k: run_id)
    (clauses; the caller deleted those rows and chose `minutes` to hold every minute of them)."""
    _temp(con, "rm_minutes", STORED_MINUTES.format(only=minutes))
    _temp(con, "rm_held", STORED_HELD)
    _temp(con, "rm_gpu_minutes", GPU_MINUTES.format(only=HELD_ONLY.format(table="m")))
    _temp(con, "rm_days", DAYS)
    con.execute(f"INSERT INTO run_gpu_days {RUN_GPU_DAYS.format(where=days)}")
    con.execute(f"INSERT INTO run_gpu_energy {RUN_GPU_ENERGY.format(where=runs)}")
    for table in ("rm_minutes", "rm_held", "rm_gpu_minutes", "rm_days", "rm_runs", "rm_gpus"):
        con.execute(f"DROP TABLE IF EXISTS {table}")
