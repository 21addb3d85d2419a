"""GPU traces in mlcost's own collector CSV (what `mlcost collect` writes, and the sample data).

Header `timestamp,host,gpu_index,gpu_uuid,gpu_name,power_w,energy_mj,gpu_util_pct,mem_used_mib`
(any order; other columns are ignored): one row per GPU per sample. `timestamp` is ISO-8601
(UTC with `Z`; naive times are read in --tz), `power_w` watts, `energy_mj` the GPU's
total-energy counter in millijoules since boot (empty where the GPU has none), `gpu_util_pct`
percent, `mem_used_mib` MiB. Empty fields are NULL. The host is --host, else the `host`
column, else the file name up to its first `_`.
"""
from __future__ import annotations

from datetime import timezone

import duckdb

from ingest import staging, traces, values
from ingest.contract import Lines, ParseContext, Parsed, Reject

KIND = "gpu-collector"
TABLES = (traces.TABLE,)
COLUMNS = ("timestamp", "host", "gpu_index", "gpu_uuid", "gpu_name", "power_w", "energy_mj",
           "gpu_util_pct", "mem_used_mib")
REQUIRED = ("timestamp", "gpu_index")


def sniff(name: str, head: str) -> bool:
    """A CSV header naming timestamp, gpu_index and power_w."""
    first = head.lstrip("\ufeff").lstrip().split("\n", 1)[0]
    columns = {c.strip().strip('"') for c in first.split(",")}
    return {"timestamp", "gpu_index", "power_w"} <= columns


def parse(lines: Lines, ctx: ParseContext) -> Parsed:
    numbered = iter(lines)
    header_line, header = 0, None
    for number, line in numbered:
        if line.strip():
            header_line, header = number, [c.strip().strip('"').lstrip("\ufeff") for c in line.split(",")]
            break
    if header is None:
        return traces.failed("the file is empty")
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        return traces.failed(f"the header lacks {', '.join(missing)} (expected {','.join(COLUMNS)})",
                             header_line, ",".join(header))
    kept_lines, kept_texts, early = [], [], []
    for number, line in numbered:
        if not line.strip():
            continue
        fields = traces.field_count(line)
        if fields != len(header):
            early.append((number, f"expected {len(header)} fields as in the header, got {fields}", line))
            continue
        kept_lines.append(number)
        kept_texts.append(line)
    rows = traces.Rows(kept_lines, kept_texts)
    rows.rejects = [Reject(number, reason, raw) for number, reason, raw in early]
    table = traces.read_csv_text(header, kept_texts)

    def column(name: str):
        return table[name] if name in header else None

    found = {
        "sampled_at": traces.times(rows, table["timestamp"], ctx.tz),
        "host": traces.hosts(column("host"), len(rows), ctx),
        "gpu_index": traces.numbers(rows, traces.text(table["gpu_index"]), "gpu_index"),
    }
    for name in ("gpu_uuid", "gpu_name"):
        if name in header:
            found[name] = traces.text(table[name])
    for name in ("power_w", "energy_mj", "gpu_util_pct", "mem_used_mib"):
        if name in header:
            found[name] = traces.numbers(rows, table[name], name)
    return traces.build(rows, found, KIND)


totals = traces.totals


# --- columnar path: every batch of lines typed and checked in SQL ---------------------------
# A line is loaded straight from SQL when every value matches a strict pattern (what TRY_CAST
# alone would accept is wider: '1_000', ' 12 ', 'NaN', '1e400') and is in range. A line with the
# wrong field count and no quotes is refused in SQL; every other line (quotes, a value the
# patterns do not cover, a bad value) goes through `parse` above, which names the exact reason.
ISO_TIME = r"\d{4}-\d{2}-\d{2}([T ]([01]\d|2[0-3]):[0-5]\d(:[0-5]\d(\.\d{1,6})?)?)?"
OFFSET = r"(Z|[+-]([01]\d|2[0-3]):[0-5]\d)"
ISO_WITH_OFFSET = ISO_TIME.removesuffix("?") + OFFSET
NUMBER = values.NUMBER_TEXT  # the one spelling of a number, as the Python path reads it
WHOLE = r"[+-]?\d{1,18}"
NUMERIC = ("power_w", "energy_mj", "gpu_util_pct", "mem_used_mib")


def stage(src, con, ctx: ParseContext):
    """Stage the file's samples and rejects in `con` (see the columnar path above)."""
    header_line, header, accepted, zone = 0, None, 0, _sql_zone(con, ctx)
    for batch in staging.line_batches(src):
        con.register("batch", batch)
        try:
            if header is None:
                header_line, text = _first_filled(con, 0)
                if header_line is None:
                    continue
                header = [c.strip().strip('"').lstrip("\ufeff") for c in text.split(",")]
                missing = [c for c in REQUIRED if c not in header]
                if missing:
                    staging.add_rejects(con, src.name, [(header_line, f"the header lacks {', '.join(missing)} "
                                                                      f"(expected {','.join(COLUMNS)})", ",".join(header))])
                    return traces.stage_totals(con, 0)
            accepted += _stage_batch(con, src, ctx, header_line, header, zone)
        finally:
            con.unregister("batch")
    if header is None:
        staging.add_rejects(con, src.name, [(0, "the file is empty", "")])
    return traces.stage_totals(con, accepted)


def _first_filled(con, after: int) -> tuple[int | None, str | None]:
    rows = con.execute("SELECT line, raw FROM batch WHERE line > ? AND trim(raw, ?) <> '' ORDER BY line LIMIT 1",
                       [after, BLANK]).fetchall()
    return (rows[0][0], rows[0][1]) if rows else (None, None)


BLANK = " \t\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0"  # what Python's str.strip() removes (ASCII and common)


def _sql_zone(con, ctx: ParseContext) -> str | None:
    """The IANA name of --tz when DuckDB knows it (naive times are then read in SQL), else None."""
    if ctx.tz is timezone.utc:
        return "UTC"
    name = getattr(ctx.tz, "key", None)
    try:
        con.execute("SELECT timezone(?, TIMESTAMP '2000-01-01')", [name]).fetchall()[0]
    except duckdb.Error:
        return None
    return name


def _line_pattern(header: list[str]) -> str:
    """The whole of a plain line, for one regular-expression match per line: each known column
    in its strict form (a number, a whole number, an ISO time; blank where it may be), any other
    column text without commas or quotes, as many fields as the header."""
    spaced = {name: f" *({pattern})? *" for name, pattern in (
        ("power_w", NUMBER), ("gpu_util_pct", NUMBER), ("mem_used_mib", NUMBER), ("energy_mj", WHOLE))}
    spaced["gpu_index"] = f" *{WHOLE} *"
    day = r"\d{4}-\d{2}-\d{2}"
    slashed = r"(\d{4}-\d{2}-\d{2}|\d{4}/\d{2}/\d{2})"  # `parse` reads 2025/05/05 as 2025-05-05
    spaced["timestamp"] = " *" + slashed + ISO_TIME.removeprefix(day) + OFFSET + "? *"
    return ",".join(spaced.get(name, '[^,"]*') for name in header)


def _stage_batch(con, src, ctx: ParseContext, header_line: int, header: list[str], zone: str | None) -> int:
    """Stage one batch of lines; returns the samples it accepted."""
    width = len(header)

    def field(name: str) -> str:
        return f"nullif(trim(f[{header.index(name) + 1}]), '')" if name in header else "NULL"

    stamp = field("timestamp")
    stamp = f"CASE WHEN contains({stamp}, '/') THEN regexp_replace({stamp}, '^(\\d{{4}})/(\\d{{2}})/(\\d{{2}})', " \
            f"'\\1-\\2-\\3') ELSE {stamp} END"
    # With --tz UTC (the default) a naive time casts as it is; in another zone it is read there,
    # except near a change of offset (summer time), which is left to Python's rule (fold=0).
    sampled_at = ("TRY_CAST(stamp AS TIMESTAMPTZ)" if zone == "UTC" else
                  f"CASE WHEN regexp_full_match(stamp, '{ISO_WITH_OFFSET}') THEN TRY_CAST(stamp AS TIMESTAMPTZ) END"
                  if zone is None else
                  f"CASE WHEN regexp_full_match(stamp, '{ISO_WITH_OFFSET}') THEN TRY_CAST(stamp AS TIMESTAMPTZ) "
                  "ELSE (CASE WHEN timezone($zone, @t - INTERVAL 3 HOUR) + INTERVAL 3 HOUR = timezone($zone, @t) "
                  "AND timezone($zone, @t + INTERVAL 3 HOUR) - INTERVAL 3 HOUR = timezone($zone, @t) "
                  "THEN timezone($zone, @t) END) END").replace("@t", "TRY_CAST(stamp AS TIMESTAMP)")
    host = ("$host" if ctx.host else f"coalesce({field('host')}, $file_host)")
    params = {"header_line": header_line, "pattern": _line_pattern(header),
              "file_host": traces.file_host(ctx.source)}
    if zone not in (None, "UTC"):
        params["zone"] = zone
    if ctx.host:
        params = {**params, "host": ctx.host}
        del params["file_host"]
    in_range = " AND ".join(
        f"({name}_t IS NULL OR (isfinite({name}::DOUBLE) "
        f"AND {name} BETWEEN {traces.LIMITS[name][0]} AND {traces.LIMITS[name][1]}))" for name in NUMERIC)
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE typed AS
        WITH split AS (  -- a plain line is checked by one pattern; the others are looked at closer
            SELECT line, raw, regexp_full_match(raw, $pattern) AS plain, string_split(raw, ',') AS f
            FROM batch WHERE line > $header_line AND raw <> ''
        ), fields AS (
            SELECT line, plain, len(f) AS fields, NOT plain AND contains(raw, '"') AS quoted,
                   NOT plain AND len(f) = 1 AND regexp_full_match(raw, '\\s*') AS blank,  -- skipped, as `parse` does
                   {stamp} AS stamp, {host} AS host, {field('gpu_index')} AS gpu_index_t,
                   {field('gpu_uuid')} AS gpu_uuid, {field('gpu_name')} AS gpu_name,
                   {", ".join(f"{field(name)} AS {name}_t" for name in NUMERIC)}
            FROM split
        ), typed AS (
            SELECT *,
                   CASE WHEN plain THEN {sampled_at} END AS sampled_at,
                   CASE WHEN plain THEN TRY_CAST(gpu_index_t AS BIGINT) END AS gpu_index,
                   {", ".join(f"CASE WHEN plain THEN TRY_CAST({name}_t AS {'BIGINT' if name == 'energy_mj' else 'DOUBLE'}) "
                              f"END AS {name}" for name in NUMERIC)}
            FROM fields
        )
        SELECT line, fields, quoted, blank, host, gpu_index, sampled_at, gpu_uuid, gpu_name, {", ".join(NUMERIC)},
               coalesce(plain AND sampled_at >= TIMESTAMPTZ '1990-01-01 00:00:00+00'
                        AND sampled_at < TIMESTAMPTZ '2100-01-01 00:00:00+00' AND host IS NOT NULL
                        AND gpu_index BETWEEN 0 AND 65535 AND {in_range}, false) AS ok
        FROM typed""", params)
    accepted = con.execute(f"""
        INSERT INTO {traces.TABLE} (host, gpu_index, sampled_at, gpu_uuid, gpu_name, power_w, energy_mj,
                                    gpu_util_pct, mem_used_mib, source_kind, source_line)
        SELECT host, gpu_index, sampled_at, gpu_uuid, gpu_name, power_w, energy_mj, gpu_util_pct, mem_used_mib,
               '{KIND}', line FROM typed WHERE ok""").fetchall()[0][0]
    con.execute("INSERT INTO rejects SELECT NULL, ?, line, format('expected {} fields as in the header, got {}', ?, "
                "fields), left(raw, 500) FROM typed JOIN batch USING (line) "
                "WHERE NOT ok AND NOT quoted AND NOT blank AND fields <> ?", [src.name, width, width])
    suspects = con.execute("SELECT line, raw FROM typed JOIN batch USING (line) "
                           "WHERE NOT ok AND NOT blank AND (quoted OR fields = ?) ORDER BY line", [width]).fetchall()
    if suspects:  # the exact reason, or a quirk the patterns do not cover: Python, line by line
        parsed = parse([(header_line, ",".join(header))] + suspects, ctx)
        staging.insert_parsed(con, parsed, src.name)
        accepted += parsed.accepted
    return accepted
