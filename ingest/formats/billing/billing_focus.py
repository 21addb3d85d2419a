"""FinOps FOCUS 1.0+ bills, CSV (plain or .gz) or Parquet, into `billing_lines`.

Columns are matched by name whatever their case or underscores (`BilledCost`, `billed_cost`);
`x_` custom columns are ignored except `x_LineItemId` (or a plain `Id`), kept as the line id.
The literal text NULL is a null (the FOCUS sample data writes it unquoted), blank lines are
skipped, dates may be ISO-8601 or M/D/YY (US order). PricingCategory Standard, Dynamic and
Committed become on-demand, spot and commitment (Other: none); the raw value is kept.

The format is the definition below; ingest/formats/billing/bill_definition.py reads it
(docs/formats/bills.md).
"""
from __future__ import annotations

from ingest.formats.billing import bill_family
from ingest.formats.billing.bill_definition import Bill
from ingest.formats.billing.bill_family import normalized
from ingest.formats.billing.bill_steps import (Amount, Category, Constant, InstanceType, Moment, Pricing,
                                               Quantity, Same, Tags, Text)

KIND = "billing_focus"
TABLES = (bill_family.TABLE,)
BINARY = True  # also reads Parquet: the loader hands it the bytes (contract.py)

CATEGORIES = {name: name for name in bill_family.CATEGORIES}
PRICING = {"standard": "on-demand", "dynamic": "spot", "committed": "commitment",
           "ondemand": "on-demand", "spot": "spot", "commitment": "commitment"}
PROVIDER = ("providername", "invoiceissuername", "publishername")

FOCUS = Bill(
    kind=KIND, label="FOCUS", normalize=normalized, nulls=frozenset({"NULL", "null", "Null"}),
    detect=(("billedcost",), ("chargeperiodstart",), ("chargecategory",)),
    per_file=(bill_family.FileValue(("billingcurrency",), "default_currency", "currency"),
              bill_family.FileValue(PROVIDER, "default_provider", "provider")),
    money=("effectivecost", "listcost"),
    steps=(
        Text("provider", PROVIDER, required="no ProviderName"),
        Text("charge_category_raw", ("chargecategory",)),
        Text("pricing_category_raw", ("pricingcategory",)),
        Text("line_key", ("xlineitemid", "id")),
        Text("billing_account_id", ("billingaccountid",)),
        Text("sub_account_id", ("subaccountid",)),
        Text("sub_account_name", ("subaccountname",)),
        Amount("billed_cost", ("billedcost",), required=True),
        Amount("effective_cost", ("effectivecost",)),
        Amount("list_cost", ("listcost",)),
        Text("billing_currency", ("billingcurrency",), required=True),
        Moment("charge_period_start", ("chargeperiodstart",), required=True),
        Moment("charge_period_end", ("chargeperiodend",)),
        Moment("billing_period_start", ("billingperiodstart",)),
        Moment("billing_period_end", ("billingperiodend",)),
        Category("charge_category", of="charge_category_raw", table=CATEGORIES, label="ChargeCategory"),
        Text("charge_description", ("chargedescription",)),
        Text("service_name", ("servicename",)),
        Text("sku_id", ("skuid",)),
        Text("resource_id", ("resourceid",)),
        Text("resource_name", ("resourcename",)),
        Text("_price_details", ("skupricedetails",)),
        InstanceType("instance_type", of=("charge_description", "_price_details")),
        Text("region_id", ("regionid", "regionname")),
        Quantity("consumed_quantity", ("consumedquantity",)),
        Text("consumed_unit", ("consumedunit",)),
        Pricing("pricing_category", of="pricing_category_raw", table=PRICING),
        Tags("tags", "tags", label="Tags"),
        Same("source_line_id", of="line_key"),
        Constant("source_format", "focus"),
    ),
)

# The parser contract (ingest/engine/contract.py), as every bill offers it (bill_definition.Bill).
sniff, sniff_bytes, parse, parse_bytes, stage, totals = FOCUS.contract()
