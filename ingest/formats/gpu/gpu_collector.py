"""GPU traces in mlcost's own collector CSV (what `mlcost collect` writes, and the sample data).

Header `timestamp,host,gpu_index,gpu_uuid,gpu_name,power_w,energy_mj,gpu_util_pct,mem_used_mib`
(any order; other columns are ignored): one row per GPU per sample. `timestamp` is ISO-8601
(UTC with `Z`; naive times are read in --tz; `2025/05/05` dates too) or epoch seconds, `power_w`
watts, `energy_mj` the GPU's total-energy counter in millijoules since boot (a whole number;
empty where the GPU has none), `gpu_util_pct` percent, `mem_used_mib` MiB. Empty fields are NULL;
blanks around a value are ignored. The host is --host, else the `host` column, else the file
name up to its first `_`.

The format is the definition below; ingest/engine reads it (batch_sql: the SQL pass, reader: the
lines SQL cannot read), and traces.stage_totals sums a file up (docs/formats/gpu-traces.md).
"""
from __future__ import annotations

from functools import partial

from ingest.engine import batch_sql, reader
from ingest.engine.contract import ParseContext
from ingest.engine.definition import (COUNT, NUMBER, TEXT, TIME, Definition, Detect, Field, FromOption, Key,
                                      Required, Within, sniff as _sniff)
from ingest.engine.staging import Source, Staged
from ingest.formats.gpu import traces

KIND = "gpu-collector"
TABLES = (traces.TABLE,)
# The header `mlcost collect` writes (ingest/formats/gpu/collector.py), in its order.
COLUMNS = ("timestamp", "host", "gpu_index", "gpu_uuid", "gpu_name", "power_w", "energy_mj",
           "gpu_util_pct", "mem_used_mib")


def _bounded(column: str, kind: str, unit: str) -> tuple:
    """A measure and its plausible range (traces.LIMITS): outside it is a misread column or a broken counter."""
    low, high = traces.LIMITS[column]
    return Field(column, kind, unit=unit, minimum=None), Within(column, low, high)


COLLECTOR = Definition(
    kind=KIND,
    table=traces.TABLE,
    detect=Detect(all_of=("timestamp", "gpu_index"), any_of=("power_w",)),
    header_requires=("sampled_at", "gpu_index"),
    header_reason="the header lacks {missing} (expected " + ",".join(COLUMNS) + ")",
    steps=(  # in the order the reasons are looked for: the first that fails names the line's
        Field("sampled_at", TIME, names=("timestamp",)),
        *_bounded("gpu_index", COUNT, ""),
        *_bounded("power_w", NUMBER, "W"),
        *_bounded("energy_mj", COUNT, "mJ"),
        *_bounded("gpu_util_pct", NUMBER, "%"),
        *_bounded("mem_used_mib", NUMBER, "MiB"),
        Field("gpu_uuid", TEXT),
        Field("gpu_name", TEXT),
        Field("host", TEXT),
        FromOption("host", "host"),
        traces.HOST_FROM_FILE_NAME,
        Required("sampled_at", "timestamp is missing"),
        Required("gpu_index", "gpu_index is missing"),
        Required("host", "host is missing"),
    ),
    key=Key("sample_key", ("host", "gpu_index", "sampled_at"), stored=False),  # staging.UNIQUE_BY
    csv_only=True,
    width_reason="expected {expected} fields as in the header, got {got}",
    csv_trim=True,
    empty_reason="the file is empty",
)


def sniff(name: str, head: str) -> bool:
    """A CSV header naming timestamp, gpu_index and power_w."""
    return _sniff(COLLECTOR, head)


def stage(src: Source, con, ctx: ParseContext) -> Staged:
    """Stage the file's samples and rejects in `con` (the engine's SQL pass), summed up as every trace file is."""
    return traces.stage_totals(con, batch_sql.stage(COLLECTOR, src, con, ctx).accepted)


parse = partial(reader.parse, COLLECTOR)  # (lines, ctx, prices=None) -> Parsed, line by line
totals = traces.totals                    # (parsed) -> the --json figures
