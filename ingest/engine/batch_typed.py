"""The statement that types and checks a batch, and the INSERTs that load its plain rows.

`typed_statement` builds TEMP TABLE `typed` from the CTEs of batch_json.py or batch_csv.py: each
value cast to its type, the values a load gives (an option, the file's name), the derived values
(a span's end and length, hours and costs from batch_costs.py, counts, defaults, hashed ids), and
the verdict from batch_checks.py (`ok`: loads straight from SQL; a reason: refused; neither: the
reader's). `insert_typed` and `insert_items` load the `ok` rows; `by_line` names the table that
holds an Items' rows with their record's line until repeated keys are settled.
"""
from __future__ import annotations

from ingest.engine.contract import ParseContext
from ingest.engine.definition import (COUNT, COUNT_LIST, MONEY, NUMBER, PERCENT, TEXT, TEXT_LIST, TIME, CatalogCost,
                                      CountOf, Default, Definition, Field, HashedId, Items, OneOf, Span,
                                      FromFileName, FromOption)
from ingest.engine.run_rules import FromRate, HourlyCost, Hours, Prefer, Tags
from ingest.engine.batch_checks import rule_checks
from ingest.engine.batch_costs import from_rate_sql, hours_cte, hours_sql
from ingest.engine.batch_json import map_value
from ingest.engine.batch_nested import item_columns, items_from_json
from ingest.engine.batch_spellings import (CSV_MONEY, EDGE_BLANK, MONEY_TEXT, iso_utc, lists_of, maps_of, quote,
                                           scalars_of, time_ok, zoned)


def _divided(f: Field) -> str:
    """SQL after a number's value as written: its division by Field.divide_by (nothing for 1)."""
    return "" if f.divide_by == 1 else f" / {float(f.divide_by)!r}"


def by_line(items: Items) -> str:
    return f"{items.table}_by_line"


def insert_items(definition: Definition, items: Items) -> str:
    """INSERT the items of the plain rows of `typed` (`<field>_items`: a list of STRUCTs of the
    item columns, batch_nested) into the Items' by-line table."""
    columns = [f"item.{f.column} AS {f.column}" for f in item_columns(items)]
    return f"""
        INSERT INTO {by_line(items)} BY NAME
        SELECT {items.parent}, seq, {", ".join(columns)}, line AS source_line
        FROM (SELECT line, {definition.key.column} AS {items.parent}, unnest({items.field}_items) AS item,
                     unnest(range(len({items.field}_items))) AS seq
              FROM typed WHERE ok AND {items.field}_items IS NOT NULL)"""


def insert_typed(definition: Definition) -> str:
    """INSERT the plain rows of `typed` into the definition's table; returns the count."""
    key_parts = []
    for part in definition.key.parts:
        if definition.field(part).type == TIME:  # as Python's isoformat() of the UTC instant
            key_parts.append(iso_utc(part))
        else:
            key_parts.append(f"coalesce(CAST({part} AS VARCHAR), '')")
    key = f"concat_ws('|', {', '.join(key_parts)}) AS {definition.key.column}, "
    if definition.key.parts == (definition.key.column,) or not definition.key.stored:  # a field is the key, or none
        key = ""
    given = [f"CASE WHEN {g.of} IS NOT NULL THEN 'given' END AS {g.column}" for g in definition.given]
    derived = [f"{c.source}, {c.price}" for c in definition.rules(CatalogCost)]
    derived += [f"{c.column}, {c.source}" for c in definition.rules(HourlyCost)]
    derived += [h.seconds for h in definition.rules(Hours)] + [r.source for r in definition.rules(FromRate) if r.source]
    columns = [f.column for f in definition.stored] + derived + given
    return f"""
        INSERT INTO {definition.table} BY NAME
        SELECT {key}{", ".join(columns)},
               '{definition.kind}' AS source_kind, line AS source_line
        FROM typed WHERE ok"""


def typed_statement(definition: Definition, ctx: ParseContext, fields_sql: str, csv: bool = False,
               lenient: bool = False, zone: str | None = None) -> str:
    """The statement typing and checking a batch into TEMP TABLE `typed` (`ok`: plain and loadable
    straight from SQL) from the CTEs `fields_sql` (json_fields, or csv_fields when `csv`; or
    lenient_fields, which end in the typed values themselves and vouch for their types and blanks)."""
    allowed = {TEXT: "('VARCHAR')", TIME: "('VARCHAR', 'UBIGINT', 'BIGINT')", COUNT: "('UBIGINT', 'BIGINT')",
               NUMBER: "('UBIGINT', 'BIGINT', 'DOUBLE')", PERCENT: "('UBIGINT', 'BIGINT', 'DOUBLE')",
               MONEY: "('UBIGINT', 'BIGINT', 'DOUBLE')"}
    scalars, lists = scalars_of(definition), lists_of(definition)
    plain = [f"coalesce({f.column}_type IN {allowed[f.type]}, true)" for f in scalars]
    plain += [f"{f.column}_plain" for f in lists + maps_of(definition)]
    plain += [f"{items.field}_plain" for items in definition.items]
    checks = rule_checks(definition, json_strict=not (csv or lenient))
    if not lenient:
        texts = [f"coalesce({f.column}, '')" for f in scalars_of(definition, TEXT)]
        texts += [f"coalesce(array_to_string({f.column}_list, chr(1)), '')" for f in lists if f.type == TEXT_LIST]
        tight = "tight" if csv else "false"  # a tight CSV line (batch_csv.tight_pattern): its texts and times are plain
        plain_check = (" AND ".join(plain) + f" AND CASE WHEN {tight} THEN true "
                       f"ELSE NOT regexp_matches(concat_ws(chr(1), {', '.join(texts)}), '{EDGE_BLANK}') END")
        # a JSON whole number is epoch seconds (values.timestamp); over 1e11 (milliseconds) it is the reader's
        typed = [f"CASE WHEN {f.column}_type IN ('UBIGINT', 'BIGINT') THEN CASE WHEN TRY_CAST({f.column}_text AS BIGINT) "
                 f"BETWEEN 0 AND 100000000000 THEN to_timestamp(CAST({f.column}_text AS BIGINT)) END "
                 f"WHEN {tight} THEN TRY_CAST({f.column}_text AS TIMESTAMPTZ) WHEN {time_ok(ctx, f'{f.column}_text')} "
                 f"THEN TRY_CAST({f.column}_text AS TIMESTAMPTZ) {zoned(f'{f.column}_text', zone)}END AS {f.column}"
                 for f in scalars_of(definition, TIME)]
        typed += [f"TRY_CAST({f.column}_text AS BIGINT) AS {f.column}" for f in scalars_of(definition, COUNT)]
        typed += [f"TRY_CAST({f.column}_text AS DOUBLE){_divided(f)} AS {f.column}" for f in scalars_of(definition, NUMBER, PERCENT)]
        typed += [f"CASE WHEN regexp_full_match({f.column}_text, '{CSV_MONEY if csv else MONEY_TEXT}') "
                  f"THEN CAST({f.column}_text AS DECIMAL(38, 12)) END AS {f.column}" for f in scalars_of(definition, MONEY)]
        typed += [f"{f.column}_text AS {f.column}" for f in scalars_of(definition, TEXT)]
        typed += [f"list_filter({f.column}_list, lambda u: u <> '') AS {f.column}" for f in lists if f.type == TEXT_LIST]
        # TRY_CAST: a list with an item that is no whole number (true, "x") is the reader's (not plain), not an error
        typed += [f"list_transform(list_filter({f.column}_list, lambda u: u IS NOT NULL), lambda u: TRY_CAST(u AS BIGINT)) AS {f.column}"
                  for f in lists if f.type == COUNT_LIST]
        typed += [f"CASE WHEN {f.column}_entries IS NOT NULL THEN map_from_entries(list_sort(list_transform({f.column}_entries, "
                  f"lambda e: {{'key': e.key, 'value': {map_value('e.value')}}}))) END AS {f.column}"
                  for f in maps_of(definition)]
        typed_cte = f""", typed AS (
            SELECT *, {", ".join(typed)}
            FROM fields
        )"""
    else:
        plain_check, typed_cte = "true", ""
    given_by_load = _given_by_load(definition, ctx)  # an option or the file's name: the value before the checks
    if given_by_load:
        typed_cte += f""", loaded AS (
            SELECT * REPLACE ({", ".join(f"{sql} AS {column}" for column, sql in given_by_load.items())})
            FROM typed
        )"""
    # the row's values: a span's end and length, lists without empty items, counts of items
    out = {f.column: f.column for f in definition.fields}
    for span in definition.rules(Span):
        start, end, length = span.start, span.end, span.length
        out[end] = f"coalesce({end}, CASE WHEN {length} < 1e9 THEN {start} + to_microseconds(CAST({length} * 1e6 AS BIGINT)) END)"
        out[length] = f"CASE WHEN {end} IS NOT NULL THEN epoch({end} - {start}) ELSE {length} END"
    for hours in definition.rules(Hours):  # the span in hours: start and end, or either and the hours
        out[hours.start], out[hours.end], out[hours.hours] = hours_sql(hours)
        out[hours.seconds] = f"({out[hours.hours]}) * 3600"
    for f in lists:
        out[f.column] = f.column if f.keep_empty else f"CASE WHEN len({f.column}) > 0 THEN {f.column} END"
    for count in definition.rules(CountOf):  # several of one column: the first list with items
        out[count.column] = f"coalesce({out[count.column]}, CASE WHEN len({count.items}) > 0 THEN len({count.items}) END)"
    for one in definition.rules(OneOf):
        out[one.column] = f"CASE lower({one.column}) {' '.join(f'WHEN {quote(k)} THEN {quote(v)}' for k, v in one.spellings)} END"
    for default in definition.rules(Default):
        value = quote(default.value)
        if default.words:
            words = ", ".join(quote(w) for w in default.words)
            value = (f"CASE WHEN list_has_any(regexp_split_to_array(lower(coalesce({out[default.of]}, '')), '[^a-z0-9]+'), "
                     f"[{words}]) THEN {quote(default.then)} ELSE {value} END")
        out[default.column] = f"coalesce({out[default.column]}, {value})"
    for tags in definition.rules(Tags):  # named columns as a map sorted by name, the ones given
        entries = ", ".join(f"{{'k': {quote(name)}, 'v': {out[column]}}}" for name, column in tags.parts)
        out[tags.column] = (f"coalesce({out[tags.column]}, map_from_entries(list_sort(list_filter([{entries}], "
                            f"lambda t: t.v IS NOT NULL))))")
    for prefer in definition.rules(Prefer):
        out[prefer.column] = (f"CASE WHEN {out[prefer.of]} IS NOT NULL AND upper({out[prefer.when]}) = {quote(prefer.equals.upper())} "
                              f"THEN {out[prefer.of]} ELSE {out[prefer.column]} END")
    for hashed in definition.rules(HashedId):
        parts = [iso_utc(f"({out[p]})") if definition.field(p).type == TIME else f"coalesce(CAST(({out[p]}) AS VARCHAR), '')"
                 for p in hashed.parts]
        stand_ins = ", ".join(quote(s) for s in hashed.stand_ins)
        absent = f"{hashed.column} IS NULL" + (f" OR {hashed.column} IN ({stand_ins})" if stand_ins else "")
        out[hashed.column] = (f"CASE WHEN {absent} THEN {quote(hashed.prefix)} || left(sha256(concat_ws('|', {', '.join(parts)})), "
                              f"{hashed.length}) ELSE {out[hashed.column]} END")
    for cost in definition.rules(HourlyCost):  # given, or price x hours (the catalog's: batch_sql._stage_batch)
        expected = f"{cost.column}_expected"
        out[cost.source] = f"CASE WHEN {cost.given} IS NOT NULL THEN 'given' WHEN ({expected}) IS NOT NULL THEN 'derived' END"
        out[cost.column] = f"coalesce({cost.given}, {expected})"
    for rate in definition.rules(FromRate):
        if rate.rate not in out:  # a rate SQL does not read (an Extras measure): its records are the reader's
            continue
        value = from_rate_sql(definition, rate)
        if rate.source:
            out[rate.source] = f"CASE WHEN {rate.column} IS NOT NULL THEN 'given' WHEN ({value}) IS NOT NULL THEN 'derived' END"
        out[rate.column] = f"coalesce({out[rate.column]}, {value})"
    # the items as a list of STRUCTs (the lenient pass reads them so; the strict read and CSV as JSON)
    derived = [f"{items.field}_items" if lenient else f"{items_from_json(items, f'{items.field}_items')} AS {items.field}_items"
               for items in definition.items]
    for cost in definition.rules(CatalogCost):
        derived += [f"CASE WHEN {cost.column} IS NOT NULL THEN 'given' END AS {cost.source}",
                    f"CAST(NULL AS DECIMAL(38, 12)) AS {cost.price}"]
    return f"""
        CREATE OR REPLACE TEMP TABLE typed AS
        WITH {fields_sql}{typed_cte}{hours_cte(definition, "loaded" if given_by_load else "typed")}, checked AS (
            SELECT *, CASE {"WHEN misfit IS NOT NULL THEN misfit" if csv else ""}
                           WHEN NOT ({"tight OR " if csv else ""}coalesce(object AND {plain_check}, false)) THEN ''
                           {" ".join(f"WHEN NOT coalesce({holds}, false) THEN {reason or chr(39) * 2}" for holds, reason in checks)}
                      END AS verdict  -- NULL: loads; '': the reader's; else the reason it is refused
            FROM {"hourly" if definition.rules(Hours) else "loaded" if given_by_load else "typed"}
        )
        SELECT line, verdict IS NULL AS ok, nullif(verdict, '') AS reason, {", ".join([f"{sql} AS {column}" for column, sql in out.items()] + derived)}
        FROM checked"""


def _given_by_load(definition: Definition, ctx: ParseContext) -> dict[str, str]:
    """SQL of each column a FromOption or FromFileName sets, as the reader sets it."""
    given: dict[str, str] = {}
    for step in definition.steps:
        if isinstance(step, FromOption) and getattr(ctx, step.option, None):
            value = quote(str(getattr(ctx, step.option)))
            given[step.column] = f"coalesce({step.column}, {value})" if step.when_absent else value
        elif isinstance(step, FromFileName):
            given[step.column] = f"coalesce({given.get(step.column, step.column)}, {quote(step.of(ctx.source))})"
    return given
