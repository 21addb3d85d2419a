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
FILE_EXPORT, picked by its header (`Measurement1`, `Start Time`, `Cost`): see its section below.

Both are definitions (EXPORT, FILE_EXPORT); ingest/formats/billing/bill_definition.py reads them
(docs/formats/bills.md).
"""
from __future__ import annotations

from ingest.engine.contract import Lines, ParseContext, Parsed
from ingest.engine.staging import Source, Staged
from ingest.formats.billing import bill_family, bill_gcp_json, billing
from ingest.formats.billing.bill_definition import Bill
from ingest.formats.billing.bill_steps import (Amount, Case, Category, Constant, Contains, CreditColumns,
                                               CreditList, Extract, FirstOf, InstanceType, MapCell, MapValue,
                                               Moment, MonthSpan, Quantity, Same, Tags, Text)

KIND = "billing_gcp"
TABLES = (bill_family.TABLE,)
BINARY = True  # also reads Parquet: the loader hands it the bytes

CATEGORIES = {"regular": "usage", "tax": "tax", "adjustment": "adjustment",
              "roundingerror": "adjustment"}
MACHINE_LABEL = "compute.googleapis.com/machine_spec"


def normalize(name: str) -> str:
    return name.strip().lower()


def _pricing_of(text: str) -> tuple:
    """Spot/Preemptible SKUs are spot, Commitment SKUs commitment, other usage on-demand."""
    return (Contains("_spot", of=text, needle="spot", value="spot", drop=""),
            Contains("_preemptible", of=text, needle="preemptible", value="spot", drop=""),
            Contains("_commitment", of=text, needle="commitment", value="commitment", drop=""),
            Constant("_on_demand", "on-demand"),
            FirstOf("_sku_pricing", of=("_spot", "_preemptible", "_commitment", "_on_demand")))


EXPORT = Bill(
    kind=KIND, label="GCP billing export", normalize=normalize,
    detect=(("cost",), ("usage_start_time",), ("service.description",)),
    per_file=(bill_family.FileValue(("currency",), "default_currency", "currency"),),
    json_lines=bill_gcp_json.stage_lines,  # JSON lines staged in SQL a batch at a time
    money=("credits", "cost_type"),
    steps=(
        Text("_cost_type", ("cost_type",)),
        Constant("_regular", "regular"),
        FirstOf("charge_category_raw", of=("_cost_type", "_regular")),
        Text("charge_description", ("sku.description",)),
        Text("_month", ("invoice.month",)),
        MonthSpan("billing_period_start", "billing_period_end", of="_month", label="invoice.month"),
        MapCell("_system", "system_labels"),
        Amount("billed_cost", ("cost",), required=True),
        Constant("provider", "Google Cloud"),
        Text("billing_account_id", ("billing_account_id",)),
        Text("sub_account_id", ("project.id",)),
        Text("sub_account_name", ("project.name",)),
        Same("effective_cost", of="billed_cost"),  # the export has no amortized cost; credits are lines
        Text("billing_currency", ("currency",), required=True),
        Moment("charge_period_start", ("usage_start_time",), required=True),
        Moment("charge_period_end", ("usage_end_time",)),
        Category("charge_category", of="charge_category_raw", table=CATEGORIES, label="cost_type"),
        Text("service_name", ("service.description",)),
        Text("sku_id", ("sku.id",)),
        Text("resource_id", ("resource.global_name", "resource.name")),
        Text("resource_name", ("resource.name",)),
        MapValue("_machine", of="_system", keys=(MACHINE_LABEL,)),
        InstanceType("_sku_instance", of=("charge_description",)),
        FirstOf("instance_type", of=("_machine", "_sku_instance")),
        Text("region_id", ("location.region", "location.location")),
        Quantity("consumed_quantity", ("usage.amount",)),
        Text("consumed_unit", ("usage.unit",)),
        *_pricing_of("charge_description"),
        Constant("_no_pricing", None),
        Case("pricing_category", of="charge_category_raw", cases={"regular": "_sku_pricing"}, default="_no_pricing"),
        Tags("tags", "labels", label="labels"),
        Constant("source_format", "gcp_billing"),
        CreditList("credits"),  # each credit a line of its own
    ),
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


FILE_EXPORT = Bill(
    kind=KIND, label="GCP billing file export", normalize=file_normalize,
    detect=(("cost",), ("usage_start_time",), ("measurement1",)),
    per_file=(bill_family.FileValue(("currency",), "default_currency", "currency"),),
    steps=(
        Amount("billed_cost", ("cost",), required=True),
        Text("billing_currency", ("currency",), required=True),
        Text("sku_id", ("sku.id",)),
        Text("charge_description", ("sku.description",)),
        Constant("provider", "Google Cloud"),
        Text("billing_account_id", ("billing_account_id",)),
        Text("sub_account_id", ("project.id",)),
        Text("sub_account_name", ("project.name",)),
        Same("effective_cost", of="billed_cost"),
        Moment("charge_period_start", ("usage_start_time",), required=True),
        Moment("charge_period_end", ("usage_end_time",)),
        Constant("charge_category", "usage"),
        Extract("service_name", of="sku_id", pattern=SERVICE_IN_SKU),
        InstanceType("instance_type", of=("charge_description",)),
        Quantity("consumed_quantity", ("usage.amount",)),
        Text("consumed_unit", ("usage.unit",)),
        *_pricing_of("charge_description"),
        Same("pricing_category", of="_sku_pricing"),
        Constant("source_format", "gcp_billing_file"),
        CreditColumns(currency="billing_currency"),  # each CreditN Amount a line of its own
    ),
)


def _bill(names: list[str]) -> Bill:
    """The file export's definition for its header, else the BigQuery export's."""
    return FILE_EXPORT if FILE_EXPORT.family.accepts(names) and not EXPORT.family.accepts(names) else EXPORT


def stage(src: Source, con, ctx: ParseContext) -> Staged:
    """Stage a GCP billing export (CSV, Parquet or JSON lines; or the file export's CSV) into staging."""
    with src.open_binary() as stream:
        head = stream.read(1 << 16).decode("utf-8-sig", errors="replace")
    return _bill(billing.header_names(head.lstrip())).stage(src, con, ctx)


def sniff(name: str, head: str) -> bool:
    return EXPORT.sniff(name, head) or FILE_EXPORT.sniff(name, head)


def parse(lines: Lines, ctx: ParseContext) -> Parsed:
    buffered = list(lines)
    first = next((text for _, text in buffered if text.strip()), "")
    return _bill(billing.header_names(first.lstrip())).parse(buffered, ctx)


sniff_bytes, parse_bytes, totals = EXPORT.sniff_bytes, EXPORT.parse_bytes, billing.totals
