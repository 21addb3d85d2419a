"""Real exports load as their providers meant them (issue 21): a bill without a currency column
([billing] default_currency), rows that all lack the header's trailing columns, FOCUS files as the
specification writes its examples, a CUR 2.0 export flattened to snake_case columns.

Each file is written here (or read from ../shared/formats); the figures are recomputed with csv
and Decimal over the same text, never with the parsers' code. Every file is also staged and
parsed (tests/bill_equivalence.py): both readers must agree, so the rule lives once.
"""
from __future__ import annotations

import csv
import io
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ingest.engine import warehouse as wh
from ingest.formats.billing import billing_aws, billing_azure, billing_focus, billing_gcp
from ingest.pipeline import loader
from tests.bill_equivalence import parsed, staged


def fetch(sql: str, params: list | None = None) -> list[dict]:
    with wh.connect() as con:
        cursor = con.execute(sql, params or [])
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]


@pytest.fixture
def settings(tmp_path, monkeypatch):
    """Write mlcost.toml with these [billing] settings and point MLCOST_CONFIG at it."""
    def write(**billing: str) -> Path:
        path = tmp_path / "mlcost.toml"
        path.write_text("[billing]\n" + "".join(f'{key} = "{value}"\n' for key, value in billing.items()))
        monkeypatch.setenv("MLCOST_CONFIG", str(path))
        return path
    return write


def write_csv(path: Path, header: list[str], rows: list[list[str]], newline: str = "\n",
              blank_between: bool = False) -> Path:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator=newline)
    writer.writerow(header)
    for row in rows:
        writer.writerow(row)
        if blank_between:
            out.write(newline)
    path.write_text(out.getvalue(), newline="")
    return path


def data_rows(path: Path) -> list[tuple[int, list[str]]]:
    """(physical line, fields) of each non-blank record after the header."""
    reader = csv.reader(io.StringIO(path.read_bytes().decode("utf-8-sig"), newline=""))
    next(reader)
    found, previous = [], reader.line_num
    for fields in reader:
        if fields and any(f.strip() for f in fields):
            found.append((previous + 1, fields))
        previous = reader.line_num
    return found


class total:
    """Σ of decimal texts; equal to a reported total (text) to the cent and within the 12-place
    rounding of each line (amounts are stored as DECIMAL(38, 12))."""

    def __init__(self, values: list[str]):
        kept = [Decimal(v) for v in values if v.strip() not in ("", "null", "NULL")]
        self.amount, self.lines = sum(kept, Decimal(0)), max(len(kept), 1)

    def __eq__(self, reported: object) -> bool:
        got = Decimal(str(reported))
        return (got.quantize(Decimal("0.01")) == self.amount.quantize(Decimal("0.01"))
                and abs(got - self.amount) <= Decimal("1e-12") * self.lines)

    def __repr__(self) -> str:
        return f"total({self.amount})"


def assert_both_readers_agree(module, path: Path) -> None:
    mine, today = staged(module, path, "bill"), parsed(module, path, "bill")
    assert mine["rejects"] == today["rejects"]
    assert (mine["accepted"], mine["totals"]) == (today["accepted"], today["totals"])
    assert mine["rows"] == today["rows"]


# --- 1. a bill without a currency column -----------------------------------------------------------

FOCUS_HEADER = ["BilledCost", "EffectiveCost", "ChargePeriodStart", "ChargePeriodEnd", "ChargeCategory",
                "ProviderName", "ServiceName", "ResourceId"]
FOCUS_ROWS = [["12.50", "10.00", "2026-03-01T00:00:00Z", "2026-03-01T01:00:00Z", "Usage", "Acme", "VM", "vm-1"],
              ["0.125", "0.125", "2026-03-01T01:00:00Z", "2026-03-01T02:00:00Z", "Usage", "Acme", "VM", "vm-2"],
              ["-2", "-2", "2026-03-02T00:00:00Z", "2026-03-02T01:00:00Z", "Credit", "Acme", "VM", ""]]
CUR2_HEADER = ["identity_line_item_id", "identity_time_interval", "bill_payer_account_id",
               "line_item_line_item_type", "line_item_usage_start_date", "line_item_usage_end_date",
               "line_item_unblended_cost", "line_item_usage_amount", "line_item_resource_id",
               "pricing_public_on_demand_cost", "pricing_term", "product_product_name", "product_instance_type",
               "product_region_code", "product_sku"]
CUR2_ROWS = [["id1", "2026-03-01T00:00:00Z/2026-03-01T01:00:00Z", "1111", "Usage", "2026-03-01T00:00:00Z",
              "2026-03-01T01:00:00Z", "3.06", "1", "i-1", "3.06", "OnDemand", "Amazon Elastic Compute Cloud",
              "p3.2xlarge", "us-east-1", "SKU1"],
             ["id2", "2026-03-01T00:00:00Z/2026-03-01T01:00:00Z", "1111", "Tax", "2026-03-01T00:00:00Z",
              "2026-03-01T01:00:00Z", "0.31", "", "", "", "", "Amazon Elastic Compute Cloud", "", "", ""]]
GCP_HEADER = ["billing_account_id", "service.description", "sku.description", "usage_start_time",
              "usage_end_time", "project.id", "cost", "credits"]
GCP_ROWS = [["A-1", "Compute Engine", "N1 core", "2026-03-01 00:00:00 UTC", "2026-03-01 01:00:00 UTC", "p",
             "1.5", "[]"],
            ["A-1", "Compute Engine", "N1 RAM", "2026-03-01 00:00:00 UTC", "2026-03-01 01:00:00 UTC", "p",
             "0.25", '[{"name": "free", "amount": -0.05}]']]
AZURE_HEADER = ["Date", "MeterCategory", "MeterId", "SubscriptionId", "ResourceId", "Quantity", "CostInBillingCurrency"]
AZURE_ROWS = [["03/01/2026", "Virtual Machines", "m-1", "s-1", "/vm/1", "24", "4.80"],
              ["03/02/2026", "Storage", "m-2", "s-1", "/sa/1", "100", "1.84"]]
NO_CURRENCY = [  # family module, header, rows, cost column, credit amounts (GCP)
    (billing_focus, FOCUS_HEADER, FOCUS_ROWS, "BilledCost"),
    (billing_aws, CUR2_HEADER, CUR2_ROWS, "line_item_unblended_cost"),
    (billing_gcp, GCP_HEADER, GCP_ROWS, "cost"),
    (billing_azure, AZURE_HEADER, AZURE_ROWS, "CostInBillingCurrency"),
]


@pytest.mark.parametrize("module, header, rows, cost", NO_CURRENCY, ids=lambda v: getattr(v, "KIND", None))
def test_a_bill_without_a_currency_column_is_refused_once_then_loads_with_the_setting(
        warehouse, tmp_path, settings, module, header, rows, cost):
    path = write_csv(tmp_path / f"{module.KIND}.csv", header, rows)
    refused = loader.ingest_file(path)
    assert refused.kind == module.KIND and refused.status == "failed"
    assert "no currency column" in refused.error and "[billing] default_currency" in refused.error
    assert (refused.rows_loaded, refused.rows_rejected, refused.rejects) == (0, 0, [])
    assert fetch("SELECT count(*) AS n FROM rejects") == [{"n": 0}]

    settings(default_currency="eur")
    summary = loader.ingest_file(path)
    costs = [row[header.index(cost)] for row in rows]
    if module is billing_gcp:  # each credit is a line of its own
        costs += ["-0.05"]
    assert (summary.status, summary.rows_loaded, summary.rows_rejected) == ("loaded", len(rows), 0)
    assert summary.totals["billed_cost_total"] == {"EUR": total(costs)}
    assert summary.totals["lines"] == len(costs)
    assert [w for w in summary.warnings if "default_currency" in w] == [
        "the file has no currency column: every line was read as EUR, from the [billing] default_currency setting"]
    assert fetch("SELECT DISTINCT billing_currency AS c FROM billing_lines") == [{"c": "EUR"}]
    assert_both_readers_agree(module, path)


def test_a_parquet_bill_without_a_currency_column_loads_with_the_setting(warehouse, tmp_path, settings):
    path = tmp_path / "focus.parquet"
    pq.write_table(pa.table({name: [row[i] for row in FOCUS_ROWS] for i, name in enumerate(FOCUS_HEADER)}), path)
    assert "[billing] default_currency" in loader.ingest_file(path).error
    settings(default_currency="JPY")
    summary = loader.ingest_file(path)
    assert summary.totals["billed_cost_total"] == {"JPY": total([r[0] for r in FOCUS_ROWS])}
    assert any("read as JPY" in w for w in summary.warnings)
    assert_both_readers_agree(billing_focus, path)


def test_lines_read_one_by_one_take_the_setting_too(warehouse, tmp_path, settings):
    """A tag cell written as a Python literal goes through billing.py's build: same currency."""
    settings(default_currency="EUR")
    header = ["BilledCost", "ChargePeriodStart", "ChargeCategory", "ProviderName", "Tags"]
    rows = [["1.5", "2026-01-01T00:00:00Z", "Usage", "Acme", "{'team': 'ml'}"],
            ["2.5", "2026-01-01T00:00:00Z", "Usage", "Acme", '{"team": "ops"}']]
    path = write_csv(tmp_path / "focus.csv", header, rows)
    summary = loader.ingest_file(path)
    assert summary.totals["billed_cost_total"] == {"EUR": total([r[0] for r in rows])}
    assert fetch("SELECT billing_currency, tags FROM billing_lines ORDER BY source_line") == [
        {"billing_currency": "EUR", "tags": {"team": "ml"}}, {"billing_currency": "EUR", "tags": {"team": "ops"}}]
    assert_both_readers_agree(billing_focus, path)


def test_an_empty_currency_in_a_file_with_the_column_stays_a_reject(warehouse, tmp_path, settings):
    settings(default_currency="EUR")
    header = FOCUS_HEADER + ["BillingCurrency"]
    rows = [FOCUS_ROWS[0] + ["USD"], FOCUS_ROWS[1] + [""], FOCUS_ROWS[2] + ["USD"]]
    path = write_csv(tmp_path / "focus.csv", header, rows)
    summary = loader.ingest_file(path)
    assert summary.rejects == [{"line": 3, "reason": "no BillingCurrency"}]
    assert summary.totals["billed_cost_total"] == {"USD": total([rows[0][0], rows[2][0]])}
    assert not summary.warnings
    assert_both_readers_agree(billing_focus, path)


def test_a_bad_default_currency_is_refused_with_the_setting_named(tmp_path, settings):
    from ingest.settings import config

    settings(default_currency="dollars")
    with pytest.raises(config.ConfigError, match="billing.default_currency"):
        config.load()


# --- 2. rows that lack the header's trailing columns -----------------------------------------------

def test_the_koku_cur_whose_rows_lack_the_last_column_loads_with_one_warning(warehouse, formats_dir):
    path = formats_dir / "aws_cur" / "koku_test_cur.csv"
    header = next(csv.reader(io.StringIO(path.read_bytes().decode("utf-8-sig"), newline="")))
    rows = data_rows(path)
    assert {len(fields) for _, fields in rows} == {len(header) - 1}  # the quirk itself
    cost, currency = header.index("lineItem/UnblendedCost"), header.index("lineItem/CurrencyCode")
    expected: dict[str, list[str]] = defaultdict(list)
    for _, fields in rows:
        expected[fields[currency]].append(fields[cost])
    summary = loader.ingest_file(path)
    assert (summary.status, summary.rows_loaded, summary.rows_rejected) == ("loaded", len(rows), 0)
    assert summary.totals["billed_cost_total"] == {c: total(v) for c, v in expected.items()}
    assert summary.warnings == [
        f"the header names {len(header)} columns but every row has {len(header) - 1} fields: the trailing "
        f"column {header[-1]} is absent from the rows and read as empty"]
    # the absent cost category is no tag
    assert fetch("SELECT count(*) AS n FROM billing_lines WHERE list_contains(map_keys(tags), "
                 "'cost_category:CostCenter')") == [{"n": 0}]
    assert_both_readers_agree(billing_aws, path)


AZURE_LOWER = ["date", "metercategory", "meterid", "subscriptionid", "resourcegroup", "resourceid", "quantity",
               "costinbillingcurrency", "billingcurrency", "tags", "resourcelocation"]


def azure_rows() -> list[list[str]]:
    return [[f"2026-03-{day:02d}", "Virtual Machines", "m-1", "s-1", "rg", f"/vm/{day}", "24",
             f"{day}.{day:02d}", "USD" if day % 3 else "EUR", '{"team": "ml"}'] for day in range(1, 8)]


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_an_azure_export_whose_rows_lack_the_location_loads_with_one_warning(warehouse, tmp_path, newline):
    rows = azure_rows()
    path = write_csv(tmp_path / "azure.csv", AZURE_LOWER, rows, newline)
    summary = loader.ingest_file(path)
    assert (summary.kind, summary.status, summary.rows_loaded, summary.rows_rejected) == (
        "billing_azure", "loaded", len(rows), 0)
    expected: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        expected[row[8]].append(row[7])
    assert summary.totals["billed_cost_total"] == {c: total(v) for c, v in expected.items()}
    assert summary.warnings == ["the header names 11 columns but every row has 10 fields: the trailing column "
                                "resourcelocation is absent from the rows and read as empty"]
    assert fetch("SELECT count(*) AS n FROM billing_lines WHERE region_id IS NULL") == [{"n": len(rows)}]
    assert_both_readers_agree(billing_azure, path)


def test_rows_whose_counts_differ_from_the_rest_stay_rejected_one_by_one(warehouse, tmp_path):
    rows = azure_rows()
    rows[2] = rows[2][:9]  # one field fewer than the others
    rows[4] = rows[4] + ["westeurope", "more"]  # two more
    path = write_csv(tmp_path / "azure.csv", AZURE_LOWER, rows)
    summary = loader.ingest_file(path)
    assert summary.rejects == [
        {"line": 4, "reason": "has 9 fields, the other rows have 10 (the header has 11)"},
        {"line": 6, "reason": "has 12 fields, the other rows have 10 (the header has 11)"}]
    kept = [row for i, row in enumerate(rows) if i not in (2, 4)]
    assert summary.totals["billed_cost_total"] == {
        c: total([r[7] for r in kept if r[8] == c]) for c in {r[8] for r in kept}}
    assert_both_readers_agree(billing_azure, path)


def test_rows_that_lack_a_money_column_are_still_refused(warehouse, tmp_path):
    """The trailing column the rows lack is the currency: nothing is filled, every row refused."""
    header = AZURE_LOWER[:8] + ["resourcelocation", "billingcurrency"]
    rows = [row[:8] + ["westeurope"] for row in azure_rows()]
    path = write_csv(tmp_path / "azure.csv", header, rows)
    summary = loader.ingest_file(path)
    assert summary.rows_loaded == 0 and summary.rows_rejected == len(rows)
    assert {r["reason"] for r in summary.rejects} == {"has 9 fields, the header has 10"}
    assert not summary.warnings
    assert_both_readers_agree(billing_azure, path)


def test_rows_of_the_headers_count_keep_the_file_read_as_before(warehouse, tmp_path):
    """A row as wide as the header loads today: it still does, and the short rows stay refused."""
    rows = azure_rows()
    rows[3] = rows[3] + ["westeurope"]
    path = write_csv(tmp_path / "azure.csv", AZURE_LOWER, rows)
    summary = loader.ingest_file(path)
    assert (summary.rows_loaded, summary.rows_rejected, summary.warnings) == (1, len(rows) - 1, [])
    assert {r["reason"] for r in summary.rejects} == {"has 10 fields, the header has 11"}
    assert summary.totals["billed_cost_total"] == {rows[3][8]: total([rows[3][7]])}
    assert_both_readers_agree(billing_azure, path)


def test_a_file_whose_rows_have_no_common_count_is_read_as_before(warehouse, tmp_path):
    rows = azure_rows()[:4]
    rows[0], rows[1] = rows[0][:9], rows[1][:9]  # two of four: no majority
    path = write_csv(tmp_path / "azure.csv", AZURE_LOWER, rows)
    summary = loader.ingest_file(path)
    assert summary.rows_rejected == 4 and not summary.warnings
    assert {r["reason"] for r in summary.rejects} == {"has 9 fields, the header has 11",
                                                      "has 10 fields, the header has 11"}


# --- 3. FOCUS files as the specification writes its examples ---------------------------------------

SPEC_HEADER = ["BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart", "ChargePeriodEnd", "ChargeCategory",
               "ChargeFrequency", "PricingCategory", "ResourceId", "ListCost", "x_CommitmentDiscountUnitPrice",
               "BilledCost", "EffectiveCost", "ConsumedQuantity", "ConsumedUnit", "SkuId", "SkuPriceid",
               "CommitmentDiscountStatus", "CommitmentDiscountStauts"]
SPEC_ROWS = [
    ["2023-01-01T00:00:00Z", "2023-02-01T00:00:00Z", "2023-01-01T00:00:00Z", "2023-01-01T01:00:00Z", "Purchase",
     "Recurring", "Standard", "<my-commitment-discount-id>", "3.00", "1.50", "1.50", "0.00", "null", "null",
     "VM_LARGE", "VM_LARGE_PURCHASE", "null", "NULL"],
    ["2023-01-01T00:00:00Z", "2023-02-01T00:00:00Z", "2023-01-01T00:00:00Z", "2023-01-01T01:00:00Z", "Usage",
     "Usage-Based", "Committed", "<my-large-vm-id>", "3.00", "1.50", "0.00", "1.50", "1.00", "Hour",
     "VM_LARGE", "VM_LARGE_HOUR", "Used", ""],
    ["2023-01-01T00:00:00Z", "2023-02-01T00:00:00Z", "2023-01-01T00:00:00Z", "2023-01-01T01:00:00Z", "Usage",
     "Usage-Based", "Standard", "<my-medium-vm-id>", "2.00", "null", "2.00", "2.00", "1.00", "Hour",
     "VM_MEDIUM", "VM_MEDIUM_HOUR", "null", "null"]]


def test_a_focus_example_as_the_spec_writes_it_is_recognised_and_loads(warehouse, tmp_path, settings):
    """CRLF, a blank line after every row, lowercase null, <placeholder> ids, a misspelled column
    beside the right one, an x_ column; and, as in the spec's examples, no ProviderName and no
    BillingCurrency: refused once naming both settings, loaded with them."""
    path = write_csv(tmp_path / "example.csv", SPEC_HEADER, SPEC_ROWS, "\r\n", blank_between=True)
    refused = loader.ingest_file(path)
    assert refused.kind == "billing_focus" and refused.status == "failed"
    assert "[billing] default_currency and [billing] default_provider" in refused.error

    settings(default_currency="USD", default_provider="Example Cloud")
    summary = loader.ingest_file(path)
    rows = data_rows(path)
    assert [line for line, _ in rows] == [2, 4, 6]  # a blank line after each
    billed, effective = SPEC_HEADER.index("BilledCost"), SPEC_HEADER.index("EffectiveCost")
    assert (summary.status, summary.rows_loaded, summary.rows_rejected) == ("loaded", 3, 0)
    assert summary.totals["billed_cost_total"] == {"USD": total([f[billed] for _, f in rows])}
    assert summary.totals["effective_cost_total"] == {"USD": total([f[effective] for _, f in rows])}
    assert len(summary.warnings) == 2
    stored = fetch("SELECT source_line, provider, resource_id, consumed_quantity, consumed_unit "
                   "FROM billing_lines ORDER BY source_line")
    assert stored == [
        {"source_line": 2, "provider": "Example Cloud", "resource_id": "<my-commitment-discount-id>",
         "consumed_quantity": None, "consumed_unit": None},
        {"source_line": 4, "provider": "Example Cloud", "resource_id": "<my-large-vm-id>",
         "consumed_quantity": 1.0, "consumed_unit": "Hour"},
        {"source_line": 6, "provider": "Example Cloud", "resource_id": "<my-medium-vm-id>",
         "consumed_quantity": 1.0, "consumed_unit": "Hour"}]
    assert_both_readers_agree(billing_focus, path)


def test_a_focus_example_with_its_provider_and_currency_loads_without_settings(warehouse, tmp_path):
    header = SPEC_HEADER + ["ProviderName", "BillingCurrency"]
    rows = [row + ["Example Cloud", "USD"] for row in SPEC_ROWS]
    path = write_csv(tmp_path / "example.csv", header, rows, "\r\n", blank_between=True)
    path.write_bytes(b"\r\n" + path.read_bytes())  # a blank line before the header too
    assert loader.detect("example.csv", path.read_text()) is billing_focus
    summary = loader.ingest_file(path)
    assert (summary.status, summary.rows_loaded, summary.rows_rejected, summary.warnings) == ("loaded", 3, 0, [])
    assert summary.totals["billed_cost_total"] == {"USD": total([r[header.index("BilledCost")] for r in rows])}
    assert fetch("SELECT count(*) AS n FROM billing_lines WHERE 'null' IN (consumed_unit, resource_id)") == [{"n": 0}]
    assert_both_readers_agree(billing_focus, path)


# --- 4. a CUR 2.0 export flattened to snake_case columns -------------------------------------------

def test_a_flattened_cur2_export_loads_as_aws(warehouse, tmp_path):
    header = CUR2_HEADER + ["line_item_currency_code"]
    rows = [row + ["USD"] for row in CUR2_ROWS]
    path = write_csv(tmp_path / "cur2.csv", header, rows)
    summary = loader.ingest_file(path)
    assert (summary.kind, summary.status, summary.rows_loaded, summary.rows_rejected) == (
        "billing_aws", "loaded", 2, 0)
    assert summary.totals["billed_cost_total"] == {"USD": total([r[header.index("line_item_unblended_cost")]
                                                                 for r in rows])}
    stored = fetch("SELECT service_name, instance_type, region_id, charge_category, list_cost "
                   "FROM billing_lines ORDER BY source_line")
    assert stored[0] == {"service_name": "Amazon Elastic Compute Cloud", "instance_type": "p3.2xlarge",
                         "region_id": "us-east-1", "charge_category": "usage", "list_cost": Decimal("3.06")}
    assert stored[1]["charge_category"] == "tax"
    assert_both_readers_agree(billing_aws, path)


# --- 5. GCP's deprecated file export ------------------------------------------------------------

GCP_FILE_HEADER = ["Account ID", "Line Item", "Start Time", "End Time", "Project", "Measurement1",
                   "Measurement1 Total Consumption", "Measurement1 Units", "Credit1", "Credit1 Amount",
                   "Credit1 Currency", "Cost", "Currency", "Project Number", "Project ID", "Project Name",
                   "Project Labels", "Description"]


def gcp_file_row(item: str, day: int, used: str, unit: str, credit: str, cost: str, currency: str = "USD",
                 credit_currency: str = "USD") -> list[str]:
    sku = f"com.google.cloud/services/{item}"
    return ["0115A1-AAAAAA-BBBBBB", sku, f"2017-06-{day:02d}T00:00:00-07:00", f"2017-06-{day + 1:02d}T00:00:00-07:00",
            "123456789012", sku, used, unit, "com.google.cloud/services/compute-engine/FreeTrial" if credit else "",
            credit, credit_currency if credit else "", cost, currency, "123456789012", "my-project", "My Project", "",
            f"{item.split('/')[1]} in Americas"]


def test_the_deprecated_gcp_file_export_loads_with_its_credits_as_lines(warehouse, tmp_path):
    rows = [gcp_file_row("compute-engine/VmimageN1Standard_1", 1, "86400", "seconds", "-1.14", "1.14"),
            gcp_file_row("cloud-storage/StorageMultiRegionalUsGbsec", 1, "1234567", "byte-seconds", "", "0.000321"),
            gcp_file_row("compute-engine/VmimageN1Standard_1", 2, "3600", "seconds", "-0.05", "0.0475"),
            gcp_file_row("compute-engine/VmimageN1Standard_1", 3, "3600", "seconds", "-0.05", "0.0475",
                         credit_currency="EUR")]  # a credit in another currency: never added to USD
    path = write_csv(tmp_path / "gcp-billing-2017-06-01.csv", GCP_FILE_HEADER, rows)
    assert loader.detect(path.name, path.read_text()) is billing_gcp
    summary = loader.ingest_file(path)
    kept = rows[:3]
    cost, credit = GCP_FILE_HEADER.index("Cost"), GCP_FILE_HEADER.index("Credit1 Amount")
    assert (summary.kind, summary.rows_loaded, summary.rows_rejected) == ("billing_gcp", 3, 1)
    assert summary.rejects == [{"line": 5, "reason": "Credit1 Currency EUR is not the line's USD"}]
    assert summary.totals["billed_cost_total"] == {"USD": total([r[cost] for r in kept] + [r[credit] for r in kept])}
    assert summary.totals["lines"] == 3 + 2  # two credits
    # times carry their offset: 00:00-07:00 is 07:00 UTC
    assert summary.totals["charge_period_min"] == "2017-06-01T07:00:00+00:00"
    stored = fetch("SELECT charge_category, count(*) AS n, sum(billed_cost) AS billed FROM billing_lines "
                   "GROUP BY 1 ORDER BY 1")
    assert stored == [{"charge_category": "credit", "n": 2, "billed": Decimal("-1.19")},
                      {"charge_category": "usage", "n": 3, "billed": sum(Decimal(r[cost]) for r in kept)}]
    assert {r["service_name"] for r in fetch("SELECT service_name FROM billing_lines")} == {
        "compute-engine", "cloud-storage"}
    assert_both_readers_agree(billing_gcp, path)
