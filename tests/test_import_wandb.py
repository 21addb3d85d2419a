"""W&B runs from the UI's runs-table CSV export and from local run folders; no network."""
from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

from ingest.engine import warehouse as wh
from ingest.pipeline import loader
from mlcost import cli

HEADER = ["Name", "State", "Notes", "User", "Tags", "Created", "Runtime", "Sweep", "GPU Type", "GPU Count",
          "batch_size", "instance_type", "lr", "optimizer", "val_loss", "train_loss", "energy_consumed"]
ROWS = [
    ["fluent-sun-12", "finished", "baseline\nsecond line of notes", "alice", "baseline, v2",
     "2025-11-20T10:00:00.000Z", "5400", "", "NVIDIA A10G", "1", "64", "g5.xlarge", "0.0003", "adamw",
     "0.412", "0.38", "0.9"],
    ["bright-moon-13", "crashed", "", "bob", "", "2025-11-20T12:00:00.000Z", "600", "sw1", "NVIDIA A10G",
     "4", "32", "", "0.001", "sgd", "", "", ""],
    ["odd-run", "finished", "", "bob", "", "yesterday", "60", "", "", "", "", "", "", "", "", "", ""],
    ["still-going", "running", "", "carol", "", "2025-11-21T08:00:00.000Z", "120", "", "", "", "", "", "",
     "", "", "", ""],
]


def export(tmp_path: Path) -> Path:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(HEADER)
    writer.writerows(ROWS)
    path = tmp_path / "wandb_export_2025-11-22T09_00_00.000+01_00.csv"
    path.write_text(buffer.getvalue())
    return path


def runs() -> dict[str, dict]:
    frame = wh.query_exact("SELECT run_id, owner, status, started_at, ended_at, duration_s, gpu_type, gpu_count, "
                           "instance_type, cost_usd, cost_source, val_metric, val_metric_name, energy_kwh, "
                           "source_kind, source_line, host FROM runs")
    return {row["run_id"]: row for row in frame.to_dict("records")}


def test_runs_table_export_is_detected_and_mapped(warehouse, tmp_path):
    path = export(tmp_path)
    summary = loader.ingest_file(path)
    assert (summary.kind, summary.rows_loaded, summary.rows_rejected) == ("wandb", 3, 1)
    # the header is line 1; fluent-sun's notes span lines 2-3, so odd-run starts on line 5
    assert summary.rejects == [{"line": 5, "reason": "Created 'yesterday' is not an ISO-8601 timestamp or "
                                                     "epoch seconds"}]
    got = runs()
    sun = got["wandb-fluent-sun-12"]
    started = datetime(2025, 11, 20, 10, 0, tzinfo=timezone.utc)
    assert (sun["owner"], sun["status"], sun["started_at"], sun["duration_s"]) == ("alice", "completed", started, 5400.0)
    assert (sun["gpu_type"], sun["gpu_count"], sun["instance_type"]) == ("NVIDIA A10G", 1, "g5.xlarge")
    # 1.5 h of a g5.xlarge at the catalog's 1.006 USD/h
    assert sun["cost_usd"] == Decimal("1.006") * Decimal("1.5") and sun["cost_source"] == "catalog"
    assert (sun["val_metric_name"], sun["val_metric"], sun["energy_kwh"]) == ("val_loss", 0.412, 0.9)
    assert sun["source_line"] == 2
    moon = got["wandb-bright-moon-13"]
    # no instance type: 4 x A10G at the catalog's 1.006 USD per GPU-hour x 600 s
    assert moon["status"] == "failed" and moon["cost_usd"] == (Decimal("1.006") * 4 * 600 / 3600).quantize(Decimal("0.000001"))
    assert got["wandb-still-going"]["status"] == "running" and got["wandb-still-going"]["ended_at"] is None


def run_folder(root: Path, name: str, metadata: dict | None, summary: dict | None, config: str | None) -> None:
    files = root / name / "files"
    files.mkdir(parents=True)
    if metadata is not None:
        (files / "wandb-metadata.json").write_text(json.dumps(metadata))
    if summary is not None:
        (files / "wandb-summary.json").write_text(json.dumps(summary))
    if config is not None:
        (files / "config.yaml").write_text(config)


def test_local_run_folders(warehouse, tmp_path, capsys):
    root = tmp_path / "wandb"
    run_folder(root, "run-20251120_100000-abc123",
               {"host": "gpu-node-7", "startedAt": "2025-11-20T10:00:00.000000Z", "gpu": "NVIDIA A100-SXM4-40GB",
                "gpu_count": 8, "username": "alice",
                "gpu_nvidia": [{"name": "NVIDIA A100-SXM4-40GB", "uuid": "GPU-aaa"}, {"name": "NVIDIA A100-SXM4-40GB",
                                                                                      "uuid": "GPU-bbb"}]},
               {"_runtime": 7200.5, "_step": 900, "eval/accuracy": 0.91, "loss": 0.2, "_timestamp": 1763640000},
               "wandb_version: 1\n_wandb:\n  desc: null\n  value:\n    cli_version: 0.18.0\n"
               "lr:\n  desc: null\n  value: 0.0001\nproject:\n  desc: null\n  value: vision\n"
               "price_per_hour_usd:\n  desc: null\n  value: '32.77'\n")
    run_folder(root, "run-20251120_110000-def456", {"startedAt": "not a time"}, {}, None)
    run_folder(root, "run-20251120_120000-ghi789", {"startedAt": "2025-11-20T12:00:00"}, None, "{broken: [")
    code = cli.main(["import", "wandb", str(root), "--json"])
    (summary,) = json.loads(capsys.readouterr().out)
    assert code == 1 and (summary["kind"], summary["rows_loaded"], summary["rows_rejected"]) == ("wandb", 1, 2)
    assert any("startedAt 'not a time'" in r["reason"] for r in summary["rejects"])
    assert any("config.yaml cannot be read as YAML" in r["reason"] for r in summary["rejects"])
    run = runs()["abc123"]
    assert (run["host"], run["owner"], run["gpu_type"], run["gpu_count"]) == (
        "gpu-node-7", "alice", "NVIDIA A100-SXM4-40GB", 8)
    assert run["duration_s"] == 7200.5 and run["val_metric_name"] == "eval/accuracy" and run["val_metric"] == 0.91
    # a logged price: 32.77 USD/h x 7200.5 s
    assert run["cost_source"] == "derived" and run["cost_usd"] == (Decimal("32.77") * Decimal("7200.5") / 3600).quantize(
        Decimal("0.000001"))
    project, uuids = wh.query("SELECT project, gpu_uuids FROM runs WHERE run_id = 'abc123'").values[0]
    assert project == "vision" and list(uuids) == ["GPU-aaa", "GPU-bbb"]
    assert cli.main(["import", "wandb", str(root), "--json"]) == 0  # nothing new: as `mlcost ingest` says
    assert json.loads(capsys.readouterr().out)[0]["status"] == "already_loaded"
    assert cli.main(["import", "wandb", str(tmp_path / "nothing")]) == 1


def test_data_page_lists_each_import_source_and_its_last_import(warehouse, tmp_path):
    from tests.test_pages import open_page

    path = export(tmp_path)
    assert cli.main(["import", "wandb", str(path)]) == 1  # one row is rejected
    at = open_page("Data")
    sources = at.dataframe[0].value
    assert sources[["source", "kind", "imports", "last_rows_loaded", "last_rows_rejected"]].values.tolist() == [
        ["wandb files", "wandb", 1, 3, 1]]
    loaded_at = wh.query("SELECT loaded_at FROM loads")["loaded_at"][0]
    assert sources["last_import"][0] == loaded_at
