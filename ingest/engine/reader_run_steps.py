"""The run steps one record at a time, for the generic reader (reader.py), and catalog prices.

Extras (keys outside the vocabulary kept as tags, measures read from them: `read_extras`,
`with_extra`), Hours (start, end and hours, one found from the others: `read_hours`), HourlyCost
(given, price x hours, or the catalog's price: `read_hourly_cost`), FromRate (a rate x hours:
`read_from_rate`), and CatalogCost's price per hour from the catalog (`catalog_price`).
`reading_plan` is what build_record works out once per definition. batch_costs.py is the SQL
side of the same rules.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

from ingest.engine import values
from ingest.settings import config
from ingest.engine.contract import BadValue
from ingest.engine.definition import CatalogCost, Definition
from ingest.engine.run_rules import Extras, FromRate, HourlyCost, Hours

CENT = Decimal("0.01")
MICRO_USD = Decimal("0.000001")


@dataclass(frozen=True)
class _Plan:
    """What build_record works out once per definition rather than once per record."""

    hidden: tuple[str, ...]         # columns read for the rules that are not the table's (not stored, measures)
    known: frozenset[str]           # every key a Field or Items reads
    plain: frozenset[str]           # the keys of a record Extras has nothing to do for
    agree: dict                     # a column's other spelling -> its Field (Extras.agree)


_PLANS: dict[int, tuple[Definition, _Plan]] = {}


def reading_plan(definition: Definition) -> _Plan:
    found = _PLANS.get(id(definition))
    if found is not None and found[0] is definition:
        return found[1]
    fields = definition.fields
    known = frozenset(name for f in fields for name in f.spellings) | {items.field for items in definition.items}
    agree = {name: f for step in definition.rules(Extras) for f in fields if f.column in step.agree
             for name in f.spellings[1:]}
    plan = _Plan(hidden=tuple(f.column for f in fields if not f.stored)
                 + tuple(tag for step in definition.rules(Extras) for _, tag in step.measures),
                 known=known, plain=known - set(agree), agree=agree)
    _PLANS[id(definition)] = (definition, plan)  # the definition is kept, so its id is not reused
    return plan


def read_extras(definition: Definition, step: Extras, record: dict, got: dict, unknown: set[str] | None) -> dict[str, str]:
    """The tags made of the record's keys outside the vocabulary (Extras); each measure's number
    also goes to `got` under its tag name."""
    plan = reading_plan(definition)
    known, agree = plan.known, plan.agree
    if plan.plain.issuperset(record):
        return {}
    measures = dict(step.measures)
    extra: dict[str, str] = {}
    for key, value in record.items():
        if key in agree:
            name = agree[key].spellings[0]
            if name in record and not values.is_absent(record[name]) and not values.is_absent(value) \
                    and values.number(record[name], name) != values.number(value, key):
                raise BadValue(step.disagree.format(key=key, value=value, name=name, other=record[name]))
        elif key in known:
            continue
        elif key in measures:
            number = values.number(value, key)
            if number is not None and number < 0:
                raise BadValue(f"{key} is negative ({number:g})")
            if number is not None:
                extra[measures[key]] = f"{number:g}"
                got[measures[key]] = float(extra[measures[key]])
        else:
            if unknown is not None:
                unknown.add(key)
            if not values.is_absent(value):
                extra[key] = value if isinstance(value, str) else json.dumps(value, default=str, sort_keys=True)
    return extra


def with_extra(definition: Definition, extra: dict[str, str], row: dict) -> dict:
    """The Extras' tags added to the record's own (which win a name both give), sorted by name."""
    [step] = definition.rules(Extras)
    own = row.get(step.column) or {}
    return {step.column: dict(sorted({**{k: v for k, v in extra.items() if k not in own}, **own}.items()))}


def read_hours(step: Hours, got: dict, named: dict, flags: list[str]) -> None:
    """The span's start, end and hours (Hours); the seconds as hours x 3600."""
    started, ended, hours = got[step.start], got[step.end], got[step.hours]
    if started is not None and ended is not None:
        if ended < started:
            raise BadValue(f"{named[step.end]} {ended.isoformat()} is before {named[step.start]} {started.isoformat()}")
        measured = (ended - started).total_seconds() / 3600
        if hours is not None and abs(hours - measured) > max(step.tolerance * measured, 0.01):
            flags.append(step.differs.format(hours=hours, measured=measured))
        hours = measured
    elif started is not None and hours is not None:
        ended = started + timedelta(hours=hours)
    elif ended is not None and hours is not None:
        started = ended - timedelta(hours=hours)
    got[step.start], got[step.end], got[step.hours] = started, ended, hours
    got[step.seconds] = None if hours is None else hours * 3600


def read_hourly_cost(step: HourlyCost, record: dict, got: dict, prices: config.Prices | None, flags: list[str]) -> None:
    """The amount and its source (HourlyCost): given, price x hours, or the catalog's price x hours
    (no catalog when `prices` is None); an amount that cannot be had is flagged ("" flags nothing)."""
    price, given, hours = got[step.price], got[step.given], got[step.hours]
    expected = None
    if price is not None and hours is not None:
        expected = values.fit_money(price * Decimal(repr(hours)), step.too_large).quantize(MICRO_USD)
    cost, source = None, None
    if given is not None:
        cost, source = given, "given"
        if expected is not None and abs(given - expected) > max(CENT, expected / 100):
            flags.append(step.differs.format(given=given, expected=expected.quantize(CENT)))
    elif expected is not None:
        cost, source = expected, "derived"
    elif price is None and hours is not None and prices is not None:
        price = _hourly_catalog_price(step, got, prices)
        if price is not None:
            cost = values.fit_money(price * Decimal(repr(hours)), step.catalog_too_large).quantize(MICRO_USD)
            source = "catalog"
            got[step.price] = price
    if cost is None and prices is not None:  # without a catalog (None) the caller prices the run
        if hours is None:
            flags.extend([step.open] if step.open else [])
        elif step.unpriced:
            names = [f"{name} {record[name]!r}" for name in step.named if not values.is_absent(record.get(name))]
            flags.append(step.unpriced.format(names=" or ".join(names) if names else step.unnamed))
    got[step.column], got[step.source] = cost, source


def _hourly_catalog_price(step: HourlyCost, got: dict, prices: config.Prices) -> Decimal | None:
    """USD per hour from the catalog: the first of `step.per` whose price is known (and whose
    multiplier is not zero, and one of whose lists has items)."""
    for catalog, name, multiplier, when in step.per:
        if when and not any(got.get(column) for column in when):
            continue
        if multiplier and not got[multiplier]:
            continue
        per_one = prices.of(catalog, got[name])
        if per_one is not None:
            return per_one * got[multiplier] if multiplier else per_one
    return None


def read_from_rate(step: FromRate, got: dict, flags: list[str]) -> None:
    """`column` from a rate x the span's hours where the record does not give it (FromRate)."""
    rate, hours = got.get(step.rate), got[step.hours]
    source = "given" if got[step.column] is not None else None
    if got[step.column] is None and rate is not None and hours is not None:
        value = rate * hours * step.multiply / step.divide
        if step.whole:
            value = round(value)
            if value > values.BIGINT_MAX:
                raise BadValue(step.too_large.format(rate=rate, hours=hours))
        got[step.column], source = value, "derived"
        if step.flag:
            flags.append(step.flag.format(rate=rate, hours=hours))
    if step.source:
        got[step.source] = source


def catalog_price(step: CatalogCost, got: dict, prices: config.Prices) -> Decimal | None:
    """USD per hour of the whole record's deployment from the catalog, if it can be known."""
    for catalog, name, multiplier in step.per:
        per_one = prices.of(catalog, got[name])
        if per_one is not None and got[multiplier] is not None:
            return per_one * got[multiplier]
    return None
