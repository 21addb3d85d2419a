"""Training-run summaries in JSON lines (or one JSON array), typed and checked in SQL a batch at a time.

A record loads straight from SQL when it is plain: a JSON object without repeated keys whose
times are ISO-8601 text with an offset (or naive, read in UTC) or epoch seconds, counts JSON
integers, other figures JSON numbers, text fields strings without surrounding blanks, money
given with at most 6 decimals, a run_id of its own, tags of text, integers or booleans,
eval points of `value`/`elapsed_s`/`step`, and nothing to flag. A run without a cost or a price
is priced from the catalog (each distinct instance and GPU type looked up once). Every other
record (not JSON, an auto run_id, a flag to write, an eval point with a `time`, a bad value)
goes through run_record.build_run, which names the exact reason or reads the quirk; so a file
loads the same as line by line (runs_json.parse), in bounded memory. A JSON array is read by
DuckDB's array reader (streamed), its elements numbered with the array's first line as before;
one object over many lines (run_meta.json) is one record and goes to runs_json.parse whole.
"""
from __future__ import annotations

import json
import logging
from datetime import timezone

import pyarrow as pa

from ingest.engine import staging, values
from ingest.engine.batch_sql import EDGE_BLANK, ISO_NAIVE, ISO_WITH_OFFSET, LONG_NUMBER, MONEY_TEXT
from ingest.engine.contract import BadValue, ParseContext, Reject
from ingest.engine.staging import Source, Staged
from ingest.formats.runs import json_records, run_record
from ingest.settings import config, limits

KIND = "runs"
TEXTS = ("run_id", "project", "team", "owner", "model", "status", "region", "host", "instance_type",
         "gpu_type", "val_metric_name", "goal")
NUMBERS = ("duration_hours", "throughput_examples_per_sec", "val_metric", "target_metric", "energy_kwh",
           "emissions_kg")
SIGNED = ("val_metric", "target_metric")  # the other numbers are >= 0
MONEY = ("price_per_hour_usd", "estimated_cost_usd")
COUNTS = {"gpu_count": run_record.MAX_GPUS, "examples": values.BIGINT_MAX}
TIMES = ("start_time", "end_time")
OTHERS = ("gpu_uuids", "gpu_indices", "gpu_uuid", "gpu_index", "tags", "eval_history")
PATHS = TEXTS + NUMBERS + MONEY + tuple(COUNTS) + TIMES + OTHERS
assert set(PATHS) == set(run_record.FIELDS)  # a record with any other key is read in Python
NUMBER_TYPES = "('UBIGINT', 'BIGINT', 'DOUBLE')"
ABSENT = "(@t IS NULL OR @t = 'NULL' OR (@t = 'VARCHAR' AND @v = ''))"  # missing, null or '' (blanks go to Python)
STATUS = {**{s: s for s in run_record.STATUSES}, **run_record.STATUS_SYNONYMS}
EARLIEST, LATEST = "TIMESTAMPTZ '1990-01-01 00:00:00+00'", "TIMESTAMPTZ '2100-01-01 00:00:00+00'"
US_PER_HOUR = 3_600_000_000
VECTOR_ROWS = 2048  # DuckDB's vector size
# A JSON number written with more digits than a double keeps (DuckDB would round it): after the
# `:`, `,` or `[` before it, on one line (a record's or an array element's text); digits in a
# string (a resource id "i-06831718843699913") are not one, though a string holding `: 1234...` is
# taken for one (read in Python, the same either way).
LONG_JSON_NUMBER = r"[:,\[][ \t\r\n]*[-+0-9.eE]*[0-9.]{17}"
# trim(text) <> '''' without a trimmed copy of each line (trim strips Unicode spaces, category Zs)
FILLED = "regexp_matches({}, '[^\\p{{Zs}}]')"
ONE_VALUE_BYTES = 16 << 20  # DuckDB's default maximum_object_size: a larger file is not read as one value
# Runs are staged with `ord` (the line, or the element of a JSON array) so a run_id seen twice
# keeps its later record and only that record's eval points.
STAGED_RUNS, STAGED_EVALS = "runs_by_record", "run_evals_by_record"
log = logging.getLogger(__name__)


def stage(src: Source, con, ctx: ParseContext) -> Staged:
    """Stage a runs file's runs, eval points and rejects in `con`; lines (or an array's elements) in SQL."""
    prices = config.load().prices
    head = _first_line(src)
    stripped = head[1].lstrip() if head else ""
    whole = stripped.startswith("[") or (stripped.startswith("{") and not _is_json(stripped) and _one_value(src, con))
    con.execute(f"CREATE OR REPLACE TEMP TABLE {STAGED_RUNS} AS SELECT *, 0::BIGINT AS ord FROM runs LIMIT 0")
    con.execute(f"CREATE OR REPLACE TEMP TABLE {STAGED_EVALS} AS SELECT *, 0::BIGINT AS ord FROM run_evals LIMIT 0")
    accepted, unknown = 0, set()
    if whole and stripped.startswith("[") and not _has_long_number(src):
        accepted = _stage_array(src, con, ctx, prices, head, unknown)
    elif whole:  # one object over many lines (run_meta.json), or an array DuckDB does not read: as before
        parsed = json_records.parse(staging.lines(src), ctx)
        staging.insert_parsed(con, parsed, src.name)
        return Staged(parsed.accepted, run_record.staged_run_totals(con), parsed.warnings)
    else:
        for batch in staging.line_batches(src):
            # in DuckDB-sized chunks: one Arrow chunk would be scanned by one thread
            con.register("batch", pa.Table.from_batches(batch.to_batches(max_chunksize=VECTOR_ROWS)))
            try:
                accepted += _stage_batch(con, src, ctx, prices, "batch", unknown=unknown)
            finally:
                con.unregister("batch")
    _keep_latest(con)
    return Staged(accepted, run_record.staged_run_totals(con), run_record.unknown_fields_warning(unknown))


HEAD_BYTES = 1 << 20  # the first line is looked for in the file's first MB (then in line_batches)
BLANK = b" \t\n\r\f"  # what Arrow's `\\s` (RE2) calls blank


def _first_line(src: Source) -> tuple[int, str] | None:
    """The first non-blank line (number, text), as line_batches numbers and splits it; read from
    the file's first MB (a whole batch, or the whole file, only when that holds no such line)."""
    with src.open_binary() as stream:
        head = stream.read(HEAD_BYTES)
        ended = len(head) < HEAD_BYTES
    if head.startswith(staging.BOM):
        head = head[len(staging.BOM):]
    lines = head.split(b"\n")
    complete = lines if ended else lines[:-1]  # the last piece of a cut read may go on
    for number, line in enumerate(complete, start=1):
        if line.strip(BLANK):
            if len(line) > limits.current().max_line_bytes:
                break  # line_batches shows a marker for it: let it
            try:
                return number, line.rstrip(b"\r").decode("utf-8")
            except UnicodeDecodeError:
                break  # line_batches says where
    else:
        if ended:
            return None
    return _first_line_of_batches(src)


def _first_line_of_batches(src: Source) -> tuple[int, str] | None:
    """_first_line from line_batches: every line until a non-blank one."""
    import pyarrow.compute as pc

    for batch in staging.line_batches(src):
        filled = batch.filter(pc.invert(pc.match_substring_regex(batch["raw"], r"^\s*$")))
        if filled.num_rows:
            return filled["line"][0].as_py(), filled["raw"][0].as_py()
    return None


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return False
    return True


def _one_value(src: Source, con) -> bool:
    """Whether the file is one JSON value (an object over many lines), as DuckDB reads it; a file
    over ONE_VALUE_BYTES (as text) is not: DuckDB reads no value that large, and is not asked."""
    if src.compression is None:
        if src.path.stat().st_size > ONE_VALUE_BYTES:
            return False
    else:
        with src.open_binary() as stream:  # the size as text: counted, never held
            size = 0
            while chunk := stream.read(1 << 20):
                size += len(chunk)
                if size > ONE_VALUE_BYTES:
                    return False
    try:
        return con.execute("SELECT count(*) FROM read_json_objects(?, format = 'unstructured', compression = ?, "
                           "maximum_object_size = ?)",
                           [str(src.path), src.duckdb_compression, ONE_VALUE_BYTES]).fetchall()[0][0] == 1
    except Exception:  # DuckDB's errors have no common base here: any means "not one value"
        return False


def _has_long_number(src: Source) -> bool:
    """Whether a line holds a number with more digits than a double keeps (DuckDB would round it)."""
    import pyarrow.compute as pc

    return any(pc.any(pc.match_substring_regex(batch["raw"], LONG_NUMBER)).as_py()
               for batch in staging.line_batches(src))


def _stage_array(src: Source, con, ctx: ParseContext, prices, head: tuple[int, str], unknown: set[str]) -> int:
    """Stage a JSON array's elements (each numbered with the array's first line, as runs_json.parse
    does), streamed by DuckDB's array reader; an array it cannot read goes to runs_json.parse."""
    first, first_text = head
    con.execute("SET preserve_insertion_order = true")  # `ord` is the element's place: a later one wins
    try:
        con.execute("CREATE OR REPLACE TEMP TABLE elements AS SELECT row_number() OVER () AS ord, CAST(json AS VARCHAR) AS raw "
                    "FROM read_json_objects(?, format = 'array', compression = ?)",
                    [str(src.path), src.duckdb_compression])
    except Exception:  # not one well-formed array: the line-by-line reading says what is wrong
        parsed = json_records.parse(staging.lines(src), ctx)
        staging.insert_parsed(con, parsed, src.name)
        return parsed.accepted
    finally:
        con.execute("SET preserve_insertion_order = false")
    accepted, size = 0, staging.INSERT_BATCH_ROWS
    count = staging.count(con, "elements")
    for start in range(0, count, size):
        con.execute(f"CREATE OR REPLACE TEMP VIEW element_batch AS SELECT ord, {first} AS line, raw FROM elements "
                    f"WHERE ord > {start} AND ord <= {start + size}")
        accepted += _stage_batch(con, src, ctx, prices, "element_batch", raw_of_line=first_text, unknown=unknown)
    con.execute("DROP TABLE elements")
    return accepted


def _cost(price: str, price_text: str) -> str:
    """SQL for price x hours in USD as run_record does it (Decimal(repr(hours)), rounded half to even
    to 12 then 6 places); NULL where that cannot be exact here (more than 28 digits, tiny or huge)."""
    digits = "length(regexp_replace(regexp_replace(regexp_replace(@, 'e.*$', ''), '[.-]', '', 'g'), '^0+|0+$', '', 'g'))"
    return (f"CASE WHEN {price} IS NOT NULL AND hours IS NOT NULL AND (hours = 0 OR hours >= 1e-4) AND hours < 1e5 "
            f"AND CAST({price} AS DOUBLE) * hours < 1e10 "
            f"AND {digits.replace('@', price_text)} + {digits.replace('@', 'hours_text')} <= 28 "
            f"THEN round_even(round_even(CAST({price} AS DECIMAL(15, 6)) * TRY_CAST(hours_text AS DECIMAL(26, 21)), 12), 6) END")


def _sql_ok_and_rows(ctx: ParseContext, batch: str) -> str:
    """The query that types a batch's records and says which SQL settles (`ok`)."""
    at = {name: index + 1 for index, name in enumerate(PATHS)}
    v = {name: f"v[{at[name]}]" for name in PATHS}
    t = {name: f"t[{at[name]}]" for name in PATHS}

    def absent(name: str) -> str:
        return ABSENT.replace("@t", t[name]).replace("@v", v[name])

    def present(name: str) -> str:
        return f"NOT {absent(name)}"

    text_ok = " AND ".join(f"({absent(n)} OR {t[n]} = 'VARCHAR')" for n in TEXTS)
    number_ok = " AND ".join(f"({absent(n)} OR ({t[n]} IN {NUMBER_TYPES} AND isfinite(n_{n}) "
                             f"AND {'abs(n_' + n + ')' if n in SIGNED else 'n_' + n} BETWEEN 0 AND "
                             f"{run_record.MAX_RUN_HOURS if n == 'duration_hours' else values.NUMBER_LIMIT}))"
                             for n in NUMBERS)
    money_ok = " AND ".join(f"({absent(n)} OR ({t[n]} IN {NUMBER_TYPES} AND regexp_full_match({v[n]}, '{MONEY_TEXT}')))"
                            for n in MONEY)
    count_ok = " AND ".join(f"({absent(n)} OR ({t[n]} IN ('UBIGINT', 'BIGINT') AND c_{n} BETWEEN 0 AND {top}))"
                            for n, top in COUNTS.items())
    naive = ctx.tz is timezone.utc
    iso = [f"regexp_full_match(@v, '{ISO_WITH_OFFSET}')"] + ([f"regexp_full_match(@v, '{ISO_NAIVE}')"] if naive else [])
    time_ok = " AND ".join(
        f"({absent(n)} OR ((({t[n]} = 'VARCHAR' AND ({' OR '.join(iso).replace('@v', v[n])}))"
        f" OR ({t[n]} IN {NUMBER_TYPES} AND TRY_CAST({v[n]} AS DOUBLE) BETWEEN 0 AND 1e11)) AND us_{n} IS NOT NULL))"
        for n in TIMES)
    statuses = ", ".join(f"'{s}'" for s in STATUS)
    goals = ", ".join(f"'{g}'" for g in run_record.GOAL_SYNONYMS)
    texts = ", ".join(f"coalesce(CASE WHEN {t[n]} = 'VARCHAR' THEN {v[n]} END, '')" for n in TEXTS)
    min_words = ", ".join(f"'{w}'" for w in run_record.MIN_GOAL_WORDS)
    status_map = " ".join(f"WHEN '{k}' THEN '{s}'" for k, s in STATUS.items())
    goal_map = " ".join(f"WHEN '{k}' THEN '{g}'" for k, g in run_record.GOAL_SYNONYMS.items())

    def when_present(name: str, expression: str) -> str:
        return f"CASE WHEN {present(name)} THEN {expression} END"

    def epoch_us(name: str) -> str:
        # As datetime.fromtimestamp: whole seconds, then the fraction's microseconds rounded half to even.
        seconds = f"TRY_CAST({v[name]} AS DOUBLE)"
        return (f"CASE WHEN {t[name]} = 'VARCHAR' THEN epoch_us(TRY_CAST({v[name]} AS TIMESTAMPTZ)) "
                f"WHEN {t[name]} IN {NUMBER_TYPES} AND {seconds} BETWEEN 0 AND 1e11 THEN CAST(trunc({seconds}) AS BIGINT) * 1000000 "
                f"+ CAST(round_even(({seconds} - trunc({seconds})) * 1e6, 0) AS BIGINT) END")

    return f"""
        WITH parsed AS (  -- each line's JSON read twice: its keys, and the values of PATHS
            SELECT line, ord, raw, TRY(json_keys(raw)) AS keys, TRY(json_extract(raw, {['$.' + p for p in PATHS]!r})) AS j
            FROM {batch} WHERE {FILLED.format('raw')}
        ), objects AS (
            SELECT line, ord, keys, j,
                   coalesce(keys IS NOT NULL AND j IS NOT NULL AND regexp_matches(raw, '^[ \t\r\n]*[{{]')
                            AND NOT regexp_matches(raw, '{LONG_JSON_NUMBER}'), false) AS object
            FROM parsed
        ), read AS (  -- a value's own JSON text is short: typing it again costs little
            SELECT line, ord, object, keys,
                   CASE WHEN object THEN list_transform(j, lambda x: json_extract_string(x, '$')) END AS v,
                   CASE WHEN object THEN list_transform(j, lambda x: json_type(x)) END AS t,
                   CASE WHEN object THEN j[{PATHS.index('tags') + 1}] END AS tags_json,
                   CASE WHEN object THEN json_extract_string(j[{PATHS.index('gpu_uuids') + 1}], '$[*]') END AS uuid_list,
                   CASE WHEN object THEN json_type(j[{PATHS.index('gpu_uuids') + 1}], '$[*]') END AS uuid_types,
                   CASE WHEN object THEN json_extract_string(j[{PATHS.index('gpu_indices') + 1}], '$[*]') END AS index_list,
                   CASE WHEN object THEN json_type(j[{PATHS.index('gpu_indices') + 1}], '$[*]') END AS index_types,
                   CASE WHEN object THEN json_extract(j[{PATHS.index('eval_history') + 1}], '$[*]') END AS points
            FROM objects
        ), fields AS (
            SELECT *,
                   {", ".join(f"TRY_CAST({v[n]} AS DOUBLE) AS n_{n}" for n in NUMBERS)},
                   {", ".join(f"TRY_CAST({v[n]} AS BIGINT) AS c_{n}" for n in COUNTS)},
                   {", ".join(f"{when_present(n, epoch_us(n))} AS us_{n}" for n in TIMES)},
                   {", ".join(f"CASE WHEN {present(n)} AND regexp_full_match({v[n]}, '{MONEY_TEXT}') THEN TRY_CAST({v[n]} AS DECIMAL(15, 6)) END AS m_{n}" for n in MONEY)},
                   CASE WHEN {t['tags']} = 'OBJECT' AND len(json_keys(tags_json)) = len(list_distinct(json_keys(tags_json)))
                        THEN map_entries(CAST(tags_json AS MAP(VARCHAR, JSON))) END AS tag_entries,
                   CASE WHEN {t['gpu_uuids']} = 'ARRAY' THEN list_filter(uuid_list, lambda u: u IS NOT NULL AND u <> '') END AS uuids,
                   CASE WHEN {t['gpu_indices']} = 'ARRAY' THEN list_filter(index_list, lambda i: i IS NOT NULL) END AS indices,
                   CASE WHEN {present('val_metric_name')} THEN {v['val_metric_name']} ELSE 'val_metric' END AS metric_name
            FROM read
        ), plain AS (
            SELECT *,
                   coalesce(
                       object AND len(keys) = len(list_distinct(keys)) AND list_has_all({list(PATHS)!r}, keys)
                       AND {text_ok} AND {number_ok} AND {money_ok} AND {count_ok} AND {time_ok}
                       AND NOT regexp_matches(concat_ws(chr(1), {texts}, coalesce(array_to_string(uuid_list, chr(1)), '')),
                                              '{EDGE_BLANK}')
                       AND {present('run_id')} AND {v['run_id']} <> 'unknown'
                       AND ({absent('status')} OR lower({v['status']}) IN ({statuses}) AND regexp_full_match({v['status']}, '[A-Za-z]+'))
                       AND ({absent('goal')} OR lower({v['goal']}) IN ({goals}) AND regexp_full_match({v['goal']}, '[A-Za-z]+'))
                       AND ({present('goal')} OR regexp_full_match(metric_name, '[\\x20-\\x7e]*'))
                       AND {t['gpu_uuid']} IS NULL AND {t['gpu_index']} IS NULL
                       AND ({absent('gpu_uuids')} OR ({t['gpu_uuids']} = 'ARRAY'
                            AND list_bool_and(list_transform(uuid_types, lambda x: x IN ('VARCHAR', 'NULL'))) IS NOT false))
                       AND ({absent('gpu_indices')} OR ({t['gpu_indices']} = 'ARRAY'
                            AND list_bool_and(list_transform(index_types, lambda x: x IN ('UBIGINT', 'BIGINT', 'NULL'))) IS NOT false
                            AND list_bool_and(list_transform(indices, lambda i: coalesce(abs(TRY_CAST(i AS BIGINT)) <= {run_record.MAX_GPUS}, false))) IS NOT false))
                       AND ({absent('tags')} OR list_bool_and(list_transform(tag_entries, lambda e:
                                coalesce(json_type(e.value) IN ('VARCHAR', 'UBIGINT', 'BIGINT', 'BOOLEAN', 'NULL'), true)
                                AND e.key <> '')) IS NOT false AND tag_entries IS NOT NULL)
                       AND ({absent('eval_history')} OR {t['eval_history']} = 'ARRAY'),
                   false) AS plain
            FROM fields
        ), span AS (
            SELECT *,
                   CASE WHEN us_start_time IS NOT NULL AND us_end_time IS NOT NULL THEN (us_end_time - us_start_time) / 1e6 / 3600
                        ELSE n_duration_hours END AS hours,
                   -- as timedelta(hours=h): whole hours exact, the fraction's microseconds rounded half to even
                   CAST(trunc(n_duration_hours) AS BIGINT) * {US_PER_HOUR}
                       + CAST(round_even((n_duration_hours - trunc(n_duration_hours)) * {US_PER_HOUR}.0, 0) AS BIGINT) AS duration_us
            FROM plain WHERE plain
        ), timed AS (
            SELECT *,
                   coalesce(us_start_time, us_end_time - duration_us) AS start_us,
                   coalesce(us_end_time, us_start_time + duration_us) AS end_us,
                   CAST(hours AS VARCHAR) AS hours_text
            FROM span
        ), costed AS (
            SELECT *, {_cost('m_price_per_hour_usd', v['price_per_hour_usd'])} AS expected
            FROM timed
        )
        SELECT line, ord,
               {v['run_id']} AS run_id,
               {", ".join(f"{when_present(n, v[n])} AS {n}" for n in ("project", "team", "owner", "model", "region", "host", "instance_type", "gpu_type"))},
               CASE lower({v['status']}) {status_map} END AS status,
               CAST(coalesce(c_gpu_count, CASE WHEN len(uuids) > 0 THEN len(uuids) WHEN len(indices) > 0 THEN len(indices) END) AS INTEGER) AS gpu_count,
               uuids AS gpu_uuids, CAST(indices AS INTEGER[]) AS gpu_indices,
               make_timestamp(start_us)::TIMESTAMPTZ AS started_at, make_timestamp(end_us)::TIMESTAMPTZ AS ended_at,
               hours * 3600 AS duration_s, hours, hours_text,
               m_estimated_cost_usd IS NULL AND m_price_per_hour_usd IS NULL AND hours IS NOT NULL AS priced_from_catalog,
               CAST(m_price_per_hour_usd AS DECIMAL(38, 12)) AS price_per_hour_usd,
               CAST(coalesce(m_estimated_cost_usd, expected) AS DECIMAL(38, 12)) AS cost_usd,
               CASE WHEN m_estimated_cost_usd IS NOT NULL THEN 'given' WHEN expected IS NOT NULL THEN 'derived' END AS cost_source,
               CAST(m_estimated_cost_usd AS DECIMAL(38, 12)) AS cost_given_usd,
               n_throughput_examples_per_sec AS throughput_examples_per_s,
               coalesce(c_examples, CASE WHEN n_throughput_examples_per_sec IS NOT NULL AND hours IS NOT NULL
                                         THEN CAST(round_even(n_throughput_examples_per_sec * hours * 3600, 0) AS BIGINT) END) AS examples,
               CASE WHEN c_examples IS NOT NULL THEN 'given'
                    WHEN n_throughput_examples_per_sec IS NOT NULL AND hours IS NOT NULL THEN 'derived' END AS examples_source,
               n_val_metric AS val_metric, metric_name AS val_metric_name,
               CASE WHEN {present('goal')} THEN CASE lower({v['goal']}) {goal_map} END
                    WHEN list_has_any(regexp_split_to_array(lower(metric_name), '[^a-z0-9]+'), [{min_words}]) THEN 'min'
                    ELSE 'max' END AS metric_goal,
               n_target_metric AS target_metric, n_energy_kwh AS energy_kwh, n_emissions_kg AS emissions_kg,
               CASE WHEN tag_entries IS NOT NULL THEN map_from_entries(list_sort(list_transform(tag_entries, lambda e: {{
                   'key': e.key,
                   'value': CASE WHEN e.value IS NULL THEN '' ELSE CASE json_type(e.value) WHEN 'VARCHAR' THEN json_extract_string(e.value, '$')
                                                    WHEN 'BOOLEAN' THEN CASE WHEN CAST(e.value AS VARCHAR) = 'true' THEN 'True' ELSE 'False' END
                                                    WHEN 'NULL' THEN '' ELSE CAST(e.value AS VARCHAR) END END}}))) END AS tags,
               points,
               -- what SQL leaves to Python: a flag to write, a start to find, a price from the catalog
               start_us IS NOT NULL AND (m_price_per_hour_usd IS NULL OR hours IS NULL OR expected IS NOT NULL)
                   AND (end_us IS NULL OR end_us >= start_us)
                   AND make_timestamp(start_us)::TIMESTAMPTZ >= {EARLIEST} AND make_timestamp(start_us)::TIMESTAMPTZ < {LATEST}
                   AND (end_us IS NULL OR make_timestamp(end_us)::TIMESTAMPTZ < {LATEST})
                   AND NOT (us_start_time IS NOT NULL AND us_end_time IS NOT NULL AND n_duration_hours IS NOT NULL
                            AND abs(n_duration_hours - hours) > greatest({run_record.DURATION_TOLERANCE} * hours, 0.01))
                   AND NOT (m_estimated_cost_usd IS NOT NULL AND expected IS NOT NULL
                            AND abs(m_estimated_cost_usd - expected) > 0.01 AND abs(m_estimated_cost_usd - expected) * 100 > expected)
                   AND (c_examples IS NOT NULL OR n_throughput_examples_per_sec IS NULL OR hours IS NULL
                        OR n_throughput_examples_per_sec * hours * 3600 < 9e18) AS settled
        FROM costed"""


def _stage_batch(con, src: Source, ctx: ParseContext, prices, batch: str, raw_of_line: str | None = None,
                 unknown: set[str] | None = None) -> int:
    """Stage one batch of records (`batch` has line, raw and, for an array, ord); returns the runs it accepted
    (fields outside the run vocabulary, read in Python, added to `unknown`)."""
    ordered = "ord" if raw_of_line is not None else "line AS ord"
    con.execute(f"CREATE OR REPLACE TEMP VIEW records AS SELECT line, {ordered}, raw FROM {batch}")
    con.execute(f"CREATE OR REPLACE TEMP TABLE typed AS {_sql_ok_and_rows(ctx, 'records')}")
    # Each eval point of the runs SQL settled: a number `value`, `elapsed_s` >= 0 or none, a whole `step` or none.
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE points AS
        WITH each AS (
            SELECT ord, run_id, unnest(points) AS point, unnest(range(len(points))) AS seq FROM typed WHERE settled
        ), read AS (
            SELECT ord, run_id, seq, json_type(point) = 'OBJECT' AS object,
                   json_extract_string(point, ['$.value', '$.elapsed_s', '$.step']) AS v,
                   json_type(point, ['$.value', '$.elapsed_s', '$.step', '$.time']) AS t,
                   json_keys(point) AS keys
            FROM each
        )
        SELECT ord, run_id, seq, TRY_CAST(v[3] AS BIGINT) AS step, TRY_CAST(v[2] AS DOUBLE) AS elapsed_s,
               TRY_CAST(v[1] AS DOUBLE) AS value,
               coalesce(object AND len(keys) = len(list_distinct(keys))
                        AND t[1] IN {NUMBER_TYPES} AND isfinite(TRY_CAST(v[1] AS DOUBLE)) AND abs(TRY_CAST(v[1] AS DOUBLE)) <= {values.NUMBER_LIMIT}
                        AND (t[2] IS NULL OR t[2] = 'NULL' OR (t[2] IN {NUMBER_TYPES} AND TRY_CAST(v[2] AS DOUBLE) BETWEEN 0 AND {values.NUMBER_LIMIT}))
                        AND (t[3] IS NULL OR t[3] = 'NULL' OR (t[3] IN ('UBIGINT', 'BIGINT') AND TRY_CAST(v[3] AS BIGINT) IS NOT NULL))
                        AND (t[4] IS NULL OR t[4] = 'NULL'), false) AS ok
        FROM read""")
    con.execute("""
        UPDATE typed SET settled = false
        WHERE settled AND ord IN (SELECT ord FROM points WHERE NOT ok)""")
    _price_from_catalog(con, prices)
    con.execute("UPDATE typed SET settled = false WHERE settled AND cost_usd IS NULL")  # Python flags why
    columns = [name for name, *_ in con.execute("DESCRIBE runs").fetchall()]
    select = ", ".join("'runs' AS source_kind" if c == "source_kind" else "line AS source_line" if c == "source_line"
                       else "NULL AS load_id" if c == "load_id" else "NULL AS flags" if c == "flags" else c for c in columns)
    accepted = con.execute(f"INSERT INTO {STAGED_RUNS} SELECT {select}, ord FROM typed WHERE settled").fetchall()[0][0]
    con.execute(f"INSERT INTO {STAGED_EVALS} SELECT p.run_id, p.seq, p.step, p.elapsed_s, p.value, p.ord "
                "FROM points p SEMI JOIN typed t ON t.ord = p.ord AND t.settled")
    records = con.execute("SELECT count(*) FROM records").fetchall()[0][0]
    # every record settled (the usual batch): no need to look for the others
    suspects = [] if accepted == records else con.execute(
        "SELECT r.line, r.ord, r.raw FROM records r ANTI JOIN (SELECT ord FROM typed WHERE settled) s "
        f"USING (ord) WHERE {FILLED.format('r.raw')} ORDER BY r.ord").fetchall()
    if suspects:  # the exact reason, or a quirk the SQL does not read: Python, record by record
        log.debug("%s: %d records read in Python", src.name, len(suspects))
        accepted += _stage_in_python(con, src, ctx, prices, suspects, raw_of_line, unknown)
    return accepted


def _price_from_catalog(con, prices: config.Prices) -> None:
    """Price the settled runs without a cost or a price from the catalog (run_record.catalog_price):
    each distinct instance and GPU type looked up once in Python, the costs in SQL."""
    names = con.execute("SELECT DISTINCT instance_type, gpu_type FROM typed WHERE settled AND priced_from_catalog").fetchall()
    if not names:
        return
    money = pa.decimal128(38, 12)
    for table, lookup, index in (("catalog_instance", prices.instance, 0), ("catalog_gpu", prices.gpu, 1)):
        found = {name: lookup(name) for name in {row[index] for row in names} if name is not None}
        found = {name: price for name, price in found.items() if price is not None}
        arrow = pa.table({"name": pa.array(list(found), pa.string()),
                          "price": pa.array([price.quantize(values.MONEY_PLACES) for price in found.values()], money),
                          "exact": pa.array([price == price.quantize(values.MONEY_PLACES) for price in found.values()], pa.bool_())})
        con.register(table, arrow)
    try:
        con.execute(f"""
            CREATE OR REPLACE TEMP TABLE catalog_cost AS
            WITH priced AS (
                SELECT t.ord, hours, hours_text, coalesce(i.exact, true) AND coalesce(g.exact, true) AS exact,
                       CASE WHEN (coalesce(len(t.gpu_uuids), 0) > 0 OR coalesce(len(t.gpu_indices), 0) > 0)
                                 AND g.price IS NOT NULL AND coalesce(t.gpu_count, 0) <> 0 THEN g.price * t.gpu_count
                            WHEN i.price IS NOT NULL THEN i.price
                            WHEN g.price IS NOT NULL AND coalesce(t.gpu_count, 0) <> 0 THEN g.price * t.gpu_count END AS price
                FROM typed t LEFT JOIN catalog_instance i ON i.name = t.instance_type
                             LEFT JOIN catalog_gpu g ON g.name = t.gpu_type
                WHERE t.settled AND t.priced_from_catalog
            ), exact AS (
                SELECT *, CASE WHEN exact AND price = round(price, 6) AND price < 1e9 THEN price END AS price_6, CAST(price AS VARCHAR) AS price_text
                FROM priced
            )
            SELECT ord, price, {_cost('price_6', 'price_text')} AS cost FROM exact""")
    finally:
        con.unregister("catalog_instance")
        con.unregister("catalog_gpu")
    con.execute("UPDATE typed SET price_per_hour_usd = c.price, cost_usd = c.cost, cost_source = 'catalog' "
                "FROM catalog_cost c WHERE typed.ord = c.ord AND c.cost IS NOT NULL")
    con.execute("UPDATE typed SET settled = false FROM catalog_cost c WHERE typed.ord = c.ord "
                "AND c.price IS NOT NULL AND c.cost IS NULL")  # not exact here: Python prices it


def _stage_in_python(con, src: Source, ctx: ParseContext, prices, suspects, raw_of_line: str | None,
                     unknown: set[str] | None = None) -> int:
    """Stage records by run_record.build_run (as runs_json.parse reads them); returns the runs accepted."""
    runs, evals, rejects = [], [], []
    for line, ord_, raw in suspects:
        if not raw.strip():  # blank as Python reads blanks (a no-break space, say): skipped, as before
            continue
        shown = raw if raw_of_line is None else raw_of_line  # runs_json.parse shows an element's line
        record = run_record.json_record(line, raw)
        if isinstance(record, Reject):
            rejects.append((line, record.reason, record.raw if raw_of_line is None else shown))
            continue
        try:
            if not isinstance(record, dict):
                raise BadValue(f"expected a JSON object, got {type(record).__name__}")
            run, points = run_record.build_run(record, line, ctx, KIND, prices, unknown)
        except BadValue as error:
            rejects.append((line, str(error), shown))
            continue
        runs.append({**run, "ord": ord_})
        evals.extend({**point, "ord": ord_} for point in points)
    staging.add_rejects(con, src.name, rejects)
    _insert_dicts(con, STAGED_RUNS, runs)
    _insert_dicts(con, STAGED_EVALS, evals)
    return len(runs)


def _insert_dicts(con, table: str, rows: list[dict]) -> None:
    if not rows:
        return
    schema = staging.arrow_schema(con, table)
    arrow = pa.Table.from_pylist([{name: row.get(name) for name in schema.names} for row in rows], schema=schema)
    con.from_arrow(arrow).insert_into(table)


def _keep_latest(con) -> None:
    """Into `runs` and `run_evals`: each run_id's latest record and that record's eval points."""
    if con.execute(f"SELECT count(*) = count(DISTINCT run_id) FROM {STAGED_RUNS}").fetchall()[0][0]:
        # no run_id twice (the usual file): every record and eval point is its run's latest
        con.execute(f"INSERT INTO runs SELECT * EXCLUDE (ord) FROM {STAGED_RUNS}")
        con.execute(f"INSERT INTO run_evals SELECT * EXCLUDE (ord) FROM {STAGED_EVALS}")
        for table in (STAGED_RUNS, STAGED_EVALS):
            con.execute(f"DROP TABLE {table}")
        return
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE kept AS SELECT * FROM {STAGED_RUNS}
        QUALIFY row_number() OVER (PARTITION BY run_id ORDER BY ord DESC) = 1""")
    con.execute("INSERT INTO runs SELECT * EXCLUDE (ord) FROM kept")
    con.execute(f"INSERT INTO run_evals SELECT e.* EXCLUDE (ord) FROM {STAGED_EVALS} e SEMI JOIN kept k "
                "ON k.run_id = e.run_id AND k.ord = e.ord")
    for table in ("kept", STAGED_RUNS, STAGED_EVALS):
        con.execute(f"DROP TABLE {table}")
