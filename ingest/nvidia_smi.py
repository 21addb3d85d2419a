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

import pyarrow as pa
import pyarrow.compute as pc

from ingest import traces
from ingest.contract import Lines, ParseContext, Parsed, Reject

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
}
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
    fields = [field.strip().lstrip("\ufeff") for field in first.split(",")]
    if _TIME.match(fields[0]):  # noheader
        mapping, problem = _columns_by_unit(fields)
        data = numbered
    else:
        mapping, problem = _columns_by_name(fields)
        data = numbered[1:]
    if problem:
        return traces.failed(problem, first_line, first)
    width = len(fields)
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
    column = {target: table[header[position]] for position, target in mapping.items()}

    found = {"sampled_at": traces.times(rows, column["sampled_at"], ctx.tz)}
    found["host"] = traces.hosts(column.get("host"), len(rows), ctx)
    for name in ("gpu_uuid", "gpu_name"):
        if name in column:
            found[name] = _absent_as_null(traces.text(column[name]))
    for name, unit in UNITS.items():
        if name in column:
            readings = _absent_as_null(traces.text(column[name]))
            readings = pc.replace_substring_regex(readings, rf"\s*{re.escape(unit)}$", "")
            found[name] = traces.numbers(rows, readings, name, QUERY_NAMES[name])
    if "gpu_index" in column:
        found["gpu_index"] = traces.numbers(rows, traces.text(column["gpu_index"]), "gpu_index", "index")
    elif "gpu_uuid" in found:
        found["gpu_index"] = _index_by_first_appearance(found["gpu_uuid"])
    else:
        found["gpu_index"] = _index_by_row_order(rows, found["sampled_at"])
    return traces.build(rows, found, KIND)


stage = traces.staged(parse)
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
