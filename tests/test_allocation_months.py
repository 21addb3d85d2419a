"""Which months of the stored allocation a trace load redoes (derived.update_allocation): GPU data
reaches only the node rule, so a load that redoes runs' GPU time redoes the months with lines
naming a traced host, not a month where those runs only have run-tagged lines; and what is stored
stays what a full refresh stores."""
from __future__ import annotations

from pathlib import Path

import pytest

from ingest.derived import derived
from ingest.engine import warehouse as wh
from ingest.pipeline import loader
from tests.test_derived import assert_as_from_scratch, bill, jsonl, run, trace


def test_a_trace_load_redoes_only_the_months_with_node_lines(tmp_path: Path, warehouse: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(derived, "FULL_REFRESH_SHARE", float("inf"))  # the incremental path
    redone: list[set] = []
    store = derived._store_months

    def recorded(con, rule) -> None:
        redone.append({str(month) for (month,) in con.execute("SELECT month FROM allocation_redo").fetchall()})
        store(con, rule)

    monkeypatch.setattr(derived, "_store_months", recorded)
    files = {
        "runs": jsonl(tmp_path / "runs.jsonl", [run("ra", 10, 100, host="h1", gpu_indices=[0]),
                                                run("rb", 20, 90, host="h1", gpu_indices=[1])]),
        "bill": bill(tmp_path / "bill.csv", [
            ("node-sep", 0, 120, "Usage", "h1", {}),                       # September: a traced node's hours
            ("ra-oct", "2026-10-02T00:00:00Z", "2026-10-02T01:00:00Z", "Usage", "res-9", {"run_id": "ra"}),
            ("rb-nov", "2026-11-02T00:00:00Z", "2026-11-02T01:00:00Z", "Usage", "res-9", {"run_id": "rb"}),
        ]),
        "early": trace(tmp_path / "early.csv", "h1", {0: "GPU-0", 1: "GPU-1"}, 0, 60, 200),
        "late": trace(tmp_path / "late.csv", "h1", {0: "GPU-0", 1: "GPU-1"}, 60, 120, 250),
    }
    for name in ("runs", "bill"):
        assert loader.ingest_file(files[name]).status == "loaded"
    months = wh.query("SELECT DISTINCT month FROM bill_allocation_days")["month"].astype(str)
    assert set(months) == {"2026-09-01", "2026-10-01", "2026-11-01"}
    for name in ("early", "late"):  # GPUs newly traced, then more minutes of the same GPUs
        redone.clear()
        assert loader.ingest_file(files[name]).status == "loaded"
        assert set().union(*redone) == {"2026-09-01"}, name  # ra's and rb's GPU time changed
        assert_as_from_scratch(warehouse, tmp_path, f"after {name}")
    # the node line is split between ra, rb and the idle GPUs; the other months keep their run lines
    days = wh.query("SELECT month, bucket, rule, run_id FROM bill_allocation_days")
    assert set(days[days["month"].astype(str) == "2026-09-01"]["run_id"].dropna()) == {"ra", "rb"}
    assert set(days[days["month"].astype(str) != "2026-09-01"]["rule"]) == {"run tag"}

    # runs loaded again (their own rows changed): every month with their lines or pieces
    redone.clear()
    again = jsonl(tmp_path / "again.jsonl", [run("ra", 15, 100, host="h1", gpu_indices=[0])])
    assert loader.ingest_file(again).status == "loaded"
    assert set().union(*redone) == {"2026-09-01", "2026-10-01"}
    assert_as_from_scratch(warehouse, tmp_path, "after the runs again")
