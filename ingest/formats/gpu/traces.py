"""What the three GPU trace parsers share: the gpu_samples columns, whole-column readers, hosts, totals.

A trace file has many rows (the sample's eight files hold 650,520), so values are read a whole
column at a time with pyarrow; only when a column does not convert at once is it read value by
value, to name each bad line and why. As everywhere in ingest, a bad value rejects its line and
never becomes NULL or 0; an absent value (an empty field, nvidia-smi's `[N/A]`) is NULL.
"""
from __future__ import annotations

import io
from datetime import datetime, timezone, tzinfo

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from ingest.engine import staging, values
from ingest.engine.contract import BadValue, ParseContext, Parsed, Reject
from ingest.engine.definition import FromFileName
from ingest.engine.staging import Staged

TABLE = "gpu_samples"
TIME = pa.timestamp("us", tz="UTC")
COLUMNS: dict[str, pa.DataType] = {
    "host": pa.string(), "gpu_index": pa.int32(), "sampled_at": TIME, "gpu_uuid": pa.string(),
    "gpu_name": pa.string(), "power_w": pa.float64(), "energy_mj": pa.int64(),
    "gpu_util_pct": pa.float64(), "mem_used_mib": pa.float64(), "pod": pa.string(),
    "namespace": pa.string(), "source_kind": pa.string(), "source_line": pa.int64(),
}
# Plausible ranges; a value outside is a misread column or a broken counter, not a reading.
LIMITS: dict[str, tuple[float, float]] = {
    "gpu_index": (0, 65_535), "power_w": (0, 10_000), "energy_mj": (0, 2**63 - 1),
    "gpu_util_pct": (0, 100), "mem_used_mib": (0, 10_000_000),
}
HOST_SUFFIXES = (".gz", ".csv", ".prom", ".txt", ".log", ".metrics")
# The host a file name gives: the name up to its first `_` without the suffixes
# (`gpu-node-1_2026-08.csv.gz` -> `gpu-node-1`, the collector's own file names).
HOST_FROM_FILE_NAME = FromFileName("host", before="_", suffixes=HOST_SUFFIXES)


class Rows:
    """The data lines of one file on their way into gpu_samples: their line numbers and text,
    and for each refused row (by position) the first reason found."""

    def __init__(self, lines: list[int], raws: list[str]) -> None:
        self.lines, self.raws = lines, raws
        self.refused: dict[int, str] = {}
        self.rejects: list[Reject] = []  # lines refused before they became rows (e.g. field count)

    def refuse(self, row: int, reason: str) -> None:
        self.refused.setdefault(row, reason)

    def __len__(self) -> int:
        return len(self.lines)


def read_csv_text(header: list[str], texts: list[str]) -> pa.Table:
    """The lines (already checked for their field count) as a table of strings; only an empty
    field is NULL (pyarrow would otherwise also read "NaN", "NA" or "NULL" as missing)."""
    data = "\n".join(texts).encode()
    return pacsv.read_csv(
        io.BytesIO(data),
        read_options=pacsv.ReadOptions(column_names=header, use_threads=True),
        parse_options=pacsv.ParseOptions(newlines_in_values=False),
        convert_options=pacsv.ConvertOptions(column_types={name: pa.string() for name in header},
                                             null_values=[""], strings_can_be_null=True),
    ) if texts else pa.table({name: pa.array([], pa.string()) for name in header})


def field_count(text: str) -> int:
    """How many CSV fields a line has (quotes respected only when the line has any)."""
    if '"' not in text:
        return text.count(",") + 1
    import csv

    return len(next(csv.reader([text]), []))


def text(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Stripped text; empty becomes NULL."""
    stripped = pc.utf8_trim_whitespace(_array(column))
    return pc.if_else(pc.equal(stripped, ""), pa.scalar(None, pa.string()), stripped)


def numbers(rows: Rows, column: pa.ChunkedArray | pa.Array, name: str, label: str | None = None) -> pa.Array:
    """A numeric column of COLUMNS from text (NULL stays NULL); bad or out-of-range values refuse their row."""
    label = label or name
    target = COLUMNS[name]
    strings = _array(column)
    # Arrow's own cast is wider than mlcost's spelling of a number (it reads '0x1F' as 31, 'nan'
    # and 'inf' as floats): it is used only when every value is spelled as values.py reads one.
    spelling = values.WHOLE_TEXT if pa.types.is_integer(target) else values.NUMBER_TEXT
    try:
        if pc.all(pc.match_substring_regex(strings, f"^(?:{spelling})$")).as_py() is False:
            raise pa.ArrowInvalid("not every value is spelled as a number")
        result = strings.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        read = values.integer if pa.types.is_integer(target) else values.number
        converted = []
        for row, value in enumerate(strings.to_pylist()):
            try:
                # a CSV field is trimmed, as the SQL path trims it (nvidia-smi writes ", 12 W")
                converted.append(read(value.strip() if isinstance(value, str) else value, label))
            except BadValue as error:
                rows.refuse(row, str(error))
                converted.append(None)
        result = pa.array(converted, target)
    return check_range(rows, result, name, label)


def check_range(rows: Rows, column: pa.Array, name: str, label: str | None = None) -> pa.Array:
    """The column with NULL where a value is not finite or outside LIMITS, each such row refused."""
    label = label or name
    low, high = LIMITS[name]
    outside = pc.or_kleene(pc.less(column, low), pc.greater(column, high))
    if pa.types.is_floating(column.type):
        outside = pc.or_kleene(outside, pc.invert(pc.is_finite(column)))
    outside = pc.fill_null(outside, False)
    if pc.any(outside).as_py():
        for row in pc.indices_nonzero(outside).to_pylist():
            rows.refuse(row, f"{label} {column[row].as_py()!r} is outside {low:g} to {high:g}")
        column = pc.if_else(outside, pa.scalar(None, column.type), column)
    return column


def times(rows: Rows, column: pa.ChunkedArray | pa.Array, tz: tzinfo, label: str = "timestamp") -> pa.Array:
    """UTC instants from ISO-8601 text (naive text is in `tz`; `2025/05/05` dates too) or epoch seconds."""
    strings = pc.replace_substring_regex(text(column), r"^(\d{4})/(\d{2})/(\d{2})", r"\1-\2-\3")
    result = None
    try:
        result = strings.cast(TIME)  # every value has an offset
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        zone = "UTC" if tz is timezone.utc else getattr(tz, "key", None)
        if zone:
            try:  # every value is naive: read them in the user's zone
                result = pc.assume_timezone(strings.cast(pa.timestamp("us")), zone).cast(TIME)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                result = None
    if result is None:
        seen: dict[str, datetime | None | BadValue] = {}
        instants = []
        for row, value in enumerate(strings.to_pylist()):
            if value not in seen:
                try:
                    seen[value] = values.timestamp(value, label, tz)
                except BadValue as error:
                    seen[value] = error
            instant = seen[value]
            if isinstance(instant, BadValue):
                rows.refuse(row, str(instant))
                instant = None
            instants.append(instant)
        result = pa.array(instants, TIME)
    outside = pc.fill_null(pc.or_(pc.less(result, pa.scalar(values.EARLIEST, TIME)),
                                  pc.greater_equal(result, pa.scalar(values.LATEST, TIME))), False)
    if pc.any(outside).as_py():
        raw = strings.to_pylist()
        for row in pc.indices_nonzero(outside).to_pylist():
            rows.refuse(row, f"{label} {raw[row]!r} is outside 1990-2099")
        result = pc.if_else(outside, pa.scalar(None, TIME), result)
    return result


def file_host(source: str) -> str:
    """The host the name of file `source` gives (HOST_FROM_FILE_NAME)."""
    return HOST_FROM_FILE_NAME.of(source)


def hosts(column: pa.Array | None, count: int, ctx: ParseContext) -> pa.Array:
    """Each row's host: --host when given, else the file's host column, else (and where that is
    empty) the host in the file name."""
    if ctx.host:
        return pa.array([ctx.host] * count, pa.string())
    fallback = pa.scalar(file_host(ctx.source), pa.string())
    if column is None:
        return pa.array([fallback.as_py()] * count, pa.string())
    return pc.coalesce(text(column), fallback)


def build(rows: Rows, columns: dict[str, pa.Array], kind: str) -> Parsed:
    """The Parsed of a trace file: rows without a reason to refuse them become the gpu_samples
    table, the others rejects with their line number, text and first reason."""
    count = len(rows)
    for name, label in (("sampled_at", "timestamp"), ("gpu_index", "gpu_index"), ("host", "host")):
        missing = pc.is_null(columns[name])
        if pc.any(missing).as_py():
            for row in pc.indices_nonzero(missing).to_pylist():
                rows.refuse(row, f"{label} is missing")
    keep = pa.array([row not in rows.refused for row in range(count)], pa.bool_())
    arrays = []
    for name, kind_type in COLUMNS.items():
        if name == "source_kind":
            arrays.append(pa.array([kind] * count, pa.string()))
        elif name == "source_line":
            arrays.append(pa.array(rows.lines, pa.int64()))
        elif name in columns:
            arrays.append(_array(columns[name]).cast(kind_type))
        else:
            arrays.append(pa.nulls(count, kind_type))
    table = pa.Table.from_arrays(arrays, schema=pa.schema(COLUMNS.items())).filter(keep)
    parsed = Parsed(accepted=table.num_rows)
    parsed.tables[TABLE] = table
    refused = [Reject(rows.lines[row], reason, rows.raws[row]) for row, reason in rows.refused.items()]
    parsed.rejects = sorted(rows.rejects + refused, key=lambda reject: reject.line)
    return parsed


def failed(reason: str, line: int = 0, raw: str = "") -> Parsed:
    """A file refused whole (no usable header, no data)."""
    return Parsed(rejects=[Reject(line, reason, raw)])


def stage_totals(con, accepted: int) -> Staged:
    """What a trace file staged in `con` adds up to: a repeated sample keeps its last line, the
    samples' intervals are computed once (temp table file_intervals, which the merge reuses) and
    give the file's energy. GPUs, samples, first and last sample (ISO, UTC), energy in kWh."""
    from ingest.derived import gpu_rollups
    from ingest.settings import config

    if not staging.count(con, TABLE):
        return Staged(accepted, {"gpus": 0, "samples": 0, "first_ts": None, "last_ts": None,
                                 "energy_kwh_total": None})
    gpu = config.load().gpu
    gpu_rollups.intervals(con, TABLE, "file_intervals", gpu)
    # a repeated sample (same host, GPU and time) is the only way to a zero gap: the intervals'
    # sort finds them (a GROUP BY of every sample cost ~0.15 s CPU a million); when there are
    # any (rare), the intervals are computed again over the samples kept
    repeated = con.execute("SELECT EXISTS (SELECT 1 FROM file_intervals WHERE next_s = 0)").fetchall()[0][0]
    staging.keep_last(con, TABLE, repeated=repeated)
    if repeated:
        gpu_rollups.intervals(con, TABLE, "file_intervals", gpu)
    gpus, first, last = con.execute("SELECT count(DISTINCT (host, gpu_index)), min(sampled_at), max(sampled_at) "
                                    f"FROM {TABLE}").fetchall()[0]
    energy = gpu_rollups.energy_kwh(con, "file_intervals")
    return Staged(accepted, {
        "gpus": gpus,
        "samples": accepted,
        "first_ts": _iso(first),
        "last_ts": _iso(last),
        "energy_kwh_total": None if energy is None else round(energy, 6),
    })


def staged(parse):
    """A `stage` for a trace parser that reads line by line: its lines streamed, its rows staged."""
    def stage(src: staging.Source, con, ctx: ParseContext) -> Staged:
        parsed = parse(staging.lines(src), ctx)
        staging.insert_parsed(con, parsed, src.name)
        return stage_totals(con, parsed.accepted)
    return stage


def totals(parsed: Parsed) -> dict:
    """The --json figures of a Parsed trace file (see stage_totals)."""
    con = staging.open_stage()
    try:
        staging.insert_parsed(con, parsed, "")
        return stage_totals(con, parsed.accepted).totals
    finally:
        con.close()


def _iso(instant: datetime) -> str:
    return instant.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def _array(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
