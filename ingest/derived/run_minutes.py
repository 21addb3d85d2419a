"""Every run's GPU minutes and what is added up from them, stored again in one pass over numbers:
run_gpu_time, gpu_minutes_allocated, run_gpu_days and run_gpu_energy, the rows of the macros in
ingest/schema.sql (run_gpu_minutes_of, run_gpu_days_of, run_energy_of; GPU_MINUTES_ALLOCATED).

Those macros stay the definition: pages, the lake's batch job (ingest/derived/sql/) and the
incremental update (derived.update_run_energy) run them. A full refresh after a fleet's trace
files runs them over millions of run-minutes, and each joins the run-minutes to gpu_minutes on
(host text, gpu_index, TIMESTAMPTZ minute): the join was computed twice (days, energy), plus the
grouping for the allocated seconds, each hashing text. Here the minutes are worked out once, as
(run number, GPU number, minute in microseconds since 1970), joined once to the GPU minutes
numbered the same way, and grouped once per (run, GPU, UTC day); a run's energy adds up its days.
Text comes back only for the stored rows. Sums of DOUBLEs are added in another order than the
macros' (as DuckDB's parallel sums are from one run to the next): the same within ~1e-15 relative.

SQL only, inside the caller's transaction, with the warehouse as the connection's current
database (derived.refresh_run_energy calls it); the temp tables it makes are dropped after.
"""
from __future__ import annotations

import duckdb

# (host, gpu_index) -> gpu_key, every traced GPU (a run's GPUs are among them: run_gpus_of reads
# gpu_minutes); run_id -> run_key, every run with a span (run_gpu_minutes_of skips the others).
_KEYS = [
    """CREATE OR REPLACE TEMP TABLE rm_gpus AS
       SELECT host, gpu_index, CAST(row_number() OVER (ORDER BY host, gpu_index) AS INTEGER) AS gpu_key
       FROM (SELECT DISTINCT host, gpu_index FROM gpu_minutes)""",
    """CREATE OR REPLACE TEMP TABLE rm_runs AS
       SELECT run_id, CAST(row_number() OVER () AS INTEGER) AS run_key,
              epoch_us(started_at) AS started_us, epoch_us(ended_at) AS ended_us
       FROM runs WHERE ended_at > started_at""",
]

# run_gpu_minutes_of('runs') by number: the same minutes and seconds (the same expressions).
_MINUTES = """
CREATE OR REPLACE TEMP TABLE rm_minutes AS
WITH held AS (
    SELECT k.run_key, d.gpu_key, g.weight, k.started_us, k.ended_us
    FROM run_gpus g JOIN rm_runs k USING (run_id) JOIN rm_gpus d USING (host, gpu_index)
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

# GPU_MINUTES_ALLOCATED by number; then each GPU minute with what the days and energy read of it,
# worked out once per GPU minute rather than per run-minute: its UTC day; named_util_us, the minute
# when it has a name and a utilization (run_gpu_days_of's gpu_name_at; arg_max skips NULL names, so
# its gpu_name is that minute's); util_coverage_s, its coverage when it has a utilization (the
# macro's WHERE, as a NULL the sums skip); util_coverage, utilization x coverage (the macro's first
# product); held_60, greatest(60, held_s) (run_energy_of's share).
_HELD = ("CREATE OR REPLACE TEMP TABLE rm_held AS "
         "SELECT gpu_key, minute_us, sum(run_s) AS held_s FROM rm_minutes GROUP BY ALL")
_GPU_MINUTES = """
CREATE OR REPLACE TEMP TABLE rm_gpu_minutes AS
SELECT m.gpu_key, m.minute_us, CAST(floor(m.minute_us / 86400000000) AS INTEGER) AS day_no,
       CASE WHEN m.gpu_name IS NOT NULL AND m.util_pct_mean IS NOT NULL THEN m.minute_us END AS named_util_us,
       CASE WHEN m.util_pct_mean IS NOT NULL THEN m.coverage_s END AS util_coverage_s,
       m.util_pct_mean * m.coverage_s AS util_coverage, m.energy_kwh, m.energy_s, greatest(60, h.held_s) AS held_60
FROM (SELECT d.gpu_key, epoch_us(m.minute) AS minute_us, m.gpu_name, m.coverage_s, m.util_pct_mean,
             m.energy_kwh, m.energy_s
      FROM gpu_minutes m JOIN rm_gpus d USING (host, gpu_index)) m
LEFT JOIN rm_held h USING (gpu_key, minute_us)
"""

# Per run, GPU and UTC day: run_gpu_days_of's figures (over the minutes with a utilization) and
# run_energy_of's sums (over every minute), from one join of the run-minutes with the GPU minutes;
# the same products in the same order as the macros'.
_DAYS = """
CREATE OR REPLACE TEMP TABLE rm_days AS
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

_TIME = """INSERT INTO run_gpu_time
       SELECT k.run_id, d.host, d.gpu_index, make_timestamptz(r.minute_us) AS minute, r.run_s
       FROM rm_minutes r JOIN rm_runs k USING (run_key) JOIN rm_gpus d USING (gpu_key)"""
_ALLOCATED = """INSERT INTO gpu_minutes_allocated
       SELECT d.host, d.gpu_index, make_timestamptz(h.minute_us) AS minute, h.held_s
       FROM rm_held h JOIN rm_gpus d USING (gpu_key)"""
_RUN_DAYS = """INSERT INTO run_gpu_days
       WITH days AS (
           SELECT k.run_id, d.host, d.gpu_index, DATE '1970-01-01' + t.day_no AS day,
                  make_timestamptz(t.gpu_name_us) AS gpu_name_at, t.run_gpu_s, t.util_pct_s
           FROM rm_days t JOIN rm_runs k USING (run_key) JOIN rm_gpus d USING (gpu_key)
           WHERE t.util_minutes > 0
       )
       SELECT t.run_id, t.host, t.gpu_index, t.day, n.gpu_name, t.gpu_name_at, t.run_gpu_s, t.util_pct_s
       FROM days t LEFT JOIN gpu_minutes n
         ON n.host = t.host AND n.gpu_index = t.gpu_index AND n.minute = t.gpu_name_at"""
# run_energy_of's last step, over the days' sums
_ENERGY = """INSERT INTO run_gpu_energy
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
       FROM per_run p JOIN rm_runs k USING (run_key) JOIN runs r USING (run_id)"""


def store_all(con: duckdb.DuckDBPyConnection) -> None:
    """Insert every run's rows into the emptied run_gpu_time, gpu_minutes_allocated, run_gpu_days
    and run_gpu_energy (the caller deleted them), from runs, run_gpus and gpu_minutes. Each temp
    table goes once its last reader ran (a fleet's 8.5M run-minutes: ~200 MB), so that no more
    of them is held at once than the step needs (a failed statement leaves them to the caller's
    rollback)."""
    steps = [*_KEYS, _MINUTES, _TIME, _HELD, _ALLOCATED, _GPU_MINUTES, "DROP TABLE rm_held", _DAYS,
             "DROP TABLE rm_minutes", "DROP TABLE rm_gpu_minutes", _RUN_DAYS, _ENERGY,
             "DROP TABLE rm_days", "DROP TABLE rm_runs", "DROP TABLE rm_gpus"]
    for sql in steps:
        con.execute(sql)
