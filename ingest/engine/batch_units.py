"""CSV as SQL for a definition that writes units and absent markers in its values
(Definition.units_in_text, .absent; nvidia-smi): the CTEs ending in `fields`, as batch_csv.py's.

One pattern a line (one match gives every value): each Field's column in its strict form, blanks
around it allowed; a number with its Field's unit after it or not; an absent marker (`[N/A]`) or
nothing as absent; a time as ISO-8601 or with a `2025/05/05` date; any other column text without
comma, quote or control character; as many fields as the header. A line that matches is typed by
batch_typed.py (`tight` when its times need no zone: an offset given, or naive read in UTC); an
unquoted line with another number of fields is refused with the width reason; every other line
goes to the generic reader, which cleans its values as csv_layout.clean does.
"""
from __future__ import annotations

import re

from ingest.engine import line_sql
from ingest.engine.batch_csv import _width_reason
from ingest.engine.batch_spellings import quote, scalars_of
from ingest.engine.definition import COUNT, NUMBER, PERCENT, READ_SQL_TYPE, TEXT, TIME, Definition

_CSV_CHAR = r'[^,"\x00-\x1f\x7f]'  # a `.` of the absent marker's regex, within one unquoted field


def _pieces(definition: Definition, header: list[str]) -> tuple[list[str], list[str]]:
    """The pattern of each header column and the names of the groups it captures, in order."""
    absent = re.sub(r"(?<!\\)\.", lambda _: _CSV_CHAR, definition.absent) if definition.absent else ""
    absent = f"|{absent}" if absent else ""
    where = {name: index for index, name in enumerate(header)}  # a repeated column: its last (as the reader's dict)
    at: dict[int, tuple] = {}  # position -> (Field, the name of its capture)
    for f in scalars_of(definition):
        for k, name in enumerate(n for n in f.spellings if n in where):
            at[where[name]] = (f, f"{f.column}__{k}")
    pieces, names = [], []
    for position in range(len(header)):
        if position not in at:
            pieces.append(line_sql.OTHER)
            continue
        f, c = at[position]
        if f.type == TIME:  # an offset apart: with one, no zone is needed (tight)
            day = f"{line_sql.DAY}|\\d{{4}}/\\d{{2}}/\\d{{2}}"
            pieces.append(f" *(?:((?:{day})[T ]{line_sql.CLOCK})({line_sql.OFFSET})?{absent})? *")
            names += [c, f"{c}_offset"]
        elif f.type == COUNT:
            pieces.append(f" *(?:([0-9]{{1,18}}){absent})? *")
            names.append(c)
        elif f.type in (NUMBER, PERCENT):
            unit = f"(?: *{re.escape(f.unit)})?" if f.unit and definition.units_in_text else ""
            pieces.append(f" *(?:({line_sql.DECIMAL}){unit}{absent})? *")
            names.append(c)
        elif f.type == TEXT:
            pieces.append(f" *(?:{absent[1:]}|({line_sql.TEXT}))? *" if absent else f" *({line_sql.TEXT}) *")
            names.append(c)
        else:  # money, lists, maps: the reader's
            pieces.append("(?!)")
    return pieces, names


def unit_fields(definition: Definition, header: list[str], zone: str | None) -> str:
    """CTEs ending in `fields` (as batch_csv.csv_fields) for lines under `header`. Binds
    $header_line, $quirk and $blank."""
    pieces, names = _pieces(definition, header)
    pattern = "^(" + ",".join(pieces) + ")$"
    columns, times = [], []
    for f in scalars_of(definition):
        given = sorted((name for name in names if name.startswith(f.column + "__") and not name.endswith("_offset")),
                       key=lambda name: int(name.rsplit("__", 1)[1]))  # in the Field's order of spellings
        if not given:
            columns.append(f"CAST(NULL AS VARCHAR) AS {f.column}_text, CAST(NULL AS VARCHAR) AS {f.column}_type")
            continue
        if f.type == TIME:  # its first spelling given
            c = given[0]
            times.append(c)
            text = f"nullif(replace(v.{c}, '/', '-') || v.{c}_offset, '')"
        else:  # the first spelling with a value, as the reader's used_name
            text = f"coalesce({', '.join(f'nullif(v.{c}, {chr(39) * 2})' for c in given)})"
        present = " OR ".join(f"v.{c} <> ''" for c in given[:1 if f.type == TIME else None])
        columns.append(f"{text} AS {f.column}_text, CASE WHEN {present} THEN '{READ_SQL_TYPE[f.type]}' END AS {f.column}_type")
    # naive times read in UTC, or every time with its offset: no zone to apply (batch_typed casts at once)
    tight = "matched" if zone == "UTC" or not times else \
        "matched AND " + " AND ".join(f"(v.{c} = '' OR v.{c}_offset <> '')" for c in times)
    return f"""
        split AS (
            SELECT line, raw, regexp_extract(raw, {quote(pattern)}, {names_sql(names)}) AS v
            FROM batch WHERE line > $header_line
        ), fields AS (
            SELECT line, raw, {tight} AS tight, matched AS object,
                   CASE WHEN NOT matched AND NOT regexp_matches(raw, $quirk) AND len(string_split(raw, ',')) <> {len(header)}
                        THEN {_width_reason(definition, len(header), "len(string_split(raw, ','))")} END AS misfit,
                   {", ".join(columns)}
            FROM (SELECT *, v.whole <> '' AS matched FROM split)
            WHERE matched OR NOT regexp_full_match(raw, $blank)  -- a blank line is skipped, never read
        )"""


def names_sql(names: list[str]) -> str:
    return "[" + ", ".join(quote(name) for name in ["whole", *names]) + "]"
