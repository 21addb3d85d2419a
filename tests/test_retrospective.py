"""The monthly retrospective (metrics/retrospective.py, outputs/report.py, the Retrospective page and
`mlcost report`) on the sample data: October 2026 against September.

Two kinds of check: the report's figures are the figures the other pages show for the month
(AppTest of those pages with the sidebar's date range set to the month), and they equal a
second, plain computation from the sample files or truth.json (tests/test_sample_data.py's
readers), never numbers copied from the program's output.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from metrics import queries, retrospective
from outputs import report
from ingest.engine import warehouse as wh
from ingest.pipeline import loader
from ingest.settings import config
from tests.conftest import REPO_ROOT, SAMPLE_DIR, sample_node_rates
from tests.test_pages import pareto
from tests.test_sample_data import (
    epoch,
    runs,
    serving_price_per_replica_hour,
    truth,
    window_cost,
    windows,
)

APP = REPO_ROOT / "app" / "main.py"
OCTOBER, SEPTEMBER = date(2026, 10, 1), date(2026, 9, 1)
OCT_START, NOV_START = (datetime(2026, 10, 1, tzinfo=UTC).timestamp(), datetime(2026, 11, 1, tzinfo=UTC).timestamp())
SEP_START = datetime(2026, 9, 1, tzinfo=UTC).timestamp()


# --- fixtures ----------------------------------------------------------------------------

@pytest.fixture(autouse=True)
def _no_user_settings(tmp_path, monkeypatch):
    """Run where no mlcost.toml is, with no $MLCOST_CONFIG: the shipped defaults apply."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLCOST_CONFIG", raising=False)


@pytest.fixture(scope="module")
def sample_db(demo_db) -> Path:
    """A warehouse holding every sample file (as `mlcost demo` loads them), read-only here."""
    return demo_db


@pytest.fixture
def sample_warehouse(sample_db, warehouse) -> Path:
    """A copy of the sample warehouse for one test (it may write decisions)."""
    shutil.copyfile(sample_db, warehouse)
    return warehouse


@pytest.fixture(scope="module")
def october(sample_db) -> retrospective.Retrospective:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLCOST_DB", str(sample_db))
        patch.delenv("MLCOST_CONFIG", raising=False)
        return retrospective.build(OCTOBER, config.load(REPO_ROOT / "ingest" / "defaults.toml"))


def rule(retro: retrospective.Retrospective, name: str) -> list[retrospective.Recommendation]:
    return [r for r in retro.recommendations if r.rule == name]


# --- plain computations from the sample files ------------------------------------------------

def runs_started(start: float, end: float) -> list[dict]:
    return [r for r in runs() if start <= epoch(r["start_time"]) < end]


def october_windows() -> list[dict]:
    return [w for w in windows() if OCT_START <= epoch(w["window_start"]) < NOV_START]


def cost_per_1k_success(ws: list[dict]) -> float:
    prices = serving_price_per_replica_hour()
    return sum(window_cost(w, prices) for w in ws) * 1000 / sum(w["requests_success"] for w in ws)


# --- the report's figures are the pages' figures ----------------------------------------------

def page_metrics(page: str, month: date) -> dict[str, str]:
    """The metrics `page` shows with the sidebar's date range set to `month`."""
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    at.switch_page(page).run()
    at.date_input(key="date_range").set_value((month, retrospective.month_filters(month).end))
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return {m.label: m.value for m in at.metric}


def test_figures_equal_what_the_other_pages_show_for_the_month(sample_warehouse):
    retro = retrospective.build(OCTOBER)
    shown = {
        "overview": page_metrics("app_pages/overview.py", OCTOBER),
        "serving": page_metrics("app_pages/serving.py", OCTOBER),
        "idle": page_metrics("app_pages/idle_gpus.py", OCTOBER),
        "billing": page_metrics("app_pages/billing.py", OCTOBER),
    }
    figure = retro.figure
    assert shown["overview"]["Estimated training cost"] == report.number(
        figure("Estimated training cost (USD)").current, "USD")
    assert shown["overview"]["Training runs"] == report.number(figure("Training runs").current, "count")
    assert shown["serving"]["Serving cost"] == report.number(figure("Estimated serving cost (USD)").current, "USD")
    assert shown["serving"]["Requests"] == report.number(figure("Requests").current, "count")
    assert shown["idle"]["Idle GPU-hours"] == f"{figure('Idle GPU-hours').current:,.1f}"
    assert shown["idle"]["Idle cost"] == report.number(figure("Idle cost (USD)").current, "USD")
    assert shown["idle"]["Idle energy"] == f"{figure('Idle energy (kWh)').current:,.1f} kWh"
    assert shown["billing"]["Billed (USD)"] == report.number(figure("Charges for the month (USD)").current, "USD")


def test_versions_table_is_the_version_changes_started_in_the_month(october):
    """The versions that changed in October, from truth.json (the sample generator's answer key), not from
    the query the section itself calls; the project table is checked against runs.jsonl below."""
    started = [c for c in truth()["serving_version_changes"] if c["start_date"].startswith("2026-10")]
    shown = october.section("versions").table
    cost = shown[shown["metric"] == "cost_per_1k_success_usd"]
    assert sorted(zip(cost["service"], cost["from_version"], cost["to_version"])) == sorted(
        (c["service"], c["from_version"], c["to_version"]) for c in started)
    for change in started:
        row = cost[cost["to_version"] == change["to_version"]].iloc[0]
        assert (float(row["change_pct"]) > 0) == (change["change_pct"] > 0)  # over October's windows only
        assert bool(row["is_regression"]) == change["is_regression"]


# --- ... and equal a plain computation from the sample files ------------------------------------

@pytest.mark.parametrize("month, previous", [("2026-10", "2026-09"), ("2026-09", "2026-08")])
def test_billed_cost_per_invoice_month_matches_truth(sample_db, monkeypatch, month, previous):
    monkeypatch.setenv("MLCOST_DB", str(sample_db))
    billed = retrospective.build(retrospective.parse_month(month)).figure("Billed, invoice month (USD)")
    by_month = truth()["billing_by_month"]
    assert round(billed.current, 2) == Decimal(str(by_month[month]["total_usd"]))
    assert round(billed.previous, 2) == Decimal(str(by_month[previous]["total_usd"]))


def test_runs_and_spend_per_project_match_runs_jsonl(october):
    for month_start, month_end, suffix in ((OCT_START, NOV_START, ""), (SEP_START, OCT_START, "_previous")):
        count, spend = defaultdict(int), defaultdict(Decimal)
        for run in runs_started(month_start, month_end):
            count[run["project"]] += 1
            spend[run["project"]] += Decimal(str(run["estimated_cost_usd"]))
        table = october.section("projects").table.set_index("project")
        assert table[f"runs{suffix}"].astype(int).to_dict() == dict(count)
        assert {p: round(Decimal(str(v)), 2) for p, v in table[f"cost_usd{suffix}"].items()} == dict(spend)


def test_top_five_runs_are_the_costliest_of_the_month(october):
    by_cost = sorted(runs_started(OCT_START, NOV_START), key=lambda r: (-r["estimated_cost_usd"], r["run_id"]))
    assert list(october.section("top_runs").table["run_id"]) == [r["run_id"] for r in by_cost[:5]]


def test_cost_per_1k_requests_per_service_matches_the_windows_file(october):
    table = october.section("serving").table.set_index("service")
    by_service = defaultdict(list)
    for w in october_windows():
        by_service[w["service"]].append(w)
    assert set(table.index) == set(by_service)
    for service, ws in by_service.items():
        assert float(table.at[service, "cost_per_1k_success_usd"]) == pytest.approx(cost_per_1k_success(ws), rel=1e-9)


def test_chat_assistant_regression_is_recommended_with_its_number(october):
    regression = truth()["regression"]
    ws = [w for w in october_windows() if w["service"] == regression["service"]]
    before = cost_per_1k_success([w for w in ws if w["model_version"] == regression["from_version"]])
    after = cost_per_1k_success([w for w in ws if w["model_version"] == regression["to_version"]])
    expected = f"{(after / before - 1) * 100:.1f} %"
    (found,) = [r for r in rule(october, "serving_regression") if "per 1k successful requests than" in r.text
                and "costs" in r.text]
    assert found.evidence == expected
    assert (f"Service {regression['service']} {regression['to_version']} costs {expected} more"
            f" per 1k successful requests than {regression['from_version']}") in found.text
    assert regression["start_date"] in found.text
    # The truth's change (all windows of each version) is the same story within a few points.
    assert found.value == pytest.approx(regression["change_pct"], abs=3)


def test_right_size_candidate_matches_truth(october):
    candidate = truth()["right_size_candidate"]
    node_runs = truth()["node_runs"]
    spans = [(epoch(node_runs[r]["start"]), epoch(node_runs[r]["end"]), node_runs[r]["mean_gpu_util_pct"])
             for r in candidate["run_ids"] if OCT_START <= epoch(node_runs[r]["start"]) < NOV_START]
    weighted = sum((end - start) * util for start, end, util in spans) / sum(end - start for start, end, _ in spans)
    (found,) = rule(october, "right_size")
    assert found.text.startswith(f"{candidate['host']} GPU {candidate['gpu_index']} ")
    assert found.value == pytest.approx(weighted, abs=0.05)  # truth's utilisation is rounded to 0.01
    assert found.evidence == f"{found.value:.1f} %" and found.evidence in found.text


def test_dominated_runs_match_brute_force(october):
    completed = [r for r in runs_started(OCT_START, NOV_START) if r["status"] == "completed"]
    points = {r["run_id"]: ((r["project"], r["val_metric_name"]), Decimal(str(r["estimated_cost_usd"])),
                            -r["val_metric"] if r["goal"] == "min" else r["val_metric"]) for r in completed}
    cost = {run: point[1] for run, point in points.items()}
    dominated = {run: by for run, (on_frontier, by) in pareto(points).items()
                 if not on_frontier and cost[run] >= Decimal("1.5") * cost[by]}
    ratio = sum(cost[r] for r in dominated) / sum(cost[by] for by in dominated.values())
    (found,) = rule(october, "dominated_runs")
    assert found.text.startswith(f"{len(dominated)} runs were dominated")
    assert found.evidence == f"{ratio:.1f}x"


def test_weekend_idle_matches_truth(october):
    # Both nodes are billed: idle is priced at each node's cost per GPU-hour from its October lines.
    rates = sample_node_rates("2026-10-01", "2026-10-31")
    hours, dollars = 0.0, Decimal(0)
    for day in truth()["gpu_idle_by_day"]:
        when = date.fromisoformat(day["date"])
        if when.replace(day=1) == OCTOBER and when.weekday() >= 5:
            hours += day["idle_sustained_s"] / 3600
            dollars += Decimal(day["idle_sustained_s"]) / 3600 * rates[day["host"]]
    assert october.figure("Idle GPU-hours on weekends").current == pytest.approx(hours, abs=1e-6)
    assert october.figure("Idle cost on weekends (USD)").current == pytest.approx(dollars, abs=Decimal("0.01"))
    (found,) = rule(october, "weekend_idle")
    assert found.evidence == f"${dollars:,.0f}" and f"{hours:,.0f} idle GPU-hours" in found.text


@pytest.mark.parametrize("month", ["2026-08", "2026-09", "2026-10", "2026-11"])
def test_every_recommendation_cites_its_evidence(sample_db, monkeypatch, month):
    monkeypatch.setenv("MLCOST_DB", str(sample_db))
    retro = retrospective.build(retrospective.parse_month(month))
    assert retro.recommendations, month
    for item in retro.recommendations:
        assert re.search(r"\d", item.evidence), item
        assert item.evidence in item.text, item
        assert item.evidence in report.markdown(retro)


def test_november_is_partial_and_says_so(sample_db, monkeypatch):
    monkeypatch.setenv("MLCOST_DB", str(sample_db))
    assert retrospective.latest_month() == date(2026, 11, 1)
    retro = retrospective.build(date(2026, 11, 1))
    last_window = max(epoch(w["window_start"]) for w in windows())
    assert retro.data_through == datetime.fromtimestamp(last_window, UTC).date()
    assert "partial" in report.markdown(retro)


# --- decisions log --------------------------------------------------------------------------

def test_decisions_are_stored_read_back_and_shown_escaped_in_both_reports(sample_warehouse):
    text = "Move search-ranking jobs to the L4 <script>alert(1)</script> | by December"
    wh.add_decision(OCTOBER, "decision", text, "dana")
    wh.add_decision(date(2026, 10, 20), "note", "Weekend idle is the largest waste", None)
    wh.add_decision(SEPTEMBER, "note", "a September note", "chen")
    stored = queries.decisions(OCTOBER)
    assert list(zip(stored["kind"], stored["text"], stored["author"].fillna(""))) == [
        ("decision", text, "dana"), ("note", "Weekend idle is the largest waste", "")]
    retro = retrospective.build(OCTOBER)
    page = report.html_report(retro)
    assert "alert(1)&lt;/script&gt;" in page and "<script>alert(1)" not in page
    assert "Weekend idle is the largest waste" in page and "a September note" not in page
    markdown = report.markdown(retro)
    assert "\\<script\\>alert(1)\\</script\\> \\| by December" in markdown
    assert "a September note" not in markdown


def test_an_empty_decision_is_refused(warehouse):
    with pytest.raises(ValueError, match="empty"):
        wh.add_decision(OCTOBER, "note", "   ")
    with pytest.raises(ValueError, match="kind"):
        wh.add_decision(OCTOBER, "wish", "more GPUs")


# --- mlcost report ----------------------------------------------------------------------------

def mlcost(db: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mlcost", *args], check=False, capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "MLCOST_DB": str(db), "PYTHONPATH": str(REPO_ROOT)})


def test_mlcost_report_markdown_and_html(sample_db, tmp_path):
    markdown = mlcost(sample_db, "report", "--month", "2026-10", cwd=tmp_path)
    assert markdown.returncode == 0, markdown.stderr
    total = Decimal(str(truth()["billing_by_month"]["2026-10"]["total_usd"]))
    assert markdown.stdout.startswith("# Efficiency retrospective 2026-10\n")
    assert f"| Billed, invoice month (USD) | ${Decimal(str(truth()['billing_by_month']['2026-09']['total_usd'])):,.2f}" \
           f" | ${total:,.2f} |" in markdown.stdout
    assert "## Recommendations" in markdown.stdout and "evidence: **" in markdown.stdout

    written = mlcost(sample_db, "report", "--month", "2026-10", "--format", "html", cwd=tmp_path)
    assert written.returncode == 0, written.stderr
    page = (tmp_path / "mlcost-report-2026-10.html").read_text()
    assert page.count("plotly.js v") == 1  # the library once, inline
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", page)  # nothing fetched from outside
    assert page.count('class="plotly-graph-div"') >= 4
    assert f"${total:,.2f}" in page

    elsewhere = mlcost(sample_db, "report", "--month", "2026-09", "--out", str(tmp_path / "sep.md"), cwd=tmp_path)
    assert elsewhere.returncode == 0 and elsewhere.stdout == ""
    assert (tmp_path / "sep.md").read_text().startswith("# Efficiency retrospective 2026-09")


@pytest.mark.parametrize("month", ["2026-13", "10/2026", "2026-1", "October"])
def test_mlcost_report_with_a_bad_month_is_a_usage_error(warehouse, tmp_path, month):
    result = mlcost(warehouse, "report", "--month", month, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == f"mlcost: --month {month!r} is not a month: write it as YYYY-MM, e.g. 2026-10"
    assert "Traceback" not in result.stderr and result.stdout == ""


@pytest.mark.parametrize("text, first_day", [("2026-10", date(2026, 10, 1)), (" 2024-02 ", date(2024, 2, 1))])
def test_parse_month(text, first_day):
    assert retrospective.parse_month(text) == first_day


def test_month_range_and_previous_month():
    assert retrospective.month_filters(date(2024, 2, 10)) == retrospective.Filters(date(2024, 2, 1), date(2024, 2, 29))
    assert retrospective.previous_month(date(2026, 1, 15)) == date(2025, 12, 1)


@pytest.mark.parametrize("settings, key", [
    ("[retrospective]\ndominated_min_ratio = 0.5\n", "retrospective.dominated_min_ratio"),
    ("[retrospective]\nidle_share_pct = 120\n", "retrospective.idle_share_pct"),
    ("[retrospective]\nweekend_idle_min_usd = \"fifty\"\n", "retrospective.weekend_idle_min_usd"),
    ("[retrospective]\nsurprise = 1\n", "retrospective.surprise"),
])
def test_bad_retrospective_settings_name_the_key(tmp_path, settings, key):
    path = tmp_path / "mlcost.toml"
    path.write_text(settings)
    with pytest.raises(config.ConfigError) as error:
        config.load(path)
    assert error.value.key == key


def test_a_stricter_setting_drops_a_recommendation(sample_db, monkeypatch, tmp_path):
    monkeypatch.setenv("MLCOST_DB", str(sample_db))
    path = tmp_path / "mlcost.toml"
    path.write_text("[retrospective]\nweekend_idle_min_usd = 1000000\nright_size_min_gpu_h = 1000\n")
    retro = retrospective.build(OCTOBER, config.load(path))
    assert not rule(retro, "weekend_idle") and not rule(retro, "right_size")
    assert rule(retro, "serving_regression")


# --- the page ---------------------------------------------------------------------------------

def open_retrospective() -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    at.switch_page("app_pages/retrospective.py").run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def test_page_on_the_sample_data_defaults_to_the_partial_latest_month_and_logs_decisions(sample_warehouse):
    at = open_retrospective()
    assert at.selectbox(key="retro_month").value == date(2026, 11, 1)
    assert any("November 2026 is partial" in w.value for w in at.warning)
    assert any("sidebar" in c.value and "do not apply" in c.value for c in at.caption)

    at.selectbox(key="retro_month").set_value(OCTOBER).run()
    assert not at.exception
    total = Decimal(str(truth()["billing_by_month"]["2026-10"]["total_usd"]))
    assert {m.label: m.value for m in at.metric}["Billed, invoice month (USD)"] == f"${total:,.2f}"
    recommendations = " ".join(m.value for m in at.markdown)
    assert "chat-assistant v1.0 costs" in recommendations and "evidence: **" in recommendations
    assert not at.warning  # October is whole

    at.radio(key="decision_kind").set_value("decision")
    at.text_area(key="decision_text").set_value("Move search-ranking to the L4 node")
    at.text_input(key="decision_author").set_value("dana")
    at.button[0].click().run()
    assert not at.exception
    assert any("Saved to the October 2026 log" in s.value for s in at.success)
    assert list(queries.decisions(OCTOBER)["text"]) == ["Move search-ranking to the L4 node"]
    assert "Move search-ranking to the L4 node" in at.dataframe[-1].value["text"].tolist()


def test_page_on_an_empty_warehouse_says_what_to_do(warehouse):
    at = open_retrospective()
    advice = " ".join(i.value for i in at.info)
    assert "mlcost ingest" in advice and "**Data** page" in advice
    assert not at.dataframe and not at.metric


# --- budget outcomes -------------------------------------------------------------------------

def test_budget_outcomes_equal_the_budgets_page_and_the_bill_files(sample_warehouse, monkeypatch):
    from tests.test_budgets import SCOPES, bill_spend_by_day

    monkeypatch.setenv("MLCOST_CONFIG", str(SAMPLE_DIR / "mlcost.toml"))
    retro = retrospective.build(OCTOBER)
    section = retro.section("budgets")
    assert [f.label for f in section.figures][0] == "Budget ML org: month to date (USD)"
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    at.switch_page("app_pages/budgets.py").run()
    at.date_input(key="budget_as_of").set_value(date(2026, 10, 31)).run()  # the as-of day: counts October
    for name in ("ML org", "genai team", "vision"):
        at.selectbox(key="budget_name").set_value(name).run()
        shown = {m.label: m.value for m in at.metric}
        assert shown["Spent this month"] == report.number(retro.figure(f"Budget {name}: month to date (USD)").current,
                                                          "USD")
    by_day = bill_spend_by_day(SCOPES["all"])
    october_bill = sum((v for d, v in by_day.items() if d.year == 2026 and d.month == 10), Decimal(0))
    september_bill = sum((v for d, v in by_day.items() if d.year == 2026 and d.month == 9), Decimal(0))
    org = retro.figure("Budget ML org: month to date (USD)")
    assert (org.current, org.previous) == (october_bill, september_bill)
    quarter = retro.figure("Budget AWS quarter: quarter to date (USD)")
    assert quarter.current == october_bill and quarter.previous is None  # Q3 and Q4 are not compared
    outcomes = dict(zip(section.table["budget"], section.table["outcome"]))
    assert outcomes["ML org"] == f"within ({october_bill * 100 / 38000:.0f} % used)"


def test_a_budget_forecast_over_its_amount_is_recommended_with_its_number(sample_warehouse, monkeypatch):
    from tests.test_budgets import expected_burn, spend_by_day

    monkeypatch.setenv("MLCOST_CONFIG", str(SAMPLE_DIR / "mlcost.toml"))
    november = retrospective.build(date(2026, 11, 1))
    want = expected_burn(spend_by_day("team:genai"), Decimal(14000), date(2026, 11, 1),
                         date(2026, 12, 1), date(2026, 11, 21))
    found = [r for r in rule(november, "budget_overrun") if "genai team" in r.text]
    assert len(found) == 1 and found[0].evidence == f"{want['forecast'] * 100 / 14000:.0f} %"
    assert found[0].evidence in found[0].text
    assert not [r for r in rule(november, "budget_overrun") if "search-ranking" in r.text]  # 26 % forecast


def test_runs_reporting_their_own_energy_show_the_overview_figures(warehouse, tmp_path):
    import json

    runs = [{"run_id": "own", "project": "p", "start_time": "2026-03-02T08:00:00Z", "end_time": "2026-03-02T10:00:00Z",
             "price_per_hour_usd": 2, "energy_kwh": 10.5, "emissions_kg": 4.2},
            {"run_id": "none", "project": "p", "start_time": "2026-03-03T08:00:00Z",
             "end_time": "2026-03-03T09:00:00Z", "price_per_hour_usd": 2}]
    (tmp_path / "runs.jsonl").write_text("\n".join(json.dumps(r) for r in runs) + "\n")
    assert loader.ingest_file(tmp_path / "runs.jsonl").ok
    march = retrospective.build(date(2026, 3, 1), config.load(REPO_ROOT / "ingest" / "defaults.toml"))
    assert march.figure("Energy of runs, reported or measured (kWh)").current == 10.5
    assert march.figure("Emissions of runs, reported or measured (kg CO2e)").current == 4.2
    shown = page_metrics("app_pages/overview.py", date(2026, 3, 1))
    assert shown["Measured energy"] == "10.50 kWh"


def test_without_runs_reporting_energy_the_figures_are_left_out(october):
    labels = [f.label for f in october.section("energy").figures]
    assert not [label for label in labels if "reported or measured" in label]
