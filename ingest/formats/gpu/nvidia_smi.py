"""GPU traces logged by `nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits] -l N`.

Columns are read by their --query-gpu names (`timestamp`, `index`, `uuid`, `name`, `power.draw`
or `power.draw.average`/`.instant` in W (the first of them a line gives), `utilization.gpu` in %,
`memory.used` in MiB; others are ignored), with or without the unit in the header
(`power.draw [W]`) and in the values (` 62.39 W`). `[N/A]` and the other bracketed words
nvidia-smi prints for a missing reading are absent. Without a header (`noheader`) each column is
recognised by its shape (the timestamp, a `GPU-` uuid) or its unit, which needs units in the
values. Timestamps (`2025/05/05 20:58:44.813`) are local time: pass --tz. The host is --host,
else a `host`/`hostname` column, else the file name up to its first `_`.

GPU identity: the `index` column; else the order in which `uuid`s first appear (nvidia-smi
lists GPUs in index order); else the row's place in its sample group. nvidia-smi writes one
row per GPU per loop, in index order, each stamped as it is read: rows less than GROUP_GAP_S
apart form a group, and the commonest group size is the GPU count. A group that is short
(a loop whose rows were stamped far apart, like the 1 + 7 rows in the real
powertracesim_burn file) is joined with the following groups when together they make exactly
one loop; rows that cannot be completed that way are rejected, since which GPU each one is
cannot be told. Query `index` (or `uuid`) to avoid guessing, and with `-i` to keep real indices.

The format is the definition below; ingest/engine reads it (batch_sql with batch_units: the SQL
pass; reader: the lines SQL cannot read; file_steps: the GPU identity once the file is read).
"""
from __future__ import annotations

from ingest.engine import batch_sql, csv_layout
from ingest.engine.contract import ParseContext
from ingest.engine.definition import (COUNT, NUMBER, TEXT, TIME, Definition, Detect, Field, FromOption, Key,
                                      Required, Within)
from ingest.engine.file_rules import Headerless, IndexByOrder
from ingest.engine.staging import Source, Staged
from ingest.formats.gpu import traces

KIND = "nvidia-smi"
LOCAL_TIME = True  # writes local times without a zone: loader warns when no --tz was given
TABLES = (traces.TABLE,)
GROUP_GAP_S = 0.1  # rows of one loop are stamped milliseconds apart; loops are >= 250 ms apart
POWER = ("power.draw", "power.draw.average", "power.draw.instant")


def _bounded(column: str, kind: str, names: tuple[str, ...], unit: str) -> tuple:
    """A reading and its plausible range (traces.LIMITS): outside it is a misread column."""
    low, high = traces.LIMITS[column]
    return Field(column, kind, names=names, unit=unit, minimum=None), Within(column, low, high)


NVIDIA_SMI = Definition(
    kind=KIND,
    table=traces.TABLE,
    detect=Detect(all_of=(), any_of=(*POWER, "utilization.gpu")),
    header_requires=("sampled_at",),
    header_reason="the header has no {missing} column (add {missing} to --query-gpu)",
    header_any=(("power_w", "gpu_util_pct"), "the header has neither power.draw nor utilization.gpu"),
    steps=(  # in the order the reasons are looked for (texts never refuse a line)
        Field("gpu_uuid", TEXT, names=("uuid",)),
        Field("gpu_name", TEXT, names=("name",)),
        Field("host", TEXT, names=("host", "hostname")),
        # identity-like columns besides index and uuid: used when the index column does not tell
        # the rows of one timestamp apart (a constant `index` beside a `gpu` column that does)
        Field("alt_gpu", TEXT, names=("gpu",)),
        Field("alt_minor", TEXT, names=("minor_number",)),
        Field("alt_bus", TEXT, names=("pci.bus_id",)),
        Field("sampled_at", TIME, names=("timestamp",)),
        *_bounded("power_w", NUMBER, POWER, "W"),
        *_bounded("gpu_util_pct", NUMBER, ("utilization.gpu",), "%"),
        *_bounded("mem_used_mib", NUMBER, ("memory.used",), "MiB"),
        *_bounded("gpu_index", COUNT, ("index",), ""),
        FromOption("host", "host"),
        traces.HOST_FROM_FILE_NAME,
        Required("sampled_at", "timestamp is missing"),
    ),
    key=Key("sample_key", ("host", "gpu_index", "sampled_at"), stored=False),  # staging.UNIQUE_BY
    csv_only=True,
    width_reason="expected {expected} fields, got {got}",
    csv_trim=True,
    empty_reason="the file is empty",
    units_in_text=True,
    absent=r"\[.*\]|N/A",
    headerless=Headerless(
        first=r"\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}(\.\d+)?", first_column="sampled_at",
        shapes=(("gpu_uuid", "GPU-"),),
        same_unit="without a header, {count} columns are in {unit}: which is {name} cannot be told "
                  "(log with the header: drop noheader)",
        no_units="without a header or units the columns cannot be told apart (log with the header: drop noheader)"),
    identity=IndexByOrder(
        column="gpu_index", first_seen="gpu_uuid", time="sampled_at", gap_s=GROUP_GAP_S,
        short="its sample group has {rows} rows where this file's groups have {count} (one per GPU): without an "
              "index or uuid column, which GPU each row is cannot be told",
        missing="gpu_index is missing", within="host",
        alternates=(("gpu_uuid", "uuid"), ("alt_gpu", "gpu"), ("alt_minor", "minor_number"), ("alt_bus", "pci.bus_id")),
        told="rows of one timestamp share the same GPU index; the {label} column tells them apart, so each row's "
             "GPU is {how} in that column",
        clash="{rows} rows share this timestamp and GPU index {index}: which GPU each one is cannot be told "
              "(add uuid or index to --query-gpu)"),
)


def sniff(name: str, head: str) -> bool:
    """An nvidia-smi --query-gpu header, or a first field that is an nvidia-smi timestamp."""
    return csv_layout.sniff(NVIDIA_SMI, head)


def stage(src: Source, con, ctx: ParseContext) -> Staged:
    """Stage the file's samples and rejects in `con` (the engine's SQL pass), summed up as every trace file is."""
    staged = batch_sql.stage(NVIDIA_SMI, src, con, ctx)
    summed = traces.stage_totals(con, staged.accepted)
    summed.warnings.extend(staged.warnings)
    return summed
