"""A bill format as data, and the one engine that reads it in both languages.

A `Bill` says how a bill is detected (the columns its header needs), how its header names are
normalised, and, in `steps`, how each `billing_lines` column comes from the source columns: which
spellings, read as what (text, amount, quantity, UTC time, a charge category, tags, ...), and the
checks, in order, with the reason each gives. The first failing check is a line's reason.

The engine turns that one definition into:
- `plan(fields)`: SQL over whole columns (ingest/formats/billing/bill_sql.py's Builder and
  readers), which ingest/formats/billing/bill_stage.py runs in one pass; the lines SQL cannot read
  (a nested Parquet value, tags that are not plain JSON) are flagged for the reader below;
- `build(record)`: the same steps over one record with ingest/formats/billing/billing.py's readers,
  for those lines and for files DuckDB cannot read (JSON lines, a dialect it refuses).
A format module (billing_focus.py, billing_aws.py, billing_gcp.py, billing_azure.py,
billing_aws_dbr.py) holds its `Bill` and no parsing code; the steps are in bill_steps.py.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ingest.engine import values
from ingest.engine.contract import BadValue
from ingest.formats.billing import bill_sql, billing
from ingest.formats.billing.bill_sql import Builder, Fields, Plan, literal
from ingest.formats.billing.bill_steps import (Amount, Case, Category, Constant, Contains, CreditColumns,
                                               CreditList, Difference, Extract, FirstOf, HeaderSays,
                                               InstanceType, Joined, JsonKey, Letters, LowerWhen, MapCell,
                                               MapValue, Moment, MonthSpan, NextDay, Pricing, Quantity,
                                               Refuse, Same, Step, SumOfPresent, TagColumns, Tags, TagsFrom,
                                               Text)
from ingest.formats.billing.billing import FileValue, Record


@dataclass(frozen=True)
class Bill:
    """One bill format (see the module docstring)."""

    kind: str  # the loader's name for it: billing_focus
    label: str  # how messages name it: FOCUS
    normalize: Callable[[str], str]  # a header name as the steps spell it
    detect: tuple[tuple[str, ...], ...]  # columns a header needs: each, one of these spellings
    steps: tuple[Step, ...]
    nulls: frozenset[str] = frozenset()  # cell texts that mean null
    per_file: tuple[FileValue, ...] = ()  # columns a file may lack, given by a [billing] setting
    money: tuple[str, ...] = ()  # other columns amounts are read from (never filled in as empty)
    family: billing.Family = field(init=False, repr=False, compare=False)
    readers: tuple = field(init=False, repr=False, compare=False)  # (column, reader) of each step
    stored: tuple[str, ...] = field(init=False, repr=False, compare=False)  # the billing_lines columns given

    def __post_init__(self) -> None:
        readers = tuple((_column_of(step), _reader(step)) for step in self.steps)
        stored = tuple(c for step in self.steps for c in ((step.start, step.end) if isinstance(step, MonthSpan)
                                                          else (_column_of(step),)) if not c.startswith("_"))
        unknown = set(stored) - set(billing.LINE_COLUMNS)
        if unknown:  # a misspelt column fails at import, not on the first bill
            raise ValueError(f"{self.kind}: not billing_lines columns: {sorted(unknown)}")
        object.__setattr__(self, "readers", readers)
        object.__setattr__(self, "stored", stored)
        object.__setattr__(self, "family", billing.Family(
            kind=self.kind, normalize=self.normalize, required=self.detect, build=self.build, nulls=self.nulls,
            label=self.label, per_file=self.per_file, money=self.money))

    def build(self, record: Record, columns: set[str] | None = None) -> list[dict]:
        """The billing_lines row of one record; BadValue with the first failing step's reason."""
        found = read(self, record, set(record.fields) if columns is None else columns)
        row = dict.fromkeys(billing.LINE_COLUMNS)
        for column in self.stored:
            row[column] = found[column]
        return [row, *({**row, **more} for more in found.get("_credits") or ())]

    def plan(self, fields: Fields) -> Plan:
        """The steps as SQL over the file's columns, checks in the steps' order."""
        return plan(self, fields)


def normalized(name: str) -> str:
    """BilledCost, billed_cost and "Billed Cost" all become billedcost."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


# --- one record (billing.py's readers) -------------------------------------------------------

def _column_of(step: Step) -> str:
    if isinstance(step, (CreditList, CreditColumns)):
        return "_credits"
    if isinstance(step, MonthSpan):
        return "_month_span"
    return getattr(step, "column", "_refused")


def read(bill: Bill, record: Record, header: set[str]) -> dict[str, object]:
    """Every step's column of one record, in order; BadValue at the first that fails."""
    found: dict[str, object] = {}
    for column, reader in bill.readers:
        found[column] = reader(record, found, header)
    return found


def _reader(step: Step) -> Callable[[Record, dict, set], object]:
    """The step as a function of (record, the columns read so far, the header's names), compiled
    once per definition: the per-record path reads whole files (JSON lines, a CSV DuckDB refuses)."""
    if isinstance(step, Text):
        names, required = step.names, step.required

        def text(record: Record, found: dict, header: set) -> object:
            value = billing.text(record, *names)
            if value is None and required:
                raise BadValue(required if isinstance(required, str) else f"no {record.name(*names)}")
            return value
        return text
    if isinstance(step, Amount):
        amount, names = (billing.required_amount if step.required else billing.amount), step.names
        if step.when is not None:
            when, keys = step.when
            return lambda record, found, header: amount(record, *names) if found[when] in keys else None
        return lambda record, found, header: amount(record, *names)
    if isinstance(step, Quantity):
        names = step.names
        return lambda record, found, header: billing.quantity(record, *names)
    if isinstance(step, Moment):
        moment, names = (billing.required_moment if step.required else billing.moment), step.names
        return lambda record, found, header: moment(record, *names)
    if isinstance(step, Category):
        of, table, label, default = step.of, dict(step.table), step.label, step.default
        return lambda record, found, header: billing.category(found[of] or default, table, label)
    if isinstance(step, Pricing):
        of, table = step.of, dict(step.table)
        return lambda record, found, header: billing.pricing(found[of], table)
    if isinstance(step, Tags):
        name, label = step.name, step.label
        return lambda record, found, header: billing.tag_pairs(billing.tags(record.get(name), label))
    if isinstance(step, TagColumns):
        prefix = step.prefix

        def tag_columns(record: Record, found: dict, header: set) -> object:
            tags = {name.removeprefix(prefix): billing.text(record, name) for name in record.fields
                    if name.startswith(prefix)}
            return billing.tag_pairs({key: value for key, value in tags.items() if value is not None})
        return tag_columns
    if isinstance(step, InstanceType):
        texts = step.of
        return lambda record, found, header: billing.instance_type_in(*(found[name] for name in texts))
    if isinstance(step, NextDay):
        of = step.of
        return lambda record, found, header: billing.next_day(found[of]) if found[of] is not None else None
    if isinstance(step, JsonKey):
        name, label, keys = step.name, step.label, step.keys

        def json_key(record: Record, found: dict, header: set) -> object:
            cell = billing.tags(record.get(name), label)
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
        return lambda record, found, header: billing.tags(record.get(name), name)
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
            found[span.start], found[span.end] = billing.month_span(month, span.label) if month else (None, None)
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


def _tags_from(step: TagsFrom) -> Callable[[Record, dict, set], object]:
    def tags(record: Record, found: dict, header: set) -> object:
        given: dict[str, str | None] = {}
        for name, value in record.fields.items():
            if name.startswith(step.prefixes) and not values.is_absent(value):
                given[name.removeprefix(step.strip)] = billing.text(record, name)
        for name, drops, add in step.maps:
            for key, value in billing.tags(record.get(name), name).items():
                if value not in (None, ""):
                    for drop in drops:
                        key = key.removeprefix(drop)
                    given[add + key] = value
        return billing.tag_pairs(given)
    return tags


_CREDIT_LINE = {"charge_category": "credit", "pricing_category": None, "consumed_quantity": None, "consumed_unit": None}


def _credit_list(step: CreditList) -> Callable[[Record, dict, set], object]:
    def credits(record: Record, found: dict, header: set) -> object:
        entries = billing.structured(record.get(step.name), step.name) or []
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


def _credit_numbers(columns) -> list[int]:
    return sorted(int(c[6:-7]) for c in columns if re.fullmatch(r"credit[0-9]+ amount", c))


def _credit_columns(step: CreditColumns) -> Callable[[Record, dict, set], object]:
    def credits(record: Record, found: dict, header: set) -> object:
        lines = []
        currency = found[step.currency]
        for number in _credit_numbers(header):
            value = billing.amount(record, f"credit{number} amount")
            if value is None:
                continue
            other = billing.text(record, f"credit{number} currency")
            if other is not None and other != currency:
                raise BadValue(f"{record.name(f'credit{number} currency')} {other} is not the line's {currency}")
            lines.append({**_CREDIT_LINE, "billed_cost": value, "effective_cost": value,
                          "charge_category_raw": "credit",
                          "charge_description": billing.text(record, f"credit{number}") or "credit"})
        return lines
    return credits


# --- whole columns (SQL) ---------------------------------------------------------------------

def plan(bill: Bill, fields: Fields) -> Plan:
    """The SQL Plan of the steps (bill_sql.Plan): one expression per column, the checks in order."""
    b = Builder(fields)
    sql: dict[str, str] = {}  # column -> its SQL (later steps read it, not the v_ alias)
    extra = None  # the SELECT of credit lines
    for step in bill.steps:
        if isinstance(step, Text):
            sql[step.column] = b.text(*step.names)
            b.column(step.column, sql[step.column])
            if step.required:
                b.check(f"{sql[step.column]} IS NULL", literal(step.required) if isinstance(step.required, str)
                        else f"'no ' || {fields.label(*step.names)}")
            continue
        if isinstance(step, Amount) and step.when is not None:
            if not any(fields.has(n) for n in step.names):
                sql[step.column] = "NULL"
                continue
            b.amount(step.column, *step.names, when=bill_sql.one_of(sql[step.when[0]], step.when[1]))
        elif isinstance(step, Amount):
            b.amount(step.column, *step.names, required=step.required)
        elif isinstance(step, Quantity):
            b.quantity(step.column, *step.names)
        elif isinstance(step, Moment):
            b.moment(step.column, *step.names, required=step.required)
        elif isinstance(step, Category):
            raw = sql[step.of] if step.default is None else f"coalesce({sql[step.of]}, {literal(step.default)})"
            b.category(step.column, raw, dict(step.table), step.label)
        elif isinstance(step, Pricing):
            b.column(step.column, bill_sql.pricing(sql[step.of], dict(step.table)))
        elif isinstance(step, Tags):
            b.tags(step.column, step.name)
        elif isinstance(step, TagColumns):
            b.column(step.column, _tag_columns(b, fields, step.prefix))
        elif isinstance(step, InstanceType):
            found = [f"bill_instance_type({sql[name]})" for name in step.of]
            b.column(step.column, f"coalesce({', '.join(found)})" if len(found) > 1 else found[0])
        elif isinstance(step, NextDay):
            b.column(step.column, f"{sql[step.of]} + INTERVAL 1 DAY")
        elif isinstance(step, JsonKey):
            b.column(step.column, _json_key(b, fields, step))
        elif isinstance(step, LowerWhen) and step.when is None:
            b.column(step.column, f"lower(nullif({sql[step.of]}, ''))")
        elif isinstance(step, LowerWhen):
            b.column(step.column, f"CASE WHEN lower(coalesce({sql[step.when]}, '')) = {literal(step.equals)} "
                                  f"THEN lower(nullif({sql[step.of]}, '')) END")
        elif isinstance(step, Letters):
            b.column(step.column, f"regexp_replace(lower(coalesce({sql[step.of]}, '')), '[^a-z]', '', 'g')")
        elif isinstance(step, Case):
            arms = " ".join(f"WHEN {literal(k)} THEN {sql[v]}" for k, v in step.cases.items())
            b.column(step.column, f"CASE {sql[step.of]} {arms} ELSE {sql[step.default]} END")
        elif isinstance(step, Difference):
            b.column(step.column, f"{sql[step.left]} - {sql[step.right]}")
        elif isinstance(step, SumOfPresent):
            nulls = " AND ".join(f"{sql[p]} IS NULL" for p in step.of)
            b.column(step.column, f"CASE WHEN {nulls} THEN NULL ELSE "
                                  + " + ".join(f"coalesce({sql[p]}, 0)" for p in step.of) + " END")
        elif isinstance(step, FirstOf):
            b.column(step.column, f"coalesce({', '.join(sql[p] for p in step.of)})")
        elif isinstance(step, Joined):
            first, *rest = step.of
            b.column(step.column, f"CASE WHEN {sql[first]} IS NOT NULL THEN "
                                  + " || '|' || ".join([sql[first], *(f"coalesce({sql[p]}, '')" for p in rest)])
                                  + " END")
        elif isinstance(step, Contains):
            text = f"lower(coalesce({sql[step.of]}, ''))"
            if step.drop:
                text = f"regexp_replace({text}, {literal('[' + re.escape(step.drop) + ']')}, '', 'g')"
            b.column(step.column, f"CASE WHEN contains({text}, {literal(step.needle)}) THEN {literal(step.value)} END")
        elif isinstance(step, MapCell):
            b.column(step.column, b.entries(step.name))
        elif isinstance(step, MapValue):
            found = [f"nullif(trim(list_filter({sql[step.of]}, lambda x: x.key = {literal(k)})[-1].value), '')"
                     for k in step.keys]
            b.column(step.column, f"coalesce({', '.join(found)})")
        elif isinstance(step, TagsFrom):
            b.column(step.column, _tags_from_sql(b, fields, step))
        elif isinstance(step, MonthSpan):
            month = sql[step.of]
            parts = f"regexp_extract({month}, '^([0-9]{{4}})-?([0-9]{{2}})$', ['y', 'm'])"
            start = b.column(step.start, f"CASE WHEN TRY_CAST({parts}.m AS INTEGER) BETWEEN 1 AND 12 THEN "
                                         f"CAST({parts}.y || '-' || {parts}.m || '-01' AS TIMESTAMPTZ) END")
            b.check(f"{month} IS NOT NULL AND {start} IS NULL",
                    f"{literal(step.label + ' ')} || bill_repr({month}) || ' is not a month (YYYYMM)'")
            b.column(step.end, f"{start} + INTERVAL 1 MONTH")
            sql[step.start], sql[step.end] = b.columns[step.start], b.columns[step.end]
            continue
        elif isinstance(step, Extract):
            b.column(step.column, f"nullif(regexp_extract({sql[step.of]}, {literal(step.pattern)}, 1), '')")
        elif isinstance(step, CreditList):
            extra = _credit_list_sql(b, fields, step)
            continue
        elif isinstance(step, CreditColumns):
            extra = _credit_columns_sql(b, fields, sql, step)
            continue
        elif isinstance(step, HeaderSays):
            names = set(fields.names())
            b.column(step.column, literal(next((value for name, value in step.cases if name in names), step.default)))
        elif isinstance(step, Same):
            b.column(step.column, sql[step.of])
        elif isinstance(step, Constant):
            b.column(step.column, literal(step.value) if isinstance(step.value, str | None) else str(step.value))
        else:  # Refuse
            raw = sql[step.of]
            before, _, after = step.reason.partition("{value}")
            reason = (f"{literal(before)} || bill_repr({raw}) || {literal(after)}" if "{value}" in step.reason
                      else literal(step.reason))
            b.check(bill_sql.one_of(f"bill_key({raw})", step.keys), reason)
            continue
        sql[step.column] = b.columns[step.column]
    return b.plan(extra)


def _tag_columns(b: Builder, fields: Fields, prefix: str) -> str:
    """SQL of the tag map from one column per tag (a header names each key once), sorted by key."""
    names = sorted((name.removeprefix(prefix), name) for name in fields.names() if name.startswith(prefix))
    if not names:
        return "NULL"
    entries = ", ".join(f"{{'key': {literal(key)}, 'value': {b.text(name)}}}" for key, name in names)
    found = b.column("_tag_list", f"list_filter([{entries}], lambda x: x.value IS NOT NULL)")
    return f"CASE WHEN len({found}) > 0 THEN map_from_entries({found}) END"


def _json_key(b: Builder, fields: Fields, step: JsonKey) -> str:
    """SQL of the first non-empty key of a JSON-object cell; a cell that is not a JSON object of
    named values (or a typed Parquet value) goes to the per-record reader."""
    if not fields.has(step.name):
        return "NULL"
    if fields.types[step.name] != "VARCHAR":
        b.python.append(f"{bill_sql.ident(fields.columns[step.name])} IS NOT NULL")
        return "NULL"
    cell = f"bill_json_text({b.text(step.name)})"
    b.python.append(f"{cell} IS NOT NULL AND CASE WHEN json_valid({cell}) THEN json_type({cell}) <> 'OBJECT' "
                    f"OR list_contains(json_keys({cell}), '') ELSE true END")
    found = [f"nullif(json_extract_string({cell}, {literal('$.' + key)}), '')" for key in step.keys]
    return f"CASE WHEN json_valid({cell}) THEN coalesce({', '.join(found)}) END"


def _tags_from_sql(b: Builder, fields: Fields, step: TagsFrom) -> str:
    """SQL of TagsFrom's map; a line naming a tag twice (where the later wins) goes to the
    per-record reader."""
    flat_names = [name for name in fields.names() if name.startswith(step.prefixes)]
    keys = [name.removeprefix(step.strip) for name in flat_names]
    maps = [m for m in step.maps if fields.has(m[0])]
    if not maps and len(set(keys)) == len(keys):  # tag columns only, each key once: sorted here, once
        ordered = sorted(zip(keys, flat_names))
        entries = ", ".join(f"{{'key': {literal(key)}, 'value': {b.text(name)}}}" for key, name in ordered)
        found = b.column("_tag_list", f"list_filter([{entries}], lambda x: x.value IS NOT NULL)" if ordered else "[]")
        return f"CASE WHEN len({found}) > 0 THEN map_from_entries({found}) END"
    flat = [f"{{'key': {literal(key)}, 'value': {b.text(name)}}}" for key, name in zip(keys, flat_names)]
    lists = [f"list_filter([{', '.join(flat)}], lambda x: x.value IS NOT NULL)" if flat else "[]"]
    for name, drops, add in step.maps:
        entries = f"list_filter({b.entries(name)}, lambda x: x.value <> '')"
        for drop in drops:
            entries = (f"list_transform({entries}, lambda x: {{'key': CASE WHEN starts_with(x.key, {literal(drop)}) "
                       f"THEN x.key[{len(drop) + 1}:] ELSE x.key END, 'value': x.value}})")
        if add:
            entries = f"list_transform({entries}, lambda x: {{'key': {literal(add)} || x.key, 'value': x.value}})"
        lists.append(entries)
    found = b.column("_tag_list", f"list_concat({', '.join(lists)})")
    names = f"list_transform({found}, lambda x: x.key)"
    b.python.append(f"len(list_distinct({names})) <> len({found})")
    return f"CASE WHEN len({found}) > 0 AND len(list_distinct({names})) = len({found}) " \
           f"THEN map_from_entries(list_sort({found})) END"


_CREDIT = '[{"name": "VARCHAR", "full_name": "VARCHAR", "type": "VARCHAR", "amount": "VARCHAR"}]'
_NOT_CARRIED = ("billed_cost", "effective_cost", "charge_category", "charge_category_raw", "charge_description",
                "pricing_category", "consumed_quantity", "consumed_unit", "source_file", "source_kind", "source_line")


def _credit_list_sql(b: Builder, fields: Fields, step: CreditList) -> str | None:
    """The SELECT of one credit line per entry of a JSON list cell; a cell that is not a JSON list
    of objects each with a readable amount (a Python literal, say) goes to the per-record reader."""
    if not fields.has(step.name):
        return None
    if fields.types[step.name] != "VARCHAR":
        b.python.append(f"{bill_sql.ident(fields.columns[step.name])} IS NOT NULL")
        return None
    cell = b.text(step.name)
    parsed = f"json_transform({cell}, {literal(_CREDIT)})"
    readable = (f"CASE WHEN json_valid({cell}) AND json_type({cell}) = 'ARRAY' THEN coalesce(list_bool_and("
                f"list_transform(json_extract({cell}, '$[*]'), lambda e: json_type(e) = 'OBJECT' "
                f"AND bill_money(json_extract_string(e, '$.amount')) IS NOT NULL)), true) ELSE false END")
    b.python.append(f"{cell} IS NOT NULL AND NOT ({readable})")
    b.column("_credits", f"CASE WHEN {cell} IS NOT NULL AND json_valid({cell}) AND json_type({cell}) = 'ARRAY' "
                         f"THEN {parsed} END")
    carried = ", ".join(c for c in billing.LINE_COLUMNS if c in b.columns and c not in _NOT_CARRIED)
    return f"""SELECT {carried}, bill_money(credit.amount) AS billed_cost, bill_money(credit.amount) AS effective_cost,
            'credit' AS charge_category,
            coalesce(nullif(credit.type, ''), 'credit') AS charge_category_raw,
            coalesce(nullif(credit.full_name, ''), nullif(credit.name, ''), nullif(credit.type, ''), 'credit')
                AS charge_description,
            NULL AS pricing_category, NULL AS consumed_quantity, NULL AS consumed_unit,
            source_line, _sub
        FROM (SELECT {', '.join(f'v_{c} AS {c}' for c in carried.split(', '))}, _line AS source_line,
                     unnest(v__credits) AS credit, generate_subscripts(v__credits, 1) AS _sub
              FROM bill_lines WHERE _reason IS NULL AND NOT _python AND len(v__credits) > 0)"""


def _credit_columns_sql(b: Builder, fields: Fields, sql: dict[str, str], step: CreditColumns) -> str | None:
    """The SELECT of one credit line per `credit<N> amount` with a value, its currency checked."""
    currency = f"v_{step.currency}"
    credits = []
    for number in _credit_numbers(fields.names()):
        amount = b.amount(f"_credit{number}", f"credit{number} amount")
        other = b.text(f"credit{number} currency")
        b.check(f"{amount} IS NOT NULL AND {other} IS NOT NULL AND {other} <> {currency}",
                f"{fields.label(f'credit{number} currency')} || ' ' || {other} || ' is not the line''s ' || {currency}")
        b.column(f"_credit{number}_name", f"coalesce({b.text(f'credit{number}')}, 'credit')")
        credits.append(number)
    carried = [c for c in billing.LINE_COLUMNS if c in b.columns and c not in (
        "billed_cost", "effective_cost", "charge_category", "pricing_category", "consumed_quantity",
        "consumed_unit", "charge_description")]
    return " UNION ALL ".join(
        f"""SELECT {', '.join(f'v_{c} AS {c}' for c in carried)}, v__credit{n} AS billed_cost,
                v__credit{n} AS effective_cost, 'credit' AS charge_category, 'credit' AS charge_category_raw,
                v__credit{n}_name AS charge_description, NULL AS pricing_category, NULL AS consumed_quantity,
                NULL AS consumed_unit, _line AS source_line, {sub} AS _sub
            FROM bill_lines WHERE _reason IS NULL AND NOT _python AND v__credit{n} IS NOT NULL"""
        for sub, n in enumerate(credits, start=1)) or None
