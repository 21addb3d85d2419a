"""CodeCarbon emissions.csv, every schema generation, as runs with measured energy and emissions.

CodeCarbon writes one row per tracked run when it stops: `timestamp` is the stop time
(local time without offset: read in --tz), `duration` is seconds, `energy_consumed` kWh
and `emissions` kg CO2e. The oldest schema has no run_id; rows without one get a stable
id derived from project, timestamp and duration, so re-loading never duplicates them.
"""
from __future__ import annotations

import csv
import hashlib
from functools import partial

from ingest.engine import batch_sql, line_sql, reader, staging, values
from ingest.engine.contract import BadValue, Lines, ParseContext, Parsed, Reject
from ingest.engine.definition import (COUNT, MONEY, NUMBER, TEXT, TIME, Default, Definition, Detect, Field, HashedId,
                                      HourlyCost, Hours, Key, Prefer, Required, Tags, Total)
from ingest.engine.definition import TEXT_MAP
from ingest.formats.runs import run_record
from ingest.formats.runs.run_record import build_run, collect, run_totals, to_parsed
from ingest.settings import config

KIND = "codecarbon"
LOCAL_TIME = True  # writes local times without a zone: loader warns when no --tz was given
TABLES = ("runs", "run_evals")
REQUIRED = ("timestamp", "project_name", "duration", "emissions", "energy_consumed")
TAG_COLUMNS = ("experiment_id", "country_iso_code", "country_name", "cpu_model", "os",
               "tracking_mode", "codecarbon_version", "pue", "on_cloud", "cloud_provider")



def _incomplete(column: str) -> tuple:
    """The column read as text first, so an empty one names the reason before any value is typed
    (a later Field of the same column decides how SQL spells it: the typed one must come after)."""
    return (Field(f"{column}_written", TEXT, names=(column,), stored=False),
            Required(f"{column}_written", f"{column} is empty: CodeCarbon wrote an incomplete row"))


# The format as one definition (not the loader's path yet: tests/test_codecarbon_definition.py
# compares it with parse/stage below, and lists what it does not state yet).
CODECARBON = Definition(
    kind=KIND,
    table="runs",
    detect=Detect(all_of=("timestamp", "project_name", "energy_consumed"), any_of=("timestamp",)),
    header_requires=("timestamp_written", "project", "duration_written", "emissions_written", "energy_consumed_written"),
    header_reason="not a CodeCarbon header",
    steps=(  # in the order the old reader checked them: the first that fails names the reason
        *_incomplete("timestamp"), *_incomplete("energy_consumed"), *_incomplete("emissions"), *_incomplete("duration"),
        Field("duration_hours", NUMBER, names=("duration",), unit="s read as h", divide_by=3600,
              limit=run_record.MAX_RUN_HOURS * 3600, stored=False),
        Field("ended_at", TIME, names=("timestamp",)),  # the stop time (local time: --tz)
        Field("started_at", TIME, names=("started_at",)),  # CodeCarbon never writes it: from the end - duration
        Hours("started_at", "ended_at", "duration_hours", seconds="duration_s", tolerance=0.01, differs=""),
        Field("gpu_count", COUNT, unit="GPUs", maximum=run_record.MAX_GPUS),
        Field("gpu_type", TEXT, names=("gpu_model",)),
        Field("price_per_hour_usd", MONEY, names=("price_per_hour_usd",), unit="USD/h"),
        Field("cost_given_usd", MONEY, names=("cost_given_usd",), unit="USD"),
        HourlyCost("cost_usd", source="cost_source", given="cost_given_usd", price="price_per_hour_usd",
                   hours="duration_hours", per=(("gpu", "gpu_type", "gpu_count", ()),),
                   differs="", open="", unpriced=""),  # the catalog's GPU price x gpu_count x hours, else no cost
        Field("energy_kwh", NUMBER, names=("energy_consumed",), unit="kWh"),
        Field("emissions_kg", NUMBER, names=("emissions",), unit="kg CO2e"),
        Field("val_metric_name", TEXT, names=("val_metric_name",)),
        Default("val_metric_name", "val_metric"),
        Field("metric_goal", TEXT, names=("metric_goal",)),
        Default("metric_goal", "max"),
        Field("run_id", TEXT),
        Field("project", TEXT, names=("project_name",)),
        Field("region", TEXT, names=("region", "country_name")),
        Field("cloud_region", TEXT, stored=False),
        Field("on_cloud", TEXT, stored=False),
        Prefer("region", of="cloud_region", when="on_cloud", equals="Y"),
        *(Field(f"tag_{name}", TEXT, names=(name,), stored=False) for name in TAG_COLUMNS),
        Field("tags", TEXT_MAP, names=("tags",)),
        Tags("tags", tuple((name, f"tag_{name}") for name in TAG_COLUMNS)),
        # the oldest schema has no run_id: the id the old reader derived (the values as written)
        HashedId("run_id", ("project", "timestamp_written", "duration_written"), prefix="codecarbon-", raw=True,
                 stand_ins=("unknown",)),
    ),
    key=Key("run_id", ("run_id",)),
    csv_only=True,
    empty_reason="not a CodeCarbon header: missing " + ", ".join(REQUIRED),
    flags="flags",
    totals=(
        Total("runs", "rows"),
        Total("cost_usd_total", "money", "cost_usd"),
        Total("runs_with_cost", "present", "cost_usd"),
        Total("energy_kwh_total", "float", "energy_kwh"),
        Total("runs_with_energy", "present", "energy_kwh"),
    ),
)
new_parse = partial(reader.parse, CODECARBON)     # (lines, ctx, prices=None) -> Parsed, line by line
new_stage = partial(batch_sql.stage, CODECARBON)  # (src, con, ctx) -> Staged: the SQL pass


def sniff(name: str, head: str) -> bool:
    """A CSV whose header carries CodeCarbon's own column names."""
    header = head.lstrip("\ufeff").split("\n", 1)[0]
    return all(column in header for column in ("timestamp", "project_name", "energy_consumed"))


def parse(lines: Lines, ctx: ParseContext) -> Parsed:
    parsed, latest = Parsed(), {}
    prices = config.load().prices  # runs without a price are priced from the catalog
    rows = iter(lines)
    header_line, header_text = next(rows, (0, ""))
    header = next(csv.reader([header_text.lstrip("\ufeff")]), [])
    missing = [column for column in REQUIRED if column not in header]
    if missing:
        parsed.rejects.append(Reject(header_line, f"not a CodeCarbon header: missing {', '.join(missing)}", header_text))
        return parsed
    for line, text in rows:
        if not text.strip():
            continue
        try:
            fields = next(csv.reader([text]))
        except csv.Error as error:
            parsed.rejects.append(Reject(line, f"unreadable CSV: {error}", text[:500]))
            continue
        try:
            if len(fields) != len(header):
                raise BadValue(f"has {len(fields)} fields, the header has {len(header)}")
            collect(latest, *build_run(_as_run_record(dict(zip(header, fields)), ctx), line, ctx, KIND, prices))
            parsed.accepted += 1
        except BadValue as error:
            parsed.rejects.append(Reject(line, str(error), text))
    return to_parsed(latest, parsed)


totals = run_totals


def _as_run_record(row: dict[str, str], ctx: ParseContext) -> dict:
    """The CodeCarbon row in the run-summary vocabulary."""
    for column in ("timestamp", "energy_consumed", "emissions", "duration"):
        if values.is_absent(row.get(column)):
            raise BadValue(f"{column} is empty: CodeCarbon wrote an incomplete row")
    duration_s = values.number(row["duration"], "duration")
    ended = values.timestamp(row["timestamp"], "timestamp", ctx.tz)
    on_cloud = (row.get("on_cloud") or "").strip().upper() == "Y"
    run_id = row.get("run_id") or _derived_id(row)
    return {
        "run_id": run_id,
        "project": row["project_name"],
        "end_time": ended.isoformat(),
        "duration_hours": duration_s / 3600,
        "energy_kwh": values.number(row["energy_consumed"], "energy_consumed"),
        "emissions_kg": values.number(row["emissions"], "emissions"),
        "region": (row.get("cloud_region") if on_cloud else None) or row.get("region") or row.get("country_name"),
        "gpu_type": row.get("gpu_model"),
        "gpu_count": row.get("gpu_count"),
        "tags": {column: row[column] for column in TAG_COLUMNS if not values.is_absent(row.get(column))},
    }


def _derived_id(row: dict[str, str]) -> str:
    identity = "|".join(row.get(column, "") for column in ("project_name", "timestamp", "duration"))
    return "codecarbon-" + hashlib.sha256(identity.encode()).hexdigest()[:12]


# --- columnar path: each batch of lines typed and checked in SQL -----------------------------
# A plain line (no quotes, the header's field count, every value CodeCarbon's own spelling: an
# ISO time, decimal numbers, text without blanks at its edges) becomes its `runs` row in SQL, as
# `build_run` would make it; every other line goes through `parse` above, which names the exact
# reason. A run the price catalog prices (a known GPU model) goes through `parse` too: its cost
# is Decimal arithmetic done once in Python.
NUMBER = r"-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]{1,3})?"  # read alike by DuckDB and Python's float()
US_PER_HOUR = 3_600_000_000


def stage(src: staging.Source, con, ctx: ParseContext) -> staging.Staged:
    """Stage the file's runs and rejects in `con` (see the columnar path above)."""
    header, header_line, header_text, accepted = None, 0, "", 0
    zone = line_sql.sql_zone(con, ctx.tz)
    prices = config.load().prices
    for batch in staging.line_batches(src):
        con.register("batch", batch)
        try:
            if header is None:
                header_line, header_text = line_sql.first_filled(con, src, skip_blank=False)  # even blank, as `parse`
                if header_line is None:  # only lines too long so far
                    continue
                header = next(csv.reader([header_text.lstrip("\ufeff")]), [])
                missing = [column for column in REQUIRED if column not in header]
                if missing:
                    staging.add_rejects(con, src.name, [(header_line, "not a CodeCarbon header: missing "
                                                                      f"{', '.join(missing)}", header_text)])
                    return staging.Staged(0, run_record.staged_run_totals(con))
            accepted += _stage_batch(con, src, ctx, (header_line, header_text), header, zone, prices)
        finally:
            con.unregister("batch")
    if header is None:  # no line at all: refused as `parse` refuses it
        staging.add_rejects(con, src.name, [(0, f"not a CodeCarbon header: missing {', '.join(REQUIRED)}", "")])
    return staging.Staged(accepted, run_record.staged_run_totals(con))


def _stage_batch(con, src: staging.Source, ctx: ParseContext, header_row: tuple[int, str], header: list[str],
                 zone: str | None, prices: config.Prices) -> int:
    """Stage one batch of lines; returns the runs it accepted (a repeated run_id counts twice)."""
    where = {name: position + 1 for position, name in enumerate(header)}  # a repeated name: its last column, as dict(zip())

    def field(name: str) -> str:
        return f"f[{where[name]}]" if name in where else "NULL"

    def text(name: str) -> str:
        return f"nullif({field(name)}, '')" if name in where else "NULL"

    pieces = {"timestamp": f"{line_sql.DAY}[T ]{line_sql.CLOCK}{line_sql.OFFSET}?",
              "duration": NUMBER, "emissions": NUMBER, "energy_consumed": NUMBER, "gpu_count": f"({NUMBER})?"}
    pattern = ",".join(pieces.get(name, line_sql.TEXT) for name in header)
    seconds = f"TRY_CAST({field('duration')} AS DOUBLE)"  # hours only where Python takes them (no overflow below)
    hours = f"CASE WHEN {seconds} BETWEEN 0 AND {values.NUMBER_LIMIT} AND {seconds} / 3600.0 <= {run_record.MAX_RUN_HOURS} " \
            f"THEN {seconds} / 3600.0 END"
    tags = sorted(column for column in TAG_COLUMNS if column in where)
    tag_map = (f"map_from_entries(list_filter([{', '.join(f'{{k: {sql_text(c)}, v: {field(c)}}}' for c in tags)}], "
               "lambda t: t.v <> ''))" if tags else "MAP {}")
    on_cloud = f"upper({field('on_cloud')}) = 'Y'" if "on_cloud" in where else "false"
    region = (f"CASE WHEN {on_cloud} AND {text('cloud_region')} IS NOT NULL THEN {text('cloud_region')} "
              f"ELSE coalesce({text('region')}, {text('country_name')}) END")
    identity = " || '|' || ".join(f"coalesce({field(c)}, '')" for c in ("project_name", "timestamp", "duration"))
    run_id = f"coalesce({text('run_id')}, 'codecarbon-' || sha256({identity})[:12])"
    params = {"header_line": header_row[0], "pattern": pattern, "blank": line_sql.BLANK_LINE}
    if zone not in (None, "UTC"):
        params["zone"] = zone
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE cc_batch AS
        WITH split AS (
            SELECT line, raw, regexp_full_match(raw, $pattern) AS plain, string_split(raw, ',') AS f
            FROM batch WHERE line > $header_line
        ), typed AS (
            SELECT line, plain, len(f) AS fields, NOT plain AND regexp_matches(raw, '["\\x00\\r]') AS quoted,
                   NOT plain AND regexp_full_match(raw, $blank) AS blank,
                   CASE WHEN plain THEN {line_sql.instant(field('timestamp'), zone)} END AS ended_at,
                   CASE WHEN plain THEN {hours} END AS hours,
                   CASE WHEN plain THEN TRY_CAST({field('energy_consumed')} AS DOUBLE) END AS energy_kwh,
                   CASE WHEN plain THEN TRY_CAST({field('emissions')} AS DOUBLE) END AS emissions_kg,
                   CASE WHEN plain THEN TRY_CAST({text('gpu_count')} AS DOUBLE) END AS gpu_count,
                   CASE WHEN plain THEN {run_id} END AS run_id, CASE WHEN plain THEN {text('project_name')} END AS project,
                   CASE WHEN plain THEN {region} END AS region, CASE WHEN plain THEN {text('gpu_model')} END AS gpu_type,
                   CASE WHEN plain THEN {tag_map} END AS tags
            FROM split
        ), timed AS (  -- timedelta(hours=h), to the microsecond as Python rounds it (half to even)
            SELECT *, whole_us + CASE WHEN left_us > 0.5 OR (left_us = 0.5 AND whole_us % 2 = 1) THEN 1 ELSE 0 END AS span_us
            FROM (SELECT *, CAST(trunc(hours) AS BIGINT) * {US_PER_HOUR} + CAST(trunc(part_us) AS BIGINT) AS whole_us,
                         part_us - trunc(part_us) AS left_us
                  FROM (SELECT *, (hours - trunc(hours)) * {float(US_PER_HOUR)} AS part_us FROM typed))
        )
        SELECT *, coalesce(plain AND {line_sql.in_years('ended_at')} AND hours IS NOT NULL
                           AND energy_kwh BETWEEN 0 AND {values.NUMBER_LIMIT} AND emissions_kg BETWEEN 0 AND {values.NUMBER_LIMIT}
                           AND (gpu_count IS NULL OR (gpu_count BETWEEN 0 AND {run_record.MAX_GPUS} AND gpu_count = trunc(gpu_count)))
                           AND run_id <> 'unknown', false) AS ok
        FROM timed""", params)
    models = con.execute("SELECT DISTINCT gpu_type FROM cc_batch WHERE ok AND gpu_count > 0 AND gpu_type IS NOT NULL").fetchall()
    priced = [model for (model,) in models if prices.gpu(model) is not None]
    if priced:  # the catalog prices these runs: their cost is Decimal arithmetic, done by `parse`
        con.execute("UPDATE cc_batch SET ok = false WHERE ok AND gpu_count > 0 AND list_contains(?, gpu_type)", [priced])
    accepted = con.execute(f"""
        INSERT INTO runs (run_id, project, region, gpu_type, gpu_count, started_at, ended_at, duration_s, energy_kwh,
                          emissions_kg, val_metric_name, metric_goal, tags, source_kind, source_line)
        SELECT run_id, project, region, gpu_type, CAST(gpu_count AS INTEGER), ended_at - to_microseconds(span_us),
               ended_at, hours * 3600.0, energy_kwh, emissions_kg, 'val_metric', 'max', tags, '{KIND}', line
        FROM cc_batch WHERE ok""").fetchall()[0][0]
    con.execute(f"""INSERT INTO rejects SELECT NULL, ?, line, format('has {{}} fields, the header has {len(header)}', fields),
                    left(raw, 500) FROM cc_batch JOIN batch USING (line)
                    WHERE NOT ok AND NOT blank AND NOT quoted AND fields <> {len(header)}""", [src.name])
    suspects = con.execute(f"SELECT line, raw FROM cc_batch JOIN batch USING (line) WHERE NOT ok AND NOT blank "
                           f"AND (quoted OR fields = {len(header)}) ORDER BY line").fetchall()
    if suspects:  # the exact reason, or what SQL does not settle: Python, line by line
        parsed = parse([header_row] + suspects, ctx)
        staging.insert_parsed(con, parsed, src.name)
        accepted += parsed.accepted
    return accepted


def sql_text(value: str) -> str:
    """A column name as an SQL string literal (names come from the file's header)."""
    return "'" + value.replace("'", "''") + "'"
