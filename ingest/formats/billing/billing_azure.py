"""Azure Cost Management exports into `billing_lines`: Enterprise Agreement (`Cost`,
`BillingCurrency`), Microsoft Customer Agreement (`CostInBillingCurrency`,
`BillingCurrencyCode`) and legacy pay-as-you-go (`PreTaxCost`, `UsageDateTime`, `InstanceId`),
plain, .gz or Parquet.

Header names match whatever their case (PascalCase, camelCase, lowercase) and, in a localized
export, by the English key in parentheses (`Kosten (Cost)`). A UTF-8 BOM is dropped; dates are
ISO-8601 or MM/DD/YYYY (US order), one day long. `Tags` is a JSON object, with or without its
outer braces (EA writes `"env": "prod","org": "trey"`). ChargeType Usage/Purchase/Refund/
Adjustment/Tax and the unused-commitment types map to FOCUS categories (no ChargeType, as in
the legacy schema: usage); PricingModel OnDemand/Spot/Reservation/SavingsPlan to on-demand/spot/
commitment. Actual-cost exports carry no amortized cost, so the effective cost is the billed
cost. No line id: lines are keyed by content (ingest/formats/billing/billing.py).

The format is the definition below; ingest/formats/billing/bill_definition.py reads it
(docs/formats/bills.md).
"""
from __future__ import annotations

import re

from ingest.formats.billing import bill_family
from ingest.formats.billing.bill_definition import Bill
from ingest.formats.billing.bill_steps import (Amount, Category, Constant, HeaderSays, JsonKey, LowerWhen,
                                               Moment, NextDay, Pricing, Quantity, Same, Tags, Text)

KIND = "billing_azure"
TABLES = (bill_family.TABLE,)
BINARY = True  # also reads Parquet exports: the loader hands it the bytes

COST = ("costinbillingcurrency", "cost", "pretaxcost")
CURRENCY = ("billingcurrency", "billingcurrencycode", "currency")
CATEGORIES = {"usage": "usage", "purchase": "purchase", "refund": "credit", "credit": "credit",
              "adjustment": "adjustment", "roundingadjustment": "adjustment", "tax": "tax",
              "unusedreservation": "usage", "unusedsavingsplan": "usage"}
PRICING = {"ondemand": "on-demand", "spot": "spot", "reservation": "commitment",
           "savingsplan": "commitment"}


def normalize(name: str) -> str:
    """`CostInBillingCurrency`, `costInBillingCurrency` and `Kosten (CostInBillingCurrency)` all
    become costinbillingcurrency."""
    english = re.search(r"\(([^()]+)\)\s*$", name)
    return re.sub(r"[^a-z0-9]", "", (english[1] if english else name).lower())


AZURE = Bill(
    kind=KIND, label="Azure cost export", normalize=normalize,
    detect=(COST, ("metercategory", "meterid"), ("date", "usagedatetime", "usagedate")),
    per_file=(bill_family.FileValue(CURRENCY, "default_currency", "currency"),),
    money=("chargetype",),
    steps=(
        Text("charge_category_raw", ("chargetype",)),
        Text("pricing_category_raw", ("pricingmodel",)),
        Moment("charge_period_start", ("date", "usagedatetime", "usagedate"), required=True),
        Amount("billed_cost", COST, required=True),
        Text("_meter_category", ("metercategory",)),
        # the VM size AdditionalInfo names (ServiceType `Standard_NC6s_v3`)
        JsonKey("_size", "additionalinfo", label="AdditionalInfo", keys=("ServiceType", "VMSize")),
        Constant("provider", "Microsoft"),
        Text("billing_account_id", ("billingaccountid",)),
        Text("sub_account_id", ("subscriptionid", "subscriptionguid")),
        Text("sub_account_name", ("subscriptionname",)),
        Same("effective_cost", of="billed_cost"),  # actual-cost exports carry no amortized cost
        Text("billing_currency", CURRENCY, required=True),
        NextDay("charge_period_end", of="charge_period_start"),
        Moment("billing_period_start", ("billingperiodstartdate",)),
        Moment("billing_period_end", ("billingperiodenddate",)),
        Category("charge_category", of="charge_category_raw", table=CATEGORIES, label="ChargeType", default="Usage"),
        Text("charge_description", ("productname", "product", "metername")),
        Text("service_name", ("metercategory", "servicename", "consumedservice")),
        Text("sku_id", ("meterid", "partnumber")),
        Text("resource_id", ("resourceid", "instanceid")),
        Text("resource_name", ("resourcename",)),
        LowerWhen("instance_type", of="_size", when="_meter_category", equals="virtual machines"),
        Text("region_id", ("resourcelocation",)),
        Quantity("consumed_quantity", ("quantity", "usagequantity")),
        Text("consumed_unit", ("unitofmeasure",)),
        Pricing("pricing_category", of="pricing_category_raw", table=PRICING),
        Tags("tags", "tags", label="Tags"),
        HeaderSays("source_format", (("costinbillingcurrency", "azure_mca"), ("pretaxcost", "azure_legacy")),
                   default="azure_ea"),
    ),
)

# The parser contract (ingest/engine/contract.py), as every bill offers it (bill_definition.Bill).
sniff, sniff_bytes, parse, parse_bytes, stage, totals = AZURE.contract()
