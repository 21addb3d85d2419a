"""Reading a bill CSV with DuckDB's `read_csv` (`store_rejects`, every field as text, each
record numbered as it is read): the header as billing.py reads it, the fields trimmed and their
null literals as NULL, and each row's physical line (ingest/engine/line_numbers.py, the view
`bill_lines`); DuckDB's structural rejects with billing.py's reasons.
"""
from __future__ import annotations

import csv
import io
from concurrent.futures import ThreadPoolExecutor

import duckdb
import numpy as np
import pyarrow as pa

from ingest.engine import line_numbers
from ingest.engine.contract import BadValue, ParseContext, Reject
from ingest.engine.staging import Source
from ingest.formats.billing import bill_frame, billing
from ingest.formats.billing.bill_frame import WHITESPACE
from ingest.formats.billing.bill_sql import literal
from ingest.formats.billing.billing import Family

DUCKDB_REASONS = {"UNQUOTED VALUE": "unreadable CSV: a quoted field is not closed",
                  "INVALID UNICODE": "not UTF-8 text", "INVALID ENCODING": "not UTF-8 text",
                  "LINE SIZE OVER MAXIMUM": "unreadable CSV: the line is too long"}
# A large plain CSV is read in buffers of half its size, at most LARGE_BUFFER_BYTES, instead of
# DuckDB's default 32 MB: the order-preserving insert of bill_converted (read_csv's `load`) costs
# less. The 1M-line FOCUS bill (504 MB), the convert statement alone, CPU s: 32 MB 4.41-4.95,
# 64 MB 4.44-4.55, 192 MB 4.73-5.05, 256 MB 3.81-4.67, 512 MB 4.34-4.46 (interleaved); ~150 MB
# more memory while it reads. A buffer size also sets DuckDB's line size limit, so the default
# one (MAX_LINE_BYTES) is given with it: the same lines are too long either way.
LARGE_BUFFER_BYTES, LARGE_FILE_BYTES, MAX_LINE_BYTES = 256 << 20, 64 << 20, 2_000_000


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
                raise bill_frame.Unreadable(f"the header cannot be read ({error})") from None
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


def read_csv(src: Source, con: duckdb.DuckDBPyConnection, family: Family, ctx: ParseContext,
              warnings: list[str]) -> bill_frame.Frame:
    names, header_line, header_raw, newline, widths = _header(src)
    if not names:
        return bill_frame.Frame(None, set(), None)
    missing = family.missing({family.normalize(n) for n in names})
    if missing:  # billing.py refuses the header and every line under it, each with its number
        raise bill_frame.Unreadable(f"the {family.label} header lacks {', '.join(missing)}")
    header = billing.read_header(family, names, widths)
    warnings.extend(header.warnings)
    names, columns = header.names, header.columns  # a ragged tail the rows lack: cut off
    position = {}
    for index, column in enumerate(columns):
        position.setdefault(column, index)
    fields = bill_frame.fields_of(position, columns, names, header)
    if header_line != 1:
        raise bill_frame.Unreadable("blank lines before the header")

    def load(con: duckdb.DuckDBPyConnection, used: set[str], convert) -> None:
        nulls = ", ".join(["''"] + [literal(n) for n in sorted(family.nulls)])
        cleaned = [f"{_cleaned(f'c{position[c]}', nulls)} AS c{position[c]}" for c in position if c in used]
        cleaned += bill_frame.constants(header, used)
        types = "{" + ", ".join(f"'c{i}': 'VARCHAR'" for i in range(len(names))) + "}"
        reader = (f"read_csv({literal(str(src.path))}, auto_detect=false, columns={types}, header=true, "
                  f"delim=',', quote='\"', escape='\"', strict_mode=true, "
                  f"compression={literal(src.duckdb_compression)}, store_rejects=true, "
                  f"rejects_table='bill_errors', rejects_scan='bill_scans'{_buffer(src)})")
        with ThreadPoolExecutor(1) as pool:
            counting = pool.submit(line_numbers.count_lines, src)
            try:
                # read on every thread into a table that keeps the reader's order (DuckDB's
                # order-preserving insert): the k-th row (rowid k - 1) is the k-th record read, so
                # no row number is carried; a streaming row_number() ran the whole read and
                # convert on one thread
                source = f"(SELECT {', '.join(cleaned) or '1 AS _none'} FROM {reader})"
                con.execute("SET preserve_insertion_order = true")
                try:
                    con.execute(f"CREATE TEMP TABLE bill_converted AS {convert(source, '')}")
                finally:
                    con.execute("SET preserve_insertion_order = false")
            except duckdb.OutOfMemoryException as error:
                raise BadValue(f"needs more memory than the staging limit (MLCOST_STAGE_MEMORY): "
                               f"{str(error).splitlines()[0]}") from None
            except duckdb.Error as error:
                raise bill_frame.Unreadable(str(error).splitlines()[0]) from None
            physical = counting.result()
        _number_csv_rows(src, con, ctx, physical, header)

    return bill_frame.Frame(fields, set(columns) | set(header.constants), load)


def _buffer(src: Source) -> str:
    """read_csv's buffer options for this file: a large plain file in buffers of half its size
    (whole MiB), at most LARGE_BUFFER_BYTES (see there); else DuckDB's defaults."""
    size = src.path.stat().st_size
    if src.compression is not None or size <= LARGE_FILE_BYTES:
        return ""
    half = -(-size // (2 << 20)) << 20
    return f", buffer_size={min(LARGE_BUFFER_BYTES, max(32 << 20, half))}, max_line_size={MAX_LINE_BYTES}"


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
            raise bill_frame.Unreadable("the records DuckDB read do not match the file's lines")
        keep = ~blank
        keep[0] = False  # the header
        keep[rejected - 1] = False
        following = np.append(starts[1:] - 1, physical)  # a record's last line
        lines, ends = starts[keep], following[keep]
        where = {line: (int(starts[line - 1]), int(following[line - 1])) for line in rejected.tolist()}
    if len(lines) != rows:
        raise bill_frame.Unreadable("the records DuckDB read do not match the file's lines")
    if physical == records and not len(rejected):  # record k is line k + 1 (the header is line 1)
        con.execute("CREATE TEMP VIEW bill_lines AS SELECT rowid + 2 AS _line, rowid + 2 AS _end, * "
                    "FROM bill_converted")
    else:  # the k-th record read is the k-th of `lines`
        con.register("bill_numbers", pa.Table.from_arrays(
            [_int64s(np.arange(1, len(lines) + 1)), _int64s(lines), _int64s(ends)], ["_ord", "_line", "_end"]))
        con.execute("CREATE TEMP VIEW bill_lines AS SELECT n._line, n._end, c.* EXCLUDE (_ord) "
                    "FROM (SELECT rowid + 1 AS _ord, * FROM bill_converted) c JOIN bill_numbers n USING (_ord)")
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
    bill_frame.insert_rejects(con, ctx, found)


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
