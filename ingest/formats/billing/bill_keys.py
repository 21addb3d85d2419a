"""The staged bill lines: keyed (`<provider>|id|<id>`, or billing.py's digest for a line
without an id), the last of a repeated key kept, into the staging `billing_lines` - a view of
the converted rows where every line has its id and none repeats, so the merge reads them where
they were converted; their totals in SQL.

Line keys: a line with an id is `<provider>|id|<id>` as before. A line without one (GCP, Azure)
is `<provider>|sha256:<digest>#<n>`, the digest of billing.py's JSON of the row (every stored
column but the key, file, line, format and kind) computed in SQL, `n` counting the identical
rows before it in the file: the same keys as billing.py gives for ASCII rows. A row with other
characters is hashed by billing.py itself (DuckDB cannot write JSON's \\u escapes).
"""
from __future__ import annotations

from decimal import Decimal

import duckdb

from ingest.engine import staging
from ingest.engine.contract import ParseContext
from ingest.formats.billing import billing
from ingest.formats.billing.bill_family import LINE_COLUMNS, NOT_CONTENT, UTC, Family

# Text json.dumps escapes differently from DuckDB (ensure_ascii, control characters).
OTHER_THAN_PRINTABLE_ASCII = "[^ -~\\n\\r\\t]"
CONTENT = [c for c in LINE_COLUMNS if c not in NOT_CONTENT]  # what a hashed line key is made of


def finish(con: duckdb.DuckDBPyConnection, ctx: ParseContext, family: Family) -> None:
    """Key the candidates (the SQL rows where they were converted and the few rows of
    bill_candidates) and keep the last of each key in the staging billing_lines."""
    rows = ("(SELECT * FROM bill_candidates UNION ALL BY NAME SELECT * FROM bill_sql_rows)"
            if _exists(con, "bill_sql_rows") else "bill_candidates")
    columns = ", ".join(LINE_COLUMNS)
    keyed = columns.replace("line_key", "provider || '|id|' || line_key AS line_key")
    repeated, unkeyed_rows = con.execute(
        # distinct hashes are never more than distinct keys: a collision can only send the file
        # through the QUALIFY below (still right), never skip a repeated key; hashing costs a third less
        f"SELECT count(line_key) - count(DISTINCT hash(provider, line_key)) FILTER (line_key IS NOT NULL), "
        f"count(*) FILTER (line_key IS NULL) FROM {rows}").fetchone()
    last = ("QUALIFY row_number() OVER (PARTITION BY provider, line_key ORDER BY source_line DESC, _sub DESC) = 1"
            if repeated else "")  # a line id given twice: the later line wins
    if not repeated and not unkeyed_rows and rows != "bill_candidates":  # nothing to drop or digest
        _serve_in_place(con, columns, keyed)
        return
    con.execute(f"""INSERT INTO billing_lines ({columns})
        SELECT {keyed} FROM {rows} WHERE line_key IS NOT NULL {last}""")
    if not unkeyed_rows:  # every line has its id (FOCUS, CUR): no digests
        return
    known = _python_keys(con, rows)
    hashed = columns.replace("line_key", "provider || '|sha256:' || digest || '#' || (row_number() OVER "
                                         "(PARTITION BY provider, digest ORDER BY source_line, _sub) - 1) AS line_key")
    unkeyed = (f"(SELECT c.* EXCLUDE (_key), k._key FROM {rows} c LEFT JOIN bill_keys k USING (source_line, _sub) "
               "WHERE c.line_key IS NULL)" if known else f"(SELECT * FROM {rows} WHERE line_key IS NULL)")
    con.execute(f"""INSERT INTO billing_lines ({columns})
        SELECT {hashed} FROM (SELECT *, coalesce(_key, {_digest_sql()}) AS digest FROM {unkeyed})""")


def _serve_in_place(con: duckdb.DuckDBPyConnection, columns: str, keyed: str) -> None:
    """Every line keyed by its id, none repeated: the staged `billing_lines` becomes a view of the
    SQL rows where they were converted and of the few rows of bill_candidates, keyed (with any
    the table held, in the temp table bill_kept_lines: a temp table is not one the merge copies),
    so the merge reads them from there: no copy of the file's rows within the staging database
    (a 1M-line bill's ~1.1 s and its memory)."""
    con.execute(f"INSERT INTO billing_lines ({columns}) SELECT {keyed} FROM bill_candidates")
    types = dict(con.execute(
        "SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = 'memory' AND schema_name = 'main' "
        "AND table_name = 'billing_lines' ORDER BY column_index").fetchall())
    con.execute("CREATE TEMP TABLE bill_kept_lines AS SELECT * FROM billing_lines")
    con.execute("DROP TABLE billing_lines")
    converted = {row[0] for row in con.execute("DESCRIBE bill_sql_rows").fetchall()}
    select = ", ".join(
        ("provider || '|id|' || line_key AS line_key" if name == "line_key" else name)
        if name in converted and name in LINE_COLUMNS
        else f"CAST(NULL AS {kind}) AS {name}" for name, kind in types.items())
    con.execute(f"CREATE VIEW billing_lines AS SELECT {select} FROM bill_sql_rows "
                "UNION ALL SELECT * FROM bill_kept_lines")
    staging.keep_last(con, "billing_lines", repeated=False)  # counted above: no key repeats


def restore_table(con: duckdb.DuckDBPyConnection) -> None:
    """Before another file is staged on this connection: the view `billing_lines` of the last
    one (_serve_in_place) back into a table with its rows, as staged tables accumulate."""
    if not con.execute("SELECT count(*) FROM duckdb_views() WHERE database_name = 'memory' "
                       "AND view_name = 'billing_lines'").fetchone()[0]:
        return
    con.execute("CREATE TEMP TABLE bill_restored AS SELECT * FROM billing_lines")
    con.execute("DROP VIEW billing_lines")
    con.execute("CREATE TABLE billing_lines AS SELECT * FROM bill_restored")
    con.execute("DROP TABLE bill_restored")
    con.execute("DROP TABLE bill_kept_lines")
    con.execute("DELETE FROM kept_last WHERE table_name = 'billing_lines'")  # its rows may repeat now


def _exists(con: duckdb.DuckDBPyConnection, view: str) -> bool:
    return bool(con.execute("SELECT count(*) FROM duckdb_views() WHERE temporary AND view_name = ?",
                            [view]).fetchone()[0])


def _json_string(sql: str) -> str:
    return f"coalesce(CAST(to_json({sql}) AS VARCHAR), 'null')"


def _digest_sql() -> str:
    """SQL of billing.content_digest over a row's CONTENT: sha256 of json.dumps(row, sort_keys=True) (first 32 hex)."""
    parts = []
    for column in sorted(CONTENT):
        if column in ("billed_cost", "effective_cost", "list_cost"):
            value = (f"CASE WHEN {column} IS NULL THEN 'null' WHEN {column} = 0 THEN '\"0E-12\"' "
                     f"WHEN abs({column}) < 0.000001 THEN '\"' || bill_sci({column}) || '\"' "
                     f"ELSE '\"' || CAST({column} AS VARCHAR) || '\"' END")
        elif column.endswith(("_start", "_end")):
            value = f"CASE WHEN {column} IS NULL THEN 'null' ELSE '\"' || bill_iso_text({column}) || '\"' END"
        elif column == "consumed_quantity":
            value = f"coalesce(CAST({column} AS VARCHAR), 'null')"
        elif column == "tags":
            value = ("CASE WHEN tags IS NULL THEN 'null' ELSE '[' || array_to_string(list_transform("
                     "list_sort(map_entries(tags)), lambda e: '[' || " + _json_string("e.key") + " || ', ' || "
                     + _json_string("e.value") + " || ']'), ', ') || ']' END")
        else:
            value = _json_string(column)
        parts.append(f"'\"{column}\": ' || {value}")
    return "left(sha256('{' || " + " || ', ' || ".join(parts) + " || '}'), 32)"


def _python_keys(con: duckdb.DuckDBPyConnection, rows: str) -> bool:
    """Digests of the candidates with non-ASCII text SQL cannot write as Python does, from
    billing.py's own JSON (few lines: DuckDB writes UTF-8 where json.dumps escapes), into the
    table bill_keys (source_line, _sub, _key); whether there are any."""
    condition = " OR ".join(
        [f"regexp_matches({c}, '{OTHER_THAN_PRINTABLE_ASCII}')" for c in CONTENT
         if c not in ("billed_cost", "effective_cost", "list_cost", "consumed_quantity", "tags")
         and not c.endswith(("_start", "_end"))]
        + [f"regexp_matches(CAST(tags AS VARCHAR), '{OTHER_THAN_PRINTABLE_ASCII}')"])
    cursor = con.execute(f"SELECT source_line, _sub, {', '.join(CONTENT)} FROM {rows} "
                         f"WHERE line_key IS NULL AND ({condition})")
    updates = []
    while batch := cursor.fetchmany(1000):
        for line, sub, *values in batch:
            row = dict(zip(CONTENT, values))
            if row["tags"] is not None:
                row["tags"] = sorted(row["tags"].items())
            for key in ("charge_period_start", "charge_period_end", "billing_period_start", "billing_period_end"):
                if row[key] is not None:
                    row[key] = row[key].astimezone(UTC)
            updates.append((line, sub, billing.content_digest(row)))
    if updates:
        con.execute("CREATE TEMP TABLE bill_keys (source_line BIGINT, _sub BIGINT, _key VARCHAR)")
        con.executemany("INSERT INTO bill_keys VALUES (?, ?, ?)", updates)
    return bool(updates)


def totals(con: duckdb.DuckDBPyConnection) -> dict:
    """billing.totals of the staged lines, computed in SQL."""
    sums = con.execute("SELECT billing_currency, sum(billed_cost), sum(effective_cost) FROM billing_lines "
                       "GROUP BY 1 ORDER BY 1").fetchall()
    lines, first, last = con.execute(
        "SELECT count(*), bill_iso_text(min(charge_period_start)), "
        "bill_iso_text(max(coalesce(charge_period_end, charge_period_start))) FROM billing_lines").fetchone()
    return {
        "lines": lines,
        "billed_cost_total": {c: billing.plain(Decimal(b)) for c, b, _ in sums},
        "effective_cost_total": {c: billing.plain(Decimal(e)) for c, _, e in sums if e is not None},
        "charge_period_min": first,
        "charge_period_max": last,
    }


def drop(con: duckdb.DuckDBPyConnection, keep_candidates: bool = False) -> None:
    """Drop the working tables of a staging (those the view `billing_lines` reads stay)."""
    views = {name for (name,) in con.execute("SELECT view_name FROM duckdb_views() WHERE temporary").fetchall()}
    if con.execute("SELECT count(*) FROM duckdb_views() WHERE database_name = 'memory' "
                   "AND view_name = 'billing_lines'").fetchone()[0]:
        con.execute("DROP TABLE IF EXISTS bill_candidates")
        return
    for table in ("bill_sql_rows", "bill_keys", "bill_lines", "bill_converted", "bill_errors", "bill_scans") + (
            () if keep_candidates else ("bill_candidates",)):
        con.execute(f"DROP {'VIEW' if table in views else 'TABLE'} IF EXISTS {table}")
    try:
        con.unregister("bill_numbers")
    except duckdb.Error:
        pass
