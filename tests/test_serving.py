"""Serving windows: the parser (ingest/formats/serving.py), the price catalog (ingest/settings/config.py), the
warehouse view `serving_costs`, the regression rule (metrics/queries.py) and the Serving page.

Figures on the sample data are recomputed here from the raw sample file with plain Python
(json + gzip, prices read off the windows that carry a cost), never from the warehouse's SQL.
"""
from __future__ import annotations

import csv
import gzip
import io
import json
import os
import shutil
import subprocess
import sys
import tomllib
from collections import defaultdict
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from metrics import queries
from metrics.filters import Filters
from ingest.engine import warehouse as wh
from ingest.engine.contract import ParseContext, numbered
from ingest.formats import serving
from ingest.formats.runs import codecarbon, run_summary
from ingest.pipeline import loader
from ingest.settings import config
from tests.conftest import IN_CI, REPO_ROOT, SAMPLE_DIR, as_read

UTC = timezone.utc
CTX = ParseContext("serving.jsonl", UTC)
APP = REPO_ROOT / "app" / "main.py"
PAGE = "app_pages/serving.py"
SAMPLE = SAMPLE_DIR / "serving_windows.jsonl.gz"
TRUTH = SAMPLE_DIR / "truth.json"
DEFAULTS = REPO_ROOT / "ingest" / "defaults.toml"
PRICES = config.Prices({"g5.12xlarge": Decimal("5.672"), "g6.xlarge": Decimal("0.8048")},
                       {"l4": Decimal("0.8048")})

# Every column of `serving_windows` the parser fills (the warehouse adds load_id).
COLUMNS = (
    "window_key", "window_start", "window_end", "window_s", "service", "model_version",
    "requests_total", "requests_success", "requests_error", "latency_ms_p50", "latency_ms_p95",
    "latency_ms_p99", "throughput_rps", "avg_gpu_util_pct", "avg_cpu_util_pct", "cost_usd",
    "cost_source", "price_per_hour_usd", "energy_kwh", "energy_source", "instance_type", "gpu_type",
    "gpu_count", "replicas", "host", "gpu_uuids", "prompt_tokens", "output_tokens", "source_kind", "source_line",
)

# The seed document's serving record (one window), as a service would write it.
SEED = {
    "window_start": "2026-08-01T00:00:00Z", "window_end": "2026-08-01T01:00:00Z",
    "service": "chat-assistant", "model_version": "v0.9",
    "requests_total": 5199, "requests_success": 5167, "requests_error": 32,
    "latency_ms_p50": 865.1, "latency_ms_p95": 2092.3, "latency_ms_p99": 3287.8,
    "throughput_rps": 1.444167, "avg_gpu_util": 28.0, "avg_cpu_util": 20.8,
    "cost_usd": 11.344, "energy_kwh": 1.298401, "instance_type": "g5.12xlarge", "replicas": 2,
    "host": "serve-3", "gpu_uuids": ["GPU-a", "GPU-b"],
}
START = datetime(2026, 8, 1, tzinfo=UTC)
SEED_ROW = {
    "window_key": "chat-assistant|v0.9|serve-3|2026-08-01T00:00:00+00:00",
    "window_start": START, "window_end": START + timedelta(hours=1), "window_s": 3600.0,
    "service": "chat-assistant", "model_version": "v0.9",
    "requests_total": 5199, "requests_success": 5167, "requests_error": 32,
    "latency_ms_p50": 865.1, "latency_ms_p95": 2092.3, "latency_ms_p99": 3287.8,
    "throughput_rps": 1.444167, "prompt_tokens": None, "output_tokens": None, "avg_gpu_util_pct": 28.0, "avg_cpu_util_pct": 20.8,
    "cost_usd": Decimal("11.344"), "cost_source": "given", "price_per_hour_usd": None,
    "energy_kwh": 1.298401, "energy_source": "given", "instance_type": "g5.12xlarge",
    "gpu_type": None, "gpu_count": 2, "replicas": 2, "host": "serve-3",
    "gpu_uuids": ["GPU-a", "GPU-b"], "source_kind": "serving", "source_line": 1,
}


@pytest.fixture(autouse=True)
def _no_user_settings(tmp_path, monkeypatch):
    """Run where no mlcost.toml is, with no $MLCOST_CONFIG: the shipped defaults apply."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLCOST_CONFIG", raising=False)


def jsonl(*records: dict) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def parse(text: str, prices: config.Prices = PRICES):
    return serving.parse(numbered(text.split("\n")), CTX, prices)


def window(**fields) -> dict:
    """The seed record with some fields changed (None removes a field)."""
    record = {**SEED, **fields}
    return {k: v for k, v in record.items() if v is not None}


def fetch(sql: str, params: list | None = None) -> list[dict]:
    with wh.connect() as con:
        cursor = con.execute(sql, params or [])
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]


# --- the parser --------------------------------------------------------------------------

def test_seed_record_parses_to_one_whole_row():
    parsed = parse(jsonl(SEED))
    assert parsed.rejects == [] and parsed.accepted == 1
    assert parsed.rows("serving_windows") == [SEED_ROW]


def test_seed_record_loads_end_to_end(tmp_path, warehouse):
    path = tmp_path / "serving.jsonl"
    path.write_text(jsonl(SEED))
    summary = loader.ingest_file(path)
    record = summary.to_json()
    assert 0 <= record.pop("merge_s") < 600  # seconds the warehouse was locked for the merge: varies run to run
    assert record == {
        "path": str(path), "kind": "serving", "status": "loaded", "rows_loaded": 1, "rows_rejected": 0,
        "rejects": [], "windows": 1, "requests_total": 5199, "cost_usd_total": "11.34",
        "windows_cost_derived": 0, "windows_without_cost": 0, "energy_kwh_total": 1.298401,
        "windows_with_energy": 1,
    }
    [row] = fetch(f"SELECT {', '.join(COLUMNS)} FROM serving_windows")
    assert row == {**SEED_ROW, "cost_usd": Decimal("11.344000000000")}


@pytest.mark.parametrize("length_field", ["window_seconds", "window_s"])
def test_start_and_length_make_the_end(length_field):
    record = window(window_end=None, window_start="2026-08-01T02:00:00+02:00", **{length_field: 900})
    [row] = parse(jsonl(record)).rows("serving_windows")
    assert (row["window_start"], row["window_end"], row["window_s"]) == (
        START, START + timedelta(minutes=15), 900.0)


def test_length_agreeing_with_start_and_end_is_accepted():
    parsed = parse(jsonl(window(window_seconds=3600.5)))
    assert parsed.rejects == [] and parsed.rows("serving_windows")[0]["window_s"] == 3600.0


BAD_FILE = [  # (record or raw line, reason the user sees); line 1 and line 9 are good
    (window(), None),
    (window(window_end="2026-07-31T23:00:00Z"),
     "window_end 2026-07-31T23:00:00+00:00 is before window_start 2026-08-01T00:00:00+00:00"),
    (window(requests_error=-3), "requests_error is negative (-3)"),
    (window(requests_success=5190), "requests_success 5190 + requests_error 32 is more than requests_total 5199"),
    (window(requests_total="lots"), "requests_total must be a number, got 'lots'"),
    (window(cost_usd="n/a"), "cost_usd must be an amount, got 'n/a'"),
    ('{"window_start": "2026-08-01T00:00:00Z", "service": ', "not valid JSON"),
    (window(window_end=None), "no window_end or window_seconds"),
    (window(window_start="2026-08-01T05:00:00Z", window_end="2026-08-01T06:00:00Z"), None),
    (window(latency_ms_p95=-1), "latency_ms_p95 is negative (-1)"),
    (window(avg_gpu_util=140), "avg_gpu_util 140 is not a percentage from 0 to 100"),
    (window(window_end="2026-08-01T00:00:00Z"), "window_end equals window_start"),
    (window(window_seconds=600), "window_seconds 600 disagrees with window_end - window_start (3600 s)"),
    (window(model_version=None), "no model_version"),
    (window(energy_kwh=-0.5), "energy_kwh is negative (-0.5)"),
    (window(requests_total=1e20), "requests_total Decimal('1E+20') is too large"),
    (window(cost_usd="1e30"), "cost_usd 1E+30 is too large"),
    (window(cost_usd=-2.5), "cost_usd is negative (-2.5)"),
]


def bad_file_text() -> str:
    return "".join((item if isinstance(item, str) else json.dumps(item)) + "\n" for item, _ in BAD_FILE)


def test_each_bad_window_is_rejected_with_its_line_and_reason():
    parsed = parse(bad_file_text())
    expected = [(line, reason) for line, (_, reason) in enumerate(BAD_FILE, start=1) if reason]
    assert [(r.line, r.reason[:len(reason)]) for r, (_, reason) in zip(parsed.rejects, expected)] == expected
    assert len(parsed.rejects) == len(expected)
    assert [row["source_line"] for row in parsed.rows("serving_windows")] == [1, 9]


def test_bad_windows_land_in_rejects_and_good_ones_load(tmp_path, warehouse):
    path = tmp_path / "bad.jsonl"
    path.write_text(bad_file_text())
    summary = loader.ingest_file(path)
    expected_lines = [line for line, (_, reason) in enumerate(BAD_FILE, start=1) if reason]
    assert (summary.kind, summary.rows_loaded, summary.rows_rejected) == ("serving", 2, len(expected_lines))
    assert [r["line"] for r in fetch("SELECT line FROM rejects ORDER BY line")] == expected_lines
    assert fetch("SELECT count(*) AS n FROM serving_windows") == [{"n": 2}]


def csv_text(*records: dict) -> str:
    names = list(dict.fromkeys(k for r in records for k in r))
    out = io.StringIO()
    writer = csv.DictWriter(out, names, lineterminator="\n")
    writer.writeheader()
    for record in records:
        writer.writerow({k: ",".join(v) if isinstance(v, list) else v for k, v in record.items()})
    return out.getvalue()


def test_csv_windows_equal_their_jsonl_twins():
    records = [SEED, window(window_start="2026-08-01T01:00:00Z", window_end=None, window_seconds=3600,
                            cost_usd=None, requests_error=None)]
    from_json = parse(jsonl(*records)).rows("serving_windows")
    from_csv = parse(csv_text(*records)).rows("serving_windows")
    assert [{**row, "source_line": row["source_line"] + 1} for row in from_json] == from_csv
    assert from_csv[1]["cost_source"] == "derived" and from_csv[1]["requests_error"] is None


def test_csv_problems_name_their_lines():
    text = csv_text(SEED, window(requests_success=-1)) + "1,2,3\n"
    parsed = parse(text)
    assert [(r.line, r.reason) for r in parsed.rejects] == [
        (3, "requests_success is negative (-1)"), (4, f"has 3 fields, the header has {len(SEED)}")]
    assert parse("window_start,service\n2026-08-01T00:00:00Z,x\n").rejects[0].reason == (
        "not a serving-window header: missing requests_total, requests_success, model_version")


def test_a_window_repeated_in_the_file_keeps_its_last_record():
    parsed = parse(jsonl(SEED, window(requests_error=30)))
    assert parsed.accepted == 2
    assert [(r["requests_error"], r["source_line"]) for r in parsed.rows("serving_windows")] == [(30, 2)]


def test_loading_a_window_again_replaces_it(tmp_path, warehouse):
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    later = window(window_start="2026-08-01T01:00:00Z", window_end="2026-08-01T02:00:00Z")
    first.write_text(jsonl(SEED, later))
    second.write_text(jsonl(window(requests_error=10), window(host="serve-4")))  # a new host is a new window
    assert loader.ingest_file(first).rows_loaded == 2
    assert loader.ingest_file(second).rows_loaded == 2
    rows = fetch("SELECT host, window_start, requests_error, load_id FROM serving_windows ORDER BY host, window_start")
    assert [(r["host"], r["window_start"].astimezone(UTC).hour, r["requests_error"], r["load_id"]) for r in rows] == [
        ("serve-3", 0, 10, 2), ("serve-3", 1, 32, 1), ("serve-4", 0, 32, 2)]
    assert loader.ingest_file(second).status == "already_loaded"


def test_a_broken_first_line_of_jsonl_loses_that_line_only():
    parsed = parse("oops\n" + jsonl(SEED))
    assert [(r.line, r.reason[:14]) for r in parsed.rejects] == [(1, "not valid JSON")]
    assert [row["source_line"] for row in parsed.rows("serving_windows")] == [2]


# --- cost from the price catalog ---------------------------------------------------------

@pytest.mark.parametrize("fields, cost, price", [
    # 5.672 USD/h (g5.12xlarge) x 3 replicas x 0.25 h = 4.254 USD
    ({"instance_type": "g5.12xlarge", "replicas": 3, "window_seconds": 900}, "4.254", "17.016"),
    # 0.8048 USD/h (g6.xlarge) x 4 x 1 h
    ({"instance_type": "G6.XLARGE", "replicas": 4, "window_seconds": 3600}, "3.2192", "3.2192"),
    # no instance price: 0.8048 USD per L4-hour x 2 GPUs x 0.5 h
    ({"instance_type": None, "gpu_type": "NVIDIA L4", "gpu_count": 2, "window_seconds": 1800},
     "0.8048", "1.6096"),
    # GPU count from the uuids: 3 x 0.8048 x (1/6 h) = 0.40240000...
    ({"instance_type": "x9.huge", "gpu_type": "L4", "gpu_uuids": ["a", "b", "c"], "window_seconds": 600},
     "0.402400000000", "2.4144"),
])
def test_missing_cost_is_price_times_replicas_times_hours(fields, cost, price):
    record = window(cost_usd=None, window_end=None, **fields)
    [row] = parse(jsonl(record)).rows("serving_windows")
    assert (row["cost_usd"], row["cost_source"], row["price_per_hour_usd"]) == (
        Decimal(cost), "derived", Decimal(price))


def test_unpriced_window_loads_without_cost_and_the_summary_counts_it(tmp_path, warehouse):
    path = tmp_path / "serving.jsonl"
    path.write_text(jsonl(window(cost_usd=None, instance_type="x9.huge"),
                          window(cost_usd=None, replicas=None, window_start="2026-08-01T01:00:00Z",
                                 window_end="2026-08-01T02:00:00Z")))
    summary = loader.ingest_file(path)
    assert (summary.rows_loaded, summary.rows_rejected) == (2, 0)
    assert {k: summary.totals[k] for k in ("cost_usd_total", "windows_cost_derived", "windows_without_cost")} == {
        "cost_usd_total": None, "windows_cost_derived": 0, "windows_without_cost": 2}
    assert fetch("SELECT cost_usd, cost_source FROM serving_windows") == [
        {"cost_usd": None, "cost_source": None}] * 2


def test_missing_energy_stays_null_never_zero():
    [row] = parse(jsonl(window(energy_kwh=None))).rows("serving_windows")
    assert (row["energy_kwh"], row["energy_source"]) == (None, None)


def test_shipped_catalog_prices_the_parser_by_default():
    record = window(cost_usd=None, instance_type="g5.xlarge", replicas=3)
    [row] = serving.parse(numbered(jsonl(record).split("\n")), CTX).rows("serving_windows")
    assert row["cost_usd"] == Decimal("3.018")  # 1.006 x 3 x 1 h


# --- the settings file -------------------------------------------------------------------

def test_defaults_hold_the_documented_serving_rule():
    settings = config.load()
    assert (settings.serving.regression_pct, settings.serving.min_requests, settings.user_file) == (10.0, 10000, None)
    assert settings.prices.instance("p4d.24xlarge") == Decimal("32.7726")
    assert settings.prices.gpu("Tesla V100-SXM2-16GB") == Decimal("3.06")


def test_mlcost_toml_in_the_working_directory_overrides_keys(tmp_path):
    (tmp_path / "mlcost.toml").write_text(
        '[prices.instance_usd_per_hour]\n"g5.xlarge" = 2\n"my.box" = "0.5"\n[serving]\nregression_pct = 25\n')
    settings = config.load()
    assert settings.prices.instance("g5.xlarge") == Decimal(2)
    assert settings.prices.instance("my.box") == Decimal("0.5")
    assert settings.prices.instance("g6.xlarge") == Decimal("0.8048")  # untouched keys keep their default
    assert (settings.serving.regression_pct, settings.serving.min_requests) == (25.0, 10000)
    record = window(cost_usd=None, instance_type="g5.xlarge", replicas=3)
    [row] = serving.parse(numbered(jsonl(record).split("\n")), CTX).rows("serving_windows")
    assert row["cost_usd"] == Decimal(6)


def test_mlcost_config_names_the_file(tmp_path, monkeypatch):
    named = tmp_path / "elsewhere.toml"
    named.write_text("[serving]\nmin_requests = 5\n")
    monkeypatch.setenv("MLCOST_CONFIG", str(named))
    assert config.load().serving.min_requests == 5
    monkeypatch.setenv("MLCOST_CONFIG", str(tmp_path / "missing.toml"))
    with pytest.raises(config.ConfigError, match="missing.toml: no such file"):
        config.load()


@pytest.mark.parametrize("text, key, words", [
    ('[prices.instance_usd_per_hour]\n"g5.xlarge" = "cheap"\n', "prices.instance_usd_per_hour.g5.xlarge",
     "must be a price in USD per hour, got 'cheap'"),
    ('[prices.gpu_usd_per_hour]\nL4 = -1\n', "prices.gpu_usd_per_hour.L4", "must be a price of 0 or more"),
    ("[serving]\nregression_pct = true\n", "serving.regression_pct", "must be a number of 0 or more, got True"),
    ("[serving]\nmin_requests = 1.5\n", "serving.min_requests", "must be a whole number of 0 or more"),
    ("[serving]\nregresion_pct = 5\n", "serving.regresion_pct", "is not a setting"),
    ("[servng]\nregression_pct = 5\n", "servng", "is not a setting"),
])
def test_invalid_settings_name_the_key(tmp_path, text, key, words):
    (tmp_path / "mlcost.toml").write_text(text)
    with pytest.raises(config.ConfigError) as raised:
        config.load()
    assert raised.value.key == key
    assert str(raised.value).startswith(f"mlcost.toml: {key} {words}")


def test_cli_refuses_a_broken_settings_file(tmp_path):
    (tmp_path / "mlcost.toml").write_text("[serving]\nmin_requests = 'many'\n")
    (tmp_path / "serving.jsonl").write_text(jsonl(SEED))
    result = subprocess.run([sys.executable, "-m", "mlcost", "ingest", "serving.jsonl"], cwd=tmp_path, check=False,
                            env={**os.environ, "MLCOST_DB": str(tmp_path / "w.duckdb")},
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr == "mlcost: mlcost.toml: serving.min_requests must be a whole number of 0 or more, got 'many'\n"


# --- detection -----------------------------------------------------------------------------

@pytest.mark.parametrize("name, text, kind", [
    ("s.jsonl", jsonl(SEED), "serving"),
    ("s.csv", csv_text(SEED), "serving"),
    ("s.jsonl", jsonl(window(window_start=None, window_end=None, start_time="2026-08-01T00:00:00Z",
                             window_seconds=60)), "serving"),
    ("r.jsonl", jsonl({"run_id": "r1", "start_time": "2026-08-01T00:00:00Z", "duration_hours": 1}), "runs"),
    ("e.csv", "timestamp,project_name,run_id,duration,emissions,energy_consumed\n", "codecarbon"),
])
def test_detection_tells_serving_from_runs_and_codecarbon(name, text, kind):
    assert loader.detect(name, text).KIND == kind
    assert loader.PARSERS.index(serving) < loader.PARSERS.index(run_summary)
    assert codecarbon in loader.PARSERS


def test_cli_json_summary_of_the_sample(warehouse):
    result = subprocess.run([sys.executable, "-m", "mlcost", "ingest", "--json", str(SAMPLE)], check=False,
                            env={**os.environ, "MLCOST_DB": str(warehouse)}, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    [entry] = json.loads(result.stdout)
    raw = sample_windows()
    prices = sample_prices(raw)
    assert entry["kind"] == "serving" and entry["rows_rejected"] == 0
    assert entry["windows"] == entry["rows_loaded"] == len(raw)
    assert entry["requests_total"] == sum(w["requests_total"] for w in raw)
    assert entry["windows_cost_derived"] == sum("cost_usd" not in w for w in raw) == 7
    assert entry["windows_without_cost"] == 0
    catalog = tomllib.loads(DEFAULTS.read_text())["prices"]["instance_usd_per_hour"]
    assert {k: Decimal(str(catalog[k])) for k in prices} == prices  # the catalog prices the 7 gaps alike
    total = sum((window_cost(w, prices) for w in raw), Decimal(0))
    assert entry["cost_usd_total"] == str(total.quantize(Decimal("0.01")))


# --- the sample data, recomputed with plain Python ----------------------------------------

def sample_windows() -> list[dict]:
    with gzip.open(SAMPLE, "rt") as lines:
        return [json.loads(line, parse_float=Decimal) for line in lines if line.strip()]


def hours(w: dict) -> Decimal:
    span = datetime.fromisoformat(w["window_end"]) - datetime.fromisoformat(w["window_start"])
    return Decimal(int(span.total_seconds())) / 3600


def sample_prices(raw: list[dict]) -> dict[str, Decimal]:
    """USD per replica-hour of each instance type, read off the windows that carry a cost."""
    seen = defaultdict(set)
    for w in raw:
        if "cost_usd" in w:
            seen[w["instance_type"]].add((w["cost_usd"] / w["replicas"] / hours(w)).normalize())
    assert all(len(prices) == 1 for prices in seen.values()), seen
    return {instance: prices.pop() for instance, prices in seen.items()}


def window_cost(w: dict, prices: dict[str, Decimal]) -> Decimal:
    return w["cost_usd"] if "cost_usd" in w else prices[w["instance_type"]] * w["replicas"] * hours(w)


def by_version(raw: list[dict]) -> dict[tuple[str, str], dict]:
    """Per (service, version): cost and energy per 1k successful and per 1k requests, error rate."""
    prices = sample_prices(raw)
    sums = defaultdict(lambda: defaultdict(Decimal))
    for w in raw:
        s = sums[(w["service"], w["model_version"])]
        s["cost"] += window_cost(w, prices)
        s["success"] += w["requests_success"]
        s["total"] += w["requests_total"]
        s["errors"] += w["requests_error"]
        if "energy_kwh" in w:
            s["energy_kwh"] += w["energy_kwh"]
            s["metered_success"] += w["requests_success"]
    return {key: {
        "cost_per_1k_success_usd": s["cost"] * 1000 / s["success"],
        "cost_per_1k_requests_usd": s["cost"] * 1000 / s["total"],
        "energy_wh_per_1k_success": s["energy_kwh"] * 1000 * 1000 / s["metered_success"]
        if s["metered_success"] else None,
        "error_rate": s["errors"] / s["total"],
        "requests_success": int(s["success"]),
    } for key, s in sums.items()}


@pytest.fixture(scope="module")
def sample_db(tmp_path_factory) -> Path:
    """A warehouse holding the sample serving windows, built once for this module."""
    if not SAMPLE.is_file():
        if IN_CI:
            pytest.fail(f"{SAMPLE} is missing in CI")
        pytest.skip(f"{SAMPLE} is not generated yet")
    path = tmp_path_factory.mktemp("serving") / "sample.duckdb"
    before = os.environ.get("MLCOST_DB")
    os.environ["MLCOST_DB"] = str(path)
    try:
        summary = loader.ingest_file(SAMPLE)
    finally:
        if before is None:
            del os.environ["MLCOST_DB"]
        else:
            os.environ["MLCOST_DB"] = before
    assert (summary.kind, summary.rows_rejected) == ("serving", 0), summary.to_json()
    return path


@pytest.fixture
def sample_warehouse(sample_db, warehouse) -> Path:
    """This test's warehouse: a copy of the sample one."""
    shutil.copyfile(sample_db, warehouse)
    return warehouse


def open_serving() -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    at.switch_page(PAGE).run()
    return rendered(at)


def rendered(at: AppTest) -> AppTest:
    assert not at.exception, [e.message + "\n" + "\n".join(e.stack_trace) for e in at.exception]
    return at


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def table_with(at: AppTest, column: str):
    """The page's one dataframe that has `column`."""
    [table] = [t.value for t in at.dataframe if column in t.value.columns]
    return table


def test_page_figures_per_version_equal_the_raw_windows(sample_warehouse):
    expected = by_version(sample_windows())
    table = table_with(open_serving(), "model_version").set_index(["service", "model_version"])
    assert sorted(table.index) == sorted(expected)
    for key, figures in expected.items():
        for column, value in figures.items():
            shown = table.at[key, column]
            if value is None:
                assert pd.isna(shown), (key, column)  # None or NaN: unknown, not 0
            else:
                assert float(shown) == pytest.approx(float(value), rel=1e-9), (key, column)
    # vision-tagger sends no energy_kwh: its energy per 1k is unknown
    assert {k for k, f in expected.items() if f["energy_wh_per_1k_success"] is None} == {
        ("vision-tagger", "v3.0"), ("vision-tagger", "v3.1"), ("vision-tagger", "v3.2")}


def test_page_headline_equals_the_raw_windows_and_the_toggle_switches_to_all_requests(sample_warehouse):
    raw = sample_windows()
    prices = sample_prices(raw)
    cost = sum((window_cost(w, prices) for w in raw), Decimal(0))
    success = sum(w["requests_success"] for w in raw)
    total = sum(w["requests_total"] for w in raw)
    metered = [w for w in raw if "energy_kwh" in w]
    energy_wh = sum(w["energy_kwh"] for w in metered) * 1000
    at = open_serving()
    assert metrics(at) == {
        "Requests": f"{total:,}",
        "Serving cost": f"${cost:,.2f}",
        "USD per 1k successful requests": f"${cost * 1000 / success:,.4f}",
        "Wh per 1k successful requests":
            f"{energy_wh * 1000 / sum(w['requests_success'] for w in metered):,.2f} Wh",
    }
    at.toggle(key="serving_per_total").set_value(True)
    assert metrics(rendered(at.run())) == {
        "Requests": f"{total:,}",
        "Serving cost": f"${cost:,.2f}",
        "USD per 1k requests": f"${cost * 1000 / total:,.4f}",
        "Wh per 1k requests":
            f"{energy_wh * 1000 / sum(w['requests_total'] for w in metered):,.2f} Wh",
    }
    assert "No energy_kwh in the windows of vision-tagger" in " ".join(c.value for c in at.caption)


def test_the_sample_regression_is_found_and_clean_changes_are_not(sample_warehouse):
    truth = json.loads(TRUTH.read_text())
    regression = truth["regression"]
    version_figures = by_version(sample_windows())
    before = version_figures[(regression["service"], regression["from_version"])]["cost_per_1k_success_usd"]
    after = version_figures[(regression["service"], regression["to_version"])]["cost_per_1k_success_usd"]
    by_hand_pct = float((after / before - 1) * 100)
    assert round(by_hand_pct, 2) == regression["change_pct"] == 38.51
    # the sample's other regression: vision-tagger v3.2, started on the last day (the cost-per-1k jump)
    jump = truth["alert_cases"]["cost_per_1k_jump"]
    late = [version_figures[(jump["service"], v)]["cost_per_1k_success_usd"] for v in ("v3.1", jump["new_version"])]
    late_pct = float((late[1] / late[0] - 1) * 100)

    at = open_serving()
    table = table_with(at, "change_pct")
    cost_rows = table[table["metric"] == "cost_per_1k_success_usd"]
    assert cost_rows[["service", "from_version", "to_version"]].values.tolist() == [  # worst first
        [jump["service"], "v3.1", jump["new_version"]],
        [regression["service"], regression["from_version"], regression["to_version"]]]
    assert cost_rows.iloc[0]["change_pct"] == pytest.approx(late_pct, rel=1e-9)
    row = cost_rows.iloc[1]
    assert row["change_pct"] == pytest.approx(by_hand_pct, rel=1e-9)
    assert str(row["start_date"])[:10] == regression["start_date"] == "2026-10-27"
    clean = [c for c in truth["serving_version_changes"] if not c["is_regression"]]
    assert clean and not {(r.service, r.to_version) for r in table.itertuples()} & {(c["service"], c["to_version"])
                                                                                   for c in clean}
    # the energy per 1k of the same change, by hand
    energy = [version_figures[(regression["service"], v)]["energy_wh_per_1k_success"]
              for v in (regression["from_version"], regression["to_version"])]
    [energy_row] = table[table["metric"] == "energy_wh_per_1k_success"].to_dict("records")
    assert energy_row["change_pct"] == pytest.approx(float((energy[1] / energy[0] - 1) * 100), rel=1e-9)


def test_every_version_change_is_compared_with_truth(sample_warehouse):
    changes = queries.serving_version_changes(Filters(), 10.0, 10000)
    cost = changes[changes["metric"] == "cost_per_1k_success_usd"]
    truth = json.loads(TRUTH.read_text())["serving_version_changes"]
    got = {(r.service, r.from_version, r.to_version): (round(r.change_pct, 2), str(r.start_date)[:10],
                                                       round(r.before, 6), round(r.after, 6), r.is_regression)
           for r in cost.itertuples()}
    assert got == {(t["service"], t["from_version"], t["to_version"]):
                   (t["change_pct"], t["start_date"], t["cost_per_1k_success_before_usd"],
                    t["cost_per_1k_success_after_usd"], t["is_regression"]) for t in truth}


@pytest.mark.parametrize("pct, min_requests, expected", [
    # vision-tagger v3.2 (the last day's version, truth.json alert_cases): cost +139.9 %, no energy
    (10, 10_000, {("cost_per_1k_success_usd", "v1.0"), ("energy_wh_per_1k_success", "v1.0"),
                  ("cost_per_1k_success_usd", "v3.2")}),
    (40, 10_000, {("energy_wh_per_1k_success", "v1.0"), ("cost_per_1k_success_usd", "v3.2")}),  # cost +38.5 %, energy +47.7 %
    (50, 10_000, {("cost_per_1k_success_usd", "v3.2")}),
    (140, 10_000, set()),
    # chat-assistant v1.0 served 6,186,612 successful requests, v3.2 982,046: below the bar they are left out
    (10, 6_186_613, set()),
])
def test_regression_threshold_and_minimum_traffic(sample_warehouse, pct, min_requests, expected):
    found = queries.serving_regressions(Filters(), pct, min_requests)
    assert {(r.metric, r.to_version) for r in found.itertuples()} == expected


def test_a_small_version_is_skipped_and_the_next_compared_with_the_one_before(tmp_path, warehouse):
    def hour(n: int, version: str, success: int, cost: str) -> dict:
        start = START + timedelta(hours=n)
        return window(window_start=start.isoformat(), window_end=(start + timedelta(hours=1)).isoformat(),
                      model_version=version, requests_total=success, requests_success=success,
                      requests_error=0, cost_usd=cost, energy_kwh=None)
    path = tmp_path / "canary.jsonl"
    # v1: 10 USD per 20k = 0.5/1k; canary: 5 USD per 100 (ignored); v2: 12 USD per 20k = 0.6/1k: +20 %
    path.write_text(jsonl(hour(0, "v1", 20_000, "10"), hour(1, "canary", 100, "5"), hour(2, "v2", 20_000, "12")))
    assert loader.ingest_file(path).rows_loaded == 3
    changes = queries.serving_version_changes(Filters(), 10.0, 10_000)
    assert changes[["metric", "from_version", "to_version", "is_regression"]].values.tolist() == [
        ["cost_per_1k_success_usd", "v1", "v2", True]]
    assert changes["change_pct"].iloc[0] == pytest.approx(20.0)


def test_daily_figures_are_utc_days_and_sum_to_the_whole(sample_warehouse):
    raw = sample_windows()
    daily = queries.serving_over_time(Filters())
    assert set(daily["bucket"]) == {"day"} and len(daily) <= 5000
    assert int(daily["requests_total"].sum()) == sum(w["requests_total"] for w in raw)
    # the search-api incident of 8 October, by hand: failed share of the day's requests
    day = [w for w in raw if w["service"] == "search-api" and w["window_start"].startswith("2026-10-08")]
    row = daily[(daily["service"] == "search-api") & (daily["day"] == "2026-10-08")].iloc[0]
    assert row["error_rate"] == pytest.approx(sum(w["requests_error"] for w in day) / sum(w["requests_total"]
                                                                                      for w in day))
    assert row["windows"] == 24


def test_date_range_selects_windows(sample_warehouse):
    raw = sample_windows()
    at = open_serving()
    # November before its last day (vision-tagger v3.2, a regression, starts on Nov 21)
    at.date_input(key="date_range").set_value((date(2026, 11, 1), date(2026, 11, 20)))
    rendered(at.run())
    inside = [w for w in raw if "2026-11-01" <= w["window_start"][:10] <= "2026-11-20"]
    assert metrics(at)["Requests"] == f"{sum(w['requests_total'] for w in inside):,}"
    versions = table_with(at, "model_version")
    assert sorted(versions["model_version"]) == sorted({w["model_version"] for w in inside}) == [
        "v1.0", "v1.5", "v2.0", "v3.1"]
    assert [s.value for s in at.success] == ["No regressions in this selection."]


def test_the_sample_is_what_the_demo_loads():
    from mlcost.commands import serve
    assert "serving_windows.jsonl.gz" in serve.SAMPLE_FILES


# --- the page on small or empty warehouses -------------------------------------------------

def test_empty_warehouse_says_how_to_load_serving_windows(warehouse):
    at = open_serving()
    advice = " ".join(i.value for i in at.info)
    assert "`mlcost ingest serving.jsonl`" in advice and "**Data** page" in advice
    assert not at.dataframe and not at.metric


def test_windows_without_a_price_are_counted_on_the_page(tmp_path, warehouse):
    path = tmp_path / "serving.jsonl"
    path.write_text(jsonl(SEED, window(window_start="2026-08-01T01:00:00Z", window_end="2026-08-01T02:00:00Z",
                                       cost_usd=None, instance_type="x9.huge", energy_kwh=None)))
    assert loader.ingest_file(path).rows_loaded == 2
    at = open_serving()
    assert at.warning[0].value.startswith("1 of 2 windows have no cost:")
    shown = metrics(at)
    # only the priced window counts: 11.344 USD over its 5,167 successful requests
    assert shown["Serving cost"] == "$11.34"
    assert shown["USD per 1k successful requests"] == f"${Decimal('11.344') * 1000 / 5167:,.4f}"
    assert shown["Requests"] == "10,398"


def test_serving_file_uploads_on_the_data_page(warehouse):
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    at.switch_page("app_pages/data.py").run()
    at.file_uploader[0].set_value([("serving.jsonl", jsonl(SEED).encode(), "application/octet-stream")])
    at.button(key="FormSubmitter:upload-Load files").click()
    rendered(at.run())
    assert [as_read(s.value) for s in at.success] == ["OK serving.jsonl [serving]: 1 rows loaded, 0 rejected"]
    assert at.dataframe[0].value[["path", "kind"]].values.tolist() == [["serving.jsonl", "serving"]]
