"""The human ingest report: money rounded half-up to cents with thousands separators; --json stays exact."""
from __future__ import annotations

import csv
import gzip
from decimal import Decimal

import pytest

from ingest.engine.report import FileSummary
from ingest.engine.report import summary_lines
from ingest.pipeline import loader
from tests.conftest import SAMPLE_DIR

BILL = SAMPLE_DIR / "billing" / "focus_2026-08.csv.gz"


def cents_text(amount: Decimal) -> str:
    """'1,234.57' by integer arithmetic on cents (half-up, away from zero), not by Decimal.quantize."""
    cents = (abs(amount) * 100 + Decimal("0.5")) // 1
    whole, part = divmod(int(cents), 100)
    return f"{'-' if amount < 0 and cents else ''}{whole:,}.{part:02d}"


def test_a_bill_prints_its_totals_in_cents_and_keeps_them_exact_in_json(warehouse):
    with gzip.open(BILL, "rt", newline="") as handle:
        rows = list(csv.DictReader(handle))
    billed = sum((Decimal(r["BilledCost"]) for r in rows), Decimal(0))
    effective = sum((Decimal(r["EffectiveCost"]) for r in rows), Decimal(0))
    summary = loader.ingest_file(BILL)
    figures = summary_lines(summary)[1]
    assert f"billed USD {cents_text(billed)};" in figures, figures
    assert f"effective cost USD {cents_text(effective)};" in figures, figures
    assert summary.to_json()["billed_cost_total"] == {"USD": str(billed)}


@pytest.mark.parametrize("totals, shown", [
    ({"billed_cost_total": {"USD": "32565.9952584341"}}, "billed USD 32,566.00"),
    ({"billed_cost_total": {"USD": "0.125", "EUR": "1234567.005"}}, "billed USD 0.13, EUR 1,234,567.01"),
    ({"billed_cost_total": {"USD": "-0.005"}}, "billed USD -0.01"),
    ({"cost_usd_total": "1023.25", "energy_kwh_total": 4.5},
     "estimated cost (USD) 1,023.25; measured energy (kWh) 4.5"),
], ids=["sample bill", "half a cent rounds up", "a credit rounds away from zero", "estimated cost"])
def test_money_is_rounded_half_up_to_cents(totals, shown):
    summary = FileSummary("bill.csv", "billing", "loaded", rows_loaded=1, totals=totals)
    assert summary_lines(summary)[1] == "  " + shown
