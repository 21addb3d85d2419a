"""Stage one bill file with DuckDB's own readers: every conversion and check runs in SQL over
whole columns, into the staging `billing_lines` and `rejects` (ingest/engine/staging.py).

Steps: read the file (CSV: bill_csv.py; Parquet: bill_parquet.py), only the columns the family
reads, trimmed, blank and its null literals as NULL, converted and checked on the way with the
family's `Plan` (ingest/formats/billing/bill_sql.py), the first failing check being the line's
reason, into one table of typed values (`bill_converted`), each row with its physical line
(the view `bill_lines`); send the few lines SQL cannot read (a Python-literal cell, odd tag
shapes) through billing.py's `build`; key the lines and keep the last of a repeated key
(bill_keys.py); report totals in SQL.

A file DuckDB's CSV reader cannot read at all (a dialect it refuses, mixed newlines) and JSON
lines go through billing.py whole; that path buffers the file and is slow, as before.
"""
from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

import duckdb
import pyarrow as pa

from ingest.engine import line_numbers
from ingest.engine.contract import BadValue, ParseContext, Parsed, Reject, numbered
from ingest.engine.definition import opens_with
from ingest.engine.staging import Source, Staged
from ingest.formats.billing import bill_csv, bill_frame, bill_keys, bill_parquet, bill_sql, billing
from ingest.formats.billing.bill_family import LINE_COLUMNS
from ingest.formats.billing.bill_sql import Plan, ident, literal
from ingest.formats.billing.billing import Family, Record
from ingest.settings import limits

LOG = logging.getLogger(__name__)
# A file DuckDB cannot read goes through billing.py, which holds it whole: only up to this size.
PYTHON_READ_LIMIT = 64 << 20
PARQUET_MAGIC = b"PAR1"
# The staging memory of a large bill (unless MLCOST_STAGE_MEMORY sets it): the default limit plus
# half the file's size, at most LARGE_BILL_MEMORY_MB. A 1M-line FOCUS file (504 MB) converts to a
# ~500 MB table that stays in memory through the merge: under 512 MB its allocation and warehouse
# insert spilled (~1.3 CPU s of 12); the process peaks ~150 MB over the limit (910 MiB at 768 MB).
DEFAULT_MEMORY_MB, LARGE_BILL_MEMORY_MB = 512, 768
CANDIDATE_SCHEMA = pa.schema(
    [(c, pa.decimal128(38, 12)) if c in ("billed_cost", "effective_cost", "list_cost")
     else (c, pa.timestamp("us", tz="UTC")) if c.endswith(("_start", "_end"))
     else (c, pa.float64()) if c == "consumed_quantity"
     else (c, pa.map_(pa.string(), pa.string())) if c == "tags"
     else (c, pa.int64()) if c == "source_line"
     else (c, pa.string()) for c in LINE_COLUMNS]
    + [("_sub", pa.int64()), ("_key", pa.string())])


def stage(src: Source, con: duckdb.DuckDBPyConnection, ctx: ParseContext, family: Family,
          plan_of, json_lines=None) -> Staged:
    """Stage one bill file; `plan_of(fields) -> Plan` is the family's SQL; `json_lines(src, con,
    ctx, family, plan_of) -> accepted` the family's own reader of JSON lines (else billing.py's)."""
    bill_sql.install(con)
    bill_keys.restore_table(con)
    _size_memory(con, src)
    if con.execute("SELECT current_setting('temp_directory')").fetchone()[0] in ("", ".tmp"):
        # an in-memory database spills into ./.tmp of the working directory by default
        con.execute(f"SET temp_directory = {literal(str(Path(tempfile.gettempdir()) / 'mlcost-staging'))}")
    bill_keys.drop(con)
    con.execute("CREATE TEMP TABLE bill_candidates AS SELECT * FROM billing_lines LIMIT 0")
    con.execute("ALTER TABLE bill_candidates ADD COLUMN _sub BIGINT")
    con.execute("ALTER TABLE bill_candidates ADD COLUMN _key VARCHAR")
    with src.open_binary() as stream:
        head = stream.read(4096)
    accepted = 0
    warnings: list[str] = []  # how the header was read (billing.read_header), for the summary
    try:
        if head[:4] == PARQUET_MAGIC:
            with tempfile.TemporaryDirectory(prefix="mlcost-parquet-") as spool:
                frame = bill_parquet.read_parquet(src, con, family, Path(spool), warnings)
                # the file's values are in the table bill_converted: the spooled copy may go
                accepted = _stage_frame(src, con, ctx, family, plan_of, frame)
        elif head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"{":  # JSON lines
            accepted = (json_lines(src, con, ctx, family, plan_of) if json_lines
                        else _stage_by_python(src, con, ctx, family, warnings))
        else:
            frame = bill_csv.read_csv(src, con, family, ctx, warnings)
            accepted = _stage_frame(src, con, ctx, family, plan_of, frame)
    except bill_frame.Unreadable as why:
        if src.path.stat().st_size > PYTHON_READ_LIMIT:  # line by line would hold it all in memory
            raise BadValue(f"cannot be read as CSV: {why}") from None
        LOG.warning("%s: read line by line (%s)", ctx.source, why)
        bill_keys.drop(con, keep_candidates=True)
        con.execute("DELETE FROM bill_candidates")
        con.execute("DELETE FROM rejects WHERE path = ?", [ctx.source])
        warnings.clear()  # billing.py reads the header again and says the same
        accepted = _stage_by_python(src, con, ctx, family, warnings)
    bill_keys.finish(con, ctx, family)
    bill_keys.drop(con)
    return Staged(accepted, bill_keys.totals(con), warnings)


def _size_memory(con: duckdb.DuckDBPyConnection, src: Source) -> None:
    """Raise the staging memory limit for a large bill (see LARGE_BILL_MEMORY_MB)."""
    if "MLCOST_STAGE_MEMORY" in os.environ:
        return
    wanted = min(LARGE_BILL_MEMORY_MB, DEFAULT_MEMORY_MB + (src.path.stat().st_size >> 21))
    if wanted > DEFAULT_MEMORY_MB:
        con.execute(f"SET memory_limit = '{wanted}MB'")


def _stage_frame(src: Source, con: duckdb.DuckDBPyConnection, ctx: ParseContext, family: Family,
                 plan_of, frame: bill_frame.Frame) -> int:
    """Read, convert and check the file with the family's plan; returns the records accepted."""
    if frame.reject is not None:
        bill_frame.insert_rejects(con, ctx, [frame.reject])
        return 0
    if frame.fields is None:
        return 0
    plan: Plan = plan_of(frame.fields)
    values = ", ".join(f"{sql} AS v_{column}" for column, sql in plan.columns.items())
    arms = " ".join(f"WHEN {check.bad} THEN {check.reason}" for check in plan.checks)
    reason = f"CASE WHEN _python THEN NULL {arms} END" if arms else "NULL"
    # helpers (`_...`) are read by the checks below and by `extra` only: not stored without it;
    # nor, without `extra`, is a constant (the format) or a second column of the same SQL (a
    # line id that is also the source line id): bill_sql_rows writes them out
    stored = _stored_as(plan)
    kept = ", ".join(f"v_{column}" for column in plan.columns if column in stored and stored[column] == column)
    # the raw text is kept only for the lines billing.py reads; text fields as one list (NULL on
    # every other line): 27 mostly-NULL columns took 140 MB of a 1M-line bill's 665 MB table,
    # which then spilled past the staging memory limit
    used = sorted(frame.fields.used)
    if used and all(frame.fields.types[n] == "VARCHAR" for n in used):
        raw = (", CASE WHEN _python THEN [" + ", ".join(ident(frame.fields.columns[n]) for n in used)
               + "] END AS _raw")
    else:  # typed Parquet fields (times, maps) keep their own columns
        raw = "".join(f", CASE WHEN _python THEN {ident(c)} END AS {ident(c)}"
                      for c in (frame.fields.columns[n] for n in used))
    helpers = "".join(f", {sql} AS v_{name}" for name, sql in plan.helpers.items())

    def convert(source: str, carried: str) -> str:
        return f"""SELECT {carried}{kept}, _python, {reason} AS _reason{raw} FROM (
            SELECT *, {values}, coalesce({plan.python}, false) AS _python FROM (
                SELECT *{helpers} FROM {source}))"""

    frame.load(con, frame.fields.used, convert)
    types = dict(con.execute("SELECT column_name, data_type FROM duckdb_columns() "
                             "WHERE table_name = 'bill_candidates'").fetchall())
    outputs = ", ".join(f"CAST({_stored_sql(plan, stored, c)} AS {types[c]}) AS {c}"
                        for c in plan.columns if not c.startswith("_"))
    # the good lines are read from the converted table where they are (no copy): bill_keys.finish
    # reads them with the few rows of bill_candidates
    con.execute(f"""CREATE TEMP VIEW bill_sql_rows AS
        SELECT {outputs},
            {literal(ctx.source)} AS source_file, {literal(family.kind)} AS source_kind,
            _line AS source_line, CAST(0 AS BIGINT) AS _sub, CAST(NULL AS VARCHAR) AS _key
        FROM bill_lines WHERE _reason IS NULL AND NOT _python""")
    if plan.extra:
        con.execute(f"""INSERT INTO bill_candidates BY NAME SELECT *, {literal(ctx.source)} AS source_file,
            {literal(family.kind)} AS source_kind, NULL AS _key FROM ({plan.extra})""")
    bad = con.execute("SELECT _line, _end, _reason FROM bill_lines WHERE _reason IS NOT NULL "
                      "ORDER BY _line").fetchall()
    accepted = con.execute("SELECT count(*) FROM bill_lines WHERE _reason IS NULL AND NOT _python"
                           ).fetchone()[0]
    texts = line_numbers.line_texts(src, {line: end for line, end, _ in bad}) if bad and frame.text else {}
    bill_frame.insert_rejects(con, ctx, [Reject(line, reason, texts.get(line, "")) for line, _, reason in bad])
    accepted += _python_lines(src, con, ctx, family, frame)
    return accepted


def _stored_as(plan: Plan) -> dict[str, str]:
    """Which stored column holds each column of the plan bill_converted keeps: itself, or the
    first column with the same SQL; a constant maps to '' (written out by bill_sql_rows)."""
    if plan.extra:  # `extra` reads every column of bill_lines by its own name
        return {column: column for column in plan.columns}
    first: dict[str, str] = {}
    stored: dict[str, str] = {}
    for column, sql in plan.columns.items():
        if column.startswith("_"):
            continue
        if _is_constant(sql):
            stored[column] = ""
        else:
            stored[column] = first.setdefault(sql.strip(), column)
    return stored


def _is_constant(sql: str) -> bool:
    """A plain SQL string literal or NULL."""
    text = sql.strip()
    return text == "NULL" or (len(text) >= 2 and text[0] == text[-1] == "'" and "'" not in text[1:-1].replace("''", ""))


def _stored_sql(plan: Plan, stored: dict[str, str], column: str) -> str:
    """SQL over bill_lines of a plan column as _stored_as kept it."""
    held = stored[column]
    return plan.columns[column] if held == "" else f"v_{held}"


def _python_lines(src: Source, con: duckdb.DuckDBPyConnection, ctx: ParseContext, family: Family,
                  frame: bill_frame.Frame) -> int:
    """The lines SQL left to billing.py's build: rows into bill_candidates, reasons into rejects."""
    fields = frame.fields
    raw_columns = {name: fields.columns[name] for name in sorted(fields.used)}  # as _stage_frame kept them
    packed = bool(raw_columns) and all(fields.types[name] == "VARCHAR" for name in raw_columns)
    select = (", ".join(f"_raw[{i}]" for i in range(1, len(raw_columns) + 1)) if packed  # the list, item by item
              else ", ".join(ident(c) for c in raw_columns.values()))
    if not con.execute("SELECT count(*) FROM bill_converted WHERE _python").fetchone()[0]:
        return 0
    cursor = con.execute(f"SELECT _line, _end{', ' + select if select else ''} FROM bill_lines WHERE _python "
                         "ORDER BY _line")
    accepted = 0
    rejects: list[Reject] = []
    rows: list[dict] = []
    plain_text = frame.text
    while batch := cursor.fetchmany(1000):
        for line, end, *found in batch:
            values = {name: _python_value(value) for name, value in zip(raw_columns, found)}
            record = Record(line, values, "", fields.labels)
            try:
                built = family.build(record, frame.all_columns)
            except BadValue as error:
                rejects.append(Reject(line, str(error), str(end)))
                continue
            accepted += 1
            for sub, row in enumerate(built):
                rows.append({**row, "source_file": ctx.source, "source_kind": family.kind,
                             "source_line": line, "_sub": sub, "_key": None})
    if rejects and plain_text:
        texts = line_numbers.line_texts(src, {r.line: int(r.raw) for r in rejects})
        rejects = [Reject(r.line, r.reason, texts.get(r.line, "")) for r in rejects]
    elif rejects:
        rejects = [Reject(r.line, r.reason, "") for r in rejects]
    bill_frame.insert_rejects(con, ctx, rejects)
    _insert_candidates(con, rows)
    return accepted


def _python_value(value: object) -> object:
    """A staged value as billing.py's Parquet records hold it (maps as lists of pairs)."""
    if isinstance(value, dict):
        return list(value.items())
    return value


def _insert_candidates(con: duckdb.DuckDBPyConnection, rows: list[dict]) -> None:
    if not rows:
        return
    for start in range(0, len(rows), 50_000):
        piece = rows[start:start + 50_000]
        con.register("bill_python_rows", pa.Table.from_pylist(piece, schema=CANDIDATE_SCHEMA))
        con.execute("INSERT INTO bill_candidates BY NAME SELECT * FROM bill_python_rows")
        con.unregister("bill_python_rows")


def _stage_by_python(src: Source, con: duckdb.DuckDBPyConnection, ctx: ParseContext, family: Family,
                     warnings: list[str]) -> int:
    """The whole text through billing.py's readers and build (JSON lines, a file DuckDB's CSV
    reader refuses); its rows unkeyed into bill_candidates."""
    parsed = Parsed()
    with src.open_binary() as stream:
        data = stream.read()
    try:
        lines = list(numbered(data.decode("utf-8-sig").split("\n")))
    except UnicodeDecodeError as error:
        raise BadValue(f"not UTF-8 text (byte {error.start})") from None
    del data
    # a line over [ingest] max_line_bytes is refused as that line; the others are read without it
    longest = limits.current().max_line_bytes
    too_long = [(number, len(text.encode())) for number, text in lines if len(text) > longest // 4
                and len(text.encode()) > longest]
    if too_long:
        dropped = {number for number, _ in too_long}
        parsed.rejects.extend(Reject(number, limits.too_long_reason(limits.too_long_marker(size)))
                              for number, size in too_long)
        lines = [(number, "" if number in dropped else text) for number, text in lines]
    first = next((t for _, t in lines if t.strip()), "")
    reader = billing.json_records if opens_with(first, "{") else billing.csv_records
    accepted = stage_records(con, ctx, family, reader(lines, family, parsed), parsed)
    warnings.extend(parsed.warnings)
    return accepted


def stage_records(con: duckdb.DuckDBPyConnection, ctx: ParseContext, family: Family, records,
                  parsed: Parsed) -> int:
    """billing.py's records built by the family, their rows unkeyed into bill_candidates and the
    rejects (parsed's too) into rejects; returns parsed's accepted count."""
    rows = []
    for record in records:
        try:
            built = family.build(record, set(record.fields))
        except BadValue as error:
            parsed.rejects.append(Reject(record.line, str(error), record.raw))
            continue
        parsed.accepted += 1
        for sub, row in enumerate(built):
            rows.append({**row, "source_file": ctx.source, "source_kind": family.kind,
                         "source_line": record.line, "_sub": sub, "_key": None})
    bill_frame.insert_rejects(con, ctx, parsed.rejects)
    _insert_candidates(con, rows)
    return parsed.accepted
