"""A CSV's first line and values where a format writes units and absent markers in them
(Definition.units_in_text, .absent, .headerless, .header_any; nvidia-smi's `--format=csv`).

Read alike by both engines: batch_sql.py asks `first_line` what the first line is (a header, or a
record whose columns are told by their shape and unit) and batch_units.py writes the same value
rules as one pattern a line; reader.py cleans a record's values with `clean` before its Fields
read them.
"""
from __future__ import annotations

import re

from ingest.engine.definition import Definition, csv_header, header_problem

_BRACKETED_UNIT = re.compile(r"\s*\[.*\]\s*$")


def header_names(definition: Definition, text: str) -> list[str]:
    """The header's column names; with units_in_text, `power.draw [W]` reads `power.draw` (any case)."""
    names = csv_header(text)
    if definition.units_in_text:
        names = [_BRACKETED_UNIT.sub("", name).strip().lower() for name in names]
    return names


def first_line(definition: Definition, text: str) -> tuple[list[str], bool, str | None]:
    """(column names, whether the line is itself a record, the reason that refuses the file or None)."""
    rule = definition.headerless
    values = [value.strip().lstrip("\ufeff") for value in text.split(",")]
    if rule is None or not re.fullmatch(rule.first, values[0]):
        header = header_names(definition, text)
        return header, False, header_problem(definition, header) or _none_of(definition, header)
    header = [f"column {position + 1}" for position in range(len(values))]  # no Field's spelling
    header[0] = definition.field(rule.first_column).spellings[0]
    by_unit: dict[str, list[int]] = {}
    for position, value in enumerate(values[1:], start=1):
        shaped = next((column for column, shape in rule.shapes if re.match(shape, value)), None)
        if shaped:
            header[position] = definition.field(shaped).spellings[0]
            continue
        for field in definition.fields:
            if field.unit and value.endswith(" " + field.unit):
                by_unit.setdefault(field.column, []).append(position)
    for column, positions in by_unit.items():
        field = definition.field(column)
        if len(positions) > 1:
            return header, True, rule.same_unit.format(count=len(positions), unit=field.unit, name=field.spellings[0])
        header[positions[0]] = field.spellings[0]
    return header, True, None if by_unit else rule.no_units


def _none_of(definition: Definition, header: list[str]) -> str | None:
    """Definition.header_any: the reason when the header names none of the columns."""
    if not definition.header_any:
        return None
    columns, reason = definition.header_any
    named = {name for column in columns for name in definition.field(column).spellings}
    return None if named & set(header) else reason


def clean(definition: Definition, record: dict[str, str]) -> dict[str, str]:
    """A CSV record's values (already stripped) as its Fields read them: an absent marker as empty,
    a Field's unit after its value dropped (`62.39 W` -> `62.39`, `45%` -> `45`)."""
    if definition.absent:
        absent = re.compile(definition.absent)
        record = {name: "" if absent.fullmatch(value) else value for name, value in record.items()}
    if definition.units_in_text:
        for field in definition.fields:
            if field.unit:
                for name in field.spellings:
                    if name in record:
                        record[name] = re.sub(rf"\s*{re.escape(field.unit)}$", "", record[name])
    return record


def sniff(definition: Definition, head: str) -> bool:
    """A header naming the detection keys (units in brackets allowed), or a headerless first line."""
    first = head.lstrip("\ufeff").lstrip().split("\n", 1)[0]
    names = {_BRACKETED_UNIT.sub("", name).strip().lower() for name in first.split(",")}
    detect = definition.detect
    if set(detect.all_of) <= names and names & set(detect.any_of):
        return True
    rule = definition.headerless
    return rule is not None and re.fullmatch(rule.first, first.split(",", 1)[0].strip()) is not None
