"""Serving windows from inference servers' Prometheus metrics (vLLM, Triton, TorchServe).

The counters an inference server exposes are totals since it started, so a window is the span
between two consecutive scrapes of one model (service, model version, host): its requests and
tokens are the counters' increases over that span (a counter that went down was reset by a
restart and counts from 0 again, as Prometheus' `increase()` reads it), and its latency
percentiles come from the increase of the latency histogram's buckets, interpolated inside a
bucket as `histogram_quantile()` does. A single scrape is one window from when the server started
(its counters' zero: --started-at, else the earliest `_created` of its request counters, else
`process_start_time_seconds`) to when it was scraped (its sample timestamps, else --at); where
either end is unknown the file is refused naming the option to pass.

Read from vLLM: `vllm:request_success_total` (every finished request, by `finished_reason`;
`abort` and `error` count as errors), `vllm:prompt_tokens_total`, `vllm:generation_tokens_total`
and `vllm:e2e_request_latency_seconds_bucket`. Triton: `nv_inference_request_success` and
`nv_inference_request_failure` (requests, not batched inferences). TorchServe:
`ts_inference_requests_total` (it counts no failures per model: success is every request and
requests_error stays NULL). The service is the `model_name` (or `model`) label, the version the
`model_version` (or `version`) label else `unversioned`, the host --host else the `pod`,
`Hostname` or `instance` label.

A file holds many scrapes when its samples carry timestamps (Prometheus text allows a time in
milliseconds after the value), or when scrapes follow one another without them (`curl` appended
every minute): a series seen again starts the next scrape, and --scrape-interval with --at (the
last scrape's time) place them in time. `parse` reads such a file, `windows` is what the Prometheus
HTTP importer (ingest/importers/prometheus.py) calls with the samples it pulled.

Triton's `nv_energy_consumption` (joules since the server started, per `gpu_uuid`) gives the
windows of the same host their energy: the increase of the GPUs' counters over the window, shared
among the host's models in proportion to their `nv_inference_compute_infer_duration_us` increase
(equally when none computed). A counter that did not rise is a GPU without one (Pascal and older
report 0): those windows' energy stays unknown, and the summary says so.
"""
from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from dataclasses import dataclass
from datetime import timezone

from prometheus_client.parser import text_string_to_metric_families

from ingest.engine import values
from ingest.engine.contract import BadValue, Lines, ParseContext, Parsed, Reject
from ingest.formats import serving
from ingest.settings import config

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
    "nv_inference_compute_infer_duration_us": "compute_us",  # shares out the GPUs' energy
}
REQUEST_ROLES = {"finished", "success", "error", "requests"}
COUNT_ROLES = {"finished", "success", "error", "requests", "prompt_tokens", "output_tokens"}  # whole numbers
# Latency histogram bucket series -> milliseconds per unit of its `le`.
HISTOGRAMS = {"vllm:e2e_request_latency_seconds_bucket": 1000.0}
GPU_ENERGY = "nv_energy_consumption"  # Triton: joules since the server started, per gpu_uuid
METRICS = (*COUNTERS, *HISTOGRAMS, GPU_ENERGY)  # the series windows are made of (the importer pulls these)
# When a counter began: prometheus_client's `_created` series (epoch seconds) of the counters read.
CREATED = {(name[:-len("_total")] if name.endswith("_total") else name) + "_created": name
           for name, role in COUNTERS.items() if role in COUNT_ROLES}
PROCESS_START = "process_start_time_seconds"
JOULES_PER_KWH = 3.6e6
VLLM_ERROR_REASONS = {"abort", "error"}
MODEL_LABELS = ("model_name", "model", "ModelName")  # TorchServe 0.8+ may use CamelCase
VERSION_LABELS = ("model_version", "version", "ModelVersion")
HOST_LABELS = ("pod", "Hostname", "hostname", "instance")
UNVERSIONED = "unversioned"
QUANTILES = {"latency_ms_p50": 0.5, "latency_ms_p95": 0.95, "latency_ms_p99": 0.99}
WHOLE_TOLERANCE = 1e-6  # counters arrive as floats ("10.000000")
# A single scrape's window needs both ends; each missing one names its option.
NO_START = ("--started-at TIME (when the server started: its counters are totals since then, and the scrape "
            "has no `_created` series or process_start_time_seconds to say when)")
NO_END = ("--at TIME (when it was scraped: its samples carry no timestamps, and the file's modification time "
          "is not used, since copies and uploads change it)")


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
    """Windows between the file's scrapes (one scrape: from the server's start); raises BadValue
    for a file whose scrapes cannot be placed in time, naming the option to pass."""
    samples, starts, rejects = [], [], []
    for number, line in lines:
        text = line.strip()
        name = text.split("{", 1)[0].split(" ", 1)[0]
        if not text or text.startswith("#") or name not in METRICS and name not in CREATED and name != PROCESS_START:
            continue
        try:
            sample = read_line(text, number)
        except BadValue as error:
            rejects.append(Reject(number, str(error), line))
            continue
        (samples if name in METRICS else starts).append(sample)
    if not any(COUNTERS.get(s.name) in REQUEST_ROLES for s in samples):
        raise BadValue("no vLLM, Triton or TorchServe request counters found ("
                       + ", ".join(n for n, role in COUNTERS.items() if role in REQUEST_ROLES) + ")")
    notes: list[str] = []
    if all(s.at_s is None for s in samples):
        samples = _place_scrapes(samples, starts, ctx, notes)
    else:
        for sample in samples:
            if sample.at_s is None:
                rejects.append(Reject(sample.line, "no sample timestamp, while other samples of the file have "
                                                   "one: it cannot be placed among the scrapes", sample.raw))
        samples = [s for s in samples if s.at_s is not None]
    if len({s.at_s for s in samples if COUNTERS.get(s.name) in REQUEST_ROLES}) == 1:
        samples = samples + _baselines(samples, starts, ctx, notes)
    parsed = windows(samples, ctx, prices)
    if not parsed.tables["serving_windows"] and not parsed.rejects:
        raise BadValue("no model was scraped twice: each model's counters are totals since its server started, "
                       "so a window needs two scrapes of the same model (or one scrape of the whole file)")
    parsed.rejects = sorted(rejects + parsed.rejects, key=lambda r: r.line)
    parsed.warnings = notes + parsed.warnings
    return parsed


def _place_scrapes(samples: list[Sample], starts: list[Sample], ctx: ParseContext, notes: list[str]) -> list[Sample]:
    """The samples of a file without timestamps, each given its scrape's time: the last scrape at
    --at, each earlier one --scrape-interval before the next. A series seen again starts a scrape."""
    scrape, seen, numbered = 0, set(), []
    for sample in samples:
        key = (sample.name, sample.labels)
        if key in seen:
            scrape, seen = scrape + 1, set()
        seen.add(key)
        numbered.append((scrape, sample))
    count = scrape + 1
    if count == 1:
        if ctx.at is None:
            raise BadValue(f"one scrape: pass {NO_END}" + ("" if _start(starts, ctx) else f" and {NO_START}"))
        return [dataclasses.replace(s, at_s=ctx.at.timestamp()) for _, s in numbered]
    if ctx.scrape_interval_s is None or ctx.at is None:
        missing = " and ".join(option for option, value in (("--scrape-interval SECONDS (the time between them)",
                                                             ctx.scrape_interval_s),
                                                            ("--at TIME (when the last one was taken)", ctx.at))
                               if value is None)
        raise BadValue(f"{count} scrapes one after another without sample timestamps: pass {missing}")
    last_s = ctx.at.timestamp()
    notes.append(f"{count} scrapes without timestamps, {ctx.scrape_interval_s:g} s apart (--scrape-interval), "
                 f"the last taken --at {_iso(last_s)}")
    return [dataclasses.replace(s, at_s=last_s - (count - 1 - n) * ctx.scrape_interval_s) for n, s in numbered]


def _baselines(samples: list[Sample], starts: list[Sample], ctx: ParseContext, notes: list[str]) -> list[Sample]:
    """A zero sample of every series at the server's start, so that a single scrape makes one window:
    the start is --started-at, else the earliest `_created` of a counter read, else the process's start."""
    end_s = min(s.at_s for s in samples)
    found = _start(starts, ctx)
    if found is None:
        raise BadValue(f"one scrape: pass {NO_START}")
    start_s, source = found
    if start_s >= end_s:
        raise BadValue(f"the server's start {_iso(start_s)} (from {source}) is not before the scrape at "
                       f"{_iso(end_s)}: check --at / --started-at")
    notes.append(f"one scrape: its window runs from the server's start {_iso(start_s)} (from {source}) "
                 f"to the scrape at {_iso(end_s)}" + (" (--at)" if ctx.at is not None and end_s == ctx.at.timestamp()
                                                      else ""))
    return [dataclasses.replace(s, at_s=start_s, value=0.0) for s in samples]


def _start(starts: list[Sample], ctx: ParseContext) -> tuple[float, str] | None:
    """When the server's counters were zero (epoch s) and where that came from, if known."""
    if ctx.started_at is not None:
        return ctx.started_at.timestamp(), "--started-at"
    created = [s for s in starts if s.name in CREATED]
    processes = [s for s in starts if s.name == PROCESS_START]
    if created:
        first = min(created, key=lambda s: s.value)
        return first.value, f"{first.name}, the earliest counter creation, line {first.line}"
    if processes:
        first = min(processes, key=lambda s: s.value)
        return first.value, f"{PROCESS_START}, line {first.line}"
    return None


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
    # host -> GPU uuid -> time -> energy counter sample (J)
    energy: dict[str | None, dict[str, dict[float, Sample]]] = defaultdict(lambda: defaultdict(dict))
    for sample in samples:
        labels = dict(sample.labels)
        if sample.name == GPU_ENERGY:
            host = ctx.host or next((labels[k] for k in HOST_LABELS if labels.get(k)), None)
            energy[host][labels.get("gpu_uuid") or _labels(sample.labels)][sample.at_s] = sample
            continue
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
    spans: dict[str, tuple[float, float, float | None]] = {}  # window key -> start, end (epoch s), compute µs
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
            spans[row["window_key"]] = (record["window_start"], record["window_end"], record.get("compute_us"))
            parsed.accepted += 1
    parsed.tables["serving_windows"] = sorted(latest.values(), key=lambda r: (r["window_start"], r["window_key"]))
    if energy:
        _attach_gpu_energy(parsed.tables["serving_windows"], spans, energy, parsed.warnings)
    return parsed


def _attach_gpu_energy(rows: list[dict], spans: dict[str, tuple[float, float, float | None]],
                       energy: dict[str | None, dict[str, dict[float, Sample]]], warnings: list[str]) -> None:
    """Give the windows of each host and span the increase (kWh) of that host's GPU energy counters,
    shared among its models by compute time (equally when none computed); energy_source `gpu_counter`."""
    together: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        start_s, end_s, _ = spans[row["window_key"]]
        together[(row["host"], start_s, end_s)].append(row)
    flat = []
    for (host, start_s, end_s), members in together.items():
        gpus = energy.get(host)
        if not gpus or any(start_s not in points or end_s not in points for points in gpus.values()):
            continue
        joules = 0.0
        for points in gpus.values():
            before, after = points[start_s].value, points[end_s].value
            joules += after - before if after >= before else after  # a drop is a restart: from 0
        if joules <= 0:
            flat.append((host, start_s, end_s))
            continue
        computed = [spans[row["window_key"]][2] for row in members]
        total_us = sum(c or 0 for c in computed)
        shares = ([(c or 0) / total_us for c in computed] if total_us > 0 and None not in computed
                  else [1 / len(members)] * len(members))
        for row, share in zip(members, shares):
            row["energy_kwh"], row["energy_source"] = joules * share / JOULES_PER_KWH, "gpu_counter"
            row["gpu_uuids"] = row["gpu_uuids"] or sorted(gpus)
            row["gpu_count"] = row["gpu_count"] or len(gpus)
    if flat:
        host, start_s, end_s = flat[0]
        warnings.append(f"{GPU_ENERGY} did not rise over {len(flat)} span(s) (first: host {host or 'unnamed'}, "
                        f"{_iso(start_s)} to {_iso(end_s)}): GPUs without an energy counter (Pascal and older) "
                        "report 0, so those windows' energy is unknown, not 0")


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
            counts = {role: _whole(sums[role], role) for role in seen if role in COUNT_ROLES}
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
            "compute_us": sums["compute_us"] if "compute_us" in seen else None,
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
