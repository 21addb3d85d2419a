"""Serving windows in JSON lines or CSV, typed and checked in SQL a batch of lines at a time.

A record loads straight from SQL when it is plain: a JSON object whose times are ISO-8601 text
with an offset (or naive, read in UTC), counts JSON integers, other figures JSON numbers, text
fields strings without surrounding blanks, no key repeated, `cost_usd` given with at most 6
decimals or derived from the catalog (each distinct instance and GPU type looked up once, the
cost in exact integer SQL), and every rule of serving.build_window holds. A CSV line is plain
when it has no quote or control character and as many fields as the header (split at commas in
SQL): its counts ASCII digits, other figures ASCII decimals, `cost_usd` up to 12 decimals, the
same times and rules. A CSV line without quotes and with the wrong number of fields is refused
in SQL. Every other line (not JSON, quoted CSV, a number given as text in JSON, a bad value)
goes through serving.build_window, which names the exact reason or reads the quirk; so a file
loads the same as line by line, in bounded memory.
"""
from __future__ import annotations

import logging
from datetime import timezone
from decimal import Decimal

import pyarrow as pa

from ingest.engine import line_sql, staging, values
from ingest.engine.contract import ParseContext
from ingest.engine.staging import Source, Staged

ISO_WITH_OFFSET = (r"\d{4}-\d{2}-\d{2}[T ]([01]\d|2[0-3]):[0-5]\d(:[0-5]\d(\.\d{1,6})?)?"
                   r"(Z|[+-]([01]\d|2[0-3]):[0-5]\d)")
ISO_NAIVE = r"\d{4}-\d{2}-\d{2}([T ]([01]\d|2[0-3]):[0-5]\d(:[0-5]\d(\.\d{1,6})?)?)?"
# Python's str.strip() removes these; a text value starting or ending with one goes to Python.
EDGE_BLANK = r"(^|\x01)[\s\x1c-\x1f\x85\xa0\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}]" \
             r"|[\s\x1c-\x1f\x85\xa0\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}](\x01|$)"
MONEY_TEXT = r"\d{1,9}(\.\d{1,6})?"  # read back exactly from JSON's double (DuckDB re-prints numbers)
LONG_NUMBER = r"[0-9.]{17,}"        # a number written with more digits than a double keeps
# CSV values are text, read exactly: these spellings read alike in DuckDB and Python (int, float, Decimal).
CSV_COUNT = r"[0-9]{1,18}"
CSV_NUMBER = r"[0-9]{1,15}(\.[0-9]{1,17})?"
CSV_MONEY = r"[0-9]{1,14}(\.[0-9]{1,12})?"
# A CSV line Python's csv module might read otherwise than a split at commas: quotes, control characters.
CSV_QUIRK = r'["\x00-\x08\x0a-\x1f\x7f]'

# (column, JSON spellings, kind): text, count (a JSON integer >= 0), number (>= 0), percent, time, money
FIELDS = (
    ("window_start", ("window_start", "start_time"), "time"),
    ("window_end", ("window_end", "end_time"), "time"),
    ("window_s", ("window_s", "window_seconds"), "number"),
    ("service", ("service",), "text"),
    ("model_version", ("model_version",), "text"),
    ("requests_total", ("requests_total",), "count"),
    ("requests_success", ("requests_success",), "count"),
    ("requests_error", ("requests_error",), "count"),
    ("latency_ms_p50", ("latency_ms_p50",), "number"),
    ("latency_ms_p95", ("latency_ms_p95",), "number"),
    ("latency_ms_p99", ("latency_ms_p99",), "number"),
    ("throughput_rps", ("throughput_rps",), "number"),
    ("avg_gpu_util_pct", ("avg_gpu_util_pct", "avg_gpu_util"), "percent"),
    ("avg_cpu_util_pct", ("avg_cpu_util_pct", "avg_cpu_util"), "percent"),
    ("cost_usd", ("cost_usd", "estimated_cost_usd"), "money"),
    ("energy_kwh", ("energy_kwh",), "number"),
    ("instance_type", ("instance_type",), "text"),
    ("gpu_type", ("gpu_type",), "text"),
    ("gpu_count", ("gpu_count",), "count"),
    ("replicas", ("replicas",), "count"),
    ("host", ("host",), "text"),
    ("prompt_tokens", ("prompt_tokens",), "count"),
    ("output_tokens", ("output_tokens",), "count"),
)
INTEGER_MAX = 2**31 - 1
COUNT_MAX = {"gpu_count": INTEGER_MAX, "replicas": INTEGER_MAX}  # other counts: BIGINT
VECTOR_ROWS = 2048  # DuckDB's vector size
log = logging.getLogger(__name__)


def stage(src: Source, con, ctx: ParseContext) -> Staged:
    """Stage a serving file's windows and rejects in `con`, JSON lines or CSV, a batch at a time."""
    from ingest import serving

    prices = serving.config.load().prices
    accepted, header, header_line, insert = 0, None, 0, None
    for batch in staging.line_batches(src):
        # in DuckDB-sized chunks: one Arrow chunk would be scanned by one thread
        con.register("batch", pa.Table.from_batches(batch.to_batches(max_chunksize=VECTOR_ROWS)))
        try:
            if insert is None:
                # JSON lines: the batch's every line is staged below, a too-long one refused there
                header_line, text = line_sql.first_filled(con, src, refuse_before=False)
                if header_line is None:
                    continue
                if serving.is_csv_header(text):
                    line_sql.refuse_too_long(con, src, before=header_line)  # not read as CSV below
                    header = serving.csv_header(text)
                    reason = serving.header_problem(header)
                    if reason:  # the file is refused at its header, as line by line
                        staging.add_rejects(con, src.name, [(header_line, reason, text)])
                        return Staged(0, totals(con))
                    insert = (_typed_sql(ctx, _csv_fields(header), csv=True),)
                else:
                    insert = (_typed_sql(ctx, _lenient_fields(ctx), lenient=True), _typed_sql(ctx, _json_fields("rest")))
            accepted += _stage_batch(con, src, ctx, prices, insert, header, header_line)
        finally:
            con.unregister("batch")
    return Staged(accepted, totals(con))


def totals(con) -> dict:
    """The serving figures for --json over the staged windows (a repeated window counted once)."""
    staging.keep_last(con, "serving_windows")
    windows, requests, cost, derived, costed, energy, energized = con.execute(
        "SELECT count(*), coalesce(sum(requests_total), 0), sum(cost_usd), count(*) FILTER (WHERE cost_source = 'derived'), "
        "count(cost_usd), sum(energy_kwh), count(energy_kwh) FROM serving_windows").fetchall()[0]
    return {
        "windows": windows,
        "requests_total": int(requests),
        "cost_usd_total": str(Decimal(cost).quantize(Decimal("0.01"))) if costed else None,
        "windows_cost_derived": derived,
        "windows_without_cost": windows - costed,
        "energy_kwh_total": round(energy, 9) if energized else None,
        "windows_with_energy": energized,
    }


def _stage_batch(con, src: Source, ctx: ParseContext, prices, passes: tuple[str, ...],
                 header: list[str] | None, header_line: int) -> int:
    """Stage one batch of lines (JSON, or CSV under `header`); returns the windows it accepted.
    Each of `passes` types the lines the one before did not load (JSON: lenient, then strict);
    the lines none loads go to Python."""
    from ingest import serving

    params = {}
    if header is not None:  # unquoted lines with the wrong number of fields: refused here
        width = len(header)
        params = {"header_line": header_line, "quirk": CSV_QUIRK, "blank": line_sql.BLANK_LINE}
        con.execute(f"""
            INSERT INTO rejects (path, line, reason, raw)
            SELECT $path, line, 'has ' || fields || ' fields, the header has {width}', left(raw, 500)
            FROM (SELECT line, raw, len(string_split(raw, ',')) AS fields FROM batch
                  WHERE line > $header_line AND NOT regexp_matches(raw, $quirk))
            WHERE fields <> {width} AND NOT regexp_full_match(raw, $blank)""", {"path": src.name, **params})
    accepted, source = 0, "batch"
    for typed_sql in passes:
        if source == "rest" and not con.execute("SELECT count(*) FROM rest").fetchall()[0][0]:
            break  # all loaded: the strict read is not even planned (~80 ms a batch)
        con.execute(typed_sql, params)
        _price_from_catalog(con, prices)
        accepted += con.execute(INSERT_TYPED).fetchall()[0][0]
        con.execute(f"CREATE OR REPLACE TEMP TABLE rest AS SELECT line, raw FROM typed JOIN {source} USING (line) WHERE NOT ok")
        source = "rest"
    suspects = con.execute("SELECT line, raw FROM rest ORDER BY line").fetchall()
    if suspects:  # the exact reason, or a quirk the SQL does not read: Python, line by line
        log.debug("%s: %d lines read in Python", src.name, len(suspects))
        if header is None:
            parsed = serving.parse_json_lines(suspects, ctx, prices)
        else:
            parsed = serving.parse_csv_lines(header, suspects, ctx, prices)
        staging.insert_parsed(con, parsed, src.name)
        accepted += parsed.accepted
    return accepted


INSERT_TYPED = """
    INSERT INTO serving_windows BY NAME
    SELECT concat_ws('|', service, model_version, coalesce(host, ''),
                     strftime(start_at AT TIME ZONE 'UTC', '%Y-%m-%dT%H:%M:%S')
                     || CASE WHEN microsecond(start_at) <> 0 THEN '.' || lpad(CAST(microsecond(start_at) AS VARCHAR), 6, '0')
                             ELSE '' END || '+00:00') AS window_key,
           start_at AS window_start, window_end, seconds AS window_s, service, model_version,
           requests_total, requests_success, requests_error, latency_ms_p50, latency_ms_p95, latency_ms_p99,
           throughput_rps, avg_gpu_util_pct, avg_cpu_util_pct, cost_usd, cost_source, price_per_hour_usd,
           energy_kwh, CASE WHEN energy_kwh IS NOT NULL THEN 'given' END AS energy_source, instance_type, gpu_type,
           gpu_count, replicas, host, gpu_uuids, prompt_tokens, output_tokens, 'serving' AS source_kind, line AS source_line
    FROM typed WHERE ok"""


def _json_fields(source: str = "batch") -> str:
    """CTEs ending in `fields` for JSON lines: each column's value as text (`<c>_text`, the first
    spelling present), its JSON type (`<c>_type`), whether the line is one plain object, the GPU uuids."""
    names = [name for _, spellings, _ in FIELDS for name in spellings] + ["gpu_uuids"]
    structure = "{" + ", ".join(f'"{name}": "JSON"' for name in names) + "}"
    position = {name: index + 1 for index, name in enumerate(names)}
    value, kind = {}, {}
    for column, spellings, _ in FIELDS:
        # The first spelling whose value is not absent (missing, null or blank text), as serving._get.
        cases = [(f"v_{position[name]}", f"t_{position[name]}") for name in spellings]
        present = [f"({t} IS NOT NULL AND {t} <> 'NULL' AND NOT ({t} = 'VARCHAR' AND trim({v}) = ''))"
                   for v, t in cases]
        value[column] = "CASE " + " ".join(f"WHEN {p} THEN {v}" for p, (v, _) in zip(present, cases)) + " END"
        kind[column] = "CASE " + " ".join(f"WHEN {p} THEN {t}" for p, (_, t) in zip(present, cases)) + " END"
    uuids_type = f"t_{position['gpu_uuids']}"
    return f"""
        parsed AS (  -- each line's JSON read twice: its keys, and the JSON text of each field's value
            SELECT line, raw, TRY(json_keys(raw)) AS keys, TRY(json_transform(raw, '{structure}')) AS j
            FROM {source} WHERE trim(raw) <> ''
        ), objects AS (  -- an object without a repeated key (Python keeps a repeat's last value, SQL its first)
            SELECT line, raw, j, coalesce(keys IS NOT NULL AND j IS NOT NULL AND regexp_matches(raw, '^[ \t\r\n]*[{{]')
                                          AND NOT regexp_matches(raw, '{TRAILING_COMMA}')
                                          AND len(keys) = list_unique(keys), false) AS object
            FROM parsed
        ), texts AS (  -- each field's JSON text once (NULL for null or missing)
            SELECT line, raw, object, {", ".join(f"CAST(j.{name} AS VARCHAR) AS x_{index + 1}" for index, name in enumerate(names))},
                   CASE WHEN object THEN json_extract_string(j.gpu_uuids, '$[*]') END AS uuid_list,
                   CASE WHEN object THEN json_type(j.gpu_uuids, '$[*]') END AS uuid_types
            FROM objects
        ), read AS (  -- each value typed by its JSON text's first character
            SELECT *, {", ".join(f"{_json_type(f'x_{index + 1}')} AS t_{index + 1}" for index in range(len(names)))}
            FROM texts
        ), valued AS (
            SELECT *, {", ".join(f"{_json_value(f'x_{index + 1}', f't_{index + 1}')} AS v_{index + 1}" for index in range(len(names)))}
            FROM read
        ), fields AS (
            SELECT line, raw, object,
                   {", ".join(f"{value[c]} AS {c}_text, {kind[c]} AS {c}_type" for c, _, _ in FIELDS)},
                   CASE WHEN {uuids_type} = 'ARRAY' THEN uuid_list END AS uuid_list,
                   coalesce({uuids_type}, 'NULL') IN ('NULL', 'ARRAY')
                       AND coalesce(list_bool_and(list_transform(uuid_types, lambda x: x = 'VARCHAR')), true) AS uuids_plain
            FROM valued
        )"""


def _keys(*sorts: str) -> str:
    return "|".join(name for _, spellings, sort in FIELDS if sort in sorts for name in spellings)


BLANK = r"[\s\x0b\x1c-\x1f\x85\xa0\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}]"
TRAILING_COMMA = r",\s*[}\]]"  # DuckDB's JSON reader takes `[1,]` and `{"a": 1,}`; Python's json refuses them
# A line the lenient read may take otherwise than Python: any match sends it to the strict read. A
# string without escapes holds no quote, so `"key":` is always a key (a nested one only costs a
# strict read); numbers the lenient read would round or cast (text, true, 1.5 or 1e3 as a count,
# long digits) and text that is not a JSON string or has a blank at an edge are all caught here.
QUIRK = "|".join((
    r"\\",                                    # an escape: a key or text spelled with escapes
    r"[0-9.]{17,}", r"[0-9.][eE][-+]?[0-9]",   # more digits than a double keeps; an exponent
    TRAILING_COMMA,
    r"^\s*[^{\s]",                              # not an object
    r'"\s+:',                                   # a blank before a key's colon (keys are counted as `":`)
    rf'"(?:{_keys("count")})"\s*:\s*(?:[^-0-9n\s]|-[^0-9]|n[^u]|-?[0-9]+[.eE])',
    rf'"(?:{_keys("number", "percent", "money")})"\s*:\s*(?:[^-0-9n\s]|-[^0-9]|n[^u])',
    rf'"(?:{_keys("text", "time")})"\s*:\s*(?:[^"n\s]|n[^u])',
    r'"gpu_uuids"\s*:',
    rf':\s*"{BLANK}', rf'{BLANK}"\s*[,}}\]]',    # a string starting or ending with a blank
))


def _lenient_fields(ctx: ParseContext) -> str:
    """CTEs ending in `typed` for JSON lines: every field read straight to its type by one
    json_transform, trusted only on lines without a QUIRK whose every key is a known field with a
    value (`object`; a repeated key, where Python keeps the last value and SQL the first, fails it:
    a string without escapes holds no quote, so each `":` ends a key)."""
    sql_type = {"text": "VARCHAR", "time": "VARCHAR", "count": "BIGINT", "number": "DOUBLE", "percent": "DOUBLE",
                "money": "VARCHAR"}  # money as DuckDB prints the double, checked as the strict read does
    structure = "{" + ", ".join(f'"{name}": "{sql_type[sort]}"' for _, spellings, sort in FIELDS for name in spellings) + "}"
    filled = " + ".join(f"CAST(v.{name} IS NOT NULL AS INTEGER)" for _, spellings, _ in FIELDS for name in spellings)
    naive_ok = ctx.tz is timezone.utc
    time_ok = " OR ".join([f"regexp_full_match(@, '{ISO_WITH_OFFSET}')"]
                          + ([f"regexp_full_match(@, '{ISO_NAIVE}')"] if naive_ok else []))
    columns = []
    for column, spellings, sort in FIELDS:
        found = [f"nullif(v.{name}, '')" if sort in ("text", "time") else f"v.{name}" for name in spellings]
        value = found[0] if len(found) == 1 else f"coalesce({', '.join(found)})"
        columns.append(f"{value} AS {column}_text")
    return f"""
        read AS (
            SELECT line, raw, TRY(json_transform(raw, '{structure}')) AS v, regexp_matches(raw, '{QUIRK}') AS quirk
            FROM batch WHERE trim(raw) <> ''
        ), fields AS (  -- as many keys (each `":`) as known fields with a value: no key repeated, none unknown
            SELECT line, raw, coalesce(NOT quirk AND v IS NOT NULL
                                       AND (length(raw) - length(replace(raw, '":', ''))) // 2 = {filled}, false) AS object,
                   {", ".join(columns)}
            FROM read
        ), typed AS (
            SELECT *,
                   CASE WHEN {time_ok.replace('@', 'window_start_text')} THEN TRY_CAST(window_start_text AS TIMESTAMPTZ) END AS start_at,
                   CASE WHEN {time_ok.replace('@', 'window_end_text')} THEN TRY_CAST(window_end_text AS TIMESTAMPTZ) END AS end_at,
                   {", ".join(f"{c}_text AS {c}" for c, _, sort in FIELDS if sort in ("count", "number", "percent", "text"))},
                   CASE WHEN regexp_full_match(cost_usd_text, '{MONEY_TEXT}') THEN CAST(cost_usd_text AS DECIMAL(38, 12)) END AS cost_usd,
                   CAST(NULL AS VARCHAR[]) AS uuids
            FROM fields
        )"""


def _csv_fields(header: list[str]) -> str:
    """CTEs ending in `fields` for CSV lines under `header` (as _json_fields): a line without
    quotes or control characters split at its commas; each value typed by its strict spelling
    (another spelling is no type SQL reads, so the line goes to Python). Binds $header_line,
    $quirk and $blank."""
    where = {name: index + 1 for index, name in enumerate(header)}  # a repeated column: its last (as dict(zip))
    spelled = {"count": ("BIGINT", CSV_COUNT), "number": ("DOUBLE", CSV_NUMBER), "percent": ("DOUBLE", CSV_NUMBER),
               "money": ("DOUBLE", CSV_MONEY)}
    columns = []
    for column, spellings, sort in FIELDS:
        found = [f"f[{where[name]}]" for name in spellings if name in where]
        text = ("CASE " + " ".join(f"WHEN trim({f}) <> '' THEN {f}" for f in found) + " END") if found else "CAST(NULL AS VARCHAR)"
        columns.append(f"{text} AS {column}_text")
    kinds = []
    for column, _, sort in FIELDS:
        if sort in spelled:
            name, pattern = spelled[sort]
            kinds.append(f"CASE WHEN regexp_full_match({column}_text, '{pattern}') THEN '{name}' "
                         f"WHEN {column}_text IS NOT NULL THEN 'TEXT' END AS {column}_type")
        else:
            kinds.append(f"CASE WHEN {column}_text IS NOT NULL THEN 'VARCHAR' END AS {column}_type")
    uuids = f"f[{where['gpu_uuids']}]" if "gpu_uuids" in where else "CAST(NULL AS VARCHAR)"
    return f"""
        split AS (
            SELECT line, raw, NOT regexp_matches(raw, $quirk) AS unquoted, string_split(raw, ',') AS f
            FROM batch WHERE line > $header_line AND NOT regexp_full_match(raw, $blank)
        ), cut AS (
            SELECT line, raw, unquoted AS object, {", ".join(columns)},
                   CASE WHEN unquoted AND trim({uuids}) <> '' THEN string_split({uuids}, ';') END AS uuid_list
            FROM split WHERE NOT unquoted OR len(f) = {len(header)}
        ), fields AS (
            SELECT line, raw, object, {", ".join(kinds)},
                   {", ".join(f"{c}_text" for c, _, _ in FIELDS)}, uuid_list, true AS uuids_plain
            FROM cut
        )"""


def _typed_sql(ctx: ParseContext, fields_sql: str, csv: bool = False, lenient: bool = False) -> str:
    """The statement typing and checking a batch into TEMP TABLE `typed` (`ok`: plain and loadable
    straight from SQL) from the CTEs `fields_sql` (_json_fields, or _csv_fields when `csv`; or
    _lenient_fields, which end in the typed values themselves and vouch for their types and blanks)."""
    plain = []
    for column, _, sort in FIELDS:
        allowed = {"text": "('VARCHAR')", "time": "('VARCHAR')", "count": "('UBIGINT', 'BIGINT')",
                   "number": "('UBIGINT', 'BIGINT', 'DOUBLE')", "percent": "('UBIGINT', 'BIGINT', 'DOUBLE')",
                   "money": "('UBIGINT', 'BIGINT', 'DOUBLE')"}[sort]
        plain.append(f"coalesce({column}_type IN {allowed}, true)")
    naive_ok = ctx.tz is timezone.utc
    time_ok = " OR ".join([f"regexp_full_match(@, '{ISO_WITH_OFFSET}')"]
                          + ([f"regexp_full_match(@, '{ISO_NAIVE}')"] if naive_ok else []))
    counts_ok = " AND ".join(f"({c}_text IS NULL OR {c} BETWEEN 0 AND {COUNT_MAX.get(c, values.BIGINT_MAX)})"
                             for c, _, sort in FIELDS if sort == "count")
    numbers_ok = " AND ".join(f"({c}_text IS NULL OR (isfinite({c}) AND {c} BETWEEN 0 AND {values.NUMBER_LIMIT}))" for c, _, sort in FIELDS if sort == "number")
    percents_ok = " AND ".join(f"({c}_text IS NULL OR {c} BETWEEN 0 AND 100)" for c, _, sort in FIELDS if sort == "percent")
    texts = ", ".join(f"coalesce({c}, '')" for c, _, sort in FIELDS if sort == "text")
    typed_cte = f"""
        , typed AS (
            SELECT *,
                   CASE WHEN {time_ok.replace('@', 'window_start_text')} THEN TRY_CAST(window_start_text AS TIMESTAMPTZ) END AS start_at,
                   CASE WHEN {time_ok.replace('@', 'window_end_text')} THEN TRY_CAST(window_end_text AS TIMESTAMPTZ) END AS end_at,
                   {", ".join(f"TRY_CAST({c}_text AS BIGINT) AS {c}" for c, _, sort in FIELDS if sort == "count")},
                   {", ".join(f"TRY_CAST({c}_text AS DOUBLE) AS {c}" for c, _, sort in FIELDS if sort in ("number", "percent"))},
                   CASE WHEN regexp_full_match(cost_usd_text, '{CSV_MONEY if csv else MONEY_TEXT}')
                        THEN CAST(cost_usd_text AS DECIMAL(38, 12)) END AS cost_usd,
                   {", ".join(f"{c}_text AS {c}" for c, _, sort in FIELDS if sort == "text")},
                   list_filter(uuid_list, lambda u: u <> '') AS uuids
            FROM fields
        )"""
    plain_check = "true" if lenient else (
        " AND ".join(plain) + " AND uuids_plain AND NOT regexp_matches(concat_ws(chr(1), "
        f"{texts}, coalesce(array_to_string(uuid_list, chr(1)), '')), '{EDGE_BLANK}')")
    return f"""
        CREATE OR REPLACE TEMP TABLE typed AS
        WITH {fields_sql}{"" if lenient else typed_cte}, checked AS (
            SELECT *, coalesce(end_at, CASE WHEN window_s < 1e9 THEN start_at + to_microseconds(CAST(window_s * 1e6 AS BIGINT)) END) AS window_end,
                   CASE WHEN end_at IS NOT NULL THEN epoch(end_at - start_at) ELSE window_s END AS seconds,
                   coalesce(
                       object AND {plain_check}
                       AND start_at >= TIMESTAMPTZ '1990-01-01 00:00:00+00' AND start_at < TIMESTAMPTZ '2100-01-01 00:00:00+00'
                       AND (window_end_text IS NULL OR (end_at >= TIMESTAMPTZ '1990-01-01 00:00:00+00'
                                                        AND end_at < TIMESTAMPTZ '2100-01-01 00:00:00+00' AND end_at > start_at))
                       AND (window_s IS NULL OR window_s > 0)
                       AND (end_at IS NOT NULL OR (window_s IS NOT NULL AND window_s * 1e6 = round(window_s * 1e6)
                                                   AND window_s < 1e9))
                       AND (end_at IS NULL OR window_s IS NULL OR abs(window_s - epoch(end_at - start_at)) <= {serving_tolerance()})
                       AND service IS NOT NULL AND model_version IS NOT NULL
                       AND requests_total IS NOT NULL AND requests_success IS NOT NULL
                       AND {counts_ok} AND {numbers_ok} AND {percents_ok}
                       AND requests_success + coalesce(requests_error, 0) <= requests_total
                       AND (cost_usd IS NOT NULL OR cost_usd_text IS NULL)
                       -- from 1,000 USD a JSON double's last digit is past 12 decimals: a longer number is Python's
                       AND ({'true' if csv or lenient else 'false'} OR cost_usd IS NULL OR cost_usd < 1000 OR NOT regexp_matches(raw, '{LONG_NUMBER}')), false) AS ok
            FROM typed
        )
        SELECT line, ok, start_at, window_end, seconds, service, model_version, requests_total, requests_success,
               requests_error, {", ".join(c for c, _, sort in FIELDS if sort in ("number", "percent") and c != "window_s")},
               cost_usd, CASE WHEN cost_usd IS NOT NULL THEN 'given' END AS cost_source,
               CAST(NULL AS DECIMAL(38, 12)) AS price_per_hour_usd, instance_type, gpu_type, coalesce(gpu_count, CASE WHEN len(uuids) > 0 THEN len(uuids) END) AS gpu_count,
               replicas, host, CASE WHEN len(uuids) > 0 THEN uuids END AS gpu_uuids, prompt_tokens, output_tokens
        FROM checked"""


def _json_type(text: str) -> str:
    """SQL naming the JSON type of a value's JSON text (json_type's names; NULL for null or missing)."""
    return (f"CASE left({text}, 1) WHEN '\"' THEN 'VARCHAR' WHEN 't' THEN 'BOOLEAN' WHEN 'f' THEN 'BOOLEAN' "
            f"WHEN '{{' THEN 'OBJECT' WHEN '[' THEN 'ARRAY' WHEN 'n' THEN 'NULL' "
            f"ELSE CASE WHEN {text} IS NULL THEN NULL WHEN regexp_matches({text}, '[.eE]') THEN 'DOUBLE' ELSE 'BIGINT' END END")


def _json_value(text: str, kind: str) -> str:
    """SQL for a value's text as json_extract_string gives it (a string without escapes sliced, not parsed)."""
    return (f"CASE WHEN {kind} = 'VARCHAR' THEN CASE WHEN contains({text}, '\\') THEN json_extract_string({text}, '$') "
            f"ELSE {text}[2:-2] END ELSE {text} END")


def serving_tolerance() -> float:
    from ingest import serving

    return serving.LENGTH_TOLERANCE_S


def _price_from_catalog(con, prices) -> None:
    """Price the plain windows without a cost from the catalog as serving.build_window does:
    (instance price x replicas, else GPU price x GPUs), to 12 places, x Decimal(repr(seconds)) / 3600
    rounded half to even to 12 places, in whole HUGEINT arithmetic. Each distinct instance and GPU
    type is looked up once in Python; a window this cannot price exactly goes to Python."""
    names = con.execute("SELECT DISTINCT instance_type, gpu_type FROM typed WHERE ok AND cost_usd IS NULL").fetchall()
    if not names:
        return
    for table, lookup, index in (("catalog_instance", prices.instance, 0), ("catalog_gpu", prices.gpu, 1)):
        found = {name: lookup(name) for name in {row[index] for row in names} if name is not None}
        found = {name: price for name, price in found.items() if price is not None}
        con.register(table, pa.table({
            "name": pa.array(list(found), pa.string()),
            "price": pa.array([price.quantize(values.MONEY_PLACES) for price in found.values()], pa.decimal128(38, 12)),
            "exact": pa.array([price == price.quantize(values.MONEY_PLACES) for price in found.values()], pa.bool_())}))
    try:
        con.execute(f"""
            CREATE OR REPLACE TEMP TABLE catalog_cost AS
            WITH priced AS (
                SELECT t.line, t.seconds, coalesce(i.exact, true) AND coalesce(g.exact, true) AS exact,
                       CASE WHEN i.price IS NOT NULL AND t.replicas IS NOT NULL THEN i.price * t.replicas
                            WHEN g.price IS NOT NULL AND t.gpu_count IS NOT NULL THEN g.price * t.gpu_count END AS price,
                       CAST(t.seconds AS VARCHAR) AS seconds_text
                FROM typed t LEFT JOIN catalog_instance i ON i.name = t.instance_type
                             LEFT JOIN catalog_gpu g ON g.name = t.gpu_type
                WHERE t.ok AND t.cost_usd IS NULL
            ), whole AS (  -- price in 1e-12 USD and seconds as digits x 10^-places, from repr(seconds)
                SELECT *, exact AND price < {values.MONEY_LIMIT} AND places <= 20
                          AND CAST(price AS DOUBLE) * seconds * pow(10, 12 + places) < 1e36 AS fits
                FROM (SELECT line, price, exact, seconds, seconds_text,
                             CASE WHEN contains(seconds_text, 'e') OR strpos(seconds_text, '.') = 0 THEN 99
                                  ELSE length(seconds_text) - strpos(seconds_text, '.') END AS places
                      FROM priced WHERE price IS NOT NULL)
            ), divided AS (
                SELECT line, price, fits,
                       CASE WHEN fits THEN CAST(replace(CAST(price AS VARCHAR), '.', '') AS HUGEINT)
                                           * CAST(replace(seconds_text, '.', '') AS HUGEINT) END AS numerator,
                       CASE WHEN fits THEN CAST(3600 AS HUGEINT) * CAST(pow(10, places) AS HUGEINT) END AS denominator
                FROM whole
            ), rounded AS (
                SELECT line, price, fits, numerator // denominator AS q, numerator % denominator AS r, denominator
                FROM divided
            )
            SELECT line, price, CASE WHEN fits THEN CAST(q + CASE WHEN 2 * r > denominator OR (2 * r = denominator AND q % 2 = 1)
                                                                THEN 1 ELSE 0 END AS DECIMAL(38, 0))
                                                   * CAST('0.000000000001' AS DECIMAL(13, 12)) END AS cost
            FROM rounded""")
    finally:
        con.unregister("catalog_instance")
        con.unregister("catalog_gpu")
    con.execute("UPDATE typed SET price_per_hour_usd = c.price, cost_usd = c.cost, cost_source = 'derived' "
                f"FROM catalog_cost c WHERE typed.line = c.line AND c.cost IS NOT NULL AND c.cost < {values.MONEY_LIMIT}")
    con.execute("UPDATE typed SET ok = false FROM catalog_cost c WHERE typed.line = c.line "
                f"AND (c.cost IS NULL OR c.cost >= {values.MONEY_LIMIT})")  # not exact here: Python prices it
