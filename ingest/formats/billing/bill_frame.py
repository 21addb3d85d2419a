"""What a bill reader hands the staging (ingest/formats/billing/bill_stage.py): a `Frame` (the
file's columns by normalised name and how to load them), or `Unreadable` for a file DuckDB's
reader cannot read; and the helpers both readers (bill_csv.py, bill_parquet.py) share.
"""
from __future__ import annotations

import duckdb

from ingest.engine.contract import ParseContext, Reject
from ingest.formats.billing import billing
from ingest.formats.billing.bill_sql import Fields, literal

# The characters billing.py's str.strip() removes from a field's edges (ASCII ones; a field with
# another character at an edge is compared with trim() exactly).
WHITESPACE = " \t\r\n\x0b\x0c"


class Unreadable(Exception):
    """DuckDB's reader cannot read this file as written: billing.py reads it instead."""


class Frame:
    """A file as the family sees it: its columns by normalised name, or the file-level reject."""

    def __init__(self, fields: Fields | None, all_columns: set[str], load, reject: Reject | None = None,
                 text: bool = True):
        self.fields = fields
        self.text = text  # a text file: a rejected line's text is read back from it (not Parquet's bytes)
        self.all_columns = all_columns  # every normalised header name (billing.py's `columns`)
        self.load = load  # (con, used names, convert) -> bill_converted and the view bill_lines
        self.reject = reject


def labels(columns: list[str], names: list[str]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for column, name in zip(columns, names):
        labels.setdefault(column, name)
    return labels


def fields_of(position: dict[str, int], columns: list[str], names: list[str], header: billing.Header) -> Fields:
    """The file's columns (c<i>) and the values a setting gives every line (k<j>), as Fields."""
    fields = Fields({c: f"c{i}" for c, i in position.items()}, labels(columns, names),
                    {c: "VARCHAR" for c in position})
    for number, (name, _) in enumerate(header.constants.items()):
        fields.columns[name], fields.types[name] = f"k{number}", "VARCHAR"
        fields.labels[name] = header.labels[name]
    return fields


def constants(header: billing.Header, used: set[str]) -> list[str]:
    """SQL select items of the per-file values (billing.read_header) the plan reads."""
    return [f"{literal(value)} AS k{number}" for number, (name, value) in enumerate(header.constants.items())
            if name in used]


def insert_rejects(con: duckdb.DuckDBPyConnection, ctx: ParseContext, rejects: list[Reject]) -> None:
    if rejects:  # as three lists unnested side by side: executemany costs ~5 ms a row, and
        # pa.array would import pandas
        con.execute("INSERT INTO rejects (path, line, reason, raw) SELECT ?, unnest(?::BIGINT[]), "
                    "unnest(?::VARCHAR[]), unnest(?::VARCHAR[])",
                    [ctx.source, [r.line for r in rejects], [r.reason for r in rejects],
                     [r.raw[:500] for r in rejects]])
