"""Prometheus samples given as columns (a server's query_range answer) read by a Definition (PromText), without text.

A series is its labels, given once, and its points as Arrow arrays: their times (epoch seconds)
and values (text as a Prometheus server writes them in JSON: "62.5", "1e+06", "NaN", "+Inf").
Each point is the record a sample line is to prom_text.py: its series' labels by name, its value
under its metric's name, its time under PromText.time, numbered from 1 in the order given. The
definition's rules read it in three parts:

- a series' labels once, by the definition's Fields of labels and the rules on their columns
  (reader.build_record: blanks trimmed, "gpu must be a number, got 'x'", "no gpu label");
- every point's value and time in one SQL pass, with the SQL prom_text types a plain line's with
  (prom_text.field_sql: the value spelled as prom_text.VALUE, the time in ms);
- a point SQL does not read (NaN, 1000.5 mJ, a series whose labels were refused) whole by the
  reader (prom_text.read_records), which names the reason as it does for a line.

The points' values go to TEMP TABLE prom_lines as prom_text's lines do, and prom_records.settle
makes the records (one per Key, a metric repeated for a key refused, the Within bounds on the
whole record). A refused point shows as the sample line it stands for: `NAME{labels} VALUE MS`.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest.engine import prom_records, prom_text, reader, staging
from ingest.engine.batch_spellings import quote
from ingest.engine.contract import BadValue, FileRefused, ParseContext
from ingest.engine.definition import Definition, Field, FromFileName, FromOption, Required
from ingest.engine.staging import Source

_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")  # a label a sample line can show (not __name__)
_COLUMN_RULES = (Field, Required, FromOption, FromFileName)  # the rules of one column, as prom_text's of a line


@dataclass(frozen=True)
class Series:
    """One series: its labels (`__name__` its metric) and its points, times (epoch seconds, float64)
    and values (text, as written) side by side."""

    labels: dict[str, str]
    times_s: pa.Array
    values: pa.Array


def stage(definition: Definition, series: Sequence[Series], con, src: Source, ctx: ParseContext) -> int:
    """Stage the records of `series` in `con` (staging.open_stage(); their rejects into `rejects`,
    named `src.name`); returns the records loaded. Series of other metrics are skipped, their points
    numbered all the same. Raises ValueError when a series' times and values differ in length."""
    shape = definition.prometheus
    at_point = {f.column for f in definition.fields if set(f.spellings) & {*shape.metrics, shape.time}}
    if any(set(definition.field(c).spellings) - {*shape.metrics, shape.time} for c in at_point):
        raise ValueError(f"{definition.kind}: a Field reads both a label and a sample's value or time")
    stored = [f.column for f in definition.fields if f.stored]
    con.execute(f"CREATE OR REPLACE TEMP TABLE {prom_records.LINES} AS SELECT 0::BIGINT AS line, "
                f"''::VARCHAR AS metric, {', '.join(stored)} FROM {definition.table} LIMIT 0")
    ours = [index for index, one in enumerate(series) if one.labels.get("__name__") in shape.metrics]
    for one in series:
        if len(one.times_s) != len(one.values):
            raise ValueError(f"{one.labels.get('__name__')}: {len(one.times_s)} times, {len(one.values)} values")
    points = _points(series)
    if not ours:
        return prom_records.settle(definition, con, src)
    con.register("prom_points_given", points)
    con.register("prom_series", _labels(definition, [(index, series[index]) for index in ours], at_point, con, ctx))
    typed = _typed_query(definition, [c for c in stored if c not in at_point], ctx)
    try:
        rest = [line for (line,) in con.execute(f"SELECT line FROM ({typed}) WHERE NOT ok ORDER BY line").fetchall()]
        if rest:  # the few points SQL does not read: their rows (the reader's) in prom_lines
            rows, rejects = prom_text.read_records(definition, _records(definition, series, points, rest), ctx)
            staging.add_rejects(con, src.name, [(line, reason, _line_text(series, points, line))
                                                for line, reason, _ in rejects])
            if rows:
                schema = staging.arrow_schema(con, prom_records.LINES)
                con.from_arrow(pa.Table.from_pylist(rows, schema=schema)).insert_into(prom_records.LINES)
        # the others' values are read where settle reads them (a view: 640k points are not copied once more)
        con.execute(f"""CREATE OR REPLACE TEMP VIEW prom_column_lines AS
            SELECT line, metric, {", ".join(stored)} FROM ({typed}) WHERE ok
            UNION ALL SELECT line, metric, {", ".join(stored)} FROM {prom_records.LINES}""")
        return prom_records.settle(definition, con, src, lambda lines: {line: _line_text(series, points, line)
                                                                        for line in lines}, "prom_column_lines")
    finally:
        con.execute("DROP VIEW IF EXISTS prom_column_lines")
        con.unregister("prom_points_given")
        con.unregister("prom_series")


def _points(series: Sequence[Series]) -> pa.Table:
    """Every point: its line (from 1), series (its place in `series`), value (text) and time (ms)."""
    counts = [len(one.values) for one in series]
    total = sum(counts)
    if not total:
        return pa.table({"line": pa.array([], pa.int64()), "series": pa.array([], pa.int32()),
                         "value": pa.array([], pa.string()), "ms": pa.array([], pa.int64()),
                         "time_s": pa.array([], pa.float64())})
    times = pa.concat_arrays([one.times_s.cast(pa.float64()) for one in series])
    sane = pc.less(pc.abs(times), 1e12)  # within 15 digits of ms (a NaN is not): else the reader's
    return pa.table({
        "line": np.arange(1, total + 1, dtype=np.int64),
        "series": np.repeat(np.arange(len(series), dtype=np.int32), counts),
        "value": pa.concat_arrays([one.values.cast(pa.string()) for one in series]),
        "ms": pc.if_else(sane, pc.round(pc.multiply(times, 1000.0)), pa.scalar(None, pa.float64())).cast(pa.int64()),
        "time_s": times,
    })


def _labels(definition: Definition, ours: list[tuple[int, Series]], at_point: set[str], con,
            ctx: ParseContext) -> pa.Table:
    """One row per series of ours ((its place among the series given, the series)): its place, metric,
    the values its labels give the definition's columns of labels (read by their rules) and
    `labels_ok` (False: refused, its points the reader's)."""
    columns = [f.column for f in definition.fields if f.stored and f.column not in at_point]
    rules = replace(definition,
                    steps=tuple(step for step in definition.steps
                                if isinstance(step, _COLUMN_RULES) and step.column not in at_point),
                    key=replace(definition.key, parts=tuple(p for p in definition.key.parts if p not in at_point)))
    found: dict[str, list] = {"series": [], "metric": [], "labels_ok": [], **{c: [] for c in columns}}
    for place, one in ours:
        record = {name: value for name, value in one.labels.items() if name != "__name__"}
        try:
            row = reader.build_record(rules, record, 0, ctx, None)[0]
        except FileRefused:
            raise
        except BadValue:
            row = None
        found["series"].append(place)
        found["metric"].append(one.labels["__name__"])
        found["labels_ok"].append(row is not None)
        for column in columns:
            found[column].append(None if row is None else row[column])
    schema = staging.arrow_schema(con, prom_records.LINES)
    return pa.table({"series": pa.array(found["series"], pa.int32()), "metric": pa.array(found["metric"], pa.string()),
                     "labels_ok": pa.array(found["labels_ok"], pa.bool_()),
                     **{c: pa.array(found[c], schema.field(c).type) for c in columns}})


def _typed_query(definition: Definition, label_columns: list[str], ctx: ParseContext) -> str:
    """A query of each point of ours with its metric, its series' label values, its
    value and time read as prom_text reads a plain line's, and whether SQL read it (`ok`)."""
    shape = definition.prometheus
    values, checks, texts = {}, ["regexp_full_match(value, " + quote(prom_text.VALUE) + ")"], []
    for step in definition.steps:
        if getattr(step, "column", None) in label_columns:
            continue  # read once per series (_labels); a Within waits for the record (prom_records)
        if isinstance(step, Field):
            spelled = [f"CASE WHEN metric = {quote(name)} THEN value END" if name in shape.metrics else "ms"
                       for name in step.spellings if name in shape.metrics or name == shape.time]
            texts.append(f"{spelled[0] if len(spelled) == 1 else 'coalesce(' + ', '.join(spelled) + ')'} "
                         f"AS {step.column}_text")
            values[step.column], check = prom_text.field_sql(definition, step)
            checks.extend(check)
        elif isinstance(step, FromOption):
            if getattr(ctx, step.option, None):
                given = getattr(ctx, step.option)
                value = f"CAST({quote(given.isoformat())} AS TIMESTAMPTZ)" if step.option == "at" else quote(str(given))
                values[step.column] = f"coalesce({values[step.column]}, {value})" if step.when_absent else value
        elif isinstance(step, Required):
            checks.append(f"{step.column} IS NOT NULL")
        elif isinstance(step, FromFileName):
            raise ValueError(f"{definition.kind}: series have no file name to give {step.column}")
    return f"""
        WITH texts AS (
            SELECT p.line, p.value, p.ms, s.*, {", ".join(texts)}
            FROM prom_points_given p JOIN prom_series s USING (series)
        ), typed AS (
            SELECT *, {", ".join(f"{sql} AS {column}" for column, sql in values.items())} FROM texts
        )
        SELECT line, metric, {", ".join([*label_columns, *values])},
               coalesce(labels_ok AND {" AND ".join(checks)}, false) AS ok
        FROM typed"""


def _records(definition: Definition, series: Sequence[Series], points: pa.Table, lines: list[int]):
    """(line, metric, record, text) of each of `lines`: the record its sample line would be."""
    index = pa.array([line - 1 for line in lines], pa.int64())
    places = points["series"].take(index).to_pylist()
    values = points["value"].take(index).to_pylist()
    times = points["time_s"].take(index).to_pylist()
    time_name = definition.prometheus.time
    for line, place, value, time_s in zip(lines, places, values, times):
        labels = series[place].labels
        record = {name: text for name, text in labels.items() if name != "__name__"}
        record[labels["__name__"]] = _as_read(value)
        if time_s is not None:
            record[time_name] = time_s
        yield line, labels["__name__"], record, ""


def _as_read(value: str | None) -> float | str | None:
    """A value as prometheus_client's parser gives a line's: a float where float() reads it ("NaN", "+Inf")."""
    try:
        return float(value) if value is not None else None
    except ValueError:
        return value


def _line_text(series: Sequence[Series], points: pa.Table, line: int) -> str:
    """The sample line a point stands for: its metric, labels (sorted, escaped), value and time in ms."""
    labels = series[points["series"][line - 1].as_py()].labels
    shown = ",".join(f'{name}="{_escaped(value)}"' for name, value in sorted(labels.items())
                     if name != "__name__" and _LABEL_NAME.fullmatch(name))
    value, ms = points["value"][line - 1].as_py(), points["ms"][line - 1].as_py()
    return f"{labels.get('__name__', '')}{{{shown}}} {value} {ms}"


def _escaped(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
