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
cost. No line id: lines are keyed by content (ingest/billing.py).
"""
from __future__ import annotations

import re

from ingest import billing
from ingest.billing import Record

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


FAMILY = billing.Family(
    kind=KIND, normalize=normalize, build=build, label="Azure cost export",
    required=(COST, ("metercategory", "meterid"), ("date", "usagedatetime", "usagedate")),
)


sniff, sniff_bytes, parse, parse_bytes = FAMILY.sniff, FAMILY.sniff_bytes, FAMILY.parse, FAMILY.parse_bytes


totals = billing.totals
