"""The records of a Prometheus text file (PromText): its sample lines' values made into one row per Key.

prom_text.py leaves each sample line's values in TEMP TABLE prom_lines (`line`, `metric`, the
table's columns, only the line's metric among the measures; prom_columns.py gives a server's
series' points in the same shape, as a view). Once every batch is staged, one pass in SQL: a
metric given again for the same key refuses its line (PromText.repeated; looked for only when
some key has another line of a metric it has), the first line of each metric fills the row
(each other column from the first line that gives it); the definition's Within rules check the
whole row, a row outside them refused at its first line with the Within's reason ({name} being
the column).
"""
from __future__ import annotations

import re
from collections.abc import Callable

from ingest.engine import line_sql, staging
from ingest.engine.batch_spellings import iso_utc, quote
from ingest.engine.definition import TIME, Definition, Within
from ingest.engine.staging import Source

LINES = "prom_lines"


def settle(definition: Definition, con, src: Source, text_of: Callable[[list[int]], dict[int, str]] | None = None,
           lines: str = LINES) -> int:
    """Load the records of prom_lines (or `lines`, a view of its shape) into the definition's table
    (their rejects into `rejects`), then drop prom_lines; returns the records loaded. A refused line
    shows its text read again from the file, or `text_of(lines)` ({line: text}) where there is no
    file (prom_columns)."""
    key = definition.key.parts
    stored = [f.column for f in definition.fields if f.stored]
    firsts = ", ".join(f"arg_min({c}, line) FILTER (WHERE {c} IS NOT NULL) AS {c}" for c in stored if c not in key)
    withins = definition.rules(Within)
    inside = " AND ".join([f"coalesce({w.column} BETWEEN {w.low!r} AND {w.high!r}, true)" for w in withins] or ["true"])
    counts = [f"count(*) FILTER (WHERE metric = {quote(m)})" for m in definition.prometheus.metrics]
    once = f"count(*) = {' + '.join(counts)} AND greatest({', '.join(counts)}) <= 1"  # no metric twice, no other
    records = f"""CREATE OR REPLACE TEMP TABLE prom_records AS
        SELECT *, {inside} AS ok FROM (
            SELECT {", ".join(key)}, min(line) AS source_line, {firsts}, {once} AS once
            FROM {{lines}} GROUP BY {", ".join(key)})"""
    con.execute(records.format(lines=lines))
    if not con.execute("SELECT coalesce(bool_and(once), true) FROM prom_records").fetchone()[0]:
        # a metric given again for a key (rare): the later lines refused, the records made again without them
        con.execute(f"""CREATE OR REPLACE TEMP TABLE prom_numbered AS
            SELECT *, row_number() OVER (PARTITION BY {", ".join(key)}, metric ORDER BY line) AS nth FROM {lines}""")
        _add_rejects(con, src, f"SELECT line, {_repeated(definition)} FROM prom_numbered WHERE nth > 1", text_of)
        con.execute(records.format(lines="(SELECT * FROM prom_numbered WHERE nth = 1)"))
        con.execute("DROP TABLE prom_numbered")
    loaded = con.execute(f"""INSERT INTO {definition.table} BY NAME
        SELECT {", ".join(stored)}, '{definition.kind}' AS source_kind, source_line FROM prom_records WHERE ok""").fetchall()[0][0]
    refused = con.execute(f"SELECT source_line, {', '.join(w.column for w in withins) or 'NULL'} FROM prom_records "
                          "WHERE NOT ok ORDER BY source_line").fetchall()
    con.execute("CREATE OR REPLACE TEMP TABLE prom_refused (line BIGINT, reason VARCHAR)")
    if refused:  # few: each worded in Python, as the reader words a Within (a value's repr)
        con.executemany("INSERT INTO prom_refused VALUES (?, ?)",
                        [(line, _outside(withins, found)) for line, *found in refused])
    _add_rejects(con, src, "SELECT line, reason FROM prom_refused", text_of)
    con.execute(f"DROP TABLE prom_records; DROP TABLE prom_refused; DROP TABLE {LINES}")
    return loaded


def _add_rejects(con, src: Source, query: str, text_of: Callable[[list[int]], dict[int, str]] | None) -> None:
    """Stage the rejects `query` gives as (line, reason), each with its line's text."""
    if text_of is None:
        line_sql.add_rejects_reading_raw(con, src, query)
        return
    refused = con.execute(query).fetchall()
    if refused:
        text = text_of(sorted({line for line, _ in refused}))
        staging.add_rejects(con, src.name, [(line, reason, text.get(line, "")) for line, reason in refused])


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
