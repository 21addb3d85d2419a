"""A bill definition's steps (bill_steps.py) as SQL over whole columns: one `Plan` (bill_sql.py)
with an expression per `billing_lines` column and the checks in the steps' order, which
bill_stage.py runs over a file in one pass. A line SQL cannot read (a nested Parquet value, tags
that are not plain JSON) is flagged for the per-record reader (bill_build.py), which reads the
same steps and must give the same rows and reasons.
"""
from __future__ import annotations

import re

from ingest.formats.billing import bill_sql
from ingest.formats.billing.bill_family import LINE_COLUMNS
from ingest.formats.billing.bill_sql import Builder, Fields, Plan, literal
from ingest.formats.billing.bill_steps import (Amount, Case, Category, Constant, Contains, CreditColumns,
                                               CreditList, Difference, Extract, FirstOf, HeaderSays,
                                               InstanceType, Joined, JsonKey, Letters, LowerWhen, MapCell,
                                               MapValue, Moment, MonthSpan, NextDay, Pricing, Quantity, Same,
                                               Step, SumOfPresent, TagColumns, Tags, TagsFrom, Text,
                                               credit_numbers)

def plan(steps: tuple[Step, ...], fields: Fields) -> Plan:
    """The SQL Plan of the steps (bill_sql.Plan): one expression per column, the checks in order."""
    b = Builder(fields)
    sql: dict[str, str] = {}  # column -> its SQL (later steps read it, not the v_ alias)
    extra = None  # the SELECT of credit lines
    for step in steps:
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
    carried = ", ".join(c for c in LINE_COLUMNS if c in b.columns and c not in _NOT_CARRIED)
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
    for number in credit_numbers(fields.names()):
        amount = b.amount(f"_credit{number}", f"credit{number} amount")
        other = b.text(f"credit{number} currency")
        b.check(f"{amount} IS NOT NULL AND {other} IS NOT NULL AND {other} <> {currency}",
                f"{fields.label(f'credit{number} currency')} || ' ' || {other} || ' is not the line''s ' || {currency}")
        b.column(f"_credit{number}_name", f"coalesce({b.text(f'credit{number}')}, 'credit')")
        credits.append(number)
    carried = [c for c in LINE_COLUMNS if c in b.columns and c not in (
        "billed_cost", "effective_cost", "charge_category", "pricing_category", "consumed_quantity",
        "consumed_unit", "charge_description")]
    return " UNION ALL ".join(
        f"""SELECT {', '.join(f'v_{c} AS {c}' for c in carried)}, v__credit{n} AS billed_cost,
                v__credit{n} AS effective_cost, 'credit' AS charge_category, 'credit' AS charge_category_raw,
                v__credit{n}_name AS charge_description, NULL AS pricing_category, NULL AS consumed_quantity,
                NULL AS consumed_unit, _line AS source_line, {sub} AS _sub
            FROM bill_lines WHERE _reason IS NULL AND NOT _python AND v__credit{n} IS NOT NULL"""
        for sub, n in enumerate(credits, start=1)) or None
