"""The quick start as a new user runs it, through real `mlcost` processes in an empty folder:
`mlcost demo` (without the dashboard), `mlcost report`, `mlcost alerts check` with the one webhook
variable the quick start sets (a real HTTP server on 127.0.0.1 stands in for Slack), and
`mlcost ingest sample_data`, which loads the sample and skips its answer key.

Expected figures come from the sample's bill CSVs read with csv and Decimal.
"""
from __future__ import annotations

import csv
import gzip
import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, SAMPLE_DIR
from tests.slack_server import slack_stand_in

AS_OF = "2026-11-25"  # spend counted through the bill's last day, Nov 21, whatever today is


def november_billed() -> Decimal:
    """Σ BilledCost of the sample's lines whose charge period starts in November (to Nov 21)."""
    total = Decimal(0)
    for path in sorted((SAMPLE_DIR / "billing").glob("focus_*.csv.gz")):
        with gzip.open(path, "rt", newline="") as handle:
            total += sum((Decimal(r["BilledCost"]) for r in csv.DictReader(handle)
                          if r["ChargePeriodStart"].startswith("2026-11")), Decimal(0))
    return total


def sample_data_files() -> list[Path]:
    return sorted(p for p in SAMPLE_DIR.rglob("*") if p.is_file() and p.name.endswith((".jsonl", ".gz")))


@pytest.fixture
def folder(tmp_path: Path) -> tuple[Path, dict]:
    """An empty working folder and an environment as a new user's: no settings, warehouse or
    webhook of ours (HOME too, so no ~/.streamlit/secrets.toml is read)."""
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("MLCOST_", "STREAMLIT_"))}
    env.update(HOME=str(tmp_path), PYTHONPATH=str(REPO_ROOT))
    work = tmp_path / "work"
    work.mkdir()
    return work, env


def mlcost(folder: Path, env: dict, *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mlcost", *args], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=timeout_s)


def test_demo_then_report_then_alerts_check_with_one_webhook(folder):
    work, env = folder
    demo = mlcost(work, env, "demo", "--no-dashboard")
    assert demo.returncode == 0, demo.stderr
    assert (work / "mlcost.toml").read_text() == (SAMPLE_DIR / "mlcost.toml").read_text()
    assert (work / "mlcost.duckdb").is_file()
    assert "REJECTED" not in demo.stdout and "FAILED" not in demo.stdout, demo.stdout
    assert f"November 2026 to date (Nov 1-21): billed ${november_billed():,.2f}" in demo.stdout  # the first answer

    report = mlcost(work, env, "report")
    assert report.returncode == 0, report.stderr
    assert f"${november_billed():,.2f}" in report.stdout  # the month's charges, Nov 1-21

    with slack_stand_in() as slack:
        check = mlcost(work, {**env, "MLCOST_SLACK_WEBHOOK_URL": slack.url()},
                       "alerts", "check", "--as-of", AS_OF, "--json")
        assert check.returncode == 0, check.stderr
        result = json.loads(check.stdout)
        assert result["failed"] == [] and result["delivered"], result
        assert len(slack.posts) == len(result["delivered"]) and {p["status"] for p in slack.posts} == {200}
        # the genai budget names a channel without a webhook of its own: its alerts came to the
        # default webhook, saying so, and the check told the user how to give it one
        assert [r["channel"] for r in result["rerouted"]] == ["genai"]
        assert "MLCOST_SLACK_WEBHOOK_URL_GENAI" in check.stderr
        genai = [t for t in slack.texts() if "genai team" in t]
        assert genai and all("Meant for the genai channel" in t for t in genai)
        org = [t for t in slack.texts() if t.startswith("mlcost: ML org")]
        assert org and all(f"${november_billed():,.2f}" in t for t in org), org

        again = mlcost(work, {**env, "MLCOST_SLACK_WEBHOOK_URL": slack.url()}, "alerts", "check", "--as-of", AS_OF)
        assert again.returncode == 0, again.stderr
        assert len(slack.posts) == len(result["delivered"])  # nothing is posted twice
    # and as the README writes it: today's date, no --as-of
    with slack_stand_in() as slack:
        today = mlcost(work, {**env, "MLCOST_SLACK_WEBHOOK_URL": slack.url()}, "alerts", "check")
        assert today.returncode == 0, today.stderr


def test_without_any_webhook_the_check_says_which_variable_to_set(folder):
    work, env = folder
    assert mlcost(work, env, "demo", "--no-dashboard").returncode == 0
    check = mlcost(work, env, "alerts", "check", "--as-of", AS_OF)
    assert check.returncode == 1
    assert "set MLCOST_SLACK_WEBHOOK_URL or webhook_url under [slack]" in check.stderr


def test_ingest_of_the_sample_folder_loads_the_sample_and_skips_the_answer_key(folder):
    work, env = folder
    done = mlcost(work, env, "ingest", str(SAMPLE_DIR), "--json")
    assert done.returncode == 0, done.stderr
    summaries = {Path(s["path"]).relative_to(SAMPLE_DIR).as_posix(): s for s in json.loads(done.stdout)}
    assert summaries.pop("truth.json")["status"] == "not_data"
    assert sorted(summaries) == [p.relative_to(SAMPLE_DIR).as_posix() for p in sample_data_files()]
    assert {s["status"] for s in summaries.values()} == {"loaded"}
    bills = [s for s in summaries.values() if s["kind"] == "billing_focus"]
    lines = 0
    for path in sorted((SAMPLE_DIR / "billing").glob("focus_*.csv.gz")):
        with gzip.open(path, "rt", newline="") as handle:
            lines += sum(1 for _ in csv.DictReader(handle))
    assert sum(s["rows_loaded"] for s in bills) == lines
    text = mlcost(work, env, "ingest", str(SAMPLE_DIR))
    assert text.returncode == 0
    assert f"SKIPPED {SAMPLE_DIR / 'truth.json'}: declared not data by {SAMPLE_DIR / '.mlcostignore'}" in text.stdout


def test_a_file_named_on_its_own_is_read_even_when_its_folder_lists_it(tmp_path, warehouse):
    from ingest.pipeline import loader

    (tmp_path / "data").mkdir()
    run = {"run_id": "r1", "start_time": "2026-11-01T00:00:00Z", "duration_hours": 1, "price_per_hour_usd": 2}
    (tmp_path / "data" / "runs.jsonl").write_text(json.dumps(run) + "\n")
    (tmp_path / "data" / "answers").mkdir()
    (tmp_path / "data" / "answers" / "key.json").write_text("{}\n")
    (tmp_path / "data" / ".mlcostignore").write_text("# not data\n\nanswers/*.json\n")
    files, notes = loader.expand([str(tmp_path / "data")])
    assert files == [tmp_path / "data" / "runs.jsonl"]
    assert [(n.path, n.status, n.ok) for n in notes] == [(str(tmp_path / "data" / "answers" / "key.json"),
                                                          "not_data", True)]
    files, notes = loader.expand([str(tmp_path / "data" / "answers" / "key.json")])
    assert files == [tmp_path / "data" / "answers" / "key.json"] and notes == []
