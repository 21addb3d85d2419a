"""The embedded path's intervals, minutes and holes (ingest/derived/narrow_intervals.py: gpu_uuid
and gpu_name travel through the sort as a label) give the rows of the definition
(ingest/derived/rollup_sql.py, which the lake path runs), and each minute names the GPU as its
latest sample with a uuid (and with a name) does, counted in plain Python."""
from __future__ import annotations

import math
import random
from datetime import datetime, timedelta, timezone

import duckdb
import pytest

from ingest.derived import gpu_rollups, narrow_intervals
from ingest.derived.rollup_sql import GAPS_OF, MINUTES_OF, SAMPLE_INTERVALS, params
from ingest.settings import config

START = datetime(2026, 9, 14, tzinfo=timezone.utc)
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
def test_narrow_minutes_and_holes_equal_the_definition(seed: int) -> None:
    gpu = config.load().gpu
    con = stage(samples(seed))
    sql = "CREATE TEMP TABLE definition AS " + SAMPLE_INTERVALS.format(source="gpu_samples")
    con.execute(sql, bound(sql, gpu))
    gpu_rollups.intervals(con, "gpu_samples", "narrow", gpu)
    labels = narrow_intervals.labels_of("narrow")
    for old, new in ((MINUTES_OF, narrow_intervals.MINUTES_OF), (GAPS_OF, narrow_intervals.GAPS_OF)):
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
    sql = narrow_intervals.MINUTES_OF.format(intervals="narrow", labels=narrow_intervals.labels_of("narrow"))
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
