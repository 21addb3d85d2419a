"""GPU traces in mlcost's own collector CSV (what `mlcost collect` writes, and the sample data).

Header `timestamp,host,gpu_index,gpu_uuid,gpu_name,power_w,energy_mj,gpu_util_pct,mem_used_mib`
(any order; other columns are ignored): one row per GPU per sample. `timestamp` is ISO-8601
(UTC with `Z`; naive times are read in --tz), `power_w` watts, `energy_mj` the GPU's
total-energy counter in millijoules since boot (empty where the GPU has none), `gpu_util_pct`
percent, `mem_used_mib` MiB. Empty fields are NULL. The host is --host, else the `host`
column, else the file name up to its first `_`.
"""
from __future__ import annotations

from ingest.engine import line_sql, staging, values
from ingest.engine.contract import Lines, ParseContext, Parsed, Reject
from ingest.formats.gpu import traces

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
# alone would accept is wider: '1_000', ' 12 ', 'NaN', '1e400') and is in range. One INSERT per
# batch stages every line: a line SQL does not settle is staged too, as a placeholder with its
# line number negated and its text in `pod` (a column this kind never fills), so the batch is
# read once and never joined back. After the last batch the placeholders are settled: a line with
# the wrong field count and no quotes is refused in SQL; every other one (quotes, a value the
# patterns do not cover, a bad value) goes through `parse` above, which names the exact reason.
ISO_TIME = r"\d{4}-\d{2}-\d{2}([T ]([01]\d|2[0-3]):[0-5]\d(:[0-5]\d(\.\d{1,6})?)?)?"
OFFSET = r"(Z|[+-]([01]\d|2[0-3]):[0-5]\d)"
NUMBER = values.NUMBER_TEXT  # the one spelling of a number, as the Python path reads it
WHOLE = r"[+-]?\d{1,18}"
NUMERIC = ("power_w", "energy_mj", "gpu_util_pct", "mem_used_mib")
# A commit per batch's INSERT cost ~60 ms CPU (a 1M-row file: 1 s of 3); uncommitted rows are
# held apart until their commit, so a few batches at a time keep memory bounded.
COMMIT_BATCHES = 8
SUSPECT_PAGE = 50_000  # placeholders read back into Python at a time (memory stays bounded)


def stage(src, con, ctx: ParseContext):
    """Stage the file's samples and rejects in `con` (see the columnar path above)."""
    con.execute("BEGIN TRANSACTION")  # batches committed COMMIT_BATCHES at a time (see there)
    try:
        header_line, header = _stage_batches(src, con, ctx)
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")
    if header is None:
        return traces.stage_totals(con, 0)
    accepted = con.execute(f"SELECT count(*) FROM {traces.TABLE} WHERE source_line > 0").fetchall()[0][0]
    return traces.stage_totals(con, accepted + _settle(con, src, ctx, header_line, header))


def _stage_batches(src, con, ctx: ParseContext) -> tuple[int, list[str] | None]:
    """Every batch's lines staged by one INSERT; the header's line and columns, None when the file
    is refused for its header (or has none: the reject is staged)."""
    header_line, header, zone, insert, done = 0, None, line_sql.sql_zone(con, ctx.tz), None, 0
    for batch in staging.line_batches(src):
        con.register("batch", batch)
        try:
            if header is None:
                header_line, text = line_sql.first_filled(con, src)
                if header_line is None:
                    continue
                header = [c.strip().strip('"').lstrip("\ufeff") for c in text.split(",")]
                missing = [c for c in REQUIRED if c not in header]
                if missing:
                    staging.add_rejects(con, src.name, [(header_line, f"the header lacks {', '.join(missing)} "
                                                                      f"(expected {','.join(COLUMNS)})", ",".join(header))])
                    return header_line, None
                insert = _insert_sql(ctx, header, zone)
            con.execute(insert, _params(ctx, header, header_line, zone))
            done += 1
            if done % COMMIT_BATCHES == 0:
                con.execute("COMMIT; BEGIN TRANSACTION")
        finally:
            con.unregister("batch")
    if header is None:
        staging.add_rejects(con, src.name, [(0, "the file is empty", "")])
    return header_line, header


def _line_pattern(header: list[str], spaced: bool = True) -> str:
    """The whole of a plain line, for one regular-expression match per line: each known column
    in its strict form (a number, a whole number, an ISO time; blank where it may be), any other
    column text without commas or quotes, as many fields as the header. Not `spaced`: no blank
    around the known columns' values either (a line the SQL can then read without trimming)."""
    pad = " *" if spaced else ""
    forms = {name: f"{pad}({pattern})?{pad}" for name, pattern in (
        ("power_w", NUMBER), ("gpu_util_pct", NUMBER), ("mem_used_mib", NUMBER), ("energy_mj", WHOLE))}
    forms["gpu_index"] = f"{pad}{WHOLE}{pad}"
    day = r"\d{4}-\d{2}-\d{2}"
    slashed = r"(\d{4}-\d{2}-\d{2}|\d{4}/\d{2}/\d{2})"  # `parse` reads 2025/05/05 as 2025-05-05
    forms["timestamp"] = pad + slashed + ISO_TIME.removeprefix(day) + OFFSET + "?" + pad
    return ",".join(forms.get(name, '[^,"]*') for name in header)


def _params(ctx: ParseContext, header: list[str], header_line: int, zone: str | None) -> dict:
    params = {"header_line": header_line, "tight": _line_pattern(header, spaced=False),
              "pattern": _line_pattern(header)}
    if ctx.host:
        params["host"] = ctx.host
    else:
        params["file_host"] = traces.file_host(ctx.source)
    if zone not in (None, "UTC"):
        params["zone"] = zone
    return params


def _insert_sql(ctx: ParseContext, header: list[str], zone: str | None) -> str:
    """One batch's INSERT into gpu_samples: a good line as its sample, any other as a placeholder."""
    def field(name: str) -> str:
        # A tight line's fields need no trimming (the costliest step of all when done for every line).
        if name not in header:
            return "NULL"
        at = f"f[{header.index(name) + 1}]"
        return f"nullif(CASE WHEN tight THEN {at} ELSE trim({at}) END, '')"

    stamp = field("timestamp")
    stamp = f"CASE WHEN contains({stamp}, '/') THEN regexp_replace({stamp}, '^(\\d{{4}})/(\\d{{2}})/(\\d{{2}})', " \
            f"'\\1-\\2-\\3') ELSE {stamp} END"
    sampled_at = line_sql.instant("stamp", zone)
    host = "$host" if ctx.host else f"coalesce({field('host')}, $file_host)"
    in_range = " AND ".join(
        f"({name}_t IS NULL OR (isfinite({name}::DOUBLE) "
        f"AND {name} BETWEEN {traces.LIMITS[name][0]} AND {traces.LIMITS[name][1]}))" for name in NUMERIC)
    ok = (f"coalesce(plain AND sampled_at >= TIMESTAMPTZ '1990-01-01 00:00:00+00' "
          f"AND sampled_at < TIMESTAMPTZ '2100-01-01 00:00:00+00' AND host IS NOT NULL "
          f"AND gpu_index BETWEEN 0 AND 65535 AND {in_range}, false)")
    # CASE runs each branch only on its own rows: the spaced pattern and the trims only where a
    # line is not tight, the casts only on plain lines.
    return f"""
        INSERT INTO {traces.TABLE} (host, gpu_index, sampled_at, gpu_uuid, gpu_name, power_w, energy_mj,
                                    gpu_util_pct, mem_used_mib, pod, source_kind, source_line)
        WITH split AS (
            SELECT line, raw, tight, CASE WHEN tight THEN true ELSE regexp_full_match(raw, $pattern) END AS plain,
                   string_split(raw, ',') AS f
            FROM (SELECT line, raw, regexp_full_match(raw, $tight) AS tight FROM batch
                  WHERE line > $header_line AND raw <> '')
        ), fields AS (
            SELECT line, raw, plain, {stamp} AS stamp, {host} AS host, {field('gpu_index')} AS gpu_index_t,
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
        ), checked AS (
            SELECT *, {ok} AS ok FROM typed
        )
        SELECT host, CASE WHEN ok THEN gpu_index END, sampled_at, gpu_uuid, gpu_name, {", ".join(NUMERIC)},
               CASE WHEN NOT ok THEN raw END, '{KIND}', CASE WHEN ok THEN line ELSE -line END
        FROM checked"""


def _settle(con, src, ctx: ParseContext, header_line: int, header: list[str]) -> int:
    """Settle the placeholders (lines SQL did not load): a wrong field count without quotes is
    refused here, the rest read by `parse`; the placeholders then go. Returns the samples added."""
    if not con.execute(f"SELECT count(*) FROM {traces.TABLE} WHERE source_line < 0").fetchall()[0][0]:
        return 0
    con.execute(f"""CREATE OR REPLACE TEMP TABLE suspects AS
        SELECT -source_line AS line, pod AS raw, contains(pod, '"') AS quoted, len(string_split(pod, ',')) AS fields
        FROM {traces.TABLE} WHERE source_line < 0 AND NOT regexp_full_match(pod, $blank)""",
                {"blank": line_sql.BLANK_LINE})  # a blank line: skipped, as `parse` skips it
    con.execute(f"DELETE FROM {traces.TABLE} WHERE source_line < 0")
    width = len(header)
    con.execute("INSERT INTO rejects SELECT NULL, $path, line, format('expected {} fields as in the header, got {}', "
                "$width, fields), left(raw, 500) FROM suspects WHERE NOT quoted AND fields <> $width",
                {"path": src.name, "width": width})
    con.execute("DELETE FROM suspects WHERE NOT quoted AND fields <> ?", [width])
    accepted, after = 0, 0
    while True:  # the exact reason, or a quirk the patterns do not cover: Python, a page at a time
        page = con.execute("SELECT line, raw FROM suspects WHERE line > ? ORDER BY line LIMIT ?",
                           [after, SUSPECT_PAGE]).fetchall()
        if not page:
            break
        parsed = parse([(header_line, ",".join(header))] + page, ctx)
        staging.insert_parsed(con, parsed, src.name)
        accepted += parsed.accepted
        after = page[-1][0]
    con.execute("DROP TABLE suspects")
    return accepted
