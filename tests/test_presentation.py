"""Presentation guards: every table on every page reads in words with money formatted, no two series of
a chart share a colour, and the CLI's amounts are rounded (text) or exact and trimmed (--json).

The pages run under AppTest on the sample warehouse (with an alert history, so the Alerts page's
tables show too); what a person sees is read from each dataframe's column config
(`proto.columns`: label and number format) and each chart's figure JSON (`proto.spec`).
"""
from __future__ import annotations

import csv
import gzip
import json
import re
import subprocess
import sys
from datetime import date
from decimal import ROUND_HALF_UP, Decimal

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from present import charts
from present.format import COLUMNS, column, exact, money, text_table
from tests.conftest import REPO_ROOT, SAMPLE_DIR

APP = REPO_ROOT / "app" / "main.py"
PAGES = ["overview", "costs", "training_runs", "serving", "idle_gpus", "billing", "reconciliation", "budgets",
         "alerts", "retrospective", "data"]
SNAKE = re.compile(r"[A-Za-z0-9]_[A-Za-z0-9]|^_")
# A header that names an amount of money (and not hours, energy, a share or a count of lines).
MONEY_WORDS = re.compile(r"(?<![A-Za-z])(cost|costs|billed|spent|spend|amount|price|forecast|usd|eur|gbp|training runs|serving|"
                         r"idle gpus|shared|unallocated|total|credits|taxes|usage|purchases|adjustments|allocated)(?![A-Za-z])",
                         re.IGNORECASE)
NOT_MONEY = re.compile(r"\((h|GPU-h|kWh|Wh|%|ms|kg CO₂e)\)|source|rule|lines|share|windows|runs\b(?! \()",
                       re.IGNORECASE)
MONEY_FORMAT = re.compile(r"^(\$%,\.\d+f|%,\.\d+f [A-Z]{3}|dollar|euro|yen|accounting)$")
MONEY_TEXT = re.compile(r"^(-?\$[\d,]+\.\d{2,4}|-?[\d,]+\.\d{2,4} [A-Z]{3}|—|)$")


@pytest.fixture
def sample_pages(demo_warehouse, tmp_path, monkeypatch):
    """The sample warehouse and budgets, with the alert history a dry-run-free check leaves (posts
    fail: no webhook), so the Alerts page shows its History and Slack posts tables."""
    from ingest.settings import config
    from outputs import alerts

    monkeypatch.setenv("MLCOST_CONFIG", str(SAMPLE_DIR / "mlcost.toml"))
    monkeypatch.setenv("MLCOST_SECRETS", str(tmp_path / "no-secrets.toml"))
    monkeypatch.setenv("MLCOST_SLACK_WEBHOOK_URL", "https://hooks.slack.invalid/services/T/B/x")
    for name in [n for n in __import__("os").environ if n.startswith("MLCOST_SLACK_WEBHOOK_URL_")]:
        monkeypatch.delenv(name)
    from outputs import slack
    alerts.check(config.load(), date(2026, 11, 22), send=lambda *a, **k: slack.Outcome(True, 200))
    return demo_warehouse


def open_page(page: str) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    if page != "overview":
        at.switch_page(f"app_pages/{page}.py").run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def table_problems(at: AppTest, page: str) -> list[str]:
    """Every header in snake_case (or not in words) and every money column shown without its format."""
    problems = []
    for i, frame in enumerate(at.dataframe):
        config = json.loads(frame.proto.columns or "{}")
        data = frame.value
        if list(frame.proto.column_order):  # the columns shown, when the page picks them
            data = data[[c for c in frame.proto.column_order if c in data.columns]]
        empty_shows_none = not (frame.proto.HasField("placeholder") and frame.proto.placeholder == "")
        if empty_shows_none and data.isna().any().any():  # the grid draws a missing value as 'None'
            problems.append(f"{page} table {i}: missing values shown as 'None' "
                            f"({[c for c in data.columns if data[c].isna().any()][:5]})")
        headers = [(config.get(str(name), {}).get("label") or str(name)) for name in data.columns]
        twice = sorted({h for h in headers if headers.count(h) > 1})
        if twice:
            problems.append(f"{page} table {i}: two columns headed {twice}")
        for name in data.columns:
            spec = config.get(str(name), {})
            header = spec.get("label") or str(name)
            where = f"{page} table {i} column {name!r} shown as {header!r}"
            if SNAKE.search(header) or not header[:1].isupper() and not header[:1].isdigit():
                problems.append(f"{where}: not a header in words")
            if MONEY_WORDS.search(header) and not NOT_MONEY.search(header):
                fmt = (spec.get("type_config") or {}).get("format")
                if pd.api.types.is_numeric_dtype(data[name]) or (data[name].dtype == object and any(
                        isinstance(v, (int, float, Decimal)) and not isinstance(v, bool) for v in data[name])):
                    if not (fmt and MONEY_FORMAT.match(fmt)):
                        problems.append(f"{where}: money without currency and separators ({fmt!r})")
                else:
                    bad = [v for v in data[name].dropna().astype(str) if not MONEY_TEXT.match(v)]
                    if bad:
                        problems.append(f"{where}: money text not formatted: {bad[:3]}")
            if data[name].dtype == object and any(v is None or isinstance(v, float) and pd.isna(v) or
                                                  isinstance(v, str) and (v == "None" or v.count("|") >= 3
                                                                          or "_" in v and v in COLUMNS)
                                                  for v in data[name]):  # a missing text cell reads 'None'
                problems.append(f"{where}: 'None', an internal key or a column name in a cell")
    return problems


def series_colours(spec: dict) -> dict[str, set[str]]:
    """{colour: the series drawn in it} over a figure's traces. A series is the trace's legend group,
    else its name, up to a comma (plotly express names 'vision, dominated' for colour x symbol); a
    trace without a colour of its own gets the template's next default colour, as plotly draws it."""
    default = iter(spec.get("layout", {}).get("colorway") or [f"default-{i}" for i in range(100)])
    found: dict[str, set[str]] = {}
    for trace in spec["data"]:
        if trace.get("type") in ("heatmap", "histogram2d", "contour"):
            continue
        marker, line = trace.get("marker") or {}, trace.get("line") or {}
        colour = next((c for c in (marker.get("color"), line.get("color"), trace.get("fillcolor"))
                       if isinstance(c, str)), None)
        if colour is None and isinstance(marker.get("color"), list):
            continue  # one colour per bar (a histogram's bins), not a series
        colour = colour or next(default)
        series = str(trace.get("legendgroup") or trace.get("name") or "").split(",")[0].strip()
        found.setdefault(_hex(colour), set()).add(series)
    return found


def _hex(colour: str) -> str:
    """'#d55e00' for 'rgba(213, 94, 0, 0.15)' or '#D55E00' (a faint band is its series' colour)."""
    rgba = re.match(r"rgba?\((\d+),\s*(\d+),\s*(\d+)", colour)
    if rgba:
        return "#" + "".join(f"{int(v):02x}" for v in rgba.groups())
    return colour.lower()


def colour_problems(at: AppTest, page: str) -> list[str]:
    problems = []
    safe = {_hex(c) for c in charts.SAFE_COLOURS}
    for i, chart in enumerate(at.get("plotly_chart")):
        for colour, series in series_colours(json.loads(chart.proto.spec)).items():
            if len(series - {""}) > 1:
                problems.append(f"{page} chart {i}: {sorted(series)} share {colour}")
            if colour not in safe:
                problems.append(f"{page} chart {i}: {sorted(series)} in {colour}, not a colour-blind-safe palette colour")
    return problems


def test_every_page_table_reads_in_words_and_every_chart_keeps_series_apart(sample_pages):
    problems = []
    for page in PAGES:
        at = open_page(page)
        problems += table_problems(at, page) + colour_problems(at, page)
    assert not problems, "\n".join(problems)


def test_the_guards_catch_a_raw_table_and_a_shared_colour(sample_pages):
    """The two checks above fail on what they guard against: a raw snake_case frame with an
    unformatted amount, and two series in one colour."""
    script = ("import streamlit as st, pandas as pd, plotly.graph_objects as go\n"
              "st.dataframe(pd.DataFrame({'billing_currency': ['USD'], 'billed_cost': [6186612.0], "
              "'note': [None]}))\n"
              "st.plotly_chart(go.Figure([go.Bar(x=[1], y=[1], name='speech', marker_color='#C9FBE5'), "
              "go.Bar(x=[1], y=[2], name='search-ranking', marker_color='#C9FBE5')]))\n")
    at = AppTest.from_string(script).run()
    tables, colours = table_problems(at, "raw"), colour_problems(at, "raw")
    assert any("'billing_currency'" in p and "words" in p for p in tables), tables
    assert any("'billed_cost'" in p and "money" in p for p in tables), tables
    assert any("'note'" in p and "None" in p for p in tables), tables
    assert any("missing values shown as 'None'" in p for p in tables), tables
    assert any("share" in p for p in colours) and any("not a colour-blind-safe" in p for p in colours), colours


def test_colours_are_stable_per_name_and_distinct_within_a_chart():
    names = ["speech", "search-ranking", "vision", "llm-finetune", "genai", "search", "aaa-new"]
    everyone = charts.colour_map(names)
    assert len(set(everyone.values())) == len(names)
    for subset in (["speech", "search-ranking"], ["vision", "aaa-new"], names[::-1]):
        assert charts.colour_map(subset, known=names) == {n: everyone[n] for n in subset}
    # two names that prefer one colour still get two colours in one chart
    clash = next((a, b) for a in map(str, range(500)) for b in map(str, range(500))
                 if a < b and charts.colour_of(a) == charts.colour_of(b))
    pair = charts.colour_map(clash)
    assert pair[clash[0]] == charts.colour_of(clash[0]) != pair[clash[1]]
    # more names than colours: every colour used before any repeats
    many = charts.colour_map([f"p{i}" for i in range(len(charts.PALETTE))])
    assert sorted(many.values()) == sorted(charts.PALETTE)


def test_the_catalogue_labels_money_and_text_tables():
    assert column("cost_usd").label == "Cost (USD)"
    assert column("billed_cost", "EUR").label == "Billed (EUR)"
    assert column("from_version").label == "From version"
    assert column("some_new_usd").kind == "money" and column("some_new_usd").label == "Some new (USD)"
    frame = pd.DataFrame({"fired_at": [pd.Timestamp("2026-11-22 08:05", tz="UTC")], "billed_cost": [Decimal("1180.245")],
                          "val_metric": [0.1312], "requests_total": [618171801], "owner": [None],
                          "alert_key": ["budget_forecast|genai team|100%|2026-11-01"]})
    header, rows = text_table(frame, "USD")
    assert header == ["Fired (UTC)", "Billed (USD)", "Metric value", "Requests", "Owner"]
    assert rows == [["2026-11-22 08:05", "$1,180.25", "0.1312", "618,171,801", ""]]
    assert money(Decimal("-12.5"), "EUR") == "-12.50 EUR" and money(Decimal("-12.5"), "USD") == "-$12.50"


# --- the CLI -------------------------------------------------------------------------------

def mlcost(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mlcost", *args], capture_output=True, text=True, env=env,
                          cwd=REPO_ROOT, timeout=300)


def sample_bill_effective(month: str) -> Decimal:
    """Σ EffectiveCost of the sample FOCUS bill lines whose charge period starts in `month`, exactly."""
    total = Decimal(0)
    for path in sorted((SAMPLE_DIR / "billing").glob("*.csv.gz")):
        with gzip.open(path, "rt", newline="") as handle:
            for row in csv.DictReader(handle):
                if row["ChargePeriodStart"].startswith(month) and row.get("EffectiveCost"):
                    total += Decimal(row["EffectiveCost"])
    return total


@pytest.fixture
def cli_env(demo_warehouse, tmp_path) -> dict:
    import os
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT), "MLCOST_DB": str(demo_warehouse),
            "MLCOST_CONFIG": str(SAMPLE_DIR / "mlcost.toml")}


def test_allocation_json_is_exact_and_trimmed_and_text_is_in_cents(cli_env):
    answer = mlcost("allocation", "--month", "2026-11", "--json", env=cli_env)
    assert answer.returncode == 0, answer.stderr
    found = json.loads(answer.stdout)
    amounts: list[str] = []

    def collect(node):
        if isinstance(node, dict):
            for value in node.values():
                collect(value)
        elif isinstance(node, list):
            for value in node:
                collect(value)
        elif isinstance(node, str) and re.fullmatch(r"-?\d+\.\d+", node):
            amounts.append(node)
    collect(found)
    assert amounts
    for text in amounts:  # the bill's precision (DECIMAL(38,12)) at most, no trailing zeros past cents
        decimals = text.split(".")[1]
        assert len(decimals) <= 12 and not decimals.endswith("0"), text
    usd = found["currencies"]["USD"]
    billed = sample_bill_effective("2026-11")
    assert Decimal(usd["billed"]) == billed  # exact: not rounded, not a float
    buckets = [Decimal(usd["buckets"][b]) for b in usd["buckets"]]
    assert sum(buckets) == billed

    text = mlcost("allocation", "--month", "2026-11", env=cli_env)
    assert text.returncode == 0, text.stderr
    cents = billed.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    assert f"${cents:,}" in text.stdout  # with its currency
    for number in re.findall(r"\d[\d,]*\.\d+", text.stdout):
        assert len(number.split(".")[1]) in (1, 2), f"{number} in: {text.stdout}"  # cents (or a 1-decimal %)


def test_exact_trims_to_the_bills_precision():
    assert exact(Decimal("1.2345678901234567")) == "1.234567890123"
    assert exact(Decimal("0.1") + Decimal("0.2")) == "0.3"
    assert exact(Decimal("1000.000")) == "1000" and exact(Decimal("-0.0000000000001")) == "0"
    huge = Decimal("12345678901234567890123456.1234567890124")  # 38 digits: a DECIMAL(38,12) sum
    assert exact(huge) == "12345678901234567890123456.123456789012"
    assert money(huge, "USD") == "$12,345,678,901,234,567,890,123,456.12"
    value = Decimal("12.5") / Decimal(3)  # 28 significant digits, as a share computed by division has
    assert Decimal(exact(value)) == value.quantize(Decimal("1e-12"), rounding=ROUND_HALF_UP)


def test_allocation_json_amounts_from_a_division_are_trimmed():
    from mlcost.commands import allocation as command

    share = Decimal("8.00") * 1800 / 14401  # a line split by GPU-minutes: 27 decimals
    result = {"from": date(2026, 11, 1), "to": date(2026, 11, 30), "by": "team", "currencies": {"USD": {
        "billed": Decimal("8.00"), "lines": 1, "buckets": {"training": share, "idle_gpu": Decimal("8.00") - share},
        "nodes": {"n1": {"gpu_hours": 2016.0, "rate_per_gpu_hour": Decimal("1.1504")}}}}}
    printed = json.loads(json.dumps(command.trimmed(result), default=command._plain))
    usd = printed["currencies"]["USD"]
    assert usd["buckets"]["training"] == f"{share.quantize(Decimal('1e-12'), rounding=ROUND_HALF_UP)}"
    assert len(usd["buckets"]["idle_gpu"].split(".")[1]) == 12
    assert usd["billed"] == "8" and usd["nodes"]["n1"] == {"gpu_hours": 2016.0, "rate_per_gpu_hour": "1.1504"}
    assert printed["from"] == "2026-11-01"


def test_ingest_summary_has_thousands_separators(warehouse, tmp_path):
    from ingest.pipeline import loader
    from ingest.engine.report import summary_lines

    path = SAMPLE_DIR / "serving_windows.jsonl.gz"
    requests, windows = 0, 0
    with gzip.open(path, "rt") as handle:
        for line in handle:
            if line.strip():
                record = json.loads(line)
                windows += 1
                requests += int(record.get("requests_total") or record.get("requests") or 0)
    ((_, summary),) = list(loader.ingest_paths([str(path)]))
    text = "\n".join(summary_lines(summary))
    assert f"requests {requests:,}" in text and f"{windows:,} rows loaded" in text, text


def test_code_spans_show_as_code_and_the_rest_stays_text():
    from present.format import html_code, md_code

    shown = md_code("set `[energy]` in mlcost.toml; see [a link](http://evil) <b>x</b> for $5")
    assert "`[energy]`" in shown and "\\`" not in shown  # code, no literal backtick
    assert "\\[a link\\]" in shown and "\\<b\\>" in shown and "\\$5" in shown  # never markup
    assert html_code("`a<b>` & <i>") == "<code>a&lt;b&gt;</code> &amp; &lt;i&gt;"
