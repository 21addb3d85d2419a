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
"""
from __future__ import annotations

import re
from decimal import Decimal

from ingest.engine import values
from ingest.engine.contract import ParseContext
from ingest.engine.staging import Source, Staged
from ingest.formats.billing import bill_sql, bill_stage, billing
from ingest.formats.billing.bill_sql import Builder, Fields, Plan, literal
from ingest.formats.billing.billing import Record

KIND = "billing_aws"
TABLES = (billing.TABLE,)
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


def build(record: Record, columns: set[str]) -> list[dict]:
    """The one billing_lines row of a CUR line."""
    raw_type = billing.text(record, "line_item_line_item_type")
    line_type = re.sub(r"[^a-z]", "", (raw_type or "").lower())
    billed = billing.required_amount(record, "line_item_unblended_cost")
    term = billing.text(record, "pricing_term")
    usage_type = billing.text(record, "line_item_usage_type") or ""
    product = _map(record, "product")
    line_id = billing.text(record, "identity_line_item_id")
    interval = billing.text(record, "identity_time_interval")
    description = billing.text(record, "line_item_line_item_description")
    instance_type = (billing.text(record, "product_instance_type")
                     or _text(product.get("instance_type") or product.get("instanceType")))
    return [billing.row(
        line_key=f"{line_id}|{interval or ''}" if line_id else None,
        provider="AWS",
        billing_account_id=billing.text(record, "bill_payer_account_id"),
        sub_account_id=billing.text(record, "line_item_usage_account_id"),
        sub_account_name=billing.text(record, "line_item_usage_account_name"),
        billed_cost=billed,
        effective_cost=_effective(record, line_type, billed, columns),
        list_cost=billing.amount(record, "pricing_public_on_demand_cost"),
        billing_currency=billing.required_text(record, "line_item_currency_code"),
        charge_period_start=billing.required_moment(record, "line_item_usage_start_date"),
        charge_period_end=billing.moment(record, "line_item_usage_end_date"),
        billing_period_start=billing.moment(record, "bill_billing_period_start_date"),
        billing_period_end=billing.moment(record, "bill_billing_period_end_date"),
        charge_category=billing.category(raw_type, CATEGORIES, "lineItem/LineItemType"),
        charge_category_raw=raw_type,
        charge_description=description,
        service_name=(billing.text(record, "product_product_name")
                      or _text(product.get("product_name") or product.get("ProductName"))
                      or billing.text(record, "line_item_product_code")),
        sku_id=billing.text(record, "product_sku") or _text(product.get("sku")),
        resource_id=billing.text(record, "line_item_resource_id"),
        instance_type=instance_type.lower() if instance_type else billing.instance_type_in(description),
        region_id=(billing.text(record, "product_region_code", "product_region")
                   or _text(product.get("region_code") or product.get("region"))),
        consumed_quantity=billing.quantity(record, "line_item_usage_amount"),
        consumed_unit=billing.text(record, "pricing_unit"),
        pricing_category=_pricing(term, line_type, usage_type),
        pricing_category_raw=term,
        tags=billing.tag_pairs(_tags(record)),
        source_line_id=line_id,
        source_format=_format(columns),
    )]


def _effective(record: Record, line_type: str, billed: Decimal, columns: set[str]) -> Decimal | None:
    """EffectiveCost by the FOCUS conversion of CUR; None when the needed column is missing."""
    def column(name: str) -> Decimal | None:
        return billing.amount(record, name) if name in columns else None

    if line_type == "savingsplancoveredusage":
        return column("savings_plan_savings_plan_effective_cost")
    if line_type == "discountedusage":
        return column("reservation_effective_cost")
    if line_type in ("savingsplannegation", "savingsplanupfrontfee"):
        return Decimal(0)
    if line_type == "savingsplanrecurringfee":
        total, used = column("savings_plan_total_commitment_to_date"), column("savings_plan_used_commitment")
        return None if total is None or used is None else total - used
    if line_type == "rifee":
        upfront = column("reservation_unused_amortized_upfront_fee_for_billing_period")
        recurring = column("reservation_unused_recurring_fee")
        return None if upfront is None and recurring is None else (upfront or 0) + (recurring or 0)
    return billed


def _pricing(term: str | None, line_type: str, usage_type: str) -> str | None:
    if line_type in COMMITTED_TYPES:
        return "commitment"
    if "spotusage" in usage_type.lower().replace("-", ""):
        return "spot"
    return billing.pricing(term, PRICING)


def _tags(record: Record) -> dict[str, str | None]:
    """Resource tags and cost categories from flat columns or CUR 2.0 maps; empty cells are no tag."""
    found: dict[str, str | None] = {}
    for name, value in record.fields.items():
        if name.startswith(("tag:", "cost_category:")) and not values.is_absent(value):
            found[name.removeprefix("tag:")] = billing.text(record, name)
    for key, value in billing.tags(record.get("resource_tags"), "resource_tags").items():
        if value not in (None, ""):
            found[key.removeprefix("user_").removeprefix("user:")] = value
    for key, value in billing.tags(record.get("cost_category"), "cost_category").items():
        if value not in (None, ""):
            found[f"cost_category:{key}"] = value
    return found


def _map(record: Record, name: str) -> dict:
    """A CUR 2.0 map column (Parquet map or JSON text) as a dict; {} when absent."""
    value = record.get(name)
    return billing.tags(value, name) if value is not None else {}


def _text(value: object) -> str | None:
    return None if value in (None, "") else str(value).strip()


def _format(columns: set[str]) -> str:
    if "resource_tags" in columns or "product" in columns or "cost_category" in columns:
        return "aws_cur2"
    return "aws_cur"


def plan(fields: Fields) -> Plan:
    """`build` as SQL over whole columns (ingest/formats/billing/bill_sql.py), checks in build's order."""
    b = Builder(fields)
    raw_type = b.text("line_item_line_item_type")
    line_type = b.column("_line_type", f"regexp_replace(lower(coalesce({raw_type}, '')), '[^a-z]', '', 'g')")
    billed = b.amount("billed_cost", "line_item_unblended_cost", required=True)
    term = b.text("pricing_term")
    usage_type = b.text("line_item_usage_type")
    product = b.column("_product", b.entries("product"))
    line_id, interval = b.text("identity_line_item_id"), b.text("identity_time_interval")
    description = b.text("line_item_line_item_description")

    def in_product(*keys: str) -> str:
        found = [f"nullif(trim(list_filter({product}, lambda x: x.key = {literal(k)})[-1].value), '')" for k in keys]
        return f"coalesce({', '.join(found)})"

    instance = f"coalesce({b.text('product_instance_type')}, {in_product('instance_type', 'instanceType')})"
    b.column("line_key", f"CASE WHEN {line_id} IS NOT NULL THEN {line_id} || '|' || coalesce({interval}, '') END")
    b.column("provider", "'AWS'")
    b.column("billing_account_id", b.text("bill_payer_account_id"))
    b.column("sub_account_id", b.text("line_item_usage_account_id"))
    b.column("sub_account_name", b.text("line_item_usage_account_name"))
    _effective_sql(b, fields, line_type, billed)
    b.amount("list_cost", "pricing_public_on_demand_cost")
    currency = b.column("billing_currency", b.text("line_item_currency_code"))
    b.check(f"{currency} IS NULL", f"'no ' || {fields.label('line_item_currency_code')}")
    b.moment("charge_period_start", "line_item_usage_start_date", required=True)
    b.moment("charge_period_end", "line_item_usage_end_date")
    b.moment("billing_period_start", "bill_billing_period_start_date")
    b.moment("billing_period_end", "bill_billing_period_end_date")
    b.category("charge_category", raw_type, CATEGORIES, "lineItem/LineItemType")
    b.column("charge_category_raw", raw_type)
    b.column("charge_description", description)
    b.column("service_name", f"coalesce({b.text('product_product_name')}, "
                             f"{in_product('product_name', 'ProductName')}, {b.text('line_item_product_code')})")
    b.column("sku_id", f"coalesce({b.text('product_sku')}, {in_product('sku')})")
    b.column("resource_id", b.text("line_item_resource_id"))
    b.column("instance_type", f"coalesce(lower({instance}), bill_instance_type({description}))")
    b.column("region_id", f"coalesce({b.text('product_region_code', 'product_region')}, "
                          f"{in_product('region_code', 'region')})")
    b.quantity("consumed_quantity", "line_item_usage_amount")
    b.column("consumed_unit", b.text("pricing_unit"))
    b.column("pricing_category", f"CASE WHEN {bill_sql.one_of(line_type, COMMITTED_TYPES)} THEN 'commitment' "
                                 f"WHEN contains(replace(lower(coalesce({usage_type}, '')), '-', ''), 'spotusage') "
                                 f"THEN 'spot' ELSE {bill_sql.pricing(term, PRICING)} END")
    b.column("pricing_category_raw", term)
    _tags_sql(b, fields)
    b.column("source_line_id", line_id)
    b.column("source_format", literal(_format(set(fields.names()))))
    return b.plan()


def _effective_sql(b: Builder, fields: Fields, line_type: str, billed: str) -> None:
    """EffectiveCost by the FOCUS conversion of CUR (_effective), each amount checked only on
    the line types that read it, in _effective's order."""
    def column(name: str, *types: str) -> str:
        if not fields.has(name):
            return "NULL"
        when = " OR ".join(f"{line_type} = {literal(t)}" for t in types)
        return b.amount(f"_{name}", name, when=when)

    covered = column("savings_plan_savings_plan_effective_cost", "savingsplancoveredusage")
    reserved = column("reservation_effective_cost", "discountedusage")
    total = column("savings_plan_total_commitment_to_date", "savingsplanrecurringfee")
    used = column("savings_plan_used_commitment", "savingsplanrecurringfee")
    upfront = column("reservation_unused_amortized_upfront_fee_for_billing_period", "rifee")
    recurring = column("reservation_unused_recurring_fee", "rifee")
    b.column("effective_cost", f"""CASE {line_type}
        WHEN 'savingsplancoveredusage' THEN {covered}
        WHEN 'discountedusage' THEN {reserved}
        WHEN 'savingsplannegation' THEN 0 WHEN 'savingsplanupfrontfee' THEN 0
        WHEN 'savingsplanrecurringfee' THEN {total} - {used}
        WHEN 'rifee' THEN CASE WHEN {upfront} IS NULL AND {recurring} IS NULL THEN NULL
                               ELSE coalesce({upfront}, 0) + coalesce({recurring}, 0) END
        ELSE {billed} END""")


def _tags_sql(b: Builder, fields: Fields) -> None:
    """_tags in SQL: flat tag and cost-category columns, then the resource_tags and
    cost_category maps; a name given twice (where the later one wins) goes to billing.py."""
    flat_names = [name for name in fields.names() if name.startswith(("tag:", "cost_category:"))]
    keys = [name.removeprefix("tag:") for name in flat_names]
    if not fields.has("resource_tags") and not fields.has("cost_category") and len(set(keys)) == len(keys):
        # only tag columns, each key once (a CSV export): sorted and checked here, once, not per line
        ordered = sorted(zip(keys, flat_names))
        entries = ", ".join(f"{{'key': {literal(key)}, 'value': {b.text(name)}}}" for key, name in ordered)
        found = b.column("_tag_list", f"list_filter([{entries}], lambda x: x.value IS NOT NULL)"
                         if ordered else "[]")
        b.column("tags", f"CASE WHEN len({found}) > 0 THEN map_from_entries({found}) END")
        return
    flat = [f"{{'key': {literal(key)}, 'value': {b.text(name)}}}" for key, name in zip(keys, flat_names)]
    flat_list = f"list_filter([{', '.join(flat)}], lambda x: x.value IS NOT NULL)" if flat else "[]"
    unprefixed = ("lambda x: {'key': CASE WHEN starts_with(x.key, '%s') THEN x.key[6:] ELSE x.key END, "
                  "'value': x.value}")
    resource = (f"list_transform(list_transform(list_filter({b.entries('resource_tags')}, lambda x: x.value <> ''), "
                f"{unprefixed % 'user_'}), {unprefixed % 'user:'})")
    categories = (f"list_transform(list_filter({b.entries('cost_category')}, lambda x: x.value <> ''), "
                  "lambda x: {'key': 'cost_category:' || x.key, 'value': x.value})")
    found = b.column("_tag_list", f"list_concat({flat_list}, {resource}, {categories})")
    keys = f"list_transform({found}, lambda x: x.key)"
    b.python.append(f"len(list_distinct({keys})) <> len({found})")
    b.column("tags", f"CASE WHEN len({found}) > 0 AND len(list_distinct({keys})) = len({found}) "
                     f"THEN map_from_entries(list_sort({found})) END")


def stage(src: Source, con, ctx: ParseContext) -> Staged:
    """Stage a CUR CSV or Parquet file (CUR 2.0 maps included) into the staging tables."""
    return bill_stage.stage(src, con, ctx, FAMILY, plan)


FAMILY = billing.Family(
    kind=KIND, normalize=normalize, build=build, label="AWS CUR",
    required=(("line_item_unblended_cost",), ("line_item_usage_start_date",)),
    per_file=(billing.FileValue(("line_item_currency_code",), "default_currency", "currency"),),
    # what the effective and list costs are read from (_effective)
    money=("line_item_line_item_type", "savings_plan_savings_plan_effective_cost", "reservation_effective_cost",
           "savings_plan_total_commitment_to_date", "savings_plan_used_commitment",
           "reservation_unused_amortized_upfront_fee_for_billing_period", "reservation_unused_recurring_fee",
           "pricing_public_on_demand_cost"),
)


sniff, sniff_bytes, parse, parse_bytes = FAMILY.sniff, FAMILY.sniff_bytes, FAMILY.parse, FAMILY.parse_bytes


totals = billing.totals
