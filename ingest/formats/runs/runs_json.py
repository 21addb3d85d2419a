"""Training-run summaries as JSON: JSONL (one run per line) or one object/array (run_meta.json).

A load stages through runs_columnar (SQL, a batch of lines at a time); parse() is the record by
record reading it falls back to for the records SQL leaves, and the reference it is tested against.
"""
from __future__ import annotations

import json
from decimal import Decimal

from ingest.settings import config
from ingest.engine.contract import BadValue, Lines, ParseContext, Parsed, Reject
from ingest.formats.runs.run_record import build_run, collect, json_record, run_totals, to_parsed, unknown_fields_warning

KIND = "runs"
TABLES = ("runs", "run_evals")
SIGNS = ('"run_id"', '"start_time"', '"price_per_hour_usd"', '"estimated_cost_usd"', '"val_metric"')


def sniff(name: str, head: str) -> bool:
    """A JSON text that mentions run-summary fields."""
    return head.lstrip().startswith(("{", "[")) and any(sign in head for sign in SIGNS)


def parse(lines: Lines, ctx: ParseContext) -> Parsed:
    numbered = list(lines)
    whole = _whole_document(numbered)
    records = whole if whole is not None else _json_lines(numbered)
    parsed, latest, unknown = Parsed(), {}, set()
    prices = config.load().prices  # runs without a price are priced from the catalog
    for line, record in records:
        if isinstance(record, Reject):
            parsed.rejects.append(record)
            continue
        try:
            if not isinstance(record, dict):
                raise BadValue(f"expected a JSON object, got {type(record).__name__}")
            collect(latest, *build_run(record, line, ctx, KIND, prices, unknown))
            parsed.accepted += 1
        except BadValue as error:
            parsed.rejects.append(Reject(line, str(error), _raw(numbered, line)))
    parsed.warnings.extend(unknown_fields_warning(unknown))
    return to_parsed(latest, parsed)


totals = run_totals


def stage(src, con, ctx: ParseContext):
    """Stage the file's runs, eval points and rejects (ingest/formats/runs/runs_columnar.py)."""
    from ingest.formats.runs import runs_columnar

    return runs_columnar.stage(src, con, ctx)


def _whole_document(numbered: list[tuple[int, str]]) -> list[tuple[int, object]] | None:
    """The records of a file that is one JSON value (an object or array), else None."""
    try:
        document = json.loads("\n".join(text for _, text in numbered), parse_float=Decimal)
    except (json.JSONDecodeError, RecursionError):  # nested too deep to be one document: read as lines
        return None
    first = next((n for n, text in numbered if text.strip()), 1)
    if isinstance(document, list):
        return [(first, item) for item in document]
    return [(first, document)]


def _json_lines(numbered: list[tuple[int, str]]) -> list[tuple[int, object]]:
    return [(line, json_record(line, text)) for line, text in numbered if text.strip()]


def _raw(numbered: list[tuple[int, str]], line: int) -> str:
    return numbered[line - 1][1] if 0 < line <= len(numbered) else ""
