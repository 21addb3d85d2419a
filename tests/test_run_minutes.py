"""ingest/derived/run_minutes.py: every run's GPU minutes, the seconds runs held each GPU minute,
the per-run GPU days and the per-run energy, stored by a full refresh and by the incremental
update (the same statements over the runs a load changed), against plain Python over the same
runs and GPU minutes."""
from __future__ import annotations

import math
import random
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from importlib import resources

import duckdb
import pytest

from ingest.derived import run_minutes

T0 = datetime(2026, 9, 14, 23, 50, tzinfo=timezone.utc)  # ten minutes before a UTC midnight
MINUTE = timedelta(minutes=1)
U = {("h1", 0): "GPU-a", ("h1", 1): "GPU-b", ("h2", 0): "GPU-c"}


def schema() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute(resources.files("ingest").joinpath("schema.sql").read_text())
    return con


# run_id, kind, host, gpu_indices, gpu_uuids, gpu_count, start (min after T0), end, examples,
# and the GPUs it holds with their share, stated by hand from run_gpus_of's rules
RUNS = [
    ("r1", "runs", "h1", [0], None, None, 0.5, 14.25, 1000, {("h1", 0): 1.0}),   # by host and index, past midnight
    ("r2", "runs", "h1", [0, 1], None, None, 3.0, 6.5, None, {("h1", 0): 1.0, ("h1", 1): 1.0}),  # shares GPU 0 with r1
    ("r3", "runs", "elsewhere", [7], ["GPU-c"], None, 2.2, 9.0, 50, {("h2", 0): 1.0}),  # by uuid
    # a tracker run naming its host only, one GPU of h1's two traced ones: half of each
    ("r4", "mlflow", "h1", None, None, 1, 8.0, 12.0, None, {("h1", 0): 0.5, ("h1", 1): 0.5}),
    ("r5", "runs", "h1", [1], None, None, 5.0, 5.0, None, {}),   # no span: no minutes
    ("r6", "runs", "h1", [1], None, None, 4.0, None, None, {}),  # not ended: no minutes
    ("r7", "runs", "h3", [0], None, None, 0.0, 10.0, None, {}),  # an untraced GPU
]


def gpu_minutes(seed: int) -> list[tuple]:
    """(host, gpu_index, minute, gpu_name, coverage_s, util_pct_mean, energy_kwh, energy_s) for
    minutes -2..15 of each traced GPU, some readings missing, a few minutes untraced."""
    rng = random.Random(seed)
    rows = []
    for (host, index) in U:
        for m in range(-2, 16):
            if rng.random() < 0.1:
                continue  # no samples that minute
            name = rng.choice(["NVIDIA A100", "NVIDIA H100", None])
            util = None if rng.random() < 0.2 else rng.uniform(0, 100)
            energy = None if rng.random() < 0.2 else rng.uniform(0.001, 0.01)
            rows.append((host, index, T0 + m * MINUTE, name, rng.uniform(10, 60), util, energy,
                         0.0 if energy is None else rng.uniform(10, 60)))
    return rows


def load(con: duckdb.DuckDBPyConnection, minutes: list[tuple], runs: list[tuple] = RUNS) -> None:
    for run_id, kind, host, indices, uuids, count, start, end, examples, _ in runs:
        started = T0 + start * MINUTE
        ended = None if end is None else T0 + end * MINUTE
        con.execute("INSERT INTO runs (run_id, source_kind, host, gpu_indices, gpu_uuids, gpu_count, started_at, "
                    "ended_at, duration_s, examples, load_id, source_line) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, 1)",
                    [run_id, kind, host, indices, uuids, count, started, ended,
                     None if ended is None else (ended - started).total_seconds(), examples])
    for host, index, minute, name, coverage, util, energy, energy_s in minutes:
        con.execute("INSERT INTO gpu_minutes (host, gpu_index, minute, gpu_uuid, gpu_name, coverage_s, energy_s, "
                    "energy_kwh, idle_s, busy_s, util_pct_mean) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, 0, ?)",
                    [host, index, minute, U[(host, index)], name, coverage, energy_s, energy, util])


def expected(minutes: list[tuple], runs: list[tuple] = RUNS) -> dict:
    """The four tables by plain Python: each run's seconds in each minute of each GPU it holds."""
    by_minute = {(h, i, m): (name, cov, util, kwh, es) for h, i, m, name, cov, util, kwh, es in minutes}
    time, held = {}, defaultdict(float)
    for run_id, _, _, _, _, _, start, end, _, gpus in runs:
        if end is None or end <= start:
            continue
        began, ended = T0 + start * MINUTE, T0 + end * MINUTE
        for gpu, weight in gpus.items():
            minute = began.replace(second=0, microsecond=0)
            while minute < ended:
                seconds = (min(ended, minute + MINUTE) - max(began, minute)).total_seconds() * weight
                time[(run_id, *gpu, minute)] = seconds
                held[(*gpu, minute)] += seconds
                minute += MINUTE
    days, energy = defaultdict(lambda: [None, None, 0.0, 0.0]), {}
    for (run_id, host, index, minute), run_s in time.items():
        if (host, index, minute) not in by_minute:
            continue
        name, cov, util, kwh, es = by_minute[(host, index, minute)]
        e = energy.setdefault(run_id, [set(), None, 0.0])
        e[0].add((host, index))
        if kwh is not None:
            e[1] = (e[1] or 0.0) + kwh * run_s / max(60, held[(host, index, minute)])
        e[2] += es * run_s / 60
        if util is None:
            continue
        day = days[(run_id, host, index, minute.date())]
        if name is not None and (day[1] is None or minute > day[1]):
            day[0], day[1] = name, minute
        day[2] += cov * run_s / 60
        day[3] += util * cov * run_s / 60
    return {"time": time, "held": dict(held), "days": dict(days), "energy": energy}


def close(a, b) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and math.isclose(a, b, rel_tol=1e-12))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_one_pass_refresh_stores_what_plain_python_computes(seed: int) -> None:
    con = schema()
    minutes = gpu_minutes(seed)
    load(con, minutes)
    run_minutes.store_all(con)
    assert_stored(con, expected(minutes), RUNS)
    assert {"r1", "r2", "r3", "r4"} == {r for (r,) in con.execute("SELECT DISTINCT run_id FROM run_gpu_time").fetchall()}
    assert con.execute("SELECT max(held_s) FROM gpu_minutes_allocated").fetchone()[0] > 60  # r1, r2, r4 share
    # nothing left behind in the caller's connection
    assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE temporary").fetchone()[0] == 0


# r2 ends later (more minutes shared with r1 and r4), r3 goes: the incremental update redoes them
CHANGED = [("r2", "runs", "h1", [0, 1], None, None, 3.0, 11.5, None, {("h1", 0): 1.0, ("h1", 1): 1.0}),
           *[run for run in RUNS if run[0] not in ("r2", "r3")]]


@pytest.mark.parametrize("seed", [4, 5])
def test_the_incremental_update_stores_what_plain_python_computes(seed: int, monkeypatch: pytest.MonkeyPatch
                                                                  ) -> None:
    """The same statements over the runs a load changed (derived.update_run_energy): runs sharing
    a minute with them get their share of its energy again, the others keep theirs."""
    from ingest.derived import derived

    con = schema()
    minutes = gpu_minutes(seed)
    load(con, minutes)
    run_minutes.store_all(con)
    con.execute("DELETE FROM runs WHERE run_id IN ('r2', 'r3')")
    load(con, [], CHANGED[:1])
    con.execute("CREATE TEMP TABLE changed_runs AS SELECT unnest(['r2', 'r3']) AS run_id")
    monkeypatch.setattr(derived, "FULL_REFRESH_SHARE", 1.0)  # 2 runs of 6: not everything again
    monkeypatch.setattr(derived, "refresh_run_energy", None)
    derived.update_run_energy(con, runs=True, gpus=False)
    assert_stored(con, expected(minutes, CHANGED), CHANGED)
    assert not con.execute("SELECT count(*) FROM duckdb_tables() WHERE temporary AND table_name LIKE 'rm_%'"
                           ).fetchone()[0]


def assert_stored(con: duckdb.DuckDBPyConnection, want: dict, runs: list[tuple]) -> None:
    """The four stored tables hold the rows of `want` (expected()) for `runs`."""
    got = {(r, h, i, m): s for r, h, i, m, s in con.execute("SELECT * FROM run_gpu_time").fetchall()}
    assert got.keys() == want["time"].keys()
    assert all(close(got[k], want["time"][k]) for k in got)

    got = {(h, i, m): s for h, i, m, s in con.execute("SELECT * FROM gpu_minutes_allocated").fetchall()}
    assert got.keys() == want["held"].keys() and all(close(got[k], want["held"][k]) for k in got)

    rows = con.execute("SELECT run_id, host, gpu_index, day, gpu_name, gpu_name_at, run_gpu_s, util_pct_s "
                       "FROM run_gpu_days").fetchall()
    got = {tuple(row[:4]): row[4:] for row in rows}
    assert got.keys() == want["days"].keys()
    assert len({k[3] for k in got}) == 2  # both sides of midnight
    for key, (name, name_at, run_gpu_s, util_pct_s) in got.items():
        w_name, w_at, w_run, w_util = want["days"][key]
        assert (name, name_at) == (w_name, w_at), key
        assert close(run_gpu_s, w_run) and close(util_pct_s, w_util), key

    rows = con.execute("SELECT * FROM run_gpu_energy").fetchall()
    assert {row[0] for row in rows} == set(want["energy"])
    named = {run_id: (len(uuids or []) or len(indices or []) or count) for run_id, _, _, indices, uuids, count, *_
             in runs}
    spans = {run_id: ((end - start) * 60, examples) for run_id, _, _, _, _, _, start, end, examples, _ in runs
             if end is not None}
    for run_id, gpus_traced, kwh, energy_s, coverage_pct, wh_per_1k in rows:
        w_gpus, w_kwh, w_s = want["energy"][run_id]
        duration_s, examples = spans[run_id]
        assert gpus_traced == len(w_gpus)
        assert close(kwh, w_kwh) and close(energy_s, w_s)
        assert close(coverage_pct, 100.0 * w_s / (duration_s * (named[run_id] or len(w_gpus))))
        assert close(wh_per_1k, w_kwh * 1e6 / examples if examples and w_kwh is not None else None)
