"""A bill definition's steps (bill_steps.py) read over one record at a time, with bill_values.py's
readers: for the lines SQL leaves to Python (a nested Parquet value, tags that are not plain JSON)
and for files DuckDB cannot read (JSON lines, a dialect it refuses). Each step is compiled once per
definition into a function of (record, the columns read so far, the header's names); `read` runs
them in order and raises BadValue at the first that fails, with that step's reason. The same steps
as SQL are in bill_plan.py; the two must give the same rows and reasons.
"""
from __future__ import annotations

import re
from collections.abc import Callable

from ingest.engine import values
from ingest.engine.contract import BadValue
from ingest.formats.billing import bill_values
from ingest.formats.billing.bill_family import Record, normalized
from ingest.formats.billing.bill_steps import (Amount, Case, Category, Constant, Contains, CreditColumns,
                                               CreditList, Difference, Extract, FirstOf, HeaderSays,
                                               InstanceType, Joined, JsonKey, Letters, LowerWhen, MapCell,
                                               MapValue, Moment, MonthSpan, NextDay, Pricing, Quantity, Same,
                                               Step, SumOfPresent, TagColumns, Tags, TagsFrom, Text,
                                               credit_numbers)

Reader = Callable[[Record, dict, set], object]

def column_of(step: Step) -> str:
    """The column a step's reader fills: a helper name for the steps that fill several or none."""
    if isinstance(step, (CreditList, CreditColumns)):
        return "_credits"
    if isinstance(step, MonthSpan):
        return "_month_span"
    return getattr(step, "column", "_refused")


def read(readers: tuple[tuple[str, Reader], ...], record: Record, header: set[str]) -> dict[str, object]:
    """Every step's column of one record (`readers`: each step's column and reader), in order;
    BadValue at the first that fails."""
    found: dict[str, object] = {}
    for column, read_step in readers:
        found[column] = read_step(record, found, header)
    return found


def reader(step: Step) -> Reader:
    """The step as a function of (record, the columns read so far, the header's names), compiled
    once per definition: the per-record path reads whole files (JSON lines, a CSV DuckDB refuses)."""
    if isinstance(step, Text):
        names, required = step.names, step.required

        def text(record: Record, found: dict, header: set) -> object:
            value = bill_values.text(record, *names)
            if value is None and required:
                raise BadValue(required if isinstance(required, str) else f"no {record.name(*names)}")
            return value
        return text
    if isinstance(step, Amount):
        amount, names = (bill_values.required_amount if step.required else bill_values.amount), step.names
        if step.when is not None:
            when, keys = step.when
            return lambda record, found, header: amount(record, *names) if found[when] in keys else None
        return lambda record, found, header: amount(record, *names)
    if isinstance(step, Quantity):
        names = step.names
        return lambda record, found, header: bill_values.quantity(record, *names)
    if isinstance(step, Moment):
        moment, names = (bill_values.required_moment if step.required else bill_values.moment), step.names
        return lambda record, found, header: moment(record, *names)
    if isinstance(step, Category):
        of, table, label, default = step.of, dict(step.table), step.label, step.default
        return lambda record, found, header: bill_values.category(found[of] or default, table, label)
    if isinstance(step, Pricing):
        of, table = step.of, dict(step.table)
        return lambda record, found, header: bill_values.pricing(found[of], table)
    if isinstance(step, Tags):
        name, label = step.name, step.label
        return lambda record, found, header: bill_values.tag_pairs(bill_values.tags(record.get(name), label))
    if isinstance(step, TagColumns):
        prefix = step.prefix

        def tag_columns(record: Record, found: dict, header: set) -> object:
            tags = {name.removeprefix(prefix): bill_values.text(record, name) for name in record.fields
                    if name.startswith(prefix)}
            return bill_values.tag_pairs({key: value for key, value in tags.items() if value is not None})
        return tag_columns
    if isinstance(step, InstanceType):
        texts = step.of
        return lambda record, found, header: bill_values.instance_type_in(*(found[name] for name in texts))
    if isinstance(step, NextDay):
        of = step.of
        return lambda record, found, header: bill_values.next_day(found[of]) if found[of] is not None else None
    if isinstance(step, JsonKey):
        name, label, keys = step.name, step.label, step.keys

        def json_key(record: Record, found: dict, header: set) -> object:
            cell = bill_values.tags(record.get(name), label)
            return next((cell[key] for key in keys if cell.get(key)), None)
        return json_key
    if isinstance(step, LowerWhen):
        of, when, equals = step.of, step.when, step.equals
        return lambda record, found, header: (found[of].lower() if found[of] and (
            when is None or (found[when] or "").lower() == equals) else None)
    if isinstance(step, Letters):
        of = step.of
        return lambda record, found, header: re.sub(r"[^a-z]", "", (found[of] or "").lower())
    if isinstance(step, Case):
        of, cases, default = step.of, dict(step.cases), step.default
        return lambda record, found, header: found[cases.get(found[of], default)]
    if isinstance(step, Difference):
        left, right = step.left, step.right
        return lambda record, found, header: (None if found[left] is None or found[right] is None
                                              else found[left] - found[right])
    if isinstance(step, SumOfPresent):
        parts = step.of
        return lambda record, found, header: (None if all(found[p] is None for p in parts)
                                              else sum((found[p] or 0) for p in parts))
    if isinstance(step, FirstOf):
        parts = step.of
        return lambda record, found, header: next((found[p] for p in parts if found[p] is not None), None)
    if isinstance(step, Joined):
        first, *rest = step.of
        return lambda record, found, header: ("|".join([found[first], *(found[p] or "" for p in rest)])
                                              if found[first] is not None else None)
    if isinstance(step, Contains):
        of, needle, value, drop = step.of, step.needle, step.value, step.drop
        dropped = re.compile(f"[{re.escape(drop)}]") if drop else None
        return lambda record, found, header: (value if needle in (dropped.sub("", (found[of] or "").lower()) if dropped
                                                                  else (found[of] or "").lower()) else None)
    if isinstance(step, MapCell):
        name = step.name
        return lambda record, found, header: bill_values.tags(record.get(name), name)
    if isinstance(step, MapValue):
        of, keys = step.of, step.keys
        return lambda record, found, header: next((str(found[of][k]).strip() for k in keys if found[of].get(k)
                                                   is not None and str(found[of][k]).strip()), None)
    if isinstance(step, TagsFrom):
        return _tags_from(step)
    if isinstance(step, MonthSpan):
        span = step

        def month_span(record: Record, found: dict, header: set) -> object:  # two columns: set here
            month = found[span.of]
            found[span.start], found[span.end] = bill_values.month_span(month, span.label) if month else (None, None)
            return None
        return month_span
    if isinstance(step, Extract):
        of, pattern = step.of, re.compile(step.pattern)

        def extract(record: Record, found: dict, header: set) -> object:
            match = pattern.search(found[of] or "")
            return match[1] if match else None
        return extract
    if isinstance(step, CreditList):
        return _credit_list(step)
    if isinstance(step, CreditColumns):
        return _credit_columns(step)
    if isinstance(step, HeaderSays):
        cases, default = step.cases, step.default
        return lambda record, found, header: next((value for name, value in cases if name in header), default)
    if isinstance(step, Same):
        of = step.of
        return lambda record, found, header: found[of]
    if isinstance(step, Constant):
        value = step.value
        return lambda record, found, header: value
    of, keys, reason = step.of, step.keys, step.reason  # Refuse

    def refuse(record: Record, found: dict, header: set) -> object:
        raw = found[of]
        if raw is not None and normalized(raw) in keys:
            raise BadValue(reason.format(value=repr(raw)))
        return None
    return refuse


def _tags_from(step: TagsFrom) -> Reader:
    def tags(record: Record, found: dict, header: set) -> object:
        given: dict[str, str | None] = {}
        for name, value in record.fields.items():
            if name.startswith(step.prefixes) and not values.is_absent(value):
                given[name.removeprefix(step.strip)] = bill_values.text(record, name)
        for name, drops, add in step.maps:
            for key, value in bill_values.tags(record.get(name), name).items():
                if value not in (None, ""):
                    for drop in drops:
                        key = key.removeprefix(drop)
                    given[add + key] = value
        return bill_values.tag_pairs(given)
    return tags


_CREDIT_LINE = {"charge_category": "credit", "pricing_category": None, "consumed_quantity": None, "consumed_unit": None}


def _credit_list(step: CreditList) -> Reader:
    def credits(record: Record, found: dict, header: set) -> object:
        entries = bill_values.structured(record.get(step.name), step.name) or []
        if not isinstance(entries, list):
            raise BadValue(f"{step.name} must be a list, got {record.get(step.name)!r}")
        lines = []
        for number, credit in enumerate(entries, start=1):
            if not isinstance(credit, dict):
                raise BadValue(f"credit {number} must be an object, got {credit!r}")
            value = values.money(credit.get("amount"), f"credit {number} amount")
            if value is None:
                raise BadValue(f"credit {number} has no amount")
            name = credit.get("full_name") or credit.get("name") or credit.get("type") or "credit"
            lines.append({**_CREDIT_LINE, "billed_cost": value, "effective_cost": value,
                          "charge_category_raw": credit.get("type") or "credit", "charge_description": str(name)})
        return lines
    return credits


def _credit_columns(step: CreditColumns) -> Reader:
    def credits(record: Record, found: dict, header: set) -> object:
        lines = []
        currency = found[step.currency]
        for number in credit_numbers(header):
            value = bill_values.amount(record, f"credit{number} amount")
            if value is None:
                continue
            other = bill_values.text(record, f"credit{number} currency")
            if other is not None and other != currency:
                raise BadValue(f"{record.name(f'credit{number} currency')} {other} is not the line's {currency}")
            lines.append({**_CREDIT_LINE, "billed_cost": value, "effective_cost": value,
                          "charge_category_raw": "credit",
                          "charge_description": bill_values.text(record, f"credit{number}") or "credit"})
        return lines
    return credits
