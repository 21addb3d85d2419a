"""Prometheus text read by a Definition (PromText): one SQL pass per batch, the reader for the rest.

A sample line `NAME{label="v",...} VALUE [TIMESTAMP_MS]` of one of the definition's metrics is a
record: its labels by name, its value under NAME, its timestamp in seconds under PromText.time.
Comments, blank lines and other metrics are skipped. The definition's Fields read that record as
any other; the rules that concern the whole record (Within) wait for prom_records.py.

A plain line (labels without escapes or commas in their values, no label twice, nothing around
it, a value and timestamp in the spellings DuckDB and Python read alike, every Field's value in
its plain spelling, every Required given) is read in SQL. Every other line of our metrics goes
to `read_lines`: prometheus_client's parser, then reader.build_record with the definition's
line rules (`read_records`), which names the exact reason (or raises FileRefused). Both write
the line's values to TEMP TABLE prom_lines (`line`, `metric`, the table's columns);
prom_records.settle then makes the records. prom_columns.py reads a Prometheus server's series
(no text) with the same SQL for a value and a time (`field_sql`) and the same `read_records`.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import replace

import pyarrow as pa

from ingest.engine import line_sql, reader, staging
from ingest.engine.batch_spellings import quote
from ingest.engine.contract import BadValue, FileRefused, Lines, ParseContext
from ingest.engine.definition import (COUNT, NUMBER, TEXT, TIME, Definition, Field, FromFileName, FromOption,
                                      Required, Within)
from ingest.engine.prom_records import LINES, settle
from ingest.engine.staging import Source, Staged
from ingest.settings import limits

log = logging.getLogger(__name__)
# A label of a plain line: no escapes, and no comma in its value, so that `,name="` only ever
# starts a label (each label is then found by its own pattern).
_BARE_LABEL = r'(?:[a-zA-Z]|_[a-zA-Z0-9])[a-zA-Z0-9_]*="[^",\\\x00-\x1f]*"'
# A label value with a blank at an edge (Python's strip() would change it): the reader's.
_EDGE = f'="[{line_sql.PY_SPACE}]|[{line_sql.PY_SPACE}]"'
VALUE = r"-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]{1,3})?"  # a value read alike by DuckDB and float()
_WHOLE = r"[0-9]{1,15}"
_LINE_STEPS = (Field, Required, FromOption, FromFileName)  # a line's rules; Within waits for the record


def stage(definition: Definition, src: Source, con, ctx: ParseContext) -> Staged:
    """Stage a file of Prometheus text: its lines' values a batch at a time, then its records."""
    fields = [f for f in definition.fields if f.stored]
    con.execute(f"CREATE OR REPLACE TEMP TABLE {LINES} AS SELECT 0::BIGINT AS line, ''::VARCHAR AS metric, "
                f"{', '.join(f.column for f in fields)} FROM {definition.table} LIMIT 0")
    statement = _typed_statement(definition, ctx)
    params = {"ours": _ours(definition), "plain": _plain(definition),
              "marker": limits.too_long_marker(0)[:-1]}
    if ctx.at is not None and "$at" in statement:
        params["at"] = ctx.at
    for batch in staging.line_batches(src):
        con.register("batch", batch)
        try:
            con.execute(statement, params)
            _refuse_repeated_labels(con)
            con.execute(f"INSERT INTO {LINES} BY NAME SELECT line, metric, {', '.join(f.column for f in fields)} "
                        "FROM prom_batch WHERE ok")
            con.execute("INSERT INTO rejects SELECT NULL, ?, line, 'too long', raw FROM prom_batch JOIN batch USING (line) "
                        "WHERE too_long", [src.name])
            rest = con.execute("SELECT line, raw FROM prom_batch JOIN batch USING (line) WHERE NOT ok AND NOT too_long "
                               "ORDER BY line").fetchall()
        finally:
            con.unregister("batch")
        if rest:
            log.debug("%s: %d lines read by the generic reader", src.name, len(rest),
                      extra={"reader_lines": [line for line, _ in rest]})
            rows, rejects = read_lines(definition, rest, ctx)
            staging.add_rejects(con, src.name, rejects)
            if rows:
                schema = staging.arrow_schema(con, LINES)
                con.from_arrow(pa.Table.from_pylist(rows, schema=schema)).insert_into(LINES)
    con.execute("DROP TABLE IF EXISTS prom_batch")
    return Staged(settle(definition, con, src), {})


def read_lines(definition: Definition, lines: Lines, ctx: ParseContext) -> tuple[list[dict], list[tuple]]:
    """The prom_lines rows of `lines` (each a sample line of our metrics, as SQL did not read it)
    and the (line, reason, text) of those refused; raises FileRefused for the whole file."""
    from prometheus_client.parser import text_string_to_metric_families

    shape = definition.prometheus
    records, rejects = [], []
    for number, line in lines:
        text = line.strip()
        try:
            (family,) = list(text_string_to_metric_families(text))
            (sample,) = family.samples
        except ValueError as error:
            rejects.append((number, f"not Prometheus text ({error})", line))
            continue
        record = {**sample.labels, sample.name: sample.value}
        if sample.timestamp is not None:
            record[shape.time] = float(sample.timestamp)
        records.append((number, sample.name, record, line))
    rows, refused = read_records(definition, records, ctx)
    return rows, sorted(rejects + refused)


def read_records(definition: Definition, records: Iterable[tuple[int, str, dict, str]],
                 ctx: ParseContext) -> tuple[list[dict], list[tuple]]:
    """The prom_lines rows of sample records (line, metric, the record: its labels by name, its value
    under the metric's name, its time under PromText.time; the text a reject shows), read by the
    definition's line rules, and the (line, reason, text) of those refused; raises FileRefused."""
    rules = replace(definition, steps=tuple(s for s in definition.steps if isinstance(s, _LINE_STEPS)))
    stored = [f.column for f in definition.fields if f.stored]
    rows, rejects = [], []
    for number, metric, record, text in records:
        try:
            row = reader.build_record(rules, record, number, ctx, None)[0]
        except FileRefused:
            raise
        except BadValue as error:
            rejects.append((number, str(error), text))
            continue
        rows.append({"line": number, "metric": metric, **{column: row[column] for column in stored}})
    return rows, rejects


def _refuse_repeated_labels(con) -> None:
    """Lines of prom_batch naming a label twice are the reader's (prometheus_client refuses them).
    Checked once per distinct list of label names (a file repeats a few), not once per line."""
    names = con.execute("SELECT DISTINCT label_names FROM prom_batch WHERE ok").fetchall()
    repeated = [found for (found,) in names if len(set(found.split(","))) < len(found.split(","))]
    if repeated:
        con.execute("UPDATE prom_batch SET ok = false WHERE list_contains(?, label_names)", [repeated])


def _ours(definition: Definition) -> str:
    """A line of our metrics: after Python's strip(), a metric's name before `{`, a space or the end."""
    names = "|".join(definition.prometheus.metrics)
    return f"^[{line_sql.PY_SPACE}]*({names})([{{ ]|[{line_sql.PY_SPACE}]*$)"


def _plain(definition: Definition) -> str:
    """A plain line, capturing the metric, the labels, the value and the timestamp (ms)."""
    names = "|".join(definition.prometheus.metrics)
    return f"^({names})\\{{((?:{_BARE_LABEL}(?:,{_BARE_LABEL})*)?)\\}} ({VALUE})(?: ([0-9]{{1,15}}))?$"


def _text(definition: Definition, f: Field) -> str:
    """SQL for a Field's value as written in a plain line (NULL when absent): its first spelling given."""
    shape, found = definition.prometheus, []
    for name in f.spellings:
        if name in shape.metrics:
            found.append(f"CASE WHEN p.name = {quote(name)} THEN p.value END")
        elif name == shape.time:
            found.append("nullif(p.ts, '')")
        else:  # a label
            pattern = quote("(?:^|,)" + name + '="([^"]*)"')
            found.append(f"nullif(regexp_extract(p.labels, {pattern}, 1), '')")
    return found[0] if len(found) == 1 else f"coalesce({', '.join(found)})"


def field_sql(definition: Definition, step: Field) -> tuple[str, list[str]]:
    """SQL for a Field's value from its text `{column}_text` as a plain line writes it (a metric's
    value already matched VALUE, a label's without a blank at an edge, the time in ms), and the
    checks (SQL) a value read in SQL passes: any other goes to the reader."""
    text, c = f"{step.column}_text", step.column
    bounds = [] if step.minimum is None else [f"{c} >= {float(step.minimum)!r}"]
    if step.type == TEXT:  # a plain line's labels have no blank at an edge (_EDGE)
        return text, []
    if step.type == COUNT:
        return f"TRY_CAST({text} AS BIGINT)", [
            f"coalesce(regexp_full_match({text}, '{_WHOLE}') AND {c} <= {step.maximum}"
            f"{''.join(' AND ' + b for b in bounds)}, {text} IS NULL)"]
    if step.type == NUMBER:  # a metric's value matched VALUE with the line; a label's must
        spelled = "" if set(step.spellings) <= set(definition.prometheus.metrics) else \
            f"regexp_full_match({text}, '{VALUE}') AND "
        return f"TRY_CAST({text} AS DOUBLE)" + ("" if step.divide_by == 1 else f" / {float(step.divide_by)!r}"), [
            f"coalesce({spelled}abs(TRY_CAST({text} AS DOUBLE)) <= "
            f"{step.limit!r}{''.join(' AND ' + b for b in bounds)}, {text} IS NULL)"]
    if step.type == TIME:  # the sample timestamp, in milliseconds (made a TIMESTAMPTZ directly: no zone's cast)
        return (f"make_timestamptz(TRY_CAST({text} AS BIGINT) * 1000)",
                [f"coalesce({line_sql.in_years(c)}, {text} IS NULL)"])
    raise ValueError(f"{definition.kind}: a Prometheus line has no {step.type} values")


def _typed_statement(definition: Definition, ctx: ParseContext) -> str:
    """TEMP TABLE prom_batch from `batch`: each line of ours with its metric, its Fields' values
    and whether SQL reads it (`ok`; else the reader's, but for a too-long line)."""
    values = {}
    checks = ["p.name <> ''", f"NOT regexp_matches(p.labels, {quote(_EDGE)})"]
    for step in definition.steps:
        if isinstance(step, Field):
            values[step.column], check = field_sql(definition, step)
            checks.extend(check)
        elif isinstance(step, FromOption):
            if getattr(ctx, step.option, None):
                value = "$at" if step.option == "at" else quote(str(getattr(ctx, step.option)))
                values[step.column] = f"coalesce({values[step.column]}, {value})" if step.when_absent else value
        elif isinstance(step, FromFileName):
            values[step.column] = f"coalesce({values[step.column]}, {quote(step.of(ctx.source))})"
        elif isinstance(step, Required):
            checks.append(f"{step.column} IS NOT NULL")
        elif not isinstance(step, Within):
            raise ValueError(f"{definition.kind}: {type(step).__name__} is not read from Prometheus text")
    texts = ", ".join(f"{_text(definition, f)} AS {f.column}_text" for f in definition.fields)
    typed = ", ".join(f"{sql} AS {column}" for column, sql in values.items())
    return f"""
        CREATE OR REPLACE TEMP TABLE prom_batch AS
        WITH ours AS (
            SELECT line, raw, starts_with(raw, $marker) AS too_long
            FROM batch WHERE regexp_matches(raw, $ours) OR starts_with(raw, $marker)
        ), parts AS (  -- one anchored match gives every part (all empty when the line is not plain)
            SELECT line, too_long, regexp_extract(raw, $plain, ['name', 'labels', 'value', 'ts']) AS p FROM ours
        ), texts AS (
            SELECT line, too_long, p, regexp_replace(p.labels, '="[^"]*"', '', 'g') AS label_names, {texts} FROM parts
        ), typed AS (
            SELECT *, {typed} FROM texts
        )
        SELECT line, too_long, p.name AS metric, label_names, {", ".join(values)},
               coalesce(NOT too_long AND {" AND ".join(checks)}, false) AS ok
        FROM typed"""
