"""The intervals, minutes and holes of ingest/derived/rollup_sql.py (gpu_uuid and gpu_name travel
through the sort as a label) give the rows of the same rules written over whole rows (REFERENCE_*
below: rollup_sql.py as it was before the narrowing, commit cbb2de2, kept here as the oracle), and
each minute names the GPU as its latest sample with a uuid (and with a name) does, counted in plain
Python."""
from __future__ import annotations

import math
import random
from datetime import datetime, timedelta, timezone

import duckdb
import pytest

from ingest.derived import gpu_rollups
from ingest.derived.rollup_sql import GAPS_OF, MINUTES_OF, params
from ingest.settings import config

START = datetime(2026, 9, 14, tzinfo=timezone.utc)
REFERENCE_SAMPLE_INTERVALS = """
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

REFERENCE_MINUTES_OF = """
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

REFERENCE_GAPS_OF = """
SELECT host, gpu_index, gpu_uuid, end_at AS gap_start, next_at AS gap_end, (epoch_us(next_at) - end_us) / 1e6 AS gap_s
FROM {intervals} WHERE next_s > $max_gap_s
"""


COLUMNS = ("host", "gpu_index", "sampled_at", "gpu_uuid", "gpu_name", "power_w", "energy_mj",
           "gpu_util_pct", "mem_used_mib")


def samples(seed: int) -> list[tuple]:
    """Two hosts' GPUs with what the rollups must survive: uuids and names that change or are
    missing (mid-minute too), holes longer than max_gap_s, counters that reset or are absent,
    idle stretches cut by holes, samples off the minute and several minutes apart."""
    rng = random.Random(seed)
    rows = []
    for host in ("node-a", "node-b"):
        for gpu in range(3):
            at = START + timedelta(seconds=rng.randint(0, 59))
            counter = rng.randint(0, 10**9)
            uuid, name = f"GPU-{host}-{gpu}", "A100"
            for _ in range(400):
                roll = rng.random()
                at += timedelta(seconds=rng.choice((7, 10, 10, 10, 13, 95)) if roll > 0.03 else 900)
                if rng.random() < 0.02:
                    uuid = None if rng.random() < 0.5 else f"GPU-{host}-{gpu}-{rng.randint(0, 9)}"
                if rng.random() < 0.02:
                    name = None if rng.random() < 0.5 else rng.choice(("A100", "H100"))
                counter = rng.randint(0, 10**6) if rng.random() < 0.01 else counter + rng.randint(1000, 3_000_000)
                util = rng.choice((0.0, 1.0, 3.0, 50.0, 99.0, None))
                rows.append((host, gpu, at, uuid, name, None if rng.random() < 0.05 else rng.uniform(40, 400),
                             None if rng.random() < 0.1 else counter, util,
                             None if rng.random() < 0.1 else float(rng.randint(0, 80_000))))
    return rows


def stage(rows: list[tuple]) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("CREATE TABLE gpu_samples (host VARCHAR, gpu_index INTEGER, sampled_at TIMESTAMPTZ, gpu_uuid VARCHAR, "
                "gpu_name VARCHAR, power_w DOUBLE, energy_mj BIGINT, gpu_util_pct DOUBLE, mem_used_mib DOUBLE)")
    con.executemany(f"INSERT INTO gpu_samples VALUES ({', '.join('?' * len(COLUMNS))})", rows)
    return con


def bound(sql: str, gpu) -> dict:
    return {name: value for name, value in params(gpu).items() if f"${name}" in sql}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_minutes_and_holes_equal_the_rules_over_whole_rows(seed: int) -> None:
    gpu = config.load().gpu
    con = stage(samples(seed))
    sql = "CREATE TEMP TABLE definition AS " + REFERENCE_SAMPLE_INTERVALS.format(source="gpu_samples")
    con.execute(sql, bound(sql, gpu))
    gpu_rollups.intervals(con, "gpu_samples", "narrow", gpu)
    labels = gpu_rollups.labels_of("narrow")
    for old, new in ((REFERENCE_MINUTES_OF, MINUTES_OF), (REFERENCE_GAPS_OF, GAPS_OF)):
        old_sql, new_sql = old.format(intervals="definition"), new.format(intervals="narrow", labels=labels)
        expected = [tuple(r) for r in con.execute(old_sql, bound(old_sql, gpu)).fetchall()]
        got = [tuple(r) for r in con.execute(new_sql, bound(new_sql, gpu)).fetchall()]
        assert len(got) == len(expected) > 0
        assert _rounded(got) == _rounded(expected)
    # the file's energy and its repeated samples are read from the intervals by name
    assert con.execute("SELECT sum(energy_j) FILTER (WHERE interval_s > 0), count(*) FILTER (WHERE next_s = 0) "
                       "FROM narrow").fetchall()[0] == pytest.approx(
        con.execute("SELECT sum(energy_j) FILTER (WHERE interval_s > 0), count(*) FILTER (WHERE next_s = 0) "
                    "FROM definition").fetchall()[0], rel=1e-12)


def _rounded(rows: list[tuple]) -> list[tuple]:
    """The rows sorted, each float to 12 significant digits (sums added in another order)."""
    return sorted((tuple(float(f"{v:.12g}") if isinstance(v, float) and math.isfinite(v) else v for v in row)
                   for row in rows), key=repr)


def test_a_minute_names_the_gpu_as_its_latest_sample_with_a_uuid() -> None:
    """Counted in plain Python: the uuid (and name) of each minute a sample starts in is that of
    the latest sample of the minute that has one (the sample's interval lies within its minute
    here: 10 s apart, from the minute's start), None when none has."""
    gpu = config.load().gpu
    rows = []
    for step in range(60):  # 10 minutes of 6 samples; a minute's last one has no uuid, most have no name
        rows.append(("node", 0, START + timedelta(seconds=10 * step), f"GPU-{step}" if step % 3 != 2 else None,
                     f"name-{step}" if step % 13 == 0 else None, 100.0, None, 50.0, 1.0))
    con = stage(rows)
    gpu_rollups.intervals(con, "gpu_samples", "narrow", gpu)
    sql = MINUTES_OF.format(intervals="narrow", labels=gpu_rollups.labels_of("narrow"))
    got = {minute: (uuid, name) for minute, uuid, name in con.execute(
        f"SELECT minute, gpu_uuid, gpu_name FROM ({sql})", bound(sql, gpu)).fetchall()}
    expected = {}
    for host, index, at, uuid, name, *_ in rows:
        minute = at.replace(second=0)
        last_uuid, last_name = expected.get(minute, (None, None))
        expected[minute] = (uuid if uuid is not None else last_uuid, name if name is not None else last_name)
    assert got == expected
    # the case is not trivial: a minute's uuid is not its last sample's, some minutes have a name
    assert {uuid for uuid, _ in expected.values()} == {f"GPU-{step}" for step in range(4, 60, 6)}
    assert None in {name for _, name in expected.values()} and "name-13" in {name for _, name in expected.values()}
