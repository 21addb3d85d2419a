"""JSON run summaries read record by record: JSONL (one run per line) or one object/array (run_meta.json).

What runs_columnar falls back to for the records SQL leaves (and for a file that is one JSON value),
and the reference the columnar staging is tested against; runs_json.parse is this parse().
"""
from __future__ import annotations

import json
from decimal import Decimal

from ingest.engine.contract import BadValue, Lines, ParseContext, Parsed, Reject
from ingest.formats.runs.run_record import build_run, collect, json_record, to_parsed, unknown_fields_warning
from ingest.settings import config

KIND = "runs"


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
