"""GPU traces logged by `nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits] -l N`.

Columns are read by their --query-gpu names (`timestamp`, `index`, `uuid`, `name`,
`power.draw` or `power.draw.average`/`.instant` in W, `utilization.gpu` in %, `memory.used` in
MiB; others are ignored), with or without the unit in the header (`power.draw [W]`) and in the
values (` 62.39 W`). `[N/A]` and the other bracketed words nvidia-smi prints for a missing
reading are NULL. Without a header (`noheader`) each column is recognised by its unit, which
needs units in the values. Timestamps (`2025/05/05 20:58:44.813`) are local time: pass --tz.
The host is --host, else a `host`/`hostname` column, else the file name up to its first `_`.

GPU identity: the `index` column; else the order in which `uuid`s first appear (nvidia-smi
lists GPUs in index order); else the row's place in its sample group. nvidia-smi writes one
row per GPU per loop, in index order, each stamped as it is read: rows less than GROUP_GAP_S
apart form a group, and the commonest group size is the GPU count. A group that is short
(a loop whose rows were stamped far apart, like the 1 + 7 rows in the real
powertracesim_burn file) is joined with the following groups when together they make exactly
one loop; rows that cannot be completed that way are rejected, since which GPU each one is
cannot be told. Query `index` (or `uuid`) to avoid guessing, and with `-i` to keep real indices.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from ingest.engine import line_sql, staging
from ingest.engine.contract import Lines, ParseContext, Parsed, Reject
from ingest.formats.gpu import traces

KIND = "nvidia-smi"
LOCAL_TIME = True  # writes local times without a zone: loader warns when no --tz was given
TABLES = (traces.TABLE,)
GROUP_GAP_S = 0.1  # rows of one loop are stamped milliseconds apart; loops are >= 250 ms apart
# --query-gpu name -> gpu_samples column (the first named in a file wins for power).
FIELDS = {
    "timestamp": "sampled_at", "index": "gpu_index", "uuid": "gpu_uuid", "name": "gpu_name",
    "power.draw": "power_w", "power.draw.average": "power_w", "power.draw.instant": "power_w",
    "utilization.gpu": "gpu_util_pct", "memory.used": "mem_used_mib",
    "host": "host", "hostname": "host",
    # identity-like columns besides index and uuid: used when the index column does not tell the
    # rows of one timestamp apart (a constant `index` beside a `gpu` column that does)
    "gpu": "alt_gpu", "minor_number": "alt_minor", "pci.bus_id": "alt_bus",
}
ALTERNATE_IDS = {"gpu_uuid": "uuid", "alt_gpu": "gpu", "alt_minor": "minor_number", "alt_bus": "pci.bus_id"}
UNITS = {"power_w": "W", "gpu_util_pct": "%", "mem_used_mib": "MiB"}
QUERY_NAMES = {"power_w": "power.draw", "gpu_util_pct": "utilization.gpu", "mem_used_mib": "memory.used"}
_TIME = re.compile(r"^\s*\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}(\.\d+)?\s*$")
_HEADER_FIELD = re.compile(r"^\s*(.*?)\s*(?:\[(.*)\])?\s*$")


def sniff(name: str, head: str) -> bool:
    """An nvidia-smi --query-gpu header, or a first field that is an nvidia-smi timestamp."""
    first = head.lstrip("\ufeff").lstrip().split("\n", 1)[0]
    names = {_HEADER_FIELD.match(field)[1].lower() for field in first.split(",")}
    return bool(names & {"power.draw", "utilization.gpu", "power.draw.average", "power.draw.instant"}) \
        or bool(_TIME.match(first.split(",", 1)[0]))


def parse(lines: Lines, ctx: ParseContext) -> Parsed:
    numbered = [(number, line) for number, line in lines if line.strip()]
    if not numbered:
        return traces.failed("the file is empty")
    first_line, first = numbered[0]
    layout = _layout(first)
    if layout.problem:
        return traces.failed(layout.problem, first_line, first)
    rows, found = _read_rows(numbered if layout.noheader else numbered[1:], layout, ctx)
    if "gpu_index" not in found and "gpu_uuid" in found:
        found["gpu_index"] = _index_by_first_appearance(found["gpu_uuid"])
    elif "gpu_index" not in found:
        found["gpu_index"] = _index_by_row_order(rows, found["sampled_at"])
    return traces.build(rows, found, KIND)


@dataclass(frozen=True)
class Layout:
    """What a file's first line says: its field count, which field is which (position ->
    gpu_samples column), whether it is data (noheader), or the problem that refuses the file."""

    width: int
    mapping: dict[int, str]
    problem: str | None
    noheader: bool


def _layout(first: str) -> Layout:
    fields = [field.strip().lstrip("\ufeff") for field in first.split(",")]
    noheader = bool(_TIME.match(fields[0]))
    mapping, problem = _columns_by_unit(fields) if noheader else _columns_by_name(fields)
    return Layout(len(fields), mapping, problem, noheader)


def _read_rows(data: Lines, layout: Layout, ctx: ParseContext) -> tuple[traces.Rows, dict[str, pa.Array]]:
    """The lines with the header's field count as rows, and their values read column by column
    (the `index` column too, when there is one); each bad value refuses its row."""
    width = layout.width
    kept_lines, kept_texts, early = [], [], []
    for number, line in data:
        count = traces.field_count(line)
        if count != width:
            early.append(Reject(number, f"expected {width} fields, got {count}", line))
            continue
        kept_lines.append(number)
        kept_texts.append(line)
    rows = traces.Rows(kept_lines, kept_texts)
    rows.rejects = early
    header = [f"c{i}" for i in range(width)]
    table = traces.read_csv_text(header, kept_texts)
    column = {target: table[header[position]] for position, target in layout.mapping.items()}

    found = {"sampled_at": traces.times(rows, column["sampled_at"], ctx.tz)}
    found["host"] = traces.hosts(column.get("host"), len(rows), ctx)
    for name in ("gpu_uuid", "gpu_name", "alt_gpu", "alt_minor", "alt_bus"):
        if name in column:
            found[name] = _absent_as_null(traces.text(column[name]))
    for name, unit in UNITS.items():
        if name in column:
            readings = _absent_as_null(traces.text(column[name]))
            readings = pc.replace_substring_regex(readings, rf"\s*{re.escape(unit)}$", "")
            found[name] = traces.numbers(rows, readings, name, QUERY_NAMES[name])
    if "gpu_index" in column:
        found["gpu_index"] = traces.numbers(rows, traces.text(column["gpu_index"]), "gpu_index", "index")
    return rows, found


totals = traces.totals


def _columns_by_name(fields: list[str]) -> tuple[dict[int, str], str | None]:
    mapping: dict[int, str] = {}
    for position, field in enumerate(fields):
        target = FIELDS.get(_HEADER_FIELD.match(field)[1].lower())
        if target and target not in mapping.values():
            mapping[position] = target
    if "sampled_at" not in mapping.values():
        return mapping, "the header has no timestamp column (add timestamp to --query-gpu)"
    if not {"power_w", "gpu_util_pct"} & set(mapping.values()):
        return mapping, "the header has neither power.draw nor utilization.gpu"
    return mapping, None


def _columns_by_unit(fields: list[str]) -> tuple[dict[int, str], str | None]:
    """Without a header: the timestamp by its shape, a uuid by `GPU-`, readings by their unit."""
    mapping: dict[int, str] = {0: "sampled_at"}
    by_unit: dict[str, list[int]] = {}
    for position, value in enumerate(fields[1:], start=1):
        if value.startswith("GPU-"):
            mapping[position] = "gpu_uuid"
            continue
        for name, unit in UNITS.items():
            if value.endswith(" " + unit):
                by_unit.setdefault(name, []).append(position)
    for name, positions in by_unit.items():
        if len(positions) > 1:
            return mapping, (f"without a header, {len(positions)} columns are in {UNITS[name]}: which is "
                             f"{QUERY_NAMES[name]} cannot be told (log with the header: drop noheader)")
        mapping[positions[0]] = name
    if not by_unit:
        return mapping, ("without a header or units the columns cannot be told apart "
                         "(log with the header: drop noheader)")
    return mapping, None


def _absent_as_null(column: pa.Array) -> pa.Array:
    """nvidia-smi's `[N/A]`, `[Not Supported]`, `N/A` ... as NULL."""
    absent = pc.fill_null(pc.match_substring_regex(column, r"^(\[.*\]|N/A)$"), False)
    return pc.if_else(absent, pa.scalar(None, pa.string()), column)


def _index_by_first_appearance(uuids: pa.Array) -> pa.Array:
    order: dict[str, int] = {}
    return pa.array([None if u is None else order.setdefault(u, len(order)) for u in uuids.to_pylist()],
                    pa.int32())


def _index_by_row_order(rows: traces.Rows, sampled_at: pa.Array) -> pa.Array:
    """Each row's GPU index from its place in its sample group (see the module docstring)."""
    instants = sampled_at.cast(pa.int64()).to_pylist()  # microseconds; None where unreadable
    groups: list[list[int]] = []
    previous = None
    for row, instant in enumerate(instants):
        if instant is None:
            continue
        if previous is None or not 0 <= instant - previous <= GROUP_GAP_S * 1e6:
            groups.append([])
        groups[-1].append(row)
        previous = instant
    index: list[int | None] = [None] * len(instants)
    if not groups:
        return pa.array(index, pa.int32())
    sizes = Counter(len(group) for group in groups)
    gpus = max(sizes, key=lambda size: (sizes[size], size))

    def incomplete(pending: list[int]) -> None:
        for row in pending:
            rows.refuse(row, f"its sample group has {len(pending)} rows where this file's groups have "
                             f"{gpus} (one per GPU): without an index or uuid column, which GPU each "
                             f"row is cannot be told")

    pending: list[int] = []
    for group in groups:
        if pending and len(pending) + len(group) > gpus:
            incomplete(pending)
            pending = []
        if not pending and len(group) % gpus == 0:
            for position, row in enumerate(group):
                index[row] = position % gpus
            continue
        pending += group
        if len(pending) == gpus:  # a loop whose rows were stamped far apart: one GPU each, in order
            for position, row in enumerate(pending):
                index[row] = position
            pending = []
    incomplete(pending)
    return pa.array(index, pa.int32())


# --- columnar path: each batch of lines typed and checked in SQL -----------------------------
# A plain line (one strict pattern for the whole line: readings as decimals with their unit or
# an absent `[N/A]`, times as nvidia-smi or ISO writes them) is typed in SQL; a line with the
# wrong field count and no quotes is refused in SQL; every other line is read by `_read_rows`
# above, which names the exact reason. All rows wait in `smi_rows` until the file is read:
# without an index column, which GPU a row is depends on rows anywhere in the file (the order
# in which uuids appear, the commonest sample-group size), so GPU indices are assigned last.
ROWS_TABLE = "smi_rows"
_ABSENT = r"\[.*\]|N/A"  # as _absent_as_null
# Each known column of a plain line, as a pattern with the groups it captures: a reading's
# number (empty when absent: blank, `[N/A]`), the date and the rest of a time, text.
_PIECES = {
    "sampled_at": (f" *({line_sql.DAY}|\\d{{4}}/\\d{{2}}/\\d{{2}})[T ]({line_sql.CLOCK}{line_sql.OFFSET}?) *",
                   ("day", "clock")),
    "gpu_index": (r" *(\d{1,5})? *", ("gpu_index",)),
    **{name: (f" *({line_sql.TEXT}) *", (name,)) for name in ("gpu_uuid", "gpu_name", "host", "alt_gpu", "alt_minor", "alt_bus")},
    **{name: (f" *(?:({line_sql.DECIMAL})(?: *{re.escape(unit)})?|\\[[^],\"\\x00-\\x1f]*\\]|N/A)? *", (name,))
       for name, unit in UNITS.items()},
}


def stage(src: staging.Source, con, ctx: ParseContext) -> staging.Staged:
    """Stage the file's samples and rejects in `con` (see the columnar path above)."""
    layout, data_after, zone = None, 0, line_sql.sql_zone(con, ctx.tz)
    con.execute(f"""CREATE OR REPLACE TEMP TABLE {ROWS_TABLE} (
        line BIGINT, sampled_at TIMESTAMPTZ, host VARCHAR, gpu_uuid VARCHAR, gpu_name VARCHAR, power_w DOUBLE,
        gpu_util_pct DOUBLE, mem_used_mib DOUBLE, given_index BIGINT, alt_gpu VARCHAR, alt_minor VARCHAR,
        alt_bus VARCHAR, reason VARCHAR, raw VARCHAR)""")
    for batch in staging.line_batches(src):
        con.register("batch", batch)
        try:
            if layout is None:
                first_line, first = line_sql.first_filled(con, src)
                if first_line is None:
                    continue
                layout = _layout(first)
                if layout.problem:
                    staging.add_rejects(con, src.name, [(first_line, layout.problem, first)])
                    return traces.stage_totals(con, 0)
                data_after = first_line - 1 if layout.noheader else first_line
            _stage_batch(con, src, ctx, layout, data_after, zone)
        finally:
            con.unregister("batch")
    if layout is None:
        staging.add_rejects(con, src.name, [(0, "the file is empty", "")])
        return traces.stage_totals(con, 0)
    accepted, warnings = _index_and_load(con, src, layout)
    con.execute(f"DROP TABLE {ROWS_TABLE}")
    staged = traces.stage_totals(con, accepted)
    staged.warnings.extend(warnings)
    return staged


def _line_pattern(layout: Layout) -> tuple[str, list[str]]:
    """The whole of a plain line, anchored: each known column in its strict form, the others any
    text without commas, quotes or control characters, as many fields as the first line; and the
    names of the groups it captures, in order."""
    pieces, names = [], []
    for position in range(layout.width):
        piece, captured = _PIECES.get(layout.mapping.get(position), (line_sql.OTHER, ()))
        pieces.append(piece)
        names += captured
    return "^" + ",".join(pieces) + "$", names


def _stage_batch(con, src: staging.Source, ctx: ParseContext, layout: Layout, data_after: int,
                 zone: str | None) -> None:
    """Type one batch: plain lines in SQL into smi_rows (one match per line gives every value),
    lines of the wrong width refused, the rest read by `_read_rows` into smi_rows with the reason
    (if any) that refuses them."""
    pattern, names = _line_pattern(layout)
    where = set(names)

    def text(name: str, absent: bool = True) -> str:
        if name not in where:
            return "NULL"
        value = f"nullif(v.{name}, '')"
        return f"CASE WHEN NOT regexp_full_match(v.{name}, '{_ABSENT}') THEN {value} END" if absent else value

    host = "$host" if ctx.host else f"coalesce({text('host', absent=False)}, $file_host)"
    readings = {name: f"TRY_CAST(nullif(v.{name}, '') AS DOUBLE)" if name in where else "NULL" for name in UNITS}
    in_range = " AND ".join(f"({name} IS NULL OR {name} BETWEEN {traces.LIMITS[name][0]} AND {traces.LIMITS[name][1]})"
                            for name in UNITS if name in where)
    index_known = "given_index IS NOT NULL AND given_index <= 65535" if "gpu_index" in where else "true"
    params = {"after": data_after, "pattern": pattern, "names": names}
    params.update({"host": ctx.host} if ctx.host else {"file_host": traces.file_host(ctx.source)})
    if zone not in (None, "UTC"):
        params["zone"] = zone
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE smi_batch AS
        WITH matched AS (
            SELECT line, raw, regexp_extract(raw, $pattern, $names) AS v FROM batch WHERE line > $after
        ), typed AS (
            SELECT line, v.day <> '' AS plain,
                   CASE WHEN v.day <> '' THEN {line_sql.instant("replace(v.day, '/', '-') || ' ' || v.clock", zone)}
                   END AS sampled_at,
                   {host} AS host, {text('gpu_uuid')} AS gpu_uuid, {text('gpu_name')} AS gpu_name,
                   {", ".join(f"{readings[name]} AS {name}" for name in UNITS)},
                   {"TRY_CAST(nullif(v.gpu_index, '') AS BIGINT)" if "gpu_index" in where else "NULL"} AS given_index,
                   {text('alt_gpu')} AS alt_gpu, {text('alt_minor')} AS alt_minor, {text('alt_bus')} AS alt_bus
            FROM matched
        )
        SELECT *, coalesce(plain AND {line_sql.in_years('sampled_at')} AND {in_range or 'true'} AND {index_known},
                           false) AS ok
        FROM typed""", params)
    con.execute(f"""INSERT INTO {ROWS_TABLE} SELECT line, sampled_at, host, gpu_uuid, gpu_name, power_w,
                    gpu_util_pct, mem_used_mib, given_index, alt_gpu, alt_minor, alt_bus, NULL, NULL
                    FROM smi_batch WHERE ok""")
    # The others: a line without quotes of the wrong width is refused here, blank lines skipped.
    con.execute("""CREATE OR REPLACE TEMP TABLE smi_other AS
                   SELECT line, raw, len(string_split(raw, ',')) AS fields, contains(raw, '"') AS quoted
                   FROM smi_batch JOIN batch USING (line) WHERE NOT ok AND NOT regexp_full_match(raw, $blank)""",
                {"blank": line_sql.BLANK_LINE})
    con.execute("INSERT INTO rejects SELECT NULL, ?, line, format('expected {} fields, got {}', ?, fields), "
                "left(raw, 500) FROM smi_other WHERE NOT quoted AND fields <> ?", [src.name, layout.width, layout.width])
    suspects = con.execute("SELECT line, raw FROM smi_other WHERE quoted OR fields = ? ORDER BY line",
                           [layout.width]).fetchall()
    if suspects:
        _stage_read_rows(con, src, ctx, layout, suspects)


def _stage_read_rows(con, src: staging.Source, ctx: ParseContext, layout: Layout, lines: Lines) -> None:
    """The lines SQL did not settle, read by `_read_rows`, into smi_rows (each with its reason)."""
    rows, found = _read_rows(lines, layout, ctx)
    staging.add_rejects(con, src.name, [(r.line, r.reason, r.raw) for r in rows.rejects])
    count = len(rows)
    if not count:
        return
    columns = {"line": pa.array(rows.lines, pa.int64())}
    for name in ("sampled_at", "host", "gpu_uuid", "gpu_name", *UNITS):
        columns[name] = found[name].cast(traces.COLUMNS[name]) if name in found else pa.nulls(count, traces.COLUMNS[name])
    columns["given_index"] = found["gpu_index"].cast(pa.int64()) if "gpu_index" in found else pa.nulls(count, pa.int64())
    for name in ("alt_gpu", "alt_minor", "alt_bus"):
        columns[name] = found[name] if name in found else pa.nulls(count, pa.string())
    columns["reason"] = pa.array([rows.refused.get(row) for row in range(count)], pa.string())
    columns["raw"] = pa.array(rows.raws, pa.string())
    con.from_arrow(pa.table(columns)).insert_into(ROWS_TABLE)


def _index_and_load(con, src: staging.Source, layout: Layout) -> tuple[int, list[str]]:
    """Give every row its GPU index (the index column; else the uuids' order of appearance; else
    the row's place in its sample group), then load the rows without a reason and refuse the
    others with their first reason, as `traces.build` does. Rows of one host and timestamp are
    never folded into one GPU (`_one_row_per_gpu`). Returns the samples loaded and the warnings."""
    columns = {target for target in layout.mapping.values()}
    group_reason = "NULL"
    if "gpu_index" in columns:
        index_sql, source = "given_index", ROWS_TABLE
    elif "gpu_uuid" in columns:
        con.execute(f"""CREATE OR REPLACE TEMP TABLE smi_index AS
                        SELECT gpu_uuid, row_number() OVER (ORDER BY min(line)) - 1 AS gpu_index
                        FROM {ROWS_TABLE} WHERE gpu_uuid IS NOT NULL GROUP BY gpu_uuid""")
        index_sql, source = "i.gpu_index", f"{ROWS_TABLE} r LEFT JOIN smi_index i USING (gpu_uuid)"
    else:
        gpus = _group_rows(con)
        index_sql = f"CASE WHEN d.grp IS NULL THEN g.pos % {gpus} WHEN d.start_at IS NOT NULL THEN d.start_at + g.pos END"
        group_reason = (f"CASE WHEN d.pending IS NOT NULL THEN format('its sample group has {{}} rows where this file''s "
                        f"groups have {gpus} (one per GPU): without an index or uuid column, which GPU each row is "
                        f"cannot be told', d.pending) END")
        source = f"{ROWS_TABLE} r LEFT JOIN smi_groups g USING (line) LEFT JOIN smi_decided d USING (grp)"
    con.execute(f"""CREATE OR REPLACE TEMP TABLE smi_final AS
        SELECT *, coalesce(reason, group_reason, CASE WHEN sampled_at IS NULL THEN 'timestamp is missing'
                  WHEN gpu_index IS NULL THEN 'gpu_index is missing' WHEN host IS NULL THEN 'host is missing' END) AS why
        FROM (SELECT line, sampled_at, host, gpu_uuid, gpu_name, power_w, gpu_util_pct, mem_used_mib, reason, raw,
                     {index_sql} AS gpu_index, {group_reason} AS group_reason,
                     alt_gpu, alt_minor, alt_bus FROM {source})""")
    warnings = _one_row_per_gpu(con, columns)
    loaded = con.execute(f"""
        INSERT INTO {traces.TABLE} (host, gpu_index, sampled_at, gpu_uuid, gpu_name, power_w, gpu_util_pct,
                                    mem_used_mib, source_kind, source_line)
        SELECT host, gpu_index, sampled_at, gpu_uuid, gpu_name, power_w, gpu_util_pct, mem_used_mib, '{KIND}', line
        FROM smi_final WHERE why IS NULL""").fetchall()[0][0]
    con.execute("INSERT INTO rejects SELECT NULL, ?, line, why, left(raw, 500) FROM smi_final "
                "WHERE why IS NOT NULL AND raw IS NOT NULL", [src.name])
    # a row SQL read refused only now (its sample group is short): its text is read again
    line_sql.add_rejects_reading_raw(con, src, "SELECT line, why FROM smi_final WHERE why IS NOT NULL AND raw IS NULL")
    con.execute("DROP TABLE smi_final")
    return loaded, warnings


def _one_row_per_gpu(con, columns: set[str]) -> list[str]:
    """Where rows of one host and timestamp share a GPU index (a constant `index` column, say),
    take the GPU from the first identity-like column (uuid, gpu, minor_number, pci.bus_id) that
    tells every such group's rows apart: its number when it is one, else its order of first
    appearance; the warning says so. When none does, those rows are refused, not merged."""
    clash = "SELECT host, sampled_at FROM smi_final WHERE why IS NULL GROUP BY host, sampled_at, {id} HAVING count(*) > 1"
    if not con.execute(f"SELECT EXISTS ({clash.format(id='gpu_index')})").fetchall()[0][0]:
        return []
    for column, label in ALTERNATE_IDS.items():
        if column not in columns:
            continue
        usable = con.execute(f"""SELECT count({column}) = count(*) AND NOT EXISTS ({clash.format(id=column)})
                                 FROM smi_final WHERE why IS NULL""").fetchall()[0][0]
        if not usable:
            continue
        numbered = con.execute(f"SELECT bool_and(regexp_full_match({column}, '\\d{{1,5}}')) FROM smi_final "
                               "WHERE why IS NULL").fetchall()[0][0]
        if numbered:
            con.execute(f"UPDATE smi_final SET gpu_index = CAST({column} AS BIGINT) WHERE why IS NULL")
        else:
            con.execute(f"""UPDATE smi_final SET gpu_index = o.gpu_index FROM (
                                SELECT {column} AS id, row_number() OVER (ORDER BY min(line)) - 1 AS gpu_index
                                FROM smi_final WHERE why IS NULL GROUP BY {column}) o
                            WHERE smi_final.{column} = o.id AND why IS NULL""")
        told = "its number" if numbered else "its order of first appearance"
        return [f"rows of one timestamp share the same GPU index; the {label} column tells them apart, so each "
                f"row's GPU is {told} in that column"]
    con.execute(f"""UPDATE smi_final SET why = format('{{}} rows share this timestamp and GPU index {{}}: which GPU '
                        || 'each one is cannot be told (add uuid or index to --query-gpu)', c.rows, smi_final.gpu_index)
                    FROM (SELECT host, sampled_at, gpu_index, count(*) AS rows FROM smi_final WHERE why IS NULL
                          GROUP BY ALL HAVING count(*) > 1) c
                    WHERE smi_final.host = c.host AND smi_final.sampled_at = c.sampled_at
                      AND smi_final.gpu_index = c.gpu_index AND smi_final.why IS NULL""")
    return []


def _group_rows(con) -> int:
    """Sample groups of the timed rows (smi_groups: line, grp, pos) and how the short ones are
    settled (smi_decided: grp, start_at or pending), as _index_by_row_order; returns the GPU count."""
    # One ordering for every window: a row's group is the count of group starts so far, its place
    # the rows since the last start (running sums, no sort per group).
    con.execute(f"""CREATE OR REPLACE TEMP TABLE smi_groups AS
        WITH timed AS (
            SELECT line, row_number() OVER by_line AS n,
                   coalesce(epoch_us(sampled_at) - lag(epoch_us(sampled_at)) OVER by_line
                            NOT BETWEEN 0 AND {GROUP_GAP_S * 1e6}, true) AS starts
            FROM {ROWS_TABLE} WHERE sampled_at IS NOT NULL
            WINDOW by_line AS (ORDER BY line)
        )
        SELECT line, sum(starts::INTEGER) OVER running AS grp, n - max(CASE WHEN starts THEN n END) OVER running AS pos
        FROM timed WINDOW running AS (ORDER BY line ROWS UNBOUNDED PRECEDING)""")
    con.execute("CREATE OR REPLACE TEMP TABLE smi_sizes AS SELECT grp, count(*) AS size FROM smi_groups GROUP BY grp")
    con.execute("CREATE OR REPLACE TEMP TABLE smi_decided (grp BIGINT, start_at BIGINT, pending BIGINT)")
    found = con.execute("SELECT size FROM smi_sizes GROUP BY size "
                        "ORDER BY count(*) DESC, size DESC LIMIT 1").fetchall()
    if not found:
        return 1
    gpus = found[0][0]
    short = con.execute("SELECT grp, size FROM smi_sizes WHERE size % ? <> 0 ORDER BY grp", [gpus]).fetchall()
    decided: list[tuple[int, int | None, int | None]] = []
    pending: list[tuple[int, int]] = []

    def incomplete() -> None:
        total = sum(size for _, size in pending)
        decided.extend((grp, None, total) for grp, _ in pending)
        pending.clear()

    for grp, size in short:  # a whole group between two short ones ends what is pending
        if pending and (grp != pending[-1][0] + 1 or sum(s for _, s in pending) + size > gpus):
            incomplete()
        pending.append((grp, size))
        if sum(s for _, s in pending) == gpus:  # a loop stamped far apart: one GPU each, in order
            start = 0
            for member, member_size in pending:
                decided.append((member, start, None))
                start += member_size
            pending.clear()
    incomplete()
    if decided:
        con.from_arrow(pa.table({"grp": pa.array([d[0] for d in decided], pa.int64()),
                                 "start_at": pa.array([d[1] for d in decided], pa.int64()),
                                 "pending": pa.array([d[2] for d in decided], pa.int64())})).insert_into("smi_decided")
    return gpus
