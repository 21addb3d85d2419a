"""The records of a Prometheus text file (PromText): its sample lines' values made into one row per Key.

prom_text.py leaves each sample line's values in TEMP TABLE prom_lines (`line`, `metric`, the
table's columns, only the line's metric among the measures). Once every batch is staged, one
pass in SQL: a metric given again for the same key refuses its line (PromText.repeated); the
first line of each metric fills the row (each other column from the first line that gives it);
the definition's Within rules check the whole row, a row outside them refused at its first line
with the Within's reason ({name} being the column).
"""
from __future__ import annotations

import re

from ingest.engine import line_sql
from ingest.engine.batch_spellings import iso_utc, quote
from ingest.engine.definition import TIME, Definition, Within
from ingest.engine.staging import Source

LINES = "prom_lines"


def settle(definition: Definition, con, src: Source) -> int:
    """Load the records of prom_lines into the definition's table (their rejects into `rejects`);
    returns the records loaded."""
    key = definition.key.parts
    stored = [f.column for f in definition.fields if f.stored]
    con.execute(f"""CREATE OR REPLACE TEMP TABLE prom_numbered AS
        SELECT *, row_number() OVER (PARTITION BY {", ".join(key)}, metric ORDER BY line) AS nth FROM {LINES}""")
    line_sql.add_rejects_reading_raw(con, src, f"SELECT line, {_repeated(definition)} FROM prom_numbered WHERE nth > 1")
    firsts = ", ".join(f"arg_min({c}, line) FILTER (WHERE {c} IS NOT NULL) AS {c}" for c in stored if c not in key)
    withins = definition.rules(Within)
    inside = " AND ".join([f"coalesce({w.column} BETWEEN {w.low!r} AND {w.high!r}, true)" for w in withins] or ["true"])
    con.execute(f"""CREATE OR REPLACE TEMP TABLE prom_records AS
        SELECT *, {inside} AS ok FROM (
            SELECT {", ".join(key)}, min(line) AS source_line, {firsts}
            FROM prom_numbered WHERE nth = 1 GROUP BY {", ".join(key)})""")
    loaded = con.execute(f"""INSERT INTO {definition.table} BY NAME
        SELECT {", ".join(stored)}, '{definition.kind}' AS source_kind, source_line FROM prom_records WHERE ok""").fetchall()[0][0]
    refused = con.execute(f"SELECT source_line, {', '.join(w.column for w in withins) or 'NULL'} FROM prom_records "
                          "WHERE NOT ok ORDER BY source_line").fetchall()
    con.execute("CREATE OR REPLACE TEMP TABLE prom_refused (line BIGINT, reason VARCHAR)")
    if refused:  # few: each worded in Python, as the reader words a Within (a value's repr)
        con.executemany("INSERT INTO prom_refused VALUES (?, ?)",
                        [(line, _outside(withins, found)) for line, *found in refused])
    line_sql.add_rejects_reading_raw(con, src, "SELECT line, reason FROM prom_refused")
    con.execute(f"DROP TABLE prom_numbered; DROP TABLE prom_records; DROP TABLE prom_refused; DROP TABLE {LINES}")
    return loaded


def _outside(withins: tuple[Within, ...], found: list) -> str:
    """The reason of the first Within the row's values fail."""
    for within, value in zip(withins, found):
        if value is not None and not within.low <= value <= within.high:
            return within.reason.format(name=within.column, value=value, low=within.low, high=within.high)
    raise AssertionError("a refused record is within every bound")


def _repeated(definition: Definition) -> str:
    """SQL for PromText.repeated of a line: {metric} its metric, a key column its value (a time as ISO-8601 UTC)."""
    pieces = []
    for literal, name in re.findall(r"([^{]*)(?:\{(\w+)\})?", definition.prometheus.repeated):
        if literal:
            pieces.append(quote(literal))
        if name == "metric":
            pieces.append("metric")
        elif name:
            part = iso_utc(name) if definition.field(name).type == TIME else f"CAST({name} AS VARCHAR)"
            pieces.append(f"coalesce({part}, '')")
    return " || ".join(pieces) or "''"
