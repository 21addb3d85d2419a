"""Budgets: the [[budgets]] config, periods, and burn figures (spend to date, burn rate, forecast,
band, days to breach) checked against a plain second computation from the sample bill files
(csv + Decimal) or from hand-made runs, never against the warehouse's own SQL."""
from __future__ import annotations

import csv
import gzip
import io
import json
import math
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from metrics import budgets
from ingest import config, loader
from tests.conftest import REPO_ROOT, SAMPLE_DIR

BILLS = sorted((SAMPLE_DIR / "billing").glob("focus_*.csv.gz"))
SAMPLE_CONFIG = SAMPLE_DIR / "mlcost.toml"
AS_OF = date(2026, 11, 22)  # the sample's "today": bills run to 2026-11-21
APP = REPO_ROOT / "app" / "main.py"


def settings_with(tmp_path: Path, text: str) -> config.Config:
    path = tmp_path / "mlcost.toml"
    path.write_text(text)
    return config.load(path)


# --- config ----------------------------------------------------------------------------------

def test_budgets_parse_with_defaults(tmp_path):
    settings = settings_with(tmp_path, """
[[budgets]]
name = "vision"
scope = "project:vision"
amount = 1234.50

[[budgets]]
name = "spot"
scope = "tag:capacity=spot"
period = "quarter"
amount = "900"
currency = "eur"
actual_thresholds_pct = [100, 75]
forecast_thresholds_pct = []
channel = "#ml-alerts"
owner = "dana"
""")
    vision, spot = settings.budgets
    assert (vision.scope, vision.scope_value, vision.period, vision.amount, vision.currency) == (
        "project", "vision", "month", Decimal("1234.5"), "USD")
    assert vision.actual_thresholds_pct == (50.0, 80.0, 100.0) and vision.forecast_thresholds_pct == (100.0,)
    assert (spot.tag_key, spot.tag_value, spot.period, spot.amount, spot.currency) == ("capacity", "spot", "quarter",
                                                                                      Decimal("900"), "EUR")
    assert spot.actual_thresholds_pct == (75.0, 100.0) and spot.forecast_thresholds_pct == ()
    assert (spot.channel, spot.owner) == ("ml-alerts", "dana")


@pytest.mark.parametrize("entry, key", [
    ('name = "a"\namount = 10\nscope = "projects:x"', 'budgets[1] ("a").scope'),
    ('name = "a"\namount = 10\nscope = "tag:novalue"', 'budgets[1] ("a").scope'),
    ('name = "a"\namount = -5', 'budgets[1] ("a").amount'),
    ('name = "a"\namount = "lots"', 'budgets[1] ("a").amount'),
    ('name = "a"\namount = 10\nperiod = "week"', 'budgets[1] ("a").period'),
    ('name = "a"\namount = 10\ncurrency = "dollars"', 'budgets[1] ("a").currency'),
    ('name = "a"\namount = 10\nactual_thresholds_pct = 80', 'budgets[1] ("a").actual_thresholds_pct'),
    ('name = "a"\namount = 10\nforecast_thresholds_pct = [0]', 'budgets[1] ("a").forecast_thresholds_pct'),
    ('name = "a"\namount = 10\nchannel = "ml alerts!"', 'budgets[1] ("a").channel'),
    ('name = "a"\namount = 10\nlimit = 3', 'budgets[1].limit'),
    ('amount = 10', 'budgets[1].name'),
    ('name = "a"', 'budgets[1].amount'),
])
def test_a_bad_budget_names_its_key(tmp_path, entry, key):
    with pytest.raises(config.ConfigError) as raised:
        settings_with(tmp_path, "[[budgets]]\n" + entry + "\n")
    assert raised.value.key == key, str(raised.value)
    assert str(raised.value).startswith(f"{tmp_path / 'mlcost.toml'}: {key} ")


def test_budget_names_must_be_unique(tmp_path):
    with pytest.raises(config.ConfigError, match="used by an earlier budget"):
        settings_with(tmp_path, '[[budgets]]\nname = "a"\namount = 1\n[[budgets]]\nname = "a"\namount = 2\n')


def test_the_sample_budgets_load():
    settings = config.load(SAMPLE_CONFIG)
    assert [b.name for b in settings.budgets] == ["ML org", "genai team", "vision", "search-ranking", "AWS quarter"]


@pytest.mark.parametrize("day, period, bounds", [
    (date(2026, 11, 21), "month", (date(2026, 11, 1), date(2026, 12, 1))),
    (date(2026, 12, 31), "month", (date(2026, 12, 1), date(2027, 1, 1))),
    (date(2026, 11, 21), "quarter", (date(2026, 10, 1), date(2027, 1, 1))),
    (date(2026, 2, 1), "quarter", (date(2026, 1, 1), date(2026, 4, 1))),
    (date(2026, 9, 30), "quarter", (date(2026, 7, 1), date(2026, 10, 1))),
])
def test_period_bounds(day, period, bounds):
    assert budgets.period_bounds(day, period) == bounds


# --- burn on the sample bills ----------------------------------------------------------------

@pytest.fixture
def on_bills(demo_warehouse) -> Path:
    """The sample data (its runs, serving windows, traces and bills) in this test's warehouse."""
    return demo_warehouse


def bill_spend_by_day(keep) -> dict[date, Decimal]:
    """Per UTC day of ChargePeriodStart: BilledCost (USD) of the sample lines `keep(row, tags)` accepts."""
    by_day: dict[date, Decimal] = {}
    for path in BILLS:
        for row in csv.DictReader(io.StringIO(gzip.decompress(path.read_bytes()).decode())):
            tags = json.loads(row["Tags"]) if row["Tags"] else {}
            if row["BillingCurrency"] == "USD" and keep(row, tags):
                day = date.fromisoformat(row["ChargePeriodStart"][:10])
                by_day[day] = by_day.get(day, Decimal(0)) + Decimal(row["BilledCost"])
    return by_day


def expected_burn(by_day: dict[date, Decimal], amount: Decimal, start: date, end: date, through: date) -> dict:
    """Spend to date, 7-day rate, forecast and band, days to breach, by the rules in metrics/budgets.py."""
    days = lambda a, b: [a + timedelta(days=i) for i in range((b - a).days)]  # noqa: E731
    spent = sum((by_day.get(d, Decimal(0)) for d in days(start, through + timedelta(days=1))), Decimal(0))
    last_7 = [by_day.get(d, Decimal(0)) for d in days(through - timedelta(days=6), through + timedelta(days=1))]
    last_28 = sorted(by_day.get(d, Decimal(0)) for d in days(through - timedelta(days=27), through + timedelta(days=1)))
    rate = sum(last_7, Decimal(0)) / 7
    left = (end - through).days - 1
    breach = 0 if spent >= amount else math.ceil((amount - spent) / rate)
    return {"spent": spent, "rate": rate, "forecast": spent + rate * left, "left": left,
            "low": spent + last_28[2] * left, "high": spent + last_28[25] * left,  # 10th and 90th of 28, nearest rank
            "days_to_breach": breach}


SCOPES = {
    "all": (lambda row, tags: True),
    "team:genai": (lambda row, tags: tags.get("team") == "genai"),
    "project:vision": (lambda row, tags: tags.get("project") == "vision"),
    "project:search-ranking": (lambda row, tags: tags.get("project") == "search-ranking"),
    "provider:AWS": (lambda row, tags: row["ProviderName"] == "AWS"),
}


@pytest.mark.parametrize("scope, period, amount", [
    ("all", "month", "38000"), ("team:genai", "month", "14000"), ("project:vision", "month", "3000"),
    ("provider:AWS", "quarter", "120000"), ("team:genai", "month", "9000"),
])
def test_burn_on_the_sample_bills_equals_a_second_computation(on_bills, tmp_path, scope, period, amount):
    settings = settings_with(tmp_path, f'[[budgets]]\nname = "b"\nscope = "{scope}"\nperiod = "{period}"\n'
                                       f'amount = {amount}\n')
    burn = budgets.burn(settings.budgets[0], settings, AS_OF)
    start, end = budgets.period_bounds(date(2026, 11, 21), period)
    want = expected_burn(bill_spend_by_day(SCOPES[scope]), Decimal(amount), start, end, date(2026, 11, 21))
    assert (burn.source, burn.through, burn.period_start, burn.period_end) == ("billed", date(2026, 11, 21), start, end)
    assert burn.spent == want["spent"]
    assert burn.rate_per_day == want["rate"]
    assert burn.days_left == want["left"]
    assert burn.forecast == want["forecast"]
    assert (burn.forecast_low, burn.forecast_high) == (want["low"], want["high"])
    assert burn.days_to_breach == want["days_to_breach"]
    assert burn.allowed_per_day == Decimal(amount) / (end - start).days
    assert burn.daily["cumulative"].iloc[-1] == want["spent"]


def test_every_budget_read_at_once_equals_a_second_computation(on_bills, tmp_path):
    """budgets.burns reads the bill once for all budgets: each budget still gets its own lines, days and currency."""
    cases = [("all", "month", "38000"), ("team:genai", "month", "14000"), ("project:vision", "month", "3000"),
             ("provider:AWS", "quarter", "120000"), ("project:search-ranking", "month", "5000")]
    text = "".join(f'[[budgets]]\nname = "b{i}"\nscope = "{scope}"\nperiod = "{period}"\namount = {amount}\n'
                   for i, (scope, period, amount) in enumerate(cases))
    settings = settings_with(tmp_path, text + '[[budgets]]\nname = "eur"\namount = 1000\ncurrency = "EUR"\n')
    burns = budgets.burns(settings.budgets, settings, AS_OF)
    assert [b.budget.name for b in burns] == [b.name for b in settings.budgets]
    for burn, (scope, period, amount) in zip(burns, cases):
        start, end = budgets.period_bounds(date(2026, 11, 21), period)
        want = expected_burn(bill_spend_by_day(SCOPES[scope]), Decimal(amount), start, end, date(2026, 11, 21))
        assert (burn.source, burn.through, burn.period_start) == ("billed", date(2026, 11, 21), start), scope
        assert (burn.spent, burn.rate_per_day, burn.forecast) == (want["spent"], want["rate"], want["forecast"]), scope
        assert (burn.forecast_low, burn.forecast_high) == (want["low"], want["high"]), scope
        assert burn.other_currency_lines == 0, scope
    assert burns[-1].spent == 0 and burns[-1].other_currency_lines > 0  # the USD bill is not an EUR budget's


def test_a_reached_budget_says_when(on_bills, tmp_path):
    settings = settings_with(tmp_path, '[[budgets]]\nname = "small"\nscope = "project:vision"\namount = 500\n')
    burn = budgets.burn(settings.budgets[0], settings, AS_OF)
    by_day = bill_spend_by_day(SCOPES["project:vision"])
    total, reached = Decimal(0), None
    for day in sorted(d for d in by_day if date(2026, 11, 1) <= d <= date(2026, 11, 21)):
        total += by_day[day]
        if total >= 500:
            reached = day
            break
    assert burn.days_to_breach == 0 and burn.breach_day == reached and burn.used_pct > 100


def test_the_bill_in_another_currency_is_not_counted(on_bills, tmp_path):
    settings = settings_with(tmp_path, '[[budgets]]\nname = "eur"\namount = 1000\ncurrency = "EUR"\n')
    burn = budgets.burn(settings.budgets[0], settings, AS_OF)
    usd_lines_nov = sum(1 for path in BILLS for row in csv.DictReader(io.StringIO(gzip.decompress(
        path.read_bytes()).decode())) if "2026-11-01" <= row["ChargePeriodStart"][:10] <= "2026-11-21")
    assert burn.spent == 0 and burn.source == "billed" and burn.rate_per_day == 0
    assert burn.other_currency_lines == usd_lines_nov > 0
    assert burn.days_to_breach is None and not burn.breach_in_period


# --- estimated cost where no bill covers the period -------------------------------------------

def run_line(run_id: str, project: str, day: date, hours: int, price: str) -> str:
    start = f"{day.isoformat()}T08:00:00Z"
    end = f"{day.isoformat()}T{8 + hours:02d}:00:00Z"
    return json.dumps({"run_id": run_id, "project": project, "team": "t", "start_time": start, "end_time": end,
                       "instance_type": "x", "price_per_hour_usd": price})


def test_without_a_bill_runs_are_counted_at_their_estimate(warehouse, tmp_path):
    lines = [run_line(f"r{i}", "p" if i % 2 else "q", date(2026, 3, 1) + timedelta(days=i), 2, "5.25")
             for i in range(20)]  # one run a day, 2 h x 5.25 = 10.50 each, March 1-20
    (tmp_path / "runs.jsonl").write_text("\n".join(lines) + "\n")
    assert loader.ingest_file(tmp_path / "runs.jsonl").ok
    settings = settings_with(tmp_path, '[[budgets]]\nname = "p"\nscope = "project:p"\namount = "200"\n'
                                       '[[budgets]]\nname = "all"\namount = "150"\n')
    p_burn, all_burn = (budgets.burn(b, settings, date(2026, 3, 21)) for b in settings.budgets)
    # read together (one query for both), each budget keeps its own runs
    assert [b.spent for b in budgets.burns(settings.budgets, settings, date(2026, 3, 21))] == [
        Decimal("105.00"), Decimal("210.00")]
    # project p runs on odd days 2, 4, ... (i odd -> March i+1): 10 runs
    assert p_burn.source == "estimated" and p_burn.spent == Decimal("105.00")
    assert p_burn.rate_per_day == Decimal("42.00") / 7  # 4 of the last 7 days (Mar 14-20) are p's: 14, 16, 18, 20
    assert all_burn.spent == Decimal("210.00") and all_burn.rate_per_day == Decimal("10.50")
    assert all_burn.days_to_breach == 0 and all_burn.breach_day == date(2026, 3, 15)  # 15 x 10.50 >= 150
    assert p_burn.days_to_breach == 16 and p_burn.breach_day == date(2026, 4, 5)  # 95 / 6 per day -> 16 days from Mar 21
    assert "Estimated cost" in p_burn.source_note


# --- the page ----------------------------------------------------------------------------------

def test_the_budget_page_shows_the_burn_figures(on_bills, monkeypatch):
    monkeypatch.setenv("MLCOST_CONFIG", str(SAMPLE_CONFIG))
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    at.switch_page("app_pages/budgets.py").run()
    at.date_input(key="budget_as_of").set_value(AS_OF).run()
    assert not at.exception, [e.value for e in at.exception]
    want = expected_burn(bill_spend_by_day(SCOPES["all"]), Decimal(38000), date(2026, 11, 1), date(2026, 12, 1),
                         date(2026, 11, 21))
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Spent this month"] == f"${want['spent'].quantize(Decimal('0.01')):,}"
    assert metrics["Forecast to period end"] == f"${want['forecast'].quantize(Decimal('0.01')):,}"
    assert metrics["Days until breach"] == str(want["days_to_breach"])
    assert metrics["Burn rate, last 7 days"] == f"${want['rate'].quantize(Decimal('0.01')):,}/day"
    assert any("Billed cost" in info.value for info in at.info)


def test_the_budget_page_without_budgets_says_how_to_add_them(warehouse, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLCOST_CONFIG", raising=False)
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    at.switch_page("app_pages/budgets.py").run()
    assert not at.exception
    assert any("No budgets yet" in info.value for info in at.info)
    assert "[[budgets]]" in at.code[0].value


def test_demo_writes_the_sample_budgets_only_without_user_settings(tmp_path, monkeypatch):
    from mlcost.commands import serve

    seen = []
    monkeypatch.setattr(serve, "_serve", lambda args, db: seen.append(config.load().budgets) or 0)
    monkeypatch.setattr(loader, "ingest_paths", lambda paths: iter(()))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLCOST_DB", str(tmp_path / "demo.duckdb"))
    monkeypatch.delenv("MLCOST_CONFIG", raising=False)
    from mlcost import cli

    assert cli.main(["demo"]) == 0
    assert (tmp_path / "mlcost.toml").read_text() == SAMPLE_CONFIG.read_text()  # the commands read it too
    assert seen[-1] == config.load(SAMPLE_CONFIG).budgets
    (tmp_path / "mlcost.toml").write_text("")  # the user's own settings win
    assert cli.main(["demo"]) == 0
    assert seen[-1] == () and (tmp_path / "mlcost.toml").read_text() == ""
