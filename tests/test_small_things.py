"""The small things a new user trips on (issue 14, item 9), each repeated as that user would."""
from __future__ import annotations

import json
import shutil
from datetime import date, timedelta
from decimal import Decimal

import pandas as pd
import pytest

from present import charts, charts_idle, charts_money, charts_serving, format as fmt
from app import tables
from app.filters import bulk_span
from tests.conftest import SAMPLE_DIR
from tests.test_sample_data import truth


@pytest.fixture
def demo_folder(demo_db, tmp_path, monkeypatch):
    """A user's folder after `mlcost demo` there: the sample in ./mlcost.duckdb (copied from the session's
    demo warehouse, so the demo's own load finds every file already loaded), no $MLCOST_DB."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLCOST_DB", raising=False)
    monkeypatch.delenv("MLCOST_CONFIG", raising=False)
    shutil.copyfile(demo_db, tmp_path / "mlcost.duckdb")
    return tmp_path


def test_demo_then_report_and_alerts_check_see_the_demo_data(demo_folder, monkeypatch, capsys):
    from mlcost import cli
    from mlcost.commands import serve

    served = []
    monkeypatch.setattr(serve, "_serve", lambda args, db: served.append(db) or 0)
    assert cli.main(["demo"]) == 0
    out = capsys.readouterr().out
    assert served == [demo_folder / "mlcost.duckdb"] or served[0].resolve() == (demo_folder / "mlcost.duckdb").resolve()
    assert "SKIPPED" in out and "OK " not in out  # the demo's warehouse is the one every command reads

    assert cli.main(["report", "--month", "2026-10"]) == 0
    report = capsys.readouterr().out
    total = Decimal(str(truth()["billing_by_month"]["2026-10"]["total_usd"]))
    assert f"${total:,.2f}" in report

    assert cli.main(["alerts", "check", "--dry-run", "--json", "--as-of", "2026-11-22"]) == 0
    checked = json.loads(capsys.readouterr().out)
    assert any("ML org" in key for key in checked["firing"]), checked  # the sample budgets, written by the demo


def test_report_out_into_a_missing_folder_creates_it(demo_folder, capsys):
    from mlcost import cli

    target = demo_folder / "reports" / "2026" / "october.md"
    assert cli.main(["report", "--month", "2026-10", "--out", str(target)]) == 0
    assert target.read_text().startswith("# ")


def test_the_default_date_range_leaves_out_a_stray_old_file():
    bulk = [date(2026, 8, 1) + timedelta(days=i) for i in range(100)]
    stray = [date(2024, 3, 5), date(2024, 3, 6)]
    assert bulk_span(stray + bulk) == (date(2026, 8, 1), date(2026, 11, 8))
    assert bulk_span(bulk) == (bulk[0], bulk[-1])  # nothing stray: the whole span
    # two halves far apart are both the data, not a stray part
    halves = bulk[:50] + [d + timedelta(days=400) for d in bulk[50:]]
    assert bulk_span(halves) == (halves[0], halves[-1])
    assert bulk_span([]) is None


def test_the_overview_defaults_to_the_bulk_of_the_data(tmp_path, warehouse):
    from streamlit.testing.v1 import AppTest

    from ingest.pipeline import loader
    from tests.conftest import REPO_ROOT

    lines = [json.dumps({"run_id": f"r{i}", "project": "p", "start_time": f"{day}T10:00:00Z", "duration_hours": 1,
                         "price_per_hour_usd": 1})
             for i, day in enumerate(["2023-01-02"] + [f"2026-10-{d:02d}" for d in range(1, 29)])]
    (tmp_path / "runs.jsonl").write_text("\n".join(lines) + "\n")
    assert loader.ingest_file(tmp_path / "runs.jsonl").ok
    at = AppTest.from_file(str(REPO_ROOT / "app" / "main.py"), default_timeout=60).run()
    assert not at.exception
    assert at.date_input(key="date_range").value == (date(2026, 10, 1), date(2026, 10, 28))
    assert {m.label: m.value for m in at.metric}["Training runs"] == "28"
    assert any("2023-01-02" in c.value for c in at.sidebar.caption)


def test_the_idle_heatmap_draws_days_without_data_as_gaps():
    by_day = pd.DataFrame({"gpu": ["h GPU 0"] * 2, "host": ["h"] * 2, "gpu_index": [0, 0],
                           "day": [date(2026, 3, 1), date(2026, 3, 4)], "idle_h": [20.0, 3.0],
                           "observed_h": [24.0, 24.0]})
    heatmap = charts_idle.idle_heatmap(by_day).data[0]
    assert [pd.Timestamp(x).date() for x in heatmap.x] == [date(2026, 3, d) for d in range(1, 5)]
    z = list(heatmap.z[0])
    assert z[0] == 20 and z[3] == 3 and all(pd.isna(v) for v in z[1:3])  # not the neighbour's cell, not 0


def test_colours_follow_the_name_not_what_else_is_shown():
    known = ["aaa-new", "search", "vision"]  # every project loaded

    def spend_colours(projects: list[str]) -> dict[str, str]:
        frame = pd.DataFrame({"month": ["2026-10-01"] * len(projects), "project": projects,
                              "cost_usd": [Decimal(1)] * len(projects)})
        return {trace.name: trace.marker.color for trace in charts_money.spend_by_month(frame, known).data}

    before, after = spend_colours(["vision", "search"]), spend_colours(["aaa-new", "search", "vision"])
    assert before["vision"] == after["vision"] and before["search"] == after["search"]
    assert len(set(after.values())) == 3
    assert charts_serving.service_colours(["search-api"]) == {"search-api": charts.colour_of("search-api")}


def test_tables_read_as_words_with_units_money_with_currency_and_key_columns_first():
    assert [fmt.label(c) for c in ("cost_usd", "gpu_energy_kwh", "run_id", "rows_loaded", "mean_util_pct")] == [
        "Cost (USD)", "GPU energy (kWh)", "Run ID", "Rows loaded", "Mean utilization (%)"]
    frame = pd.DataFrame({"started_at": [pd.Timestamp("2026-10-01", tz="UTC")], "instance_type": ["g5.xlarge"],
                          "run_id": ["r1"], "cost_usd": [Decimal("1234.5")], "billed_cost": [Decimal("10")]})
    shown = tables.table(frame, first=("run_id", "cost_usd"), money=("cost_usd", "billed_cost"), currency="EUR")
    assert shown["column_order"] == ["run_id", "cost_usd", "started_at", "instance_type", "billed_cost"]
    config = shown["column_config"]
    assert config["cost_usd"]["label"] == "Cost (USD)" and config["cost_usd"]["type_config"]["format"] == "dollar"
    assert config["billed_cost"]["type_config"]["format"] == "euro"
    assert config["started_at"]["label"] == "Started (UTC)"


def test_the_sample_demo_config_is_what_the_demo_writes():
    assert (SAMPLE_DIR / "mlcost.toml").is_file()
