"""AWS Detailed Billing Reports (DBR, the CSV AWS wrote before Cost and Usage Reports, retired in
2019), with or without resources and tags, plain or .gz, into `billing_lines`.

RecordType LineItem is usage and Rounding an adjustment; InvoiceTotal, AccountTotal and
StatementTotal lines add up the lines above them and are refused with that reason, never loaded
as costs. The billed and the effective cost are `UnBlendedCost` (or `Cost` in reports without
blended rates: a DBR has no amortised cost); amounts are USD. `user:<key>` columns are tags
named `<key>`; `aws:` tags keep their prefix. The line id is `RecordId`. AvailabilityZone is not
kept (billing_lines has a region, not a zone); ReservedInstance Y is commitment pricing.

The format is the definition below; ingest/formats/billing/bill_definition.py reads it
(docs/formats/bills.md).
"""
from __future__ import annotations

from ingest.formats.billing import bill_family
from ingest.formats.billing.bill_definition import Bill
from ingest.formats.billing.bill_family import normalized
from ingest.formats.billing.bill_steps import (Amount, Category, Constant, InstanceType, Moment, Pricing,
                                               Quantity, Refuse, Same, TagColumns, Text)

KIND = "billing_aws_dbr"
TABLES = (bill_family.TABLE,)
BINARY = False


def normalize(name: str) -> str:
    """`user:team` -> `tag:team`, `aws:createdBy` -> `tag:aws:createdBy`, others as FOCUS names (usagestartdate)."""
    name = name.strip()
    if name.startswith(("user:", "aws:")):
        return "tag:" + name.removeprefix("user:")
    return normalized(name)


DBR = Bill(
    kind=KIND, label="AWS DBR", normalize=normalize,
    detect=(("recordtype",), ("recordid",), ("usagestartdate",), ("unblendedcost", "cost"), ("payeraccountid",)),
    steps=(
        Text("charge_category_raw", ("recordtype",), required=True),
        Refuse("charge_category_raw", frozenset({"invoicetotal", "accounttotal", "statementtotal"}),
               "RecordType {value} is a total of other lines, not a cost: not loaded"),
        Text("line_key", ("recordid",)),
        Constant("provider", "AWS"),
        Text("billing_account_id", ("payeraccountid",)),
        Text("sub_account_id", ("linkedaccountid",)),
        Amount("billed_cost", ("unblendedcost", "cost"), required=True),
        Same("effective_cost", of="billed_cost"),
        Constant("billing_currency", "USD"),
        Moment("charge_period_start", ("usagestartdate",), required=True),
        Moment("charge_period_end", ("usageenddate",)),
        Category("charge_category", of="charge_category_raw", label="RecordType",
                 table={"lineitem": "usage", "payerlineitem": "usage", "linkedlineitem": "usage",
                        "rounding": "adjustment"}),
        Text("charge_description", ("itemdescription",)),
        Text("service_name", ("productname",)),
        Text("resource_id", ("resourceid",)),
        Text("_usage_type", ("usagetype",)),
        InstanceType("instance_type", of=("_usage_type", "charge_description")),
        Quantity("consumed_quantity", ("usagequantity",)),
        Text("pricing_category_raw", ("reservedinstance",)),
        Pricing("pricing_category", of="pricing_category_raw", table={"y": "commitment"}),
        TagColumns("tags", prefix="tag:"),
        Same("source_line_id", of="line_key"),
        Constant("source_format", "aws_dbr"),
    ),
)

# The parser contract (ingest/engine/contract.py), as every bill offers it (bill_definition.Bill).
sniff, sniff_bytes, parse, parse_bytes, stage, totals = DBR.contract()
