"""What loads store for pages to read (per-run GPU energy, each bill line's run) equals what the
live views compute, and follows the data when runs are loaded again."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from ingest import config, derived, gpu_rollups, loader
from ingest import warehouse as wh


def frames_equal(stored: str, live: str, key: str) -> None:
    left = wh.query(f"SELECT * FROM {stored} ORDER BY ALL").reset_index(drop=True)
    right = wh.query(f"SELECT * FROM {live} ORDER BY ALL").reset_index(drop=True)
    assert len(left) > 0
    pd.testing.assert_frame_equal(left, right, check_dtype=False)
    assert left[key].is_unique


def test_stored_energy_and_bill_matches_equal_the_live_views(demo_warehouse: Path, tmp_path: Path) -> None:
    frames_equal("run_gpu_energy", "run_energy_live", "run_id")
    frames_equal("billing_line_runs", "billing_run_lines_live('run_id', 3600.0)", "line_key")
    assert wh.query("SELECT run_id_tag, match_slack_s FROM billing_match_settings").values.tolist() == [["run_id", 3600.0]]

    # a run loaded again without its GPUs and its resource: its energy and its bill lines go
    traced = wh.query("SELECT e.run_id FROM run_gpu_energy e JOIN runs r USING (run_id) "
                      "WHERE r.source_kind = 'runs' ORDER BY e.run_id LIMIT 1")["run_id"][0]
    path = tmp_path / "again.jsonl"
    path.write_text(json.dumps({"run_id": traced, "project": "moved", "start_time": "2026-08-03T08:00:00Z",
                                "duration_hours": 1, "price_per_hour_usd": 1}) + "\n")
    assert loader.ingest_file(path).rows_loaded == 1
    assert traced not in set(wh.query("SELECT run_id FROM run_gpu_energy")["run_id"])
    frames_equal("run_gpu_energy", "run_energy_live", "run_id")
    frames_equal("billing_line_runs", "billing_run_lines_live('run_id', 3600.0)", "line_key")


# --- stored incrementally = computed from scratch -------------------------------------------------
# Small files whose loads reach every path of ingest/derived.py: runs sharing a GPU minute, runs
# matched by uuid and by host and index, a GPU swapped for another (a new uuid on the same
# slot), samples loaded out of order and again over stored ones, runs and bill lines replaced,
# bill lines matched by tag and by resource (two runs competing for one resource), unloads.

DAY = "2026-09-14"
FOCUS_HEADER = ("BilledCost,EffectiveCost,ListCost,BillingCurrency,ChargePeriodStart,ChargePeriodEnd,"
                "ChargeCategory,ChargeDescription,ProviderName,ServiceName,ResourceId,Tags,x_LineItemId")


def at(minutes: float) -> str:
    """The day's UTC time `minutes` after midnight, ISO-8601."""
    hours, rest = divmod(int(minutes * 60), 3600)
    return f"{DAY}T{hours:02d}:{rest // 60:02d}:{rest % 60:02d}Z"


def trace(path: Path, host: str, gpus: dict[int, str], begin_min: float, end_min: float,
          power_w: float, every_s: int = 20) -> Path:
    """A gpu-collector CSV: each GPU (index -> uuid) sampled every `every_s` seconds."""
    lines = ["timestamp,host,gpu_index,gpu_uuid,gpu_name,power_w,energy_mj,gpu_util_pct,mem_used_mib"]
    for step in range(int(begin_min * 60) // every_s, int(end_min * 60) // every_s):
        for index, uuid in gpus.items():
            watts = power_w + 7 * index + (step % 5)
            lines.append(f"{at(step * every_s / 60)},{host},{index},{uuid},NVIDIA A100,{watts},,"
                         f"{(step * 13 + index) % 100},1000")
    path.write_text("\n".join(lines) + "\n")
    return path


def run(run_id: str, begin_min: float, end_min: float, **fields) -> dict:
    return {"run_id": run_id, "project": "p", "start_time": at(begin_min), "end_time": at(end_min),
            "price_per_hour_usd": 2, **fields}


def jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


def bill(path: Path, lines: list[tuple]) -> Path:
    """A FOCUS CSV: (line id, begin minute, end minute, category, resource, tags) each."""
    rows = [FOCUS_HEADER]
    for line_id, begin, end, category, resource, tags in lines:
        tags_text = json.dumps(tags).replace('"', '""')
        rows.append(f'1.5,1.5,1.5,USD,{at(begin)},{at(end)},{category},x,AWS,EC2,{resource},"{tags_text}",{line_id}')
    path.write_text("\n".join(rows) + "\n")
    return path


def fixture_files(folder: Path) -> dict[str, Path]:
    u0, u1, swapped, other = "GPU-u0", "GPU-u1", "GPU-u0-swapped", "GPU-h2-0"
    return {
        "early": trace(folder / "early.csv", "h1", {0: u0, 1: u1}, 0, 120, 200),
        "late": trace(folder / "late.csv", "h1", {0: u0, 1: u1}, 120, 180, 220),
        # GPU 0 of h1 swapped: a new uuid in the same slot from 180 min on
        "swap": trace(folder / "swap.csv", "h1", {0: swapped, 1: u1}, 180, 240, 240),
        # part of the early span again, other readings (replaces the stored samples)
        "again": trace(folder / "again.csv", "h1", {0: u0}, 60, 90, 300),
        "h2": trace(folder / "h2.csv", "h2", {0: other}, 30, 150, 150, every_s=30),
        "runs": jsonl(folder / "runs.jsonl", [
            run("r1", 10, 80, host="h1", gpu_indices=[0], gpu_uuids=[u0], examples=1000),
            run("r2", 60, 200.5, host="h1", gpu_indices=[0, 1]),  # no uuids: by host and index
            run("r3", 170, 235, host="elsewhere", gpu_indices=[7], gpu_uuids=[swapped]),  # by uuid
            run("r4", 29.5, 100, host="h2", gpu_indices=[0], gpu_count=1),
            run("r5", 0, 130, tags={"resource_id": "res-1"}),
            run("r6", 100, 300, tags={"resource_id": "res-1"}),
            run("r7", 0, 60, host="h1", gpu_indices=[1], gpu_uuids=[u1]),
        ]),
        "runs_again": jsonl(folder / "runs_again.jsonl", [
            run("r2", 90, 220.25, host="h1", gpu_indices=[0, 1]),   # moved
            run("r1", 10, 80, host="h1", gpu_indices=[0], gpu_uuids=[swapped]),  # now the swapped GPU
            run("r6", 100, 300, tags={"resource_id": "res-2"}),   # another resource
            run("r8", 110, 170, host="h1", gpu_indices=[1], gpu_uuids=[u1], examples=50),
        ]),
        "bill": bill(folder / "bill.csv", [
            *[(f"res1-{h}", 60 * h, 60 * h + 60, "Usage", "res-1", {}) for h in range(5)],
            *[(f"res2-{h}", 60 * h, 60 * h + 60, "Usage", "res-2", {}) for h in range(5)],
            ("tagged", 0, 60, "Usage", "res-9", {"run_id": "r7"}),
            ("tagged-later", 0, 60, "Usage", "res-9", {"run_id": "r8"}),
            ("credit", 0, 60, "Credit", "res-1", {"run_id": "r5"}),
        ]),
        "bill_again": bill(folder / "bill_again.csv", [
            ("res1-2", 120, 180, "Usage", "res-2", {}),  # the same line id, now another resource
            ("tagged", 0, 60, "Usage", "res-9", {"run_id": "r1"}),
            ("new", 200, 260, "Usage", "res-1", {}),
        ]),
    }


DERIVED = {"run_gpu_time": ("run_id", "host", "gpu_index", "minute"),
           "gpu_minutes_allocated": ("host", "gpu_index", "minute"), "run_gpu_energy": ("run_id",),
           "run_gpu_days": ("run_id", "host", "gpu_index", "day"), "gpu_days": ("host", "gpu_index", "day"),
           "billing_line_runs": ("line_key",)}


def stored(path: Path) -> dict[str, pd.DataFrame]:
    return {table: wh.query(f"SELECT * FROM {table} ORDER BY {', '.join(key)}", path=path).reset_index(drop=True)
            for table, key in DERIVED.items()}


ROLLUPS = {"gpu_minutes": ("host", "gpu_index", "minute"), "gpu_gaps": ("host", "gpu_index", "gap_start")}


def assert_as_from_scratch(path: Path, tmp_path: Path, step: str, rollups: bool = False) -> None:
    """The derived tables of warehouse `path` equal those a full refresh stores in a copy of it;
    with `rollups`, so do the GPU rollups (the copy's computed again from all its samples first)."""
    copy = tmp_path / "scratch.duckdb"
    shutil.copyfile(path, copy)
    with wh.connect(copy) as con:
        con.execute("BEGIN TRANSACTION")
        if rollups:
            db = con.execute("SELECT current_database()").fetchone()[0]
            gpu_rollups.rebuild(con, db, config.load().gpu, gpu_rollups.stored_settings(con, db))
        derived.refresh_run_energy(con)
        derived.refresh_billing_runs(con)
        con.execute("COMMIT")
    incremental, scratch = stored(path), stored(copy)
    if rollups:
        for table, key in ROLLUPS.items():
            order = f"SELECT * FROM {table} ORDER BY {', '.join(key)}"
            pd.testing.assert_frame_equal(wh.query(order, path=path), wh.query(order, path=copy),
                                          check_dtype=False, obj=f"{step}: {table}")
    for table in DERIVED:
        pd.testing.assert_frame_equal(incremental[table], scratch[table], check_dtype=False, obj=f"{step}: {table}")
    copy.unlink()


ORDERS = [
    ["early", "late", "swap", "h2", "runs", "bill", "again", "runs_again", "bill_again"],
    ["runs", "bill", "swap", "again", "late", "early", "h2", "bill_again", "runs_again"],
    ["bill", "runs_again", "h2", "runs", "early", "swap", "bill_again", "late", "again"],
]


@pytest.mark.parametrize("order", ORDERS, ids=["traces first", "runs first", "out of order"])
def test_incremental_derived_tables_equal_a_full_refresh(order: list[str], tmp_path: Path, warehouse: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # these few runs and lines change by more than the share past which a load refreshes all:
    # picking what changed is what is tested here
    monkeypatch.setattr(derived, "FULL_REFRESH_SHARE", float("inf"))
    files = fixture_files(tmp_path)
    load_ids = {}
    for name in order:
        summary = loader.ingest_file(files[name])
        assert summary.status == "loaded" and summary.rows_rejected == 0, summary.to_json()
        load_ids[name] = int(wh.query("SELECT max(load_id) AS id FROM loads")["id"][0])
        assert_as_from_scratch(warehouse, tmp_path, f"after {name}")
    energy = wh.query("SELECT count(*) AS n, count(*) FILTER (WHERE gpu_energy_kwh > 0) AS measured "
                      "FROM run_gpu_energy")
    assert energy["measured"][0] >= 4  # the fixture reaches the energy path, not only empty tables
    assert len(wh.query("SELECT * FROM billing_line_runs WHERE matched_by = 'resource'")) > 0
    # unloads: runs, bill lines, samples (the rollups of the GPUs they were of again), in an order of their own
    for name in ("runs_again", "bill", "again", "runs", "swap", "h2"):
        assert wh.unload(load_ids[name]) is not None
        assert_as_from_scratch(warehouse, tmp_path, f"after unloading {name}", rollups=True)
