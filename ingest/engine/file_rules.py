"""Definition rules about a file as a whole rather than one record (definition.py names them).

`Headerless`: a file whose first line is already a record (nvidia-smi's `noheader`): its columns
are told by the shape and unit of that line's values (csv_layout.py). `IndexByOrder`: a column
given by the file's order when the records do not give it (nvidia-smi's GPU index), applied once
in SQL after every line is staged (file_steps.py). Both are the SQL pass's (batch_sql.stage): a
definition with them is read by it, its reader reading the lines the pass leaves (reader.read_lines),
not by reader.parse alone. `PromText`: a file of Prometheus text, whose records are made of
several lines each (prom_text.py reads the lines, prom_records.py makes the records).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Headerless:
    """When the first non-blank line's first value (stripped) has the shape `first` (a regex), the
    file has no header: that value is the column `first_column`; a value whose start matches one of
    `shapes` ((column, regex), ...) is that column; a value ending in a blank and a Field's unit is
    that Field. Two values in one unit refuse the file with `same_unit` (over {count}, {unit},
    {name}: the Field's first spelling); no value with a unit with `no_units`."""

    first: str
    first_column: str
    shapes: tuple[tuple[str, str], ...]
    same_unit: str
    no_units: str


@dataclass(frozen=True)
class IndexByOrder:
    """Each row's `column` (a COUNT Field, not Required): as given when the header names it; else
    the order (from 0) in which values of `first_seen` first appear in the file; else the row's
    place in its group of rows whose `time`s are less than `gap_s` apart in file order, the
    commonest group size (the larger on a tie) being the count: a group of a multiple of it reads
    place modulo count, a short group is joined with the short groups right after it when together
    they make exactly one, else its rows are refused with `short` (over {rows}, {count}). Rows
    refused for a value still count in the order and the groups. A row left without it is refused
    with `missing`. Rows of one `within` + `time` that share it take it from the first column of
    `alternates` ((column, label), ...) the header names that tells every such group's rows apart
    (its number when every value is a whole number of up to 5 digits, else its order of first
    appearance), with the warning `told` (over {label}, {how}); when none does, they are refused
    with `clash` (over {rows}, {index})."""

    column: str
    first_seen: str
    time: str
    gap_s: float
    short: str
    missing: str
    within: str
    alternates: tuple[tuple[str, str], ...]
    told: str
    clash: str


@dataclass(frozen=True)
class PromText:
    """Prometheus text (the lines of `metrics`; comments, blank lines and other metrics are
    skipped): a sample's labels are read under their names, its value under its metric's name,
    its timestamp in epoch seconds under `time` (no label can be named so). Lines of one Key make
    one record; a metric given again for a key refuses its line with `repeated`, a template over
    {metric} (the metric's name) and the key's columns (a time in ISO-8601 UTC)."""

    metrics: tuple[str, ...]
    time: str
    repeated: str
