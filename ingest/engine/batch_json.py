"""JSON lines as SQL: the CTEs that read each field's value of a batch of JSON lines.

Two reads (batch_sql.py chooses per batch): the lenient one (`lenient_fields`) types every field
with one json_transform, plain lists, maps and items too (batch_nested.py), and trusts it only on
lines without a quirk (`quirk_pattern`: escapes, long numbers, a count spelled 1.5, a list item or
map value of another kind, a blank at a text's edge ...); the strict one (`json_fields`) takes
each value's JSON text and type, checks lists, maps and items (Items) item by item, and leaves
typing to batch_typed.py. A line neither reads as Python would is left to the generic reader.
"""
from __future__ import annotations

from ingest.engine.contract import ParseContext
from ingest.engine.definition import (COUNT, COUNT_LIST, MONEY, NUMBER, PERCENT, READ_SQL_TYPE, TEXT, TIME,
                                      Definition, Field, Items, Required)
from ingest.engine.run_rules import Extras
from ingest.engine.batch_spellings import MONEY_TEXT, lists_of, maps_of, scalars_of, time_ok
from ingest.engine import batch_nested

BLANK = r"[\s\x0b\x1c-\x1f\x85\xa0\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}]"
TRAILING_COMMA = r",\s*[}\]]"  # DuckDB's JSON reader takes `[1,]` and `{"a": 1,}`; Python's json refuses them
# An item's number or count (Items) read alike by DuckDB and Python: no exponent, no more digits than a double keeps.
ITEM_NUMBER = r"-?(0|[1-9][0-9]{0,14})(\.[0-9]{1,16})?"
ITEM_COUNT = r"-?(0|[1-9][0-9]{0,17})"
# A map's single value as Python's str() writes it: text, a whole number, true or false, null ('').
# Told by its JSON text's first character, not json_type (a parse of each value): a string's quote,
# t, f, n; a number's text fits ITEM_COUNT only when it is a whole number (DuckDB writes a double
# with a point or an exponent), and an object, an array or a double never does.
MAP_VALUE_PLAIN = (f"e.value IS NULL OR left(CAST(e.value AS VARCHAR), 1) IN ('\"', 't', 'f', 'n') "
                   f"OR regexp_full_match(CAST(e.value AS VARCHAR), '{ITEM_COUNT}')")


def _list_item_plain(f: Field) -> str:
    """SQL over an item's JSON type `x` (and text `u`): a list item SQL reads as the reader does."""
    if f.type == COUNT_LIST:  # whole numbers within bounds; null items are skipped
        return "x IN ('UBIGINT', 'BIGINT', 'NULL')"
    return "x = 'VARCHAR'"


def _count_items_plain(f: Field) -> str:
    """SQL: a count list's every item within the field's bounds (either sign), else the reader's."""
    if f.type != COUNT_LIST:
        return ""
    return (f"AND coalesce(list_bool_and(list_transform({f.column}_items, lambda u: u IS NULL "
            f"OR coalesce(abs(TRY_CAST(u AS BIGINT)) <= {f.maximum}, false))), true)")


def _item_read(items: Items, x: str) -> str:
    """SQL: an item `x` (JSON) read once, for _item_plain: NULL when it is not an object, else its
    keys and each field's JSON text (NULL for null or missing), from one json_transform (a
    json_type and json_extract_string per field would parse the item a dozen times)."""
    names = [name for f in items.fields for name in f.spellings]
    structure = "{" + ", ".join(f'"{name}": "JSON"' for name in names) + "}"
    return (f"CASE WHEN left(CAST({x} AS VARCHAR), 1) = '{{' THEN {{'keys': json_keys({x}), "
            f"'v': json_transform({x}, '{structure}')}} END")


def _item_plain(items: Items, p: str) -> str:
    """SQL over an item read by _item_read (`p`): the item is one SQL reads as the reader does: an
    object without a repeated key or another key, each field of its JSON type in a plain spelling,
    a required one given, no time (a Since is worked out by the reader). A number's JSON text in a
    plain spelling is one json_type calls a number (UBIGINT, BIGINT or DOUBLE; an integer one for
    ITEM_COUNT), and no other JSON value's text (a string's quote, true, null, an object) fits it."""
    known = [name for f in items.fields for name in f.spellings]
    checks = [f"{p} IS NOT NULL", f"len({p}.keys) = len(list_distinct({p}.keys))", f"list_has_all({known!r}, {p}.keys)"]
    for f in items.fields:
        for name in f.spellings:
            text = f"CAST({p}.v.{name} AS VARCHAR)"
            absent = f"{p}.v.{name} IS NULL"
            if f.type == COUNT:
                shape = f"regexp_full_match({text}, '{ITEM_COUNT}')"
            elif f.type in (NUMBER, PERCENT):
                low = "" if f.minimum is None else f" AND TRY_CAST({text} AS DOUBLE) >= {f.minimum}"
                high = f" AND TRY_CAST({text} AS DOUBLE) <= 100" if f.type == PERCENT else ""
                shape = f"regexp_full_match({text}, '{ITEM_NUMBER}'){low}{high}"
            else:  # text, times and the rest: the reader's
                shape = "false"
            checks.append(f"({absent} OR ({shape}))")
    for rule in items.steps:
        if isinstance(rule, Required):
            f = next(f for f in items.fields if f.column == rule.column)
            checks.append("(" + " OR ".join(f"{p}.v.{n} IS NOT NULL" for n in f.spellings) + ")")
    return " AND ".join(f"coalesce({c}, false)" for c in checks)


def json_fields(definition: Definition, source: str = "batch") -> str:
    """CTEs ending in `fields` for JSON lines: each field's value as text (`<c>_text`, the first
    spelling present), its JSON type (`<c>_type`), whether the line is one plain object, each list."""
    scalars, lists, maps = scalars_of(definition), lists_of(definition), maps_of(definition)
    names = [name for f in scalars for name in f.spellings] + [f.column for f in lists]
    names += [f.column for f in maps] + [items.field for items in definition.items]
    names += [name for f in lists for name in f.spellings[1:]]  # a list's other spelling: the reader's
    # each field's JSON text by one parse: NULL when missing, 'null' when given as null (typed NULL below)
    paths = "[" + ", ".join(f"'$.\"{name}\"'" for name in names) + "]"
    position = {name: index + 1 for index, name in enumerate(names)}
    value, kind = {}, {}
    for f in scalars:
        # The first spelling whose value is not absent (missing, null or blank text), as the reader's.
        cases = [(f"v_{position[name]}", f"t_{position[name]}") for name in f.spellings]
        present = [f"({t} IS NOT NULL AND {t} <> 'NULL' AND NOT ({t} = 'VARCHAR' AND trim({v}) = ''))"
                   for v, t in cases]
        value[f.column] = "CASE " + " ".join(f"WHEN {p} THEN {v}" for p, (v, _) in zip(present, cases)) + " END"
        kind[f.column] = "CASE " + " ".join(f"WHEN {p} THEN {t}" for p, (_, t) in zip(present, cases)) + " END"
    list_texts = "".join(f""",
                   CASE WHEN object THEN json_extract_string(j[{position[f.column]}], '$[*]') END AS {f.column}_items,
                   CASE WHEN object THEN json_type(j[{position[f.column]}], '$[*]') END AS {f.column}_types""" for f in lists)
    list_fields = "".join(f""",
                   CASE WHEN t_{position[f.column]} = 'ARRAY' THEN {f.column}_items END AS {f.column}_list,
                   coalesce(t_{position[f.column]}, 'NULL') IN ('NULL', 'ARRAY')
                       {"".join(f" AND coalesce(t_{position[n]}, 'NULL') = 'NULL'" for n in f.spellings[1:])}
                       AND coalesce(list_bool_and(list_transform({f.column}_types, lambda x: {_list_item_plain(f)})), true)
                       {_count_items_plain(f)} AS {f.column}_plain""" for f in lists)
    list_texts += "".join(f""",
                   CASE WHEN object THEN j[{position[f.column]}] END AS {f.column}_json""" for f in maps)
    list_texts += "".join(f""",
                   CASE WHEN object THEN json_extract(j[{position[i.field]}], '$[*]') END AS {i.field}_each""" for i in definition.items)
    for f in maps:  # an object without a repeated name, each value single; an empty name is the reader's
        t = f"t_{position[f.column]}"
        list_fields += f""",
                   CASE WHEN {t} = 'OBJECT' AND len(json_keys({f.column}_json)) = len(list_distinct(json_keys({f.column}_json)))
                        THEN map_entries(CAST({f.column}_json AS MAP(VARCHAR, JSON))) END AS {f.column}_entries,
                   coalesce({t}, 'NULL') = 'NULL' OR ({f.column}_entries IS NOT NULL AND coalesce(list_bool_and(list_transform(
                       {f.column}_entries, lambda e: e.key <> '' AND ({MAP_VALUE_PLAIN}))), true)) AS {f.column}_plain"""
    for i in definition.items:
        t = f"t_{position[i.field]}"
        list_fields += f""",
                   CASE WHEN {t} = 'ARRAY' THEN {i.field}_each END AS {i.field}_items,
                   coalesce({t}, 'NULL') = 'NULL' OR ({t} = 'ARRAY'
                       AND coalesce(list_bool_and(list_transform(list_transform({i.field}_each, lambda x: {_item_read(i, 'x')}), 
                                                           lambda p: {_item_plain(i, 'p')})), true)) AS {i.field}_plain"""
    return f"""
        parsed AS (  -- each line's JSON read twice: its keys, and the JSON text of each field's value
            SELECT line, raw, TRY(json_keys(raw)) AS keys, TRY(json_extract(raw, {paths})) AS j
            FROM {source} WHERE ltrim(raw) <> ''
        ), objects AS (  -- an object without a repeated key (Python keeps a repeat's last value, SQL its first)
            SELECT line, raw, j, coalesce(keys IS NOT NULL AND j IS NOT NULL AND regexp_matches(raw, '^[ \t\r\n]*[{{]')
                                          AND NOT regexp_matches(raw, '{TRAILING_COMMA}')
                                          AND {_one_of_each(definition, names)}, false) AS object
            FROM parsed
        ), texts AS (  -- each field's JSON text once (NULL for null or missing)
            SELECT line, raw, object, {", ".join(f"CAST(j[{index + 1}] AS VARCHAR) AS x_{index + 1}" for index, name in enumerate(names))}
                   {list_texts}
            FROM objects
        ), read AS (  -- each value typed by its JSON text's first character
            SELECT *, {", ".join(f"{_json_type(f'x_{index + 1}')} AS t_{index + 1}" for index in range(len(names)))}
            FROM texts
        ), valued AS (
            SELECT *, {", ".join(f"{_json_value(f'x_{index + 1}', f't_{index + 1}')} AS v_{index + 1}" for index in range(len(names)))}
            FROM read
        ), fields AS (
            SELECT line, raw, object,
                   {", ".join(f"{value[f.column]} AS {f.column}_text, {kind[f.column]} AS {f.column}_type" for f in scalars)}
                   {list_fields}
            FROM valued
        )"""


def _one_of_each(definition: Definition, names: list[str]) -> str:
    """SQL: the object's keys (`keys`, repeats included) are each read once (`j`, the value of
    each of `names`, NULL when missing). With Extras and every known key among `names`: as many
    keys as known keys present, which holds exactly when no key repeats and none is unknown
    (cheaper than list_unique and list_has_all: ~10 % of a runs pass); else no key repeated."""
    known = {name for f in definition.fields for name in f.spellings} | {i.field for i in definition.items}
    if definition.rules(Extras) and set(names) == known and len(names) == len(known):
        return "len(keys) = len(list_filter(j, lambda v: v IS NOT NULL))"
    return f"len(keys) = list_unique(keys){_known_keys(definition)}"


def _known_keys(definition: Definition) -> str:
    """SQL (to AND): with Extras, a record's every key is one the definition reads (others are
    kept as tags by the reader)."""
    if not definition.rules(Extras):
        return ""
    known = sorted({name for f in definition.fields for name in f.spellings} | {i.field for i in definition.items})
    return f" AND list_has_all({known!r}, keys)"


def quirk_pattern(definition: Definition) -> str:
    """A line the lenient read may take otherwise than Python: any match sends it to the strict
    read. A string without escapes holds no quote, so `"key":` is always a key (a nested one only
    costs a strict read); numbers the lenient read would round or cast (text, true, 1.5 or 1e3 as
    a count, long digits) and text that is not a JSON string or has a blank at an edge are all
    caught here, an item's values (Items) as a record's; lists, maps and items other than plain
    ones by batch_nested.quirks."""
    def keys(*types: str) -> str:
        names = [name for f in scalars_of(definition, *types) for name in f.spellings]
        return "|".join(names + batch_nested.item_keys(definition, *types))

    return "|".join((
        r"\\",                                    # an escape: a key or text spelled with escapes
        # a number (after a colon, a comma or a bracket: not a GPU's hex id) with more digits than
        # a double keeps, or with an exponent
        r"[:,\[]\s*-?[0-9.]{17,}", r"[:,\[]\s*-?[0-9.]+[eE]",
        TRAILING_COMMA,
        r"^\s*[^{\s]",                              # not an object
        r'"\s+:',                                   # a blank before a key's colon (keys are counted as `":`)
        rf'"(?:{keys(COUNT)})"\s*:\s*(?:[^-0-9n\s]|-[^0-9]|n[^u]|-?[0-9]+[.eE])',
        rf'"(?:{keys(NUMBER, PERCENT, MONEY)})"\s*:\s*(?:[^-0-9n\s]|-[^0-9]|n[^u])',
        rf'"(?:{keys(TEXT, TIME)})"\s*:\s*(?:[^"n\s]|n[^u])',
        *batch_nested.quirks(definition, BLANK),     # lists, maps and items other than plain ones
        rf':\s*"{BLANK}', rf'{BLANK}"\s*[,}}\]]',    # a string starting or ending with a blank
    ))


def lenient_fields(definition: Definition, ctx: ParseContext, seen: set[str] | None = None) -> str:
    """CTEs ending in `typed` for JSON lines: every field read straight to its type by one
    json_transform (lists, maps and items too: batch_nested), trusted only on lines without a
    quirk (quirk_pattern) whose every key is a known field with a value (`object`; a repeated
    key, where Python keeps the last value and SQL the first, fails it: a string without escapes
    holds no quote, so each `":` ends a key) and whose lists, maps and items are plain.
    With `seen` (the keys a batch's first lines give), only those spellings are transformed: a
    line giving another is not trusted (its key is not counted), and goes to the strict read."""
    if seen is not None and not seen & ({name for f in definition.fields for name in f.spellings}
                                        | {items.field for items in definition.items}):
        seen = None  # no key of the definition: the whole structure (a line's keys are still counted)
    scalars = scalars_of(definition)
    spelled = {f.column: [name for name in f.spellings if seen is None or name in seen] for f in scalars}
    entries = [f'"{name}": "{READ_SQL_TYPE[f.type]}"' for f in scalars for name in spelled[f.column]]
    structure = "{" + ", ".join(entries + batch_nested.structure(definition, seen)) + "}"
    filled = " + ".join([f"CAST(v.{name} IS NOT NULL AS INTEGER)" for f in scalars for name in spelled[f.column]]
                        + batch_nested.counted(definition, seen=seen)) or "0"
    nested_plain = "".join(f" AND {check}" for check in batch_nested.plain(definition, seen=seen))
    columns = []
    for f in scalars:
        found = [f"nullif(v.{name}, '')" if f.type in (TEXT, TIME) else f"v.{name}" for name in spelled[f.column]]
        value = found[0] if len(found) == 1 else f"coalesce({', '.join(found)})" if found else \
            f"CAST(NULL AS {READ_SQL_TYPE[f.type]})"  # no spelling seen: the line giving one is not trusted
        columns.append(f"{value} AS {f.column}_text")
    columns += batch_nested.typed(definition, seen=seen)
    typed = [f"CASE WHEN {time_ok(ctx, f'{f.column}_text')} THEN TRY_CAST({f.column}_text AS TIMESTAMPTZ) END AS {f.column}"
             for f in scalars_of(definition, TIME)]
    typed += [f"{f.column}_text AS {f.column}" for f in scalars_of(definition, COUNT, NUMBER, PERCENT, TEXT)]
    typed += [f"CASE WHEN regexp_full_match({f.column}_text, '{MONEY_TEXT}') THEN CAST({f.column}_text AS DECIMAL(38, 12)) "
              f"END AS {f.column}" for f in scalars_of(definition, MONEY)]
    return f"""
        read AS (
            SELECT line, raw, quirk, key_marks, CASE WHEN NOT quirk THEN TRY(json_transform(raw, '{structure}')) END AS v
            FROM (SELECT line, raw, quirk_found AS quirk, key_marks FROM batch WHERE ltrim(raw) <> '')  -- line_marks.py
        ), fields AS (  -- a line with a quirk is the strict read's: not transformed above  -- as many keys (each `":`) as known fields with a value: no key repeated, none unknown
            SELECT line, raw, coalesce(NOT quirk AND v IS NOT NULL
                                       AND key_marks = {filled}{nested_plain}, false) AS object,
                   {", ".join(columns)}
            FROM read
        ), typed AS (
            SELECT *, {", ".join(typed)}
            FROM fields
        )"""


def map_value(value: str) -> str:
    """SQL for a map's JSON value as the reader writes it (Python's str(); null as '')."""
    return (f"CASE WHEN {value} IS NULL THEN '' ELSE CASE left(CAST({value} AS VARCHAR), 1) "  # its JSON type, as MAP_VALUE_PLAIN
            f"WHEN '\"' THEN json_extract_string({value}, '$') WHEN 't' THEN 'True' WHEN 'f' THEN 'False' "
            f"WHEN 'n' THEN '' ELSE CAST({value} AS VARCHAR) END END")


def _json_type(text: str) -> str:
    """SQL naming the JSON type of a value's JSON text (json_type's names; NULL for null or missing)."""
    return (f"CASE left({text}, 1) WHEN '\"' THEN 'VARCHAR' WHEN 't' THEN 'BOOLEAN' WHEN 'f' THEN 'BOOLEAN' "
            f"WHEN '{{' THEN 'OBJECT' WHEN '[' THEN 'ARRAY' WHEN 'n' THEN 'NULL' "
            f"ELSE CASE WHEN {text} IS NULL THEN NULL WHEN contains({text}, '.') OR contains({text}, 'e') OR contains({text}, 'E') "
            f"THEN 'DOUBLE' ELSE 'BIGINT' END END")  # contains, not a regex: 32 fields of every line (~3 % of a runs pass)


def _json_value(text: str, kind: str) -> str:
    """SQL for a value's text as json_extract_string gives it (a string without escapes sliced, not parsed)."""
    return (f"CASE WHEN {kind} = 'VARCHAR' THEN CASE WHEN contains({text}, '\\') THEN json_extract_string({text}, '$') "
            f"ELSE {text}[2:-2] END ELSE {text} END")
