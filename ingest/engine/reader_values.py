"""One record's values read as their Field says, for the generic reader (reader.py).

`read_value` reads a field as its type (text, time, count, number, percentage, money, a list of
texts or counts, a map of names to single values) with its bounds, raising BadValue with the
reason named by the spelling the record used (`used_name`); `read_span` a window's end and
length; `read_items` an Items' rows; `key_part` a value as it goes into a key. The rules are
those batch_sql.py's SQL applies to plain lines.
"""
from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

from ingest.engine import values
from ingest.engine.contract import BadValue, ParseContext
from ingest.engine.definition import (COUNT, COUNT_LIST, MONEY, NUMBER, PERCENT, TEXT, TEXT_LIST, TEXT_MAP, TIME,
                                      Field, Items, Required, Since, Span)


def read_items(step: Items, value: object, got: dict, ctx: ParseContext) -> list[dict]:
    """One row per object of the list `value` (none when absent), read by the Items' steps."""
    if values.is_absent(value):
        return []
    if not isinstance(value, list):
        raise BadValue(step.not_list)
    rows = []
    for seq, item in enumerate(value):
        where = f"{step.field}[{seq}]"
        if not isinstance(item, dict):
            raise BadValue(f"{where} must be an object")
        read: dict[str, object] = {}
        for rule in step.steps:
            if isinstance(rule, Field):
                read[rule.column] = read_value(rule, item, f"{where}.{used_name(item, rule)}", ctx, key=used_name(item, rule))
            elif isinstance(rule, Required):
                if read[rule.column] is None:
                    raise BadValue(rule.reason.format(item=where))
            elif isinstance(rule, Since):
                if read[rule.column] is None and read[rule.time] is not None:
                    read[rule.column] = (read[rule.time] - got[rule.start]).total_seconds()
                    if read[rule.column] < 0:
                        raise BadValue(rule.reason.format(item=where))
        rows.append({step.seq: seq, **{f.column: read[f.column] for f in step.fields if f.column != step.parent and f.stored}})
    return rows


def _text_map(value: object, name: str) -> dict[str, str] | None:
    """A JSON object of name: single value as text sorted by name (null as '', true as 'True')."""
    if values.is_absent(value):
        return None
    if not isinstance(value, dict):
        raise BadValue(f"{name} must be an object of name: value")
    pairs = {}
    for key, item in sorted(value.items()):
        if isinstance(item, (dict, list)):
            raise BadValue(f"{name} {key!r} must be a single value")
        pairs[str(key)] = "" if item is None else str(item)
    return pairs


def key_part(value: object) -> str:
    if value is None:
        return ""
    return value.isoformat() if isinstance(value, datetime) else str(value)


def used_name(record: dict, field: Field) -> str:
    """The spelling the record used (the first present), for reasons a user recognises."""
    for name in field.spellings:
        value = record.get(name)
        if value is not None and not values.is_absent(value):
            return name
    return field.column


def read_value(field: Field, record: dict, name: str, ctx: ParseContext, key: str | None = None,
          separators: tuple[str, ...] = (",", ";")) -> object:
    """One field's value (under `key`, by default `name`) as its type; BadValue, naming it `name`,
    when it cannot be read or is out of bounds."""
    raw = record.get(name if key is None else key)
    kind = field.type
    if kind == TEXT:
        return values.text(raw, name)
    if kind == TIME:
        return values.timestamp(raw, name, ctx.tz)
    if kind in (TEXT_LIST, COUNT_LIST):
        found = _text_list(raw, name, separators) if kind == TEXT_LIST else _count_list(raw, name, separators, field.maximum)
        return found or ([] if field.keep_empty and found is not None else None)
    if kind == TEXT_MAP:
        return _text_map(raw, name)
    if kind == COUNT:
        value = values.integer(raw, name, field.maximum)
        if value is not None and field.minimum is not None and value < field.minimum:
            raise BadValue(f"{name} is negative ({value})")
        return value
    if kind == MONEY:
        value = values.money(raw, name)
        if value is not None and field.minimum is not None and value < field.minimum:
            raise BadValue(f"{name} is negative ({value.normalize()})")
        return value
    value = values.number(raw, name, field.limit)
    if value is None:
        return None
    if kind == PERCENT and not 0 <= value <= 100:
        raise BadValue(f"{name} {value:g} is not a percentage from 0 to 100")
    if kind == NUMBER and field.minimum is not None and value < field.minimum:
        raise BadValue(f"{name} is negative ({value:g})")
    return value if field.divide_by == 1 else value / field.divide_by


def read_span(span: Span, got: dict, named: dict) -> tuple[datetime, float]:
    """The window's end (UTC) and length in seconds, from start + end or start + length."""
    start, end, length = got[span.start], got[span.end], got[span.length]
    length_name = named[span.length]
    if start is None:
        raise BadValue(f"no {span.start}")
    if length is not None and length <= 0:
        raise BadValue(f"{length_name} must be more than 0, got {length:g}")
    if end is not None:
        if end < start:
            raise BadValue(f"{span.end} {end.isoformat()} is before {span.start} {start.isoformat()}")
        if end == start:
            raise BadValue(f"{span.end} equals {span.start} ({start.isoformat()}): the window has no length")
        seconds = (end - start).total_seconds()
        if length is not None and abs(length - seconds) > span.tolerance_s:
            raise BadValue(f"{length_name} {length:g} disagrees with {span.end} - {span.start} ({seconds:g} s)")
        return end, seconds
    if length is None:
        raise BadValue(span.missing)
    try:
        return start + timedelta(seconds=length), length
    except OverflowError:
        raise BadValue(f"{length_name} {length:g} is too long") from None


def _split_list(value: object, separators: tuple[str, ...]) -> object:
    """Text split at any of `separators` (CSV's way of writing a list); any other value as it is."""
    if not isinstance(value, str):
        return value
    for separator in separators[1:]:
        value = value.replace(separator, separators[0])
    return value.split(separators[0])


def _text_list(value: object, name: str, separators: tuple[str, ...] = (",", ";")) -> list[str] | None:
    """A list, or text separated by `separators` (CSV)."""
    if values.is_absent(value):
        return None
    items = _split_list(value, separators)
    if not isinstance(items, list):
        raise BadValue(f"{name} must be a list")
    return [values.text(item, name) for item in items if not values.is_absent(item)]


def _count_list(value: object, name: str, separators: tuple[str, ...], maximum: int) -> list[int] | None:
    """A list of whole numbers, one number, or text separated by `separators`."""
    if values.is_absent(value):
        return None
    if isinstance(value, (int, float, Decimal)) and not isinstance(value, bool):
        value = [value]
    items = _split_list(value, separators)
    if not isinstance(items, list):
        raise BadValue(f"{name} must be a list of whole numbers")
    return [values.integer(item, name, maximum) for item in items if not values.is_absent(item)]
