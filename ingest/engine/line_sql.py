"""SQL pieces for parsers that type a batch of text lines at once (nvidia-smi, DCGM, CodeCarbon).

A batch is the Arrow table of `staging.line_batches` (`line`, `raw`) registered as `batch`.
Each parser matches a whole "plain" line with one strict pattern, types its fields with
TRY_CAST, and hands every other line to its per-line Python reader, which names the exact
reason. The patterns here are narrower than what DuckDB, Arrow and Python each accept, so a
value that passes them reads the same in all three.
"""
from __future__ import annotations

import dataclasses
from datetime import timezone, tzinfo

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from ingest.engine import staging
from ingest.settings import limits

# What Python's str.strip() removes (str.isspace): a field with one of these at an edge is not plain.
UNICODE_SPACE = r"\x85\xa0\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}"
PY_SPACE = r"\t\n\x0b\x0c\r\x1c-\x1f " + UNICODE_SPACE
BLANK_LINE = f"[{PY_SPACE}]*"  # a line Python's `not line.strip()` skips
# Patterns capture nothing (a parser adds the groups it extracts).
# A text field without comma, quote or control characters, and no blank at either edge.
SOLID = f'[^,"\\x00-\\x1f\\x7f {UNICODE_SPACE}]'
TEXT = f'(?:{SOLID}(?:[^,"\\x00-\\x1f\\x7f]*{SOLID})?)?'
OTHER = r'[^,"\x00-\x1f\x7f]*'  # a column the parser ignores: anything but a comma, quote or control character
DECIMAL = r"-?[0-9]+(?:\.[0-9]+)?"  # read alike by DuckDB, Arrow and Python's float()
DAY = r"\d{4}-\d{2}-\d{2}"
CLOCK = r"(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d{1,6})?"
OFFSET = r"(?:Z|[+-](?:[01]\d|2[0-3]):[0-5]\d)"


def sql_zone(con: duckdb.DuckDBPyConnection, tz: tzinfo) -> str | None:
    """The IANA name of `tz` when DuckDB knows it (naive times are then read in SQL), else None."""
    if tz is timezone.utc:
        return "UTC"
    name = getattr(tz, "key", None)
    if not name:
        return None
    try:
        con.execute("SELECT timezone(?, TIMESTAMP '2000-01-01')", [name]).fetchall()
    except duckdb.Error:
        return None
    return name


def instant(stamp: str, zone: str | None) -> str:
    """SQL for the TIMESTAMPTZ of the ISO text `stamp` (an SQL expression that matched
    DAY[T ]CLOCK OFFSET?): with its offset as written, else in `zone` (bound as $zone unless
    UTC). A naive time within 3 hours of a change of offset (summer time) is NULL, left to
    Python's rule (fold=0); so is every naive time when DuckDB does not know the zone."""
    with_offset = f"regexp_matches({stamp}, '{OFFSET}$')"
    if zone == "UTC":  # the staging session is in UTC: a naive time casts as it is
        return f"TRY_CAST({stamp} AS TIMESTAMPTZ)"
    if zone is None:
        return f"CASE WHEN {with_offset} THEN TRY_CAST({stamp} AS TIMESTAMPTZ) END"
    local = f"TRY_CAST({stamp} AS TIMESTAMP)"
    steady = (f"timezone($zone, {local} - INTERVAL 3 HOUR) + INTERVAL 3 HOUR = timezone($zone, {local}) "
              f"AND timezone($zone, {local} + INTERVAL 3 HOUR) - INTERVAL 3 HOUR = timezone($zone, {local})")
    return (f"CASE WHEN {with_offset} THEN TRY_CAST({stamp} AS TIMESTAMPTZ) "
            f"WHEN {steady} THEN timezone($zone, {local}) END")


def in_years(instant_sql: str) -> str:
    """SQL: the instant is within 1990-2099 (values.EARLIEST to LATEST), as Python checks it."""
    return (f"({instant_sql} >= TIMESTAMPTZ '1990-01-01 00:00:00+00' "
            f"AND {instant_sql} < TIMESTAMPTZ '2100-01-01 00:00:00+00')")


def first_filled(con: duckdb.DuckDBPyConnection, src: staging.Source, skip_blank: bool = True,
                 refuse_before: bool = True) -> tuple[int | None, str | None]:
    """The batch's first line a per-line parser would take for the file's first line: (line,
    text), or (None, None). A line over [ingest] max_line_bytes never is (the loader hands the
    per-line path the lines without it): each one before it is staged as refused, with its size
    (unless `refuse_before` is off and a line was found: the caller stages the whole batch).
    With `skip_blank`, a blank line (Python's `not line.strip()`) is passed over too."""
    found = con.execute("SELECT line, raw FROM batch WHERE NOT starts_with(raw, $marker) "
                        "AND NOT ($skip AND regexp_full_match(raw, $blank)) ORDER BY line LIMIT 1",
                        {"marker": TOO_LONG, "skip": skip_blank, "blank": BLANK_LINE}).fetchall()
    line, text = found[0] if found else (None, None)
    if refuse_before or line is None:
        refuse_too_long(con, src, before=line)
    return line, text


def refuse_too_long(con: duckdb.DuckDBPyConnection, src: staging.Source, before: int | None) -> None:
    """Stage as refused, with its size, each line of the batch dropped for its length before line
    `before` (every one when None)."""
    too_long = con.execute("SELECT line, raw FROM batch WHERE starts_with(raw, $marker) AND line < $before "
                           "ORDER BY line", {"marker": TOO_LONG, "before": before or 2**62}).fetchall()
    staging.add_rejects(con, src.name, [(number, limits.too_long_reason(raw), "") for number, raw in too_long])


TOO_LONG = limits.too_long_marker(0)[:-1]  # how every line staging drops for its length begins


def add_rejects_reading_raw(con: duckdb.DuckDBPyConnection, src: staging.Source, query: str) -> None:
    """Stage the rejects `query` gives as (line, reason), each with its line's text read again
    from the file: rows refused once the whole file is read (their batch is gone) are few, so
    their text is not kept for every row on the way. No second read when there are none."""
    refused = con.execute(query).fetchall()
    if not refused:
        return
    wanted = pa.array(sorted({line for line, _ in refused}), pa.int64())
    text: dict[int, str] = {}
    for batch in staging.line_batches(dataclasses.replace(src, progress=None)):  # not the progress bar again
        hits = batch.filter(pc.is_in(batch["line"], value_set=wanted))
        text.update(zip(hits["line"].to_pylist(), hits["raw"].to_pylist()))
    staging.add_rejects(con, src.name, [(line, reason, text.get(line, "")) for line, reason in refused])
