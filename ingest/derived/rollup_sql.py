"""The SQL of the GPU traces' derived tables (see gpu_rollups.py for what each computes): each
sample's interval, the per-minute rollups and the coverage holes, with the [gpu] settings as named
parameters. Text only, so the embedded path (gpu_rollups.py) and the portable one (derived/sql/,
DuckDB or Spark over a lake) read one definition.
"""
from __future__ import annotations

# Times are computed on as whole microseconds since 1970 (epoch_us, make_timestamptz): arithmetic
# and truncation on TIMESTAMPTZ go through the ICU calendar, many times slower per row.
SAMPLE_INTERVALS = """
WITH ordered AS (
    SELECT host, gpu_index, sampled_at, gpu_uuid, gpu_name, power_w, energy_mj, gpu_util_pct, mem_used_mib,
           epoch_us(sampled_at)                          AS at_us,
           lead(sampled_at) OVER w                       AS next_at,
           (epoch_us(lead(sampled_at) OVER w) - epoch_us(sampled_at)) / 1e6 AS next_s,
           (epoch_us(sampled_at) - epoch_us(lag(sampled_at) OVER w)) / 1e6  AS prev_s,
           lead(power_w) OVER w                          AS next_power_w,
           lead(energy_mj) OVER w                        AS next_energy_mj,
           row_number() OVER w                           AS rn,
           -- low samples so far: along a run of low samples rn - lows stays the same (idle stretches
           -- without a second sort of every sample: only runs with a hole inside are sorted again)
           sum(CASE WHEN gpu_util_pct <= $idle_util_max_pct
                         AND ($idle_power_max_w IS NULL OR power_w <= $idle_power_max_w) THEN 1 ELSE 0 END)
               OVER (PARTITION BY host, gpu_index ORDER BY sampled_at ROWS UNBOUNDED PRECEDING) AS lows
    FROM {source}
    WINDOW w AS (PARTITION BY host, gpu_index ORDER BY sampled_at)
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
    SELECT host, gpu_index, low_run, sum(interval_s) AS run_s,
           min(rn) < max(rn) FILTER (WHERE prev_s > $max_gap_s) AS holed
    FROM stretched WHERE low GROUP BY ALL
), split_stretches AS (  -- the stretches of the few runs with a hole inside: the holes cut them
    SELECT host, gpu_index, rn, sum(interval_s) OVER (PARTITION BY host, gpu_index, low_run, piece) AS stretch_s
    FROM (SELECT s.host, s.gpu_index, s.low_run, s.rn, s.interval_s,
                 sum(CASE WHEN s.prev_s > $max_gap_s THEN 1 ELSE 0 END)
                     OVER (PARTITION BY s.host, s.gpu_index, s.low_run ORDER BY s.rn ROWS UNBOUNDED PRECEDING) AS piece
          FROM stretched s JOIN low_runs r USING (host, gpu_index, low_run) WHERE s.low AND r.holed)
)
SELECT host, gpu_index, sampled_at, gpu_uuid, gpu_name, power_w, gpu_util_pct, mem_used_mib,
       next_at, next_s, interval_s, energy_j, make_timestamptz(end_us) AS end_at, at_us, end_us,
       coalesce(low AND coalesce(p.stretch_s, l.run_s) >= $idle_min_s, false) AS idle
FROM stretched s LEFT JOIN low_runs l USING (host, gpu_index, low_run) LEFT JOIN split_stretches p USING (host, gpu_index, rn)
"""

# Per GPU and UTC minute, from a table of SAMPLE_INTERVALS.
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
)
SELECT host, gpu_index, make_timestamptz(minute_us) AS minute,
       arg_max(gpu_uuid, sampled_at)                                          AS gpu_uuid,
       arg_max(gpu_name, sampled_at)                                          AS gpu_name,
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
GROUP BY host, gpu_index, minute_us
"""

GAPS_OF = """
SELECT host, gpu_index, gpu_uuid, end_at AS gap_start, next_at AS gap_end, (epoch_us(next_at) - end_us) / 1e6 AS gap_s
FROM {intervals} WHERE next_s > $max_gap_s
"""


def params(gpu) -> dict:
    """The [gpu] settings as the SQL's named parameters."""
    return {"max_gap_s": gpu.max_gap_s, "idle_util_max_pct": gpu.idle_util_max_pct,
            "idle_power_max_w": gpu.idle_power_max_w, "idle_min_s": gpu.idle_min_s}
