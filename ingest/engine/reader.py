"""The generic per-line reader: one record at a time, a Definition's rules in order.

It reads what SQL cannot (a quoted CSV line, a line that is not JSON, a number written as JSON
text, a value only Python's readers take) and names the exact reason a record is refused: the
first rule of the definition that fails. It is also the whole reader of records that come as
Python values (the serving-metrics importer builds windows through `build_row`).
"""
from __future__ import annotations

import csv
import hashlib
import json
import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal, localcontext

from ingest.engine import values
from ingest.settings import config
from ingest.engine.contract import BadValue, Lines, ParseContext, Parsed, Reject
from ingest.engine.definition import (COUNT, COUNT_LIST, MONEY, NUMBER, PERCENT, TEXT, TEXT_LIST, TEXT_MAP, TIME, CatalogCost,
                                      CountOf, Default, Definition, Field, HashedId, Items, OneOf, Required, Since, Span,
                                      SumAtMost, csv_header, header_problem, is_csv_header)
from ingest.engine.definition import FromFileName, FromOption, Prefer, Tags, Within
from ingest.engine.definition import Extras, FromRate, HourlyCost, Hours

CENT = Decimal("0.01")
MICRO_USD = Decimal("0.000001")
SECONDS_PER_HOUR = Decimal(3600)


def build_row(definition: Definition, record: object, line: int, ctx: ParseContext, prices: config.Prices) -> dict:
    """The table row for one record (a dict of source names); raises BadValue with the reason."""
    return build_record(definition, record, line, ctx, prices)[0]


def build_record(definition: Definition, record: object, line: int, ctx: ParseContext,
                 prices: config.Prices, unknown: set[str] | None = None) -> tuple[dict, dict[str, list[dict]]]:
    """The record's row and its items' rows by table (Items); raises BadValue with the reason.
    Keys kept as tags by Extras are added to `unknown` (for the load's warning)."""
    if not isinstance(record, dict):
        raise BadValue(f"expected a JSON object, got {type(record).__name__}")
    got: dict[str, object] = {}    # column -> value read
    named: dict[str, str] = {}     # column -> the spelling the record used (for reasons)
    row: dict[str, object] = {}
    children: dict[str, list[dict]] = {}
    flags: list[str] = []          # notes on the row (Definition.flags)
    extra: dict[str, str] = {}     # tags from keys outside the vocabulary (Extras)
    plan = _plan(definition)
    for step in definition.steps:
        if type(step) in RUN_STEPS:
            if isinstance(step, Extras):
                extra = _extras(definition, step, record, got, unknown)
            elif isinstance(step, Hours):
                _hours(step, got, named, flags)
            elif isinstance(step, HourlyCost):
                _hourly_cost(step, record, got, prices, flags)
            else:
                _from_rate(step, got, flags)
            continue
        if isinstance(step, Field):
            named[step.column] = _name(record, step)
            got[step.column] = _read(step, record, named[step.column], ctx, separators=definition.list_separators)
        elif isinstance(step, Span):
            got[step.end], got[step.length] = _span(step, got, named)
        elif isinstance(step, Required):
            if got[step.column] is None:
                raise BadValue(step.reason)
        elif isinstance(step, SumAtMost):
            if sum(got[p] or 0 for p in step.parts) > got[step.whole]:
                raise BadValue(step.reason.format(**{c: got[c] or 0 for c in (*step.parts, step.whole)}))
        elif isinstance(step, CountOf):
            if got[step.column] is None and got[step.items]:
                got[step.column] = len(got[step.items])
        elif isinstance(step, CatalogCost):
            price = None
            if got[step.column] is None:
                price = _catalog_price(step, got, prices)
                if price is not None:
                    price = values.fit_money(price, step.too_large)
                    with localcontext(prec=60):
                        got[step.column] = values.fit_money(
                            price * Decimal(repr(got[definition.span.length])) / SECONDS_PER_HOUR,
                            f"{step.too_large} x hours")
            row[step.price] = price
            row[step.source] = None if got[step.column] is None else "derived" if price is not None else "given"
        elif isinstance(step, OneOf):
            if got[step.column] is not None:
                found = step.mapping.get(got[step.column].lower())
                if found is None:
                    raise BadValue(step.reason.format(value=got[step.column]))
                got[step.column] = found
        elif isinstance(step, Default):
            if got[step.column] is None:
                words = re.split(r"[^a-z0-9]+", (got.get(step.of) or "").lower()) if step.words else []
                got[step.column] = step.then if any(word in step.words for word in words) else step.value
        elif isinstance(step, HashedId):
            if got[step.column] is None or got[step.column] in step.stand_ins:
                identity = "|".join(_key_part(got[part]) for part in step.parts) if not step.raw else \
                    "|".join(_key_part(got[part]) if definition.field(part).type == TIME
                             else str(record.get(definition.field(part).spellings[0], "")) for part in step.parts)
                got[step.column] = step.prefix + hashlib.sha256(identity.encode()).hexdigest()[:step.length]
        elif isinstance(step, Items):
            children[step.table] = _items(step, record.get(step.field), got, ctx)
        elif isinstance(step, Within):
            value = got[step.column]
            if value is not None and not step.low <= value <= step.high:
                raise BadValue(step.reason.format(name=named[step.column], value=value, low=step.low, high=step.high))
        elif isinstance(step, FromOption):
            if getattr(ctx, step.option, None):
                got[step.column] = getattr(ctx, step.option)
        elif isinstance(step, FromFileName):
            if got[step.column] is None:
                got[step.column] = step.of(ctx.source)
        elif isinstance(step, Tags):
            if got[step.column] is None:
                found = {name: record.get(definition.field(column).spellings[0]) for name, column in step.parts}
                got[step.column] = {name: str(value) for name, value in sorted(found.items()) if not values.is_absent(value)}
        elif isinstance(step, Prefer):
            if got[step.of] is not None and (got[step.when] or "").upper() == step.equals.upper():
                got[step.column] = got[step.of]
    for items in definition.items:  # the parent's key as the record ends up with it
        for child in children[items.table]:
            child[items.parent] = got[items.parent]
    row.update(got)
    for hidden in plan.hidden:
        row.pop(hidden, None)  # read for the rules, not columns (a measure is kept in the tags)
    if extra:
        row.update(_with_extra(definition, extra, row))
    if definition.flags:
        row[definition.flags] = flags or None
    for given in definition.given:
        row[given.column] = None if got[given.of] is None else "given"
    row[definition.key.column] = "|".join(_key_part(got[part]) for part in definition.key.parts)
    row["source_kind"] = definition.kind
    row["source_line"] = line
    return row, children


RUN_STEPS = frozenset((Extras, Hours, HourlyCost, FromRate))


@dataclass(frozen=True)
class _Plan:
    """What build_record works out once per definition rather than once per record."""

    hidden: tuple[str, ...]         # columns read for the rules that are not the table's (not stored, measures)
    known: frozenset[str]           # every key a Field or Items reads
    plain: frozenset[str]           # the keys of a record Extras has nothing to do for
    agree: dict                     # a column's other spelling -> its Field (Extras.agree)


_PLANS: dict[int, tuple[Definition, _Plan]] = {}


def _plan(definition: Definition) -> _Plan:
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


def _extras(definition: Definition, step: Extras, record: dict, got: dict, unknown: set[str] | None) -> dict[str, str]:
    """The tags made of the record's keys outside the vocabulary (Extras); each measure's number
    also goes to `got` under its tag name."""
    plan = _plan(definition)
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


def _with_extra(definition: Definition, extra: dict[str, str], row: dict) -> dict:
    """The Extras' tags added to the record's own (which win a name both give), sorted by name."""
    [step] = definition.rules(Extras)
    own = row.get(step.column) or {}
    return {step.column: dict(sorted({**{k: v for k, v in extra.items() if k not in own}, **own}.items()))}


def _hours(step: Hours, got: dict, named: dict, flags: list[str]) -> None:
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


def _hourly_cost(step: HourlyCost, record: dict, got: dict, prices: config.Prices | None, flags: list[str]) -> None:
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
        per_one = prices.instance(got[name]) if catalog == "instance" else prices.gpu(got[name])
        if per_one is not None:
            return per_one * got[multiplier] if multiplier else per_one
    return None


def _from_rate(step: FromRate, got: dict, flags: list[str]) -> None:
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


def _items(step: Items, value: object, got: dict, ctx: ParseContext) -> list[dict]:
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
                read[rule.column] = _read(rule, item, f"{where}.{_name(item, rule)}", ctx, key=_name(item, rule))
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


def _key_part(value: object) -> str:
    if value is None:
        return ""
    return value.isoformat() if isinstance(value, datetime) else str(value)


def _catalog_price(step: CatalogCost, got: dict, prices: config.Prices) -> Decimal | None:
    """USD per hour of the whole record's deployment from the catalog, if it can be known."""
    for catalog, name, multiplier in step.per:
        per_one = prices.instance(got[name]) if catalog == "instance" else prices.gpu(got[name])
        if per_one is not None and got[multiplier] is not None:
            return per_one * got[multiplier]
    return None


def _name(record: dict, field: Field) -> str:
    """The spelling the record used (the first present), for reasons a user recognises."""
    for name in field.spellings:
        value = record.get(name)
        if value is not None and not values.is_absent(value):
            return name
    return field.column


def _read(field: Field, record: dict, name: str, ctx: ParseContext, key: str | None = None,
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


def _span(span: Span, got: dict, named: dict) -> tuple[datetime, float]:
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


# --- lines to records --------------------------------------------------------------------------
def parse(definition: Definition, lines: Lines, ctx: ParseContext, prices: config.Prices | None = None) -> Parsed:
    """Rows in file order (a repeated key keeps its last record); prices default to the catalog."""
    prices = prices if prices is not None else config.load().prices
    parsed, latest, unknown = Parsed(), {}, set()
    key = definition.key.column
    records = _records(definition, lines, parsed)
    if definition.whole_document:
        numbered = list(lines)
        records = _whole_document(numbered)
        if records is None:
            records = _records(definition, numbered, parsed)
    for line, record, raw in records:
        try:
            row, children = build_record(definition, record, line, ctx, prices, unknown)
        except BadValue as error:
            parsed.rejects.append(Reject(line, str(error), raw))
            continue
        latest.pop(row[key], None)
        latest[row[key]] = row, children
        parsed.accepted += 1
    parsed.tables[definition.table] = [row for row, _ in latest.values()]
    for items in definition.items:  # a replaced record's items go with it
        parsed.tables[items.table] = [child for _, children in latest.values() for child in children[items.table]]
    parsed.warnings.extend(unknown_warning(definition, unknown))
    return parsed


def unknown_warning(definition: Definition, unknown: set[str]) -> list[str]:
    """The load's word on the keys Extras kept as tags (at most 20 named)."""
    if not unknown:
        return []
    [step] = definition.rules(Extras)
    names = sorted(unknown)
    shown = ", ".join(names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "")
    return [step.warning.format(names=shown)]


def _whole_document(numbered: list[tuple[int, str]]) -> list[tuple[int, object, str]] | None:
    """(line, record, raw) of a file that is one JSON value: each item of an array, or the one
    object, numbered with the value's first line; None when the file is not one JSON value."""
    try:
        document = json.loads("\n".join(text for _, text in numbered), parse_float=Decimal)
    except (json.JSONDecodeError, RecursionError):  # nested too deep to be one document: read as lines
        return None
    first, raw = next(((n, text) for n, text in numbered if text.strip()), (1, ""))
    return [(first, item, raw) for item in (document if isinstance(document, list) else [document])]


def _records(definition: Definition, lines: Lines, parsed: Parsed):
    """(line, record, raw text) for JSONL or CSV; unreadable lines go straight to parsed.rejects.

    The first non-blank line decides: text with a comma that is not a JSON object is a CSV
    header; anything else means JSON lines (so a JSONL file with a broken first line loses
    that line, not the file).
    """
    header: list[str] | None = None
    first = True
    for line, text in lines:
        if not text.strip():
            continue
        opening, first = first, False
        if opening and (definition.csv_only or is_csv_header(text)):
            header = csv_header(text)
            reason = header_problem(definition, header)
            if reason:
                parsed.rejects.append(Reject(line, reason, text))
                return
            continue
        record = (_csv_record(line, text, header, parsed, definition) if header is not None
                  else _json_record(line, text, parsed))
        if record is not None:
            yield line, record, text
    if first and definition.empty_reason:  # not one non-blank line
        parsed.rejects.append(Reject(0, definition.empty_reason, ""))


def _csv_record(line: int, text: str, header: list[str], parsed: Parsed,
                definition: Definition | None = None) -> dict | None:
    """One CSV line's fields by header name; None (and a reject) when it cannot be split to the header."""
    try:
        fields = next(csv.reader([text]))
    except csv.Error as error:
        parsed.rejects.append(Reject(line, f"unreadable CSV: {error}", text[:500]))
        return None
    if len(fields) != len(header):
        width = definition.width_reason if definition else "has {got} fields, the header has {expected}"
        parsed.rejects.append(Reject(line, width.format(got=len(fields), expected=len(header)), text))
        return None
    if definition is not None and definition.csv_trim:
        fields = [field.strip() for field in fields]
    return dict(zip(header, fields))


def _json_record(line: int, text: str, parsed: Parsed) -> object | None:
    """One JSON line's value; None (and a reject) when it is not JSON."""
    try:
        return json.loads(text, parse_float=Decimal)
    except json.JSONDecodeError as error:
        parsed.rejects.append(Reject(line, f"not valid JSON: {error.msg} at column {error.colno}", text))
    except RecursionError:
        parsed.rejects.append(Reject(line, "JSON nested too deeply to read", text[:500]))
    return None


def read_lines(definition: Definition, lines: Lines, ctx: ParseContext, prices: config.Prices,
               header: list[str] | None, unknown: set[str] | None = None) -> Parsed:
    """Rows from the given lines, JSON (no `header`) or CSV under `header`, each row kept (the
    caller settles repeated keys): the lines the SQL pass leaves to this reader. Keys kept as tags
    go to `unknown` when given (the caller words the warning once), else to the warnings."""
    parsed, warn, unknown = Parsed(), unknown is None, set() if unknown is None else unknown
    for line, text in lines:
        if not text.strip():
            continue
        record = (_csv_record(line, text, header, parsed, definition) if header is not None
                  else _json_record(line, text, parsed))
        if record is None:
            continue
        try:
            row, children = build_record(definition, record, line, ctx, prices, unknown)
            parsed.rows(definition.table).append(row)
            for table, rows in children.items():  # with the record's line: the caller settles replaced records
                parsed.rows(table).extend({**child, "source_line": line} for child in rows)
            parsed.accepted += 1
        except BadValue as error:
            parsed.rejects.append(Reject(line, str(error), text))
    if warn:
        parsed.warnings.extend(unknown_warning(definition, unknown))
    return parsed


def totals(definition: Definition, parsed: Parsed) -> dict:
    """The definition's summary figures (Total) over the parsed rows."""
    rows = parsed.tables.get(definition.table, [])
    figures: dict[str, object] = {}
    for total in definition.totals:
        present = [r[total.column] for r in rows if total.column and r.get(total.column) is not None]
        if total.how == "rows":
            figures[total.name] = len(rows)
        elif total.how == "sum":
            figures[total.name] = sum(present)
        elif total.how == "money":
            figures[total.name] = str(sum(present, Decimal(0)).quantize(CENT)) if present else None
        elif total.how == "float":
            figures[total.name] = round(math.fsum(present), 9) if present else None
        elif total.how == "present":
            figures[total.name] = len(present)
        elif total.how == "absent":
            figures[total.name] = len(rows) - len(present)
        elif total.how == "equals":
            figures[total.name] = sum(r[total.column] == total.value for r in rows)
    return figures
