"""Budgets: the [[budgets]] config, periods, and burn figures (spend to date, burn rate, forecast,
band, days to breach) checked against a plain second computation from the sample files (csv,
json + Decimal: the bill lines, runs.jsonl and truth.json's node runs) or from hand-made runs and
bills, never against the warehouse's own SQL. A budget on a team or project counts the
allocation of the bill (the Costs page's showback), worked out here from the files."""
from __future__ import annotations

import csv
import gzip
import io
import json
import math
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from metrics import budgets
from ingest.pipeline import loader
from ingest.settings import config
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


def bill_spend_by_day(keep, column: str = "BilledCost") -> dict[date, Decimal]:
    """Per UTC day of ChargePeriodStart: `column` (USD) of the sample lines `keep(row, tags)` accepts."""
    by_day: dict[date, Decimal] = {}
    for path in BILLS:
        for row in csv.DictReader(io.StringIO(gzip.decompress(path.read_bytes()).decode())):
            tags = json.loads(row["Tags"]) if row["Tags"] else {}
            if row["BillingCurrency"] == "USD" and keep(row, tags):
                day = date.fromisoformat(row["ChargePeriodStart"][:10])
                by_day[day] = by_day.get(day, Decimal(0)) + Decimal(row[column])
    return by_day


def _utc(text: str) -> datetime:
    found = datetime.fromisoformat(text.replace("Z", "+00:00").replace(" ", "T"))
    return found if found.tzinfo else found.replace(tzinfo=timezone.utc)


def allocation_pieces() -> list[tuple[date, str | None, dict, Decimal]]:
    """The sample bill's allocation worked out from the files, as (UTC day of ChargePeriodStart,
    run_id or None, the line's tags, EffectiveCost in USD): a line tagged run_id goes to that run;
    a line of an untagged run (truth.json untagged_run_ids) by its ResourceId; a GPU node's line
    (ResourceName gpu-node-N, 4 GPUs) to each node run of truth.json by the share of the line's
    GPU-seconds it held, the rest stays the line's; every other line stays the line's."""
    truth = json.loads((SAMPLE_DIR / "truth.json").read_text())
    runs = sample_runs()
    by_resource = {runs[r]["tags"]["resource_id"]: r for r in truth["untagged_run_ids"]}
    pieces = []
    for path in BILLS:
        for row in csv.DictReader(io.StringIO(gzip.decompress(path.read_bytes()).decode())):
            if row["BillingCurrency"] != "USD":
                continue
            tags, cost = json.loads(row["Tags"] or "{}"), Decimal(row["EffectiveCost"])
            day = date.fromisoformat(row["ChargePeriodStart"][:10])
            run = tags.get("run_id") if tags.get("run_id") in runs else by_resource.get(row["ResourceId"])
            if run:
                pieces.append((day, run, tags, cost))
            elif row["ResourceName"].startswith("gpu-node-"):
                start, end = _utc(row["ChargePeriodStart"]), _utc(row["ChargePeriodEnd"])
                rest = cost
                for run_id, held in truth["node_runs"].items():
                    first, last = max(start, _utc(held["start"])), min(end, _utc(held["end"]))
                    if held["host"] != row["ResourceName"] or last <= first:
                        continue
                    share = (cost * Decimal((last - first).total_seconds()) * len(held["gpu_indices"])
                             / (4 * Decimal((end - start).total_seconds())))
                    rest -= share
                    pieces.append((day, run_id, tags, share))
                pieces.append((day, None, tags, rest))
            else:
                pieces.append((day, None, tags, cost))
    return pieces


def sample_runs() -> dict[str, dict]:
    return {r["run_id"]: r for r in map(json.loads, (SAMPLE_DIR / "runs.jsonl").read_text().splitlines())}


def allocated_by_day(key: str, value: str) -> dict[date, Decimal]:
    """Per UTC day, the sample's allocation (allocation_pieces) to `key` (team or project) =
    `value`: a run's piece by the run's own key, any other by the line's tag."""
    runs = sample_runs()
    by_day: dict[date, Decimal] = {}
    for day, run, tags, cost in allocation_pieces():
        owner = runs[run][key] if run else tags.get(key)
        if owner == value:
            by_day[day] = by_day.get(day, Decimal(0)) + cost
    return by_day


def allocated_by_run(first: date, last: date, keep=lambda run, tags: True) -> dict[str, Decimal]:
    """Per run, its allocated cost (allocation_pieces) over the days first..last (included), for
    the pieces `keep(run, line tags)` accepts."""
    found: dict[str, Decimal] = {}
    for day, run, tags, cost in allocation_pieces():
        if run and first <= day <= last and keep(run, tags):
            found[run] = found.get(run, Decimal(0)) + cost
    return found


def spend_by_day(scope: str) -> dict[date, Decimal]:
    """What a budget on `scope` counts per day of the sample bill: the allocation for a team or
    project, the billed cost of its lines otherwise."""
    kind, _, value = scope.partition(":")
    return allocated_by_day(kind, value) if kind in ("team", "project") else bill_spend_by_day(SCOPES[scope])


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
    "tag:team=genai": (lambda row, tags: tags.get("team") == "genai"),
}


def close(found: Decimal, want: Decimal) -> bool:
    """Equal to the billionth of a cent: the allocation divides lines by GPU-minutes (DECIMAL(38, 12)
    in SQL), the oracle by GPU-seconds in Python."""
    return abs(found - want) < Decimal("1e-9")


@pytest.mark.parametrize("scope, period, amount", [
    ("all", "month", "38000"), ("team:genai", "month", "14000"), ("project:vision", "month", "3000"),
    ("provider:AWS", "quarter", "120000"), ("team:genai", "month", "9000"), ("tag:team=genai", "month", "14000"),
    ("project:search-ranking", "quarter", "3000"),
])
def test_burn_on_the_sample_bills_equals_a_second_computation(on_bills, tmp_path, scope, period, amount):
    settings = settings_with(tmp_path, f'[[budgets]]\nname = "b"\nscope = "{scope}"\nperiod = "{period}"\n'
                                       f'amount = {amount}\n')
    burn = budgets.burn(settings.budgets[0], settings, AS_OF)
    start, end = budgets.period_bounds(date(2026, 11, 21), period)
    want = expected_burn(spend_by_day(scope), Decimal(amount), start, end, date(2026, 11, 21))
    assert (burn.source, burn.through, burn.period_start, burn.period_end) == ("billed", date(2026, 11, 21), start, end)
    assert burn.bill_through == date(2026, 11, 21) and burn.estimated == 0
    assert close(burn.spent, want["spent"]) and burn.billed == burn.spent
    assert close(burn.rate_per_day, want["rate"])
    assert burn.days_left == want["left"]
    assert close(burn.forecast, want["forecast"])
    assert close(burn.forecast_low, want["low"]) and close(burn.forecast_high, want["high"])
    assert burn.days_to_breach == want["days_to_breach"]
    assert burn.allowed_per_day == Decimal(amount) / (end - start).days
    assert burn.daily["cumulative"].iloc[-1] == burn.spent
    assert burn.basis == ("allocated" if scope.split(":")[0] in ("team", "project") else "billed")


@pytest.mark.parametrize("key, value", [("team", "genai"), ("team", "perception"), ("project", "vision"),
                                        ("project", "search-ranking")])
def test_a_team_or_project_budget_counts_its_allocation_and_names_the_tagged_part(on_bills, tmp_path, key, value):
    """Issue 20's figures: team genai $12,336.02 allocated (Costs), of which $11,417.24 on lines tagged genai."""
    settings = settings_with(tmp_path, f'[[budgets]]\nname = "b"\nscope = "{key}:{value}"\namount = 1000\n')
    burn = budgets.burn(settings.budgets[0], settings, AS_OF)
    nov = lambda by_day: sum((v for d, v in by_day.items() if date(2026, 11, 1) <= d <= date(2026, 11, 21)),  # noqa: E731
                             Decimal(0))
    assert close(burn.spent, nov(allocated_by_day(key, value)))
    tagged = nov(bill_spend_by_day(lambda row, tags: tags.get(key) == value, "EffectiveCost"))
    assert close(burn.tagged, tagged) and burn.tagged <= burn.spent
    assert "Allocated cost" in burn.source_note and "of which tagged" in burn.source_note
    text = burn.parts_text(lambda amount, currency: f"${amount.quantize(Decimal('0.01')):,}")
    assert text == (f"allocated ${nov(allocated_by_day(key, value)).quantize(Decimal('0.01')):,} through 2026-11-21, "
                    f"of which tagged ${tagged.quantize(Decimal('0.01')):,}")


def test_a_team_budget_is_the_costs_pages_figure(on_bills, tmp_path, monkeypatch):
    """Budgets and Costs show one figure for team genai: the Costs page's by-team table (AppTest)
    holds the budget's spend to the cent."""
    settings = settings_with(tmp_path, '[[budgets]]\nname = "g"\nscope = "team:genai"\namount = 14000\n')
    burn = budgets.burn(settings.budgets[0], settings, AS_OF)
    want = sum((v for d, v in allocated_by_day("team", "genai").items()
                if date(2026, 11, 1) <= d <= date(2026, 11, 21)), Decimal(0)).quantize(Decimal("0.01"))
    assert burn.spent.quantize(Decimal("0.01")) == want
    monkeypatch.setenv("MLCOST_CONFIG", str(tmp_path / "mlcost.toml"))
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    at.switch_page("app_pages/costs.py").run()
    assert not at.exception, [e.value for e in at.exception]
    found = []
    for frame in (element.value for element in at.dataframe):
        columns = {str(c).lower(): c for c in frame.columns}
        if "team" in columns and "total" in columns:
            found += [row[columns["total"]] for _, row in frame.iterrows() if row[columns["team"]] == "genai"]
    assert found and all(Decimal(str(v)).quantize(Decimal("0.01")) == want for v in found), found


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
        want = expected_burn(spend_by_day(scope), Decimal(amount), start, end, date(2026, 11, 21))
        assert (burn.source, burn.through, burn.period_start) == ("billed", date(2026, 11, 21), start), scope
        for name, found in (("spent", burn.spent), ("rate", burn.rate_per_day), ("forecast", burn.forecast),
                            ("low", burn.forecast_low), ("high", burn.forecast_high)):
            assert close(found, want[name]), (scope, name)
        assert burn.other_currency_lines == 0, scope
    assert burns[-1].spent == 0 and burns[-1].other_currency_lines > 0  # the USD bill is not an EUR budget's


def test_a_reached_budget_says_when(on_bills, tmp_path):
    settings = settings_with(tmp_path, '[[budgets]]\nname = "small"\nscope = "project:vision"\namount = 500\n')
    burn = budgets.burn(settings.budgets[0], settings, AS_OF)
    by_day = allocated_by_day("project", "vision")
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
    at.date_input(key="budget_as_of").set_value(date(2026, 11, 21)).run()  # the as-of day, counted
    assert not at.exception, [e.value for e in at.exception]
    want = expected_burn(bill_spend_by_day(SCOPES["all"]), Decimal(38000), date(2026, 11, 1), date(2026, 12, 1),
                         date(2026, 11, 21))
    assert any("As of 2026-11-21" in c.value and "Billed through 2026-11-21" in c.value for c in at.caption)
    assert any("2026-11-15 to 2026-11-21, 7 days, 7 with data" in c.value for c in at.caption)
    # the table: team genai's spend is its allocation, with the part on lines tagged genai beside it
    table = at.dataframe[0].value.set_index("budget")
    cents = lambda amount: f"${amount.quantize(Decimal('0.01')):,}"  # noqa: E731
    nov = lambda by_day: sum((v for d, v in by_day.items() if date(2026, 11, 1) <= d <= date(2026, 11, 21)),  # noqa: E731
                             Decimal(0))
    assert table.loc["genai team", "spent"] == cents(nov(allocated_by_day("team", "genai")))
    assert table.loc["genai team", "of_which_tagged"] == cents(nov(bill_spend_by_day(
        lambda row, tags: tags.get("team") == "genai", "EffectiveCost")))
    assert table.loc["genai team", "counts"] == "allocated" and table.loc["ML org", "counts"] == "billed"
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


# --- billed through the bill's last day + estimated after it, on a small hand-made warehouse ------

HAND_BILL = ("BilledCost,EffectiveCost,BillingCurrency,ChargePeriodStart,ChargePeriodEnd,ChargeCategory,"
             "ProviderName,ServiceName,ResourceId,ResourceName,Tags,x_LineItemId\n")
# (billed, effective, start, end, service, resource, tags)
HAND_LINES = [
    ("100", "100", "2027-01-05 10:00:00", "2027-01-05 11:00:00", "EC2", "i-1", {"run_id": "r1"}),
    ("40", "36", "2027-01-05 00:00:00", "2027-01-06 00:00:00", "S3", "bucket-a", {"team": "genai"}),
    ("30", "30", "2027-01-06 10:00:00", "2027-01-06 11:00:00", "EC2", "i-2", {"run_id": "r2", "team": "genai"}),
    ("7", "7", "2027-01-07 00:00:00", "2027-01-08 00:00:00", "S3", "bucket-b", {"team": "other"}),
    ("3", "3", "2027-01-07 00:00:00", "2027-01-08 00:00:00", "S3", "bucket-a", {"team": "genai"}),
]
HAND_RUNS = [  # r1 and r3 are genai's; r2 is another team's, on a line tagged genai
    {"run_id": "r1", "project": "chat", "team": "genai", "start_time": "2027-01-05T09:00:00Z",
     "end_time": "2027-01-05T12:00:00Z", "instance_type": "p4d", "estimated_cost_usd": 90},
    {"run_id": "r2", "project": "rank", "team": "other", "start_time": "2027-01-06T09:00:00Z",
     "end_time": "2027-01-06T12:00:00Z", "instance_type": "g5", "estimated_cost_usd": 25},
    {"run_id": "r3", "project": "chat", "team": "genai", "start_time": "2027-01-09T08:00:00Z",
     "end_time": "2027-01-09T18:00:00Z", "instance_type": "p5", "estimated_cost_usd": 500},
]


@pytest.fixture
def hand_bill(warehouse, tmp_path) -> Path:
    """HAND_LINES as a FOCUS bill (Jan 5-7, 2027) and HAND_RUNS (r3 on Jan 9, after the bill)."""
    bill = tmp_path / "bill.csv"
    rows = [f'{b},{e},USD,{start},{end},Usage,AWS,{service},{resource},{resource},"{json.dumps(tags).replace(chr(34), 2 * chr(34))}",li-{i}'
            for i, (b, e, start, end, service, resource, tags) in enumerate(HAND_LINES)]
    bill.write_text(HAND_BILL + "\n".join(rows) + "\n")
    runs = tmp_path / "runs.jsonl"
    runs.write_text("\n".join(json.dumps(run) for run in HAND_RUNS) + "\n")
    assert all(s.ok for _, s in loader.ingest_paths([str(bill), str(runs)]))
    return warehouse


def hand_allocated(team: str) -> dict[date, Decimal]:
    """Per day, the effective cost the allocation gives `team`: a line of a run goes to the run's
    team, any other line to its team tag (worked out from HAND_LINES and HAND_RUNS)."""
    run_team = {run["run_id"]: run["team"] for run in HAND_RUNS}
    by_day: dict[date, Decimal] = {}
    for _, effective, start, _, _, _, tags in HAND_LINES:
        owner = run_team[tags["run_id"]] if "run_id" in tags else tags.get("team")
        if owner == team:
            day = date.fromisoformat(start[:10])
            by_day[day] = by_day.get(day, Decimal(0)) + Decimal(effective)
    return by_day


def test_spend_is_allocated_through_the_bill_and_estimated_after_it(hand_bill, tmp_path):
    settings = settings_with(tmp_path, '[[budgets]]\nname = "g"\nscope = "team:genai"\namount = 600\n')
    check_day = date(2027, 1, 12)  # nothing on Jan 10 or 11: the as-of day is Jan 9, r3's day
    allocated = hand_allocated("genai")
    tagged = sum((Decimal(e) for _, e, _, _, _, _, tags in HAND_LINES if tags.get("team") == "genai"
                  and "run_id" not in tags), Decimal(0))  # r2's line is tagged genai but allocated to r2's team
    estimated = {date(2027, 1, 9): Decimal(next(r["estimated_cost_usd"] for r in HAND_RUNS if r["run_id"] == "r3"))}
    spend = {d: allocated.get(d, Decimal(0)) + estimated.get(d, Decimal(0)) for d in set(allocated) | set(estimated)}
    with_data = sorted({date.fromisoformat(line[2][:10]) for line in HAND_LINES}
                       | {date.fromisoformat(run["start_time"][:10]) for run in HAND_RUNS})
    through, start, end = date(2027, 1, 9), date(2027, 1, 1), date(2027, 2, 1)

    assert budgets.as_of_day(check_day) == through and budgets.bill_through() == date(2027, 1, 7)
    burn = budgets.burn(settings.budgets[0], settings, check_day)
    assert (burn.through, burn.bill_through, burn.source, burn.basis) == (
        through, date(2027, 1, 7), "billed + estimated", "allocated")
    assert burn.billed == sum(allocated.values(), Decimal(0)) and burn.tagged == tagged
    assert burn.estimated == sum(estimated.values(), Decimal(0))
    assert burn.spent == burn.billed + burn.estimated == sum(spend.values(), Decimal(0))
    # the 7-day window Jan 3-9 counts its days with data only
    window = [d for d in with_data if through - timedelta(days=6) <= d <= through]
    assert (burn.rate_window.first, burn.rate_window.last, burn.rate_window.with_data) == (
        date(2027, 1, 3), through, len(window))
    assert burn.rate_window.text() == f"2027-01-03 to 2027-01-09, 7 days, {len(window)} with data"
    rate = sum((spend.get(d, Decimal(0)) for d in window), Decimal(0)) / len(window)
    assert burn.rate_per_day == rate
    left = (end - through).days - 1
    assert burn.days_left == left and burn.forecast == burn.spent + rate * left
    band = sorted(spend.get(d, Decimal(0)) for d in with_data if through - timedelta(days=27) <= d <= through)
    assert burn.forecast_low == burn.spent + band[math.ceil(0.1 * len(band)) - 1] * left
    assert burn.forecast_high == burn.spent + band[math.ceil(0.9 * len(band)) - 1] * left
    cumulative, reached = Decimal(0), None
    for day in sorted(spend):
        cumulative += spend[day]
        if reached is None and cumulative >= 600:
            reached = day
    assert burn.days_to_breach == 0 and burn.breach_day == reached
    money = lambda amount, currency: f"${amount:,.2f}"  # noqa: E731
    assert burn.parts_text(money) == (f"allocated ${burn.billed:,.2f} through 2027-01-07, of which tagged "
                                      f"${tagged:,.2f}, + estimated ${burn.estimated:,.2f} after it")

    # before r3 the same budget stops at the bill's last day with data: nothing estimated
    early = budgets.burn(settings.budgets[0], settings, date(2027, 1, 9))
    assert (early.through, early.estimated, early.source) == (date(2027, 1, 7), 0, "billed")


def test_the_bill_replaces_the_estimate_for_the_days_it_covers(hand_bill, tmp_path):
    """A bill line of r3's day arrives: Jan 9 is billed (allocated), r3's estimate no longer counts."""
    settings = settings_with(tmp_path, '[[budgets]]\nname = "g"\nscope = "team:genai"\namount = 600\n')
    bill = tmp_path / "late.csv"
    bill.write_text(HAND_BILL + '420,420,USD,2027-01-09 08:00:00,2027-01-10 00:00:00,Usage,AWS,EC2,i-3,i-3,'
                                '"{""run_id"": ""r3""}",li-late\n')
    assert loader.ingest_file(bill).ok
    burn = budgets.burn(settings.budgets[0], settings, date(2027, 1, 12))
    assert burn.bill_through == date(2027, 1, 9) and burn.source == "billed" and burn.estimated == 0
    assert burn.spent == sum(hand_allocated("genai").values(), Decimal(0)) + Decimal(420)
