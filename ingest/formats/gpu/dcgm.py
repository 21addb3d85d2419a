"""GPU traces from NVIDIA's dcgm-exporter: Prometheus text, one scrape or many.

Read: DCGM_FI_DEV_POWER_USAGE (W), DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION (mJ since boot, a whole
number; it restarts at a reboot), DCGM_FI_DEV_GPU_UTIL (%) and DCGM_FI_DEV_FB_USED (MiB), with
the labels `gpu` (the index), `UUID`, `modelName`, `Hostname`, and `pod`/`namespace` when
present; other metrics and comments are skipped. The lines of one GPU at one time make one
sample. A sample's time is its own timestamp (many scrapes in one file need them), else --at for
a file that is one scrape without timestamps (without either, the file fails). The host is
--host, else the `Hostname` label, else the file name up to its first `_`.

The format is the definition below; ingest/engine reads it (prom_text: the SQL pass and, for the
lines SQL cannot read, prometheus_client's parser; prom_records: one sample from its lines), and
traces.stage_totals sums a file up (docs/formats/gpu-traces.md). The Prometheus importer reads a
server's DCGM series by the same definition (prom_columns; its host from the labels).
"""
from __future__ import annotations

from ingest.engine import batch_sql, values
from ingest.engine.contract import FileRefused, ParseContext
from ingest.engine.definition import (COUNT, NUMBER, TEXT, TIME, Definition, Detect, Field, FromOption, Key,
                                      Required, Within, sniff as _sniff)
from ingest.engine.file_rules import PromText
from ingest.engine.staging import Source, Staged
from ingest.formats.gpu import traces

KIND = "dcgm"
TABLES = (traces.TABLE,)
METRICS = {  # metric -> column (its unit)
    "DCGM_FI_DEV_POWER_USAGE": "power_w",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "energy_mj",
    "DCGM_FI_DEV_GPU_UTIL": "gpu_util_pct",
    "DCGM_FI_DEV_FB_USED": "mem_used_mib",
}
LABELS = {"UUID": "gpu_uuid", "modelName": "gpu_name", "pod": "pod", "namespace": "namespace"}
NoTime = FileRefused  # a sample without a timestamp in a file loaded without --at


def _measure(metric: str, kind: str, unit: str) -> Field:
    """A metric's value as its column: a number of at most 10^15 in size (a count as well), of either sign."""
    return Field(METRICS[metric], kind, names=(metric,), unit=unit, minimum=None, maximum=int(values.NUMBER_LIMIT))


def _within(column: str) -> Within:
    """traces.LIMITS, checked on the whole sample: outside is a misread column or a broken counter."""
    low, high = traces.LIMITS[column]
    return Within(column, low, high, reason=column + " {value!r} is outside {low:g} to {high:g}")


DCGM = Definition(
    kind=KIND,
    table=traces.TABLE,
    detect=Detect(all_of=(), any_of=tuple(METRICS)),
    header_requires=(),
    header_reason="",
    prometheus=PromText(metrics=tuple(METRICS), time="the sample timestamp",
                        repeated="a second {metric} for GPU {gpu_index} at {sampled_at}: many scrapes in one file "
                                 "need sample timestamps"),
    steps=(  # in the order the reasons are looked for: the first that fails names the line's
        Field("gpu_index", COUNT, names=("gpu",), minimum=None),
        Required("gpu_index", "no gpu label"),
        Field("sampled_at", TIME, names=("the sample timestamp",)),
        FromOption("sampled_at", "at", when_absent=True),
        Required("sampled_at", "its samples carry no timestamps: pass --at with the time of the scrape", refuses_file=True),
        _measure("DCGM_FI_DEV_POWER_USAGE", NUMBER, "W"),
        _measure("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", COUNT, "mJ"),
        _measure("DCGM_FI_DEV_GPU_UTIL", NUMBER, "%"),
        _measure("DCGM_FI_DEV_FB_USED", NUMBER, "MiB"),
        *(Field(column, TEXT, names=(label,)) for label, column in LABELS.items()),
        Field("host", TEXT, names=("Hostname",)),
        FromOption("host", "host"),
        traces.HOST_FROM_FILE_NAME,
        *(_within(column) for column in ("gpu_index", *METRICS.values())),  # on the whole sample (prom_records)
    ),
    key=Key("sample_key", ("host", "gpu_index", "sampled_at"), stored=False),  # one sample from its lines
)


def sniff(name: str, head: str) -> bool:
    """Prometheus text naming one of METRICS."""
    return _sniff(DCGM, head)


def stage(src: Source, con, ctx: ParseContext) -> Staged:
    """Stage the file's samples and rejects in `con` (the engine's SQL pass), summed up as every trace file is."""
    return traces.stage_totals(con, batch_sql.stage(DCGM, src, con, ctx).accepted)
