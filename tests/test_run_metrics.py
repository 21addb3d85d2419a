"""Issue 22's run figures against plain Python over sample_data/runs.jsonl (json + Decimal), never the
product's code: throughput, cost efficiency, cost per epoch, retries and preemptions, cost per
successful run, cost-to-target as an upper bound, and the comparison view under AppTest."""
from __future__ import annotations

import json
from collections import defaultdict
from decimal import Decimal

import pytest
from streamlit.testing.v1 import AppTest

from tests.conftest import REPO_ROOT, SAMPLE_DIR

RUNS = [json.loads(line, parse_float=Decimal) for line in (SAMPLE_DIR / "runs.jsonl").read_text().splitlines()]


def expected_rows() -> dict[str, dict]:
    """Per run: the seed's figures computed here from the file."""
    out = {}
    for r in RUNS:
        cost, hours = r["estimated_cost_usd"], r["duration_hours"]
        row = {"throughput_examples_per_s": r["throughput_examples_per_sec"],
               "throughput_tokens_per_s": r.get("tokens_per_sec"), "batch_size": r.get("batch_size"),
               "epochs": r.get("epochs"),
               # examples per dollar = examples/s x 3600 / (USD per hour)
               "cost_efficiency_examples_per_usd": r["throughput_examples_per_sec"] * 3600 / (cost / hours),
               "cost_per_epoch_usd": cost / r["epochs"] if r.get("epochs") else None}
        out[r["run_id"]] = row
    # retries: per project+model+instance type, in start order, failed/preempted runs since the last completed one
    by_key = defaultdict(list)
    for r in RUNS:
        by_key[(r["project"], r["model"], r["instance_type"])].append(r)
    from datetime import datetime
    def start(r):
        t = r["start_time"]
        return datetime.fromtimestamp(t).astimezone() if isinstance(t, (int, Decimal)) else datetime.fromisoformat(t.replace("Z", "+00:00"))
    for runs in by_key.values():
        failed = preempted = 0
        for r in sorted(runs, key=lambda r: (start(r).timestamp(), r["run_id"])):
            if r["status"] == "completed":
                out[r["run_id"]].update(failed_before=failed, preempted_before=preempted)
                failed = preempted = 0
            elif r["status"] == "failed":
                failed += 1
            elif r["status"] == "preempted":
                preempted += 1
    return out


def close(a, b, rel=1e-6) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return abs(float(a) - float(b)) <= rel * max(1.0, abs(float(b)))


@pytest.fixture
def frame(demo_warehouse):
    from ingest.settings import config
    from metrics import queries
    from metrics.filters import Filters
    return queries.training_runs(Filters(), None, None, *config.load().energy.query_factors())


def test_run_figures_match_the_sample_file(frame):
    expected = expected_rows()
    assert len(frame) == len(expected)
    checked = 0
    for row in frame.to_dict("records"):
        want = expected[row["run_id"]]
        for column, value in want.items():
            got = row.get(column)
            got = None if got is None or (isinstance(got, float) and got != got) or str(got) in ("<NA>", "nan") else got
            # tags keep 6 significant digits (ingest/formats/runs/run_record.py writes them with %g): tokens/s to 1e-5
            assert close(got, value, 1e-4 if column == "cost_efficiency_examples_per_usd"
                         else 1e-5 if column == "throughput_tokens_per_s" else 1e-6), \
                (row["run_id"], column, got, value)
            checked += value is not None
    assert checked > 1000
    assert sum(1 for w in expected.values() if w.get("failed_before")) > 0
    assert sum(1 for w in expected.values() if w.get("preempted_before")) > 0


def test_cost_per_successful_run_matches_the_sample_file(demo_warehouse):
    from metrics import queries
    from metrics.filters import Filters
    total, completed = defaultdict(Decimal), defaultdict(int)
    for r in RUNS:
        total[r["project"]] += r["estimated_cost_usd"]
        completed[r["project"]] += r["status"] == "completed"
    got = queries.cost_per_successful_run(Filters(), "project").set_index("group_name")
    assert set(got.index) == set(total)
    for project in total:
        want = (total[project] / completed[project]).quantize(Decimal("0.000001"))
        assert Decimal(str(got.at[project, "cost_per_successful_run_usd"])) == want, project


def test_cost_to_target_is_the_whole_cost_as_an_upper_bound_for_summary_runs(frame, demo_warehouse):
    from ingest.settings import config
    from metrics import queries
    from metrics.filters import Filters
    summaries = [r for r in RUNS if "eval_history" not in r and r["val_metric_name"] == "accuracy"
                 and r["val_metric"] is not None]
    target = sorted(r["val_metric"] for r in summaries)[len(summaries) // 2]
    want = {r["run_id"]: r["estimated_cost_usd"] for r in summaries if r["val_metric"] >= target}
    got = queries.training_runs(Filters(), "accuracy", float(target), *config.load().energy.query_factors())
    bounds = got[got["to_target_basis"] == "upper bound"].set_index("run_id")
    assert set(bounds.index) == set(want)
    for run_id, cost in want.items():
        assert Decimal(str(bounds.at[run_id, "cost_to_target_usd"])) == cost


def test_comparison_view_shows_speedup_cost_ratio_and_flags(demo_warehouse, monkeypatch, tmp_path):
    """Two runs of one project side by side: speedup and cost ratio from the file; with thresholds
    that make any costlier candidate a flag, the flag shows."""
    a, b = (r for r in RUNS if r["run_id"] in ("vision-0001", "vision-0002"))
    settings = tmp_path / "mlcost.toml"
    settings.write_text("[comparison]\nmore_cost_pct = 0\nmore_energy_pct = 0\nbetter_metric_pct = 1000\n")
    monkeypatch.setenv("MLCOST_CONFIG", str(settings))
    at = AppTest.from_file(str(REPO_ROOT / "app" / "main.py"), default_timeout=60).run()
    at.switch_page("app_pages/training_runs.py").run()
    at.selectbox(key="compare_by").set_value("run").run()
    cheap, dear = sorted((a, b), key=lambda r: r["estimated_cost_usd"])
    at.selectbox(key="compare_baseline").set_value(cheap["run_id"]).run()
    at.selectbox(key="compare_candidate").set_value(dear["run_id"]).run()
    assert not at.exception
    shown = at.dataframe[-2].value.set_index("figure")
    speedup = float(cheap["duration_hours"]) / float(dear["duration_hours"])
    ratio = float(dear["estimated_cost_usd"]) / float(cheap["estimated_cost_usd"])
    assert shown.at["Wall-clock per run (h)", "candidate vs baseline"] == f"speedup {speedup:,.4g}×"
    assert shown.at["Cost per run (USD)", "candidate vs baseline"] == f"cost ratio {ratio:,.4g}×"
    assert shown.at["Cost per run (USD)", "candidate"] == f"${dear['estimated_cost_usd']:,.2f}"
    flagged = ratio > 1 and dear["val_metric"] is not None and cheap["val_metric"] is not None
    assert bool(at.warning) == flagged


def test_comparison_of_two_groups_by_tag(demo_warehouse):
    """Runs tagged capacity=on-demand against capacity=spot: mean wall-clock and mean cost per run
    from the file."""
    sides = {v: [r for r in RUNS if r["tags"].get("capacity") == v] for v in ("on-demand", "spot")}
    assert all(sides.values())
    at = AppTest.from_file(str(REPO_ROOT / "app" / "main.py"), default_timeout=60).run()
    at.switch_page("app_pages/training_runs.py").run()
    at.selectbox(key="compare_by").set_value("tag").run()
    at.selectbox(key="compare_tag").set_value("capacity").run()
    at.selectbox(key="compare_baseline").set_value("on-demand").run()
    at.selectbox(key="compare_candidate").set_value("spot").run()
    assert not at.exception
    shown = at.dataframe[-2].value.set_index("figure")
    hours = {v: sum(Decimal(str(r["duration_hours"])) for r in rs) / len(rs) for v, rs in sides.items()}
    cost = {v: sum(r["estimated_cost_usd"] for r in rs) / len(rs) for v, rs in sides.items()}
    assert shown.at["Runs", "baseline"] == str(len(sides["on-demand"]))
    assert shown.at["Runs", "candidate"] == str(len(sides["spot"]))
    speedup = float(hours["on-demand"] / hours["spot"])
    assert shown.at["Wall-clock per run (h)", "candidate vs baseline"] == f"speedup {speedup:,.4g}×"
    assert shown.at["Cost per run (USD)", "candidate"] == f"${cost['spot']:,.2f}"
    assert shown.at["Cost per run (USD)", "candidate vs baseline"] == \
        f"cost ratio {float(cost['spot'] / cost['on-demand']):,.4g}×"


def test_energy_per_1k_examples_and_emissions_from_the_runs_energy(frame):
    """Runs without a logged energy take their GPU energy from traces: the generator's own
    per-run energy (truth.json node_runs) x 1,000,000 / examples, and x PUE x grid g/kWh / 1000
    with the region's factors read here from ingest/defaults.toml."""
    import tomllib
    truth = json.loads((SAMPLE_DIR / "truth.json").read_text())["node_runs"]
    energy = tomllib.loads((REPO_ROOT / "ingest" / "defaults.toml").read_text())["energy"]
    examples = {r["run_id"]: r["examples"] for r in RUNS}
    regions = {r["run_id"]: r["region"] for r in RUNS}
    rows = frame.set_index("run_id")
    assert len(truth) > 100
    for run_id, t in truth.items():
        kwh = t["energy_kwh"]
        pue = energy["pue_by_region"].get(regions[run_id], energy["pue"])
        grid = energy["grid_gco2_per_kwh_by_region"].get(regions[run_id], energy["grid_gco2_per_kwh"])
        assert rows.at[run_id, "energy_source"] == "gpu traces"
        assert rows.at[run_id, "run_energy_kwh"] == pytest.approx(kwh, rel=1e-3), run_id
        assert rows.at[run_id, "energy_per_1k_examples_wh"] == pytest.approx(kwh * 1e6 / examples[run_id], rel=1e-3)
        assert rows.at[run_id, "run_emissions_kg"] == pytest.approx(kwh * pue * grid / 1000, rel=1e-3)


def test_a_catalog_priced_run_names_the_catalogs_source_and_date(warehouse, tmp_path):
    """A run without a price is priced from the catalog; its price_source is the table's source and
    date as ingest/defaults.toml states them (read here with tomllib)."""
    import tomllib
    from ingest.pipeline import loader
    from ingest.settings import config
    from metrics import price_sources, queries
    from metrics.filters import Filters
    runs = tmp_path / "runs.jsonl"
    runs.write_text(json.dumps({"run_id": "cat-1", "project": "p", "start_time": "2026-03-01T00:00:00Z",
                                "duration_hours": 2, "instance_type": "g5.xlarge"}) + "\n"
                    + json.dumps({"run_id": "own-1", "project": "p", "start_time": "2026-03-01T00:00:00Z",
                                  "duration_hours": 2, "instance_type": "g5.xlarge", "price_per_hour_usd": 1}) + "\n")
    assert all(s.ok for _, s in loader.ingest_paths([str(runs)]))
    frame = queries.training_runs(Filters(), None, None)
    shown = frame.assign(price_source=price_sources.price_source(frame, config.load().prices)).set_index("run_id")
    prices = tomllib.loads((REPO_ROOT / "ingest" / "defaults.toml").read_text())["prices"]
    table = "instance_usd_per_hour"
    assert shown.at["cat-1", "cost_source"] == "catalog"
    assert shown.at["cat-1", "price_source"] == f"{prices['source'][table]}, as of {prices['as_of'][table]}"
    assert shown.at["own-1", "price_source"] is None


def test_energy_to_target_from_eval_history(demo_warehouse):
    """eval_loss target 1.8: each traced run's energy (truth.json) x the elapsed share at its first
    eval point at or under it (duration from truth's start and end)."""
    from datetime import datetime
    from ingest.settings import config
    from metrics import queries
    from metrics.filters import Filters
    truth = json.loads((SAMPLE_DIR / "truth.json").read_text())["node_runs"]
    target = Decimal("1.8")
    want = {}
    for r in RUNS:
        if r["run_id"] not in truth or r["val_metric_name"] != "eval_loss" or "eval_history" not in r:
            continue
        t = truth[r["run_id"]]
        span = (datetime.fromisoformat(t["end"].replace("Z", "+00:00"))
                - datetime.fromisoformat(t["start"].replace("Z", "+00:00"))).total_seconds()
        first = next((p["elapsed_s"] for p in r["eval_history"] if p["value"] <= target), None)
        if first is not None:
            want[r["run_id"]] = t["energy_kwh"] * min(float(first) / span, 1.0)
    assert len(want) >= 3
    got = queries.training_runs(Filters(), "eval_loss", float(target), *config.load().energy.query_factors())
    got = got[got["to_target_basis"] == "eval history"].set_index("run_id")
    for run_id, kwh in want.items():
        assert got.at[run_id, "energy_to_target_kwh"] == pytest.approx(kwh, rel=1e-3), run_id


def test_throughput_and_cost_efficiency_by_gpu_type(demo_warehouse):
    """Per project and GPU type: mean examples/s, and examples per dollar = sum(examples/s x hours x
    3600) / sum(cost), from the file."""
    from metrics import queries
    from metrics.filters import Filters
    groups = defaultdict(list)
    for r in RUNS:
        groups[(r["project"], r["gpu_type"])].append(r)
    got = queries.hardware_throughput(Filters(), "GPU type").set_index(["project", "hardware"])
    assert set(got.index) == set(groups)
    for key, rs in groups.items():
        mean = sum(r["throughput_examples_per_sec"] for r in rs) / len(rs)
        per_usd = sum(r["throughput_examples_per_sec"] * r["duration_hours"] * 3600 for r in rs) \
            / sum(r["estimated_cost_usd"] for r in rs)
        assert got.at[key, "runs"] == len(rs)
        assert got.at[key, "throughput_examples_per_s"] == pytest.approx(float(mean), rel=1e-9)
        assert got.at[key, "cost_efficiency_examples_per_usd"] == pytest.approx(float(per_usd), rel=1e-4), key
