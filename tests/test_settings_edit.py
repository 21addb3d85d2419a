"""Budgets and the idle rule edited in the dashboard: written to the settings file the CLI reads
(comments kept), checked like a hand-written file, rollups recomputed; "what drives it" up to the as-of day."""
from __future__ import annotations

import json
import re
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from ingest.engine import warehouse as wh
from ingest.pipeline import loader
from ingest.settings import config, settings_file
from mlcost import cli
from tests.conftest import REPO_ROOT

APP = REPO_ROOT / "app" / "main.py"
HAND_WRITTEN = """# our team's settings
[serving]
regression_pct = 15   # we tolerate a bit more

[[budgets]]
name = "vision"       # the CV team
scope = "project:vision"
amount = 5000
"""


@pytest.fixture
def here(tmp_path, monkeypatch) -> Path:
    """Run in tmp_path without $MLCOST_CONFIG: the settings file is ./mlcost.toml."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLCOST_CONFIG", raising=False)
    return tmp_path


def test_a_budget_is_added_edited_and_deleted_keeping_the_comments(here):
    (here / "mlcost.toml").write_text(HAND_WRITTEN)
    settings_file.save_budget({"name": "genai", "scope": "team:genai", "period": "quarter",
                               "amount": Decimal("12000.50"), "currency": "usd", "actual_thresholds_pct": [80, 100],
                               "forecast_thresholds_pct": [100], "channel": "", "owner": "emma"})
    text = (here / "mlcost.toml").read_text()
    assert text.startswith(HAND_WRITTEN)  # the hand-written part, comments included, is untouched
    budgets = {b.name: b for b in config.load().budgets}
    assert budgets["genai"] == config.Budget("genai", "team", "genai", "quarter", Decimal("12000.5"), "USD",
                                             (80.0, 100.0), (100.0,), None, "emma")
    assert config.load().serving.regression_pct == 15

    settings_file.save_budget({"name": "cv", "scope": "project:vision", "amount": 6000}, replaces="vision")
    assert [(b.name, b.amount) for b in config.load().budgets] == [("cv", Decimal(6000)), ("genai", Decimal("12000.5"))]
    assert "# our team's settings" in (here / "mlcost.toml").read_text()

    settings_file.delete_budget("cv")
    settings_file.delete_budget("genai")
    assert config.load().budgets == ()


@pytest.mark.parametrize("entry, message", [
    ({"name": "x", "scope": "tag:team", "amount": 10}, 'budgets[2] ("x").scope must be "all"'),
    ({"name": "vision", "amount": 10}, "names must be unique"),
    ({"name": "y", "amount": 10, "currency": "dollars"}, "3-letter currency code"),
    ({"name": "z", "amount": 10, "actual_thresholds_pct": [50, "lots"]}, "must be a number of 0 or more"),
])
def test_a_budget_the_check_refuses_is_not_written(here, entry, message):
    (here / "mlcost.toml").write_text(HAND_WRITTEN)
    with pytest.raises(config.ConfigError, match=re.escape(message)):
        settings_file.save_budget(entry)
    assert (here / "mlcost.toml").read_text() == HAND_WRITTEN


def budgets_page() -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    at.switch_page("app_pages/budgets.py").run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def test_the_budgets_page_creates_a_budget_the_alert_check_reads(here, warehouse, capsys):
    at = budgets_page()
    assert any("No budgets yet" in info.value for info in at.info)
    at.text_input(key="b_name_New budget").set_value("research")
    at.number_input(key="b_amount_New budget").set_value(2500.0)
    at.selectbox(key="b_scope_New budget").set_value("project")
    at.text_input(key="b_value_New budget").set_value("research")
    at.text_input(key="b_actual_New budget").set_value("50, 90")
    at.button(key="FormSubmitter:budget_form_New budget-Save budget").click()
    at = at.run()
    assert not at.exception, [e.message for e in at.exception]
    assert any("Saved budget research" in s.value for s in at.success)
    [budget] = config.load(here / "mlcost.toml").budgets
    assert (budget.name, budget.scope, budget.scope_value, budget.amount, budget.actual_thresholds_pct) == (
        "research", "project", "research", Decimal(2500), (50.0, 90.0))
    # the CLI reads the same file
    assert cli.main(["alerts", "check", "--dry-run", "--json", "--as-of", "2026-11-22"]) == 0
    assert "research" not in capsys.readouterr().err  # no complaint about the settings

    # a value the check refuses: an error on the page, the file unchanged
    before = (here / "mlcost.toml").read_text()
    at.selectbox(key="budget_edit_pick").set_value("research").run()
    at.text_input(key="b_currency_research").set_value("E1")
    at.button(key="FormSubmitter:budget_form_research-Save budget").click()
    at = at.run()
    assert any("Not saved" in e.value and "currency" in e.value for e in at.error)
    assert (here / "mlcost.toml").read_text() == before


def test_what_drives_a_budget_stops_at_the_as_of_day(here, warehouse):
    runs = [{"run_id": run_id, "project": "p", "start_time": f"2026-03-{day:02d}T10:00:00Z",
             "duration_hours": 1, "price_per_hour_usd": price}
            for run_id, day, price in (("early", 5, 10), ("late", 20, 99))]
    (here / "runs.jsonl").write_text("\n".join(json.dumps(r) for r in runs) + "\n")
    assert loader.ingest_file(here / "runs.jsonl").ok
    settings_file.save_budget({"name": "all", "amount": 1000})
    at = budgets_page()
    at.date_input(key="budget_as_of").set_value(date(2026, 3, 11)).run()
    assert not at.exception
    def started_runs() -> list[str]:  # the costliest runs of the estimated days (the table with start times)
        (table,) = [d.value for d in at.dataframe if "started_at" in d.value.columns]
        return table["run_id"].tolist()

    assert started_runs() == ["early"]  # "late" started after the as-of day
    at.date_input(key="budget_as_of").set_value(date(2026, 3, 31)).run()
    assert started_runs() == ["late", "early"]


def trace(path: Path, util: float, minutes: int) -> Path:
    """One GPU sampled every 10 s at `util` % for `minutes`."""
    start = datetime(2026, 3, 2, 8, 0, tzinfo=timezone.utc)
    lines = ["timestamp,host,gpu_index,gpu_uuid,gpu_name,power_w,energy_mj,gpu_util_pct,mem_used_mib"]
    lines += [f"{(start + timedelta(seconds=10 * i)):%Y-%m-%dT%H:%M:%SZ},box,0,GPU-x,NVIDIA L4,30,,{util},100"
              for i in range(minutes * 6)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_idle_rule_changed_on_the_page_is_saved_and_the_rollups_recomputed(here, warehouse):
    assert loader.ingest_file(trace(here / "box.csv", util=10, minutes=20)).ok

    def idle_s() -> float:
        return float(wh.query("SELECT sum(idle_s) AS s FROM gpu_minutes")["s"].iloc[0])

    assert idle_s() == 0  # 10 % is busy under the default 5 % rule
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    at.switch_page("app_pages/idle_gpus.py").run()
    at.number_input(key="idle_util").set_value(15.0)
    at.number_input(key="idle_minutes").set_value(2.0)
    at.button(key="FormSubmitter:idle_rule-Save and recompute").click()
    at = at.run()
    assert not at.exception, [e.message for e in at.exception]
    assert any("recomputed the figures of 1 GPUs" in s.value for s in at.success)
    gpu = config.load(here / "mlcost.toml").gpu
    assert (gpu.idle_util_max_pct, gpu.idle_min_s, gpu.idle_power_max_w) == (15.0, 120.0, None)
    # every sample is now idle: 20 minutes of samples, the last one standing for one interval
    assert idle_s() == 20 * 60
    assert wh.query("SELECT idle_util_max_pct AS u FROM gpu_rollup_settings")["u"].iloc[0] == 15
    assert not any("run `mlcost rollup`" in w.value for w in at.warning)


def test_the_dashboard_started_elsewhere_writes_the_settings_of_the_users_folder(tmp_path, monkeypatch):
    """`mlcost dashboard` runs Streamlit in the repository's folder and passes $MLCOST_WORKDIR: the
    forms write, and every page reads, the mlcost.toml of the folder the user started it in."""
    user_folder, server_folder = tmp_path / "user", tmp_path / "server"
    user_folder.mkdir()
    server_folder.mkdir()
    monkeypatch.chdir(server_folder)
    monkeypatch.delenv("MLCOST_CONFIG", raising=False)
    monkeypatch.setenv("MLCOST_WORKDIR", str(user_folder))
    settings_file.save_budget({"name": "all", "amount": 100})
    assert (user_folder / "mlcost.toml").is_file() and not (server_folder / "mlcost.toml").exists()
    assert [b.name for b in config.load().budgets] == ["all"]
    monkeypatch.chdir(user_folder)  # the CLI, run in the user's folder, reads the same file
    monkeypatch.delenv("MLCOST_WORKDIR")
    assert [b.name for b in config.load().budgets] == ["all"]
