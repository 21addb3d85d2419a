"""AWS Cost and Usage Reports into `billing_lines`: legacy CUR CSV (`lineItem/UnblendedCost`,
`resourceTags/user:<key>`), the Athena/Parquet snake_case variant (`line_item_unblended_cost`,
`resource_tags_user_<key>`) and CUR 2.0 / Data Exports (Parquet, or CSV whose `product`,
`resource_tags` and `cost_category` columns hold JSON maps). Plain, .gz or Parquet.

Legacy names are turned into the snake_case ones (`lineItem/UsageStartDate` ->
`line_item_usage_start_date`), so one mapping serves all three. The billed cost is
`lineItem/UnblendedCost`; the effective cost follows the FOCUS conversion of CUR (reservation
and Savings Plans effective cost for covered usage, 0 for negations and upfront fees, unused
commitment for the recurring fees; NULL when the report lacks the column it needs); the list
cost is `pricing/publicOnDemandCost`. The line id is `identity/LineItemId` +
`identity/TimeInterval` (the id alone repeats across hours). Tags: `user:` keys lose the prefix
(`resourceTags/user:team` -> `team`), AWS keys keep theirs (`aws:createdBy`); cost categories
become tags `cost_category:<name>`.

The format is the definition below; ingest/formats/billing/bill_definition.py reads it
(docs/formats/bills.md).
"""
from __future__ import annotations

import re
from decimal import Decimal

from ingest.formats.billing import bill_family
from ingest.formats.billing.bill_definition import Bill
from ingest.formats.billing.bill_steps import (Amount, Case, Category, Constant, Contains, Difference,
                                               FirstOf, HeaderSays, InstanceType, Joined, Letters, LowerWhen,
                                               MapCell, MapValue, Moment, Pricing, Quantity, Same,
                                               SumOfPresent, TagsFrom, Text)

KIND = "billing_aws"
TABLES = (bill_family.TABLE,)
BINARY = True  # also reads Parquet (Athena-ready CUR, CUR 2.0): the loader hands it the bytes

# lineItem/LineItemType -> FOCUS ChargeCategory. Discounts lower the bill like credits do.
CATEGORIES = {
    "usage": "usage", "discountedusage": "usage", "savingsplancoveredusage": "usage",
    "savingsplannegation": "usage",
    "fee": "purchase", "rifee": "purchase", "savingsplanrecurringfee": "purchase",
    "savingsplanupfrontfee": "purchase",
    "tax": "tax",
    "credit": "credit", "refund": "credit", "bundleddiscount": "credit", "edpdiscount": "credit",
    "privateratediscount": "credit", "discount": "credit", "sppdiscount": "credit",
    "distributordiscount": "credit",
}
PRICING = {"ondemand": "on-demand", "reserved": "commitment", "spot": "spot",
           "savingsplan": "commitment"}
COMMITTED_TYPES = {"discountedusage", "rifee", "savingsplancoveredusage", "savingsplannegation",
                   "savingsplanrecurringfee", "savingsplanupfrontfee"}


def normalize(name: str) -> str:
    """Legacy `group/CamelName` and snake_case names alike as snake_case; tag columns as
    `tag:<key>` and cost-category columns as `cost_category:<name>` (their keys kept as written)."""
    name = name.strip()
    if name.startswith("resourceTags/"):
        key = name.split("/", 1)[1]
        return "tag:" + key.removeprefix("user:")
    if name.startswith("costCategory/"):
        return "cost_category:" + name.split("/", 1)[1]
    if name.startswith("resource_tags_"):
        return "tag:" + name.removeprefix("resource_tags_").removeprefix("user_")
    if name.startswith("cost_category_"):
        return "cost_category:" + name.removeprefix("cost_category_")
    if "/" in name:
        return "_".join(_snake(part) for part in name.split("/"))
    return name.lower()


def _snake(part: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", part).lower()


def _when(*line_types: str) -> tuple[str, frozenset[str]]:
    return ("_line_type", frozenset(line_types))


CUR = Bill(
    kind=KIND, label="AWS CUR", normalize=normalize,
    detect=(("line_item_unblended_cost",), ("line_item_usage_start_date",)),
    per_file=(bill_family.FileValue(("line_item_currency_code",), "default_currency", "currency"),),
    # what the effective and list costs are read from
    money=("line_item_line_item_type", "savings_plan_savings_plan_effective_cost", "reservation_effective_cost",
           "savings_plan_total_commitment_to_date", "savings_plan_used_commitment",
           "reservation_unused_amortized_upfront_fee_for_billing_period", "reservation_unused_recurring_fee",
           "pricing_public_on_demand_cost"),
    steps=(
        Text("charge_category_raw", ("line_item_line_item_type",)),
        Letters("_line_type", of="charge_category_raw"),
        Amount("billed_cost", ("line_item_unblended_cost",), required=True),
        Text("pricing_category_raw", ("pricing_term",)),
        Text("_usage_type", ("line_item_usage_type",)),
        MapCell("_product", "product"),  # CUR 2.0's product map
        Text("_line_id", ("identity_line_item_id",)),
        Text("_interval", ("identity_time_interval",)),
        Text("charge_description", ("line_item_line_item_description",)),
        Text("_instance_column", ("product_instance_type",)),
        MapValue("_instance_in_map", of="_product", keys=("instance_type", "instanceType")),
        FirstOf("_instance", of=("_instance_column", "_instance_in_map")),
        Joined("line_key", of=("_line_id", "_interval")),  # the id alone repeats across hours
        Constant("provider", "AWS"),
        Text("billing_account_id", ("bill_payer_account_id",)),
        Text("sub_account_id", ("line_item_usage_account_id",)),
        Text("sub_account_name", ("line_item_usage_account_name",)),
        # EffectiveCost by the FOCUS conversion of CUR; each amount read on its line types only
        Amount("_sp_effective", ("savings_plan_savings_plan_effective_cost",), when=_when("savingsplancoveredusage")),
        Amount("_ri_effective", ("reservation_effective_cost",), when=_when("discountedusage")),
        Amount("_sp_total", ("savings_plan_total_commitment_to_date",), when=_when("savingsplanrecurringfee")),
        Amount("_sp_used", ("savings_plan_used_commitment",), when=_when("savingsplanrecurringfee")),
        Difference("_sp_unused", "_sp_total", "_sp_used"),
        Amount("_ri_upfront", ("reservation_unused_amortized_upfront_fee_for_billing_period",), when=_when("rifee")),
        Amount("_ri_recurring", ("reservation_unused_recurring_fee",), when=_when("rifee")),
        SumOfPresent("_ri_unused", of=("_ri_upfront", "_ri_recurring")),
        Constant("_zero", Decimal(0)),
        Case("effective_cost", of="_line_type", default="billed_cost", cases={
            "savingsplancoveredusage": "_sp_effective", "discountedusage": "_ri_effective",
            "savingsplannegation": "_zero", "savingsplanupfrontfee": "_zero",
            "savingsplanrecurringfee": "_sp_unused", "rifee": "_ri_unused"}),
        Amount("list_cost", ("pricing_public_on_demand_cost",)),
        Text("billing_currency", ("line_item_currency_code",), required=True),
        Moment("charge_period_start", ("line_item_usage_start_date",), required=True),
        Moment("charge_period_end", ("line_item_usage_end_date",)),
        Moment("billing_period_start", ("bill_billing_period_start_date",)),
        Moment("billing_period_end", ("bill_billing_period_end_date",)),
        Category("charge_category", of="charge_category_raw", table=CATEGORIES, label="lineItem/LineItemType"),
        Text("_product_name", ("product_product_name",)),
        MapValue("_product_name_in_map", of="_product", keys=("product_name", "ProductName")),
        Text("_product_code", ("line_item_product_code",)),
        FirstOf("service_name", of=("_product_name", "_product_name_in_map", "_product_code")),
        Text("_sku", ("product_sku",)),
        MapValue("_sku_in_map", of="_product", keys=("sku",)),
        FirstOf("sku_id", of=("_sku", "_sku_in_map")),
        Text("resource_id", ("line_item_resource_id",)),
        LowerWhen("_instance_lower", of="_instance"),
        InstanceType("_instance_described", of=("charge_description",)),
        FirstOf("instance_type", of=("_instance_lower", "_instance_described")),
        Text("_region", ("product_region_code", "product_region")),
        MapValue("_region_in_map", of="_product", keys=("region_code", "region")),
        FirstOf("region_id", of=("_region", "_region_in_map")),
        Quantity("consumed_quantity", ("line_item_usage_amount",)),
        Text("consumed_unit", ("pricing_unit",)),
        # commitment line types are commitment, spot usage spot, else the pricing term
        Pricing("_term_pricing", of="pricing_category_raw", table=PRICING),
        Contains("_spot", of="_usage_type", needle="spotusage", value="spot"),
        FirstOf("_usage_pricing", of=("_spot", "_term_pricing")),
        Constant("_commitment", "commitment"),
        Case("pricing_category", of="_line_type", cases=dict.fromkeys(COMMITTED_TYPES, "_commitment"),
             default="_usage_pricing"),
        TagsFrom("tags", prefixes=("tag:", "cost_category:"), strip="tag:",
                 maps=(("resource_tags", ("user_", "user:"), ""), ("cost_category", (), "cost_category:"))),
        Same("source_line_id", of="_line_id"),
        HeaderSays("source_format", (("resource_tags", "aws_cur2"), ("product", "aws_cur2"),
                                     ("cost_category", "aws_cur2")), default="aws_cur"),
    ),
)

# The parser contract (ingest/engine/contract.py), as every bill offers it (bill_definition.Bill).
sniff, sniff_bytes, parse, parse_bytes, stage, totals = CUR.contract()
