"""Issue 22's new views on the sample data (sample_data/, loaded as `mlcost demo` loads it), each
figure checked against plain Python over the sample files (json, csv, gzip, zoneinfo, Decimal):
never the product's SQL or functions for the expected values.

- the serving hour-of-week view (requests per weekday x hour cell, November, UTC and New York:
  November 2026 holds the end of summer time on Sunday 1 November, 02:00 EDT -> 01:00 EST);
- the GPU hour-of-week view (utilization, observed GPU-hours, span per cell, October);
- the retrospective's guardrail breaches of November against sample_data/mlcost.toml's [alerts];
- the retrospective's cost per 1k successful requests per service and model version, November.
"""
from __future__ import annotations

import csv
import gzip
import json
import tomllib
from collections import defaultdict
from datetime import date, datetime, timezone
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest

from ingest.settings import config
from metrics import queries, retrospective
from metrics.filters import Filters
from tests.conftest import REPO_ROOT, SAMPLE_DIR

UTC = timezone.utc
NEW_YORK = "America/New_York"
NOV_START, DEC_START = datetime(2026, 11, 1, tzinfo=UTC).timestamp(), datetime(2026, 12, 1, tzinfo=UTC).timestamp()
OCT_START = datetime(2026, 10, 1, tzinfo=UTC).timestamp()
QUARTER_S = 900
# [gpu] max_gap_s, documented default (docs and ingest/defaults.toml); sample_data/mlcost.toml sets no [gpu]
MAX_GAP_S = 300.0


@pytest.fixture(autouse=True)
def _sample_db(demo_db, monkeypatch, tmp_path):
    """Read the sample warehouse; no user settings in the way."""
    monkeypatch.setenv("MLCOST_DB", str(demo_db))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLCOST_CONFIG", raising=False)


def epoch(value) -> float:
    """Seconds since 1970 of a sample time: epoch seconds, or ISO 8601 with Z or an offset."""
    if isinstance(value, (int, float)):
        return float(value)
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def cell(at_s: float, zone: str) -> tuple[int, int]:
    local = datetime.fromtimestamp(at_s, UTC).astimezone(ZoneInfo(zone))
    return local.isoweekday(), local.hour


def span_hours(first_s: float, last_end_s: float, zone: str) -> dict[tuple[int, int], float]:
    """Hours per cell of [the first quarter hour with data, the end of the last one], a quarter at a time
    (every zone's offset is whole quarter hours, so a quarter lies in one local hour)."""
    out: dict[tuple[int, int], float] = defaultdict(float)
    at = first_s // QUARTER_S * QUARTER_S
    while at < last_end_s:
        out[cell(at, zone)] += 0.25
        at += QUARTER_S
    return out


def by_cell(frame) -> dict[tuple[int, int], dict]:
    return {(int(r["weekday"]), int(r["hour"])): r for r in frame.to_dict("records")}


# --- the sample files, read by hand -------------------------------------------------------------

def windows() -> list[dict]:
    with gzip.open(SAMPLE_DIR / "serving_windows.jsonl.gz", "rt") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def november_windows() -> list[dict]:
    return [w for w in windows() if NOV_START <= epoch(w["window_start"]) < DEC_START]


def runs() -> list[dict]:
    with open(SAMPLE_DIR / "runs.jsonl") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def expected_serving_cells(zone: str) -> dict[tuple[int, int], dict[str, float]]:
    """Each November window split across the quarter hours it spans in proportion to the time in
    each (traffic even within a window), each piece going to its quarter's cell on `zone`'s clock."""
    out: dict[tuple[int, int], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for w in november_windows():
        start, end = epoch(w["window_start"]), epoch(w["window_end"])
        if end <= start:
            continue
        q = start // QUARTER_S * QUARTER_S
        while q < end:
            share = (min(end, q + QUARTER_S) - max(start, q)) / (end - start)
            sums = out[cell(q, zone)]
            sums["requests_total"] += w["requests_total"] * share
            sums["requests_success"] += w["requests_success"] * share
            q += QUARTER_S
    return out


@pytest.mark.parametrize("zone", ["UTC", NEW_YORK])
def test_serving_hour_of_week_on_the_sample_matches_the_windows(zone):
    wins = november_windows()
    assert len(wins) > 1000
    expected = expected_serving_cells(zone)
    span = span_hours(min(epoch(w["window_start"]) for w in wins), max(epoch(w["window_end"]) for w in wins), zone)
    cells = by_cell(queries.serving_hour_of_week(Filters(start=date(2026, 11, 1), end=date(2026, 11, 30)), zone))
    assert len(cells) == 7 * 24 and set(cells) == set(span)
    for key, row in cells.items():
        sums = expected[key]
        assert sums["requests_total"] > 0, key  # every hour of the week has traffic in the sample
        assert row["span_h"] == pytest.approx(span[key]), key
        assert row["requests_total"] == pytest.approx(sums["requests_total"], rel=1e-9), key
        assert row["requests_success"] == pytest.approx(sums["requests_success"], rel=1e-9), key
        assert row["requests_per_h"] == pytest.approx(sums["requests_total"] / span[key], rel=1e-9), key
    assert sum(r["requests_total"] for r in cells.values()) == pytest.approx(sum(w["requests_total"] for w in wins))
    if zone == NEW_YORK:
        # Sunday 2026-11-01: 01:00-02:00 happened twice (EDT, then EST): over the span's three Sundays
        # (1, 8, 15 November) that cell has 4 h where 03:00 has 3
        assert span[(7, 1)] == pytest.approx(4) and span[(7, 3)] == pytest.approx(3)
        assert cells[(7, 1)]["span_h"] == pytest.approx(span[(7, 3)] + 1)


# --- GPU hour of week ----------------------------------------------------------------------------

def gpu_samples() -> dict[tuple[str, str], list[tuple[float, float | None]]]:
    """(host, gpu_index) -> [(epoch s, utilization % or None)] sorted, from every trace file."""
    out: dict[tuple[str, str], list] = defaultdict(list)
    for path in sorted((SAMPLE_DIR / "gpu_traces").glob("*.csv.gz")):
        with gzip.open(path, "rt", newline="") as handle:
            for row in csv.DictReader(handle):
                util = row["gpu_util_pct"]
                out[(row["host"], row["gpu_index"])].append((epoch(row["timestamp"]), float(util) if util else None))
    return {key: sorted(samples) for key, samples in out.items()}


def expected_gpu_cells(first_s: float, end_s: float, zone: str):
    """Per cell: observed seconds and utilization x seconds (of samples with a utilization). A sample
    stands for the time to the next one when that is at most MAX_GAP_S, else the time since the
    previous one when that is, else nothing; its time is cut at UTC minutes, and a piece counts
    when its minute lies in [first_s, end_s). Also the first and last observed minute."""
    observed, util_s, util_weight = defaultdict(float), defaultdict(float), defaultdict(float)
    minutes = []
    for samples in gpu_samples().values():
        for i, (at, util) in enumerate(samples):
            next_s = samples[i + 1][0] - at if i + 1 < len(samples) else None
            prev_s = at - samples[i - 1][0] if i > 0 else None
            interval = next_s if next_s is not None and next_s <= MAX_GAP_S else (
                prev_s if prev_s is not None and prev_s <= MAX_GAP_S else 0)
            end, piece_start = at + interval, at
            while piece_start < end:
                minute = piece_start // 60 * 60
                piece_end = min(end, minute + 60)
                if first_s <= minute < end_s:
                    key = cell(minute, zone)
                    observed[key] += piece_end - piece_start
                    if util is not None:
                        util_s[key] += util * (piece_end - piece_start)
                        util_weight[key] += piece_end - piece_start
                    minutes.append(minute)
                piece_start = piece_end
    return observed, util_s, util_weight, min(minutes), max(minutes) + 60


@pytest.mark.parametrize("zone", ["UTC", NEW_YORK])
def test_gpu_hour_of_week_on_the_sample_matches_the_traces(zone):
    observed, util_s, util_weight, first, last_end = expected_gpu_cells(OCT_START, NOV_START, zone)
    span = span_hours(first, last_end, zone)
    cells = by_cell(queries.gpu_hour_of_week(Filters(start=date(2026, 10, 1), end=date(2026, 10, 31)), zone))
    assert len(cells) == 7 * 24 and set(cells) == set(span)
    utils = []
    for key, row in cells.items():
        assert observed[key] > 0, key
        assert row["span_h"] == pytest.approx(span[key]), key
        assert row["observed_gpu_h"] == pytest.approx(observed[key] / 3600, rel=1e-9), key
        assert row["gpus_present"] == pytest.approx(observed[key] / 3600 / span[key], rel=1e-9), key
        # each minute's mean weighted by its coverage = utilization weighted by observed seconds
        # (the sample traces have a utilization in every row, so both weightings agree exactly)
        assert row["util_pct"] == pytest.approx(util_s[key] / util_weight[key], rel=1e-9), key
        utils.append(row["util_pct"])
    assert sum(observed.values()) / 3600 == pytest.approx(sum(r["observed_gpu_h"] for r in cells.values()))
    # the view says something: nights and weekends are far less busy than the busiest hour
    assert min(utils) < 0.5 * max(utils)
    # 8 GPUs traced every second of October (the sample's one trace hole, 4 GPUs x ~3 h, is in another month)
    assert sum(observed.values()) / 3600 == pytest.approx(8 * 31 * 24)


# --- the retrospective's guardrail breaches and cost per 1k per version ---------------------------

def sample_settings():
    return config.load(SAMPLE_DIR / "mlcost.toml")


def test_november_guardrail_breaches_are_the_runs_over_the_sample_limits():
    with open(SAMPLE_DIR / "mlcost.toml", "rb") as handle:
        alerts = tomllib.load(handle)["alerts"]
    max_cost = Decimal(str(alerts.get("run_max_cost_usd", 0)))
    max_hours = float(alerts.get("run_max_hours", 0))
    max_gpu_hours = float(alerts.get("run_max_gpu_hours", 0))
    expected = {}
    for run in runs():
        start = epoch(run["start_time"])
        if not NOV_START <= start < DEC_START:
            continue
        # the runs file states each run's cost (estimated_cost_usd = price_per_hour_usd x duration_hours)
        cost = Decimal(str(run["estimated_cost_usd"]))
        hours = (epoch(run["end_time"]) - start) / 3600
        gpu_hours = hours * run["gpu_count"]
        over = [name for name, crossed in (("cost", max_cost > 0 and cost > max_cost),
                                           ("hours", max_hours > 0 and hours > max_hours),
                                           ("GPU-hours", max_gpu_hours > 0 and gpu_hours > max_gpu_hours)) if crossed]
        if over:
            expected[run["run_id"]] = (cost, hours, ", ".join(over), run["owner"], run["project"])
    assert sorted(expected) == ["llm-finetune-0052", "llm-finetune-0057"]  # the sample's two 8-GPU full runs

    retro = retrospective.build(date(2026, 11, 1), sample_settings())
    section = retro.section("guardrails")
    table = section.table
    assert table is not None
    found = {r["run_id"]: r for r in table.to_dict("records")}
    assert sorted(found) == sorted(expected)
    for run_id, (cost, hours, over, owner, project) in expected.items():
        row = found[run_id]
        assert Decimal(str(row["cost_usd"])) == cost, run_id
        assert float(row["duration_h"]) == pytest.approx(hours, abs=1e-6), run_id
        assert row["over"] == over and row["owner"] == owner and row["project"] == project, run_id
        assert Decimal(str(row["max_cost_usd"])) == max_cost, run_id
    # costliest first
    assert list(table["run_id"]) == sorted(expected, key=lambda r: expected[r][0], reverse=True)
    assert retro.figure("Runs over a guardrail").current == len(expected)


def window_cost(window: dict, instance_prices: dict) -> Decimal | None:
    """The window's cost_usd; without one, instance price x replicas x hours (sample_data/README.md:
    "Seven windows have no cost_usd (derive it from price x replicas x hours)"), the price from the
    shipped price list (ingest/defaults.toml, read as TOML); None when neither is known."""
    if window.get("cost_usd") is not None:
        return Decimal(str(window["cost_usd"]))
    price = instance_prices.get(window.get("instance_type"))
    if price is None or window.get("replicas") is None:
        return None
    hours = Decimal(str(epoch(window["window_end"]) - epoch(window["window_start"]))) / 3600
    return Decimal(str(price)) * window["replicas"] * hours


def test_november_cost_per_1k_per_model_version_matches_the_windows():
    with open(REPO_ROOT / "ingest" / "defaults.toml", "rb") as handle:
        instance_prices = tomllib.load(handle)["prices"]["instance_usd_per_hour"]
    cost, success = defaultdict(Decimal), defaultdict(int)
    derived = 0
    for w in november_windows():
        priced = window_cost(w, instance_prices)
        if priced is None:
            continue  # a window without a cost is out of both sums
        derived += w.get("cost_usd") is None
        key = (w["service"], w["model_version"])
        cost[key] += priced
        success[key] += w["requests_success"]
    assert derived == 1  # vision-tagger v3.1, 2026-11-20 12:00 UTC: g5.xlarge x 3 replicas x 1 h
    expected = {key: cost[key] / success[key] * 1000 for key in cost if success[key]}
    assert len(expected) >= 3

    retro = retrospective.build(date(2026, 11, 1), sample_settings())
    table = retro.section("version_costs").table
    found = {(r["service"], r["model_version"]): r for r in table.to_dict("records")}
    assert set(found) == set(expected)
    for key, per_1k in expected.items():
        assert Decimal(str(found[key]["cost_usd"])) == cost[key], key
        assert Decimal(str(found[key]["cost_per_1k_success_usd"])) == pytest.approx(per_1k, rel=Decimal("1e-9")), key


def test_november_cost_per_run_against_val_metric_are_the_files_runs():
    """The retrospective's first seed graph: one point per completed November run with a cost and
    a validation metric, its cost the file's estimated_cost_usd; a run is on its project's frontier
    when no other run of the project (same metric) costs no more and scores at least as well, one
    of the two strictly (brute force over the file)."""
    month = [r for r in runs() if NOV_START <= epoch(r["start_time"]) < DEC_START
             and r["status"] == "completed" and r.get("val_metric") is not None
             and r.get("estimated_cost_usd") is not None]
    assert len(month) > 20
    expected = {r["run_id"]: (Decimal(str(r["estimated_cost_usd"])), r["val_metric"]) for r in month}

    def better(a: dict, b: dict) -> bool:  # a dominates b
        ca, cb = Decimal(str(a["estimated_cost_usd"])), Decimal(str(b["estimated_cost_usd"]))
        ma, mb = (a["val_metric"], b["val_metric"]) if a["goal"] == "max" else (-a["val_metric"], -b["val_metric"])
        return ca <= cb and ma >= mb and (ca < cb or ma > mb)
    frontier = {r["run_id"] for r in month
                if not any(better(o, r) for o in month
                           if o is not r and (o["project"], o["val_metric_name"]) == (r["project"], r["val_metric_name"]))}
    assert 0 < len(frontier) < len(month)

    from metrics import queries

    last_day = queries.filter_choices()["last_day"]
    points = retrospective.run_points(retrospective.Context(date(2026, 11, 1), sample_settings(),
                                                            retrospective.as_day(last_day)))
    found = {r.run_id: (Decimal(str(r.cost_usd)), float(r.val_metric)) for r in points.itertuples()}
    assert found == {k: (c, pytest.approx(m, abs=1e-12)) for k, (c, m) in expected.items()}
    assert {r.run_id for r in points.itertuples() if r.on_frontier} == frontier

    section = retrospective.build(date(2026, 11, 1), sample_settings()).section("runs_vs_metric")
    assert section is not None and section.chart is not None
    assert set(section.table["run_id"]) == frontier
