"""Serving metric windows: one record per service, model version, host and time window.

JSONL (one object per line) or CSV with a header. A window has a start and either an end or a
length (`window_seconds`). Where `cost_usd` is missing it is derived from the price catalog
(ingest/settings/config.py): instance price x replicas x window hours, or GPU price x GPUs x hours, and
`cost_source` says `derived`; with neither price known the cost stays NULL. `energy_kwh` is
kept as given and NULL when absent, never 0. A window seen again (same service, version, host
and start) replaces the earlier one, in the same file or a later one.

The format is the definition below; ingest/engine reads it (docs/formats/serving.md).
"""
from __future__ import annotations

from functools import partial

from ingest.engine import batch_sql, reader
from ingest.engine.definition import (COUNT, INTEGER_MAX, MONEY, NUMBER, PERCENT, TEXT, TEXT_LIST, TIME,
                                      CatalogCost, CountOf, Definition, Detect, Field, Given, Key, Required,
                                      Span, SumAtMost, Total, sniff as _sniff)

KIND = "serving"
TABLES = ("serving_windows",)

SERVING = Definition(
    kind=KIND,
    table="serving_windows",
    detect=Detect(all_of=("requests_total",), any_of=("window_start", "service")),
    header_requires=("window_start", "requests_total", "requests_success", "service", "model_version"),
    header_reason="not a serving-window header",
    steps=(
        Field("window_start", TIME, names=("window_start", "start_time")),
        Field("window_end", TIME, names=("window_end", "end_time")),
        Field("window_s", NUMBER, names=("window_s", "window_seconds"), unit="s", minimum=None),
        Span("window_start", "window_end", "window_s", tolerance_s=1.0, missing="no window_end or window_seconds"),
        Field("service", TEXT),
        Field("model_version", TEXT),
        Required("service", "no service"),
        Required("model_version", "no model_version"),
        Field("requests_total", COUNT, unit="requests"),
        Field("requests_success", COUNT, unit="requests"),
        Field("requests_error", COUNT, unit="requests"),
        Required("requests_total", "no requests_total"),
        Required("requests_success", "no requests_success (cost per successful request needs it)"),
        SumAtMost(("requests_success", "requests_error"), "requests_total",
                  "requests_success {requests_success} + requests_error {requests_error} is more than "
                  "requests_total {requests_total}"),
        Field("host", TEXT),
        Field("instance_type", TEXT),
        Field("gpu_type", TEXT),
        Field("replicas", COUNT, unit="instances", maximum=INTEGER_MAX),
        Field("gpu_uuids", TEXT_LIST),
        Field("gpu_count", COUNT, unit="GPUs", maximum=INTEGER_MAX),
        CountOf("gpu_count", items="gpu_uuids"),
        Field("cost_usd", MONEY, names=("cost_usd", "estimated_cost_usd"), unit="USD"),
        CatalogCost("cost_usd", source="cost_source", price="price_per_hour_usd",
                    per=(("instance", "instance_type", "replicas"), ("gpu", "gpu_type", "gpu_count")),
                    too_large="catalog price x replicas"),
        Field("energy_kwh", NUMBER, unit="kWh"),
        Field("latency_ms_p50", NUMBER, unit="ms"),
        Field("latency_ms_p95", NUMBER, unit="ms"),
        Field("latency_ms_p99", NUMBER, unit="ms"),
        Field("throughput_rps", NUMBER, unit="requests/s"),
        Field("prompt_tokens", COUNT, unit="tokens"),
        Field("output_tokens", COUNT, unit="tokens"),
        Field("avg_gpu_util_pct", PERCENT, names=("avg_gpu_util_pct", "avg_gpu_util"), unit="%"),
        Field("avg_cpu_util_pct", PERCENT, names=("avg_cpu_util_pct", "avg_cpu_util"), unit="%"),
    ),
    key=Key("window_key", ("service", "model_version", "host", "window_start")),
    given=(Given("energy_source", "energy_kwh"),),
    totals=(
        Total("windows", "rows"),
        Total("requests_total", "sum", "requests_total"),
        Total("cost_usd_total", "money", "cost_usd"),
        Total("windows_cost_derived", "equals", "cost_source", "derived"),
        Total("windows_without_cost", "absent", "cost_usd"),
        Total("energy_kwh_total", "float", "energy_kwh"),
        Total("windows_with_energy", "present", "energy_kwh"),
    ),
)


def sniff(name: str, head: str) -> bool:
    """JSON lines or a CSV header that name requests_total and a window start or a service."""
    return _sniff(SERVING, head)


parse = partial(reader.parse, SERVING)              # (lines, ctx, prices=None) -> Parsed, line by line
build_window = partial(reader.build_row, SERVING)   # (record, line, ctx, prices) -> row; BadValue
totals = partial(reader.totals, SERVING)            # (parsed) -> the --json figures
stage = partial(batch_sql.stage, SERVING)           # (src, con, ctx, early=None) -> Staged: the SQL pass
read_early = partial(batch_sql.read_early, SERVING)  # (src, head) -> its first batch read on a thread, or None
