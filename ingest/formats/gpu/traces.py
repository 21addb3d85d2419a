"""What the GPU trace formats share: the gpu_samples columns and plausible ranges, the host a file
name gives, the range check and rows of the DCGM and Prometheus readers, and a file's totals.

(The collector CSV and nvidia-smi are Definitions read by ingest/engine; as everywhere in ingest,
a bad value rejects its line and never becomes NULL or 0; an absent value is NULL.)
"""
from __future__ import annotations

from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.compute as pc

from ingest.engine import staging
from ingest.engine.contract import Parsed, Reject
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


def file_host(source: str) -> str:
    """The host the name of file `source` gives (HOST_FROM_FILE_NAME)."""
    return HOST_FROM_FILE_NAME.of(source)


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
