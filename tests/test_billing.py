"""Cloud bills: the FOCUS, AWS CUR, GCP and Azure parsers (ingest/billing*.py), the warehouse
table `billing_lines` and its views.

Expected figures are recomputed here from the files with the csv module and Decimal (never
with the parsers' code or the warehouse's SQL): each real file in ../shared/formats either
loads with per-currency totals equal to the sum of its own cost column, or rejects specific
lines and loads the rest. The small hand-made cases in tests/cases/billing/ cover one header
variant each.
"""
from __future__ import annotations

import ast
import csv
import gzip
import hashlib
import io
import json
from collections import defaultdict
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ingest.engine import warehouse as wh
from ingest.formats.billing import bill_family, billing
from ingest.pipeline import loader
from tests.conftest import SAMPLE_DIR

CASES = Path(__file__).parent / "cases" / "billing"
CENT = Decimal("0.01")
UTC = timezone.utc


def fetch(sql: str, params: list | None = None) -> list[dict]:
    with wh.connect() as con:
        cursor = con.execute(sql, params or [])
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]


def csv_rows(path: Path) -> list[dict]:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return list(csv.DictReader(io.StringIO(raw.decode("utf-8-sig"), newline="")))


def sums(rows: list[dict], cost: str, currency: str) -> dict[str, Decimal]:
    """Σ cost per currency of the rows, skipping empty and NULL cells."""
    totals: dict[str, Decimal] = defaultdict(Decimal)
    for row in rows:
        if row[cost] not in ("", "NULL"):
            totals[row[currency]] += Decimal(row[cost])
    return dict(totals)


def gcp_credit_sums(rows: list[dict]) -> dict[str, Decimal]:
    """Σ of the credits' amounts per currency (the column is JSON or a Python literal)."""
    totals: dict[str, Decimal] = defaultdict(Decimal)
    for row in rows:
        text = row["credits"].strip()
        try:
            credits = json.loads(text)
        except json.JSONDecodeError:
            credits = ast.literal_eval(text)
        for credit in credits:
            totals[row["currency"]] += Decimal(str(credit["amount"]))
    return dict(totals)


def add(*parts: dict[str, Decimal]) -> dict[str, Decimal]:
    total: dict[str, Decimal] = defaultdict(Decimal)
    for part in parts:
        for currency, amount in part.items():
            total[currency] += amount
    return dict(total)


def assert_totals(reported: dict[str, str], expected: dict[str, Decimal], lines: int) -> None:
    """Per currency: equal to the cent, and within the 12-place rounding of each line."""
    assert set(reported) == set(expected), (reported, expected)
    for currency, amount in expected.items():
        got = Decimal(reported[currency])
        assert got.quantize(CENT) == amount.quantize(CENT), (currency, got, amount)
        assert abs(got - amount) <= Decimal("1e-12") * max(lines, 1), (currency, got, amount)


# --- every real file in ../shared/formats ------------------------------------------------------

# file, kind, cost column, currency column, the lines rejected (line -> reason)
REAL_FILES = [
    ("aws_cur/focusconverters_sample-anonymous-aws-export-dataset_first200KB.csv", "billing_aws",
     "lineItem/UnblendedCost", "lineItem/CurrencyCode", {}),
    ("aws_cur/koku_2022-07-01-alt-columns_snake.csv", "billing_aws",
     "line_item_unblended_cost", "line_item_currency_code", {}),
    # The header has 131 names (costCategory/CostCenter last) and every row 130 fields: the rows
    # lack the trailing column, which no amount is read from, so they load with it empty (as
    # csv.DictReader reads them: by position) and a warning says so (test_bill_quirks.py).
    ("aws_cur/koku_test_cur.csv", "billing_aws", "lineItem/UnblendedCost", "lineItem/CurrencyCode", {}),
    ("gcp_billing/koku_gcp_2022-08-01_5.csv", "billing_gcp", "cost", "currency", {}),
    ("gcp_billing/koku_gcp_202011_2020-11-08_2020-11-11.csv", "billing_gcp", "cost", "currency", {}),
    ("azure/finopstoolkit_EA_ActualCost_Small.csv", "billing_azure", "Cost", "BillingCurrency", {}),
    ("azure/koku_azure_version_2.csv", "billing_azure", "CostInBillingCurrency", "BillingCurrencyCode", {}),
    ("azure/koku_costreport_a243c6f2-199f-4074-9a2c-40e671cf1584.csv", "billing_azure", "PreTaxCost",
     "Currency", {}),
    ("focus/focusfoundation_FOCUS-1.0_focus_sample.csv", "billing_focus", "BilledCost", "BillingCurrency", {}),
    ("focus/focusspec_saas_spend_agreements_b2.csv", "billing_focus", "BilledCost", "BillingCurrency", {}),
]


@pytest.mark.parametrize("name, kind, cost, currency, rejected", REAL_FILES, ids=[f[0] for f in REAL_FILES])
def test_every_real_bill_loads_with_its_own_totals(formats_dir, warehouse, name, kind, cost, currency, rejected):
    path = formats_dir / name
    rows = csv_rows(path)
    # Physical line of each data row (a quoted field may hold a newline): from the raw reader.
    reader = csv.reader(io.StringIO(path.read_bytes().decode("utf-8-sig"), newline=""))
    next(reader)
    starts, previous = [], reader.line_num
    for _ in reader:
        starts.append(previous + 1)
        previous = reader.line_num
    kept = [row for row, line in zip(rows, starts) if line not in rejected]
    expected = sums(kept, cost, currency)
    if kind == "billing_gcp":  # each credit is a line of its own, so the net is cost + credits
        expected = add(expected, gcp_credit_sums(kept))

    summary = loader.ingest_file(path)
    assert summary.error is None and summary.kind == kind
    assert {r["line"]: r["reason"] for r in summary.rejects} == dict(list(rejected.items())[:loader.REJECTS_SHOWN])
    stored_rejects = fetch("SELECT line, reason FROM rejects ORDER BY line")
    assert {r["line"]: r["reason"] for r in stored_rejects} == rejected
    assert summary.rows_loaded == len(kept) and summary.rows_rejected == len(rejected)
    assert_totals(summary.totals["billed_cost_total"], expected, len(kept))
    # The warehouse holds the same figures, one row per currency.
    stored = {r["billing_currency"]: r for r in fetch("SELECT * FROM billing_currency_totals")}
    assert_totals({c: str(r["billed_cost"]) for c, r in stored.items()}, expected, len(kept))
    for row in stored.values():  # the categories add up to the total
        parts = sum(row[f"{c}_cost"] for c in bill_family.CATEGORIES)
        assert parts == row["billed_cost"]


def test_gcp_credits_stay_negative_credit_lines(formats_dir, warehouse):
    path = formats_dir / "gcp_billing" / "koku_gcp_202011_2020-11-08_2020-11-11.csv"
    rows = csv_rows(path)
    loader.ingest_file(path)
    by_category = {r["charge_category"]: r for r in fetch(
        "SELECT charge_category, count(*) AS lines, sum(billed_cost) AS billed FROM billing_lines GROUP BY 1")}
    credits = [c for row in rows for c in ast.literal_eval(row["credits"])]
    assert by_category["credit"]["lines"] == len(credits) == 8
    assert by_category["credit"]["billed"] == sum(Decimal(str(c["amount"])) for c in credits) < 0
    assert by_category["usage"]["billed"] == sums(rows, "cost", "currency")["USD"]
    assert {r["charge_description"] for r in fetch(
        "SELECT charge_description FROM billing_lines WHERE charge_category = 'credit'")} == {
        "FreeTrial:Credit-000000-B0BBA4-940A77"}


def test_focus_sample_keeps_credits_adjustments_and_near_duplicate_tag_names(formats_dir, warehouse):
    path = formats_dir / "focus" / "focusfoundation_FOCUS-1.0_focus_sample.csv"
    rows = csv_rows(path)
    loader.ingest_file(path)
    for category in ("Credit", "Adjustment"):
        expected = sum(Decimal(r["BilledCost"]) for r in rows if r["ChargeCategory"] == category)
        [stored] = fetch("SELECT sum(billed_cost) AS s, count(*) AS n FROM billing_lines WHERE charge_category = ?",
                         [category.lower()])
        assert stored["s"] == expected and stored["n"] == sum(r["ChargeCategory"] == category for r in rows)
    [credit] = fetch("SELECT * FROM billing_lines WHERE charge_category = 'credit'")
    assert credit["billed_cost"] < 0 and credit["resource_id"] is None and credit["tags"] is None
    assert credit["pricing_category"] is None and credit["pricing_category_raw"] == "Other"
    # Literal NULL is a null, never the text "NULL".
    assert fetch("SELECT count(*) AS n FROM billing_lines WHERE 'NULL' IN "
                 "(resource_id, sku_id, region_id, consumed_unit, pricing_category_raw)")[0]["n"] == 0
    # "org" and " org" are two tags, as written.
    both = fetch("SELECT tags FROM billing_lines WHERE list_contains(map_keys(tags), ' org') "
                 "AND list_contains(map_keys(tags), 'org') LIMIT 1")
    assert both, "expected a line carrying both 'org' and ' org'"


def test_aws_sample_taxes_are_tax_lines(formats_dir, warehouse):
    path = formats_dir / "aws_cur" / "focusconverters_sample-anonymous-aws-export-dataset_first200KB.csv"
    rows = csv_rows(path)
    loader.ingest_file(path)
    [tax] = fetch("SELECT count(*) AS n, sum(billed_cost) AS s FROM billing_lines WHERE charge_category = 'tax'")
    taxes = [r for r in rows if r["lineItem/LineItemType"] == "Tax"]
    assert tax["n"] == len(taxes) == 12
    assert tax["s"] == sum(Decimal(r["lineItem/UnblendedCost"]) for r in taxes)
    # The quoted invoicing entity with a comma did not shift anything: every line has its currency.
    assert fetch("SELECT DISTINCT billing_currency AS c FROM billing_lines") == [{"c": "USD"}]


# --- one small case per header variant ----------------------------------------------------------

def line_of(key_fragment: str) -> dict:
    [row] = fetch("SELECT * FROM billing_lines WHERE line_key LIKE ? OR source_line_id = ?",
                  [f"%{key_fragment}%", key_fragment])
    return row


CASE_FILES = {
    # file: (kind, data lines loaded, billed totals per currency, {rejected line: reason})
    "aws_cur_legacy.csv": ("billing_aws", 4, {"USD": "23.8244"}, {5: "has 15 fields, the header has 26"}),
    "aws_cur_athena.csv": ("billing_aws", 2, {"EUR": "0.55"}, {}),
    "aws_cur2.csv": ("billing_aws", 2, {"USD": "3.172"}, {}),
    "gcp_flat.csv": ("billing_gcp", 3, {"USD": "0.035"}, {}),
    "gcp_repr.csv": ("billing_gcp", 1, {"USD": "0"}, {}),
    "gcp_export.jsonl": ("billing_gcp", 2, {"EUR": "2.82"}, {3: "not valid JSON: Expecting value at column 10"}),
    "azure_ea.csv": ("billing_azure", 2, {"USD": "33.85"}, {}),
    "azure_mca.csv": ("billing_azure", 3, {"GBP": "0.414455"}, {}),
    "azure_camel.csv": ("billing_azure", 1, {"USD": "1.75"}, {}),
    "azure_lowercase.csv": ("billing_azure", 1, {"USD": "0.45"}, {}),
    "azure_localized.csv": ("billing_azure", 1, {"EUR": "2.5"}, {}),
    "azure_legacy.csv": ("billing_azure", 1, {"USD": "0.05"}, {}),
    "focus.csv": ("billing_focus", 4, {"USD": "10.25", "EUR": "4.5"},
                  {7: "has 21 fields, the header has 20", 8: "has 19 fields, the header has 20"}),
    "focus_snake.csv": ("billing_focus", 1, {"JPY": "7.25"}, {}),
    "focus_header_only.csv": ("billing_focus", 0, {}, {}),
    # a real AWS Detailed Billing Report: scopely-devops/details tests/unit/data/detailed_with_tags.csv
    "dbr_detailed_with_tags.csv": ("billing_aws_dbr", 8, {"USD": "0.08805964"}, {}),
}


def test_every_case_file_is_in_the_table():
    assert sorted(CASE_FILES) == sorted(p.name for p in CASES.iterdir())


@pytest.mark.parametrize("name", sorted(CASE_FILES))
def test_header_variant_loads(warehouse, name):
    kind, lines, billed, rejected = CASE_FILES[name]
    summary = loader.ingest_file(CASES / name)
    assert summary.error is None and summary.kind == kind and summary.status == "loaded"
    assert summary.rows_loaded == lines
    assert {r["line"]: r["reason"] for r in summary.rejects} == rejected
    assert summary.totals["billed_cost_total"] == billed
    assert summary.ok == (not rejected)


def test_legacy_cur_columns(warehouse):
    loader.ingest_file(CASES / "aws_cur_legacy.csv")
    first = line_of("li-1|2026-08-01T00:00:00Z")
    assert first["provider"] == "AWS" and first["charge_category"] == "usage"
    assert first["billed_cost"] == Decimal("32.7726") and first["list_cost"] == Decimal("32.7726")
    assert first["charge_period_start"] == datetime(2026, 8, 1, tzinfo=UTC)  # no zone: UTC
    assert first["instance_type"] == "p4d.24xlarge" and first["region_id"] == "us-east-1"
    assert (first["pricing_category"], first["pricing_category_raw"]) == ("on-demand", "OnDemand")
    assert dict(first["tags"]) == {"run_id": "run-a", "aws:createdBy": "IAMUser:x", "cost_category:Team": "genai"}
    assert first["charge_description"] == "$32.7726 per On Demand Linux p4d.24xlarge Instance Hour, us-east-1"
    assert first["source_line_id"] == "li-1" and first["source_line"] == 2
    spot = line_of("li-1|2026-08-01T01:00:00Z")
    assert spot["pricing_category"] == "spot" and spot["tags"] is None
    credit = line_of("li-2")
    assert (credit["charge_category"], credit["billed_cost"]) == ("credit", Decimal("-10.5"))
    assert line_of("li-4")["charge_category"] == "tax"


def test_athena_and_cur2_columns(warehouse):
    loader.ingest_file(CASES / "aws_cur_athena.csv")
    loader.ingest_file(CASES / "aws_cur2.csv")
    covered = line_of("ath-1")
    assert (covered["billed_cost"], covered["effective_cost"]) == (0, Decimal("0.55"))
    assert covered["pricing_category"] == "commitment" and dict(covered["tags"]) == {"project": "vision"}
    fee = line_of("ath-2")
    assert fee["charge_category"] == "purchase" and fee["effective_cost"] is None  # no unused-fee columns
    usage = line_of("c2-1")
    assert usage["source_format"] == "aws_cur2" and usage["instance_type"] == "g5.12xlarge"
    assert usage["service_name"] == "Amazon Elastic Compute Cloud" and usage["sku_id"] == "SKU9"
    assert dict(usage["tags"]) == {"run_id": "run-c", "team": "genai", "cost_category:Team": "genai"}
    assert usage["sub_account_name"] == "research"
    negation = line_of("c2-2")
    assert (negation["charge_category"], negation["effective_cost"]) == ("usage", 0)


def test_gcp_columns(warehouse):
    loader.ingest_file(CASES / "gcp_flat.csv")
    loader.ingest_file(CASES / "gcp_export.jsonl")
    rows = fetch("SELECT * FROM billing_lines ORDER BY source_file, source_line, charge_category DESC, billed_cost DESC")
    gpu = [r for r in rows if r["sku_id"] == "CP-1"]
    assert [(r["charge_category"], r["billed_cost"]) for r in gpu] == [
        ("usage", Decimal("0.35")), ("credit", Decimal("-0.07")), ("credit", Decimal("-0.28"))]
    assert {r["charge_category_raw"] for r in gpu} == {"regular", "SUSTAINED_USAGE_DISCOUNT", "PROMOTION"}
    assert gpu[0]["instance_type"] == "n1-standard-8" and dict(gpu[0]["tags"]) == {"run_id": "run-g"}
    assert gpu[0]["billing_period_start"] == datetime(2026, 8, 1, tzinfo=UTC)
    assert gpu[0]["resource_name"] == "vm-1" and gpu[0]["sub_account_id"] == "ml-proj"
    spot = next(r for r in rows if r["sku_id"] == "CP-2")
    assert spot["pricing_category"] == "spot" and spot["billed_cost"] == Decimal("0.015")
    tax = next(r for r in rows if r["sku_id"] == "TAX-1")
    assert tax["charge_category"] == "tax" and tax["pricing_category"] is None
    nested = next(r for r in rows if r["sku_id"] == "A2-1" and r["charge_category"] == "usage")
    assert nested["charge_period_start"] == datetime(2026, 8, 1, tzinfo=UTC)
    assert nested["instance_type"] == "a2-highgpu-1g" and nested["billing_currency"] == "EUR"
    assert nested["consumed_quantity"] == 3600 and nested["consumed_unit"] == "seconds"


def test_azure_columns(warehouse):
    for name in ("azure_ea.csv", "azure_mca.csv", "azure_localized.csv", "azure_legacy.csv", "azure_camel.csv"):
        loader.ingest_file(CASES / name)
    rows = {r["sku_id"]: r for r in fetch("SELECT * FROM billing_lines")}
    vm = rows["m-1"]
    assert vm["charge_period_start"] == datetime(2023, 9, 4, tzinfo=UTC)
    assert vm["charge_period_end"] == datetime(2023, 9, 5, tzinfo=UTC)
    assert vm["billing_period_start"] == datetime(2023, 9, 1, tzinfo=UTC)
    assert dict(vm["tags"]) == {"run_id": "run-z", "env": "prod"}
    assert vm["instance_type"] == "standard_nc6s_v3" and vm["source_format"] == "azure_ea"
    assert (rows["m-2"]["charge_category"], rows["m-2"]["pricing_category"]) == ("purchase", "commitment")
    assert rows["m-3"]["source_format"] == "azure_mca" and rows["m-3"]["billing_currency"] == "GBP"
    refund = [r for r in fetch("SELECT * FROM billing_lines WHERE charge_category_raw = 'Refund'")]
    assert [(r["charge_category"], r["billed_cost"]) for r in refund] == [("credit", Decimal("-0.2"))]
    assert rows["m-7"]["billing_currency"] == "EUR" and dict(rows["m-7"]["tags"]) == {"team": "genai"}
    assert rows["m-8"]["source_format"] == "azure_legacy" and rows["m-8"]["resource_id"] == "/subscriptions/x/vm-1"
    assert rows["m-5"]["charge_period_start"] == datetime(2024, 1, 5, tzinfo=UTC)


def test_focus_columns(warehouse):
    loader.ingest_file(CASES / "focus.csv")
    first = line_of("li-1")
    assert first["charge_description"] == "On Demand Linux g6.xlarge\nInstance Hour"  # quoted newline
    assert first["source_line"] == 2 and first["instance_type"] == "g6.xlarge"
    assert first["charge_period_start"] == datetime(2026, 8, 1, tzinfo=UTC)  # 8/1/26
    assert (first["pricing_category"], first["pricing_category_raw"]) == ("commitment", "Committed")
    assert dict(first["tags"]) == {"run_id": "run-f", "org": "a", " org": "b"}
    credit = line_of("li-2")
    assert credit["billed_cost"] == -3 and credit["list_cost"] is None and credit["charge_category"] == "credit"
    assert line_of("li-3")["source_line"] == 6  # after the blank line 5
    assert line_of("li-6")["pricing_category"] == "spot"
    assert fetch("SELECT billing_currency, billed_cost FROM billing_currency_totals ORDER BY 1") == [
        {"billing_currency": "EUR", "billed_cost": Decimal("4.5")},
        {"billing_currency": "USD", "billed_cost": Decimal("10.25")}]


@pytest.mark.parametrize("line, reason", [
    ("1,1,USD,2026-08-01,Refund,AWS", ("ChargeCategory 'Refund' is not a charge category mlcost knows "
                                       "(adjustment, credit, purchase, tax, usage)")),
    ("NULL,1,USD,2026-08-01,Usage,AWS", "no BilledCost"),
    ("abc,1,USD,2026-08-01,Usage,AWS", "BilledCost must be an amount, got 'abc'"),
    ("1,1,USD,13/45/26,Usage,AWS", "ChargePeriodStart '13/45/26' is not a date (read as month/day/year)"),
    ("1,1,,2026-08-01,Usage,AWS", "no BillingCurrency"),
    ("1,1,USD,2026-08-01,Usage,NULL", "no ProviderName"),
])
def test_bad_values_reject_the_line(warehouse, tmp_path, line, reason):
    path = tmp_path / "bad.csv"
    path.write_text("BilledCost,EffectiveCost,BillingCurrency,ChargePeriodStart,ChargeCategory,ProviderName\n"
                    f"{line}\n2,2,USD,2026-08-01,Usage,AWS\n")
    summary = loader.ingest_file(path)
    assert summary.rows_loaded == 1
    assert summary.rejects == [{"line": 2, "reason": reason}]


def test_a_header_without_the_cost_rejects_the_file_line_by_line(warehouse, tmp_path):
    """The header is refused, and so is every line under it: none is lost without a word."""
    path = tmp_path / "bad.csv"
    path.write_text("BilledCost,BillingCurrency,ChargePeriodStart,ChargeCategory\n1,USD,2026-08-01,Usage\n")
    summary = loader.ingest_file(path, kind="billing_aws")
    assert (summary.status, summary.rows_loaded, summary.rows_rejected) == ("rejected", 0, 2)
    lacks = "the AWS CUR header lacks line_item_unblended_cost, line_item_usage_start_date"
    assert summary.rejects == [{"line": 1, "reason": lacks}, {"line": 2, "reason": f"not read: {lacks} (line 1)"}]


def test_detection_tells_the_families_apart(formats_dir):
    for name, kind, *_ in REAL_FILES:
        text = (formats_dir / name).read_bytes().decode("utf-8-sig")
        assert loader.detect(name, text[:loader.SNIFF_CHARS]).KIND == kind, name
    for name, (kind, *_) in CASE_FILES.items():
        text = (CASES / name).read_bytes().decode("utf-8-sig")
        assert loader.detect(name, text[:loader.SNIFF_CHARS]).KIND == kind, name


# --- Parquet ------------------------------------------------------------------------------------

def test_focus_parquet_loads_like_its_csv(warehouse, tmp_path):
    rows = csv_rows(CASES / "focus_snake.csv")
    table = pa.table({
        "BilledCost": pa.array([Decimal(rows[0]["billed_cost"])], pa.decimal128(20, 10)),
        "BillingCurrency": ["JPY"],
        "ChargePeriodStart": pa.array([datetime(2026, 8, 1)], pa.timestamp("us")),  # naive: UTC
        "ChargePeriodEnd": pa.array([datetime(2026, 8, 2, tzinfo=UTC)], pa.timestamp("us", tz="UTC")),
        "ChargeCategory": ["Purchase"], "ProviderName": ["Oracle"], "PricingCategory": [None],
        "ConsumedQuantity": pa.array([1.5], pa.float64()),
        "Tags": pa.array([[("team", "genai")]], pa.map_(pa.string(), pa.string())),
    })
    path = tmp_path / "focus.parquet"
    pq.write_table(table, path)
    summary = loader.ingest_file(path)
    assert (summary.kind, summary.rows_loaded, summary.rejects) == ("billing_focus", 1, [])
    assert summary.totals["billed_cost_total"] == {"JPY": "7.25"}
    [row] = fetch("SELECT * FROM billing_lines")
    assert row["charge_period_start"] == datetime(2026, 8, 1, tzinfo=UTC)
    assert row["charge_period_end"] == datetime(2026, 8, 2, tzinfo=UTC)
    assert dict(row["tags"]) == {"team": "genai"} and row["source_line"] == 1
    assert row["consumed_quantity"] == 1.5


def cur2_parquet(path: Path, cost: str = "5.672") -> Path:
    """A CUR 2.0 Parquet file with real map columns (product, resource_tags, cost_category)."""
    text_map = pa.map_(pa.string(), pa.string())
    table = pa.table({
        "identity_line_item_id": ["pq-1", "pq-2"],
        "identity_time_interval": ["2026-08-03T00:00:00Z/2026-08-03T01:00:00Z"] * 2,
        "line_item_line_item_type": ["Usage", "Tax"],
        "line_item_usage_start_date": pa.array([datetime(2026, 8, 3, tzinfo=UTC)] * 2, pa.timestamp("ms", tz="UTC")),
        "line_item_usage_end_date": pa.array([datetime(2026, 8, 3, 1, tzinfo=UTC)] * 2, pa.timestamp("ms", tz="UTC")),
        "line_item_resource_id": ["i-0pq", None],
        "line_item_currency_code": ["USD", "USD"],
        "line_item_unblended_cost": pa.array([float(cost), 0.5], pa.float64()),
        "pricing_term": ["OnDemand", None],
        "product": pa.array([[("instance_type", "g6.12xlarge"), ("product_name", "Amazon Elastic Compute Cloud")],
                             []], text_map),
        "resource_tags": pa.array([[("user_run_id", "run-pq"), ("user_team", "genai")], None], text_map),
        "cost_category": pa.array([[("Team", "genai")], []], text_map),
    })
    pq.write_table(table, path)
    return path


def test_cur2_parquet_with_map_columns(warehouse, tmp_path):
    summary = loader.ingest_file(cur2_parquet(tmp_path / "cur2.parquet"))
    assert (summary.kind, summary.rows_loaded, summary.rejects) == ("billing_aws", 2, [])
    assert summary.totals["billed_cost_total"] == {"USD": "6.172"}
    usage = line_of("pq-1")
    assert usage["instance_type"] == "g6.12xlarge" and usage["source_format"] == "aws_cur2"
    assert dict(usage["tags"]) == {"run_id": "run-pq", "team": "genai", "cost_category:Team": "genai"}
    assert line_of("pq-2")["charge_category"] == "tax"


def test_gzipped_parquet_and_a_non_bill_parquet(warehouse, tmp_path):
    plain = cur2_parquet(tmp_path / "cur2.parquet")
    packed = tmp_path / "cur2.parquet.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert loader.ingest_file(packed).rows_loaded == 2
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"a": [1]}), other)
    assert "could not tell what kind" in loader.ingest_file(other).error
    assert "cannot be read as runs" in loader.ingest_file(other, kind="runs").error


# --- loading again ------------------------------------------------------------------------------

def test_loading_a_bill_again_from_another_file_replaces_its_lines(formats_dir, warehouse, tmp_path):
    sources = [formats_dir / "focus" / "focusfoundation_FOCUS-1.0_focus_sample.csv",  # line ids
               formats_dir / "gcp_billing" / "koku_gcp_202011_2020-11-08_2020-11-11.csv",  # hashed keys
               formats_dir / "azure" / "finopstoolkit_EA_ActualCost_Small.csv",
               formats_dir / "aws_cur" / "focusconverters_sample-anonymous-aws-export-dataset_first200KB.csv"]
    for source in sources:
        loader.ingest_file(source)
    before = fetch("SELECT line_key, billed_cost FROM billing_lines ORDER BY line_key")
    totals = fetch("SELECT * FROM billing_currency_totals")
    for number, source in enumerate(sources):
        copy = tmp_path / f"copy{number}.csv.gz"  # other bytes, same lines (CRLF, compressed)
        copy.write_bytes(gzip.compress(source.read_bytes().replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")))
        again = loader.ingest_file(copy)
        assert again.status == "loaded" and again.rows_loaded > 0
    assert fetch("SELECT line_key, billed_cost FROM billing_lines ORDER BY line_key") == before
    assert fetch("SELECT * FROM billing_currency_totals") == totals
    assert loader.ingest_file(sources[0]).status == "already_loaded"


def test_identical_lines_of_one_file_are_both_kept(warehouse, tmp_path):
    path = tmp_path / "twice.csv"
    line = "acct,sub-9,2024-02-01,Storage,m-9,1,0.5,USD,/r,,Usage\n"
    path.write_text("BillingAccountId,SubscriptionId,Date,MeterCategory,MeterId,Quantity,Cost,BillingCurrency,"
                    "ResourceId,Tags,ChargeType\n" + line + line)
    assert loader.ingest_file(path).totals["billed_cost_total"] == {"USD": "1"}
    assert fetch("SELECT count(*) AS n, sum(billed_cost) AS s FROM billing_lines") == [{"n": 2, "s": Decimal("1")}]


# --- the sample bills ---------------------------------------------------------------------------

def test_sample_bills_match_the_generators_truth(warehouse):
    truth = json.loads((SAMPLE_DIR / "truth.json").read_text())
    for path in sorted((SAMPLE_DIR / "billing").glob("focus_*.csv.gz")):
        summary = loader.ingest_file(path)
        assert summary.ok, summary.to_json()
    by_month = fetch("SELECT strftime(billing_period_start, '%Y-%m') AS month, charge_category, "
                     "sum(billed_cost) AS billed, count(*) AS lines FROM billing_lines GROUP BY ALL")
    for month, expected in truth["billing_by_month"].items():
        mine = [r for r in by_month if r["month"] == month]
        assert sum(r["lines"] for r in mine) == expected["lines"]
        assert sum(r["billed"] for r in mine).quantize(CENT) == Decimal(str(expected["total_usd"]))
        for row in mine:
            assert row["billed"].quantize(CENT) == Decimal(str(expected[f"{row['charge_category']}_usd"]))
    assert fetch("SELECT count(*) AS n FROM billing_lines")[0]["n"] == truth["counts"]["billing_lines"]


def test_cur2_parquet_past_the_sniffed_head_is_detected(warehouse, tmp_path):
    """A Parquet file's schema is in its footer: a real export (far over the 64 KB head) must be
    told apart without --kind, plain and gzipped."""
    lines = 6000
    ids = [f"li-{n:07d}-{hashlib.sha256(str(n).encode()).hexdigest()}" for n in range(lines)]
    costs = [f"{n % 977}.{n % 1000:03d}" for n in range(lines)]
    pq.write_table(pa.table({
        "identity_line_item_id": ids,
        "line_item_line_item_type": ["Usage"] * lines,
        "line_item_usage_start_date": pa.array([datetime(2026, 8, 3, tzinfo=UTC)] * lines, pa.timestamp("ms", tz="UTC")),
        "line_item_currency_code": ["USD"] * lines,
        "line_item_unblended_cost": costs,
        "product": pa.array([[("instance_type", "g6.12xlarge")]] * lines, pa.map_(pa.string(), pa.string())),
    }), tmp_path / "cur2.parquet", compression="none")
    assert (tmp_path / "cur2.parquet").stat().st_size > 4 * 64 * 1024
    expected = {"USD": billing.plain(sum(Decimal(c) for c in costs))}
    summary = loader.ingest_file(tmp_path / "cur2.parquet")
    assert (summary.kind, summary.rows_loaded, summary.rejects) == ("billing_aws", lines, [])
    assert summary.totals["billed_cost_total"] == expected
    packed = tmp_path / "cur2.parquet.gz"
    packed.write_bytes(gzip.compress((tmp_path / "cur2.parquet").read_bytes()))
    assert loader.ingest_file(packed).kind == "billing_aws"
