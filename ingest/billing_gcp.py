"""Google Cloud Billing exports into `billing_lines`: BigQuery rows flattened to CSV (dotted
names such as `service.description`) or newline-delimited JSON (nested objects), plain or .gz,
or Parquet.

`cost` is the billed cost before credits; each entry of `credits` (JSON, or the Python repr
GCP tools write: `[{'name': ..., 'amount': -5e-06, ...}]`) becomes a line of its own with
charge category `credit` and its (negative) amount, so credits stay visible and the net is the
sum. `cost_type` regular/tax/adjustment/rounding_error maps to usage/tax/adjustment/adjustment.
`labels` become tags; the machine type comes from the system label
`compute.googleapis.com/machine_spec`. The export has no line id: lines are keyed by content
(ingest/billing.py). Pricing: Spot/Preemptible SKUs are spot, Commitment SKUs commitment, other
usage on-demand (the export names no pricing model, so the raw value is NULL).
"""
from __future__ import annotations

from ingest import billing, values
from ingest.billing import Record
from ingest.contract import BadValue

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


FAMILY = billing.Family(
    kind=KIND, normalize=normalize, build=build, label="GCP billing export",
    required=(("cost",), ("currency",), ("usage_start_time",), ("service.description",)),
)


sniff, sniff_bytes, parse, parse_bytes = FAMILY.sniff, FAMILY.sniff_bytes, FAMILY.parse, FAMILY.parse_bytes


totals = billing.totals
