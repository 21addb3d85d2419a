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

The pieces, each one job: batch_spellings.py (the spellings SQL reads as Python does),
batch_json.py and batch_csv.py (a batch's fields, JSON lines or CSV; batch_units.py for CSV with units
and absent markers in its values), batch_costs.py (hours and
amounts), batch_checks.py (the rules as SQL), batch_typed.py (the statement typing and checking a
batch, the INSERTs). This module runs them: a file's batches, the passes of each, the lines left
to the reader, a whole-document JSON array, the items and the totals. JSON lines: the next batch is
split on a thread while one is typed (read_ahead.py), and each line's quirk match and `":` count
come from Arrow (line_marks.py) as columns of the batch, for the lenient read; CSV likewise, each
line's tight mark (batch_csv.tight_pattern). With a whole-file step
(Definition.identity) the rows are held until the last batch, then settled by file_steps.py.
"""
from __future__ import annotations

import json
import logging
from decimal import Decimal
from functools import partial

import duckdb
import pyarrow as pa

from ingest.engine import csv_layout, file_steps, line_marks, line_sql, prom_text, read_ahead, reader, staging
from ingest.settings import config
from ingest.engine.contract import ParseContext
from ingest.engine.definition import CatalogCost, Definition, is_csv_header, opens_with
from ingest.engine.run_rules import HourlyCost
from ingest.engine.staging import Source, Staged
from ingest.engine.batch_costs import catalog_to_reader, price_from_catalog
from ingest.engine.batch_csv import CSV_QUIRK, csv_fields, tight_pattern
from ingest.engine.batch_json import json_fields, lenient_fields, quirk_pattern
from ingest.engine.batch_units import unit_fields
from ingest.engine.batch_typed import by_line, insert_items, insert_typed, typed_statement

VECTOR_ROWS = 2048  # DuckDB's vector size
JOINED_BYTES = 64 << 20  # lines typed by one pass
log = logging.getLogger(__name__)


def read_early(definition: Definition, src: Source, head: str) -> read_ahead.Ahead | None:
    """The file's line batches, the first already being read, split and marked (line_marks.py) on
    a thread of its own, for stage(): the loader asks for them once it knows the format, so that
    work overlaps its opening the stage and looking the file up in the warehouse (100k runs: the
    split and the marks ~0.3 s, the stage and the lookup ~0.25 s). None unless `head` (the start
    of the decompressed text) opens with a JSON object: a CSV or a JSON array is read as before."""
    if definition.prometheus is not None or definition.csv_only or not opens_with(head, "{"):
        return None
    batches = _line_batches(src)
    batches.start(then=partial(line_marks.marked, pattern=quirk_pattern(definition)))
    return batches


def _line_batches(src: Source) -> read_ahead.Ahead:
    """The file's line batches joined to JOINED_BYTES, ready to be read ahead (read_ahead.py)."""
    return read_ahead.Ahead(src, lambda source: _joined(staging.line_batches(source), JOINED_BYTES))


def stage(definition: Definition, src: Source, con, ctx: ParseContext,
          early: read_ahead.Ahead | None = None) -> Staged:
    """Stage a file's rows and rejects in `con`, JSON lines or CSV, a batch at a time (Prometheus
    text: prom_text). `early`: read_early()'s batches of this file, used instead of reading it
    again; its maker (the loader) closes it, also when a whole document leaves it unread."""
    if definition.prometheus is not None:
        return prom_text.stage(definition, src, con, ctx)
    prices = config.load().prices
    if definition.whole_document and _one_document(src):  # an array of records, or one over many lines
        first = next(((line, text) for line, text in staging.lines(src) if text.strip()), None)
        if first is not None and opens_with(first[1], "["):
            staged = _stage_array(definition, src, con, ctx, prices, first)
            if staged is not None:
                return staged
        parsed = reader.parse(definition, staging.lines(src), ctx, prices)
        log.debug("%s: one JSON document, read by the generic reader", src.name)
        staging.insert_parsed(con, parsed, src.name)
        return Staged(parsed.accepted, totals(definition, con), parsed.warnings)
    for items in definition.items:  # an item's row with its record's line, until repeated keys are settled
        con.execute(f"CREATE OR REPLACE TEMP TABLE {by_line(items)} AS SELECT *, 0::BIGINT AS source_line "
                    f"FROM {items.table} LIMIT 0")
    # JSON lines: the next batch is split on a thread while this one is typed (read_ahead.py)
    batches = early or _line_batches(src)
    try:
        accepted, passes, header, unknown = _stage_batches(definition, src, con, ctx, prices, batches)
    finally:
        batches.close()
    if passes is _REFUSED:  # the file is refused at its header, as line by line
        return Staged(0, totals(definition, con))
    if passes is None and definition.empty_reason:  # not one non-blank line
        staging.add_rejects(con, src.name, [(0, definition.empty_reason, "")])
    con.execute("DROP TABLE IF EXISTS typed; DROP TABLE IF EXISTS rest")  # the last batch's: memory for what follows
    warnings = reader.unknown_warning(definition, unknown)
    if definition.identity and passes is not None:  # the rows held until the file is read
        accepted, found = file_steps.finish(definition, con, src, header)
        warnings += found
    figures = totals(definition, con)
    _settle_items(definition, con)
    return Staged(accepted, figures, warnings)


_REFUSED = ("refused",)  # _stage_batches: the file was refused at its header


def _stage_batches(definition: Definition, src: Source, con, ctx: ParseContext, prices,
                   batches: read_ahead.Ahead) -> tuple[int, tuple | None, list[str] | None, set[str]]:
    """Stage every batch of `batches`: the rows accepted, the passes (_REFUSED when the header
    refused the file, None when no line was filled), the CSV header (None: JSON lines) and the
    unknown keys seen."""
    accepted, header, header_line, passes, unknown = 0, None, 0, None, set()
    for batch in batches:
        con.register("batch", _chunked(batch))
        try:
            if passes is None:
                # JSON lines: the batch's every line is staged below, a too-long one refused there
                header_line, text = line_sql.first_filled(con, src, refuse_before=False)
                if header_line is None:
                    continue
                if is_csv_header(text) or definition.csv_only:
                    line_sql.refuse_too_long(con, src, before=header_line)  # not read as CSV below
                    header, is_record, reason = csv_layout.first_line(definition, text)
                    if reason:  # the file is refused at its header, as line by line
                        staging.add_rejects(con, src.name, [(header_line, reason, text)])
                        return accepted, _REFUSED, header, unknown
                    header_line -= is_record  # a headerless file (Definition.headerless): its first line is a record
                    zone = line_sql.sql_zone(con, ctx.tz)
                    if definition.units_in_text:
                        fields = unit_fields(definition, header, zone)
                    else:  # each line's tight mark by Arrow, the next batch's on the read-ahead thread (line_marks.py)
                        fields = csv_fields(definition, header, ctx)
                        mark = partial(line_marks.csv_marked, pattern=tight_pattern(definition, header, ctx))
                        batches.start(then=mark)
                        con.unregister("batch")
                        con.register("batch", _chunked(mark(batch)))
                    passes = (typed_statement(definition, ctx, fields, csv=True, zone=zone),)
                    if definition.identity:
                        file_steps.create(definition, con)
                else:
                    passes = (typed_statement(definition, ctx, lenient_fields(definition, ctx), lenient=True),
                              typed_statement(definition, ctx, json_fields(definition, "rest"), zone=line_sql.sql_zone(con, ctx.tz)),
                              typed_statement(definition, ctx, json_fields(definition, "batch"),
                                         zone=line_sql.sql_zone(con, ctx.tz)))  # strict alone
                    if line_marks.COLUMNS[0] not in batch.column_names:  # not marked ahead (read_early)
                        # JSON lines: the next batch is split and marked (line_marks.py) while this one is typed
                        mark = partial(line_marks.marked, pattern=quirk_pattern(definition))
                        batches.start(then=mark)
                        con.unregister("batch")
                        con.register("batch", _chunked(mark(batch)))
            accepted += _stage_batch(definition, con, src, ctx, prices, passes, header, header_line, unknown)
        finally:
            con.unregister("batch")
    return accepted, passes, header, unknown


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
        con.execute(f"CREATE OR REPLACE TEMP TABLE {by_line(items)} AS SELECT *, 0::BIGINT AS source_line "
                    f"FROM {items.table} LIMIT 0")
    count = staging.count(con, "elements")
    passes = (typed_statement(definition, ctx, lenient_fields(definition, ctx), lenient=True),
              typed_statement(definition, ctx, json_fields(definition, "rest")),
              typed_statement(definition, ctx, json_fields(definition, "batch")))
    accepted, unknown = 0, set()
    for start in range(0, count, ARRAY_ELEMENTS):
        elements = con.sql(f"SELECT line, raw FROM elements WHERE line > {start} AND line <= {start + ARRAY_ELEMENTS} "
                           "ORDER BY line").to_arrow_table()
        con.register("batch", _chunked(line_marks.marked(elements, quirk_pattern(definition))))
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


def _settle_items(definition: Definition, con) -> None:
    """Into each Items' table: the items of the records kept (a record replaced by a later one
    with the same key takes its items with it)."""
    for items in definition.items:
        con.execute(f"INSERT INTO {items.table} BY NAME SELECT i.* EXCLUDE (source_line) FROM {by_line(items)} i "
                    f"SEMI JOIN {definition.table} r ON r.{definition.key.column} = i.{items.parent} "
                    "AND r.source_line = i.source_line")
        con.execute(f"DROP TABLE {by_line(items)}")


def _chunked(batch: pa.Table) -> pa.Table:
    """A batch in DuckDB-sized chunks: one Arrow chunk would be scanned by one thread."""
    return pa.Table.from_batches(batch.to_batches(max_chunksize=VECTOR_ROWS))


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
    if header is not None:  # unquoted lines with the wrong number of fields: refused by the typed pass (csv_fields)
        params = {"header_line": header_line, "quirk": CSV_QUIRK, "blank": line_sql.BLANK_LINE}
    accepted, source = 0, "batch"
    if len(passes) == 3:  # JSON: lenient then strict, or strict alone when most lines are the strict read's
        if _mostly_quirks(definition, con):
            passes = passes[2:]
        else:  # the lenient read of the spellings the batch's lines give (each transformed costs: ~20 % of serving's)
            seen = _keys_seen(con)
            passes = (typed_statement(definition, ctx, lenient_fields(definition, ctx, seen), lenient=True)
                      if seen else passes[0], passes[1])
    for typed_sql in passes:
        if source == "rest" and not con.execute("SELECT count(*) FROM rest").fetchall()[0][0]:
            break  # all loaded: the strict read is not even planned (~80 ms a batch)
        con.execute(typed_sql, params)
        for cost in definition.rules(CatalogCost):
            price_from_catalog(definition, cost, con, prices)
        for hourly in definition.rules(HourlyCost):
            catalog_to_reader(hourly, con, prices)
        if definition.identity:  # held until the file is read (file_steps.py)
            file_steps.hold(definition, con, source, len(header), src.name)
        else:
            accepted += con.execute(insert_typed(definition)).fetchall()[0][0]
            for items in definition.items:
                con.execute(insert_items(definition, items))
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
            parsed.tables[by_line(items)] = parsed.tables.pop(items.table, [])
        if definition.identity:  # loaded or refused for a value: held (file_steps.py)
            parsed.tables[file_steps.held(definition)] = parsed.tables.pop(definition.table, [])
            parsed.accepted = 0
        staging.insert_parsed(con, parsed, src.name)
        accepted += parsed.accepted
    return accepted


QUIRK_SAMPLE = 1000  # lines of a batch looked at to choose its passes


KEYS_SAMPLE = 5000  # lines of a batch whose keys choose the spellings the lenient read transforms


def _keys_seen(con) -> set[str]:
    """The keys of the batch's first lines (a line giving another goes to the strict read: each
    key the lenient read transforms costs, and fleets give one spelling of each field)."""
    return {key for (key,) in con.execute(f"SELECT DISTINCT unnest(TRY(json_keys(raw))) FROM (SELECT raw FROM batch "
                                          f"WHERE ltrim(raw) <> '' LIMIT {KEYS_SAMPLE})").fetchall()}


def _mostly_quirks(definition: Definition, con) -> bool:
    """Whether most of the batch's first lines have a quirk (quirk_pattern: escapes, numbers given as
    text, odd lists, maps or eval points ...), so the lenient read would hand them all to the strict one."""
    share = con.execute("SELECT avg(CAST(quirk_found AS INTEGER)) "  # line_marks.py
                        f"FROM (SELECT quirk_found FROM batch WHERE ltrim(raw) <> '' LIMIT {QUIRK_SAMPLE})").fetchall()[0][0]
    return share is not None and share > 0.5
