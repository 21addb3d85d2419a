"""AWS Detailed Billing Reports (ingest/formats/billing/billing_aws_dbr.py), a bill schema added as
one definition. The real sample is tests/cases/billing/dbr_detailed_with_tags.csv, a copy of
scopely-devops/details tests/unit/data/detailed_with_tags.csv (commit df17d883, a DBR "with
resources and tags" reader's test file); expected figures are computed here from the CSV text."""
from __future__ import annotations

import csv
import dataclasses
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

from ingest.engine.contract import ParseContext
from ingest.engine.staging import Source, open_stage
from ingest.formats.billing import bill_stage, billing_aws_dbr
from ingest.pipeline import loader
from tests.bill_equivalence import parsed, staged

UTC = timezone.utc
CASES = Path(__file__).parent / "cases" / "billing"
SAMPLE = CASES / "dbr_detailed_with_tags.csv"
HEADER = ("InvoiceID,PayerAccountId,LinkedAccountId,RecordType,RecordId,ProductName,UsageType,AvailabilityZone,"
          "ReservedInstance,ItemDescription,UsageStartDate,UsageEndDate,UsageQuantity,BlendedCost,UnBlendedCost,"
          "ResourceId,user:team,aws:createdBy")
# hand-made lines in the DBR's shape: (fields after the header's first three, expected reject reason or None)
LINES = [
    ("LineItem,r1,Amazon EC2,BoxUsage:p3.2xlarge,us-east-1a,Y,Linux reserved,2016-03-01 00:00:00,"
     "2016-03-01 01:00:00,1,3.06,1.25,i-1,genai,user-a", None),
    ("Rounding,r2,,,,,Rounding of blended costs,2016-03-01 00:00:00,,,,-0.000002,,,", None),
    ("InvoiceTotal,,,,,,Total amount for invoice 123,,,,10,10,,,", "RecordType 'InvoiceTotal' is a total of other "
                                                                    "lines, not a cost: not loaded"),
    ("AccountTotal,,,,,,Total for linked account# 2,,,,10,10,,,", "RecordType 'AccountTotal' is a total of other "
                                                                  "lines, not a cost: not loaded"),
    ("StatementTotal,,,,,,Total statement amount,,,,10,10,,,", "RecordType 'StatementTotal' is a total of other "
                                                               "lines, not a cost: not loaded"),
    ("LineItem,r6,Amazon S3,Requests,,N,puts,2016-03-01 00:00:00,,5,1,1_000,,,", "UnBlendedCost must be an amount, "
                                                                                  "got '1_000'"),
    ("LineItem,r7,Amazon S3,Requests,,N,puts,,,5,1,1,,,", "no UsageStartDate"),
    ("Refund,r8,Amazon S3,Requests,,N,puts,2016-03-01,,5,1,1,,,", "RecordType 'Refund' is not a charge category "
     "mlcost knows (adjustment, usage)"),
]


def _csv(path: Path) -> list[dict]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_the_real_sample_loads_every_line_with_its_cost():
    rows = _csv(SAMPLE)
    mine = staged(billing_aws_dbr, SAMPLE, "dbr.csv")
    assert mine == parsed(billing_aws_dbr, SAMPLE, "dbr.csv")  # SQL and the per-record reader agree
    assert mine["rejects"] == [] and mine["accepted"] == len(rows) == 8
    total = sum(Decimal(r["UnBlendedCost"]) for r in rows)
    assert mine["totals"]["billed_cost_total"] == {"USD": format(total.normalize(), "f")}
    assert mine["totals"]["effective_cost_total"] == {"USD": format(total.normalize(), "f")}
    got = {r["source_line_id"]: r for r in mine["rows"]}
    assert set(got) == {r["RecordId"] for r in rows}
    for row in rows:
        line = got[row["RecordId"]]
        assert line["line_key"] == f"AWS|id|{row['RecordId']}"
        assert (line["billed_cost"], line["consumed_quantity"]) == (Decimal(row["UnBlendedCost"]),
                                                                    float(row["UsageQuantity"]))
        assert (line["sub_account_id"], line["service_name"], line["resource_id"]) == (
            row["LinkedAccountId"], row["ProductName"], row["ResourceId"] or None)
        assert line["charge_period_start"] == datetime.strptime(row["UsageStartDate"], "%Y-%m-%d %H:%M:%S"
                                                                ).replace(tzinfo=UTC)
        assert line["instance_type"] == ("m1.small" if "m1.small" in row["ItemDescription"] else None)
        assert (line["charge_category"], line["tags"], line["source_format"]) == ("usage", None, "aws_dbr")


def test_totals_are_refused_as_a_rule_and_lines_read_in_sql(tmp_path):
    path = tmp_path / "dbr.csv"
    path.write_text(HEADER + "\n" + "\n".join(f"Estimated,111,222,{fields}" for fields, _ in LINES) + "\n")
    by_record: list[int] = []

    def spy(record, columns):
        by_record.append(record.line)
        return billing_aws_dbr.DBR.build(record, columns)

    con = open_stage()
    try:
        result = bill_stage.stage(Source.of(path, "dbr.csv"), con, ParseContext("dbr.csv", UTC),
                                  dataclasses.replace(billing_aws_dbr.DBR.family, build=spy), billing_aws_dbr.DBR.plan)
        rejects = con.execute("SELECT line, reason FROM rejects ORDER BY line").fetchall()
    finally:
        con.close()
    assert by_record == []  # every line is plain text: SQL reads them all
    assert rejects == [(n + 2, why) for n, (_, why) in enumerate(LINES) if why]
    assert result.totals["billed_cost_total"] == {"USD": "1.249998"}  # 1.25 - 0.000002: no total added
    mine = staged(billing_aws_dbr, path, "dbr.csv")
    assert mine == parsed(billing_aws_dbr, path, "dbr.csv")
    reserved, rounding = sorted(mine["rows"], key=lambda r: r["source_line_id"])
    assert (reserved["pricing_category"], reserved["instance_type"], reserved["tags"]) == (
        "commitment", "p3.2xlarge", {"team": "genai", "aws:createdBy": "user-a"})
    assert (rounding["charge_category"], rounding["billed_cost"], rounding["pricing_category"]) == (
        "adjustment", Decimal("-0.000002"), None)


def test_detection_keeps_every_family_its_files():
    """A DBR is detected as a DBR, and no other bill of the cases is."""
    for path in sorted(CASES.iterdir()):
        text = path.read_bytes().decode("utf-8-sig")[:loader.SNIFF_CHARS]
        assert (loader.detect(path.name, text).KIND == "billing_aws_dbr") == path.name.startswith("dbr_"), path.name


def test_a_dbr_without_blended_rates_reads_cost(tmp_path):
    path = tmp_path / "dbr.csv"
    path.write_text("InvoiceID,PayerAccountId,LinkedAccountId,RecordType,RecordId,UsageStartDate,Cost\n"
                    "1,2,3,LineItem,a,2015-01-01 00:00:00,0.5\n")
    mine = staged(billing_aws_dbr, path, "dbr.csv")
    assert mine["totals"]["billed_cost_total"] == {"USD": "0.5"} and mine["rejects"] == []
