"""CSV as SQL: the CTEs that split a batch of CSV lines under the file's header.

A line without quotes or control characters (CSV_QUIRK) is split at its commas and each value
typed by its strict spelling (batch_spellings.py); a tight line (one regular expression over the
whole line) is read without trimming or typing value by value; an unquoted line with another
number of fields than the header is refused with the definition's width reason. Quoted lines go
to the generic reader. batch_typed.py types what `csv_fields` leaves in `fields`.
"""
from __future__ import annotations

from datetime import timezone

from ingest.engine import line_sql
from ingest.engine.contract import ParseContext
from ingest.engine.definition import COUNT, COUNT_LIST, MONEY, NUMBER, PERCENT, TEXT, TIME, Definition
from ingest.engine.batch_spellings import (CSV_COUNT, CSV_MONEY, CSV_NUMBER, ISO_NAIVE, ISO_WITH_OFFSET, lists_of,
                                           maps_of, quote, scalars_of)

# A CSV line Python's csv module might read otherwise than a split at commas: quotes, control characters.
CSV_QUIRK = r'["\x00-\x08\x0a-\x1f\x7f]'


def _width_reason(definition: Definition, width: int, fields: str = "fields") -> str:
    """SQL for the reason a line of `fields` (SQL) fields is refused under a header of `width`."""
    return quote(definition.width_reason.format(got="\x00", expected=width)).replace("\x00", f"' || {fields} || '")


def tight_pattern(definition: Definition, header: list[str], ctx: ParseContext | None) -> str | None:
    """The whole of a tight CSV line under `header`, for one match a line: each field's column in
    its strict spelling (or empty), a text without a blank at an edge, any other column without
    comma, quote or control character, as many fields as the header. Such a line is read without
    trimming or typing a value by pattern (the costliest steps when done for every value).
    None under a header of one column: no line is tight (a tight line could be blank, and a blank
    line is skipped, never read). Matched by Arrow (line_marks.csv_marked, column tight_marked)."""
    if len(header) <= 1:
        return None
    times = ISO_WITH_OFFSET + (f"|{ISO_NAIVE}" if ctx is not None and ctx.tz is timezone.utc else "")
    spelled = {COUNT: CSV_COUNT, NUMBER: CSV_NUMBER, PERCENT: CSV_NUMBER, MONEY: CSV_MONEY, TIME: times,
               TEXT: line_sql.TEXT}
    forms = {name: f"({spelled[f.type]})?" for f in scalars_of(definition) for name in f.spellings}
    for name in [f.column for f in lists_of(definition) + maps_of(definition)] + [i.field for i in definition.items]:
        forms[name] = ""  # a list, map or items given: not tight (the usual way)
    return ",".join(forms.get(name, line_sql.OTHER) for name in header)


def csv_fields(definition: Definition, header: list[str], ctx: ParseContext | None = None) -> str:
    """CTEs ending in `fields` for CSV lines under `header` (as json_fields): a line without
    quotes or control characters split at its commas; each value typed by its strict spelling
    (another spelling is no type SQL reads, so the line goes to the reader); a tight line
    (tight_pattern: the batch's column tight_marked, line_marks.csv_marked) without looking.
    Binds $header_line, $quirk and $blank."""
    where = {name: index + 1 for index, name in enumerate(header)}  # a repeated column: its last (as dict(zip))
    spelled = {COUNT: ("BIGINT", CSV_COUNT), NUMBER: ("DOUBLE", CSV_NUMBER), PERCENT: ("DOUBLE", CSV_NUMBER),
               MONEY: ("DOUBLE", CSV_MONEY)}
    scalars = scalars_of(definition)
    columns = []
    for f in scalars:
        found = [f"f[{where[name]}]" for name in f.spellings if name in where]
        text = ("CASE " + " ".join(f"WHEN trim({x}) <> '' THEN {x}" for x in found) + " END") if found else "CAST(NULL AS VARCHAR)"
        if found:  # a tight line's value has no blank to trim
            text = f"CASE WHEN tight THEN coalesce({', '.join(f'nullif({x}, {chr(39) * 2})' for x in found)}) ELSE {text} END"
        columns.append(f"{text} AS {f.column}_text")
    kinds = []
    for f in scalars:
        if f.type in spelled:
            name, pattern = spelled[f.type]
            kinds.append(f"CASE WHEN {f.column}_text IS NULL THEN NULL WHEN tight THEN '{name}' "
                         f"WHEN regexp_full_match({f.column}_text, '{pattern}') THEN '{name}' ELSE 'TEXT' END AS {f.column}_type")
        else:
            kinds.append(f"CASE WHEN {f.column}_text IS NOT NULL THEN 'VARCHAR' END AS {f.column}_type")
    nested = []  # a map or items written in CSV: the reader's (it refuses them, or reads them absent)
    for name in [f.column for f in maps_of(definition)] + [items.field for items in definition.items]:
        if name in where:
            nested.append(f"coalesce(trim(f[{where[name]}]) = '', true)")
    for f in maps_of(definition):
        columns.append(f"CAST(NULL AS STRUCT(key VARCHAR, value JSON)[]) AS {f.column}_entries, true AS {f.column}_plain")
    for items in definition.items:
        columns.append(f"CAST(NULL AS JSON[]) AS {items.field}_items, true AS {items.field}_plain")
    separator = definition.list_separators[-1]  # a comma cannot be inside an unquoted CSV field
    lists = []
    for f in lists_of(definition):
        at = f"f[{where[f.column]}]" if f.column in where else "CAST(NULL AS VARCHAR)"
        if f.type == COUNT_LIST:  # numbers written in CSV: the reader's
            nested.append(f"coalesce(trim({at}) = '', true)")
            lists.append(f"CAST(NULL AS VARCHAR[]) AS {f.column}_list")
        else:
            lists.append(f"CASE WHEN unquoted AND trim({at}) <> '' THEN string_split({at}, '{separator}') END AS {f.column}_list")
    return f"""
        split AS (
            SELECT line, raw, tight, CASE WHEN tight THEN true ELSE NOT regexp_matches(raw, $quirk) END AS unquoted,
                   string_split(raw, ',') AS f
            FROM (SELECT line, raw, tight_marked AS tight FROM batch WHERE line > $header_line)
            WHERE tight OR NOT regexp_full_match(raw, $blank)
        ), cut AS (
            SELECT line, raw, tight, unquoted {"".join(" AND " + n for n in nested)} AS object, {", ".join(columns + lists)},
                   CASE WHEN unquoted AND len(f) <> {len(header)} THEN {_width_reason(definition, len(header), "len(f)")}
                   END AS misfit  -- an unquoted line with another number of fields than the header: refused so
            FROM split
        ), fields AS (
            SELECT line, raw, tight, misfit, object, {", ".join(kinds)},
                   {", ".join(f"{f.column}_text" for f in scalars)}
                   {"".join(f", {f.column}_entries, {f.column}_plain" for f in maps_of(definition))}
                   {"".join(f", {i.field}_items, {i.field}_plain" for i in definition.items)}
                   {"".join(f", {f.column}_list, true AS {f.column}_plain" for f in lists_of(definition))}
            FROM cut
        )"""
