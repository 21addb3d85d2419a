"""The spellings SQL reads exactly as Python does, and small SQL pieces every pass shares.

Times (ISO-8601 with an offset, or naive), numbers and money as JSON or CSV text, the blanks
Python's str.strip() removes, the earliest and latest time a record may hold; a definition's
scalar, list and map fields; a time written as Python's isoformat(), a naive time read in a zone,
a text quoted for SQL. batch_json.py, batch_csv.py, batch_checks.py and batch_typed.py build on
these; this module imports none of them.
"""
from __future__ import annotations

from datetime import timezone

from ingest.engine import line_sql
from ingest.engine.contract import ParseContext
from ingest.engine.definition import (COUNT, COUNT_LIST, MONEY, NUMBER, PERCENT, TEXT, TEXT_LIST, TEXT_MAP, TIME,
                                      Definition)

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
EARLIEST, LATEST = "TIMESTAMPTZ '1990-01-01 00:00:00+00'", "TIMESTAMPTZ '2100-01-01 00:00:00+00'"
SCALARS = (TEXT, TIME, COUNT, NUMBER, PERCENT, MONEY)


def scalars_of(definition: Definition, *types: str) -> list:
    return [f for f in definition.fields if f.type in (types or SCALARS)]


def lists_of(definition: Definition) -> list:
    return [f for f in definition.fields if f.type in (TEXT_LIST, COUNT_LIST)]


def maps_of(definition: Definition) -> list:
    return [f for f in definition.fields if f.type == TEXT_MAP]


def iso_utc(value: str) -> str:
    """SQL for a TIMESTAMPTZ as Python's isoformat() of the UTC instant."""
    micro = f"microsecond({value}) % 1000000"  # DuckDB's microsecond() counts from the minute
    return (f"strftime({value} AT TIME ZONE 'UTC', '%Y-%m-%dT%H:%M:%S') || CASE WHEN {micro} <> 0 "
            f"THEN '.' || lpad(CAST({micro} AS VARCHAR), 6, '0') ELSE '' END || '+00:00'")


def zoned(text: str, zone: str | None) -> str:
    """SQL (a WHEN of a CASE): a naive ISO-8601 `text` read in `zone` (an IANA name DuckDB knows,
    line_sql.sql_zone), as Python reads it; within 3 hours of a change of offset (summer time) it
    is left to the reader (Python's rule, fold=0). Nothing when naive times are UTC or unknown."""
    if zone in (None, "UTC"):
        return ""
    return (f"WHEN regexp_full_match({text}, '{ISO_NAIVE}') "
            f"THEN {line_sql.instant(text, zone).replace('$zone', quote(zone))} ")


def time_ok(ctx: ParseContext, text: str) -> str:
    """SQL: `text` is ISO-8601 that DuckDB reads as Python does (naive only when read in UTC)."""
    patterns = [ISO_WITH_OFFSET] + ([ISO_NAIVE] if ctx.tz is timezone.utc else [])
    # one regex of both: one pass over the text (two regexp_full_match: ~40 % more, 3 % of a lenient pass)
    return f"regexp_full_match({text}, '{'|'.join(f'(?:{p})' for p in patterns)}')"


def quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
