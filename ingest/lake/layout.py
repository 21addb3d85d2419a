"""The lake's layout: which warehouse table lives where, how it is partitioned, load ids and file names.

docs/lake.md states the same contract for any engine (DuckDB, Spark, Trino).
"""
from __future__ import annotations

import hashlib
import re

# Tables a load writes (every row carries its load_id), each with the column whose UTC month
# partitions it (`month=YYYY-MM/`), or None (one folder). run_evals has no load_id in the
# warehouse; in the lake its rows carry the load's, so a reload of a run replaces its evals.
LOADED: dict[str, str | None] = {
    "gpu_samples": "sampled_at",
    "serving_windows": "window_start",
    "billing_lines": "charge_period_start",
    "runs": None,        # started_at may be NULL (a run without a start): not a partition key
    "run_evals": None,
    "rejects": None,
}
# Rows that arrive again replace older ones sharing these columns (latest committed load wins),
# as ingest/engine/wh_merge.py REPLACE_BY does in the embedded warehouse.
REPLACE_BY: dict[str, tuple[str, ...]] = {
    "runs": ("run_id",),
    "run_evals": ("run_id",),  # all evals of a run come from the load that brought its latest row
    "billing_lines": ("line_key",),
    "gpu_samples": ("host", "gpu_index", "sampled_at"),
    "serving_windows": ("window_key",),  # and overlapping windows of a series (views.py)
}
# Tables the derive step (DuckDB or Spark, both running ingest/derived/sql) computes from the loaded
# ones, written under derived/<table>/generation=<id>/. run_cost_estimates holds what
# run_trace_costs.refresh sets on imported runs in the embedded file (cost from traced GPU-hours),
# applied by the runs view.
DERIVED: tuple[str, ...] = (
    "gpu_minutes", "gpu_gaps", "gpu_rollup_settings", "run_gpu_time", "gpu_minutes_allocated",
    "run_gpu_energy", "run_gpu_days", "gpu_days", "billing_line_runs", "billing_match_settings",
    "bill_allocation_days", "bill_allocation_settings", "run_cost_estimates",
)
# Tables the app writes while it reads (alerts, snoozes, the decisions log, importers' watermarks):
# they stay in the local DuckDB file ($MLCOST_DB) beside a lake, never in the lake.
LOCAL = ("alerts", "alert_deliveries", "alert_snoozes", "decisions", "import_watermarks", "unloads",
         "schema_stamp")
RUN_COST_COLUMNS = ("cost_usd", "price_per_hour_usd", "cost_source", "flags")

LOAD_ID = re.compile(r"(\d{1,19})-\d+\.parquet")
LEDGER = "_ledger"
TABLES = "tables"
DERIVED_DIR = "derived"
CURRENT = "derived/_current.json"


def load_id(sha256: str, kind: str, options: str) -> int:
    """The load id of one file's content read as `kind` with `options` (load_options() text):
    the first 60 bits of sha256("kind\\noptions\\nsha256"), a positive BIGINT. The same file read
    the same way always gets the same id, on any machine."""
    digest = hashlib.sha256(f"{kind}\n{options}\n{sha256}".encode()).hexdigest()
    return int(digest[:15], 16)


def data_file(table: str, load: int, n: int, month: str | None = None) -> str:
    """The path of a load's n-th file of `table`, relative to the lake."""
    part = f"month={month}/" if month else ""
    return f"{TABLES}/{table}/{part}{load}-{n}.parquet"


def ledger_entry(load: int) -> str:
    return f"{LEDGER}/{load}.json"


def load_of(name: str) -> int | None:
    """The load id a data file's name starts with (None: not a data file of the layout)."""
    found = LOAD_ID.fullmatch(name.rsplit("/", 1)[-1])
    return int(found[1]) if found else None
