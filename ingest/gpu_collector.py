"""GPU traces in mlcost's own collector CSV (what `mlcost collect` writes, and the sample data).

Header `timestamp,host,gpu_index,gpu_uuid,gpu_name,power_w,energy_mj,gpu_util_pct,mem_used_mib`
(any order; other columns are ignored): one row per GPU per sample. `timestamp` is ISO-8601
(UTC with `Z`; naive times are read in --tz), `power_w` watts, `energy_mj` the GPU's
total-energy counter in millijoules since boot (empty where the GPU has none), `gpu_util_pct`
percent, `mem_used_mib` MiB. Empty fields are NULL. The host is --host, else the `host`
column, else the file name up to its first `_`.
"""
from __future__ import annotations

from ingest import traces
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
