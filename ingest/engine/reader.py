"""The generic per-line reader: one record at a time, a Definition's rules in order.

It reads what SQL cannot (a quoted CSV line, a line that is not JSON, a number written as JSON
text, a value only Python's readers take) and names the exact reason a record is refused: the
first rule of the definition that fails. It is also the whole reader of records that come as
Python values (the serving-metrics importer builds windows through `build_row`).

This module holds the step loop (`build_record`: one record through the definition's steps) and
the lines-to-records side (`parse` for a whole file, `read_lines` for the lines the SQL pass
leaves, JSON or CSV, `totals`). A field's value, a span and an Items' rows are read by
reader_values.py; the run steps (Extras, Hours, HourlyCost, FromRate) and the catalog prices by
reader_run_steps.py.
"""
from __future__ import annotations

import csv
import hashlib
import json
import math
import re
from decimal import Decimal, localcontext

from ingest.engine import csv_layout, values
from ingest.settings import config
from ingest.engine.contract import BadValue, FileRefused, Lines, ParseContext, Parsed, Reject
from ingest.engine.definition import (TIME, CatalogCost, CountOf, Default, Definition, Field, HashedId, Items, OneOf,
                                      Required, Span, SumAtMost, csv_header, header_problem, is_csv_header,
                                      FromFileName, FromOption, Within)
from ingest.engine.run_rules import Extras, FromRate, HourlyCost, Hours, Prefer, Tags
from ingest.engine.reader_run_steps import (CENT, catalog_price, read_extras, read_from_rate, read_hourly_cost,
                                            read_hours, reading_plan, with_extra)
from ingest.engine.file_steps import held_row
from ingest.engine.reader_values import key_part, read_items, read_span, read_value, used_name

SECONDS_PER_HOUR = Decimal(3600)


def build_row(definition: Definition, record: object, line: int, ctx: ParseContext, prices: config.Prices) -> dict:
    """The table row for one record (a dict of source names); raises BadValue with the reason."""
    return build_record(definition, record, line, ctx, prices)[0]


def build_record(definition: Definition, record: object, line: int, ctx: ParseContext,
                 prices: config.Prices, unknown: set[str] | None = None) -> tuple[dict, dict[str, list[dict]]]:
    """The record's row and its items' rows by table (Items); raises BadValue with the reason.
    Keys kept as tags by Extras are added to `unknown` (for the load's warning)."""
    if not isinstance(record, dict):
        raise BadValue(f"expected a JSON object, got {type(record).__name__}")
    got: dict[str, object] = {}    # column -> value read
    named: dict[str, str] = {}     # column -> the spelling the record used (for reasons)
    row: dict[str, object] = {}
    children: dict[str, list[dict]] = {}
    flags: list[str] = []          # notes on the row (Definition.flags)
    extra: dict[str, str] = {}     # tags from keys outside the vocabulary (Extras)
    plan = reading_plan(definition)
    for step in definition.steps:
        if type(step) in RUN_STEPS:
            if isinstance(step, Extras):
                extra = read_extras(definition, step, record, got, unknown)
            elif isinstance(step, Hours):
                read_hours(step, got, named, flags)
            elif isinstance(step, HourlyCost):
                read_hourly_cost(step, record, got, prices, flags)
            else:
                read_from_rate(step, got, flags)
            continue
        if isinstance(step, Field):
            named[step.column] = used_name(record, step)
            got[step.column] = read_value(step, record, named[step.column], ctx, separators=definition.list_separators)
        elif isinstance(step, Span):
            got[step.end], got[step.length] = read_span(step, got, named)
        elif isinstance(step, Required):
            if got[step.column] is None:
                raise (FileRefused if step.refuses_file else BadValue)(step.reason)
        elif isinstance(step, SumAtMost):
            if sum(got[p] or 0 for p in step.parts) > got[step.whole]:
                raise BadValue(step.reason.format(**{c: got[c] or 0 for c in (*step.parts, step.whole)}))
        elif isinstance(step, CountOf):
            if got[step.column] is None and got[step.items]:
                got[step.column] = len(got[step.items])
        elif isinstance(step, CatalogCost):
            price = None
            if got[step.column] is None:
                price = catalog_price(step, got, prices)
                if price is not None:
                    price = values.fit_money(price, step.too_large)
                    with localcontext(prec=60):
                        got[step.column] = values.fit_money(
                            price * Decimal(repr(got[definition.span.length])) / SECONDS_PER_HOUR,
                            f"{step.too_large} x hours")
            row[step.price] = price
            row[step.source] = None if got[step.column] is None else "derived" if price is not None else "given"
        elif isinstance(step, OneOf):
            if got[step.column] is not None:
                found = step.mapping.get(got[step.column].lower())
                if found is None:
                    raise BadValue(step.reason.format(value=got[step.column]))
                got[step.column] = found
        elif isinstance(step, Default):
            if got[step.column] is None:
                words = re.split(r"[^a-z0-9]+", (got.get(step.of) or "").lower()) if step.words else []
                got[step.column] = step.then if any(word in step.words for word in words) else step.value
        elif isinstance(step, HashedId):
            if got[step.column] is None or got[step.column] in step.stand_ins:
                identity = "|".join(key_part(got[part]) for part in step.parts) if not step.raw else \
                    "|".join(key_part(got[part]) if definition.field(part).type == TIME
                             else str(record.get(definition.field(part).spellings[0], "")) for part in step.parts)
                got[step.column] = step.prefix + hashlib.sha256(identity.encode()).hexdigest()[:step.length]
        elif isinstance(step, Items):
            children[step.table] = read_items(step, record.get(step.field), got, ctx)
        elif isinstance(step, Within):
            value = got[step.column]
            if value is not None and not step.low <= value <= step.high:
                raise BadValue(step.reason.format(name=named[step.column], value=value, low=step.low, high=step.high))
        elif isinstance(step, FromOption):
            if getattr(ctx, step.option, None) and not (step.when_absent and got[step.column] is not None):
                got[step.column] = getattr(ctx, step.option)
        elif isinstance(step, FromFileName):
            if got[step.column] is None:
                got[step.column] = step.of(ctx.source)
        elif isinstance(step, Tags):
            if got[step.column] is None:
                found = {name: record.get(definition.field(column).spellings[0]) for name, column in step.parts}
                got[step.column] = {name: str(value) for name, value in sorted(found.items()) if not values.is_absent(value)}
        elif isinstance(step, Prefer):
            if got[step.of] is not None and (got[step.when] or "").upper() == step.equals.upper():
                got[step.column] = got[step.of]
    for items in definition.items:  # the parent's key as the record ends up with it
        for child in children[items.table]:
            child[items.parent] = got[items.parent]
    row.update(got)
    for hidden in plan.hidden:
        row.pop(hidden, None)  # read for the rules, not columns (a measure is kept in the tags)
    if extra:
        row.update(with_extra(definition, extra, row))
    if definition.flags:
        row[definition.flags] = flags or None
    for given in definition.given:
        row[given.column] = None if got[given.of] is None else "given"
    row[definition.key.column] = "|".join(key_part(got[part]) for part in definition.key.parts)
    row["source_kind"] = definition.kind
    row["source_line"] = line
    return row, children


RUN_STEPS = frozenset((Extras, Hours, HourlyCost, FromRate))


# --- lines to records --------------------------------------------------------------------------
def parse(definition: Definition, lines: Lines, ctx: ParseContext, prices: config.Prices | None = None) -> Parsed:
    """Rows in file order (a repeated key keeps its last record); prices default to the catalog."""
    prices = prices if prices is not None else config.load().prices
    parsed, latest, unknown = Parsed(), {}, set()
    key = definition.key.column
    records = _records(definition, lines, parsed)
    if definition.whole_document:
        numbered = list(lines)
        records = _whole_document(numbered)
        if records is None:
            records = _records(definition, numbered, parsed)
    for line, record, raw in records:
        try:
            row, children = build_record(definition, record, line, ctx, prices, unknown)
        except FileRefused:
            raise
        except BadValue as error:
            parsed.rejects.append(Reject(line, str(error), raw))
            continue
        latest.pop(row[key], None)
        latest[row[key]] = row, children
        parsed.accepted += 1
    parsed.tables[definition.table] = [row for row, _ in latest.values()]
    for items in definition.items:  # a replaced record's items go with it
        parsed.tables[items.table] = [child for _, children in latest.values() for child in children[items.table]]
    parsed.warnings.extend(unknown_warning(definition, unknown))
    return parsed


def unknown_warning(definition: Definition, unknown: set[str]) -> list[str]:
    """The load's word on the keys Extras kept as tags (at most 20 named)."""
    if not unknown:
        return []
    [step] = definition.rules(Extras)
    names = sorted(unknown)
    shown = ", ".join(names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "")
    return [step.warning.format(names=shown)]


def _whole_document(numbered: list[tuple[int, str]]) -> list[tuple[int, object, str]] | None:
    """(line, record, raw) of a file that is one JSON value: each item of an array, or the one
    object, numbered with the value's first line; None when the file is not one JSON value."""
    try:
        document = json.loads("\n".join(text for _, text in numbered), parse_float=Decimal)
    except (json.JSONDecodeError, RecursionError):  # nested too deep to be one document: read as lines
        return None
    first, raw = next(((n, text) for n, text in numbered if text.strip()), (1, ""))
    return [(first, item, raw) for item in (document if isinstance(document, list) else [document])]


def _records(definition: Definition, lines: Lines, parsed: Parsed):
    """(line, record, raw text) for JSONL or CSV; unreadable lines go straight to parsed.rejects.

    The first non-blank line decides: text with a comma that is not a JSON object is a CSV
    header; anything else means JSON lines (so a JSONL file with a broken first line loses
    that line, not the file).
    """
    header: list[str] | None = None
    first = True
    for line, text in lines:
        if not text.strip():
            continue
        opening, first = first, False
        if opening and (definition.csv_only or is_csv_header(text)):
            header = csv_header(text)
            reason = header_problem(definition, header)
            if reason:
                parsed.rejects.append(Reject(line, reason, text))
                return
            continue
        record = (_csv_record(line, text, header, parsed, definition) if header is not None
                  else _json_record(line, text, parsed))
        if record is not None:
            yield line, record, text
    if first and definition.empty_reason:  # not one non-blank line
        parsed.rejects.append(Reject(0, definition.empty_reason, ""))


def _csv_record(line: int, text: str, header: list[str], parsed: Parsed,
                definition: Definition | None = None) -> dict | None:
    """One CSV line's fields by header name; None (and a reject) when it cannot be split to the header."""
    try:
        fields = next(csv.reader([text]))
    except csv.Error as error:
        parsed.rejects.append(Reject(line, f"unreadable CSV: {error}", text[:500]))
        return None
    if len(fields) != len(header):
        width = definition.width_reason if definition else "has {got} fields, the header has {expected}"
        parsed.rejects.append(Reject(line, width.format(got=len(fields), expected=len(header)), text))
        return None
    if definition is not None and definition.csv_trim:
        fields = [field.strip() for field in fields]
    if definition is not None and (definition.units_in_text or definition.absent):
        return csv_layout.clean(definition, dict(zip(header, fields)))
    return dict(zip(header, fields))


def _json_record(line: int, text: str, parsed: Parsed) -> object | None:
    """One JSON line's value; None (and a reject) when it is not JSON."""
    try:
        return json.loads(text, parse_float=Decimal)
    except json.JSONDecodeError as error:
        parsed.rejects.append(Reject(line, f"not valid JSON: {error.msg} at column {error.colno}", text))
    except RecursionError:
        parsed.rejects.append(Reject(line, "JSON nested too deeply to read", text[:500]))
    return None


def read_lines(definition: Definition, lines: Lines, ctx: ParseContext, prices: config.Prices,
               header: list[str] | None, unknown: set[str] | None = None) -> Parsed:
    """Rows from the given lines, JSON (no `header`) or CSV under `header`, each row kept (the
    caller settles repeated keys): the lines the SQL pass leaves to this reader. Keys kept as tags
    go to `unknown` when given (the caller words the warning once), else to the warnings."""
    parsed, warn, unknown = Parsed(), unknown is None, set() if unknown is None else unknown
    for line, text in lines:
        if not text.strip():
            continue
        record = (_csv_record(line, text, header, parsed, definition) if header is not None
                  else _json_record(line, text, parsed))
        if record is None:
            continue
        try:
            row, children = build_record(definition, record, line, ctx, prices, unknown)
            parsed.rows(definition.table).append(row)
            for table, rows in children.items():  # with the record's line: the caller settles replaced records
                parsed.rows(table).extend({**child, "source_line": line} for child in rows)
            parsed.accepted += 1
        except FileRefused:
            raise
        except BadValue as error:
            if definition.identity:  # the file's order still counts the row (file_steps.py)
                parsed.rows(definition.table).append(held_row(definition, record, line, ctx, str(error), text))
                continue
            parsed.rejects.append(Reject(line, str(error), text))
    if warn:
        parsed.warnings.extend(unknown_warning(definition, unknown))
    return parsed


def totals(definition: Definition, parsed: Parsed) -> dict:
    """The definition's summary figures (Total) over the parsed rows."""
    rows = parsed.tables.get(definition.table, [])
    figures: dict[str, object] = {}
    for total in definition.totals:
        present = [r[total.column] for r in rows if total.column and r.get(total.column) is not None]
        if total.how == "rows":
            figures[total.name] = len(rows)
        elif total.how == "sum":
            figures[total.name] = sum(present)
        elif total.how == "money":
            figures[total.name] = str(sum(present, Decimal(0)).quantize(CENT)) if present else None
        elif total.how == "float":
            figures[total.name] = round(math.fsum(present), 9) if present else None
        elif total.how == "present":
            figures[total.name] = len(present)
        elif total.how == "absent":
            figures[total.name] = len(rows) - len(present)
        elif total.how == "equals":
            figures[total.name] = sum(r[total.column] == total.value for r in rows)
    return figures
