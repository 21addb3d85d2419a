"""The SQL of the GPU traces' derived tables (see gpu_rollups.py for what each computes): each
sample's interval, the per-minute rollups and the coverage holes, with the [gpu] settings as named
parameters. Text only, so the embedded path (gpu_rollups.py) and the portable one (derived/sql/,
DuckDB or Spark over a lake) read one definition.

Each sample's interval needs one sort of a GPU's samples (the window of SAMPLE_INTERVALS), and a
sort carries every column of its rows: with gpu_uuid and gpu_name (text) on board it cost ~3x the
sort of the numbers alone (1M samples: 0.81 vs 0.28 CPU s, and it spilled past the staging
memory limit). So the text travels as numbers: LABELS numbers each distinct (host, gpu_index,
gpu_uuid, gpu_name) of the samples (label) and each GPU (gpu_key); the sort partitions by gpu_key
(an INTEGER) and carries the label, and the minutes and holes look the text up again at the end.
A minute's gpu_uuid is its latest sample's that has one (has_uuid), and likewise its gpu_name.
Times are computed on as whole microseconds since 1970 (epoch_us, make_timestamptz): arithmetic
and truncation on TIMESTAMPTZ go through the ICU calendar, many times slower per row.
"""
from __future__ import annotations

# The distinct (host, gpu_index, gpu_uuid, gpu_name) of {source} (a table or subquery), each
# numbered (label), and its GPU (host, gpu_index) numbered too (gpu_key).
LABELS = """
SELECT host, gpu_index, gpu_uuid, gpu_name,
       CAST(row_number() OVER (ORDER BY host, gpu_index, gpu_uuid, gpu_name) AS INTEGER) AS label,
       CAST(dense_rank() OVER (ORDER BY host, gpu_index) AS INTEGER) AS gpu_key
FROM (SELECT DISTINCT host, gpu_index, gpu_uuid, gpu_name FROM {source}) AS given
"""

# Every sample of {source} with its GPU (gpu_key) and label from {labels} (LABELS of the same
# source), has_uuid and has_name, its interval (s), energy (J), end (end_us) and idle flag.
SAMPLE_INTERVALS = """
WITH narrow AS (
    SELECT l.gpu_key, epoch_us(s.sampled_at) AS at_us, l.label,
           s.gpu_uuid IS NOT NULL AS has_uuid, s.gpu_name IS NOT NULL AS has_name,
           s.power_w, s.energy_mj, s.gpu_util_pct, s.mem_used_mib
    FROM {source} s JOIN {labels} l
      ON s.host = l.host AND s.gpu_index = l.gpu_index
     AND s.gpu_uuid IS NOT DISTINCT FROM l.gpu_uuid AND s.gpu_name IS NOT DISTINCT FROM l.gpu_name
), ordered AS (
    SELECT *,
           lead(at_us) OVER w                       AS next_us,
           ((lead(at_us) OVER w) - at_us) / 1e6     AS next_s,  -- Spark reads `w - at_us` as a name
           (at_us - lag(at_us) OVER w) / 1e6        AS prev_s,
           lead(power_w) OVER w                     AS next_power_w,
           lead(energy_mj) OVER w                   AS next_energy_mj,
           row_number() OVER w                      AS rn,
           -- low samples so far: along a run of low samples rn - lows stays the same (idle stretches
           -- without a second sort of every sample: only runs with a hole inside are sorted again)
           sum(CASE WHEN gpu_util_pct <= $idle_util_max_pct
                         AND ($idle_power_max_w IS NULL OR power_w <= $idle_power_max_w) THEN 1 ELSE 0 END)
               OVER (PARTITION BY gpu_key ORDER BY at_us ROWS UNBOUNDED PRECEDING) AS lows
    FROM narrow
    WINDOW w AS (PARTITION BY gpu_key ORDER BY at_us)
), intervals AS (
    SELECT *,
           CASE WHEN next_s <= $max_gap_s THEN next_s
                WHEN prev_s <= $max_gap_s THEN prev_s ELSE 0 END AS interval_s,
           gpu_util_pct <= $idle_util_max_pct
               AND ($idle_power_max_w IS NULL OR power_w <= $idle_power_max_w) AS low,
           CASE WHEN next_s <= $max_gap_s AND next_energy_mj >= energy_mj
                    THEN (next_energy_mj - energy_mj) / 1000.0
                WHEN next_s <= $max_gap_s AND next_power_w IS NOT NULL AND power_w IS NOT NULL
                    THEN (power_w + next_power_w) / 2 * next_s
           END AS paired_energy_j
    FROM ordered
), stretched AS (
    SELECT *, coalesce(paired_energy_j, power_w * interval_s) AS energy_j,
           at_us + CAST(round(interval_s * 1e6) AS BIGINT) AS end_us,
           rn - lows AS low_run  -- the same for the low samples of one run of them (unbroken by other samples)
    FROM intervals
), low_runs AS (  -- a run of low samples is one stretch unless a hole lies inside it
    SELECT gpu_key, low_run, sum(interval_s) AS run_s,
           min(rn) < max(rn) FILTER (WHERE prev_s > $max_gap_s) AS holed
    FROM stretched WHERE low GROUP BY ALL
), split_stretches AS (  -- the stretches of the few runs with a hole inside: the holes cut them
    SELECT gpu_key, rn, sum(interval_s) OVER (PARTITION BY gpu_key, low_run, piece) AS stretch_s
    FROM (SELECT s.gpu_key, s.low_run, s.rn, s.interval_s,
                 sum(CASE WHEN s.prev_s > $max_gap_s THEN 1 ELSE 0 END)
                     OVER (PARTITION BY s.gpu_key, s.low_run ORDER BY s.rn ROWS UNBOUNDED PRECEDING) AS piece
          FROM stretched s JOIN low_runs r USING (gpu_key, low_run) WHERE s.low AND r.holed)
)
SELECT gpu_key, at_us, label, has_uuid, has_name, power_w, gpu_util_pct, mem_used_mib,
       next_us, next_s, interval_s, energy_j, end_us,
       coalesce(low AND coalesce(p.stretch_s, l.run_s) >= $idle_min_s, false) AS idle
FROM stretched s LEFT JOIN low_runs l USING (gpu_key, low_run) LEFT JOIN split_stretches p USING (gpu_key, rn)
"""

# Per GPU and UTC minute, from a table of SAMPLE_INTERVALS and its {labels}.
MINUTES_OF = """
WITH pieces AS (  -- most intervals lie within one minute: only the others are cut into minutes
    SELECT *, at_us - at_us % 60000000 AS minute_us
    FROM {intervals} WHERE interval_s > 0 AND (end_us - 1) - (end_us - 1) % 60000000 = at_us - at_us % 60000000
    UNION ALL
    SELECT *, unnest(generate_series(at_us - at_us % 60000000, end_us - 1, 60000000)) AS minute_us
    FROM {intervals} WHERE interval_s > 0 AND (end_us - 1) - (end_us - 1) % 60000000 <> at_us - at_us % 60000000
), weighted AS (
    SELECT *, (least(end_us, minute_us + 60000000) - greatest(at_us, minute_us)) / 1e6 AS piece_s
    FROM pieces
), minutes AS (
    SELECT gpu_key, minute_us,
           arg_max(label, at_us) FILTER (WHERE has_uuid)                          AS uuid_label,
           arg_max(label, at_us) FILTER (WHERE has_name)                          AS name_label,
           sum(piece_s)                                                           AS coverage_s,
           coalesce(sum(piece_s) FILTER (WHERE energy_j IS NOT NULL), 0)          AS energy_s,
           sum(energy_j * piece_s / interval_s) / 3.6e6                           AS energy_kwh,
           coalesce(sum(piece_s) FILTER (WHERE idle), 0)                          AS idle_s,
           sum(energy_j * piece_s / interval_s) FILTER (WHERE idle) / 3.6e6       AS idle_energy_kwh,
           coalesce(sum(piece_s) FILTER (WHERE NOT idle AND gpu_util_pct IS NOT NULL), 0) AS busy_s,
           sum(energy_j * piece_s / interval_s)
               / sum(piece_s) FILTER (WHERE energy_j IS NOT NULL)                 AS power_w_mean,
           max(power_w)                                                           AS power_w_max,
           sum(gpu_util_pct * piece_s)
               / sum(piece_s) FILTER (WHERE gpu_util_pct IS NOT NULL)             AS util_pct_mean,
           max(gpu_util_pct)                                                      AS util_pct_max,
           sum(gpu_util_pct * piece_s) FILTER (WHERE NOT idle)
               / sum(piece_s) FILTER (WHERE NOT idle AND gpu_util_pct IS NOT NULL) AS util_pct_busy_mean,
           max(mem_used_mib)                                                      AS mem_used_mib_max
    FROM weighted
    GROUP BY gpu_key, minute_us
)
SELECT g.host, g.gpu_index, make_timestamptz(m.minute_us) AS minute, u.gpu_uuid, n.gpu_name,
       m.coverage_s, m.energy_s, m.energy_kwh, m.idle_s, m.idle_energy_kwh, m.busy_s, m.power_w_mean,
       m.power_w_max, m.util_pct_mean, m.util_pct_max, m.util_pct_busy_mean, m.mem_used_mib_max
FROM minutes m JOIN (SELECT DISTINCT gpu_key, host, gpu_index FROM {labels}) g USING (gpu_key)
LEFT JOIN {labels} u ON u.label = m.uuid_label LEFT JOIN {labels} n ON n.label = m.name_label
"""

# The coverage holes, from a table of SAMPLE_INTERVALS and its {labels}.
GAPS_OF = """
SELECT l.host, l.gpu_index, l.gpu_uuid, make_timestamptz(i.end_us) AS gap_start,
       make_timestamptz(i.next_us) AS gap_end, (i.next_us - i.end_us) / 1e6 AS gap_s
FROM {intervals} i JOIN {labels} l USING (label) WHERE i.next_s > $max_gap_s
"""


def params(gpu) -> dict:
    """The [gpu] settings as the SQL's named parameters."""
    return {"max_gap_s": gpu.max_gap_s, "idle_util_max_pct": gpu.idle_util_max_pct,
            "idle_power_max_w": gpu.idle_power_max_w, "idle_min_s": gpu.idle_min_s}
