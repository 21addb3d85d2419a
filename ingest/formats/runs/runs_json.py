"""Training-run summaries as JSON: JSONL (one run per line) or one object/array (run_meta.json).

A load stages through runs_columnar (SQL, a batch of lines at a time); parse() (json_records.py) is
the record by record reading it falls back to for the records SQL leaves, and the reference it is
tested against.
"""
from __future__ import annotations

from ingest.engine.contract import ParseContext
from ingest.formats.runs import runs_columnar
from ingest.formats.runs.json_records import KIND, parse  # noqa: F401  (the parser contract's KIND and parse)
from ingest.formats.runs.run_record import run_totals

TABLES = ("runs", "run_evals")
SIGNS = ('"run_id"', '"start_time"', '"price_per_hour_usd"', '"estimated_cost_usd"', '"val_metric"')


def sniff(name: str, head: str) -> bool:
    """A JSON text that mentions run-summary fields."""
    return head.lstrip().startswith(("{", "[")) and any(sign in head for sign in SIGNS)


totals = run_totals


def stage(src, con, ctx: ParseContext):
    """Stage the file's runs, eval points and rejects (ingest/formats/runs/runs_columnar.py)."""
    return runs_columnar.stage(src, con, ctx)
