"""Stage one bill file with DuckDB's own readers: every conversion and check runs in SQL over
whole columns, into the staging `billing_lines` and `rejects` (ingest/engine/staging.py).

Steps: read the file (CSV: `read_csv` with `store_rejects`, every field as text; Parquet:
`read_parquet`), only the columns the family reads, trimmed, blank and its null literals as
NULL, converted and checked on the way with the family's `Plan` (ingest/formats/billing/bill_sql.py), the first
failing check being the line's reason, into one table of typed values (`bill_converted`); give
each row its physical line (ingest/engine/line_numbers.py, the view `bill_lines`);
send the few lines SQL cannot read (a Python-literal cell, odd tag shapes) through billing.py's
`build`; key the lines (the good SQL lines read where they were converted, the few billing.py
built from a small table) and keep the last of a repeated key; report totals in SQL.

Line keys: a line with an id is `<provider>|id|<id>` as before. A line without one (GCP, Azure)
is `<provider>|sha256:<digest>#<n>`, the digest of billing.py's JSON of the row (every stored
column but the key, file, line, format and kind) computed in SQL, `n` counting the identical
rows before it in the file: the same keys as billing.py gives for ASCII rows. A row with other
characters is hashed by billing.py itself (DuckDB cannot write JSON's \\u escapes).

A file DuckDB's CSV reader cannot read at all (a dialect it refuses, mixed newlines) and JSON
lines go through billing.py whole; that path buffers the file and is slow, as before.
"""
from __future__ import annotations

import csv
import io
import logging
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from ingest.engine import line_numbers, staging
from ingest.engine.contract import BadValue, ParseContext, Parsed, Reject, numbered
from ingest.engine.staging import Source, Staged
from ingest.formats.billing import bill_sql, billing
from ingest.formats.billing.bill_sql import Fields, Plan, ident, literal
from ingest.formats.billing.billing import Family, Record
from ingest.settings import limits

LOG = logging.getLogger(__name__)
# A file DuckDB cannot read goes through billing.py, which holds it whole: only up to this size.
PYTHON_READ_LIMIT = 64 << 20
PARQUET_MAGIC = b"PAR1"
# Text json.dumps escapes differently from DuckDB (ensure_ascii, control characters).
OTHER_THAN_PRINTABLE_ASCII = "[^ -~\\n\\r\\t]"
WHITESPACE = " \t\r\n\x0b\x0c"
# Columns that are not part of a line's content (billing._NOT_CONTENT).
CONTENT = [c for c in billing.LINE_COLUMNS if c not in billing._NOT_CONTENT]
CANDIDATE_SCHEMA = pa.schema(
    [(c, pa.decimal128(38, 12)) if c in ("billed_cost", "effective_cost", "list_cost")
     else (c, pa.timestamp("us", tz="UTC")) if c.endswith(("_start", "_end"))
     else (c, pa.float64()) if c == "consumed_quantity"
     else (c, pa.map_(pa.string(), pa.string())) if c == "tags"
     else (c, pa.int64()) if c == "source_line"
     else (c, pa.string()) for c in billing.LINE_COLUMNS]
    + [("_sub", pa.int64()), ("_key", pa.string())])
DUCKDB_REASONS = {"UNQUOTED VALUE": "unreadable CSV: a quoted field is not closed",
                  "INVALID UNICODE": "not UTF-8 text", "INVALID ENCODING": "not UTF-8 text",
                  "LINE SIZE OVER MAXIMUM": "unreadable CSV: the line is too long"}


class Unreadable(Exception):
    """DuckDB's reader cannot read this file as written: billing.py reads it instead."""


def stage(src: Source, con: duckdb.DuckDBPyConnection, ctx: ParseContext, family: Family,
          plan_of, json_lines=None) -> Staged:
    """Stage one bill file; `plan_of(fields) -> Plan` is the family's SQL; `json_lines(src, con,
    ctx, family, plan_of) -> accepted` the family's own reader of JSON lines (else billing.py's)."""
    bill_sql.install(con)
    _restore_table(con)
    if con.execute("SELECT current_setting('temp_directory')").fetchone()[0] in ("", ".tmp"):
        # an in-memory database spills into ./.tmp of the working directory by default
        con.execute(f"SET temp_directory = {literal(str(Path(tempfile.gettempdir()) / 'mlcost-staging'))}")
    _drop(con)
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
                frame = _read_parquet(src, con, family, Path(spool), warnings)
                # the file's values are in the table bill_converted: the spooled copy may go
                accepted = _stage_frame(src, con, ctx, family, plan_of, frame)
        elif head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"{":  # JSON lines
            accepted = (json_lines(src, con, ctx, family, plan_of) if json_lines
                        else _stage_by_python(src, con, ctx, family, warnings))
        else:
            accepted = _stage_frame(src, con, ctx, family, plan_of, _read_csv(src, con, family, ctx, warnings))
    except Unreadable as why:
        if src.path.stat().st_size > PYTHON_READ_LIMIT:  # line by line would hold it all in memory
            raise BadValue(f"cannot be read as CSV: {why}") from None
        LOG.warning("%s: read line by line (%s)", ctx.source, why)
        _drop(con, keep_candidates=True)
        con.execute("DELETE FROM bill_candidates")
        con.execute("DELETE FROM rejects WHERE path = ?", [ctx.source])
        warnings.clear()  # billing.py reads the header again and says the same
        accepted = _stage_by_python(src, con, ctx, family, warnings)
    _finish(con, ctx, family)
    _drop(con)
    return Staged(accepted, totals(con), warnings)


# --- reading ---------------------------------------------------------------------------------

class Frame:
    """A file as the family sees it: its columns by normalised name, or the file-level reject."""

    def __init__(self, fields: Fields | None, all_columns: set[str], load, reject: Reject | None = None,
                 text: bool = True):
        self.fields = fields
        self.text = text  # a text file: a rejected line's text is read back from it (not Parquet's bytes)
        self.all_columns = all_columns  # every normalised header name (billing.py's `columns`)
        self.load = load  # (con, used names, convert) -> bill_converted and the view bill_lines
        self.reject = reject


def _header(src: Source) -> tuple[list[str], int, str, str, list[int]]:
    """The first non-blank CSV record: its names, its physical line, its raw text, the newline;
    and the field counts of up to billing.SAMPLE_ROWS records after it."""
    with io.TextIOWrapper(src.open_binary(), encoding="utf-8-sig", errors="replace", newline="") as text:
        consumed: list[str] = []

        def feed():
            for line in text:
                consumed.append(line)
                yield line

        reader = csv.reader(feed())
        while True:
            before = len(consumed)
            try:
                record = next(reader)
            except StopIteration:
                return [], 0, "", "\n", []
            except csv.Error as error:  # billing.py reads it line by line and says which line
                raise Unreadable(f"the header cannot be read ({error})") from None
            if not record or (len(record) == 1 and not record[0].strip()):
                continue
            piece = consumed[before:]
            newline = "\r\n" if piece[0].endswith("\r\n") else "\n"
            raw = "\n".join(line.rstrip("\r\n") for line in piece)
            widths: list[int] = []
            try:
                for row in reader:
                    if row and not (len(row) == 1 and not row[0].strip()):
                        widths.append(len(row))
                        if len(widths) >= billing.SAMPLE_ROWS:
                            break
            except csv.Error:  # a damaged record: the counts so far, the read says the rest
                pass
            return [n.strip().lstrip("\ufeff") for n in record], before + 1, raw, newline, widths


def _labels(columns: list[str], names: list[str]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for column, name in zip(columns, names):
        labels.setdefault(column, name)
    return labels


def _fields(position: dict[str, int], columns: list[str], names: list[str], header: billing.Header) -> Fields:
    """The file's columns (c<i>) and the values a setting gives every line (k<j>), as Fields."""
    fields = Fields({c: f"c{i}" for c, i in position.items()}, _labels(columns, names),
                    {c: "VARCHAR" for c in position})
    for number, (name, _) in enumerate(header.constants.items()):
        fields.columns[name], fields.types[name] = f"k{number}", "VARCHAR"
        fields.labels[name] = header.labels[name]
    return fields


def _constants(header: billing.Header, used: set[str]) -> list[str]:
    """SQL select items of the per-file values (billing.read_header) the plan reads."""
    return [f"{literal(value)} AS k{number}" for number, (name, value) in enumerate(header.constants.items())
            if name in used]


def _read_csv(src: Source, con: duckdb.DuckDBPyConnection, family: Family, ctx: ParseContext,
              warnings: list[str]) -> Frame:
    names, header_line, header_raw, newline, widths = _header(src)
    if not names:
        return Frame(None, set(), None)
    missing = family.missing({family.normalize(n) for n in names})
    if missing:  # billing.py refuses the header and every line under it, each with its number
        raise Unreadable(f"the {family.label} header lacks {', '.join(missing)}")
    header = billing.read_header(family, names, widths)
    warnings.extend(header.warnings)
    names, columns = header.names, header.columns  # a ragged tail the rows lack: cut off
    position = {}
    for index, column in enumerate(columns):
        position.setdefault(column, index)
    fields = _fields(position, columns, names, header)
    if header_line != 1:
        raise Unreadable("blank lines before the header")

    def load(con: duckdb.DuckDBPyConnection, used: set[str], convert) -> None:
        nulls = ", ".join(["''"] + [literal(n) for n in sorted(family.nulls)])
        cleaned = [f"{_cleaned(f'c{position[c]}', nulls)} AS c{position[c]}" for c in position if c in used]
        cleaned += _constants(header, used)
        types = "{" + ", ".join(f"'c{i}': 'VARCHAR'" for i in range(len(names))) + "}"
        reader = (f"read_csv({literal(str(src.path))}, auto_detect=false, columns={types}, header=true, "
                  f"delim=',', quote='\"', escape='\"', strict_mode=true, "
                  f"compression={literal(src.duckdb_compression)}, store_rejects=true, "
                  f"rejects_table='bill_errors', rejects_scan='bill_scans')")
        with ThreadPoolExecutor(1) as pool:
            counting = pool.submit(line_numbers.count_lines, src)
            try:
                # each record's place in the file (_ord, from 1) numbered as it is read: a
                # streaming row_number() keeps the reader's order (DuckDB runs it in one thread),
                # so the table may be written in any order - an ordered insert held the staging
                # memory and blocked the second thread
                source = (f"(SELECT {', '.join(['_ord'] + cleaned)} FROM "
                          f"(SELECT row_number() OVER () AS _ord, * FROM {reader}))")
                con.execute(f"CREATE TEMP TABLE bill_converted AS {convert(source, '_ord, ')}")
            except duckdb.OutOfMemoryException as error:
                raise BadValue(f"needs more memory than the staging limit (MLCOST_STAGE_MEMORY): "
                               f"{str(error).splitlines()[0]}") from None
            except duckdb.Error as error:
                raise Unreadable(str(error).splitlines()[0]) from None
            physical = counting.result()
        _number_csv_rows(src, con, ctx, physical, header)

    return Frame(fields, set(columns) | set(header.constants), load)


def _cleaned(column: str, nulls: str) -> str:
    """SQL of a field as billing.py reads it: stripped, NULL when blank or a null literal. Only a
    value with whitespace at an edge is trimmed (trim() over every value costs more than the read)."""
    # a first or last character at or below a space may be whitespace (others fall through the
    # exact trim unchanged); one test per edge, not one per whitespace character
    edge = f"ord({column}) <= 32 OR ord({column}[-1]) <= 32"
    trimmed = f"trim({column}, {literal(WHITESPACE)})"
    return (f"CASE WHEN {column} IN ({nulls}) THEN NULL WHEN NOT ({edge}) THEN {column} "
            f"WHEN {trimmed} IN ({nulls}) THEN NULL ELSE {trimmed} END")


def _number_csv_rows(src: Source, con: duckdb.DuckDBPyConnection, ctx: ParseContext, physical: int,
                     header: billing.Header) -> None:
    """bill_lines: bill_converted with each row's first and last physical line; DuckDB's structural
    rejects (deduplicated, blank-only lines dropped) into `rejects` at their physical lines."""
    rows = con.execute("SELECT count(*) FROM bill_converted").fetchone()[0]
    errors = con.execute(
        # one error per record; the text of the error that kept most of it (DuckDB leaves csv_line
        # empty for some errors of a record, e.g. UNQUOTED VALUE beside MISSING COLUMNS)
        "SELECT line, arg_max(error_type, length(coalesce(csv_line, ''))), "
        "arg_max(csv_line, length(coalesce(csv_line, ''))) FROM bill_errors GROUP BY line ORDER BY line"
    ).fetchall()
    rejected = np.array([line for line, _, _ in errors], dtype=np.int64)
    records = 1 + rows + len(rejected)
    if physical == records:  # one line per record, none blank: DuckDB's numbers are the lines
        lines = np.setdiff1d(np.arange(2, records + 1, dtype=np.int64), rejected, assume_unique=True)
        ends = lines
        where = {line: (line, line) for line in rejected.tolist()}
    else:  # quoted newlines or blank lines: where each record starts
        starts, blank = line_numbers.record_starts(src)
        if int((~blank).sum()) != records or (len(rejected) and rejected.max() > len(starts)):
            raise Unreadable("the records DuckDB read do not match the file's lines")
        keep = ~blank
        keep[0] = False  # the header
        keep[rejected - 1] = False
        following = np.append(starts[1:] - 1, physical)  # a record's last line
        lines, ends = starts[keep], following[keep]
        where = {line: (int(starts[line - 1]), int(following[line - 1])) for line in rejected.tolist()}
    if len(lines) != rows:
        raise Unreadable("the records DuckDB read do not match the file's lines")
    if physical == records and not len(rejected):  # record k is line k + 1 (the header is line 1)
        con.execute("CREATE TEMP VIEW bill_lines AS SELECT _ord + 1 AS _line, _ord + 1 AS _end, * EXCLUDE (_ord) "
                    "FROM bill_converted")
    else:  # the k-th record read is the k-th of `lines`
        con.register("bill_numbers", pa.Table.from_arrays(
            [_int64s(np.arange(1, len(lines) + 1)), _int64s(lines), _int64s(ends)], ["_ord", "_line", "_end"]))
        con.execute("CREATE TEMP VIEW bill_lines AS SELECT n._line, n._end, c.* EXCLUDE (_ord) "
                    "FROM bill_converted c JOIN bill_numbers n USING (_ord)")
    found = []
    # a record DuckDB gave no text for is read from the file: only a blank record is skipped
    untold = {line: where[line][1] for line, _, text in errors if not (text or "").strip(WHITESPACE)}
    from_file = {where[line][0]: text for line, text in
                 line_numbers.line_texts(src, {where[line][0]: end for line, end in untold.items()}).items()}
    for line, error_type, text in errors:
        raw = (text if line not in untold else from_file.get(where[line][0], "")) or ""
        raw = raw.lstrip("\r\n").rstrip("\r\n")
        if not raw.strip(WHITESPACE) or _blank_record(raw):
            continue  # a blank line of spaces, or one quoted blank field: skipped, as billing.py does
        found.append(Reject(where[line][0], _structural_reason(error_type, raw, header), raw[:500]))
    _insert_rejects(con, ctx, found)


def _blank_record(raw: str) -> bool:
    """A record of one field that is blank once stripped (a quoted newline, '""'): billing.py's
    reader skips it as a blank line."""
    try:
        fields = next(csv.reader(io.StringIO(raw)), [])
    except csv.Error:
        return False
    return len(fields) <= 1 and not "".join(fields).strip()


def _int64s(values: np.ndarray) -> pa.Array:
    """An Arrow int64 array over the numpy array's memory (pa.array would import pandas to ask
    whether it was handed a Series: ~0.7 s CPU of a small file's load)."""
    values = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


def _structural_reason(error_type: str, raw: str, header: billing.Header) -> str:
    """billing.py's reason for a line DuckDB's reader refused."""
    if error_type in ("TOO MANY COLUMNS", "MISSING COLUMNS"):
        try:
            return header.reason(len(next(csv.reader(io.StringIO(raw)))))
        except (csv.Error, StopIteration):
            pass
    return DUCKDB_REASONS.get(error_type, f"unreadable CSV: {error_type.lower()}")


def _read_parquet(src: Source, con: duckdb.DuckDBPyConnection, family: Family, spool: Path,
                  warnings: list[str]) -> Frame:
    path = str(src.path)
    if src.compression:  # DuckDB reads Parquet from a plain file: expand it into `spool`, streamed
        path = str(spool / "bill.parquet")
        with src.open_binary() as stream, open(path, "wb") as copy:
            shutil.copyfileobj(stream, copy, 1 << 20)
    try:
        described = con.execute(f"DESCRIBE SELECT * FROM read_parquet({literal(path)})").fetchall()
    except duckdb.Error as error:
        return Frame(None, set(), None, Reject(0, f"unreadable Parquet file: {error}"))
    names = [row[0] for row in described]
    kinds = {row[0]: row[1] for row in described}
    columns = [family.normalize(n) for n in names]
    missing = family.missing(set(columns))
    if missing:
        return Frame(None, set(columns), None, Reject(0, f"the {family.label} file lacks {', '.join(missing)}"))
    header = billing.read_header(family, names)
    warnings.extend(header.warnings)
    position = {}
    for index, column in enumerate(columns):
        position.setdefault(column, index)
    types = {}
    for column, index in position.items():
        kind = kinds[names[index]]
        types[column] = (kind if kind.startswith(("TIMESTAMP", "DATE", "MAP(", "STRUCT", "LIST"))
                         or kind.endswith("[]") else "VARCHAR")
    fields = _fields(position, columns, names, header)
    fields.types.update(types)

    def load(con: duckdb.DuckDBPyConnection, used: set[str], convert) -> None:
        select = _constants(header, used)
        for column in (c for c in position if c in used):
            name, alias = ident(names[position[column]]), f"c{position[column]}"
            if types[column] == "VARCHAR":  # trimmed only with whitespace at an edge (as _cleaned)
                value = f"CAST({name} AS VARCHAR)"
                text = f"trim({value}, {literal(WHITESPACE)})"
                select.append(f"CASE WHEN {value} = '' THEN NULL WHEN NOT (ord({value}) <= 32 OR ord({value}[-1]) <= 32) "
                              f"THEN {value} WHEN {text} = '' THEN NULL ELSE {text} END AS {alias}")
            else:
                select.append(f"{name} AS {alias}")
        source = (f"(SELECT file_row_number + 1 AS _line, file_row_number + 1 AS _end, "
                  f"{', '.join(select) or '1 AS _none'} FROM read_parquet({literal(path)}, file_row_number=true))")
        con.execute(f"CREATE TEMP TABLE bill_converted AS {convert(source, '_line, _end, ')}")
        con.execute("CREATE TEMP VIEW bill_lines AS SELECT * FROM bill_converted")

    return Frame(fields, set(columns) | set(header.constants), load, text=False)


# --- converting ------------------------------------------------------------------------------

def _stage_frame(src: Source, con: duckdb.DuckDBPyConnection, ctx: ParseContext, family: Family,
                 plan_of, frame: Frame) -> int:
    """Read, convert and check the file with the family's plan; returns the records accepted."""
    if frame.reject is not None:
        _insert_rejects(con, ctx, [frame.reject])
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
    # the good lines are read from the converted table where they are (no copy): _finish reads
    # them with the few rows of bill_candidates
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
    _insert_rejects(con, ctx, [Reject(line, reason, texts.get(line, "")) for line, _, reason in bad])
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
                  frame: Frame) -> int:
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
    _insert_rejects(con, ctx, rejects)
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


def _insert_rejects(con: duckdb.DuckDBPyConnection, ctx: ParseContext, rejects: list[Reject]) -> None:
    if rejects:  # as three lists unnested side by side: executemany costs ~5 ms a row, and
        # pa.array would import pandas
        con.execute("INSERT INTO rejects (path, line, reason, raw) SELECT ?, unnest(?::BIGINT[]), "
                    "unnest(?::VARCHAR[]), unnest(?::VARCHAR[])",
                    [ctx.source, [r.line for r in rejects], [r.reason for r in rejects],
                     [r.raw[:500] for r in rejects]])


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
    reader = billing.json_records if first.lstrip("\ufeff").lstrip().startswith("{") else billing.csv_records
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
    _insert_rejects(con, ctx, parsed.rejects)
    _insert_candidates(con, rows)
    return parsed.accepted


# --- keys, the last of a repeated line, totals -----------------------------------------------

def _finish(con: duckdb.DuckDBPyConnection, ctx: ParseContext, family: Family) -> None:
    """Key the candidates (the SQL rows where they were converted and the few rows of
    bill_candidates) and keep the last of each key in the staging billing_lines."""
    rows = ("(SELECT * FROM bill_candidates UNION ALL BY NAME SELECT * FROM bill_sql_rows)"
            if _exists(con, "bill_sql_rows") else "bill_candidates")
    columns = ", ".join(billing.LINE_COLUMNS)
    keyed = columns.replace("line_key", "provider || '|id|' || line_key AS line_key")
    repeated, unkeyed_rows = con.execute(
        # distinct hashes are never more than distinct keys: a collision can only send the file
        # through the QUALIFY below (still right), never skip a repeated key; hashing costs a third less
        f"SELECT count(line_key) - count(DISTINCT hash(provider, line_key)) FILTER (line_key IS NOT NULL), "
        f"count(*) FILTER (line_key IS NULL) FROM {rows}").fetchone()
    last = ("QUALIFY row_number() OVER (PARTITION BY provider, line_key ORDER BY source_line DESC, _sub DESC) = 1"
            if repeated else "")  # a line id given twice: the later line wins
    if not repeated and not unkeyed_rows and rows != "bill_candidates":
        _serve_in_place(con, columns, keyed)
        return
    con.execute(f"""INSERT INTO billing_lines ({columns})
        SELECT {keyed} FROM {rows} WHERE line_key IS NOT NULL {last}""")
    if not unkeyed_rows:  # every line has its id (FOCUS, CUR): no digests
        return
    known = _python_keys(con, rows)
    hashed = columns.replace("line_key", "provider || '|sha256:' || digest || '#' || (row_number() OVER "
                                         "(PARTITION BY provider, digest ORDER BY source_line, _sub) - 1) AS line_key")
    unkeyed = (f"(SELECT c.* EXCLUDE (_key), k._key FROM {rows} c LEFT JOIN bill_keys k USING (source_line, _sub) "
               "WHERE c.line_key IS NULL)" if known else f"(SELECT * FROM {rows} WHERE line_key IS NULL)")
    con.execute(f"""INSERT INTO billing_lines ({columns})
        SELECT {hashed} FROM (SELECT *, coalesce(_key, {_digest_sql()}) AS digest FROM {unkeyed})""")


def _serve_in_place(con: duckdb.DuckDBPyConnection, columns: str, keyed: str) -> None:
    """Every line keyed by its id, none repeated: the staged `billing_lines` becomes a view of the
    SQL rows where they were converted (with the few rows of bill_candidates, keyed, in the table
    it was, renamed bill_kept_lines), so the merge reads them from there: no copy of the file's
    rows within the staging database (a 1M-line bill's ~1.1 s and its memory)."""
    con.execute(f"INSERT INTO billing_lines ({columns}) SELECT {keyed} FROM bill_candidates")
    con.execute("ALTER TABLE billing_lines RENAME TO bill_kept_lines")
    types = dict(con.execute(
        "SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = 'memory' AND schema_name = 'main' "
        "AND table_name = 'bill_kept_lines' ORDER BY column_index").fetchall())
    converted = {row[0] for row in con.execute("DESCRIBE bill_sql_rows").fetchall()}
    select = ", ".join(
        ("provider || '|id|' || line_key AS line_key" if name == "line_key" else name)
        if name in converted and name in billing.LINE_COLUMNS
        else f"CAST(NULL AS {kind}) AS {name}" for name, kind in types.items())
    con.execute(f"CREATE VIEW billing_lines AS SELECT {select} FROM bill_sql_rows "
                "UNION ALL SELECT * FROM bill_kept_lines")
    staging.keep_last(con, "billing_lines", repeated=False)  # counted above: no key repeats


def _restore_table(con: duckdb.DuckDBPyConnection) -> None:
    """Before another file is staged on this connection: the view `billing_lines` of the last
    one (_serve_in_place) back into a table with its rows, as staged tables accumulate."""
    if not con.execute("SELECT count(*) FROM duckdb_views() WHERE database_name = 'memory' "
                       "AND view_name = 'billing_lines'").fetchone()[0]:
        return
    con.execute("CREATE TEMP TABLE bill_restored AS SELECT * FROM billing_lines")
    con.execute("DROP VIEW billing_lines")
    con.execute("DELETE FROM bill_kept_lines")
    con.execute("INSERT INTO bill_kept_lines SELECT * FROM bill_restored")
    con.execute("DROP TABLE bill_restored")
    con.execute("ALTER TABLE bill_kept_lines RENAME TO billing_lines")
    con.execute("DELETE FROM kept_last WHERE table_name = 'billing_lines'")  # its rows may repeat now


def _exists(con: duckdb.DuckDBPyConnection, view: str) -> bool:
    return bool(con.execute("SELECT count(*) FROM duckdb_views() WHERE temporary AND view_name = ?",
                            [view]).fetchone()[0])


def _json_string(sql: str) -> str:
    return f"coalesce(CAST(to_json({sql}) AS VARCHAR), 'null')"


def _digest_sql() -> str:
    """SQL of billing._line_key's digest: sha256 of json.dumps(row, sort_keys=True) (first 32 hex)."""
    parts = []
    for column in sorted(CONTENT):
        if column in ("billed_cost", "effective_cost", "list_cost"):
            value = (f"CASE WHEN {column} IS NULL THEN 'null' WHEN {column} = 0 THEN '\"0E-12\"' "
                     f"WHEN abs({column}) < 0.000001 THEN '\"' || bill_sci({column}) || '\"' "
                     f"ELSE '\"' || CAST({column} AS VARCHAR) || '\"' END")
        elif column.endswith(("_start", "_end")):
            value = f"CASE WHEN {column} IS NULL THEN 'null' ELSE '\"' || bill_iso_text({column}) || '\"' END"
        elif column == "consumed_quantity":
            value = f"coalesce(CAST({column} AS VARCHAR), 'null')"
        elif column == "tags":
            value = ("CASE WHEN tags IS NULL THEN 'null' ELSE '[' || array_to_string(list_transform("
                     "list_sort(map_entries(tags)), lambda e: '[' || " + _json_string("e.key") + " || ', ' || "
                     + _json_string("e.value") + " || ']'), ', ') || ']' END")
        else:
            value = _json_string(column)
        parts.append(f"'\"{column}\": ' || {value}")
    return "left(sha256('{' || " + " || ', ' || ".join(parts) + " || '}'), 32)"


def _python_keys(con: duckdb.DuckDBPyConnection, rows: str) -> bool:
    """Digests of the candidates with non-ASCII text SQL cannot write as Python does, from
    billing.py's own JSON (few lines: DuckDB writes UTF-8 where json.dumps escapes), into the
    table bill_keys (source_line, _sub, _key); whether there are any."""
    condition = " OR ".join(
        [f"regexp_matches({c}, '{OTHER_THAN_PRINTABLE_ASCII}')" for c in CONTENT
         if c not in ("billed_cost", "effective_cost", "list_cost", "consumed_quantity", "tags")
         and not c.endswith(("_start", "_end"))]
        + [f"regexp_matches(CAST(tags AS VARCHAR), '{OTHER_THAN_PRINTABLE_ASCII}')"])
    cursor = con.execute(f"SELECT source_line, _sub, {', '.join(CONTENT)} FROM {rows} "
                         f"WHERE line_key IS NULL AND ({condition})")
    updates = []
    while batch := cursor.fetchmany(1000):
        for line, sub, *values in batch:
            row = dict(zip(CONTENT, values))
            if row["tags"] is not None:
                row["tags"] = sorted(row["tags"].items())
            for key in ("charge_period_start", "charge_period_end", "billing_period_start", "billing_period_end"):
                if row[key] is not None:
                    row[key] = row[key].astimezone(billing.UTC)
            text = billing.json.dumps(row, sort_keys=True, default=billing._plain_json)
            updates.append((line, sub, billing.hashlib.sha256(text.encode()).hexdigest()[:32]))
    if updates:
        con.execute("CREATE TEMP TABLE bill_keys (source_line BIGINT, _sub BIGINT, _key VARCHAR)")
        con.executemany("INSERT INTO bill_keys VALUES (?, ?, ?)", updates)
    return bool(updates)


def totals(con: duckdb.DuckDBPyConnection) -> dict:
    """billing.totals of the staged lines, computed in SQL."""
    sums = con.execute("SELECT billing_currency, sum(billed_cost), sum(effective_cost) FROM billing_lines "
                       "GROUP BY 1 ORDER BY 1").fetchall()
    lines, first, last = con.execute(
        "SELECT count(*), bill_iso_text(min(charge_period_start)), "
        "bill_iso_text(max(coalesce(charge_period_end, charge_period_start))) FROM billing_lines").fetchone()
    return {
        "lines": lines,
        "billed_cost_total": {c: billing.plain(Decimal(b)) for c, b, _ in sums},
        "effective_cost_total": {c: billing.plain(Decimal(e)) for c, _, e in sums if e is not None},
        "charge_period_min": first,
        "charge_period_max": last,
    }


def _drop(con: duckdb.DuckDBPyConnection, keep_candidates: bool = False) -> None:
    """Drop the working tables of a staging (those the view `billing_lines` reads stay)."""
    views = {name for (name,) in con.execute("SELECT view_name FROM duckdb_views() WHERE temporary").fetchall()}
    if con.execute("SELECT count(*) FROM duckdb_views() WHERE database_name = 'memory' "
                   "AND view_name = 'billing_lines'").fetchone()[0]:
        con.execute("DROP TABLE IF EXISTS bill_candidates")
        return
    for table in ("bill_sql_rows", "bill_keys", "bill_lines", "bill_converted", "bill_errors", "bill_scans") + (
            () if keep_candidates else ("bill_candidates",)):
        con.execute(f"DROP {'VIEW' if table in views else 'TABLE'} IF EXISTS {table}")
    try:
        con.unregister("bill_numbers")
    except duckdb.Error:
        pass
