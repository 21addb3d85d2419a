"""What loads store for pages to read (per-run GPU energy, each bill line's run) equals what the
live views compute, and follows the data when runs are loaded again."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ingest import loader
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
