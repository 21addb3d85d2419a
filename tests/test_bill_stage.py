"""The columnar bill staging (ingest/formats/billing/bill_stage.py) against today's row-by-row parsers: for
every bill file we have, stage() must stage the same rows (keys included), the same rejects
(line, reason and raw text), the same count of accepted records and the same --json totals as
parse() gives; plus the cases where the strict SQL readers deliberately differ.
"""
from __future__ import annotations

import csv

import gzip
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ingest.formats.billing import billing_aws, billing_azure, billing_focus, billing_gcp
from tests.bill_equivalence import parsed, staged
from tests.test_billing import cur2_parquet
from tests import corpus
from tests.conftest import SAMPLE_DIR

CASES = Path(__file__).parent / "cases" / "billing"
UTC = timezone.utc
FAMILIES = {"focus": billing_focus, "aws": billing_aws, "azure": billing_azure, "gcp": billing_gcp}
SHARED = {"focus": "focus", "aws_cur": "aws", "azure": "azure", "gcp_billing": "gcp"}


def bill_files() -> list[tuple[str, Path]]:
    """(family, path) of every bill file in the repository and beside it."""
    found = [(name.split("_")[0], path) for path in sorted(CASES.iterdir())
             for name in [path.name] if name.split("_")[0] in FAMILIES]
    found += [("focus", path) for path in sorted((SAMPLE_DIR / "billing").glob("focus_*.csv.gz"))]
    for folder, family in SHARED.items():
        found += [(family, path) for path in corpus.files(folder)]  # [ABSENT] when it cannot be had
    return found


def assert_same(module, path: Path) -> dict:
    mine, today = staged(module, path, "bill"), parsed(module, path, "bill")
    assert mine["rejects"] == today["rejects"]
    assert (mine["accepted"], mine["totals"]) == (today["accepted"], today["totals"])
    assert len(mine["rows"]) == len(today["rows"])
    for new, old in zip(mine["rows"], today["rows"]):
        assert new == old
    return mine


@pytest.mark.parametrize("family, path", bill_files(), ids=lambda v: getattr(v, "name", v))
def test_stage_equals_parse(family, path):
    assert_same(FAMILIES[family], corpus.present(path))


@pytest.mark.parametrize("family, path", [f for f in bill_files() if f[1].suffix == ".csv" or f[1] == corpus.ABSENT],
                         ids=lambda v: getattr(v, "name", v))
def test_a_crlf_gzip_copy_stages_the_same(family, path, tmp_path):
    corpus.present(path)
    copy = tmp_path / (path.name + ".gz")
    copy.write_bytes(gzip.compress(path.read_bytes().replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")))
    assert_same(FAMILIES[family], copy)


def focus_parquet(path: Path) -> Path:
    table = pa.table({
        "BilledCost": pa.array([Decimal("7.25"), Decimal("-1.5"), None], pa.decimal128(20, 10)),
        "BillingCurrency": ["JPY", "JPY", "JPY"],
        "ChargePeriodStart": pa.array([datetime(2026, 8, 1)] * 3, pa.timestamp("us")),
        "ChargePeriodEnd": pa.array([datetime(2026, 8, 2, tzinfo=UTC)] * 3, pa.timestamp("us", tz="UTC")),
        "ChargeCategory": ["Purchase", "Credit", "Usage"], "ProviderName": ["Oracle"] * 3,
        "PricingCategory": [None, "Standard", None], "x_LineItemId": ["p-1", None, "p-3"],
        "ConsumedQuantity": pa.array([1.5, None, 2.0], pa.float64()),
        "Tags": pa.array([[("team", "genai")], [], None], pa.map_(pa.string(), pa.string())),
    })
    pq.write_table(table, path)
    return path


def test_focus_parquet_stages_like_parse(tmp_path):
    mine = assert_same(billing_focus, focus_parquet(tmp_path / "focus.parquet"))
    assert mine["rejects"] == [(3, "no BilledCost", "")]
    packed = tmp_path / "focus.parquet.gz"
    packed.write_bytes(gzip.compress((tmp_path / "focus.parquet").read_bytes()))
    assert_same(billing_focus, packed)


def test_parquet_text_is_trimmed_and_blank_is_null(tmp_path):
    """Parquet text is stored stripped of whitespace and blank as NULL (as CSV fields are; only
    values with whitespace at an edge go through trim): checked against Python's strip. The
    reasons quote no text of a binary file."""
    names = [" EC2 ", "EC2\t", "  ", "", "\t\n", "E C2", "EC2", None, "\x0bEC2", "é ", "\u00a0x"]
    n = len(names)
    path = tmp_path / "focus.parquet"
    pq.write_table(pa.table({
        "BilledCost": [str(i) for i in range(n - 1)] + ["x"], "BillingCurrency": ["USD"] * n,
        "ChargePeriodStart": ["2026-08-01T00:00:00Z"] * n, "ChargeCategory": ["Usage"] * n,
        "ProviderName": ["AWS"] * n, "ServiceName": names, "x_LineItemId": [f"id-{i}" for i in range(n)],
    }), path)
    mine = staged(billing_focus, path, "bill")
    by_id = {r["source_line_id"]: r["service_name"] for r in mine["rows"]}
    assert by_id == {f"id-{i}": (v.strip(" \t\r\n\x0b\x0c") or None) if v is not None else None
                     for i, v in enumerate(names[:-1])}
    assert mine["rejects"] == [(n, "BilledCost must be an amount, got 'x'", "")]


def test_cur2_parquet_maps_stage_like_parse(tmp_path):
    mine = assert_same(billing_aws, cur2_parquet(tmp_path / "cur2.parquet"))
    usage = next(r for r in mine["rows"] if r["source_line_id"] == "pq-1")
    assert usage["tags"] == {"run_id": "run-pq", "team": "genai", "cost_category:Team": "genai"}
    assert (usage["instance_type"], usage["service_name"]) == ("g6.12xlarge", "Amazon Elastic Compute Cloud")


def test_cur_tag_columns_and_maps_stage_like_parse(tmp_path):
    """Flat tag columns beside CUR 2.0 JSON maps: a name given twice, a map that is no JSON."""
    path = tmp_path / "cur.csv"
    path.write_text(
        "identity/LineItemId,lineItem/LineItemType,lineItem/UsageStartDate,lineItem/CurrencyCode,"
        "lineItem/UnblendedCost,resourceTags/user:team,product,resource_tags,cost_category,"
        "savingsPlan/SavingsPlanEffectiveCost,reservation/EffectiveCost\n"
        "a,Usage,2026-08-01T00:00:00Z,USD,1,genai,\"{\"\"region\"\": \"\"us-east-1\"\"}\",\"{\"\"user_x\"\": \"\"1\"\"}\",,,\n"
        "b,Usage,2026-08-01T00:00:00Z,USD,1,genai,,\"{\"\"user_team\"\": \"\"vision\"\"}\",,,\n"
        "c,Usage,2026-08-01T00:00:00Z,USD,1,,\"{'instance_type': 'p5.48xlarge'}\",,\"{\"\"Team\"\": \"\"\"\"}\",,\n"
        "d,SavingsPlanCoveredUsage,2026-08-01T00:00:00Z,USD,0,,,,,abc,\n"
        "e,DiscountedUsage,2026-08-01T00:00:00Z,USD,0,,,,,abc,2.5\n"
        "f,SavingsPlanNegation,2026-08-01T00:00:00Z,USD,-3,,,,,,\n")
    mine = assert_same(billing_aws, path)
    assert [(line, reason) for line, reason, _ in mine["rejects"]] == [
        (5, "savingsPlan/SavingsPlanEffectiveCost must be an amount, got 'abc'")]


def test_azure_additional_info_and_identical_lines_stage_like_parse(tmp_path):
    """AdditionalInfo with numbers, as a Python literal and broken; two identical lines (both kept,
    keyed #0 and #1 by content)."""
    path = tmp_path / "azure.csv"
    line = "acct,sub-9,2024-02-01,Virtual Machines,m-9,1,0.5,USD,/r,,Usage,"
    path.write_text(
        "BillingAccountId,SubscriptionId,Date,MeterCategory,MeterId,Quantity,Cost,BillingCurrency,"
        "ResourceId,Tags,ChargeType,AdditionalInfo\n" + line + "\n" + line + "\n"
        + line + "\"{\"\"ServiceType\"\": \"\"Standard_NC6s_v3\"\", \"\"VCPUs\"\": 6}\"\n"
        + line + "\"{'VMSize': 'Standard_D2s_v3'}\"\n" + line + "not json\n"
        + "acct,sub-9,03/15/2024,Storage,m-7,1,2.5,EUR,/d,\"\"\"team\"\": \"\"genai\"\"\",Refund,\n")
    mine = assert_same(billing_azure, path)
    assert [(line, reason) for line, reason, _ in mine["rejects"]] == [
        (6, "AdditionalInfo is neither JSON nor a Python literal: 'not json'")]
    assert sorted(r["line_key"][-2:] for r in mine["rows"] if r["source_line"] in (2, 3)) == ["#0", "#1"]


def test_gcp_credits_and_months_stage_like_parse(tmp_path):
    """JSON credits (each a line), a Python-literal credit, a bad credit amount, a bad month."""
    path = tmp_path / "gcp.csv"
    head = "billing_account_id,service.description,sku.description,usage_start_time,cost,currency,credits,invoice.month,labels\n"
    row = "b,Compute Engine,N1 Predefined Instance Core running in Americas,2026-08-01 00:00:00 UTC,0.35,USD,{},{},{}\n"
    path.write_text(head
                    + row.format('"[{""name"": ""SUD"", ""amount"": -0.07, ""type"": ""SUSTAINED_USAGE_DISCOUNT""}, '
                                 '{""full_name"": ""Promo"", ""amount"": -0.28}]"', "202608",
                                 '"[{""key"": ""run_id"", ""value"": ""run-g""}]"')
                    + row.format("\"[{'name': 'FreeTrial', 'amount': -1e-05, 'full_name': None}]\"", "202608", "")
                    + row.format('"[{""name"": ""x"", ""amount"": ""abc""}]"', "202608", "")
                    + row.format('"[]"', "2026-13", "")
                    + row.format('"[{""name"": ""SUD"", ""amount"": -0.07}, {""name"": ""SUD"", ""amount"": -0.07}]"',
                                 "202609", ""))
    mine = assert_same(billing_gcp, path)
    assert [(line, reason) for line, reason, _ in mine["rejects"]] == [
        (4, "credit 1 amount must be an amount, got 'abc'"), (5, "invoice.month '2026-13' is not a month (YYYYMM)")]
    assert sorted(r["billed_cost"] for r in mine["rows"] if r["source_line"] == 2) == [
        Decimal("-0.28"), Decimal("-0.07"), Decimal("0.35")]


HEADER = "BilledCost,EffectiveCost,BillingCurrency,ChargePeriodStart,ChargeCategory,ProviderName,Tags,x_LineItemId\n"


def test_odd_lines_stage_like_parse(tmp_path):
    """Bad values, a Python-literal tag cell, a repeated line id, blank and quoted lines."""
    path = tmp_path / "odd.csv"
    path.write_text(HEADER + "\n".join([
        "1,1,USD,2026-08-01,Refund,AWS,,a",
        "NULL,1,USD,2026-08-01,Usage,AWS,,b",
        "abc,1,USD,2026-08-01,Usage,AWS,,c",
        "1,1,USD,13/45/26,Usage,AWS,,d",
        "1,1,,2026-08-01,Usage,AWS,,e",
        "1,1,USD,2026-08-01,Usage,NULL,,f",
        "1,1,USD,3/15/2024 13:05 PM,Usage,AWS,,g",
        "1,1,USD,1989-12-31,Usage,AWS,,h",
        "1,x,USD,2026-08-01,Usage,AWS,,i",
        "2,2,USD,2026-08-01,Usage,AWS,\"{'team': 'a'}\",j",
        "3,3,USD,2026-08-01,Usage,AWS,not tags,k",
        "   ",
        "4,4,USD,2026-08-01,Usage,AWS,\"{\"\"a\"\": 1, \"\"b\"\": true}\",l",
        "5,5,USD,2026-08-01,Usage,AWS,,l",
        "6,6,EUR,\"2026-08-01\n\",Usage,AWS,,m",
        "7,7,EUR,2026-08-01,Usage,AWS,\"\"\"x\"\": \"\"y\"\"\",",
        "7,7,EUR,2026-08-01,Usage,AWS,\"\"\"x\"\": \"\"y\"\"\",",
        "123456789012345678901234567,1,USD,2026-08-01,Usage,AWS,,n",
    ]) + "\n")
    mine = assert_same(billing_focus, path)
    assert [line for line, *_ in mine["rejects"]] == [2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 20]


def test_a_record_of_one_quoted_blank_field_is_skipped_as_a_blank_line(tmp_path):
    """A record that is only a quoted newline (or a quoted empty field) is a blank line to both
    readers: no reject, the lines around it load with their own numbers."""
    path = tmp_path / "quoted_blank.csv"
    path.write_text(HEADER + '1,1,USD,2026-08-01,Usage,AWS,,a\n"\n"\n2,2,USD,2026-08-01,Usage,AWS,,b\n""\n'
                    "3,3,USD,2026-08-01,Usage,AWS,,c\n")
    mine = assert_same(billing_focus, path)
    assert mine["rejects"] == []
    assert {r["source_line_id"]: r["source_line"] for r in mine["rows"]} == {"a": 2, "b": 5, "c": 7}


def test_a_line_duckdb_reports_without_its_text_is_rejected_not_lost(tmp_path):
    """A CUR line whose JSON cell lost its opening quote (found by the nightly fuzz): DuckDB reports
    the record with an empty csv_line for one of its errors; it must be refused at its line, never
    skipped as blank, and the line after it still loads."""
    header = ("identity_line_item_id,identity_time_interval,line_item_line_item_type,line_item_usage_start_date,"
              "line_item_usage_end_date,line_item_currency_code,line_item_unblended_cost,product,resource_tags")
    broken = ('c2-1,2026-08-02T00:00:00Z/2026-08-02T01:00:00Z,Usage,2026-08-02T00:00:00Z,2026-08-02T01:00:00Z,USD,'
              '5.672, ""instance_type"": ""g5.12xlarge"", ""sku"": ""SKU9""}","{""user_team"": ""genai""}"')
    good = "c2-2,2026-08-02T00:00:00Z/2026-08-03T00:00:00Z,Usage,2026-08-02T00:00:00Z,2026-08-03T00:00:00Z,USD,-2.5,{},{}"
    path = tmp_path / "cur.csv"
    path.write_text("\n".join([header, broken, good]) + "\n")
    assert len(next(csv.reader([broken]))) > len(header.split(","))  # more fields than the header: not a bill line
    mine = staged(billing_aws, path)
    assert [line for line, _, _ in mine["rejects"]] == [2]
    assert [r["source_line"] for r in mine["rows"]] == [3]


def test_strict_amounts_refuse_what_decimal_accepts(tmp_path):
    """Decimal() reads '1_000' as 1000; the staged reader refuses it (and NaN, inf)."""
    path = tmp_path / "strict.csv"
    path.write_text(HEADER + "1_000,1,USD,2026-08-01,Usage,AWS,,a\nNaN,1,USD,2026-08-01,Usage,AWS,,b\n"
                    "Infinity,1,USD,2026-08-01,Usage,AWS,,c\n2,2,USD,2026-08-01,Usage,AWS,,d\n"
                    "1e400,1,USD,2026-08-01,Usage,AWS,,e\n")
    mine = staged(billing_focus, path)
    assert [(line, reason) for line, reason, _ in mine["rejects"]] == [
        (2, "BilledCost must be an amount, got '1_000'"), (3, "BilledCost must be an amount, got 'NaN'"),
        (4, "BilledCost must be an amount, got 'Infinity'"),
        (6, "BilledCost 1e400 is too large (under 10^15)")]  # Decimal would write 1E+400
    assert mine["totals"]["billed_cost_total"] == {"USD": "2"}


def test_structural_rejects_keep_the_other_lines(tmp_path):
    """A line that is not UTF-8 and an unclosed quote are refused at their lines; the rest loads
    (billing.py refused a whole file for one bad byte, and counted fields of an unclosed quote)."""
    path = tmp_path / "broken.csv"
    path.write_bytes(HEADER.encode() + b"1,1,USD,2026-08-01,Usage,AWS,,a\n2,2,USD,2026-08-01,Usage,Caf\xe9,,b\n"
                     b"3,3,USD,2026-08-01,Usage,AWS,,c\n4,4,USD,2026-08-01,Usage,\"AWS,,d\n")
    mine = staged(billing_focus, path)
    assert [(line, reason) for line, reason, _ in mine["rejects"]] == [
        (3, "not UTF-8 text"), (5, "unreadable CSV: a quoted field is not closed")]
    assert [r["source_line"] for r in sorted(mine["rows"], key=lambda r: r["source_line"])] == [2, 4]


def test_many_lines_with_quoted_newlines_and_blanks_keep_their_numbers(tmp_path):
    """Line numbers over more than one scan block: quoted newlines, blank and CRLF lines."""
    from ingest.engine import line_numbers

    rows, expected, line = [], {}, 2
    for number in range(3000):
        text = "two\nlines" if number % 7 == 0 else "one"
        rows.append(f'{number},{number},USD,2026-08-01,Usage,AWS,,id-{number},"{text}"')
        expected[f"id-{number}"] = line
        line += 2 if number % 7 == 0 else 1
        if number % 11 == 0:
            rows.append("")
            line += 1
    path = tmp_path / "many.csv"
    path.write_text(HEADER.rstrip("\n") + ",ChargeDescription\n" + "\n".join(rows) + "\n")
    block = line_numbers.BLOCK_BYTES
    line_numbers.BLOCK_BYTES = 4096
    try:
        mine = assert_same(billing_focus, path)
    finally:
        line_numbers.BLOCK_BYTES = block
    assert {r["source_line_id"]: r["source_line"] for r in mine["rows"]} == expected


@pytest.mark.parametrize("module", [billing_aws, billing_focus], ids=["cur", "focus"])
def test_a_bill_read_by_several_threads_keeps_every_line_number(module, tmp_path):
    """A bill big enough for DuckDB to read in parallel (~27 MB): each row keeps its own line
    number and each bad amount is refused at its line (rows once came back in another order)."""
    header = ("identity/LineItemId,lineItem/UnblendedCost,lineItem/CurrencyCode,lineItem/UsageStartDate,"
              "lineItem/LineItemType,lineItem/ProductCode,lineItem/LineItemDescription\n") if module is billing_aws else \
        "Id,BilledCost,BillingCurrency,ChargePeriodStart,ChargeCategory,ProviderName,ChargeDescription\n"
    padding = "x" * 400
    lines, bad = [header], []
    for line in range(2, 60_002):
        amount = "1.5" if line % 9_973 else "12abc"
        if amount != "1.5":
            bad.append(line)
        lines.append(f"id-{line},{amount},USD,2026-08-01T03:00:00Z,Usage,AWS,{padding}\n")
    path = tmp_path / "big.csv"
    path.write_text("".join(lines))
    mine = staged(module, path)
    assert {r["source_line_id"]: r["source_line"] for r in mine["rows"]} == {
        f"id-{line}": line for line in range(2, 60_002) if line not in bad}
    assert [line for line, _, _ in mine["rejects"]] == bad
    assert all(raw.startswith(f"id-{line},12abc,") for line, _, raw in mine["rejects"])


def test_a_bill_with_every_id_loads_its_sql_and_python_lines_into_the_warehouse(warehouse, tmp_path):
    """Where every line has its id and none repeats, the staged billing_lines is a view of the
    converted rows (bill_keys): the merge must still load each line, those SQL converted and the
    one billing.py builds (a Python-literal tag cell), at its physical line (one record spans two
    lines), and not the rejected one. Expected keys and lines are read with the csv module."""
    import duckdb

    from ingest.pipeline import loader

    path = tmp_path / "ids.csv"
    path.write_text(HEADER + "\n".join([
        "1.5,1.5,USD,2026-08-01,Usage,AWS,,a",
        "2,2,USD,2026-08-01,Usage,AWS,\"{'team': 'py'}\",b",
        "abc,1,USD,2026-08-01,Usage,AWS,,c",
        "3,3,USD,\"2026-08-02\n\",Usage,AWS,,d",
        "4,4,USD,2026-08-03,Usage,AWS,\"{\"\"team\"\": \"\"sql\"\"}\",e",
    ]) + "\n")
    expected, line = {}, 2
    with open(path, newline="") as handle:
        for record in csv.DictReader(handle):
            try:
                Decimal(record["BilledCost"])
                expected[f"AWS|id|{record['x_LineItemId']}"] = line
            except ArithmeticError:
                pass
            line += 1 + record["ChargePeriodStart"].count("\n")
    summary = loader.ingest_file(path)
    assert (summary.status, summary.rows_loaded, summary.rows_rejected) == ("loaded", len(expected), 1)
    with duckdb.connect(str(warehouse), read_only=True) as con:
        stored = dict(con.execute("SELECT line_key, source_line FROM billing_lines").fetchall())
        tags = dict(con.execute("SELECT line_key, tags['team'] FROM billing_lines WHERE tags IS NOT NULL").fetchall())
    assert stored == expected
    assert tags == {"AWS|id|b": "py", "AWS|id|e": "sql"}
