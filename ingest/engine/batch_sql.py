"""A Definition as SQL: JSON lines or CSV typed and checked a batch of lines at a time.

A record loads straight from SQL when it is plain: a JSON object whose times are ISO-8601 text
with an offset (or naive, read in UTC), counts JSON integers, other figures JSON numbers, text
fields strings without surrounding blanks, no key repeated, money given with at most 6 decimals
or derived from the catalog (each distinct name looked up once, the cost in exact integer SQL),
and every rule of the definition holds. A CSV line is plain when it has no quote or control
character and as many fields as the header (split at commas in SQL): its counts ASCII digits,
other figures ASCII decimals, money up to 12 decimals, the same times and rules. A CSV line
without quotes and with the wrong number of fields is refused here, with its reason.

Every other line (not JSON, quoted CSV, a number given as text in JSON, a rule that fails) goes
to the generic reader (ingest/engine/reader.py), which applies the same definition and names the
exact reason; so a file loads as it would line by line, in bounded memory.
"""
from __future__ import annotations

import json
import logging
import re
from datetime import timezone
from decimal import Decimal

import duckdb
import pyarrow as pa

from ingest.engine import line_sql, staging, values
from ingest.settings import config
from ingest.engine.contract import ParseContext
from ingest.engine import reader
from ingest.engine.definition import (COUNT, COUNT_LIST, MONEY, NUMBER, PERCENT, TEXT, TEXT_LIST, TEXT_MAP, TIME, CatalogCost, CountOf,
                                      Default, Definition, Field, HashedId, Items, OneOf, Required, Span, SumAtMost, csv_header,
                                      header_problem, is_csv_header)
from ingest.engine.definition import FromFileName, FromOption, Prefer, Tags, Within
from ingest.engine.definition import Extras, FromRate, HourlyCost, Hours
from ingest.engine.staging import Source, Staged

ISO_WITH_OFFSET = (r"\d{4}-\d{2}-\d{2}[T ]([01]\d|2[0-3]):[0-5]\d(:[0-5]\d(\.\d{1,6})?)?"
                   r"(Z|[+-]([01]\d|2[0-3]):[0-5]\d)")
ISO_NAIVE = r"\d{4}-\d{2}-\d{2}([T ]([01]\d|2[0-3]):[0-5]\d(:[0-5]\d(\.\d{1,6})?)?)?"
# Python's str.strip() removes these; a text value starting or ending with one goes to the reader.
EDGE_BLANK = r"(^|\x01)[\s\x1c-\x1f\x85\xa0\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}]" \
             r"|[\s\x1c-\x1f\x85\xa0\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}](\x01|$)"
MONEY_TEXT = r"\d{1,9}(\.\d{1,6})?"  # read back exactly from JSON's double (DuckDB re-prints numbers)
LONG_NUMBER = r"[0-9.]{17,}"        # a number written with more digits than a double keeps
# CSV values are text, read exactly: these spellings read alike in DuckDB and Python (int, float, Decimal).
CSV_COUNT = r"[0-9]{1,18}|[0-9]{1,15}\.0{1,17}"  # 1.0 too (CodeCarbon's gpu_count), exact as a double to 15 digits
CSV_NUMBER = r"[0-9]{1,15}(\.[0-9]{1,17})?([eE][+-]?[0-9]{1,3})?"  # an exponent too: DuckDB and float() round alike
CSV_MONEY = r"[0-9]{1,14}(\.[0-9]{1,12})?"
# A CSV line Python's csv module might read otherwise than a split at commas: quotes, control characters.
CSV_QUIRK = r'["\x00-\x08\x0a-\x1f\x7f]'
BLANK = r"[\s\x0b\x1c-\x1f\x85\xa0\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}]"
TRAILING_COMMA = r",\s*[}\]]"  # DuckDB's JSON reader takes `[1,]` and `{"a": 1,}`; Python's json refuses them
EARLIEST, LATEST = "TIMESTAMPTZ '1990-01-01 00:00:00+00'", "TIMESTAMPTZ '2100-01-01 00:00:00+00'"
VECTOR_ROWS = 2048  # DuckDB's vector size
JOINED_BYTES = 64 << 20  # lines typed by one pass
SCALARS = (TEXT, TIME, COUNT, NUMBER, PERCENT, MONEY)
# An item's number or count (Items) read alike by DuckDB and Python: no exponent, no more digits than a double keeps.
ITEM_NUMBER = r"-?(0|[1-9][0-9]{0,14})(\.[0-9]{1,16})?"
ITEM_COUNT = r"-?(0|[1-9][0-9]{0,17})"
# A map's single value as Python's str() writes it: text, a whole number, true or false, null ('').
MAP_VALUE_TYPES = "('VARCHAR', 'UBIGINT', 'BIGINT', 'BOOLEAN', 'NULL')"
log = logging.getLogger(__name__)


def stage(definition: Definition, src: Source, con, ctx: ParseContext) -> Staged:
    """Stage a file's rows and rejects in `con`, JSON lines or CSV, a batch at a time."""
    prices = config.load().prices
    if definition.whole_document and _one_document(src):  # an array of records, or one over many lines
        first = next(((line, text) for line, text in staging.lines(src) if text.strip()), None)
        if first is not None and first[1].lstrip("\ufeff").lstrip().startswith("["):
            staged = _stage_array(definition, src, con, ctx, prices, first)
            if staged is not None:
                return staged
        parsed = reader.parse(definition, staging.lines(src), ctx, prices)
        log.debug("%s: one JSON document, read by the generic reader", src.name)
        staging.insert_parsed(con, parsed, src.name)
        return Staged(parsed.accepted, totals(definition, con), parsed.warnings)
    accepted, header, header_line, passes, unknown = 0, None, 0, None, set()
    for items in definition.items:  # an item's row with its record's line, until repeated keys are settled
        con.execute(f"CREATE OR REPLACE TEMP TABLE {_by_line(items)} AS SELECT *, 0::BIGINT AS source_line "
                    f"FROM {items.table} LIMIT 0")
    for batch in _joined(staging.line_batches(src), JOINED_BYTES):
        # in DuckDB-sized chunks: one Arrow chunk would be scanned by one thread
        con.register("batch", pa.Table.from_batches(batch.to_batches(max_chunksize=VECTOR_ROWS)))
        try:
            if passes is None:
                # JSON lines: the batch's every line is staged below, a too-long one refused there
                header_line, text = line_sql.first_filled(con, src, refuse_before=False)
                if header_line is None:
                    continue
                if is_csv_header(text) or definition.csv_only:
                    line_sql.refuse_too_long(con, src, before=header_line)  # not read as CSV below
                    header = csv_header(text)
                    reason = header_problem(definition, header)
                    if reason:  # the file is refused at its header, as line by line
                        staging.add_rejects(con, src.name, [(header_line, reason, text)])
                        return Staged(0, totals(definition, con))
                    passes = (_typed_sql(definition, ctx, _csv_fields(definition, header, ctx), csv=True,
                                         zone=line_sql.sql_zone(con, ctx.tz)),)
                else:
                    passes = (_typed_sql(definition, ctx, _lenient_fields(definition, ctx), lenient=True),
                              _typed_sql(definition, ctx, _json_fields(definition, "rest"), zone=line_sql.sql_zone(con, ctx.tz)),
                              _typed_sql(definition, ctx, _json_fields(definition, "batch"),
                                         zone=line_sql.sql_zone(con, ctx.tz)))  # strict alone
            accepted += _stage_batch(definition, con, src, ctx, prices, passes, header, header_line, unknown)
        finally:
            con.unregister("batch")
    if passes is None and definition.empty_reason:  # not one non-blank line
        staging.add_rejects(con, src.name, [(0, definition.empty_reason, "")])
    con.execute("DROP TABLE IF EXISTS typed; DROP TABLE IF EXISTS rest")  # the last batch's: memory for what follows
    figures = totals(definition, con)
    _settle_items(definition, con)
    return Staged(accepted, figures, reader.unknown_warning(definition, unknown))


ONE_VALUE_BYTES = 16 << 20  # a file that is one JSON object over many lines is read whole up to this size
HEAD_BYTES = 1 << 20


def _one_document(src: Source) -> bool:
    """Whether a file is one JSON value rather than JSON lines: it opens with `[` (an array of
    records), or with an object whose first line is not JSON and the whole file (at most
    ONE_VALUE_BYTES) is one value."""
    with src.open_binary() as stream:
        head = stream.read(HEAD_BYTES)
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff").lstrip()
    if text.startswith("["):
        return True
    if not text.startswith("{"):
        return False
    try:
        json.loads(text.split("\n", 1)[0])
        return False  # a whole first line: JSON lines
    except (json.JSONDecodeError, RecursionError):
        pass
    with src.open_binary() as stream:
        whole = stream.read(ONE_VALUE_BYTES + 1)
    if len(whole) > ONE_VALUE_BYTES:
        return False
    try:
        json.loads(whole.decode("utf-8").lstrip("\ufeff"))
        return True
    except (json.JSONDecodeError, RecursionError, UnicodeDecodeError):
        return False


ARRAY_ELEMENTS = 100_000  # elements of a JSON array typed by one pass
def _stage_array(definition: Definition, src: Source, con, ctx: ParseContext, prices, first: tuple[int, str]) -> Staged | None:
    """Stage a JSON array's elements (DuckDB's array reader, streamed: each element's text as
    written, so a long number stays exact) as JSON lines numbered by their place, so a repeated key keeps its last element; then every row and reject takes the
    array's first line (and a reject its text), as the generic reader numbers them. None when
    DuckDB cannot read the array (the reader says what is wrong)."""
    line, text = first
    con.execute("SET preserve_insertion_order = true")  # an element's place is its order in the array
    try:
        con.execute("CREATE OR REPLACE TEMP TABLE elements AS SELECT row_number() OVER () AS line, CAST(json AS VARCHAR) AS raw "
                    "FROM read_json_objects(?, format = 'array', compression = ?)", [str(src.path), src.duckdb_compression])
    except duckdb.Error:
        return None
    finally:
        con.execute("SET preserve_insertion_order = false")
    for items in definition.items:
        con.execute(f"CREATE OR REPLACE TEMP TABLE {_by_line(items)} AS SELECT *, 0::BIGINT AS source_line "
                    f"FROM {items.table} LIMIT 0")
    count = staging.count(con, "elements")
    passes = (_typed_sql(definition, ctx, _lenient_fields(definition, ctx), lenient=True),
              _typed_sql(definition, ctx, _json_fields(definition, "rest")),
              _typed_sql(definition, ctx, _json_fields(definition, "batch")))
    accepted, unknown = 0, set()
    for start in range(0, count, ARRAY_ELEMENTS):
        elements = con.sql(f"SELECT line, raw FROM elements WHERE line > {start} AND line <= {start + ARRAY_ELEMENTS} "
                           "ORDER BY line").to_arrow_table()
        con.register("batch", pa.Table.from_batches(elements.to_batches(max_chunksize=VECTOR_ROWS)))
        try:
            accepted += _stage_batch(definition, con, src, ctx, prices, passes, None, 0, unknown)
        finally:
            con.unregister("batch")
    con.execute("DROP TABLE elements")
    figures = totals(definition, con)  # the last element of a repeated key is kept here
    _settle_items(definition, con)
    con.execute(f"UPDATE {definition.table} SET source_line = ?", [line])
    con.execute("UPDATE rejects SET line = ?, raw = left(?, 500) WHERE path = ?", [line, text, src.name])
    return Staged(accepted, figures, reader.unknown_warning(definition, unknown))


def _by_line(items: Items) -> str:
    return f"{items.table}_by_line"


def _settle_items(definition: Definition, con) -> None:
    """Into each Items' table: the items of the records kept (a record replaced by a later one
    with the same key takes its items with it)."""
    for items in definition.items:
        con.execute(f"INSERT INTO {items.table} BY NAME SELECT i.* EXCLUDE (source_line) FROM {_by_line(items)} i "
                    f"SEMI JOIN {definition.table} r ON r.{definition.key.column} = i.{items.parent} "
                    "AND r.source_line = i.source_line")
        con.execute(f"DROP TABLE {_by_line(items)}")


def _joined(batches, limit: int):
    """The file's line batches joined up to about `limit` bytes: each batch runs a few long
    statements whose planning costs as much as typing thousands of lines (500k serving windows:
    5.7 CPU seconds in 8 MB batches, 3.9 in 64 MB; 609 MB peak)."""
    held, size = [], 0
    for batch in batches:
        held.append(batch)
        size += batch.nbytes
        if size >= limit:
            yield pa.concat_tables(held)
            held, size = [], 0
    if held:
        yield pa.concat_tables(held)


def totals(definition: Definition, con) -> dict:
    """The definition's summary figures over the staged rows (a repeated key counted once).
    Without Totals: none (the format sums up itself, and settles repeated keys)."""
    if not definition.totals:
        return {}
    table = definition.table
    staging.keep_last(con, table)
    sql = {"rows": "count(*)", "sum": "coalesce(sum({c}), 0)", "money": "sum({c})", "float": "fsum({c})",
           "present": "count({c})", "absent": "count(*) - count({c})", "equals": "count(*) FILTER (WHERE {c} = ?)"}
    figures = definition.totals
    params = [t.value for t in figures if t.how == "equals"]
    found = con.execute(f"SELECT {', '.join(sql[t.how].format(c=t.column) for t in figures)} FROM {table}",
                        params).fetchall()[0]
    out: dict[str, object] = {}
    for total, value in zip(figures, found):
        if total.how == "money":
            value = None if value is None else str(Decimal(value).quantize(Decimal("0.01")))
        elif total.how == "float":
            value = None if value is None else round(value, 9)
        elif total.how == "sum":
            value = int(value)
        out[total.name] = value
    return out


def _stage_batch(definition: Definition, con, src: Source, ctx: ParseContext, prices, passes: tuple[str, ...],
                 header: list[str] | None, header_line: int, unknown: set[str] | None = None) -> int:
    """Stage one batch of lines (JSON, or CSV under `header`); returns the rows it accepted.
    Each of `passes` types the lines the one before did not load (JSON: lenient, then strict);
    the lines none loads go to the generic reader."""
    params = {}
    if header is not None:  # unquoted lines with the wrong number of fields: refused by the typed pass (_csv_fields)
        params = {"header_line": header_line, "quirk": CSV_QUIRK, "blank": line_sql.BLANK_LINE}
    accepted, source = 0, "batch"
    if len(passes) == 3:  # JSON: lenient then strict, or strict alone when most lines are the strict read's
        passes = passes[2:] if _mostly_quirks(definition, con) else passes[:2]
    for typed_sql in passes:
        if source == "rest" and not con.execute("SELECT count(*) FROM rest").fetchall()[0][0]:
            break  # all loaded: the strict read is not even planned (~80 ms a batch)
        con.execute(typed_sql, params)
        for cost in definition.rules(CatalogCost):
            _price_from_catalog(definition, cost, con, prices)
        for hourly in definition.rules(HourlyCost):
            _catalog_to_reader(hourly, con, prices)
        accepted += con.execute(_insert_typed(definition)).fetchall()[0][0]
        for items in definition.items:
            con.execute(_insert_items(definition, items))
        con.execute(f"INSERT INTO rejects (path, line, reason, raw) SELECT $path, line, reason, left(raw, 500) "
                    f"FROM typed JOIN {source} USING (line) WHERE reason IS NOT NULL", {"path": src.name})
        con.execute(f"CREATE OR REPLACE TEMP TABLE rest AS SELECT line, raw FROM typed JOIN {source} USING (line) "
                    "WHERE NOT ok AND reason IS NULL")
        source = "rest"
    suspects = con.execute("SELECT line, raw FROM rest ORDER BY line").fetchall()
    if suspects:  # the exact reason, or a quirk the SQL does not read: the generic reader
        log.debug("%s: %d lines read by the generic reader", src.name, len(suspects),
                  extra={"reader_lines": [line for line, _ in suspects]})  # which lines took which path
        parsed = reader.read_lines(definition, suspects, ctx, prices, header, unknown)
        for items in definition.items:
            parsed.tables[_by_line(items)] = parsed.tables.pop(items.table, [])
        staging.insert_parsed(con, parsed, src.name)
        accepted += parsed.accepted
    return accepted


def _catalog_to_reader(cost: HourlyCost, con, prices) -> None:
    """An HourlyCost that flags nothing leaves a run without a cost or price in SQL (_run_checks):
    the runs whose names the price catalog knows go to the reader, which prices them (Decimal)."""
    if cost.open or cost.unpriced or prices is None:
        return
    for catalog, name, multiplier, _ in cost.per:
        counted = f" AND {multiplier} <> 0" if multiplier else ""  # no multiplier (or 0): no price (the reader's rule)
        names = con.execute(f"SELECT DISTINCT {name} FROM typed WHERE ok AND {cost.column} IS NULL AND {cost.price} IS NULL "
                            f"AND {cost.hours} IS NOT NULL AND {name} IS NOT NULL{counted}").fetchall()
        priced = [n for (n,) in names if (prices.instance(n) if catalog == "instance" else prices.gpu(n)) is not None]
        if priced:
            con.execute(f"UPDATE typed SET ok = false WHERE ok AND {cost.column} IS NULL{counted} AND list_contains(?, {name})",
                        [priced])


def _width_reason(definition: Definition, width: int, fields: str = "fields") -> str:
    """SQL for the reason a line of `fields` (SQL) fields is refused under a header of `width`."""
    return _quote(definition.width_reason.format(got="\x00", expected=width)).replace("\x00", f"' || {fields} || '")


QUIRK_SAMPLE = 1000  # lines of a batch looked at to choose its passes


def _mostly_quirks(definition: Definition, con) -> bool:
    """Whether most of the batch's first lines have a quirk (_quirk: a map, a list, eval points),
    so the lenient read would hand them all to the strict one (runs with tags: 90 % of a fleet's)."""
    share = con.execute(f"SELECT avg(CAST(regexp_matches(raw, '{_quirk(definition)}') AS INTEGER)) "
                        f"FROM (SELECT raw FROM batch WHERE ltrim(raw) <> '' LIMIT {QUIRK_SAMPLE})").fetchall()[0][0]
    return share is not None and share > 0.5


def _scalars(definition: Definition, *types: str) -> list:
    return [f for f in definition.fields if f.type in (types or SCALARS)]


def _lists(definition: Definition) -> list:
    return [f for f in definition.fields if f.type in (TEXT_LIST, COUNT_LIST)]


def _list_item_plain(f: Field) -> str:
    """SQL over an item's JSON type `x` (and text `u`): a list item SQL reads as the reader does."""
    if f.type == COUNT_LIST:  # whole numbers within bounds; null items are skipped
        return "x IN ('UBIGINT', 'BIGINT', 'NULL')"
    return "x = 'VARCHAR'"


def _count_items_plain(f: Field) -> str:
    """SQL: a count list's every item within the field's bounds (either sign), else the reader's."""
    if f.type != COUNT_LIST:
        return ""
    return (f"AND coalesce(list_bool_and(list_transform({f.column}_items, lambda u: u IS NULL "
            f"OR coalesce(abs(TRY_CAST(u AS BIGINT)) <= {f.maximum}, false))), true)")


def _maps(definition: Definition) -> list:
    return [f for f in definition.fields if f.type == TEXT_MAP]


def _iso_utc(value: str) -> str:
    """SQL for a TIMESTAMPTZ as Python's isoformat() of the UTC instant."""
    micro = f"microsecond({value}) % 1000000"  # DuckDB's microsecond() counts from the minute
    return (f"strftime({value} AT TIME ZONE 'UTC', '%Y-%m-%dT%H:%M:%S') || CASE WHEN {micro} <> 0 "
            f"THEN '.' || lpad(CAST({micro} AS VARCHAR), 6, '0') ELSE '' END || '+00:00'")


def _item_plain(items: Items, x: str) -> str:
    """SQL: the JSON item `x` is one SQL reads as the reader does: an object without a repeated
    key or another key, each field of its JSON type in a plain spelling, a required one given, no
    time (a Since is worked out by the reader)."""
    known = [name for f in items.fields for name in f.spellings]
    checks = [f"json_type({x}) = 'OBJECT'", f"len(json_keys({x})) = len(list_distinct(json_keys({x})))",
              f"list_has_all({known!r}, json_keys({x}))"]
    for f in items.fields:
        for name in f.spellings:
            kind, text = f"json_type({x}, '$.{name}')", f"json_extract_string({x}, '$.{name}')"
            absent = f"coalesce({kind}, 'NULL') = 'NULL'"
            if f.type == COUNT:
                shape = f"{kind} IN ('UBIGINT', 'BIGINT') AND regexp_full_match({text}, '{ITEM_COUNT}')"
            elif f.type in (NUMBER, PERCENT):
                low = "" if f.minimum is None else f" AND TRY_CAST({text} AS DOUBLE) >= {f.minimum}"
                high = " AND TRY_CAST({text} AS DOUBLE) <= 100" if f.type == PERCENT else ""
                shape = f"{kind} IN ('UBIGINT', 'BIGINT', 'DOUBLE') AND regexp_full_match({text}, '{ITEM_NUMBER}'){low}{high}"
            else:  # text, times and the rest: the reader's
                shape = "false"
            checks.append(f"({absent} OR ({shape}))")
    for rule in items.steps:
        if isinstance(rule, Required):
            f = next(f for f in items.fields if f.column == rule.column)
            checks.append("(" + " OR ".join(f"coalesce(json_type({x}, '$.{n}'), 'NULL') <> 'NULL'" for n in f.spellings) + ")")
    return " AND ".join(f"coalesce({c}, false)" for c in checks)


def _insert_items(definition: Definition, items: Items) -> str:
    """INSERT the items of the plain rows of `typed` into the Items' by-line table."""
    cast = {COUNT: "BIGINT", NUMBER: "DOUBLE", PERCENT: "DOUBLE"}
    columns = []
    for f in items.fields:
        if f.type in cast:
            found = [f"TRY_CAST(json_extract_string(item, '$.{n}') AS {cast[f.type]})" for n in f.spellings]
            columns.append(f"coalesce({', '.join(found)}) AS {f.column}")
    return f"""
        INSERT INTO {_by_line(items)} BY NAME
        SELECT {items.parent}, seq, {", ".join(columns)}, line AS source_line
        FROM (SELECT line, {definition.key.column} AS {items.parent}, unnest({items.field}_items) AS item,
                     unnest(range(len({items.field}_items))) AS seq
              FROM typed WHERE ok AND {items.field}_items IS NOT NULL)"""


def _insert_typed(definition: Definition) -> str:
    """INSERT the plain rows of `typed` into the definition's table; returns the count."""
    key_parts = []
    for part in definition.key.parts:
        if definition.field(part).type == TIME:  # as Python's isoformat() of the UTC instant
            key_parts.append(_iso_utc(part))
        else:
            key_parts.append(f"coalesce(CAST({part} AS VARCHAR), '')")
    key = f"concat_ws('|', {', '.join(key_parts)}) AS {definition.key.column}, "
    if definition.key.parts == (definition.key.column,) or not definition.key.stored:  # a field is the key, or none
        key = ""
    given = [f"CASE WHEN {g.of} IS NOT NULL THEN 'given' END AS {g.column}" for g in definition.given]
    derived = [f"{c.source}, {c.price}" for c in definition.rules(CatalogCost)]
    derived += [f"{c.column}, {c.source}" for c in definition.rules(HourlyCost)]
    derived += [h.seconds for h in definition.rules(Hours)] + [r.source for r in definition.rules(FromRate) if r.source]
    columns = [f.column for f in definition.stored] + derived + given
    return f"""
        INSERT INTO {definition.table} BY NAME
        SELECT {key}{", ".join(columns)},
               '{definition.kind}' AS source_kind, line AS source_line
        FROM typed WHERE ok"""


def _json_fields(definition: Definition, source: str = "batch") -> str:
    """CTEs ending in `fields` for JSON lines: each field's value as text (`<c>_text`, the first
    spelling present), its JSON type (`<c>_type`), whether the line is one plain object, each list."""
    scalars, lists, maps = _scalars(definition), _lists(definition), _maps(definition)
    names = [name for f in scalars for name in f.spellings] + [f.column for f in lists]
    names += [f.column for f in maps] + [items.field for items in definition.items]
    names += [name for f in lists for name in f.spellings[1:]]  # a list's other spelling: the reader's
    structure = "{" + ", ".join(f'"{name}": "JSON"' for name in names) + "}"
    position = {name: index + 1 for index, name in enumerate(names)}
    value, kind = {}, {}
    for f in scalars:
        # The first spelling whose value is not absent (missing, null or blank text), as the reader's.
        cases = [(f"v_{position[name]}", f"t_{position[name]}") for name in f.spellings]
        present = [f"({t} IS NOT NULL AND {t} <> 'NULL' AND NOT ({t} = 'VARCHAR' AND trim({v}) = ''))"
                   for v, t in cases]
        value[f.column] = "CASE " + " ".join(f"WHEN {p} THEN {v}" for p, (v, _) in zip(present, cases)) + " END"
        kind[f.column] = "CASE " + " ".join(f"WHEN {p} THEN {t}" for p, (_, t) in zip(present, cases)) + " END"
    list_texts = "".join(f""",
                   CASE WHEN object THEN json_extract_string(j.{f.column}, '$[*]') END AS {f.column}_items,
                   CASE WHEN object THEN json_type(j.{f.column}, '$[*]') END AS {f.column}_types""" for f in lists)
    list_fields = "".join(f""",
                   CASE WHEN t_{position[f.column]} = 'ARRAY' THEN {f.column}_items END AS {f.column}_list,
                   coalesce(t_{position[f.column]}, 'NULL') IN ('NULL', 'ARRAY')
                       {"".join(f" AND coalesce(t_{position[n]}, 'NULL') = 'NULL'" for n in f.spellings[1:])}
                       AND coalesce(list_bool_and(list_transform({f.column}_types, lambda x: {_list_item_plain(f)})), true)
                       {_count_items_plain(f)} AS {f.column}_plain""" for f in lists)
    list_texts += "".join(f""",
                   CASE WHEN object THEN j.{f.column} END AS {f.column}_json""" for f in maps)
    list_texts += "".join(f""",
                   CASE WHEN object THEN json_extract(j.{i.field}, '$[*]') END AS {i.field}_each""" for i in definition.items)
    for f in maps:  # an object without a repeated name, each value single; an empty name is the reader's
        t = f"t_{position[f.column]}"
        list_fields += f""",
                   CASE WHEN {t} = 'OBJECT' AND len(json_keys({f.column}_json)) = len(list_distinct(json_keys({f.column}_json)))
                        THEN map_entries(CAST({f.column}_json AS MAP(VARCHAR, JSON))) END AS {f.column}_entries,
                   coalesce({t}, 'NULL') = 'NULL' OR ({f.column}_entries IS NOT NULL AND coalesce(list_bool_and(list_transform(
                       {f.column}_entries, lambda e: e.key <> ''
                           AND coalesce(json_type(e.value) IN {MAP_VALUE_TYPES}, true)
                           AND (coalesce(json_type(e.value) NOT IN ('UBIGINT', 'BIGINT'), true)
                                OR regexp_full_match(CAST(e.value AS VARCHAR), '{ITEM_COUNT}')))), true)) AS {f.column}_plain"""
    for i in definition.items:
        t = f"t_{position[i.field]}"
        list_fields += f""",
                   CASE WHEN {t} = 'ARRAY' THEN {i.field}_each END AS {i.field}_items,
                   coalesce({t}, 'NULL') = 'NULL' OR ({t} = 'ARRAY'
                       AND coalesce(list_bool_and(list_transform({i.field}_each, lambda x: {_item_plain(i, 'x')})), true)) AS {i.field}_plain"""
    return f"""
        parsed AS (  -- each line's JSON read twice: its keys, and the JSON text of each field's value
            SELECT line, raw, TRY(json_keys(raw)) AS keys, TRY(json_transform(raw, '{structure}')) AS j
            FROM {source} WHERE ltrim(raw) <> ''
        ), objects AS (  -- an object without a repeated key (Python keeps a repeat's last value, SQL its first)
            SELECT line, raw, j, coalesce(keys IS NOT NULL AND j IS NOT NULL AND regexp_matches(raw, '^[ \t\r\n]*[{{]')
                                          AND NOT regexp_matches(raw, '{TRAILING_COMMA}')
                                          AND len(keys) = list_unique(keys){_known_keys(definition)}, false) AS object
            FROM parsed
        ), texts AS (  -- each field's JSON text once (NULL for null or missing)
            SELECT line, raw, object, {", ".join(f"CAST(j.{name} AS VARCHAR) AS x_{index + 1}" for index, name in enumerate(names))}
                   {list_texts}
            FROM objects
        ), read AS (  -- each value typed by its JSON text's first character
            SELECT *, {", ".join(f"{_json_type(f'x_{index + 1}')} AS t_{index + 1}" for index in range(len(names)))}
            FROM texts
        ), valued AS (
            SELECT *, {", ".join(f"{_json_value(f'x_{index + 1}', f't_{index + 1}')} AS v_{index + 1}" for index in range(len(names)))}
            FROM read
        ), fields AS (
            SELECT line, raw, object,
                   {", ".join(f"{value[f.column]} AS {f.column}_text, {kind[f.column]} AS {f.column}_type" for f in scalars)}
                   {list_fields}
            FROM valued
        )"""


def _known_keys(definition: Definition) -> str:
    """SQL (to AND): with Extras, a record's every key is one the definition reads (others are
    kept as tags by the reader)."""
    if not definition.rules(Extras):
        return ""
    known = sorted({name for f in definition.fields for name in f.spellings} | {i.field for i in definition.items})
    return f" AND list_has_all({known!r}, keys)"


def _quirk(definition: Definition) -> str:
    """A line the lenient read may take otherwise than Python: any match sends it to the strict
    read. A string without escapes holds no quote, so `"key":` is always a key (a nested one only
    costs a strict read); numbers the lenient read would round or cast (text, true, 1.5 or 1e3 as
    a count, long digits) and text that is not a JSON string or has a blank at an edge are all
    caught here."""
    def keys(*types: str) -> str:
        return "|".join(name for f in _scalars(definition, *types) for name in f.spellings)

    return "|".join((
        r"\\",                                    # an escape: a key or text spelled with escapes
        r"[0-9.]{17,}", r"[0-9.][eE][-+]?[0-9]",   # more digits than a double keeps; an exponent
        TRAILING_COMMA,
        r"^\s*[^{\s]",                              # not an object
        r'"\s+:',                                   # a blank before a key's colon (keys are counted as `":`)
        rf'"(?:{keys(COUNT)})"\s*:\s*(?:[^-0-9n\s]|-[^0-9]|n[^u]|-?[0-9]+[.eE])',
        rf'"(?:{keys(NUMBER, PERCENT, MONEY)})"\s*:\s*(?:[^-0-9n\s]|-[^0-9]|n[^u])',
        rf'"(?:{keys(TEXT, TIME)})"\s*:\s*(?:[^"n\s]|n[^u])',
        *(rf'"{f.column}"\s*:' for f in _lists(definition) + _maps(definition)),  # lists, maps: the strict read
        *(rf'"{items.field}"\s*:' for items in definition.items),
        rf':\s*"{BLANK}', rf'{BLANK}"\s*[,}}\]]',    # a string starting or ending with a blank
    ))


def _zoned(text: str, zone: str | None) -> str:
    """SQL (a WHEN of a CASE): a naive ISO-8601 `text` read in `zone` (an IANA name DuckDB knows,
    line_sql.sql_zone), as Python reads it; within 3 hours of a change of offset (summer time) it
    is left to the reader (Python's rule, fold=0). Nothing when naive times are UTC or unknown."""
    if zone in (None, "UTC"):
        return ""
    return (f"WHEN regexp_full_match({text}, '{ISO_NAIVE}') "
            f"THEN {line_sql.instant(text, zone).replace('$zone', _quote(zone))} ")


def _time_ok(ctx: ParseContext, text: str) -> str:
    """SQL: `text` is ISO-8601 that DuckDB reads as Python does (naive only when read in UTC)."""
    patterns = [ISO_WITH_OFFSET] + ([ISO_NAIVE] if ctx.tz is timezone.utc else [])
    return " OR ".join(f"regexp_full_match({text}, '{p}')" for p in patterns)


def _lenient_fields(definition: Definition, ctx: ParseContext) -> str:
    """CTEs ending in `typed` for JSON lines: every field read straight to its type by one
    json_transform, trusted only on lines without a quirk (_quirk) whose every key is a known
    field with a value (`object`; a repeated key, where Python keeps the last value and SQL the
    first, fails it: a string without escapes holds no quote, so each `":` ends a key)."""
    sql_type = {TEXT: "VARCHAR", TIME: "VARCHAR", COUNT: "BIGINT", NUMBER: "DOUBLE", PERCENT: "DOUBLE",
                MONEY: "VARCHAR"}  # money as DuckDB prints the double, checked as the strict read does
    scalars = _scalars(definition)
    structure = "{" + ", ".join(f'"{name}": "{sql_type[f.type]}"' for f in scalars for name in f.spellings) + "}"
    filled = " + ".join(f"CAST(v.{name} IS NOT NULL AS INTEGER)" for f in scalars for name in f.spellings)
    columns = []
    for f in scalars:
        found = [f"nullif(v.{name}, '')" if f.type in (TEXT, TIME) else f"v.{name}" for name in f.spellings]
        columns.append(f"{found[0] if len(found) == 1 else f'coalesce({chr(44).join(found)})'} AS {f.column}_text")
    typed = [f"CASE WHEN {_time_ok(ctx, f'{f.column}_text')} THEN TRY_CAST({f.column}_text AS TIMESTAMPTZ) END AS {f.column}"
             for f in _scalars(definition, TIME)]
    typed += [f"{f.column}_text AS {f.column}" for f in _scalars(definition, COUNT, NUMBER, PERCENT, TEXT)]
    typed += [f"CASE WHEN regexp_full_match({f.column}_text, '{MONEY_TEXT}') THEN CAST({f.column}_text AS DECIMAL(38, 12)) "
              f"END AS {f.column}" for f in _scalars(definition, MONEY)]
    typed += [f"CAST(NULL AS VARCHAR[]) AS {f.column}" for f in _lists(definition)]
    typed += [f"CAST(NULL AS MAP(VARCHAR, VARCHAR)) AS {f.column}" for f in _maps(definition)]
    typed += [f"CAST(NULL AS JSON[]) AS {items.field}_items" for items in definition.items]
    return f"""
        read AS (
            SELECT line, raw, quirk, CASE WHEN NOT quirk THEN TRY(json_transform(raw, '{structure}')) END AS v
            FROM (SELECT line, raw, regexp_matches(raw, '{_quirk(definition)}') AS quirk FROM batch WHERE ltrim(raw) <> '')
        ), fields AS (  -- a line with a quirk is the strict read's: not transformed above  -- as many keys (each `":`) as known fields with a value: no key repeated, none unknown
            SELECT line, raw, coalesce(NOT quirk AND v IS NOT NULL
                                       AND (strlen(raw) - strlen(replace(raw, '":', ''))) // 2 = {filled}, false) AS object,
                   {", ".join(columns)}
            FROM read
        ), typed AS (
            SELECT *, {", ".join(typed)}
            FROM fields
        )"""


def _tight_pattern(definition: Definition, header: list[str], ctx: ParseContext | None) -> str:
    """The whole of a tight CSV line under `header`, for one match a line: each field's column in
    its strict spelling (or empty), a text without a blank at an edge, any other column without
    comma, quote or control character, as many fields as the header. Such a line is read without
    trimming or typing a value by pattern (the costliest steps when done for every value)."""
    times = ISO_WITH_OFFSET + (f"|{ISO_NAIVE}" if ctx is not None and ctx.tz is timezone.utc else "")
    spelled = {COUNT: CSV_COUNT, NUMBER: CSV_NUMBER, PERCENT: CSV_NUMBER, MONEY: CSV_MONEY, TIME: times,
               TEXT: line_sql.TEXT}
    forms = {name: f"({spelled[f.type]})?" for f in _scalars(definition) for name in f.spellings}
    for name in [f.column for f in _lists(definition) + _maps(definition)] + [i.field for i in definition.items]:
        forms[name] = ""  # a list, map or items given: not tight (the usual way)
    return ",".join(forms.get(name, line_sql.OTHER) for name in header)


def _csv_fields(definition: Definition, header: list[str], ctx: ParseContext | None = None) -> str:
    """CTEs ending in `fields` for CSV lines under `header` (as _json_fields): a line without
    quotes or control characters split at its commas; each value typed by its strict spelling
    (another spelling is no type SQL reads, so the line goes to the reader); a tight line
    (_tight_pattern) without looking. Binds $header_line, $quirk and $blank."""
    where = {name: index + 1 for index, name in enumerate(header)}  # a repeated column: its last (as dict(zip))
    spelled = {COUNT: ("BIGINT", CSV_COUNT), NUMBER: ("DOUBLE", CSV_NUMBER), PERCENT: ("DOUBLE", CSV_NUMBER),
               MONEY: ("DOUBLE", CSV_MONEY)}
    scalars = _scalars(definition)
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
    for name in [f.column for f in _maps(definition)] + [items.field for items in definition.items]:
        if name in where:
            nested.append(f"coalesce(trim(f[{where[name]}]) = '', true)")
    for f in _maps(definition):
        columns.append(f"CAST(NULL AS STRUCT(key VARCHAR, value JSON)[]) AS {f.column}_entries, true AS {f.column}_plain")
    for items in definition.items:
        columns.append(f"CAST(NULL AS JSON[]) AS {items.field}_items, true AS {items.field}_plain")
    separator = definition.list_separators[-1]  # a comma cannot be inside an unquoted CSV field
    # one column: a tight line could be blank (a blank line is skipped, never read)
    tight = f"regexp_full_match(raw, {_quote(_tight_pattern(definition, header, ctx))})" if len(header) > 1 else "false"
    lists = []
    for f in _lists(definition):
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
            FROM (SELECT line, raw, {tight} AS tight FROM batch WHERE line > $header_line)
            WHERE tight OR NOT regexp_full_match(raw, $blank)
        ), cut AS (
            SELECT line, raw, tight, unquoted {"".join(" AND " + n for n in nested)} AS object, {", ".join(columns + lists)},
                   CASE WHEN unquoted AND len(f) <> {len(header)} THEN {_width_reason(definition, len(header), "len(f)")}
                   END AS misfit  -- an unquoted line with another number of fields than the header: refused so
            FROM split
        ), fields AS (
            SELECT line, raw, tight, misfit, object, {", ".join(kinds)},
                   {", ".join(f"{f.column}_text" for f in scalars)}
                   {"".join(f", {f.column}_entries, {f.column}_plain" for f in _maps(definition))}
                   {"".join(f", {i.field}_items, {i.field}_plain" for i in definition.items)}
                   {"".join(f", {f.column}_list, true AS {f.column}_plain" for f in _lists(definition))}
            FROM cut
        )"""


def _typed_sql(definition: Definition, ctx: ParseContext, fields_sql: str, csv: bool = False,
               lenient: bool = False, zone: str | None = None) -> str:
    """The statement typing and checking a batch into TEMP TABLE `typed` (`ok`: plain and loadable
    straight from SQL) from the CTEs `fields_sql` (_json_fields, or _csv_fields when `csv`; or
    _lenient_fields, which end in the typed values themselves and vouch for their types and blanks)."""
    allowed = {TEXT: "('VARCHAR')", TIME: "('VARCHAR')", COUNT: "('UBIGINT', 'BIGINT')",
               NUMBER: "('UBIGINT', 'BIGINT', 'DOUBLE')", PERCENT: "('UBIGINT', 'BIGINT', 'DOUBLE')",
               MONEY: "('UBIGINT', 'BIGINT', 'DOUBLE')"}
    scalars, lists = _scalars(definition), _lists(definition)
    plain = [f"coalesce({f.column}_type IN {allowed[f.type]}, true)" for f in scalars]
    plain += [f"{f.column}_plain" for f in lists + _maps(definition)]
    plain += [f"{items.field}_plain" for items in definition.items]
    checks = _checks(definition, json_strict=not (csv or lenient))
    if not lenient:
        texts = [f"coalesce({f.column}, '')" for f in _scalars(definition, TEXT)]
        texts += [f"coalesce(array_to_string({f.column}_list, chr(1)), '')" for f in lists if f.type == TEXT_LIST]
        tight = "tight" if csv else "false"  # a tight CSV line (_tight_pattern): its texts and times are plain
        plain_check = (" AND ".join(plain) + f" AND CASE WHEN {tight} THEN true "
                       f"ELSE NOT regexp_matches(concat_ws(chr(1), {', '.join(texts)}), '{EDGE_BLANK}') END")
        typed = [f"CASE WHEN {tight} THEN TRY_CAST({f.column}_text AS TIMESTAMPTZ) WHEN {_time_ok(ctx, f'{f.column}_text')} "
                 f"THEN TRY_CAST({f.column}_text AS TIMESTAMPTZ) {_zoned(f'{f.column}_text', zone)}END AS {f.column}"
                 for f in _scalars(definition, TIME)]
        typed += [f"TRY_CAST({f.column}_text AS BIGINT) AS {f.column}" for f in _scalars(definition, COUNT)]
        typed += [f"TRY_CAST({f.column}_text AS DOUBLE){_divided(f)} AS {f.column}" for f in _scalars(definition, NUMBER, PERCENT)]
        typed += [f"CASE WHEN regexp_full_match({f.column}_text, '{CSV_MONEY if csv else MONEY_TEXT}') "
                  f"THEN CAST({f.column}_text AS DECIMAL(38, 12)) END AS {f.column}" for f in _scalars(definition, MONEY)]
        typed += [f"{f.column}_text AS {f.column}" for f in _scalars(definition, TEXT)]
        typed += [f"list_filter({f.column}_list, lambda u: u <> '') AS {f.column}" for f in lists if f.type == TEXT_LIST]
        typed += [f"list_transform(list_filter({f.column}_list, lambda u: u IS NOT NULL), lambda u: CAST(u AS BIGINT)) AS {f.column}"
                  for f in lists if f.type == COUNT_LIST]
        typed += [f"CASE WHEN {f.column}_entries IS NOT NULL THEN map_from_entries(list_sort(list_transform({f.column}_entries, "
                  f"lambda e: {{'key': e.key, 'value': {_map_value('e.value')}}}))) END AS {f.column}"
                  for f in _maps(definition)]
        typed_cte = f""", typed AS (
            SELECT *, {", ".join(typed)}
            FROM fields
        )"""
    else:
        plain_check, typed_cte = "true", ""
    given_by_load = _given_by_load(definition, ctx)  # an option or the file's name: the value before the checks
    if given_by_load:
        typed_cte += f""", loaded AS (
            SELECT * REPLACE ({", ".join(f"{sql} AS {column}" for column, sql in given_by_load.items())})
            FROM typed
        )"""
    # the row's values: a span's end and length, lists without empty items, counts of items
    out = {f.column: f.column for f in definition.fields}
    for span in definition.rules(Span):
        start, end, length = span.start, span.end, span.length
        out[end] = f"coalesce({end}, CASE WHEN {length} < 1e9 THEN {start} + to_microseconds(CAST({length} * 1e6 AS BIGINT)) END)"
        out[length] = f"CASE WHEN {end} IS NOT NULL THEN epoch({end} - {start}) ELSE {length} END"
    for hours in definition.rules(Hours):  # the span in hours: start and end, or either and the hours
        out[hours.start], out[hours.end], out[hours.hours] = _hours_sql(hours)
        out[hours.seconds] = f"({out[hours.hours]}) * 3600"
    for f in lists:
        out[f.column] = f.column if f.keep_empty else f"CASE WHEN len({f.column}) > 0 THEN {f.column} END"
    for count in definition.rules(CountOf):  # several of one column: the first list with items
        out[count.column] = f"coalesce({out[count.column]}, CASE WHEN len({count.items}) > 0 THEN len({count.items}) END)"
    for one in definition.rules(OneOf):
        out[one.column] = f"CASE lower({one.column}) {' '.join(f'WHEN {_quote(k)} THEN {_quote(v)}' for k, v in one.spellings)} END"
    for default in definition.rules(Default):
        value = _quote(default.value)
        if default.words:
            words = ", ".join(_quote(w) for w in default.words)
            value = (f"CASE WHEN list_has_any(regexp_split_to_array(lower(coalesce({out[default.of]}, '')), '[^a-z0-9]+'), "
                     f"[{words}]) THEN {_quote(default.then)} ELSE {value} END")
        out[default.column] = f"coalesce({out[default.column]}, {value})"
    for tags in definition.rules(Tags):  # named columns as a map sorted by name, the ones given
        entries = ", ".join(f"{{'k': {_quote(name)}, 'v': {out[column]}}}" for name, column in tags.parts)
        out[tags.column] = (f"coalesce({out[tags.column]}, map_from_entries(list_sort(list_filter([{entries}], "
                            f"lambda t: t.v IS NOT NULL))))")
    for prefer in definition.rules(Prefer):
        out[prefer.column] = (f"CASE WHEN {out[prefer.of]} IS NOT NULL AND upper({out[prefer.when]}) = {_quote(prefer.equals.upper())} "
                              f"THEN {out[prefer.of]} ELSE {out[prefer.column]} END")
    for hashed in definition.rules(HashedId):
        parts = [_iso_utc(f"({out[p]})") if definition.field(p).type == TIME else f"coalesce(CAST(({out[p]}) AS VARCHAR), '')"
                 for p in hashed.parts]
        stand_ins = ", ".join(_quote(s) for s in hashed.stand_ins)
        absent = f"{hashed.column} IS NULL" + (f" OR {hashed.column} IN ({stand_ins})" if stand_ins else "")
        out[hashed.column] = (f"CASE WHEN {absent} THEN {_quote(hashed.prefix)} || left(sha256(concat_ws('|', {', '.join(parts)})), "
                              f"{hashed.length}) ELSE {out[hashed.column]} END")
    for cost in definition.rules(HourlyCost):  # given, or price x hours (the catalog's: _stage_batch)
        expected = f"{cost.column}_expected"
        out[cost.source] = f"CASE WHEN {cost.given} IS NOT NULL THEN 'given' WHEN ({expected}) IS NOT NULL THEN 'derived' END"
        out[cost.column] = f"coalesce({cost.given}, {expected})"
    for rate in definition.rules(FromRate):
        if rate.rate not in out:  # a rate SQL does not read (an Extras measure): its records are the reader's
            continue
        value = _from_rate_sql(definition, rate)
        if rate.source:
            out[rate.source] = f"CASE WHEN {rate.column} IS NOT NULL THEN 'given' WHEN ({value}) IS NOT NULL THEN 'derived' END"
        out[rate.column] = f"coalesce({out[rate.column]}, {value})"
    derived = [f"{items.field}_items" for items in definition.items]
    for cost in definition.rules(CatalogCost):
        derived += [f"CASE WHEN {cost.column} IS NOT NULL THEN 'given' END AS {cost.source}",
                    f"CAST(NULL AS DECIMAL(38, 12)) AS {cost.price}"]
    return f"""
        CREATE OR REPLACE TEMP TABLE typed AS
        WITH {fields_sql}{typed_cte}{_hours_cte(definition, "loaded" if given_by_load else "typed")}, checked AS (
            SELECT *, CASE {"WHEN misfit IS NOT NULL THEN misfit" if csv else ""}
                           WHEN NOT ({"tight OR " if csv else ""}coalesce(object AND {plain_check}, false)) THEN ''
                           {" ".join(f"WHEN NOT coalesce({holds}, false) THEN {reason or chr(39) * 2}" for holds, reason in checks)}
                      END AS verdict  -- NULL: loads; '': the reader's; else the reason it is refused
            FROM {"hourly" if definition.rules(Hours) else "loaded" if given_by_load else "typed"}
        )
        SELECT line, verdict IS NULL AS ok, nullif(verdict, '') AS reason, {", ".join([f"{sql} AS {column}" for column, sql in out.items()] + derived)}
        FROM checked"""


def _given_by_load(definition: Definition, ctx: ParseContext) -> dict[str, str]:
    """SQL of each column a FromOption or FromFileName sets, as the reader sets it."""
    given: dict[str, str] = {}
    for step in definition.steps:
        if isinstance(step, FromOption) and getattr(ctx, step.option, None):
            given[step.column] = _quote(str(getattr(ctx, step.option)))
        elif isinstance(step, FromFileName):
            given[step.column] = f"coalesce({given.get(step.column, step.column)}, {_quote(step.of(ctx.source))})"
    return given


US_PER_HOUR = 3_600_000_000


def _measured_hours_sql(hours: Hours) -> str:
    """SQL: the hours between start and end as Python's (end - start).total_seconds() / 3600, else
    the hours given."""
    return (f"CASE WHEN {hours.start} IS NOT NULL AND {hours.end} IS NOT NULL "
            f"THEN (epoch_us({hours.end}) - epoch_us({hours.start})) / 1e6 / 3600 ELSE {hours.hours} END")


def _hours_sql(hours: Hours) -> tuple[str, str, str]:
    """SQL for the span's (start, end, hours) over the typed values (Hours): a missing start or
    end from the other and timedelta(hours=h) (whole hours exact, the fraction's microseconds
    rounded half to even, as Python's)."""
    h = f"(CASE WHEN abs({hours.hours}) < 1e9 THEN {hours.hours} END)"  # NaN, inf or huge (a line not loaded): no overflow
    length = (f"to_microseconds(CAST(trunc({h}) AS BIGINT) * {US_PER_HOUR} "
              f"+ CAST(round_even(({h} - trunc({h})) * {US_PER_HOUR}.0, 0) AS BIGINT))")
    return (f"coalesce({hours.start}, {hours.end} - {length})", f"coalesce({hours.end}, {hours.start} + {length})",
            f"{hours.hours}_measured")


def _hours_of(definition: Definition, column: str) -> str:
    """The column (of _hours_cte) holding the measured hours of the Hours rule whose hours column is `column`."""
    return f"{column}_measured"


def _hours_cte(definition: Definition, source: str = "typed") -> str:
    """A CTE `hourly` over `source` (when the definition has Hours): each span's measured hours
    once, and each HourlyCost's price x hours (worked out once, used by the row and the checks)."""
    if not definition.rules(Hours):
        return ""
    columns = [f"{_measured_hours_sql(h)} AS {_hours_of(definition, h.hours)}" for h in definition.rules(Hours)]
    costs = [f"{_expected_cost_sql(definition, cost)} AS {cost.column}_expected" for cost in definition.rules(HourlyCost)]
    hourly = f"""
        , hourly_0 AS (
            SELECT *, {", ".join(columns)}
            FROM {source}
        ), hourly AS (
            SELECT *{"".join(", " + c for c in costs)}
            FROM hourly_0
        )"""
    return hourly


def _expected_cost_sql(definition: Definition, cost: HourlyCost) -> str:
    """SQL: price x hours in USD as the reader works it out (Decimal(repr(hours)), 28 digits,
    rounded half to even to 12 then 6 places); NULL where that cannot be exact here (more than 28
    significant digits, hours tiny or huge, a price beyond 6 decimals): the reader's."""
    hours = _hours_of(definition, cost.hours)
    price, price_text, hours_text = cost.price, f"CAST({cost.price} AS VARCHAR)", f"CAST({hours} AS VARCHAR)"
    digits = "length(trim(replace(@, '.', ''), '0'))"  # significant digits (no sign or exponent in these ranges)
    return (f"CASE WHEN {price} IS NOT NULL AND {hours} IS NOT NULL AND ({hours} = 0 OR {hours} >= 1e-4) "
            f"AND {hours} < 1e5 AND {price} < 1e9 AND {price} = round({price}, 6) AND CAST({price} AS DOUBLE) * {hours} < 1e10 "
            f"AND NOT contains({hours_text}, 'e') AND {digits.replace('@', price_text)} + {digits.replace('@', hours_text)} <= 28 "
            f"THEN round_even(round_even(CAST({price} AS DECIMAL(15, 6)) * TRY_CAST({hours_text} AS DECIMAL(26, 21)), 12), 6) END")


def _from_rate_sql(definition: Definition, rate: FromRate) -> str:
    """SQL: the rate x hours (FromRate) where both are known, NULL where a whole number would not
    fit (the reader refuses it)."""
    hours = _hours_of(definition, rate.hours)
    value = f"{rate.rate} * ({hours}) * {rate.multiply!r} / {rate.divide!r}"
    if rate.whole:
        return f"CASE WHEN abs({value}) < 9e18 THEN CAST(round_even({value}, 0) AS BIGINT) END"
    return value


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _map_value(value: str) -> str:
    """SQL for a map's JSON value as the reader writes it (Python's str(); null as '')."""
    return (f"CASE WHEN {value} IS NULL THEN '' ELSE CASE json_type({value}) WHEN 'VARCHAR' THEN json_extract_string({value}, '$') "
            f"WHEN 'BOOLEAN' THEN CASE WHEN CAST({value} AS VARCHAR) = 'true' THEN 'True' ELSE 'False' END "
            f"WHEN 'NULL' THEN '' ELSE CAST({value} AS VARCHAR) END END")


def _checks(definition: Definition, json_strict: bool) -> list[tuple[str, str | None]]:
    """The definition's rules in step order as (SQL that holds on a line meeting the rule, SQL of
    the reason when it does not, or None). The first rule a typed line fails decides: its reason
    is given here where SQL spells it exactly as the reader does (a required field, a sum, a
    negative count, a window without start or length), else the line goes to the reader, which
    words the reason (a number's repr, a time's ISO form). A rule SQL checks more strictly than
    the reader (a length SQL cannot add exactly) always sends the line to the reader."""
    checks: list[tuple[str, str | None]] = []
    for step in definition.steps:
        if isinstance(step, Field) and step.type in SCALARS:
            c, given = step.column, f"{step.column}_text IS NULL OR "
            if step.type == TIME:
                checks.append((f"({given}({c} >= {EARLIEST} AND {c} < {LATEST}))", None))
            elif step.type == COUNT:
                checks.append((f"({given}{c} BETWEEN -{step.maximum} AND {step.maximum})", None))
                if step.minimum is not None:  # as the reader: "too large" first, then "negative"
                    reason = f"'{step.spellings[0]} is negative (' || {c} || ')'" if len(step.spellings) == 1 else None
                    checks.append((f"({given}{c} >= {step.minimum})", reason))
            elif step.type == NUMBER:
                low = "" if step.minimum is None else f" AND {c} >= {step.minimum}"
                limit = values.NUMBER_LIMIT if step.divide_by == 1 else f"{min(step.limit, values.NUMBER_LIMIT)!r} / {step.divide_by!r}"
                checks.append((f"({given}(isfinite({c}) AND abs({c}) <= {limit}{low}))", None))
            elif step.type == PERCENT:
                checks.append((f"({given}{c} BETWEEN 0 AND 100)", None))
            elif step.type == MONEY:
                checks.append((f"({c} IS NOT NULL OR {c}_text IS NULL)", None))
                if json_strict:  # from 1,000 USD a JSON double's last digit is past 12 decimals: the reader's
                    checks.append((f"({c} IS NULL OR {c} < 1000 OR NOT regexp_matches(raw, '{LONG_NUMBER}'))", None))
        elif isinstance(step, Span):
            start, end, length = step.start, step.end, step.length
            checks += [(f"{start} IS NOT NULL", _quote(f"no {start}")),
                       (f"({length} IS NULL OR {length} > 0)", None),
                       (f"({end} IS NULL OR {end} > {start})", None),
                       (f"({end} IS NULL OR {length} IS NULL OR abs({length} - epoch({end} - {start})) <= {step.tolerance_s})",
                        None),
                       (f"({end} IS NOT NULL OR {length} IS NOT NULL)", _quote(step.missing)),
                       (f"({end} IS NOT NULL OR ({length} * 1e6 = round({length} * 1e6) AND {length} < 1e9))", None)]
        elif isinstance(step, Required) and any(h.start == step.column for h in definition.rules(Hours)):
            hours = next(h for h in definition.rules(Hours) if h.start == step.column)  # a start found from the end
            checks.append((f"({step.column} IS NOT NULL OR ({hours.end} IS NOT NULL AND {hours.hours} IS NOT NULL))",
                           _quote(step.reason)))
        elif isinstance(step, Required):
            checks.append((f"{step.column} IS NOT NULL", _quote(step.reason)))
        elif isinstance(step, Within):  # the reader words it (a value's repr)
            checks.append((f"({step.column} IS NULL OR {step.column} BETWEEN {step.low!r} AND {step.high!r})", None))
        elif isinstance(step, (Extras, Hours, HourlyCost, FromRate)):
            checks += _run_checks(definition, step)
        elif isinstance(step, HashedId) and step.raw:  # an id made of raw values: the reader makes it
            stand_ins = "".join(f" AND {step.column} <> {_quote(s)}" for s in step.stand_ins)
            checks.append((f"({step.column} IS NOT NULL{stand_ins})", None))
        elif isinstance(step, Default) and step.words:  # words of plain ASCII only: lower() and the split as Python's
            checks.append((f"({step.column} IS NOT NULL OR regexp_full_match(coalesce({step.of}, ''), '[\\x20-\\x7e]*'))", None))
        elif isinstance(step, OneOf):  # plain ASCII spellings only: lower() as Python's; another text, the reader's reason
            spelled = ", ".join(_quote(k) for k, _ in step.spellings)
            checks.append((f"({step.column} IS NULL OR (regexp_full_match({step.column}, '[\\x20-\\x7e]*') "
                           f"AND lower({step.column}) IN ({spelled})))", None))
        elif isinstance(step, SumAtMost):
            pieces = re.split(r"\{(\w+)\}", step.reason)  # text, column, text, column, ...
            reason = " || ".join(_quote(piece) if i % 2 == 0 else f"CAST(coalesce({piece}, 0) AS VARCHAR)"
                                 for i, piece in enumerate(pieces) if piece)
            checks.append((f"{' + '.join(f'coalesce({p}, 0)' for p in step.parts)} <= {step.whole}", reason))
    return checks


def _divided(f: Field) -> str:
    """SQL after a number's value as written: its division by Field.divide_by (nothing for 1)."""
    return "" if f.divide_by == 1 else f" / {float(f.divide_by)!r}"


def _run_checks(definition: Definition, step) -> list[tuple[str, None]]:
    """What SQL leaves to the reader under Extras, Hours, HourlyCost and FromRate: a line whose
    row the reader would note (flag) or read otherwise, so each holds on the lines SQL loads."""
    if isinstance(step, Extras):  # spellings given together: the reader compares them
        return [(f"NOT (contains(raw, '\"{f.spellings[0]}\"') AND contains(raw, '\"{name}\"'))", None)
                for f in definition.fields if f.column in step.agree for name in f.spellings[1:]]
    if isinstance(step, Hours):
        start, end, h = step.start, step.end, step.hours
        measured = _hours_of(definition, h)
        found_start, found_end, _ = _hours_sql(step)
        return [(f"({start} IS NULL OR {end} IS NULL OR {end} >= {start})", None),
                (f"({start} IS NULL OR {end} IS NULL OR {h} IS NULL OR abs({h} - {measured}) <= greatest({step.tolerance!r} * {measured}, 0.01))",
                 None),
                (f"(({start} IS NOT NULL AND {end} IS NOT NULL) OR {h} IS NULL "
                 f"OR ({found_start} >= {EARLIEST} AND {found_end} < {LATEST}))", None)]
    if isinstance(step, HourlyCost):  # a cost to flag, to price from the catalog, or not exact here
        expected = f"{step.column}_expected"
        hours = _hours_of(definition, step.hours)
        found = f"({step.given} IS NOT NULL OR ({expected}) IS NOT NULL)"
        if not (step.open or step.unpriced):  # no cost is no flag: the catalog's names go to the reader (_catalog_to_reader)
            found = f"({step.given} IS NOT NULL OR ({expected}) IS NOT NULL OR ({hours}) IS NULL OR {step.price} IS NULL)"
        return [(f"(({step.price} IS NULL OR ({hours}) IS NULL) OR (({expected}) IS NOT NULL AND ({step.given} IS NULL "
                 f"OR abs({step.given} - ({expected})) <= 0.01 OR abs({step.given} - ({expected})) * 100 <= ({expected}))))", None),
                (found, None)]
    if isinstance(step, FromRate) and step.rate in {f.column for f in definition.fields}:
        value, hours = _from_rate_sql(definition, step), _hours_of(definition, step.hours)
        derives = f"{step.column} IS NULL AND {step.rate} IS NOT NULL AND ({hours}) IS NOT NULL"
        return [(f"NOT ({derives} AND ({value}) IS NULL)", None)] + ([(f"NOT ({derives})", None)] if step.flag else [])
    return []


def _json_type(text: str) -> str:
    """SQL naming the JSON type of a value's JSON text (json_type's names; NULL for null or missing)."""
    return (f"CASE left({text}, 1) WHEN '\"' THEN 'VARCHAR' WHEN 't' THEN 'BOOLEAN' WHEN 'f' THEN 'BOOLEAN' "
            f"WHEN '{{' THEN 'OBJECT' WHEN '[' THEN 'ARRAY' WHEN 'n' THEN 'NULL' "
            f"ELSE CASE WHEN {text} IS NULL THEN NULL WHEN regexp_matches({text}, '[.eE]') THEN 'DOUBLE' ELSE 'BIGINT' END END")


def _json_value(text: str, kind: str) -> str:
    """SQL for a value's text as json_extract_string gives it (a string without escapes sliced, not parsed)."""
    return (f"CASE WHEN {kind} = 'VARCHAR' THEN CASE WHEN contains({text}, '\\') THEN json_extract_string({text}, '$') "
            f"ELSE {text}[2:-2] END ELSE {text} END")


def _price_from_catalog(definition: Definition, cost: CatalogCost, con, prices: config.Prices) -> None:
    """Price the plain rows without an amount from the catalog as the reader does (the first of
    `cost.per` whose price and multiplier are known), to 12 places, x Decimal(repr(seconds)) /
    3600 rounded half to even to 12 places, in whole HUGEINT arithmetic. Each distinct name is
    looked up once in Python; a row this cannot price exactly goes to the reader."""
    names = [name for _, name, _ in cost.per]
    found_names = con.execute(f"SELECT DISTINCT {', '.join(names)} FROM typed WHERE ok AND {cost.column} IS NULL").fetchall()
    if not found_names:
        return
    tables = []
    for index, (catalog, name, _) in enumerate(cost.per):
        lookup = prices.instance if catalog == "instance" else prices.gpu
        found = {n: lookup(n) for n in {row[index] for row in found_names} if n is not None}
        found = {n: price for n, price in found.items() if price is not None}
        table = f"catalog_{index}"
        con.register(table, pa.table({
            "name": pa.array(list(found), pa.string()),
            "price": pa.array([price.quantize(values.MONEY_PLACES) for price in found.values()], pa.decimal128(38, 12)),
            "exact": pa.array([price == price.quantize(values.MONEY_PLACES) for price in found.values()], pa.bool_())}))
        tables.append(table)
    joins = " ".join(f"LEFT JOIN catalog_{i} c{i} ON c{i}.name = t.{name}" for i, (_, name, _) in enumerate(cost.per))
    exact = " AND ".join(f"coalesce(c{i}.exact, true)" for i in range(len(cost.per)))
    price = "CASE " + " ".join(f"WHEN c{i}.price IS NOT NULL AND t.{multiplier} IS NOT NULL THEN c{i}.price * t.{multiplier}"
                               for i, (_, _, multiplier) in enumerate(cost.per)) + " END"
    seconds = f"t.{definition.span.length}"
    try:
        con.execute(f"""
            CREATE OR REPLACE TEMP TABLE catalog_cost AS
            WITH priced AS (
                SELECT t.line, {seconds} AS seconds, {exact} AS exact, {price} AS price,
                       CAST({seconds} AS VARCHAR) AS seconds_text
                FROM typed t {joins}
                WHERE t.ok AND t.{cost.column} IS NULL
            ), whole AS (  -- price in 1e-12 USD and seconds as digits x 10^-places, from repr(seconds)
                SELECT *, exact AND price < {values.MONEY_LIMIT} AND places <= 20
                          AND CAST(price AS DOUBLE) * seconds * pow(10, 12 + places) < 1e36 AS fits
                FROM (SELECT line, price, exact, seconds, seconds_text,
                             CASE WHEN contains(seconds_text, 'e') OR strpos(seconds_text, '.') = 0 THEN 99
                                  ELSE length(seconds_text) - strpos(seconds_text, '.') END AS places
                      FROM priced WHERE price IS NOT NULL)
            ), divided AS (
                SELECT line, price, fits,
                       CASE WHEN fits THEN CAST(replace(CAST(price AS VARCHAR), '.', '') AS HUGEINT)
                                           * CAST(replace(seconds_text, '.', '') AS HUGEINT) END AS numerator,
                       CASE WHEN fits THEN CAST(3600 AS HUGEINT) * CAST(pow(10, places) AS HUGEINT) END AS denominator
                FROM whole
            ), rounded AS (
                SELECT line, price, fits, numerator // denominator AS q, numerator % denominator AS r, denominator
                FROM divided
            )
            SELECT line, price, CASE WHEN fits THEN CAST(q + CASE WHEN 2 * r > denominator OR (2 * r = denominator AND q % 2 = 1)
                                                                THEN 1 ELSE 0 END AS DECIMAL(38, 0))
                                                   * CAST('0.000000000001' AS DECIMAL(13, 12)) END AS cost
            FROM rounded""")
    finally:
        for table in tables:
            con.unregister(table)
    con.execute(f"UPDATE typed SET {cost.price} = c.price, {cost.column} = c.cost, {cost.source} = 'derived' "
                f"FROM catalog_cost c WHERE typed.line = c.line AND c.cost IS NOT NULL AND c.cost < {values.MONEY_LIMIT}")
    con.execute("UPDATE typed SET ok = false FROM catalog_cost c WHERE typed.line = c.line "
                f"AND (c.cost IS NULL OR c.cost >= {values.MONEY_LIMIT})")  # not exact here: the reader prices it
