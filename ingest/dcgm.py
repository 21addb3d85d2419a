"""GPU traces from NVIDIA's dcgm-exporter: Prometheus text, one scrape or many.

Read: DCGM_FI_DEV_POWER_USAGE (W), DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION (mJ since boot; it
restarts at a reboot), DCGM_FI_DEV_GPU_UTIL (%) and DCGM_FI_DEV_FB_USED (MiB), with the labels
`gpu` (the index), `UUID`, `modelName`, `Hostname`, and `pod`/`namespace` when present; other
metrics are ignored. Each line is parsed with prometheus_client's parser (so a line it cannot
read is rejected with its number). A sample's time is its own timestamp (many scrapes in one
file need them), else --at for a file that is one scrape without timestamps. The host is
--host, else the `Hostname` label, else the file name up to its first `_`.
"""
from __future__ import annotations

from datetime import timezone

import pyarrow as pa
from prometheus_client.parser import text_string_to_metric_families

from ingest import traces, values
from ingest.contract import BadValue, Lines, ParseContext, Parsed, Reject

KIND = "dcgm"
TABLES = (traces.TABLE,)
METRICS = {
    "DCGM_FI_DEV_POWER_USAGE": "power_w",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "energy_mj",
    "DCGM_FI_DEV_GPU_UTIL": "gpu_util_pct",
    "DCGM_FI_DEV_FB_USED": "mem_used_mib",
}
LABELS = {"UUID": "gpu_uuid", "modelName": "gpu_name", "pod": "pod", "namespace": "namespace"}


class NoTime(BadValue):
    """A sample without a timestamp in a file loaded without --at: the whole file cannot be placed in time."""


def sniff(name: str, head: str) -> bool:
    """Prometheus text with DCGM_FI_ metrics."""
    return "DCGM_FI_" in head and any(metric in head for metric in METRICS)


def parse(lines: Lines, ctx: ParseContext) -> Parsed:
    samples: dict[tuple, dict] = {}
    rejects: list[Reject] = []
    for number, line in lines:
        text = line.strip()
        if not text or text.startswith("#") or text.split("{", 1)[0].split(" ", 1)[0] not in METRICS:
            continue
        try:
            key, column, value, labels = _sample(text, ctx)
        except NoTime:
            raise
        except BadValue as error:
            rejects.append(Reject(number, str(error), line))
            continue
        record = samples.setdefault(key, {"source_line": number, "raw": line})
        if column in record:
            rejects.append(Reject(number, f"a second {text.split('{', 1)[0]} for GPU {key[1]} at "
                                          f"{key[2].isoformat()}: many scrapes in one file need sample "
                                          "timestamps", line))
            continue
        record[column] = value
        for label, target in LABELS.items():
            if labels.get(label):
                record.setdefault(target, labels[label])
    records = list(samples.items())
    rows = traces.Rows([record["source_line"] for _, record in records], [record["raw"] for _, record in records])
    rows.rejects = rejects

    def column(name: str, kind: pa.DataType) -> pa.Array:
        return pa.array([record.get(name) for _, record in records], kind)

    found = {
        "host": pa.array([host for (host, _, _), _ in records], pa.string()),
        "gpu_index": traces.check_range(rows, pa.array([gpu for (_, gpu, _), _ in records], pa.int64()), "gpu_index"),
        "sampled_at": pa.array([at for (_, _, at), _ in records], traces.TIME),
        **{name: column(name, pa.string()) for name in LABELS.values()},
    }
    for name in METRICS.values():
        found[name] = traces.check_range(rows, column(name, traces.COLUMNS[name]), name)
    return traces.build(rows, found, KIND)


stage = traces.staged(parse)
totals = traces.totals


def _sample(text: str, ctx: ParseContext) -> tuple[tuple, str, float | int, dict]:
    """(host, gpu, time), the column, the value and the labels of one sample line."""
    try:
        (family,) = list(text_string_to_metric_families(text))
        (sample,) = family.samples
    except ValueError as error:
        raise BadValue(f"not Prometheus text ({error})") from None
    labels = sample.labels
    column = METRICS[sample.name]
    gpu = values.integer(labels.get("gpu"), "the gpu label")
    if gpu is None:
        raise BadValue(f"{sample.name} has no gpu label")
    if sample.timestamp is not None:
        at = values.timestamp(float(sample.timestamp), "the sample timestamp", timezone.utc)
    elif ctx.at is not None:
        at = ctx.at.astimezone(timezone.utc)
    else:
        raise NoTime("its samples carry no timestamps: pass --at with the time of the scrape")
    value = values.number(sample.value, sample.name)
    if column == "energy_mj":
        value = values.integer(sample.value, sample.name)
    host = ctx.host or labels.get("Hostname") or traces.file_host(ctx.source)
    return (host, gpu, at), column, value, labels
