"""A Prometheus scrape (or a file of scrapes) holding both GPU series (dcgm-exporter) and an inference
server's series (vLLM, Triton, ...): both halves load, as one load of this kind. The GPU samples are
read by ingest/formats/gpu/dcgm.py's definition and the serving windows as ingest/formats/serving_metrics.py
does, from the same lines and with the same options (--at, --started-at, --host); each reader
skips the other's series.
"""
from __future__ import annotations

from ingest.engine import staging
from ingest.engine.contract import ParseContext, Parsed
from ingest.formats import serving_metrics
from ingest.formats.gpu import dcgm

KIND = "dcgm+serving-metrics"
TABLES = dcgm.TABLES + serving_metrics.TABLES


def sniff(name: str, head: str) -> bool:
    """Prometheus text with both DCGM_FI_ metrics and an inference server's request counters."""
    return dcgm.sniff(name, head) and serving_metrics.sniff(name, head)


def _serving_totals(parsed: Parsed) -> dict:
    served = serving_metrics.totals(parsed)
    served["windows_energy_kwh_total"] = served.pop("energy_kwh_total")  # the GPUs' energy keeps its own name
    return served


def stage(src: staging.Source, con, ctx: ParseContext) -> staging.Staged:
    """Stage the GPU samples (dcgm's columnar path) and the serving windows (serving_metrics) of one file."""
    gpus = dcgm.stage(src, con, ctx)
    windows = serving_metrics.parse(staging.lines(src), ctx)
    staging.insert_parsed(con, windows, src.name)
    return staging.Staged(gpus.accepted + windows.accepted, {**gpus.totals, **_serving_totals(windows)},
                          gpus.warnings + windows.warnings)
