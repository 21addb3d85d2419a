"""GCP billing exports as JSON lines (BigQuery's newline-delimited JSON), staged a batch of lines
at a time: the fields read in SQL into the same raw text columns the CSV export gives, then
converted and checked by billing_gcp's definition (EXPORT.plan), so every value means what it
means in CSV.

A line is settled in SQL when it is plain: a JSON object Python's `json` reads alike (no
trailing comma, NaN, NUL or lone-surrogate escape, control character), the keys on the way to
each name read lower-case `[a-z0-9_]` and none of those names given twice (so billing.flatten's
dotted names are the JSON paths), each field of the type the export writes (text as strings
without blanks at an edge, amounts as plain decimals, labels and credits as lists of objects of
strings), and no check of the plan fails. An amount written as a JSON number is read from
DuckDB's double only where that is exact to the warehouse's 12 places (MONEY_DOUBLE).

Every other line, and every line to refuse, goes through billing.py's json_records and
the definition's per-record reader (EXPORT.build), which read the quirk or name the exact reason with the line's number and
text: a file loads the same as line by line, in memory flat in its size.
"""
from __future__ import annotations

import logging

import duckdb
import pyarrow as pa

from ingest.engine import line_sql, staging
from ingest.engine.contract import ParseContext, Parsed, Reject
from ingest.engine.staging import Source
from ingest.formats.billing import bill_stage, billing
from ingest.formats.billing.bill_family import Family
from ingest.formats.billing.bill_sql import Fields, Plan, literal
from ingest.settings import limits

LOG = logging.getLogger(__name__)
# Lines Python's json.loads reads otherwise than DuckDB (or at all): to billing.py.
UNSAFE = (r"[\x00-\x1f]"  # a control character (a raw tab in a string is an error in Python)
          r"|\\u(00[01]|[dD][89a-fA-F])"  # an escaped control character, NUL or surrogate
          r"|,\s*[\]}]"  # a trailing comma (DuckDB allows it)
          r"|NaN|Infinity")  # Python reads these constants, they are no amount
# Keys billing.flatten and normalize leave as they are (no upper case, blank or dot).
KEYS = "[a-z0-9_]+"
EDGES = f"(^|\x01)[{line_sql.PY_SPACE}]|[{line_sql.PY_SPACE}](\x01|$)"  # str.strip() would change it
_STRING = r'"(?:[^"\\]|\\.)*"'
_PAIR = '\\{"key":' + _STRING + ',"value":(?:' + _STRING + '|null)\\}'
PAIRS = f"\\[(?:{_PAIR}(?:,{_PAIR})*)?\\]"  # labels as the export writes them, in DuckDB's compact text
# Amounts as text DuckDB's DECIMAL cast reads as Decimal.quantize does (a tie at the 13th place
# rounds otherwise: half away from zero, not half even).
MONEY = r"-?[0-9]{1,15}(\.[0-9]+)?"
MONEY_TIE = r"\.[0-9]{12}50*$"
# An amount written as a JSON number DuckDB holds as a double and prints shortest: exact to 12
# places when that print is on the 10^-12 grid and under 2048 (the double's spacing, 2^-42, is
# then under half a step, so the written number rounds to the same cent fraction); whole numbers
# are kept exact.
MONEY_DOUBLE = r"-?[0-9]{1,4}(\.[0-9]{1,12})?"
MONEY_WHOLE = r"-?[0-9]{1,15}"
SOURCE = "/*source*/"  # where _convert_sql's SELECT reads from
NUMBERS = ("DOUBLE", "BIGINT", "UBIGINT")
LISTS = ("labels", "system_labels", "credits")  # JSON lists (or their text) read by the plan
AMOUNTS = ("cost",)
QUANTITIES = ("usage.amount",)
# The names the GCP definition reads (its plan reads the ones it needs of these).
NAMES = ("billing_account_id", "cost", "cost_type", "credits", "currency", "invoice.month", "labels",
         "location.location", "location.region", "project.id", "project.name", "resource.global_name",
         "resource.name", "service.description", "sku.description", "sku.id", "system_labels",
         "usage.amount", "usage.unit", "usage_end_time", "usage_start_time")


def stage_lines(src: Source, con: duckdb.DuckDBPyConnection, ctx: ParseContext, family: Family,
                plan_of) -> int:
    """Stage a GCP JSON-lines bill: plain lines in SQL into `bill_converted` (read by
    bill_keys.finish through the view `bill_sql_rows`), other lines through billing.py into
    bill_candidates and rejects; returns the records accepted."""
    # every name the export may have, as a text column (a line without one reads NULL, as a
    # CSV cell left empty); a record's names are its keys, so each is its own label
    fields = Fields({n: f"c{i}" for i, n in enumerate(NAMES)}, {n: n for n in NAMES},
                    dict.fromkeys(NAMES, "VARCHAR"))
    plan: Plan = plan_of(fields)
    names = sorted(fields.used)
    types = dict(con.execute("SELECT column_name, data_type FROM duckdb_columns() "
                             "WHERE table_name = 'bill_candidates'").fetchall())
    values, texts = _extract_sql(names, fields)
    convert = _convert_sql(plan)
    accepted = 0
    # bill_converted made empty from an empty batch, so each batch inserts alike
    con.register("bill_json_batch", pa.table({"line": pa.array([], pa.int64()), "raw": pa.array([], pa.string())}))
    try:
        con.execute(f"CREATE OR REPLACE TEMP TABLE bill_json_values AS {values}")
        con.execute(f"CREATE OR REPLACE TEMP TABLE bill_json_fields AS {texts}")
        con.execute(f"CREATE TEMP TABLE bill_converted AS SELECT * EXCLUDE (_ok) FROM "
                    f"({convert.replace(SOURCE, 'bill_json_fields')}) WHERE false")
    finally:
        con.unregister("bill_json_batch")
    for batch in staging.line_batches(src):
        con.register("bill_json_batch", batch)  # until the lines SQL leaves are read from it
        try:
            accepted += _stage_batch(con, ctx, family, values, texts, convert)
        finally:
            con.unregister("bill_json_batch")
    for table in ("bill_json_values", "bill_json_fields"):
        con.execute(f"DROP TABLE IF EXISTS {table}")
    con.execute("CREATE TEMP VIEW bill_lines AS SELECT * FROM bill_converted")
    outputs = ", ".join(f"CAST(v_{c} AS {types[c]}) AS {c}" for c in plan.columns if not c.startswith("_"))
    con.execute(f"""CREATE TEMP VIEW bill_sql_rows AS
        SELECT {outputs}, {literal(ctx.source)} AS source_file, {literal(family.kind)} AS source_kind,
            _line AS source_line, CAST(0 AS BIGINT) AS _sub, CAST(NULL AS VARCHAR) AS _key
        FROM bill_lines""")
    if plan.extra:  # a credit line per entry of `credits`
        con.execute(f"""INSERT INTO bill_candidates BY NAME SELECT *, {literal(ctx.source)} AS source_file,
            {literal(family.kind)} AS source_kind, NULL AS _key FROM ({plan.extra})""")
    return accepted


def _stage_batch(con: duckdb.DuckDBPyConnection, ctx: ParseContext, family: Family, values: str,
                 texts: str, convert: str) -> int:
    """The registered batch of lines: plain ones in SQL into bill_converted, the others through
    billing.py; returns the records accepted."""
    first, last = con.execute("SELECT min(line), max(line) FROM bill_json_batch").fetchone()
    con.execute(f"CREATE OR REPLACE TEMP TABLE bill_json_values AS {values}")
    con.execute(f"CREATE OR REPLACE TEMP TABLE bill_json_fields AS {texts}")
    try:
        con.execute(f"INSERT INTO bill_converted SELECT * EXCLUDE (_ok) FROM "
                    f"({convert.replace(SOURCE, '(SELECT * FROM bill_json_fields WHERE _plain)')}) WHERE _ok")
    except duckdb.Error as error:  # a shape the checks let through and SQL cannot read: all to billing.py
        LOG.warning("%s: lines %s-%s read by billing.py (%s)", ctx.source, first, last, str(error).splitlines()[0])
    settled = f"SELECT _line FROM bill_converted WHERE _line BETWEEN {int(first or 0)} AND {int(last or 0)}"
    accepted = con.execute(f"SELECT count(*) FROM ({settled})").fetchone()[0]
    # blank lines too: billing.py skips them
    others = con.execute(f"SELECT line, raw FROM bill_json_batch WHERE line NOT IN ({settled}) ORDER BY line"
                         ).fetchall()
    return accepted + _by_python(con, ctx, family, others)


def _extract_sql(names: list[str], fields: Fields) -> tuple[str, str]:
    """Two SELECTs: of each non-blank line of the batch its JSON values (into bill_json_values),
    then from those: _line, _end, `_plain` and the fields as the CSV
    export's text columns (c0, c1, ...)."""
    prefixes = sorted({n.split(".")[0] for n in names if "." in n})
    paths = _list([f"$.{n}" for n in names])
    columns, typed, strings, valued = [], [], [], []
    for index, name in enumerate(names, start=1):
        s, t, column = f"_s[{index}]", f"coalesce(_t[{index}], 'NULL')", fields.columns[name]
        if name in LISTS:
            allowed = "('VARCHAR', 'ARRAY', 'NULL')"
            text = f"CASE WHEN {t} IN ('ARRAY', 'VARCHAR') THEN nullif({s}, '') END"
        elif name in AMOUNTS or name in QUANTITIES:
            allowed = f"('VARCHAR', 'NULL', {', '.join(literal(k) for k in NUMBERS)})"
            text = f"CASE WHEN {t} <> 'NULL' THEN nullif({s}, '') END"
        else:
            allowed = "('VARCHAR', 'NULL')"
            text = f"CASE WHEN {t} = 'VARCHAR' THEN nullif({s}, '') END"
        columns.append(f"{text} AS {column}")
        typed.append(f"{t} IN {allowed}")
        strings.append(f"CASE WHEN {t} = 'VARCHAR' THEN {s} END")
        if name in AMOUNTS:
            valued.append(f"({column} IS NULL OR ({_money_plain(column, t)}))")
        if name in QUANTITIES:  # values.number's bound, which bill_number leaves to the check
            valued.append(f"coalesce(abs(bill_number({column})) <= 1e15, true)")
        if name == "credits":
            valued.append(f"({column} IS NULL OR {column} = '[]' OR {_credits_plain(column)})")
        elif name in LISTS:  # a list as the export writes it (DuckDB's compact text of it), or checked
            keys = f"json_extract_string({column}, '$[*].key')"
            valued.append(f"({column} IS NULL OR CASE WHEN {t} = 'ARRAY' THEN regexp_full_match({column}, "
                          f"{literal(PAIRS)}) AND len(list_distinct({keys})) = len({keys}) "
                          f"ELSE {_pairs_plain(column)} END)")
    # no text with a blank at an edge (str.strip() would change it), tested once over all of them
    typed.append(f"NOT regexp_matches(concat_ws(chr(1), {', '.join(strings)}), {literal(EDGES)})")
    # the keys of the line and of the objects on the way to a name (DuckDB's text of the lists):
    # spelled as normalize leaves them, and no name read given twice in one object (Python keeps
    # the last, DuckDB the first); keys elsewhere name nothing read
    keys = f"json_keys(raw, {_list(['$'] + [f'$.{p}' for p in prefixes])})"
    listed = f"\\[({KEYS}(, {KEYS})*)?\\]"
    spelled = f"\\[(NULL|{listed})(, (NULL|{listed}))*\\]"
    twice = "|".join(f"[\\[ ]{word}(, {KEYS})*, {word}[,\\]]"
                     for word in sorted({part for name in names for part in name.split(".")}))
    typed.append(f"regexp_full_match(CAST(_k AS VARCHAR), '{spelled}') "
                 f"AND NOT regexp_matches(CAST(_k AS VARCHAR), '{twice}')")
    # one parse says whether the line is JSON (NULL when not), an object, and each field's type
    types = f"try(json_type(raw, {_list(['$'] + [f'$.{n}' for n in names])}))"
    # in two statements, each into a table: DuckDB inlines a subquery's columns into every
    # expression that reads them (the values would be extracted again for each field)
    values = f"""SELECT line AS _line, _ok_line, _types[2:] AS _t,
            CASE WHEN _ok_line THEN json_extract_string(raw, {paths}) END AS _s,
            CASE WHEN _ok_line THEN {keys} END AS _k FROM (
            SELECT *, coalesce(_types[1] = 'OBJECT' AND NOT regexp_matches(raw, {literal(UNSAFE)}), false) AS _ok_line
            FROM (SELECT line, raw, {types} AS _types FROM bill_json_batch))"""
    texts = f"""SELECT * EXCLUDE (_typed, _t, _k), coalesce(_typed AND {' AND '.join(valued)}, false) AS _plain FROM (
        SELECT _line, _line AS _end, _t, _k, coalesce(_ok_line AND {' AND '.join(typed)}, false) AS _typed,
            {', '.join(columns)} FROM bill_json_values)"""
    return values, texts


def _list(items: list[str]) -> str:
    return "[" + ", ".join(literal(i) for i in items) + "]"


def _money_plain(text: str, kind: str) -> str:
    """SQL: the amount `text` of JSON type `kind` reads in SQL exactly as values.money reads it."""
    return (f"CASE {kind} WHEN 'VARCHAR' THEN regexp_full_match({text}, '{MONEY}') AND NOT regexp_matches("
            f"{text}, '{MONEY_TIE}') WHEN 'DOUBLE' THEN regexp_full_match({text}, '{MONEY_DOUBLE}') "
            f"AND abs(TRY_CAST({text} AS DOUBLE)) < 2048 ELSE regexp_full_match({text}, '{MONEY_WHOLE}') END")


def _pairs_plain(text: str) -> str:
    """SQL: a JSON list of {"key": text, "value": text or null} objects, no key repeated in one
    (or not a JSON list at all: the plan decides); bill_values.tags reads it alike."""
    entry = ("json_type(e) = 'OBJECT' AND len(list_distinct(json_keys(e))) = len(json_keys(e)) "
             "AND json_type(e, '$.key') = 'VARCHAR' AND coalesce(json_type(e, '$.value') IN ('VARCHAR', 'NULL'), true)")
    keys = f"json_extract_string({text}, '$[*].key')"
    distinct = (f"CASE WHEN json_valid({text}) THEN CASE WHEN json_type({text}) = 'ARRAY' "
                f"THEN len(list_distinct({keys})) = len({keys}) ELSE true END ELSE true END")
    return f"{_each_entry(text, entry)} AND {distinct}"


def _credits_plain(text: str) -> str:
    """SQL: a JSON list of credit objects with a plain amount and text names (or not a JSON list:
    the plan sends it to billing.py)."""
    amount, kind = "json_extract_string(e, '$.amount')", "json_type(e, '$.amount')"
    names = " AND ".join(f"coalesce(json_type(e, '$.{n}') IN ('VARCHAR', 'NULL'), true)"
                         for n in ("name", "full_name", "type"))
    entry = (f"json_type(e) = 'OBJECT' AND len(list_distinct(json_keys(e))) = len(json_keys(e)) "
             f"AND json_type(e, '$.amount') IN ('VARCHAR', {', '.join(literal(k) for k in NUMBERS)}) "
             f"AND {_money_plain(amount, kind)} AND {names}")
    return _each_entry(text, entry)


def _each_entry(text: str, entry: str) -> str:
    """SQL: `entry` holds for each element `e` when the text is a JSON list (nested CASE: DuckDB
    may evaluate json_type of text that is not JSON, which fails)."""
    return (f"CASE WHEN json_valid({text}) THEN CASE WHEN json_type({text}) = 'ARRAY' THEN coalesce(list_bool_and("
            f"list_transform(json_extract({text}, '$[*]'), lambda e: {entry})), true) ELSE true END ELSE true END")


def _convert_sql(plan: Plan) -> str:
    """SELECT (from SOURCE, replaced by the caller) of the plan's values with `_ok`: the line is plain,
    SQL can read all of it and no check fails."""
    values = ", ".join(f"{sql} AS v_{column}" for column, sql in plan.columns.items())
    helpers = "".join(f", {sql} AS v_{name}" for name, sql in plan.helpers.items())
    fails = " ".join(f"WHEN {check.bad} THEN true" for check in plan.checks)
    kept = ", ".join(f"v_{column}" for column in plan.columns if plan.extra or not column.startswith("_"))
    ok = f"_plain AND NOT _python AND NOT (CASE {fails} ELSE false END)" if fails else "_plain AND NOT _python"
    return f"""SELECT _line, _end, {kept}, false AS _python, CAST(NULL AS VARCHAR) AS _reason, _ok FROM (
        SELECT *, {ok} AS _ok FROM (
            SELECT *, {values}, coalesce({plan.python}, false) AS _python FROM (
                SELECT *{helpers} FROM {SOURCE})))"""


def _by_python(con: duckdb.DuckDBPyConnection, ctx: ParseContext, family: Family,
               lines: list[tuple[int, str]]) -> int:
    """Lines SQL left: read, built or rejected by billing.py as line by line; records accepted."""
    if not lines:
        return 0
    parsed = Parsed()
    readable = []
    for number, text in lines:
        too_long = limits.too_long_reason(text)
        if too_long:
            parsed.rejects.append(Reject(number, too_long))
        else:
            readable.append((number, text))
    return bill_stage.stage_records(con, ctx, family, billing.json_records(readable, family, parsed), parsed)
