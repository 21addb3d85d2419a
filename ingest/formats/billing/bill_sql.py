"""The bill field readers of ingest/formats/billing/billing.py as SQL over whole columns: strict amounts,
numbers, UTC times, charge categories, tags; each with the reject reason billing.py gives.

A bill definition (bill_definition.py) turns the columns a bill has into a `Plan`: one SQL
expression per `billing_lines` column and the ordered checks whose first failure is a line's
reason, in the order the per-record reader reads the fields. `Fields` resolves the normalised
names to the staged raw columns (VARCHAR, trimmed, blank and NULL-literal as NULL; Parquet
timestamps and maps keep their types) and remembers which ones were read.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import duckdb

from ingest.engine import values

# Strict ASCII decimal with an optional exponent: no '1_000', no NaN or inf, no other digits.
NUMBER = values.NUMBER_TEXT  # the one spelling of a number, as the Python readers take it
MONEY_LIMIT_SQL = format(values.MONEY_LIMIT, "f")  # amounts are under this, as fit_money says
US_DATE = (r"^([0-9]{1,2})/([0-9]{1,2})/([0-9]{4}|[0-9]{2})"
           r"(?:[ T]([0-9]{1,2}):([0-9]{2})(?::([0-9]{2}))?\s*([AaPp][Mm])?)?$")
ISO_TIME = (r"[0-9]{4}-[0-9]{2}-[0-9]{2}(?:[T ][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]+)?)?)?"
            r"(?:Z|z|[+-][0-9]{2}(?::?[0-9]{2})?)?")
# A JSON object of string (or null) values only: the common tag cell, read by json_transform.
_STRING = r'"(?:[^"\\]|\\.)*"'
FLAT_OBJECT = (r"\{\s*(?:" + _STRING + r"\s*:\s*(?:" + _STRING + r"|null)\s*(?:,\s*" + _STRING
               + r"\s*:\s*(?:" + _STRING + r"|null)\s*)*)?\}")
INSTANCE_TYPE = (r"\b([a-z][a-z0-9]*[0-9][a-z0-9]*\.(?:[0-9]*x?large|medium|small|micro|nano|metal(?:-[0-9]+xl)?))\b"
                 r"|\b((?:a2|a3|g2)-(?:high|mega|ultra|standard)[a-z]*-[0-9]+g?)\b")

MACROS = f"""
CREATE OR REPLACE TEMP MACRO bill_repr(s) AS
    CASE WHEN contains(s, '''') AND NOT contains(s, '"')
         THEN '"' || replace(replace(replace(replace(s, '\\', '\\\\'), chr(10), '\\n'), chr(13), '\\r'), chr(9), '\\t') || '"'
         ELSE '''' || replace(replace(replace(replace(replace(s, '\\', '\\\\'), chr(10), '\\n'), chr(13), '\\r'),
                                      chr(9), '\\t'), '''', '\\''') || '''' END;
CREATE OR REPLACE TEMP MACRO bill_is_number(s) AS regexp_full_match(s, '{NUMBER}');
CREATE OR REPLACE TEMP MACRO bill_money(s) AS
    CASE WHEN NOT contains(s, '_') AND abs(TRY_CAST(s AS DECIMAL(38, 12))) < {MONEY_LIMIT_SQL}
         THEN TRY_CAST(s AS DECIMAL(38, 12)) END;
CREATE OR REPLACE TEMP MACRO bill_money_why(s, name) AS
    CASE WHEN NOT bill_is_number(s) THEN name || ' must be an amount, got ' || bill_repr(s)
         ELSE name || ' ' || s || ' is too large (under 10^15)' END;
CREATE OR REPLACE TEMP MACRO bill_number(s) AS
    CASE WHEN NOT contains(s, '_') AND bill_is_number(s) THEN TRY_CAST(s AS DOUBLE) END;
CREATE OR REPLACE TEMP MACRO bill_number_why(s, name) AS
    CASE WHEN NOT bill_is_number(s) THEN name || ' must be a number, got ' || bill_repr(s)
         ELSE name || ' must be a finite number, got ' || bill_repr(s) END;
CREATE OR REPLACE TEMP MACRO bill_unzoned(s) AS
    CASE WHEN upper(s) LIKE '% UTC' THEN rtrim(s[:-5]) ELSE s END;
CREATE OR REPLACE TEMP MACRO bill_us_parts(s) AS
    regexp_extract(s, '{US_DATE}', ['mo', 'd', 'y', 'h', 'mi', 'sec', 'half']);
CREATE OR REPLACE TEMP MACRO bill_us_hour(p) AS
    CASE WHEN p.half = '' THEN coalesce(TRY_CAST(p.h AS INTEGER), 0)
         WHEN TRY_CAST(p.h AS INTEGER) BETWEEN 1 AND 12
         THEN TRY_CAST(p.h AS INTEGER) % 12 + CASE WHEN lower(p.half) = 'pm' THEN 12 ELSE 0 END END;
CREATE OR REPLACE TEMP MACRO bill_us_time(p) AS
    TRY_CAST(printf('%04d-%02d-%02d %02d:%02d:%02d',
                    CAST(p.y AS INTEGER) + CASE WHEN length(p.y) = 2 THEN 2000 ELSE 0 END,
                    CAST(p.mo AS INTEGER), CAST(p.d AS INTEGER), bill_us_hour(p),
                    coalesce(TRY_CAST(p.mi AS INTEGER), 0), coalesce(TRY_CAST(p.sec AS INTEGER), 0)) AS TIMESTAMPTZ);
CREATE OR REPLACE TEMP MACRO bill_iso(s) AS regexp_replace(s, '^([0-9]{{4}})/([0-9]{{2}})/([0-9]{{2}})', '\\1-\\2-\\3');
CREATE OR REPLACE TEMP MACRO bill_moment_slow(s) AS
    CASE WHEN regexp_full_match(bill_unzoned(s), '{ISO_TIME}') THEN TRY_CAST(bill_unzoned(s) AS TIMESTAMPTZ)
         WHEN regexp_full_match(bill_unzoned(s), '{US_DATE}') THEN bill_us_time(bill_us_parts(bill_unzoned(s)))
         WHEN regexp_full_match(bill_iso(bill_unzoned(s)), '{ISO_TIME}')
         THEN TRY_CAST(bill_iso(bill_unzoned(s)) AS TIMESTAMPTZ)
         WHEN bill_is_number(bill_unzoned(s)) AND TRY_CAST(bill_unzoned(s) AS DOUBLE) <= 1e11
         THEN to_timestamp(CAST(bill_unzoned(s) AS DOUBLE)) END;
-- a zone written out (Z) spares the ICU cast from a naive TIMESTAMP, which costs 3x the parse
-- the slow path in a THEN branch: DuckDB's common-subexpression pass would hoist its repeated
-- bill_unzoned(s) out of the coalesce, to run on every value (upper() and suffix(): 4 columns
-- of a 1M-line FOCUS bill, ~0.16 CPU s)
CREATE OR REPLACE TEMP MACRO bill_moment_of(s) AS
    coalesce(CASE WHEN s LIKE '____-__-__T__:__:__Z' THEN TRY_CAST(s AS TIMESTAMPTZ)
                  WHEN s LIKE '____-__-__ __:__:__' OR s LIKE '____-__-__T__:__:__'
                  THEN TRY_CAST(s || 'Z' AS TIMESTAMPTZ)
                  WHEN s LIKE '____-__-__' THEN CAST(TRY_CAST(s AS TIMESTAMP) AS TIMESTAMPTZ) END,
             CASE WHEN s IS NOT NULL THEN bill_moment_slow(s) END);
CREATE OR REPLACE TEMP MACRO bill_moment_why(s, t, name) AS
    CASE WHEN regexp_full_match(bill_unzoned(s), '{US_DATE}') AND bill_us_hour(bill_us_parts(bill_unzoned(s))) IS NULL
         THEN name || ' ' || bill_repr(s) || ' is not a time'
         WHEN regexp_full_match(bill_unzoned(s), '{US_DATE}') AND t IS NULL
         THEN name || ' ' || bill_repr(s) || ' is not a date (read as month/day/year)'
         WHEN t IS NULL AND bill_is_number(bill_unzoned(s))
         THEN name || ' ' || bill_repr(bill_unzoned(s)) || ' looks like milliseconds; epoch values must be seconds'
         WHEN t IS NULL
         THEN name || ' ' || bill_repr(bill_unzoned(s)) || ' is not an ISO-8601 timestamp or epoch seconds'
         ELSE name || ' ' || bill_repr(CASE WHEN regexp_full_match(bill_unzoned(s), '{US_DATE}') THEN s
                                             ELSE bill_unzoned(s) END) || ' is outside 1990-2099' END;
CREATE OR REPLACE TEMP MACRO bill_out_of_range(t) AS
    t < TIMESTAMPTZ '1990-01-01 00:00:00+00' OR t >= TIMESTAMPTZ '2100-01-01 00:00:00+00';
CREATE OR REPLACE TEMP MACRO bill_key(s) AS regexp_replace(lower(s), '[^a-z0-9]', '', 'g');
CREATE OR REPLACE TEMP MACRO bill_instance_type(s) AS
    nullif(lower(regexp_extract(s, '{INSTANCE_TYPE}', 0, 'i')), '');
CREATE OR REPLACE TEMP MACRO bill_json_text(s) AS CASE WHEN starts_with(s, '"') THEN '{{' || s || '}}' ELSE s END;
CREATE OR REPLACE TEMP MACRO bill_tag_entries(s) AS
    CASE WHEN NOT json_valid(bill_json_text(s)) THEN NULL
         WHEN json_type(bill_json_text(s)) = 'OBJECT'
         THEN map_entries(json_transform(bill_json_text(s), '"MAP(VARCHAR, JSON)"'))
         WHEN json_type(bill_json_text(s)) = 'ARRAY'
         THEN json_transform(bill_json_text(s), '[{{"key": "VARCHAR", "value": "JSON"}}]')
         WHEN json_type(bill_json_text(s)) = 'NULL' THEN [] END;
CREATE OR REPLACE TEMP MACRO bill_tags_plain(e) AS
    e IS NOT NULL
    AND coalesce(list_bool_and(list_transform(e, lambda x: x.key IS NOT NULL AND x.key <> ''
                                              AND (x.value IS NULL OR json_type(x.value) = 'VARCHAR'))), true)
    AND len(list_distinct(list_transform(e, lambda x: x.key))) = len(e);
CREATE OR REPLACE TEMP MACRO bill_flat_tags(s) AS regexp_full_match(s, '{FLAT_OBJECT}');
CREATE OR REPLACE TEMP MACRO bill_tag_map(e) AS
    CASE WHEN len(e) > 0 THEN map_from_entries(list_sort(list_transform(e, lambda x:
        {{'key': x.key, 'value': json_extract_string(x.value, '$')}}))) END;
CREATE OR REPLACE TEMP MACRO bill_sci_of(sign, digits) AS
    sign || digits[1] || CASE WHEN length(digits) > 1 THEN '.' || digits[2:] ELSE '' END
    || 'E' || CAST(length(digits) - 13 AS VARCHAR);
CREATE OR REPLACE TEMP MACRO bill_sci(x) AS
    bill_sci_of(CASE WHEN x < 0 THEN '-' ELSE '' END, ltrim(replace(CAST(abs(x) AS VARCHAR), '.', ''), '0'));
CREATE OR REPLACE TEMP MACRO bill_iso_text(t) AS
    strftime(t, '%Y-%m-%dT%H:%M:%S')
    || CASE WHEN epoch_us(t) % 1000000 <> 0 THEN printf('.%06d', epoch_us(t) % 1000000) ELSE '' END || '+00:00';
"""


def install(con: duckdb.DuckDBPyConnection) -> None:
    """Create the bill_* macros in this connection (temporary: they go with it)."""
    con.execute(MACROS)


def literal(text: str | None) -> str:
    """A SQL string literal (or NULL)."""
    return "NULL" if text is None else "'" + text.replace("'", "''") + "'"


def ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def mapping(raw_sql: str, table: dict[str, str]) -> str:
    """CASE expression mapping a raw value, by its normalised key (lower case, letters and digits
    only), to its value (NULL when unknown); plain lower-case spellings are looked up first."""
    arms = " ".join(f"WHEN {literal(k)} THEN {literal(v)}" for k, v in table.items())
    # the second lookup in a THEN branch: DuckDB's common-subexpression pass would hoist its
    # bill_key() (repeated by each WHEN) out of the coalesce, a regexp_replace of every value
    return (f"coalesce(CASE lower({raw_sql}) {arms} END, "
            f"CASE WHEN {raw_sql} IS NOT NULL THEN CASE bill_key({raw_sql}) {arms} END END)")


def one_of(sql: str, texts) -> str:
    """SQL boolean: the value is one of these texts. Not `IN (...)`: DuckDB turns a long IN list
    into a join, which does not keep the rows' order (and the CSV path numbers rows by it)."""
    arms = " ".join(f"WHEN {literal(t)} THEN true" for t in sorted(texts))
    return f"(CASE {sql} {arms} ELSE false END)"


@dataclass
class Check:
    """A line is rejected with `reason` (SQL text) where `bad` (SQL boolean) holds."""

    bad: str
    reason: str


@dataclass
class Plan:
    """How a family's rows come out of the staged raw columns (see module docstring)."""

    columns: dict[str, str]  # billing_lines column -> SQL over raw columns and `v_<column>` aliases
    checks: list[Check] = field(default_factory=list)
    python: str = "false"  # SQL boolean: this line goes through billing.py's build instead
    extra: str | None = None  # SELECT of more rows per good line from bill_lines (GCP credits)
    helpers: dict[str, str] = field(default_factory=dict)  # computed once before the columns


class Fields:
    """The raw columns of one staged file by normalised name, and SQL readers over them."""

    def __init__(self, columns: dict[str, str], labels: dict[str, str], types: dict[str, str]):
        self.columns = columns  # normalised name -> raw column identifier
        self.labels = labels  # normalised name -> the name as the file spells it
        self.types = types  # normalised name -> DuckDB type of the raw column
        self.used: set[str] = set()

    def has(self, name: str) -> bool:
        return name in self.columns

    def names(self) -> list[str]:
        return list(self.columns)

    def get(self, *names: str) -> str:
        """SQL of the first present value among these columns (NULL when none is)."""
        present = [n for n in names if n in self.columns]
        self.used.update(present)
        if not present:
            return "NULL"
        if len(present) == 1:
            return ident(self.columns[present[0]])
        return "coalesce(" + ", ".join(self._text_or_null(n) for n in present) + ")"

    def _text_or_null(self, name: str) -> str:
        column = ident(self.columns[name])
        return column if self.types[name] == "VARCHAR" else f"CAST({column} AS VARCHAR)"

    def typed(self, name: str) -> str | None:
        """The DuckDB type of a present column."""
        return self.types.get(name)

    def label(self, *names: str) -> str:
        """SQL of the column name a reason quotes: the first of these the line has a value in,
        else the first the file has, as the file spells it (billing.Record.name)."""
        if len(names) == 1:
            return literal(self.labels.get(names[0], names[0]))
        fallback = next((n for n in names if n in self.columns), names[0])
        arms = " ".join(f"WHEN {ident(self.columns[n])} IS NOT NULL THEN {literal(self.labels[n])}"
                        for n in names if n in self.columns)
        default = literal(self.labels.get(fallback, fallback))
        return f"(CASE {arms} ELSE {default} END)" if arms else default

    def text(self, *names: str) -> str:
        """Text of the first present column (numbers written out)."""
        present = [n for n in names if n in self.columns]
        self.used.update(present)
        if not present:
            return "NULL"
        return "coalesce(" + ", ".join(self._text_or_null(n) for n in present) + ")" if len(present) > 1 \
            else self._text_or_null(present[0])

    def is_time(self, *names: str) -> bool:
        return any(self.types.get(n, "VARCHAR").startswith(("TIMESTAMP", "DATE")) for n in names
                   if n in self.columns)


def amount(fields: Fields, alias: str, *names: str, required: bool = False) -> tuple[str, list[Check]]:
    """SQL of an exact DECIMAL(38, 12) amount and its checks (billing.amount / required_amount)."""
    raw = fields.text(*names)
    checks = [Check(f"{raw} IS NOT NULL AND {alias} IS NULL", f"bill_money_why({raw}, {fields.label(*names)})")]
    if required:
        checks.insert(0, Check(f"{raw} IS NULL", f"'no ' || {fields.label(*names)}"))
    return f"bill_money({raw})", checks


def quantity(fields: Fields, alias: str, *names: str) -> tuple[str, list[Check]]:
    """SQL of a finite DOUBLE and its check (billing.quantity)."""
    raw = fields.text(*names)
    bad = f"{raw} IS NOT NULL AND ({alias} IS NULL OR NOT isfinite({alias}))"
    return f"bill_number({raw})", [Check(bad, f"bill_number_why({raw}, {fields.label(*names)})")]


def moment(fields: Fields, alias: str, *names: str, required: bool = False) -> tuple[str, list[Check]]:
    """SQL of a UTC TIMESTAMPTZ and its checks (billing.moment / required_moment)."""
    checks = []
    if fields.is_time(*names):  # a typed Parquet time: naive is UTC (the session zone)
        present = [n for n in names if n in fields.columns]
        fields.used.update(present)
        value = f"CAST({ident(fields.columns[present[0]])} AS TIMESTAMPTZ)"
        if required:
            checks.append(Check(f"{alias} IS NULL", f"'no ' || {fields.label(*names)}"))
        return value, checks
    raw = fields.text(*names)
    if required:
        checks.append(Check(f"{raw} IS NULL", f"'no ' || {fields.label(*names)}"))
    bad = f"{raw} IS NOT NULL AND ({alias} IS NULL OR bill_out_of_range({alias}))"
    checks.append(Check(bad, f"bill_moment_why({raw}, {alias}, {fields.label(*names)})"))
    return f"bill_moment_of({raw})", checks


def category(fields: Fields, alias: str, raw_sql: str, table: dict[str, str], name: str) -> tuple[str, list[Check]]:
    """SQL of the normalised charge category and its checks (billing.category)."""
    known = ", ".join(sorted(set(table.values())))
    value = mapping(raw_sql, table)
    checks = [Check(f"{raw_sql} IS NULL", literal(f"no {name}")),
              Check(f"{alias} IS NULL", f"{literal(name)} || ' ' || bill_repr({raw_sql}) || "
                                        f"{literal(f' is not a charge category mlcost knows ({known})')}")]
    return value, checks


def pricing(raw_sql: str, table: dict[str, str]) -> str:
    """SQL of on-demand / spot / commitment for a raw pricing value (billing.pricing)."""
    return mapping(raw_sql, table)


def tags(fields: Fields, name: str) -> tuple[str, str, dict[str, str]]:
    """SQL of the tag map (NULL when there are none), of the condition under which a line's tags
    need billing.tags in Python (not JSON, odd shapes, empty or repeated names), and of the
    helper columns (computed once, before) both read."""
    if name not in fields.columns:
        return "NULL", "false", {}
    fields.used.add(name)
    column = ident(fields.columns[name])
    kind = fields.types[name]
    if kind.startswith("MAP("):
        entries = f"map_entries({column})"
        return (f"CASE WHEN len({entries}) > 0 THEN map_from_entries(list_sort(list_transform({entries}, "
                f"lambda x: {{'key': CAST(x.key AS VARCHAR), 'value': CAST(x.value AS VARCHAR)}}))) END",
                f"{column} IS NOT NULL AND list_bool_or(list_transform(map_keys({column}), "
                f"lambda k: k IS NULL OR CAST(k AS VARCHAR) = ''))", {})
    if kind != "VARCHAR":
        return "NULL", f"{column} IS NOT NULL", {}
    # the common cell, an object of strings, straight to a map (once, in a helper); other shapes
    # by their entries. The map is NULL where the cell is not such an object, or is one
    # json_transform refuses (a repeated name): those lines take the entries' way, whose checks
    # send a repeated name to billing.py as before (one regex per cell, not two)
    entries = f"bill_tag_entries({column})"
    transformed = f"v__map_{name}"
    helpers = {f"_map_{name}": f"CASE WHEN bill_flat_tags(bill_json_text({column})) "
                               f"THEN json_transform(bill_json_text({column}), '\"MAP(VARCHAR, VARCHAR)\"') END"}
    value = f"CASE WHEN {transformed} IS NOT NULL THEN nullif({transformed}, MAP {{}}) ELSE bill_tag_map({entries}) END"
    python = (f"{column} IS NOT NULL AND CASE WHEN {transformed} IS NOT NULL "
              f"THEN list_contains(map_keys({transformed}), '') ELSE NOT bill_tags_plain({entries}) END")
    return value, python, helpers


class Builder:
    """Collects a Plan in the order billing.py's build reads the fields (so the first failing
    check is the reason billing.py would give)."""

    def __init__(self, fields: Fields):
        self.fields = fields
        self.columns: dict[str, str] = {}
        self.checks: list[Check] = []
        self.python: list[str] = []
        self.helpers: dict[str, str] = {}  # computed in a step before the columns (read as v_<name>)

    def text(self, *names: str) -> str:
        """SQL of billing.text: a nested Parquet value (list, map) goes to billing.py."""
        for name in names:
            kind = self.fields.types.get(name, "VARCHAR")
            if kind != "VARCHAR" and not kind.startswith(("TIMESTAMP", "DATE")):
                self.python.append(f"{ident(self.fields.columns[name])} IS NOT NULL")
        return self.fields.text(*names)

    def column(self, name: str, sql: str) -> str:
        """A billing_lines column, or a helper (named `_...`) later columns and checks read."""
        self.columns[name] = sql
        return f"v_{name}"

    def check(self, bad: str, reason: str) -> None:
        self.checks.append(Check(bad, reason))

    def amount(self, name: str, *names: str, required: bool = False, when: str | None = None) -> str:
        """An amount column (or a helper `_name` not stored), checked only `when` it is read."""
        sql, checks = amount(self.fields, f"v_{name}", *names, required=required)
        self.checks.extend(Check(f"({when}) AND ({c.bad})", c.reason) if when else c for c in checks)
        return self.column(name, sql)

    def moment(self, name: str, *names: str, required: bool = False) -> str:
        sql, checks = moment(self.fields, f"v_{name}", *names, required=required)
        self.checks.extend(checks)
        return self.column(name, sql)

    def quantity(self, name: str, *names: str) -> str:
        sql, checks = quantity(self.fields, f"v_{name}", *names)
        self.checks.extend(checks)
        return self.column(name, sql)

    def category(self, name: str, raw_sql: str, table: dict[str, str], label: str) -> str:
        sql, checks = category(self.fields, f"v_{name}", raw_sql, table, label)
        self.checks.extend(checks)
        return self.column(name, sql)

    def tags(self, name: str, source: str) -> str:
        sql, python, helpers = tags(self.fields, source)
        self.helpers.update(helpers)
        self.python.append(python)
        return self.column(name, sql)

    def entries(self, source: str) -> str:
        """SQL of a JSON-object or map column as a list of {key, value} text entries ([] when
        absent); lines where it is not plain JSON go to billing.py."""
        if source not in self.fields.columns:
            return "[]"
        self.fields.used.add(source)
        column = ident(self.fields.columns[source])
        if self.fields.types[source].startswith("MAP("):
            self.python.append(f"{column} IS NOT NULL AND list_bool_or(list_transform(map_keys({column}), "
                               f"lambda k: k IS NULL OR CAST(k AS VARCHAR) = ''))")
            return (f"coalesce(list_transform(map_entries({column}), lambda x: {{'key': CAST(x.key AS VARCHAR), "
                    f"'value': CAST(x.value AS VARCHAR)}}), [])")
        if self.fields.types[source] != "VARCHAR":
            self.python.append(f"{column} IS NOT NULL")
            return "[]"
        self.python.append(f"{column} IS NOT NULL AND NOT bill_tags_plain(bill_tag_entries({column}))")
        return (f"coalesce(list_transform(bill_tag_entries({column}), lambda x: {{'key': x.key, "
                f"'value': json_extract_string(x.value, '$')}}), [])")

    def plan(self, extra: str | None = None) -> Plan:
        return Plan(self.columns, self.checks, " OR ".join(f"({p})" for p in self.python) or "false", extra,
                    self.helpers)
