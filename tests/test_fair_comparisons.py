"""Fair comparisons in the retrospective: a partial month against the same days of the month before
(the bill's change too: a partial invoice month is not compared), and tiny bases shown as absolute
changes, not "+5800 %"."""
from __future__ import annotations

import calendar
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from metrics import retrospective
from outputs import report
from metrics.retrospective import Figure
from ingest.settings import config
from tests.conftest import REPO_ROOT
from tests.test_sample_data import epoch, runs, truth

NOVEMBER, OCTOBER = date(2026, 11, 1), date(2026, 10, 1)


@pytest.fixture(scope="module")
def november(demo_db) -> retrospective.Retrospective:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLCOST_DB", str(demo_db))
        patch.delenv("MLCOST_CONFIG", raising=False)
        return retrospective.build(NOVEMBER, config.load(REPO_ROOT / "ingest" / "defaults.toml"))


def run_cost(run: dict) -> Decimal:
    """A sample run's estimated cost (USD): as given, else hours x price (the README's rule)."""
    if run.get("estimated_cost_usd") is not None:
        return Decimal(str(run["estimated_cost_usd"]))
    return Decimal(str(run["duration_hours"])) * Decimal(str(run["price_per_hour_usd"]))


def cost_started(first: date, last: date) -> Decimal:
    """Estimated cost (USD) of the sample runs started from `first` to `last`, both included (UTC days)."""
    start = datetime(first.year, first.month, first.day, tzinfo=UTC).timestamp()
    end = (datetime(last.year, last.month, last.day, tzinfo=UTC) + timedelta(days=1)).timestamp()
    return sum((run_cost(r) for r in runs() if start <= epoch(r["start_time"]) < end
                and (r.get("estimated_cost_usd") is not None or r.get("price_per_hour_usd") is not None)),
               Decimal(0))


def test_a_partial_month_is_compared_with_the_same_days_of_the_previous_one(november):
    through = november.data_through
    assert through is not None and through.month == 11
    training = november.figure("Estimated training cost (USD)")
    assert abs(Decimal(str(training.current)) - cost_started(NOVEMBER, through)) < Decimal("0.01")
    same_days = cost_started(OCTOBER, OCTOBER.replace(day=through.day))
    assert abs(Decimal(str(training.previous)) - same_days) < Decimal("0.01")
    assert same_days < cost_started(OCTOBER, date(2026, 10, 31))  # the whole of October would be unfair
    expected = f"same days of October 2026 (Oct 01 to Oct {through.day:02d})"
    assert expected in november.comparison
    text = report.markdown(november)
    assert expected in text and f"| 2026-10 (1-{through.day}) | 2026-11 (1-{through.day}) |" in text


def test_the_bill_of_a_partial_month_is_compared_over_the_same_days_only(november):
    """An invoice month is not split by day: a partial one shows its amount, uncompared; the bill's change
    is the charges of the same days (tests/test_idle_everywhere.py checks them against the bill files)."""
    billed = november.figure("Billed, invoice month (USD)")
    now = Decimal(str(truth()["billing_by_month"]["2026-11"]["total_usd"]))
    assert billed.current.quantize(Decimal("0.01")) == now and billed.previous is None
    assert report.change(billed) == "—"
    charges = november.figure("Charges for the month (USD)")
    assert charges.change_pct is not None
    assert all(f"{charges.change_pct:+.1f} %" in r.text for r in november.recommendations if r.rule == "spend_change")


@pytest.mark.parametrize("current, previous, unit, shown", [
    (Decimal("590.00"), Decimal("10.00"), "USD", "+$580.00"),       # +5800 %: the amount says more
    (Decimal("10.00"), Decimal("590.00"), "USD", "-98.3 %"),         # a fall is a percentage of a real base
    (Decimal("110"), Decimal("100"), "USD", "+10.0 %"),
    (Decimal("250"), Decimal("0"), "USD", "+$250.00"),
    (Decimal("-50"), Decimal("-20"), "USD", "-$30.00"),             # credits: no base to divide by
    (12.0, 1.0, "kWh", "+11.0 kWh"),
    (None, 3.0, "kWh", "—"),
])
def test_tiny_bases_are_shown_as_absolute_changes(current, previous, unit, shown):
    assert report.change(Figure("figure", unit, current, previous, "page")) == shown
