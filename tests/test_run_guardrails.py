"""Run guardrails (issue 22; seed 000: "any single run above $Y should be rare and intentional", seed
001: per-run budgets in dollars and GPU-hours, a maximum wall-clock per job): a run over its project's
or the global limit alerts once, naming the run, its owner and its figures; a second check fires
nothing new. Figures are worked out here from the runs written by the test."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from decimal import Decimal

from tests.conftest import REPO_ROOT
from tests.slack_server import slack_stand_in

START = datetime(2026, 11, 20, 8, tzinfo=timezone.utc)
RUNS = [  # run, project, owner, hours, GPUs, USD per hour (the run's cost = hours x price)
    ("big-sweep", "nlp", "ana", 10, 8, "150"),     # $1,500 > $1,000 global ceiling; 80 GPU-h > 64
    ("long-one", "nlp", "ben", 50, 1, "2"),        # $100, 50 h > 48 h maximum
    ("vision-mid", "vision", "cy", 5, 2, "60"),    # $300 > vision's own $250 ceiling, not the global one
    ("vision-ok", "vision", None, 2, 1, "10"),     # $20: under everything
    ("old-big", "nlp", "dee", 10, 8, "150"),       # over, but started before the 30-day lookback
]
CONFIG = """
[alerts]
run_max_cost_usd = 1000
run_max_hours = 48
run_max_gpu_hours = 64
[alerts.run_limits.vision]
run_max_cost_usd = 250
"""


def _write_runs(path):
    lines = []
    for run, project, owner, hours, gpus, price in RUNS:
        start = START - timedelta(days=60) if run == "old-big" else START
        record = {"run_id": run, "project": project, "start_time": start.isoformat(),
                  "end_time": (start + timedelta(hours=hours)).isoformat(), "gpu_count": gpus,
                  "price_per_hour_usd": float(price), "status": "completed"}
        if owner:
            record["owner"] = owner
        lines.append(json.dumps(record))
    path.write_text("\n".join(lines) + "\n")


def _check(env: dict) -> dict:
    done = subprocess.run([sys.executable, "-m", "mlcost", "alerts", "check", "--as-of", "2026-11-25", "--json"],
                          env=env, capture_output=True, text=True, timeout=600, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_runs_over_a_guardrail_alert_once_naming_the_run_owner_and_figures(tmp_path):
    runs, settings = tmp_path / "runs.jsonl", tmp_path / "mlcost.toml"
    _write_runs(runs)
    settings.write_text(CONFIG)
    env = {**os.environ, "MLCOST_DB": str(tmp_path / "w.duckdb"), "MLCOST_CONFIG": str(settings)}
    subprocess.run([sys.executable, "-m", "mlcost", "ingest", str(runs)], env=env, check=True, cwd=REPO_ROOT,
                   capture_output=True)
    with slack_stand_in() as slack:
        env["MLCOST_SLACK_WEBHOOK_URL"] = slack.url("/services/default")
        first = _check(env)
        posts = [p["body"]["text"] for p in slack.posts if p["status"] == 200]
        second = _check(env)
        assert len([p for p in slack.posts if p["status"] == 200]) == len(posts)  # nothing new
    guard = sorted(key for key in first["new"] if key.startswith("run_guardrail|"))
    assert guard == ["run_guardrail|big-sweep|cost+gpu_hours|2026-11-20", "run_guardrail|long-one|hours|2026-11-20",
                     "run_guardrail|vision-mid|cost|2026-11-20"]
    assert not [key for key in second["new"] if key.startswith("run_guardrail|")]
    by_run = {run: next(p for p in posts if f"Run {run} of project" in p) for run in ("big-sweep", "long-one", "vision-mid")}
    cost = {run: Decimal(price) * hours for run, _, _, hours, _, price in RUNS}
    assert f"owner ana" in by_run["big-sweep"]
    assert f"it cost ${cost['big-sweep']:,.2f}, over the $1,000.00 ceiling per run" in by_run["big-sweep"]
    assert f"it used {10 * 8:,.1f} GPU-hours, over the 64 GPU-hours per run" in by_run["big-sweep"]
    assert "it ran 50.0 wall-clock hours, over the 48 h maximum" in by_run["long-one"]
    assert f"it cost ${cost['vision-mid']:,.2f}, over the $250.00 ceiling per run" in by_run["vision-mid"]
    assert not any("vision-ok" in p or "old-big" in p for p in posts)


def test_guardrail_settings_are_checked(tmp_path, monkeypatch):
    from ingest.settings import config

    settings = tmp_path / "mlcost.toml"
    settings.write_text("[alerts]\n[alerts.run_limits.vision]\nrun_max_costs = 5\n")
    monkeypatch.setenv("MLCOST_CONFIG", str(settings))
    try:
        config.load()
    except config.ConfigError as error:
        assert "alerts.run_limits.vision.run_max_costs" in str(error)
    else:
        raise AssertionError("an unknown guardrail key loaded")
    settings.write_text(CONFIG)
    loaded = config.load().alerts
    assert loaded.limits_of("vision").max_cost_usd == Decimal("250") and loaded.limits_of("vision").max_hours == 48
    assert loaded.limits_of("nlp").max_cost_usd == Decimal("1000")
