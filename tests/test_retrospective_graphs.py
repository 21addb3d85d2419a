"""The monthly retrospective's seed graphs and guardrail breaches (issue 22; seed 000: a monthly
retrospective with "cost per run vs val_metric" and "cost per 1,000 requests per model version"),
on a warehouse this test writes with its own settings. Every expected figure is worked out here
from the rows written (plain Python), and the breach list is checked against the run_guardrail
alert: one query, so list and alert agree."""
from __future__ import annotations

import json
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from ingest.pipeline import loader
from ingest.settings import config
from metrics import retrospective
from outputs import alerts, report
from tests.conftest import REPO_ROOT, as_read

UTC = timezone.utc
MONTH = date(2026, 10, 1)
SETTINGS = """
[alerts]
run_max_cost_usd = 500
run_max_hours = 30
guardrail_lookback_days = 31
[alerts.run_limits.vision]
run_max_cost_usd = 120
run_max_gpu_hours = 20
"""
RUNS = [  # run, project, owner, start (UTC), hours, GPUs, cost USD, status, metric name, goal, value
    ("nlp-1", "nlp", "ana", "2026-10-02T08:00", 10, 4, "640.00", "completed", "eval_loss", "min", 1.90),
    ("nlp-2", "nlp", "ben", "2026-10-05T08:00", 32, 1, "96.00", "completed", "eval_loss", "min", 2.10),
    ("nlp-3", "nlp", None, "2026-10-09T08:00", 4, 2, "80.00", "completed", "eval_loss", "min", 1.85),
    ("nlp-4", "nlp", "ana", "2026-10-12T08:00", 2, 2, "40.00", "failed", "eval_loss", "min", 3.00),
    ("vis-1", "vision", "cy", "2026-10-03T08:00", 6, 4, "150.00", "completed", "accuracy", "max", 0.81),
    ("vis-2", "vision", "cy", "2026-10-20T08:00", 3, 2, "60.00", "completed", "accuracy", "max", 0.78),
    ("vis-3", "vision", "dee", "2026-10-28T08:00", 2, 12, "100.00", "completed", "accuracy", "max", 0.84),
    ("vis-4", "vision", "dee", "2026-10-30T08:00", 1, 1, "5.00", "completed", None, None, None),
    ("nlp-old", "nlp", "ana", "2026-09-10T08:00", 12, 4, "700.00", "completed", "eval_loss", "min", 1.80),
]
WINDOWS = [  # start (UTC), minutes, service, version, requests, successful, cost USD (None: no cost)
    ("2026-10-01T00:00", 60, "chat", "v1", 1000, 990, "4.00"),
    ("2026-10-01T01:00", 60, "chat", "v1", 1500, 1480, "4.00"),
    ("2026-10-15T00:00", 60, "chat", "v2", 2000, 1990, "3.00"),
    ("2026-10-15T01:00", 60, "chat", "v2", 500, 500, None),
    ("2026-10-07T12:00", 30, "search", "s7", 40000, 39900, "2.50"),
    ("2026-09-30T23:00", 60, "search", "s6", 30000, 29950, "2.00"),  # September: not this month's
]


def write_files(folder: Path) -> list[str]:
    runs = []
    for run, project, owner, start, hours, gpus, cost, status, name, goal, value in RUNS:
        begin = datetime.fromisoformat(start).replace(tzinfo=UTC)
        record = {"run_id": run, "project": project, "start_time": begin.isoformat(),
                  "end_time": (begin + timedelta(hours=hours)).isoformat(), "gpu_count": gpus,
                  "estimated_cost_usd": float(cost), "status": status}
        if owner:
            record["owner"] = owner
        if name:
            record.update(val_metric=value, val_metric_name=name, goal=goal)
        runs.append(json.dumps(record))
    (folder / "runs.jsonl").write_text("\n".join(runs) + "\n")
    windows = []
    for start, minutes, service, version, total, success, cost in WINDOWS:
        begin = datetime.fromisoformat(start).replace(tzinfo=UTC)
        record = {"window_start": begin.isoformat(), "window_end": (begin + timedelta(minutes=minutes)).isoformat(),
                  "service": service, "model_version": version, "requests_total": total,
                  "requests_success": success}
        if cost is not None:
            record["cost_usd"] = float(cost)
        windows.append(json.dumps(record))
    (folder / "serving.jsonl").write_text("\n".join(windows) + "\n")
    return [str(folder / "runs.jsonl"), str(folder / "serving.jsonl")]


@pytest.fixture
def retro_warehouse(warehouse, tmp_path, monkeypatch):
    summaries = [s for _, s in loader.ingest_paths(write_files(tmp_path))]
    assert all(s.ok for s in summaries), [s.to_json() for s in summaries]
    (tmp_path / "mlcost.toml").write_text(SETTINGS)
    monkeypatch.setenv("MLCOST_CONFIG", str(tmp_path / "mlcost.toml"))
    return warehouse


def in_month(start: str) -> bool:
    return start.startswith("2026-10")


def expected_points() -> set[tuple[str, Decimal, float]]:
    """Runs of the month that are ranked: completed, with a cost and a metric."""
    return {(run, Decimal(cost), value) for run, _, _, start, _, _, cost, status, name, _, value in RUNS
            if in_month(start) and status == "completed" and name is not None}


def expected_breaches(settings: config.Config) -> dict[str, set[str]]:
    """{run: the limits it is over} for the month's runs, each against its project's limits (else the global ones)."""
    out = {}
    for run, project, _, start, hours, gpus, cost, *_ in RUNS:
        if not in_month(start):
            continue
        limits = settings.alerts.limits_of(project)
        over = set()
        if limits.max_cost_usd and Decimal(cost) > limits.max_cost_usd:
            over.add("cost")
        if limits.max_hours and hours > limits.max_hours:
            over.add("hours")
        if limits.max_gpu_hours and hours * gpus > limits.max_gpu_hours:
            over.add("GPU-hours")
        if over:
            out[run] = over
    return out


def test_cost_per_run_against_val_metric_draws_every_ranked_run_of_the_month(retro_warehouse):
    retro = retrospective.build(MONTH, config.load())
    section = retro.section("runs_vs_metric")
    drawn = set()
    for trace in section.chart.data:
        for run, x, y in zip(trace.hovertext, trace.x, trace.y):
            drawn.add((run, Decimal(str(x)).quantize(Decimal("0.01")), round(float(y), 6)))
    assert drawn == {(run, cost, round(value, 6)) for run, cost, value in expected_points()}
    # the table lists the Pareto frontier: per project, a run no cheaper run matches or beats
    goal = {"eval_loss": -1, "accuracy": 1}
    ranked = [r for r in RUNS if in_month(r[3]) and r[7] == "completed" and r[8]]
    frontier = {r[0] for r in ranked if not any(
        o[1] == r[1] and Decimal(o[6]) < Decimal(r[6]) and goal[o[8]] * o[10] >= goal[r[8]] * r[10] for o in ranked)}
    assert set(section.table["run_id"]) == frontier


def test_cost_per_1k_requests_per_model_version_of_the_month(retro_warehouse):
    retro = retrospective.build(MONTH, config.load())
    section = retro.section("version_costs")
    sums: dict[tuple[str, str], list[Decimal]] = {}
    for start, _, service, version, _, success, cost in WINDOWS:
        if in_month(start) and cost is not None:
            total = sums.setdefault((service, version), [Decimal(0), Decimal(0)])
            total[0] += Decimal(cost)
            total[1] += success
    expected = {key: cost / success * 1000 for key, (cost, success) in sums.items()}
    table = {(r.service, r.model_version): Decimal(str(r.cost_per_1k_success_usd)) for r in section.table.itertuples()}
    assert set(table) == set(expected)
    for key, value in expected.items():
        assert table[key] == pytest.approx(value, rel=Decimal("1e-9")), key
    bars = {(t.name, x): y for t in section.chart.data for x, y in zip(t.x, t.y)}
    for (service, version), value in expected.items():
        assert float(bars[(service, version)]) == pytest.approx(float(value)), (service, version)


def test_guardrail_breaches_of_the_month_match_the_limits_and_the_alert(retro_warehouse):
    settings = config.load()
    retro = retrospective.build(MONTH, settings)
    section = retro.section("guardrails")
    expected = expected_breaches(settings)
    assert expected and {r: set(o.split(", ")) for r, o in zip(section.table["run_id"], section.table["over"])} == expected
    assert retro.figure("Runs over a guardrail").current == len(expected)
    assert retro.figure("Runs over a guardrail").previous == 1  # nlp-old, September's
    # the alert over a lookback that covers the month names the same runs, over the same limits
    fired = {a.subject: a.threshold for a in alerts.evaluate(settings, date(2026, 11, 1)) if a.rule == "run_guardrail"}
    in_month = {run: which for run, which in fired.items() if any(r[0] == run and r[3].startswith("2026-10") for r in RUNS)}
    names = {"cost": "cost", "hours": "hours", "gpu_hours": "GPU-hours"}
    assert {run: {names[w] for w in which.split("+")} for run, which in in_month.items()} == expected
    # and the report lists them in its Markdown table
    text = report.markdown(retro)
    part = text.split("## Guardrail breaches", 1)[1].split("\n## ", 1)[0]
    for run in expected:
        assert f"| {run} |" in as_read(part)
    assert "| vis-2 |" not in part and "nlp-old" not in part


def test_report_command_renders_the_new_sections(retro_warehouse, capsys):
    from mlcost import cli

    assert cli.main(["report", "--month", "2026-10"]) in (0, None)
    text = capsys.readouterr().out
    for title in ("## Cost per run against the validation metric", "## Cost per 1k requests per model version",
                  "## Guardrail breaches"):
        assert title in text
    versions = text.split("## Cost per 1k requests per model version", 1)[1].split("\n## ", 1)[0]
    assert "| chat | v1 | 2,470 | $8.00 | $3.2389 |" in versions  # 8.00 / 2,470 x 1,000 = 3.2389


def test_no_guardrail_set_says_so(warehouse, tmp_path):
    summaries = [s for _, s in loader.ingest_paths(write_files(tmp_path))]
    assert all(s.ok for s in summaries)
    retro = retrospective.build(MONTH, config.check_text("", tmp_path / "mlcost.toml"))
    section = retro.section("guardrails")
    assert section.table is None and "No run guardrail is set" in section.notes[0]


def test_retrospective_page_shows_the_graphs_and_the_breach_list(retro_warehouse):
    at = AppTest.from_file(str(REPO_ROOT / "app" / "main.py"), default_timeout=60).run()
    at.switch_page("app_pages/retrospective.py").run()
    at.selectbox(key="retro_month").set_value(MONTH).run()
    assert not at.exception, [e.message for e in at.exception]
    headers = [as_read(h.value) for h in at.header]
    assert {"Cost per run against the validation metric", "Cost per 1k requests per model version",
            "Guardrail breaches"} <= set(headers)
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    scatter = [s for s in specs if any(t.get("type") == "scatter" and t.get("hovertext") for t in s["data"])]
    assert scatter and {run for t in scatter[0]["data"] for run in t.get("hovertext", [])} == {
        p[0] for p in expected_points()}
    shown = set()
    for frame in at.dataframe:
        if "run_id" in frame.value.columns and "over" in frame.value.columns:
            shown = set(frame.value["run_id"])
    assert shown == set(expected_breaches(config.load()))
