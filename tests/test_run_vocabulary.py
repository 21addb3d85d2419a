"""Run fields in the seed documents' own spelling load as the fields they name (issue 21): aliases,
the seed's measures kept as tags in their unit, other fields kept as tags and named in the summary,
a run without a cost says why. Expected values are computed here from the record's own numbers."""
from __future__ import annotations

import json
from decimal import Decimal

import duckdb

from ingest.pipeline import loader
from tests.run_cases import write
from tests.test_runs_staged import stage

START, END = "2026-11-01T00:00:00Z", "2026-11-01T02:00:00Z"
SEED_SPELLED = {"run_id": "a1", "project": "vision", "start_time": START, "end_time": END, "price_per_hour": 2.0,
                "tokens_per_sec": 1500, "gpu_utilization_percent": 37, "best_val_metric": 0.91, "avg_mem_util": 55.5,
                "average_power_watts": 300, "batch_size": 256, "epochs": 3, "optimizer": "adamw",
                "lr_schedule": {"kind": "cosine"}}
NO_PRICE = {"run_id": "a2", "project": "vision", "start_time": START, "duration_hours": 1.5, "instance_type": "no-such-box"}
DISAGREE = {"run_id": "a3", "project": "vision", "start_time": START, "duration_hours": 1.5,
            "price_per_hour": 2.0, "price_per_hour_usd": 3.0}


def _load(tmp_path, monkeypatch, records):
    monkeypatch.setenv("MLCOST_DB", str(tmp_path / "w.duckdb"))
    path = write(tmp_path / "runs.jsonl", [json.dumps(r) for r in records])
    (summary,) = [s for _, s in loader.ingest_paths([str(path)])]
    con = duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True)
    try:
        rows = {r[0]: r for r in con.execute(
            "SELECT run_id, cost_usd, cost_source, price_per_hour_usd, val_metric, energy_kwh, flags, tags "
            "FROM runs").fetchall()}
    finally:
        con.close()
    return path, summary, rows


def test_seed_spellings_load_as_the_fields_they_name(tmp_path, monkeypatch):
    path, summary, rows = _load(tmp_path, monkeypatch, [SEED_SPELLED, NO_PRICE, DISAGREE])
    hours = 2  # END - START
    run = rows["a1"]
    assert run[1] == Decimal("2.0") * hours and run[2] == "derived" and run[3] == Decimal("2.0")
    assert run[4] == 0.91
    assert abs(run[5] - 300 * hours / 1000) < 1e-12  # the seed: energy = average_power_watts x duration_hours
    assert any("average_power_watts" in flag for flag in run[6])
    assert run[7] == {"throughput_tokens_per_s": "1500", "gpu_util_pct": "37", "mem_util_pct": "55.5",
                      "average_power_w": "300", "batch_size": "256", "epochs": "3", "optimizer": "adamw",
                      "lr_schedule": json.dumps({"kind": "cosine"})}
    # a run the catalog cannot price says why; the other fields' spelling is named once in the summary
    assert rows["a2"][1] is None and rows["a2"][6] == [
        "no cost: neither estimated_cost_usd nor price_per_hour_usd is given, and the price catalog has no price "
        "for instance_type 'no-such-box'"]
    assert summary.warnings == ["fields not recognised, kept as the runs' tags: lr_schedule, optimizer"]
    # an alias that disagrees with the field it names is a reject with both values, not a silent choice
    assert "a3" not in rows and [(r["line"], r["reason"]) for r in summary.rejects] == [
        (3, "price_per_hour 2.0 and price_per_hour_usd 3.0 disagree")]
    assert (summary.rows_loaded, summary.rows_rejected) == (2, 1)


def test_records_in_the_vocabulary_stay_in_sql_and_others_go_to_the_reader(tmp_path, monkeypatch):
    plain = {k: v for k, v in SEED_SPELLED.items() if k in ("run_id", "project", "start_time", "end_time")}
    plain["price_per_hour_usd"] = 2.0
    lines = [json.dumps(plain), json.dumps({**plain, "run_id": "b", "batch_size": 64}),
             json.dumps({**plain, "run_id": "c", "price_per_hour": 2.0})]
    runs, rejects, by_reader, _ = stage(write(tmp_path / "runs.jsonl", lines), monkeypatch)
    assert by_reader == [2, 3] and rejects == []
    assert runs["b"]["tags"] == {"batch_size": "64"} and runs["a1"]["tags"] is None
    assert runs["a1"]["cost_usd"] == runs["b"]["cost_usd"] == runs["c"]["cost_usd"] == Decimal("2.0") * 2
