"""FinOps FOCUS 1.0+ bills, CSV (plain or .gz) or Parquet, into `billing_lines`.

Columns are matched by name whatever their case or underscores (`BilledCost`, `billed_cost`);
`x_` custom columns are ignored except `x_LineItemId` (or a plain `Id`), kept as the line id.
The literal text NULL is a null (the FOCUS sample data writes it unquoted), blank lines are
skipped, dates may be ISO-8601 or M/D/YY (US order). PricingCategory Standard, Dynamic and
Committed become on-demand, spot and commitment (Other: none); the raw value is kept.
"""
from __future__ import annotations

import re

from ingest.engine.contract import BadValue, ParseContext
from ingest.engine.staging import Source, Staged
from ingest.formats.billing import bill_sql, bill_stage, billing
from ingest.formats.billing.bill_sql import Builder, Fields, Plan
from ingest.formats.billing.billing import Record

KIND = "billing_focus"
TABLES = (billing.TABLE,)
BINARY = True  # also reads Parquet: the loader hands it the bytes (contract.py)

CATEGORIES = {name: name for name in billing.CATEGORIES}
PRICING = {"standard": "on-demand", "dynamic": "spot", "committed": "commitment",
           "ondemand": "on-demand", "spot": "spot", "commitment": "commitment"}


def normalize(name: str) -> str:
    """BilledCost, billed_cost and "Billed Cost" all become billedcost."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def build(record: Record, columns: set[str]) -> list[dict]:
    """The one billing_lines row of a FOCUS row."""
    provider = billing.text(record, "providername", "invoiceissuername", "publishername")
    if provider is None:
        raise BadValue("no ProviderName")
    raw_category = billing.text(record, "chargecategory")
    raw_pricing = billing.text(record, "pricingcategory")
    line_id = billing.text(record, "xlineitemid", "id")
    return [billing.row(
        line_key=line_id,
        provider=provider,
        billing_account_id=billing.text(record, "billingaccountid"),
        sub_account_id=billing.text(record, "subaccountid"),
        sub_account_name=billing.text(record, "subaccountname"),
        billed_cost=billing.required_amount(record, "billedcost"),
        effective_cost=billing.amount(record, "effectivecost"),
        list_cost=billing.amount(record, "listcost"),
        billing_currency=billing.required_text(record, "billingcurrency"),
        charge_period_start=billing.required_moment(record, "chargeperiodstart"),
        charge_period_end=billing.moment(record, "chargeperiodend"),
        billing_period_start=billing.moment(record, "billingperiodstart"),
        billing_period_end=billing.moment(record, "billingperiodend"),
        charge_category=billing.category(raw_category, CATEGORIES, "ChargeCategory"),
        charge_category_raw=raw_category,
        charge_description=billing.text(record, "chargedescription"),
        service_name=billing.text(record, "servicename"),
        sku_id=billing.text(record, "skuid"),
        resource_id=billing.text(record, "resourceid"),
        resource_name=billing.text(record, "resourcename"),
        instance_type=billing.instance_type_in(billing.text(record, "chargedescription"),
                                               billing.text(record, "skupricedetails")),
        region_id=billing.text(record, "regionid", "regionname"),
        consumed_quantity=billing.quantity(record, "consumedquantity"),
        consumed_unit=billing.text(record, "consumedunit"),
        pricing_category=billing.pricing(raw_pricing, PRICING),
        pricing_category_raw=raw_pricing,
        tags=billing.tag_pairs(billing.tags(record.get("tags"), "Tags")),
        source_line_id=line_id,
        source_format="focus",
    )]


def plan(fields: Fields) -> Plan:
    """`build` as SQL over whole columns (ingest/formats/billing/bill_sql.py), checks in build's order."""
    b = Builder(fields)
    provider = b.text("providername", "invoiceissuername", "publishername")
    b.check(f"{provider} IS NULL", "'no ProviderName'")
    raw_category, raw_pricing = b.text("chargecategory"), b.text("pricingcategory")
    line_id = b.text("xlineitemid", "id")
    description, price_details = b.text("chargedescription"), b.text("skupricedetails")
    b.column("line_key", line_id)
    b.column("provider", provider)
    b.column("billing_account_id", b.text("billingaccountid"))
    b.column("sub_account_id", b.text("subaccountid"))
    b.column("sub_account_name", b.text("subaccountname"))
    b.amount("billed_cost", "billedcost", required=True)
    b.amount("effective_cost", "effectivecost")
    b.amount("list_cost", "listcost")
    currency = b.column("billing_currency", b.text("billingcurrency"))
    b.check(f"{currency} IS NULL", f"'no ' || {fields.label('billingcurrency')}")
    b.moment("charge_period_start", "chargeperiodstart", required=True)
    b.moment("charge_period_end", "chargeperiodend")
    b.moment("billing_period_start", "billingperiodstart")
    b.moment("billing_period_end", "billingperiodend")
    b.category("charge_category", raw_category, CATEGORIES, "ChargeCategory")
    b.column("charge_category_raw", raw_category)
    b.column("charge_description", description)
    b.column("service_name", b.text("servicename"))
    b.column("sku_id", b.text("skuid"))
    b.column("resource_id", b.text("resourceid"))
    b.column("resource_name", b.text("resourcename"))
    b.column("instance_type", f"coalesce(bill_instance_type({description}), bill_instance_type({price_details}))")
    b.column("region_id", b.text("regionid", "regionname"))
    b.quantity("consumed_quantity", "consumedquantity")
    b.column("consumed_unit", b.text("consumedunit"))
    b.column("pricing_category", bill_sql.pricing(raw_pricing, PRICING))
    b.column("pricing_category_raw", raw_pricing)
    b.tags("tags", "tags")
    b.column("source_line_id", line_id)
    b.column("source_format", "'focus'")
    return b.plan()


def stage(src: Source, con, ctx: ParseContext) -> Staged:
    """Stage a FOCUS CSV or Parquet file into the staging tables (ingest/formats/billing/bill_stage.py)."""
    return bill_stage.stage(src, con, ctx, FAMILY, plan)


FAMILY = billing.Family(
    kind=KIND, normalize=normalize, build=build, nulls=frozenset({"NULL", "null", "Null"}), label="FOCUS",
    required=(("billedcost",), ("chargeperiodstart",), ("chargecategory",)),
    per_file=(billing.FileValue(("billingcurrency",), "default_currency", "currency"),
              billing.FileValue(("providername", "invoiceissuername", "publishername"), "default_provider",
                                "provider")),
    money=("effectivecost", "listcost"),
)


sniff, sniff_bytes, parse, parse_bytes = FAMILY.sniff, FAMILY.sniff_bytes, FAMILY.parse, FAMILY.parse_bytes


totals = billing.totals
