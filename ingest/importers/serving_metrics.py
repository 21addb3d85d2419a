"""Serving windows from inference servers' Prometheus metrics (vLLM, Triton, TorchServe).

The counters an inference server exposes are totals since it started, so a window is the span
between two consecutive scrapes of one model (service, model version, host): its requests and
tokens are the counters' increases over that span (a counter that went down was reset by a
restart and counts from 0 again, as Prometheus' `increase()` reads it), and its latency
percentiles come from the increase of the latency histogram's buckets, interpolated inside a
bucket as `histogram_quantile()` does. A single scrape has no window and is refused whole.

Read from vLLM: `vllm:request_success_total` (every finished request, by `finished_reason`;
`abort` and `error` count as errors), `vllm:prompt_tokens_total`, `vllm:generation_tokens_total`
and `vllm:e2e_request_latency_seconds_bucket`. Triton: `nv_inference_request_success` and
`nv_inference_request_failure` (requests, not batched inferences). TorchServe:
`ts_inference_requests_total` (it counts no failures per model: success is every request and
requests_error stays NULL). The service is the `model_name` (or `model`) label, the version the
`model_version` (or `version`) label else `unversioned`, the host --host else the `pod`,
`Hostname` or `instance` label.

A file holds many scrapes when its samples carry timestamps (Prometheus text allows a time in
milliseconds after the value); `parse` reads such a file, `windows` is what the Prometheus HTTP
importer (ingest/importers/prometheus.py) calls with the samples it pulled.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from datetime import timezone

from prometheus_client.parser import text_string_to_metric_families

from ingest import config, serving, values
from ingest.contract import BadValue, Lines, ParseContext, Parsed, Reject

KIND = "serving-metrics"
TABLES = ("serving_windows",)
# Counter name -> what it counts.
COUNTERS = {
    "vllm:request_success_total": "finished",  # split by finished_reason
    "vllm:prompt_tokens_total": "prompt_tokens",
    "vllm:generation_tokens_total": "output_tokens",
    "nv_inference_request_success": "success",
    "nv_inference_request_failure": "error",
    "ts_inference_requests_total": "requests",
}
REQUEST_ROLES = {"finished", "success", "error", "requests"}
# Latency histogram bucket series -> milliseconds per unit of its `le`.
HISTOGRAMS = {"vllm:e2e_request_latency_seconds_bucket": 1000.0}
METRICS = (*COUNTERS, *HISTOGRAMS)
VLLM_ERROR_REASONS = {"abort", "error"}
MODEL_LABELS = ("model_name", "model", "ModelName")  # TorchServe 0.8+ may use CamelCase
VERSION_LABELS = ("model_version", "version", "ModelVersion")
HOST_LABELS = ("pod", "Hostname", "hostname", "instance")
UNVERSIONED = "unversioned"
QUANTILES = {"latency_ms_p50": 0.5, "latency_ms_p95": 0.95, "latency_ms_p99": 0.99}
WHOLE_TOLERANCE = 1e-6  # counters arrive as floats ("10.000000")
SINGLE_SCRAPE = ("a single scrape has no window: an inference server's counters are totals since it "
                 "started, so requests per window need two or more scrapes of the same model. Save "
                 "scrapes with sample timestamps (README: Serving metrics from Prometheus) or pull "
                 "them with `mlcost import prometheus`")


@dataclass(frozen=True)
class Sample:
    """One sample of a metric mlcost reads: its labels, time (epoch seconds), value and where it came from."""

    name: str
    labels: tuple[tuple[str, str], ...]
    at_s: float | None
    value: float
    line: int
    raw: str = ""


def sniff(name: str, head: str) -> bool:
    """Prometheus text with an inference server's request counters."""
    return any(line.startswith(tuple(COUNTERS)) for line in head.splitlines())


def parse(lines: Lines, ctx: ParseContext, prices: config.Prices | None = None) -> Parsed:
    """Windows between the file's scrapes; raises BadValue for a file that is a single scrape."""
    samples, rejects = [], []
    for number, line in lines:
        text = line.strip()
        if not text or text.startswith("#") or text.split("{", 1)[0].split(" ", 1)[0] not in METRICS:
            continue
        try:
            samples.append(read_line(text, number))
        except BadValue as error:
            rejects.append(Reject(number, str(error), line))
    timed = [s for s in samples if s.at_s is not None]
    if not timed:
        if samples:
            raise BadValue(SINGLE_SCRAPE)
        raise BadValue("no vLLM, Triton or TorchServe request counters found (" + ", ".join(COUNTERS) + ")")
    for sample in samples:
        if sample.at_s is None:
            rejects.append(Reject(sample.line, "no sample timestamp, while other samples of the file have "
                                               "one: it cannot be placed among the scrapes", sample.raw))
    parsed = windows(timed, ctx, prices)
    if not parsed.tables["serving_windows"] and not parsed.rejects:
        raise BadValue(SINGLE_SCRAPE)
    parsed.rejects = sorted(rejects + parsed.rejects, key=lambda r: r.line)
    return parsed


def totals(parsed: Parsed) -> dict:
    """The serving totals (serving.totals) and the tokens of the windows."""
    rows = parsed.tables.get("serving_windows", [])
    return {**serving.totals(parsed),
            **{f"{name}_total": sum(r[name] or 0 for r in rows) if any(r[name] is not None for r in rows) else None
               for name in ("prompt_tokens", "output_tokens")}}


def read_line(text: str, number: int) -> Sample:
    """The Sample of one exposition line; raises BadValue with the reason."""
    try:
        (family,) = list(text_string_to_metric_families(text))
        (sample,) = family.samples
    except ValueError as error:
        raise BadValue(f"not Prometheus text ({error})") from None
    value = float(sample.value)
    if not math.isfinite(value) or value < 0:  # every series read is a count
        raise BadValue(f"{sample.name} {sample.value!r} is not a count")
    return Sample(sample.name, tuple(sorted(sample.labels.items())),
                  None if sample.timestamp is None else float(sample.timestamp), value, number, text)


def windows(samples: list[Sample], ctx: ParseContext, prices: config.Prices | None = None,
            source_kind: str = KIND, extra: dict | None = None) -> Parsed:
    """One serving window per model and pair of consecutive scrape times, validated by serving.build_window;
    `extra` adds fields to every window (instance_type, replicas, gpu_type, gpu_count: what prices it)."""
    prices = prices if prices is not None else config.load().prices
    parsed = Parsed()
    # group -> series (name, labels) -> time -> sample
    groups: dict[tuple[str, str, str | None], dict[tuple, dict[float, Sample]]] = defaultdict(lambda: defaultdict(dict))
    for sample in samples:
        labels = dict(sample.labels)
        service = next((labels[k] for k in MODEL_LABELS if labels.get(k)), None)
        if service is None:
            parsed.rejects.append(Reject(sample.line, f"{sample.name} has no model_name or model label", sample.raw))
            continue
        version = next((labels[k] for k in VERSION_LABELS if labels.get(k)), UNVERSIONED)
        host = ctx.host or next((labels[k] for k in HOST_LABELS if labels.get(k)), None)
        series = groups[(service, version, host)][(sample.name, sample.labels)]
        if sample.at_s in series:
            parsed.rejects.append(Reject(sample.line, f"a second {sample.name} sample of the same series at "
                                                      f"the same time (line {series[sample.at_s].line})", sample.raw))
            continue
        series[sample.at_s] = sample
    latest: dict[str, dict] = {}
    for (service, version, host), series in groups.items():
        for record, line, raw in _group_windows(service, version, host, series, parsed):
            try:
                row = serving.build_window({**(extra or {}), **record}, line, ctx, prices)
            except BadValue as error:
                parsed.rejects.append(Reject(line, str(error), raw))
                continue
            row["source_kind"] = source_kind
            latest.pop(row["window_key"], None)
            latest[row["window_key"]] = row
            parsed.accepted += 1
    parsed.tables["serving_windows"] = sorted(latest.values(), key=lambda r: (r["window_start"], r["window_key"]))
    return parsed


def _group_windows(service: str, version: str, host: str | None, series: dict[tuple, dict[float, Sample]],
                   parsed: Parsed):
    """(window record, line, raw) for each pair of consecutive scrape times of one model."""
    requests = {key: points for key, points in series.items() if COUNTERS.get(key[0]) in REQUEST_ROLES}
    if not requests:
        for points in series.values():
            first = min(points.values(), key=lambda s: s.line)
            parsed.rejects.append(Reject(first.line, f"model {service} {version} has latency or token series "
                                                     "but no request counter", first.raw))
            break
        return
    times = sorted({at for points in requests.values() for at in points})
    first_seen = {key: min(points) for key, points in series.items()}
    for start, end in zip(times, times[1:]):
        anchor = next(points[end] for points in requests.values() if end in points)
        sums: dict[str, float] = defaultdict(float)
        buckets: dict[float, float] = defaultdict(float)
        seen: set[str] = set()
        missing = None
        for key, points in series.items():
            name, labels = key
            if end not in points or start not in points and first_seen[key] < end:
                if name in COUNTERS and COUNTERS[name] in REQUEST_ROLES and (start in points or end in points):
                    missing = f"{name}{_labels(labels)} has no sample at {_iso(start if end in points else end)}"
                continue
            before = points[start].value if start in points else 0.0  # a series born in this window
            after = points[end].value
            increase = after - before if after >= before else after  # a drop is a restart: count from 0
            if name in HISTOGRAMS:
                le = dict(labels).get("le")
                try:
                    buckets[float(le)] += increase * 1.0
                except (TypeError, ValueError):
                    parsed.rejects.append(Reject(points[end].line, f"{name} bucket le={le!r} is not a number",
                                                 points[end].raw))
                continue
            role = COUNTERS[name]
            if role == "finished":
                role = "error" if dict(labels).get("finished_reason") in VLLM_ERROR_REASONS else "success"
            sums[role] += increase
            seen.add(role)
        if missing:
            parsed.rejects.append(Reject(anchor.line, f"window {_iso(start)} to {_iso(end)} of {service} "
                                                      f"{version}: {missing}", anchor.raw))
            continue
        try:
            counts = {role: _whole(sums[role], role) for role in seen}
        except BadValue as error:
            parsed.rejects.append(Reject(anchor.line, str(error), anchor.raw))
            continue
        if "requests" in counts:  # TorchServe: every request, no failures known
            total, success, error = counts["requests"], counts["requests"], None
        else:
            success, error = counts.get("success", 0), counts.get("error")
            total = success + (error or 0)
        record = {
            "window_start": start, "window_end": end, "service": service, "model_version": version,
            "host": host, "requests_total": total, "requests_success": success, "requests_error": error,
            "throughput_rps": total / (end - start),
            "prompt_tokens": counts.get("prompt_tokens"), "output_tokens": counts.get("output_tokens"),
        }
        for column, q in QUANTILES.items():
            record[column] = _quantile(q, buckets, next(iter(HISTOGRAMS.values())))
        yield record, anchor.line, anchor.raw


def _quantile(q: float, buckets: dict[float, float], unit_ms: float) -> float | None:
    """The q-quantile (ms) of a histogram's bucket increases, interpolated linearly inside a bucket."""
    if math.inf not in buckets or buckets[math.inf] <= 0:
        return None
    ordered, running = [], 0.0
    for le in sorted(buckets):
        running = max(running, buckets[le])  # buckets reset apart can dent the cumulative counts
        ordered.append((le, running))
    rank = q * ordered[-1][1]
    lower, below = 0.0, 0.0
    for le, count in ordered:
        if count >= rank:
            if math.isinf(le):
                return lower * unit_ms  # the rank lies past the last finite bound
            if count == below:
                return le * unit_ms
            return (lower + (le - lower) * (rank - below) / (count - below)) * unit_ms
        lower, below = le, count
    return None


def _whole(value: float, role: str) -> int:
    rounded = round(value)
    if abs(value - rounded) > WHOLE_TOLERANCE:
        raise BadValue(f"the {role.replace('_', ' ')} counter rose by {value:g}, not a whole number")
    return rounded


def _labels(labels: tuple[tuple[str, str], ...]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}"


def _iso(at_s: float) -> str:
    return values.timestamp(at_s, "time", timezone.utc).isoformat().replace("+00:00", "Z")
