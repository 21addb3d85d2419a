"""The Billing and Reconciliation pages under AppTest, on the sample data and on empty or small
warehouses. Expected figures come from the sample files (csv + Decimal) and from the
generator's truth.json, never from the warehouse's SQL.
"""
from __future__ import annotations

import csv
import gzip
import io
import json
import os
import shutil
from datetime import date
from decimal import Decimal
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from ingest.pipeline import loader
from mlcost.commands import serve
from tests.conftest import IN_CI, REPO_ROOT, SAMPLE_DIR

APP = REPO_ROOT / "app" / "main.py"
BILLING, RECONCILIATION = "app_pages/billing.py", "app_pages/reconciliation.py"
BILLS = sorted((SAMPLE_DIR / "billing").glob("focus_*.csv.gz"))
CASES = Path(__file__).parent / "cases" / "billing"
GAP_PCT = 10  # the shipped reconciliation.gap_pct


@pytest.fixture(autouse=True)
def _no_user_settings(tmp_path, monkeypatch):
    """Run where no mlcost.toml is, with no $MLCOST_CONFIG: the shipped defaults apply."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLCOST_CONFIG", raising=False)


@pytest.fixture(scope="module")
def sample_db(tmp_path_factory) -> Path:
    """A warehouse holding the sample runs and bills, built once for this module."""
    if not BILLS:
        if IN_CI:
            pytest.fail("sample_data/billing is missing in CI")
        pytest.skip("sample_data/billing is not generated yet")
    path = tmp_path_factory.mktemp("billing") / "sample.duckdb"
    before = os.environ.get("MLCOST_DB")
    os.environ["MLCOST_DB"] = str(path)
    try:
        summaries = [loader.ingest_file(p) for p in [SAMPLE_DIR / "runs.jsonl", *BILLS]]
    finally:
        if before is None:
            del os.environ["MLCOST_DB"]
        else:
            os.environ["MLCOST_DB"] = before
    assert all(s.ok for s in summaries), [s.to_json() for s in summaries]
    return path


@pytest.fixture
def sample_warehouse(sample_db, warehouse) -> Path:
    shutil.copyfile(sample_db, warehouse)
    return warehouse


def bill_rows() -> list[dict]:
    rows = []
    for path in BILLS:
        rows += csv.DictReader(io.StringIO(gzip.decompress(path.read_bytes()).decode()))
    return rows


def truth() -> dict:
    return json.loads((SAMPLE_DIR / "truth.json").read_text())


def estimates() -> dict[str, Decimal]:
    runs = [json.loads(line, parse_float=Decimal) for line in (SAMPLE_DIR / "runs.jsonl").read_text().splitlines()]
    return {r["run_id"]: Decimal(str(r["estimated_cost_usd"])) for r in runs}


def open_page(page: str) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    at.switch_page(page).run()
    return rendered(at)


def rendered(at: AppTest) -> AppTest:
    assert not at.exception, [e.message + "\n" + "\n".join(e.stack_trace) for e in at.exception]
    return at


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def dollars(amount: Decimal) -> str:
    return f"{'-' if amount < 0 else ''}${abs(amount):,.2f}"


def table_with(at: AppTest, column: str):
    [table] = [t.value for t in at.dataframe if column in t.value.columns]
    return table


def test_the_demo_loads_the_sample_bills():
    assert "billing" in serve.SAMPLE_FILES


# --- Billing --------------------------------------------------------------------------------

def test_billing_headline_equals_the_sample_files(sample_warehouse):
    rows = bill_rows()
    at = open_page(BILLING)
    shown = metrics(at)

    def total(category: str | None = None) -> Decimal:
        return sum((Decimal(r["BilledCost"]) for r in rows if category in (None, r["ChargeCategory"])), Decimal(0))

    assert shown["Billed (USD)"] == dollars(total())
    assert shown["Credits"] == dollars(total("Credit")) and total("Credit") < 0
    assert shown["Taxes"] == dollars(total("Tax"))
    assert shown["Effective cost"] == dollars(sum((Decimal(r["EffectiveCost"]) for r in rows), Decimal(0)))
    # Every EC2 line of the sample is a GPU instance (g5, g6, p3, p4d, the A100 pool node).
    gpu = sum((Decimal(r["BilledCost"]) for r in rows
               if r["ChargeCategory"] == "Usage" and r["ServiceName"] == "Amazon Elastic Compute Cloud"), Decimal(0))
    assert shown["GPU instance spend"] == dollars(gpu)
    assert f"{len(rows):,} bill lines, 1 provider(s)" in [c.value for c in at.caption]
    assert len(at.get("plotly_chart")) == 3


def test_billing_by_category_keeps_credits_and_taxes_apart(sample_warehouse):
    months = truth()["billing_by_month"]
    at = open_page(BILLING)
    table = table_with(at, "credit")
    table = table.set_index("month") if "month" in table else table  # the invoice month is a column
    for month, expected in months.items():
        row = table.loc[next(i for i in table.index if str(i).startswith(month))]
        for category in ("usage", "purchase", "tax", "credit", "adjustment"):
            assert round(float(row.get(category, 0)), 2) == expected[f"{category}_usd"], (month, category)


def test_billing_split_by_tag_and_top_resources(sample_warehouse):
    rows = bill_rows()
    at = open_page(BILLING)
    at.selectbox(key="billing_split").set_value("Tag").run()
    rendered(at)
    at.selectbox(key="billing_tag").set_value("project").run()
    rendered(at)
    top = table_with(at, "resource_id")
    by_resource: dict[str, Decimal] = {}
    for r in rows:
        if r["ResourceId"]:
            by_resource[r["ResourceId"]] = by_resource.get(r["ResourceId"], Decimal(0)) + Decimal(r["BilledCost"])
    expected = sorted(by_resource.items(), key=lambda item: (-item[1], item[0]))[:20]
    assert list(top["resource_id"]) == [k for k, _ in expected]
    assert [round(float(v), 6) for v in top["billed_cost"]] == [round(float(v), 6) for _, v in expected]


def test_billing_date_range_selects_lines(sample_warehouse):
    rows = bill_rows()
    at = open_page(BILLING)
    at.sidebar.date_input(key="date_range").set_value((date(2026, 8, 1), date(2026, 8, 31))).run()
    rendered(at)
    august = sum((Decimal(r["BilledCost"]) for r in rows if r["ChargePeriodStart"].startswith("2026-08")), Decimal(0))
    assert metrics(at)["Billed (USD)"] == dollars(august)


def test_billing_on_an_empty_warehouse(warehouse):
    at = open_page(BILLING)
    assert "`mlcost fetch s3://bucket/prefix`" in " ".join(i.value for i in at.info)
    assert not at.metric and not at.dataframe


def test_billing_shows_one_currency_at_a_time(warehouse):
    loader.ingest_file(CASES / "focus.csv")  # 10.25 USD and 4.50 EUR
    at = open_page(BILLING)
    assert metrics(at)["Billed (USD)"] == "$10.25"
    at.selectbox(key="billing_currency").set_value("EUR").run()
    rendered(at)
    assert metrics(at)["Billed (EUR)"] == "4.50 EUR"
    every = table_with(at, "billing_currency")
    assert sorted(every["billing_currency"]) == ["EUR", "USD"]


# --- Reconciliation ---------------------------------------------------------------------------

def test_reconciliation_shows_every_cloud_run_with_both_costs(sample_warehouse):
    expected_billed = truth()["billed_cost_by_run_usd"]
    estimated = estimates()
    at = open_page(RECONCILIATION)
    runs = table_with(at, "gap_pct")
    assert sorted(runs["run_id"]) == sorted(expected_billed)
    for row in runs.itertuples():
        assert abs(float(row.billed_cost) - expected_billed[row.run_id]) < 1e-6, row.run_id
        assert Decimal(str(row.estimated_cost_usd)) == estimated[row.run_id]
    gaps = {run: (Decimal(str(billed)) - estimated[run]) / estimated[run] * 100 for run, billed in expected_billed.items()}
    assert sorted(runs.loc[runs["large_gap"], "run_id"]) == sorted(r for r, g in gaps.items() if abs(g) > GAP_PCT)
    shown = metrics(at)
    assert shown["Runs with bill lines"] == str(len(expected_billed))
    assert shown["Billed (USD)"] == dollars(sum(Decimal(str(v)) for v in expected_billed.values()).quantize(Decimal("0.01")))
    assert shown["Estimated (USD)"] == dollars(sum(estimated[r] for r in expected_billed))


def test_reconciliation_flags_runs_found_by_resource_id_only(sample_warehouse):
    untagged = truth()["untagged_run_ids"]
    at = open_page(RECONCILIATION)
    runs = table_with(at, "untagged")
    assert sorted(runs.loc[runs["untagged"], "run_id"]) == sorted(untagged)
    [warning] = [w.value for w in at.warning if "resource id only" in w.value]
    assert all(run in warning for run in untagged)


def test_reconciliation_unmatched_spend(sample_warehouse):
    rows = bill_rows()
    billed_runs = truth()["billed_cost_by_run_usd"]
    usage = sum((Decimal(r["BilledCost"]) for r in rows if r["ChargeCategory"] == "Usage"), Decimal(0))
    matched = sum((Decimal(str(v)) for v in billed_runs.values()), Decimal(0))
    at = open_page(RECONCILIATION)
    [line] = [c.value for c in at.caption if c.value.startswith("USD: ")]
    unmatched_shown = Decimal(line.split(" of usage")[0].removeprefix("USD: $").replace(",", ""))
    assert abs(unmatched_shown - (usage - matched)) <= Decimal("0.01")
    table = table_with(at, "lines_naming_unknown_runs")
    assert abs(Decimal(str(table["billed_cost"].astype(float).sum())) - (usage - matched)) < Decimal("0.01")


def test_reconciliation_tag_key_comes_from_the_settings(sample_warehouse, tmp_path):
    (tmp_path / "mlcost.toml").write_text('[reconciliation]\nrun_id_tag = "no-such-tag"\n')
    at = open_page(RECONCILIATION)
    runs = table_with(at, "untagged")
    # Without the tag only the resource id ties lines to runs: every cloud run, all "untagged".
    assert sorted(runs["run_id"]) == sorted(truth()["billed_cost_by_run_usd"])
    assert runs["untagged"].all()


def test_reconciliation_on_an_empty_warehouse(warehouse):
    at = open_page(RECONCILIATION)
    assert "No runs with bill lines" in " ".join(i.value for i in at.info)
    assert not at.metric


def test_reconciliation_with_bills_but_no_matching_runs_says_what_to_load(warehouse):
    for path in BILLS:
        assert loader.ingest_file(path).ok
    at = open_page(RECONCILIATION)
    advice = " ".join(i.value for i in at.info)
    assert "No run in this selection matched a bill line" in advice and "`run_id` tag" in advice
    assert not at.metric and not at.get("plotly_chart")  # no row of zeros, no empty chart
    usage = sum((Decimal(r["BilledCost"]) for r in bill_rows() if r["ChargeCategory"] == "Usage"), Decimal(0))
    [line] = [c.value for c in at.caption if c.value.startswith("USD: ")]
    assert line.startswith(f"USD: {dollars(usage)} of usage")


def test_top_resources_are_the_same_whichever_order_the_lines_come_in(tmp_path, monkeypatch):
    """A bucket billed as often under storage as under data transfer, renamed on its last day: the
    table lists both services (a tie has no commonest) and the latest name, from either file order.
    The mode of a tie depended on the order lines were read in, so a lake and a warehouse disagreed."""
    from metrics import queries
    from metrics.filters import Filters

    header = "BilledCost,EffectiveCost,BillingCurrency,ChargePeriodStart,ChargePeriodEnd,ChargeCategory," \
             "ProviderName,ServiceName,ResourceId,ResourceName,x_LineItemId"
    lines = [f"1.50,1.50,USD,2026-08-0{day}T00:00:00Z,2026-08-0{day + 1}T00:00:00Z,Usage,AWS,{service},"
             f"bucket-1,{'new-name' if day == 4 else 'old-name'},li-{day}-{n}"
             for day in (1, 2, 3, 4) for n, service in enumerate(("Amazon Simple Storage Service", "AWS Data Transfer"))]
    tables = []
    for order in (lines, lines[::-1]):
        folder = tmp_path / f"run{len(tables)}"
        folder.mkdir()
        bill = folder / "focus.csv"
        bill.write_text(header + "\n" + "\n".join(order) + "\n")
        monkeypatch.setenv("MLCOST_DB", str(folder / "wh.duckdb"))
        assert loader.ingest_file(bill).rows_loaded == len(lines)
        tables.append(queries.billing_top_resources(Filters(), "USD"))
    first, second = tables
    assert first.to_dict("records") == second.to_dict("records")
    [row] = first.to_dict("records")
    assert row["service_name"] == ", ".join(sorted({"Amazon Simple Storage Service", "AWS Data Transfer"}))
    assert row["resource_name"] == "new-name"
    assert row["billed_cost"] == Decimal("1.50") * len(lines)
