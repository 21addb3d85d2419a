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
"""
from __future__ import annotations

import re

from ingest.engine.contract import ParseContext
from ingest.engine.staging import Source, Staged
from ingest.formats.billing import bill_sql, bill_stage, billing
from ingest.formats.billing.bill_sql import Builder, Fields, Plan, ident, literal
from ingest.formats.billing.billing import Record

KIND = "billing_azure"
TABLES = (billing.TABLE,)
BINARY = True  # also reads Parquet exports: the loader hands it the bytes

COST = ("costinbillingcurrency", "cost", "pretaxcost")
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


def build(record: Record, columns: set[str]) -> list[dict]:
    """The one billing_lines row of an export row."""
    raw_type = billing.text(record, "chargetype")
    raw_pricing = billing.text(record, "pricingmodel")
    start = billing.required_moment(record, "date", "usagedatetime", "usagedate")
    billed = billing.required_amount(record, *COST)
    meter_category = billing.text(record, "metercategory")
    info = billing.tags(record.get("additionalinfo"), "AdditionalInfo")
    return [billing.row(
        provider="Microsoft",
        billing_account_id=billing.text(record, "billingaccountid"),
        sub_account_id=billing.text(record, "subscriptionid", "subscriptionguid"),
        sub_account_name=billing.text(record, "subscriptionname"),
        billed_cost=billed,
        effective_cost=billed,
        billing_currency=billing.required_text(record, "billingcurrency", "billingcurrencycode", "currency"),
        charge_period_start=start,
        charge_period_end=billing.next_day(start),
        billing_period_start=billing.moment(record, "billingperiodstartdate"),
        billing_period_end=billing.moment(record, "billingperiodenddate"),
        charge_category=billing.category(raw_type or "Usage", CATEGORIES, "ChargeType"),
        charge_category_raw=raw_type,
        charge_description=billing.text(record, "productname", "product", "metername"),
        service_name=meter_category or billing.text(record, "servicename", "consumedservice"),
        sku_id=billing.text(record, "meterid", "partnumber"),
        resource_id=billing.text(record, "resourceid", "instanceid"),
        resource_name=billing.text(record, "resourcename"),
        instance_type=_instance_type(info, meter_category),
        region_id=billing.text(record, "resourcelocation"),
        consumed_quantity=billing.quantity(record, "quantity", "usagequantity"),
        consumed_unit=billing.text(record, "unitofmeasure"),
        pricing_category=billing.pricing(raw_pricing, PRICING),
        pricing_category_raw=raw_pricing,
        tags=billing.tag_pairs(billing.tags(record.get("tags"), "Tags")),
        source_format=_format(columns),
    )]


def _instance_type(info: dict, meter_category: str | None) -> str | None:
    """The VM size AdditionalInfo names (ServiceType `Standard_NC6s_v3`), for virtual machines."""
    size = info.get("ServiceType") or info.get("VMSize")
    return size.lower() if size and (meter_category or "").lower() == "virtual machines" else None


def _format(columns: set[str]) -> str:
    if "costinbillingcurrency" in columns:
        return "azure_mca"
    if "pretaxcost" in columns:
        return "azure_legacy"
    return "azure_ea"


def plan(fields: Fields) -> Plan:
    """`build` as SQL over whole columns (ingest/formats/billing/bill_sql.py), checks in build's order."""
    b = Builder(fields)
    raw_type, raw_pricing = b.text("chargetype"), b.text("pricingmodel")
    start = b.moment("charge_period_start", "date", "usagedatetime", "usagedate", required=True)
    billed = b.amount("billed_cost", *COST, required=True)
    meter_category = b.text("metercategory")
    size = _info_size(b, fields)
    b.column("provider", "'Microsoft'")
    b.column("billing_account_id", b.text("billingaccountid"))
    b.column("sub_account_id", b.text("subscriptionid", "subscriptionguid"))
    b.column("sub_account_name", b.text("subscriptionname"))
    b.column("effective_cost", billed)
    currency = b.column("billing_currency", b.text("billingcurrency", "billingcurrencycode", "currency"))
    b.check(f"{currency} IS NULL", f"'no ' || {fields.label('billingcurrency', 'billingcurrencycode', 'currency')}")
    b.column("charge_period_end", f"{start} + INTERVAL 1 DAY")
    b.moment("billing_period_start", "billingperiodstartdate")
    b.moment("billing_period_end", "billingperiodenddate")
    b.category("charge_category", f"coalesce({raw_type}, 'Usage')", CATEGORIES, "ChargeType")
    b.column("charge_category_raw", raw_type)
    b.column("charge_description", b.text("productname", "product", "metername"))
    b.column("service_name", f"coalesce({meter_category}, {b.text('servicename', 'consumedservice')})")
    b.column("sku_id", b.text("meterid", "partnumber"))
    b.column("resource_id", b.text("resourceid", "instanceid"))
    b.column("resource_name", b.text("resourcename"))
    b.column("instance_type", f"CASE WHEN lower(coalesce({meter_category}, '')) = 'virtual machines' "
                              f"THEN lower(nullif({size}, '')) END")
    b.column("region_id", b.text("resourcelocation"))
    b.quantity("consumed_quantity", "quantity", "usagequantity")
    b.column("consumed_unit", b.text("unitofmeasure"))
    b.column("pricing_category", bill_sql.pricing(raw_pricing, PRICING))
    b.column("pricing_category_raw", raw_pricing)
    b.tags("tags", "tags")
    b.column("source_format", literal(_format(set(fields.names()))))
    return b.plan()


def _info_size(b: Builder, fields: Fields) -> str:
    """SQL of AdditionalInfo's ServiceType (else VMSize); a cell that is not a JSON object of
    named values goes to billing.py, which rejects it or reads it as a Python literal."""
    if not fields.has("additionalinfo") or fields.types["additionalinfo"] != "VARCHAR":
        if fields.has("additionalinfo"):
            b.python.append(f"{ident(fields.columns['additionalinfo'])} IS NOT NULL")
        return "NULL"
    info = f"bill_json_text({b.text('additionalinfo')})"
    b.python.append(f"{info} IS NOT NULL AND CASE WHEN json_valid({info}) THEN json_type({info}) <> 'OBJECT' "
                    f"OR list_contains(json_keys({info}), '') ELSE true END")
    return (f"CASE WHEN json_valid({info}) THEN coalesce(nullif(json_extract_string({info}, '$.ServiceType'), ''), "
            f"json_extract_string({info}, '$.VMSize')) END")


def stage(src: Source, con, ctx: ParseContext) -> Staged:
    """Stage an Azure cost export (CSV or Parquet) into the staging tables (ingest/formats/billing/bill_stage.py)."""
    return bill_stage.stage(src, con, ctx, FAMILY, plan)


FAMILY = billing.Family(
    kind=KIND, normalize=normalize, build=build, label="Azure cost export",
    required=(COST, ("metercategory", "meterid"), ("date", "usagedatetime", "usagedate")),
    per_file=(billing.FileValue(("billingcurrency", "billingcurrencycode", "currency"), "default_currency",
                                "currency"),),
    money=("chargetype",),
)


sniff, sniff_bytes, parse, parse_bytes = FAMILY.sniff, FAMILY.sniff_bytes, FAMILY.parse, FAMILY.parse_bytes


totals = billing.totals
