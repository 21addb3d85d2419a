"""Google Cloud Billing exports into `billing_lines`: BigQuery rows flattened to CSV (dotted
names such as `service.description`) or newline-delimited JSON (nested objects), plain or .gz,
or Parquet.

`cost` is the billed cost before credits; each entry of `credits` (JSON, or the Python repr
GCP tools write: `[{'name': ..., 'amount': -5e-06, ...}]`) becomes a line of its own with
charge category `credit` and its (negative) amount, so credits stay visible and the net is the
sum. `cost_type` regular/tax/adjustment/rounding_error maps to usage/tax/adjustment/adjustment.
`labels` become tags; the machine type comes from the system label
`compute.googleapis.com/machine_spec`. The export has no line id: lines are keyed by content
(ingest/formats/billing/billing.py). Pricing: Spot/Preemptible SKUs are spot, Commitment SKUs commitment, other
usage on-demand (the export names no pricing model, so the raw value is NULL).

The deprecated file export (CSV in a bucket, before the BigQuery export) is a second family,
FILE_FAMILY, picked by its header (`Measurement1`, `Start Time`, `Cost`): see its section below.
"""
from __future__ import annotations

import re

from ingest.engine import values
from ingest.engine.contract import BadValue, ParseContext
from ingest.engine.staging import Source, Staged
from ingest.formats.billing import bill_gcp_json, bill_stage, billing
from ingest.formats.billing.bill_sql import Builder, Fields, Plan, ident, literal
from ingest.formats.billing.billing import Record

KIND = "billing_gcp"
TABLES = (billing.TABLE,)
BINARY = True  # also reads Parquet: the loader hands it the bytes

CATEGORIES = {"regular": "usage", "tax": "tax", "adjustment": "adjustment",
              "roundingerror": "adjustment"}
MACHINE_LABEL = "compute.googleapis.com/machine_spec"


def normalize(name: str) -> str:
    return name.strip().lower()


def build(record: Record, columns: set[str]) -> list[dict]:
    """The usage (or tax, adjustment) line of an export row, then one credit line per credit."""
    raw_type = billing.text(record, "cost_type") or "regular"
    sku = billing.text(record, "sku.description")
    month = billing.text(record, "invoice.month")
    period = billing.month_span(month, "invoice.month") if month else (None, None)
    system = billing.tags(record.get("system_labels"), "system_labels")
    billed = billing.required_amount(record, "cost")
    usage = billing.row(
        provider="Google Cloud",
        billing_account_id=billing.text(record, "billing_account_id"),
        sub_account_id=billing.text(record, "project.id"),
        sub_account_name=billing.text(record, "project.name"),
        billed_cost=billed,
        effective_cost=billed,  # the export has no amortized cost; credits are lines of their own
        billing_currency=billing.required_text(record, "currency"),
        charge_period_start=billing.required_moment(record, "usage_start_time"),
        charge_period_end=billing.moment(record, "usage_end_time"),
        billing_period_start=period[0],
        billing_period_end=period[1],
        charge_category=billing.category(raw_type, CATEGORIES, "cost_type"),
        charge_category_raw=raw_type,
        charge_description=sku,
        service_name=billing.text(record, "service.description"),
        sku_id=billing.text(record, "sku.id"),
        resource_id=billing.text(record, "resource.global_name", "resource.name"),
        resource_name=billing.text(record, "resource.name"),
        instance_type=system.get(MACHINE_LABEL) or billing.instance_type_in(sku),
        region_id=billing.text(record, "location.region", "location.location"),
        consumed_quantity=billing.quantity(record, "usage.amount"),
        consumed_unit=billing.text(record, "usage.unit"),
        pricing_category=_pricing(sku) if raw_type == "regular" else None,
        tags=billing.tag_pairs(billing.tags(record.get("labels"), "labels")),
        source_format="gcp_billing",
    )
    return [usage, *_credits(record, usage)]


def _credits(record: Record, usage: dict) -> list[dict]:
    found = billing.structured(record.get("credits"), "credits") or []
    if not isinstance(found, list):
        raise BadValue(f"credits must be a list, got {record.get('credits')!r}")
    lines = []
    for number, credit in enumerate(found, start=1):
        if not isinstance(credit, dict):
            raise BadValue(f"credit {number} must be an object, got {credit!r}")
        value = values.money(credit.get("amount"), f"credit {number} amount")
        if value is None:
            raise BadValue(f"credit {number} has no amount")
        name = credit.get("full_name") or credit.get("name") or credit.get("type") or "credit"
        lines.append({**usage, "billed_cost": value, "effective_cost": value,
                      "charge_category": "credit", "charge_category_raw": credit.get("type") or "credit",
                      "charge_description": str(name), "pricing_category": None,
                      "consumed_quantity": None, "consumed_unit": None})
    return lines


def _pricing(sku: str | None) -> str:
    text = (sku or "").lower()
    if "spot" in text or "preemptible" in text:
        return "spot"
    if "commitment" in text:
        return "commitment"
    return "on-demand"


CREDIT = '[{"name": "VARCHAR", "full_name": "VARCHAR", "type": "VARCHAR", "amount": "VARCHAR"}]'


def plan(fields: Fields) -> Plan:
    """`build` as SQL over whole columns (ingest/formats/billing/bill_sql.py), checks in build's order; each
    credit of a JSON `credits` cell a line of its own; Python-literal cells go to billing.py."""
    b = Builder(fields)
    raw_type = b.column("charge_category_raw", f"coalesce({b.text('cost_type')}, 'regular')")
    sku = b.text("sku.description")
    month = b.text("invoice.month")
    parts = f"regexp_extract({month}, '^([0-9]{{4}})-?([0-9]{{2}})$', ['y', 'm'])"
    period = b.column("billing_period_start", f"CASE WHEN TRY_CAST({parts}.m AS INTEGER) BETWEEN 1 AND 12 THEN "
                                              f"CAST({parts}.y || '-' || {parts}.m || '-01' AS TIMESTAMPTZ) END")
    b.check(f"{month} IS NOT NULL AND {period} IS NULL",
            f"'invoice.month ' || bill_repr({month}) || ' is not a month (YYYYMM)'")
    b.column("billing_period_end", f"{period} + INTERVAL 1 MONTH")
    system = b.entries("system_labels")
    billed = b.amount("billed_cost", "cost", required=True)
    b.column("provider", "'Google Cloud'")
    b.column("billing_account_id", b.text("billing_account_id"))
    b.column("sub_account_id", b.text("project.id"))
    b.column("sub_account_name", b.text("project.name"))
    b.column("effective_cost", billed)
    currency = b.column("billing_currency", b.text("currency"))
    b.check(f"{currency} IS NULL", f"'no ' || {fields.label('currency')}")
    b.moment("charge_period_start", "usage_start_time", required=True)
    b.moment("charge_period_end", "usage_end_time")
    b.category("charge_category", raw_type, CATEGORIES, "cost_type")
    b.column("charge_description", sku)
    b.column("service_name", b.text("service.description"))
    b.column("sku_id", b.text("sku.id"))
    b.column("resource_id", b.text("resource.global_name", "resource.name"))
    b.column("resource_name", b.text("resource.name"))
    machine = f"nullif(list_filter({system}, lambda x: x.key = {literal(MACHINE_LABEL)})[-1].value, '')"
    b.column("instance_type", f"coalesce({machine}, bill_instance_type({sku}))")
    b.column("region_id", b.text("location.region", "location.location"))
    b.quantity("consumed_quantity", "usage.amount")
    b.column("consumed_unit", b.text("usage.unit"))
    lowered = f"lower(coalesce({sku}, ''))"
    b.column("pricing_category", f"CASE WHEN {raw_type} <> 'regular' THEN NULL "
                                 f"WHEN contains({lowered}, 'spot') OR contains({lowered}, 'preemptible') THEN 'spot' "
                                 f"WHEN contains({lowered}, 'commitment') THEN 'commitment' ELSE 'on-demand' END")
    b.tags("tags", "labels")
    b.column("source_format", "'gcp_billing'")
    return b.plan(_credits_sql(b, fields))


def _credits_sql(b: Builder, fields: Fields) -> str | None:
    """The SELECT of one credit line per entry of a JSON `credits` cell; a cell that is not a JSON
    list of objects each with a readable amount (a Python literal, say) goes to billing.py."""
    if not fields.has("credits"):
        return None
    if fields.types["credits"] != "VARCHAR":
        b.python.append(f"{ident(fields.columns['credits'])} IS NOT NULL")
        return None
    cell = b.text("credits")
    parsed = f"json_transform({cell}, {literal(CREDIT)})"
    readable = (f"CASE WHEN json_valid({cell}) AND json_type({cell}) = 'ARRAY' THEN coalesce(list_bool_and("
                f"list_transform(json_extract({cell}, '$[*]'), lambda e: json_type(e) = 'OBJECT' "
                f"AND bill_money(json_extract_string(e, '$.amount')) IS NOT NULL)), true) ELSE false END")
    b.python.append(f"{cell} IS NOT NULL AND NOT ({readable})")
    b.column("_credits", f"CASE WHEN {cell} IS NOT NULL AND json_valid({cell}) AND json_type({cell}) = 'ARRAY' "
                         f"THEN {parsed} END")
    carried = ", ".join(c for c in billing.LINE_COLUMNS if c in b.columns and c not in (
        "billed_cost", "effective_cost", "charge_category", "charge_category_raw", "charge_description",
        "pricing_category", "consumed_quantity", "consumed_unit", "source_file", "source_kind", "source_line"))
    return f"""SELECT {carried}, bill_money(credit.amount) AS billed_cost, bill_money(credit.amount) AS effective_cost,
            'credit' AS charge_category,
            coalesce(nullif(credit.type, ''), 'credit') AS charge_category_raw,
            coalesce(nullif(credit.full_name, ''), nullif(credit.name, ''), nullif(credit.type, ''), 'credit')
                AS charge_description,
            NULL AS pricing_category, NULL AS consumed_quantity, NULL AS consumed_unit,
            source_line, _sub
        FROM (SELECT {', '.join(f'v_{c} AS {c}' for c in carried.split(', '))}, _line AS source_line,
                     unnest(v__credits) AS credit, generate_subscripts(v__credits, 1) AS _sub
              FROM bill_lines WHERE _reason IS NULL AND NOT _python AND len(v__credits) > 0)"""


def stage(src: Source, con, ctx: ParseContext) -> Staged:
    """Stage a GCP billing export (CSV, Parquet or JSON lines; or the file export's CSV) into staging."""
    with src.open_binary() as stream:
        head = stream.read(1 << 16).decode("utf-8-sig", errors="replace")
    if _family(billing.header_names(head.lstrip())) is FILE_FAMILY:
        return bill_stage.stage(src, con, ctx, FILE_FAMILY, file_plan)
    return bill_stage.stage(src, con, ctx, FAMILY, plan, json_lines=bill_gcp_json.stage_lines)


FAMILY = billing.Family(
    kind=KIND, normalize=normalize, build=build, label="GCP billing export",
    required=(("cost",), ("usage_start_time",), ("service.description",)),
    per_file=(billing.FileValue(("currency",), "default_currency", "currency"),),
    money=("credits", "cost_type"),
)


# --- the file export Cloud Billing wrote to a bucket before the BigQuery export (deprecated) ---------
# `Account ID, Line Item, Start Time, End Time, Project, Measurement1, Measurement1 Total Consumption,
# Measurement1 Units, Credit1, Credit1 Amount, Credit1 Currency, Cost, Currency, Project Number,
# Project ID, Project Name, Project Labels, Description` (times with their offset, -07:00): its
# names as the BigQuery export's; `Cost` is before credits, each `CreditN Amount` a credit line.
FILE_NAMES = {"account id": "billing_account_id", "line item": "sku.id", "start time": "usage_start_time",
              "end time": "usage_end_time", "measurement1 total consumption": "usage.amount",
              "measurement1 units": "usage.unit", "project id": "project.id", "project name": "project.name",
              "description": "sku.description"}
SERVICE_IN_SKU = r"/services/([^/]+)/"  # com.google.cloud/services/compute-engine/VmimageN1Standard_1


def file_normalize(name: str) -> str:
    return FILE_NAMES.get(name.strip().lower(), name.strip().lower())


def _credit_numbers(columns) -> list[int]:
    return sorted(int(c[6:-7]) for c in columns if re.fullmatch(r"credit[0-9]+ amount", c))


def file_build(record: Record, columns: set[str]) -> list[dict]:
    """The usage line of a file-export row, then one credit line per CreditN Amount."""
    billed = billing.required_amount(record, "cost")
    currency = billing.required_text(record, "currency")
    sku, description = billing.text(record, "sku.id"), billing.text(record, "sku.description")
    service = re.search(SERVICE_IN_SKU, sku or "")
    usage = billing.row(
        provider="Google Cloud", billing_account_id=billing.text(record, "billing_account_id"),
        sub_account_id=billing.text(record, "project.id"), sub_account_name=billing.text(record, "project.name"),
        billed_cost=billed, effective_cost=billed, billing_currency=currency,
        charge_period_start=billing.required_moment(record, "usage_start_time"),
        charge_period_end=billing.moment(record, "usage_end_time"), charge_category="usage",
        charge_description=description, service_name=service[1] if service else None, sku_id=sku,
        instance_type=billing.instance_type_in(description),
        consumed_quantity=billing.quantity(record, "usage.amount"), consumed_unit=billing.text(record, "usage.unit"),
        pricing_category=_pricing(description), source_format="gcp_billing_file")
    lines = [usage]
    for number in _credit_numbers(columns):
        value = billing.amount(record, f"credit{number} amount")
        if value is None:
            continue
        other = billing.text(record, f"credit{number} currency")
        if other is not None and other != currency:
            raise BadValue(f"{record.name(f'credit{number} currency')} {other} is not the line's {currency}")
        lines.append({**usage, "billed_cost": value, "effective_cost": value, "charge_category": "credit",
                      "charge_category_raw": "credit", "pricing_category": None, "consumed_quantity": None,
                      "consumed_unit": None,
                      "charge_description": billing.text(record, f"credit{number}") or "credit"})
    return lines


def file_plan(fields: Fields) -> Plan:
    """`file_build` as SQL over whole columns, checks in its order; credits by `extra`."""
    b = Builder(fields)
    billed = b.amount("billed_cost", "cost", required=True)
    currency = b.column("billing_currency", b.text("currency"))
    b.check(f"{currency} IS NULL", f"'no ' || {fields.label('currency')}")
    sku, description = b.text("sku.id"), b.text("sku.description")
    b.column("provider", "'Google Cloud'")
    b.column("billing_account_id", b.text("billing_account_id"))
    b.column("sub_account_id", b.text("project.id"))
    b.column("sub_account_name", b.text("project.name"))
    b.column("effective_cost", billed)
    b.moment("charge_period_start", "usage_start_time", required=True)
    b.moment("charge_period_end", "usage_end_time")
    b.column("charge_category", "'usage'")
    b.column("charge_description", description)
    b.column("service_name", f"nullif(regexp_extract({sku}, {literal(SERVICE_IN_SKU)}, 1), '')")
    b.column("sku_id", sku)
    b.column("instance_type", f"bill_instance_type({description})")
    b.quantity("consumed_quantity", "usage.amount")
    b.column("consumed_unit", b.text("usage.unit"))
    lowered = f"lower(coalesce({description}, ''))"
    b.column("pricing_category", f"CASE WHEN contains({lowered}, 'spot') OR contains({lowered}, 'preemptible') "
                                 f"THEN 'spot' WHEN contains({lowered}, 'commitment') THEN 'commitment' "
                                 "ELSE 'on-demand' END")
    b.column("source_format", "'gcp_billing_file'")
    credits = []
    for number in _credit_numbers(fields.names()):
        amount = b.amount(f"_credit{number}", f"credit{number} amount")
        other = b.text(f"credit{number} currency")
        b.check(f"{amount} IS NOT NULL AND {other} IS NOT NULL AND {other} <> {currency}",
                f"{fields.label(f'credit{number} currency')} || ' ' || {other} || ' is not the line''s ' || {currency}")
        b.column(f"_credit{number}_name", f"coalesce({b.text(f'credit{number}')}, 'credit')")
        credits.append(number)
    carried = [c for c in billing.LINE_COLUMNS if c in b.columns and c not in (
        "billed_cost", "effective_cost", "charge_category", "pricing_category", "consumed_quantity",
        "consumed_unit", "charge_description")]
    extra = " UNION ALL ".join(
        f"""SELECT {', '.join(f'v_{c} AS {c}' for c in carried)}, v__credit{n} AS billed_cost,
                v__credit{n} AS effective_cost, 'credit' AS charge_category, 'credit' AS charge_category_raw,
                v__credit{n}_name AS charge_description, NULL AS pricing_category, NULL AS consumed_quantity,
                NULL AS consumed_unit, _line AS source_line, {sub} AS _sub
            FROM bill_lines WHERE _reason IS NULL AND NOT _python AND v__credit{n} IS NOT NULL"""
        for sub, n in enumerate(credits, start=1))
    return b.plan(extra or None)


FILE_FAMILY = billing.Family(
    kind=KIND, normalize=file_normalize, build=file_build, label="GCP billing file export",
    required=(("cost",), ("usage_start_time",), ("measurement1",)),
    per_file=(billing.FileValue(("currency",), "default_currency", "currency"),),
)


def _family(names: list[str]) -> billing.Family:
    """The file export's family for its header, else the BigQuery export's."""
    return FILE_FAMILY if FILE_FAMILY.accepts(names) and not FAMILY.accepts(names) else FAMILY


def sniff(name: str, head: str) -> bool:
    return FAMILY.sniff(name, head) or FILE_FAMILY.sniff(name, head)


def sniff_bytes(name: str, data: bytes) -> bool:
    return FAMILY.sniff_bytes(name, data)


def parse(lines, ctx: ParseContext):
    buffered = list(lines)
    first = next((text for _, text in buffered if text.strip()), "")
    return billing.parse_text(buffered, ctx, _family(billing.header_names(first.lstrip())))


parse_bytes = FAMILY.parse_bytes


totals = billing.totals
