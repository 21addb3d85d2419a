"""A JSON line's lists, maps and items read by the lenient pass (batch_json.lenient_fields).

The lenient pass types a whole line with one json_transform; these are the pieces of it for the
fields that hold more than one value: a list of counts (`BIGINT[]`) or of texts (`VARCHAR[]`), a
map of names to texts and whole numbers (`MAP(VARCHAR, VARCHAR)`), a list of item objects (Items:
a list of STRUCTs of the items' counts and numbers). json_transform is lenient (1.5, "1" and true are read
as the BIGINTs 2, 1 and 1; true as the VARCHAR 'true'), so a line is trusted only where its text
provably reads as the generic reader (reader.py) reads it, and otherwise goes to the strict read
(batch_json.json_fields) exactly as before:

- `quirks`: regexes (to batch_json.quirk_pattern) for a list item that is not a plain JSON integer
  (no point, exponent, quote, letter or nested value) or a plain string (no escape, no blank at
  its start); a map value that is not a string or a JSON integer (true, false, null and doubles,
  which Python's str() writes as True, False, '' and as spelled, are the strict read's); a list,
  map or items given as anything but a list / an object (null included); an item that is not an
  object, or holds a list; a list's other spelling.
- `counted`: how many keys (`":`) the line's lists, maps and items account for, so that the
  lenient pass's key count still proves no key repeated and none unknown (a map with a repeated
  name is NULL in DuckDB; an item's unknown or repeated key, or one given null, is not counted).
- `plain`: SQL that holds where the values read are the reader's: counts within the Field's
  bounds; a map's names not empty; each item with its Required fields, its numbers within their
  bounds.
- `typed`: the columns the typed statement reads (batch_typed): lists without empty texts, the
  map sorted by name, the items as STRUCTs.

The strict read's rules (batch_json._list_item_plain, _count_items_plain, _item_plain,
MAP_VALUE_PLAIN, map_value) are the spec: a line trusted here gives the same row, tags, items
and reject. tests/test_lenient_nested.py checks each quirk against the reader.
"""
from __future__ import annotations

from ingest.engine.definition import (COUNT, COUNT_LIST, NUMBER, PERCENT, SQL_TYPE, Definition, Field,
                                      Items, Required, Since)
from ingest.engine.batch_spellings import lists_of, maps_of

STRING = r'"[^"]*"'  # a JSON string on a line without escapes (quirk_pattern): no quote inside
ITEM_TYPES = (COUNT, NUMBER, PERCENT)  # an item's values the lenient pass reads (others: the strict read's)


def item_columns(items: Items) -> list[Field]:
    """The item Fields loaded into the Items' table (insert_items): its counts and numbers."""
    return [f for f in items.fields if f.type in ITEM_TYPES]


def _items_read(items: Items) -> bool:
    """Whether the lenient pass reads this Items: its every rule is a Field, a Required of a
    count or number, or a Since (its time is not read here: an item giving it is not counted)."""
    read = {f.column for f in item_columns(items)}
    if any(f.divide_by != 1 for f in item_columns(items)):  # insert_items loads a value as written
        return False
    return all(isinstance(rule, (Field, Since)) or (isinstance(rule, Required) and rule.column in read)
               for rule in items.steps)


def quirks(definition: Definition, blank: str) -> list[str]:
    """Regexes of the lines whose lists, maps or items the lenient pass does not read as the
    reader (any match sends the line to the strict read); `blank` is a character class of the
    blanks Python's str.strip() removes."""
    found = []
    for f in lists_of(definition):
        key = rf'"{f.column}"\s*:\s*'
        if f.type == COUNT_LIST:  # an item with a point, an exponent, a quote, a letter (null too), a nested value
            body = r"\[[^\]]*[^-0-9,\s\]]"
        else:  # an item not a string, or a string that starts with a blank (one that ends with one: quirk_pattern)
            body = rf'\[\s*(?:{STRING}\s*,\s*)*(?:[^"\s\]]|{STRING}\s*[^,\]\s]|"{blank})'
        found.append(rf"{key}(?:[^\[\s]|{body})")
        found += [rf'"{name}"\s*:' for name in f.spellings if name != f.column]  # the reader's
    for f in maps_of(definition):
        # null or not an object; after plain entries (name: text or whole number), a value of another kind:
        # true, false, null, a double, a nested value (the strict read writes them as Python's str() does)
        entry = rf'{STRING}\s*:\s*(?:{STRING}|-?[0-9]+)'
        odd = rf'(?:[^"\s}}]|{STRING}\s*[^:\s]|{STRING}\s*:\s*(?:[^-"0-9\s]|-[^0-9]|-?[0-9]+[^0-9\s,}}]))'
        found.append(rf'"{f.column}"\s*:\s*(?:[^{{\s]|\{{\s*(?:{entry}\s*,\s*)*{odd})')
        found += [rf'"{name}"\s*:' for name in f.spellings if name != f.column]
    for items in definition.items:
        key = rf'"{items.field}"\s*:\s*'
        if not _items_read(items):
            found.append(key)
            continue
        # not a list; an item that is not an object; a list inside the list
        found.append(rf"{key}(?:[^\[\s]|\[\s*[^{{\s\]]|\[[^\]]*(?:\[|}}\s*,\s*[^{{\s]))")
    return found


def item_keys(definition: Definition, *types: str) -> list[str]:
    """The spellings of the Items' fields of `types`: quirk_pattern checks their values' spelling
    wherever they are written, as a record's own."""
    return [name for items in definition.items for f in items.fields if f.type in types for name in f.spellings]


def _read(name: str, seen: set[str] | None) -> bool:
    """Whether the lenient pass transforms the key `name` (a batch's lines gave it, or all are read):
    a line giving a key not transformed is not trusted (the key is not counted)."""
    return seen is None or name in seen


def structure(definition: Definition, seen: set[str] | None = None) -> list[str]:
    """The json_transform structure's entries for the lists, maps and items."""
    entries = [f'"{f.column}": ["{"BIGINT" if f.type == COUNT_LIST else "VARCHAR"}"]' for f in lists_of(definition)
               if _read(f.column, seen)]
    entries += [f'"{f.column}": "MAP(VARCHAR, VARCHAR)"' for f in maps_of(definition) if _read(f.column, seen)]
    for items in definition.items:
        if _items_read(items) and _read(items.field, seen):
            fields = ", ".join(f'"{name}": "{SQL_TYPE[f.type]}"' for f in item_columns(items) for name in f.spellings)
            entries.append(f'"{items.field}": [{{{fields}}}]')
    return entries


def counted(definition: Definition, v: str = "v", seen: set[str] | None = None) -> list[str]:
    """SQL: how many keys (`":`) each list, map and items of the transformed line `v` accounts
    for: its own and, for a map, its names, for items each value given."""
    found = [f"CAST({v}.{f.column} IS NOT NULL AS INTEGER)" for f in lists_of(definition) if _read(f.column, seen)]
    found += [f"coalesce(1 + cardinality({v}.{f.column}), 0)" for f in maps_of(definition) if _read(f.column, seen)]
    for items in definition.items:
        if _items_read(items) and _read(items.field, seen):
            given = " + ".join(f"CAST(i.{name} IS NOT NULL AS INTEGER)" for f in item_columns(items) for name in f.spellings)
            found.append(f"CASE WHEN {v}.{items.field} IS NOT NULL "
                         f"THEN 1 + coalesce(list_sum(list_transform({v}.{items.field}, lambda i: {given})), 0) ELSE 0 END")
    return found


def _value(f: Field, i: str) -> str:
    """SQL: an item Field's value as the reader takes it, the first spelling given."""
    found = [f"{i}.{name}" for name in f.spellings]
    return found[0] if len(found) == 1 else f"coalesce({', '.join(found)})"


def _within(f: Field, x: str) -> str:
    """SQL: a count or number `x` (not NULL) within the Field's bounds, as reader_values.read_value."""
    if f.type == COUNT:
        low = "" if f.minimum is None else f" AND {x} >= {f.minimum}"
        return f"abs({x}) <= {f.maximum}{low}"
    if f.type == PERCENT:
        return f"{x} BETWEEN 0 AND 100 AND abs({x}) <= {f.limit!r}"
    low = "" if f.minimum is None else f" AND {x} >= {f.minimum}"
    return f"abs({x}) <= {f.limit!r}{low}"


def plain(definition: Definition, v: str = "v", seen: set[str] | None = None) -> list[str]:
    """SQL (each to AND) that holds where the transformed lists, maps and items of `v` are read
    as the reader reads them."""
    found = []
    for f in lists_of(definition):
        if f.type == COUNT_LIST and _read(f.column, seen):  # no null item here (quirks): each within the bound, either sign
            found.append(f"coalesce(list_max({v}.{f.column}) <= {f.maximum} AND list_min({v}.{f.column}) >= -{f.maximum}, true)")
    for f in maps_of(definition):
        if not _read(f.column, seen):
            continue
        found.append(f"coalesce(NOT list_contains(map_keys({v}.{f.column}), ''), true)")  # an empty name: the reader's
    for items in definition.items:
        if not (_items_read(items) and _read(items.field, seen)):
            continue
        checks = []
        for f in item_columns(items):
            x = _value(f, "i")
            checks.append(f"({x} IS NULL OR ({_within(f, x)}))")
        for rule in items.steps:
            if isinstance(rule, Required):
                checks.append(f"{_value(items.fields[[g.column for g in items.fields].index(rule.column)], 'i')} IS NOT NULL")
        found.append(f"coalesce(list_bool_and(list_transform({v}.{items.field}, lambda i: {' AND '.join(checks)})), true)")
    return found


def typed(definition: Definition, v: str = "v", seen: set[str] | None = None) -> list[str]:
    """SQL columns: each list (texts without empty ones), map (text sorted by name) and items
    (`<field>_items`: a list of STRUCTs of the item columns) of `v`, as the typed statement reads them."""
    found = []
    for f in lists_of(definition):
        value = f"{v}.{f.column}" if f.type == COUNT_LIST else f"list_filter({v}.{f.column}, lambda u: u <> '')"
        if not _read(f.column, seen):
            value = f"CAST(NULL AS {SQL_TYPE[f.type]})"
        found.append(f"{value} AS {f.column}")
    for f in maps_of(definition):
        if not _read(f.column, seen):
            found.append(f"CAST(NULL AS {SQL_TYPE[f.type]}) AS {f.column}")
            continue
        m = f"{v}.{f.column}"  # texts and whole numbers only (quirks): as Python's str() writes them; sorted by name
        found.append(f"CASE WHEN cardinality({m}) <= 1 THEN {m} ELSE map_from_entries(list_sort(map_entries({m}))) END AS {f.column}")
    for items in definition.items:
        if _items_read(items) and _read(items.field, seen):
            struct = ", ".join(f"'{f.column}': {_value(f, 'i')}" for f in item_columns(items))
            found.append(f"list_transform({v}.{items.field}, lambda i: {{{struct}}}) AS {items.field}_items")
        else:
            found.append(f"CAST(NULL AS STRUCT({item_struct(items)})[]) AS {items.field}_items")
    return found


def item_struct(items: Items) -> str:
    """The SQL STRUCT fields of an Items' loaded values (`name TYPE, ...`)."""
    return ", ".join(f"{f.column} {SQL_TYPE[f.type]}" for f in item_columns(items))


def items_from_json(items: Items, each: str) -> str:
    """SQL: the strict read's items (`each`, JSON[]: its objects) as the lenient pass's list of
    STRUCTs, each value as insert_items read it before (the first spelling that casts)."""
    struct = []
    for f in item_columns(items):
        found = [f"TRY_CAST(json_extract_string(x, '$.{name}') AS {SQL_TYPE[f.type]})" for name in f.spellings]
        struct.append(f"'{f.column}': coalesce({', '.join(found)})")
    return f"list_transform({each}, lambda x: {{{', '.join(struct)}}})"
