"""Pull GPU traces (DCGM exporter) and serving windows (vLLM, Triton, TorchServe) from a
Prometheus server's HTTP API.

`query_range` evaluates each series at every `step` from `since` to `until`, both moved down to
a multiple of the step so that imports of overlapping ranges make the same samples and windows
(which then replace each other, latest wins) instead of counting an hour twice. A long range is
asked for in chunks of at most MAX_POINTS steps (Prometheus refuses more than 11,000 points per
series in one query). The GPU samples are the DCGM series at each step, read by the DCGM definition
(ingest/formats/gpu/dcgm.py, as GPU below: the host from `Hostname`, else the `instance` label without
its port) as columns, with no text (ingest/engine/prom_columns.py); the serving windows are
serving_metrics.windows over the steps, one window per step.
"""
from __future__ import annotations

import base64
import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from ingest.engine import prom_columns, staging
from ingest.engine.contract import ParseContext, Parsed, Reject
from ingest.engine.definition import Field, FromOption, Required
from ingest.formats import serving_metrics
from ingest.formats.gpu import dcgm, traces
from ingest.formats.gpu.dcgm import METRICS as DCGM_METRICS
from ingest.settings import config

KIND = "prometheus"
MAX_POINTS = 10_000
TIMEOUT_S = 120.0
DCGM_QUERY = '{__name__=~"' + "|".join(DCGM_METRICS) + '"}'
SERVING_QUERY = '{__name__=~"' + "|".join(serving_metrics.METRICS) + '"}'
ERROR_TEXT_MAX = 300  # a server's error body is shown as text, cut short
INSTANCE_HOST = "the instance's host"  # the `instance` label without its port (no label can be named so)


def _gpu_steps() -> tuple:
    """dcgm.DCGM's rules but for the host: the `Hostname` label, else the `instance` label's host,
    else the sample is refused (no --host, no file name)."""
    steps = []
    for step in dcgm.DCGM.steps:
        if isinstance(step, Field) and step.column == "host":
            steps += [replace(step, names=(*step.spellings, INSTANCE_HOST)),
                      Required("host", "no Hostname or instance label")]
        elif step is not traces.HOST_FROM_FILE_NAME and not (isinstance(step, FromOption) and step.column == "host"):
            steps.append(step)
    return tuple(steps)


# The DCGM series as a Prometheus server answers them: the DCGM definition loading as `prometheus`,
# its host from the labels; two series giving one GPU's metric at one time refuse the second's point.
GPU = replace(dcgm.DCGM, kind=KIND, steps=_gpu_steps(),
              prometheus=replace(dcgm.DCGM.prometheus, repeated="a second {metric} for GPU {gpu_index} of {host} "
                                                                "at {sampled_at}: another series of the same GPU"))


class PrometheusError(RuntimeError):
    """The server could not be reached or refused a query; the message says which and why."""


@dataclass
class Client:
    """A Prometheus HTTP API endpoint; `token` (bearer) and URL credentials never reach output."""

    url: str
    token: str | None = None
    max_points: int | None = None  # default MAX_POINTS
    on_chunk: Callable[[str, int, int], None] | None = None  # progress: (query, chunk done, chunks)
    requests_made: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        parts = urllib.parse.urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise PrometheusError(f"{display_url(self.url)} is not an http(s) URL of a Prometheus server")
        self._basic = None
        if parts.username:
            pair = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
            self._basic = base64.b64encode(pair.encode()).decode()
        netloc = parts.hostname + (f":{parts.port}" if parts.port else "")
        self._base = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))

    @property
    def display(self) -> str:
        return self._base

    def query_range(self, query: str, start_s: float, end_s: float, step_s: float) -> list[dict]:
        """Every series of `query` as {"metric": labels, "values": [[t, "v"], ...]}, chunked."""
        merged: dict[tuple, dict] = {}
        span_s = step_s * ((self.max_points or MAX_POINTS) - 1)
        chunks = math.ceil((end_s - start_s + step_s) / (span_s + step_s))
        chunk_start, done = start_s, 0
        while chunk_start <= end_s:
            chunk_end = min(chunk_start + span_s, end_s)
            data = self._get("/api/v1/query_range", {"query": query, "start": _num(chunk_start),
                                                     "end": _num(chunk_end), "step": _num(step_s)})
            if data.get("resultType") != "matrix":
                raise PrometheusError(f"{self.display}: query_range answered a {data.get('resultType')!r}, not a matrix")
            for series in data.get("result", []):
                labels = series.get("metric") or {}
                key = tuple(sorted(labels.items()))
                target = merged.setdefault(key, {"metric": labels, "values": []})
                target["values"].extend(series.get("values") or [])
            chunk_start = chunk_end + step_s
            done += 1
            if self.on_chunk:
                self.on_chunk(query, done, chunks)
        return list(merged.values())

    def _get(self, path: str, params: dict) -> dict:
        request = urllib.request.Request(f"{self._base}{path}?{urllib.parse.urlencode(params)}")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        elif self._basic:
            request.add_header("Authorization", f"Basic {self._basic}")
        self.requests_made += 1
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                body = response.read()
        except urllib.error.HTTPError as error:
            raise PrometheusError(f"{self.display} answered HTTP {error.code}: {_error_text(error.read())}") from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise PrometheusError(f"cannot reach {self.display}: {reason}") from None
        try:
            answer = json.loads(body)
        except ValueError:
            raise PrometheusError(f"{self.display} did not answer JSON: is it a Prometheus server?") from None
        if answer.get("status") != "success":
            raise PrometheusError(f"{self.display} refused the query: {_error_text(body)}")
        return answer.get("data") or {}


@dataclass
class Pulled:
    """What one import pulled: its GPU samples and its serving windows, each ready to load."""

    gpu: Parsed
    gpu_content: bytes
    serving: Parsed
    serving_content: bytes
    start_s: float
    end_s: float


def pull(client: Client, since: datetime, until: datetime, step_s: float,
         deployment: dict | None = None, prices: config.Prices | None = None) -> Pulled:
    """Pull DCGM and serving series between since and until (aligned to the step) and convert them.

    `deployment` (instance_type, replicas, gpu_type, gpu_count) prices the serving windows from
    the catalog, as a serving-window file naming them would be."""
    prices = prices if prices is not None else config.load().prices  # a settings error is not the server's
    start_s = math.floor(since.timestamp() / step_s) * step_s
    end_s = math.floor(until.timestamp() / step_s) * step_s
    if end_s <= start_s:
        raise PrometheusError(f"--since and --until span less than one step ({step_s:g} s)")
    dcgm = client.query_range(DCGM_QUERY, start_s, end_s, step_s)
    served = client.query_range(SERVING_QUERY, start_s, end_s, step_s)
    ctx = ParseContext(f"prometheus {client.display}", timezone.utc)
    try:
        return _pulled(dcgm, served, ctx, start_s, end_s, step_s, deployment, prices)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as error:  # not Prometheus' shape
        raise PrometheusError(f"{client.display}: unexpected query_range content "
                              f"({type(error).__name__}: {error})") from None


def _pulled(dcgm: list[dict], served: list[dict], ctx: ParseContext, start_s: float, end_s: float,
            step_s: float, deployment: dict | None, prices: config.Prices | None) -> Pulled:
    gpu = gpu_samples(dcgm)
    serving = serving_windows(served, ctx, deployment, prices)
    attach_pod_energy(serving.tables.get("serving_windows", []), gpu.tables.get(traces.TABLE))
    return Pulled(gpu, _content(dcgm, start_s, end_s, step_s), serving,
                  _content(served, start_s, end_s, step_s, deployment), start_s, end_s)


def attach_pod_energy(windows: list[dict], samples: pa.Table | None) -> None:
    """Give each serving window whose host is a Kubernetes pod the energy of that pod's GPUs over
    the window (DCGM's `pod` label): the energy counters' increase where every GPU has one at both
    ends and none went down, else the mean of the power at both ends x the window. energy_source
    says `gpu_traces`; a window whose pod has no GPU samples at both ends keeps no energy."""
    if not windows or samples is None or samples.num_rows == 0:
        return
    with_pod = samples.filter(pc.is_valid(samples["pod"]))
    if with_pod.num_rows == 0:
        return
    at_s = pc.divide(with_pod["sampled_at"].cast(pa.int64()), 1_000_000).cast(pa.float64())
    per_pod = pa.table({"pod": with_pod["pod"], "at_s": at_s, "energy_mj": with_pod["energy_mj"],
                        "power_w": with_pod["power_w"]}).group_by(["pod", "at_s"]).aggregate(
        [("energy_mj", "sum"), ("energy_mj", "count"), ("power_w", "sum"), ("power_w", "count"),
         ("pod", "count")])
    found = {(pod, t): (energy, energies, power, powers, gpus) for pod, t, energy, energies, power, powers, gpus
             in zip(*(per_pod[c].to_pylist() for c in ("pod", "at_s", "energy_mj_sum", "energy_mj_count",
                                                         "power_w_sum", "power_w_count", "pod_count")))}
    for window in windows:
        start = found.get((window["host"], window["window_start"].timestamp()))
        end = found.get((window["host"], window["window_end"].timestamp()))
        if start is None or end is None or start[4] != end[4]:
            continue
        gpus = start[4]
        if start[1] == end[1] == gpus and end[0] >= start[0]:
            energy_kwh = (end[0] - start[0]) / 3.6e9  # mJ -> kWh
        elif start[3] == end[3] == gpus:
            energy_kwh = (start[2] + end[2]) / 2 * window["window_s"] / 3.6e6  # W x s -> kWh
        else:
            continue
        window["energy_kwh"], window["energy_source"] = energy_kwh, "gpu_traces"


def gpu_samples(series: list[dict]) -> Parsed:
    """gpu_samples rows from DCGM series: one per GPU and step, read by the DCGM definition (GPU).

    Each series is handed over as columns (its labels once, its times and values as Arrow arrays)
    to ingest/engine/prom_columns, which reads each point as the sample line it stands for would
    be read, with no text; a point's line number is its position in the pulled data (the series
    sorted by their labels). A refused point shows as that sample line."""
    given = []
    for one in sorted(series, key=lambda s: sorted(s["metric"].items())):
        labels, points = one["metric"], one["values"]
        if not points:
            continue
        times = pa.array([point[0] for point in points], pa.float64())  # not zip(*points): 5x the time
        texts = pa.array([point[1] for point in points], pa.string())
        instance_host = (labels.get("instance") or "").rsplit(":", 1)[0]
        given.append(prom_columns.Series({**labels, INSTANCE_HOST: instance_host}, times, texts))
    src = staging.Source(Path(KIND), f"{KIND} DCGM series")
    con = staging.open_stage()
    try:
        accepted = prom_columns.stage(GPU, given, con, src, ParseContext(src.name, timezone.utc))
        parsed = Parsed(accepted=accepted)
        parsed.tables[traces.TABLE] = con.sql(f"SELECT * EXCLUDE (load_id) FROM {traces.TABLE} "
                                              "ORDER BY source_line").to_arrow_table()
        parsed.rejects = [Reject(line, reason, raw or "") for line, reason, raw in con.execute(
            "SELECT line, reason, raw FROM rejects ORDER BY line").fetchall()]
        return parsed
    finally:
        con.close()


def serving_windows(series: list[dict], ctx: ParseContext, deployment: dict | None = None,
                    prices: config.Prices | None = None) -> Parsed:
    """Serving windows, one per model and step, from the inference servers' series."""
    samples, rejects, number = [], [], 0
    for one in sorted(series, key=lambda s: sorted(s["metric"].items())):
        labels = dict(one["metric"])
        name = labels.pop("__name__")
        key = tuple(sorted(labels.items()))
        for at_s, text in one["values"]:
            number += 1
            value = float(text)
            if not math.isfinite(value) or value < 0:  # a counter is a finite count; never read as 0
                rejects.append(Reject(number, f"{name} {text!r} at {at_s} is not a count", _describe(one["metric"])))
                continue
            samples.append(serving_metrics.Sample(name, key, float(at_s), value, number, _describe(one["metric"])))
    parsed = serving_metrics.windows(samples, ctx, prices, source_kind=KIND, extra=deployment)
    parsed.rejects = sorted(rejects + parsed.rejects, key=lambda r: r.line)
    return parsed


def display_url(url: str) -> str:
    """The URL without credentials, query or fragment: what may be shown and stored."""
    parts = urllib.parse.urlsplit(url)
    netloc = (parts.hostname or "") + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _content(series: list[dict], start_s: float, end_s: float, step_s: float, extra: dict | None = None) -> bytes:
    """The pulled data in a canonical form: the same range pulled again hashes the same."""
    canonical = sorted((sorted(s["metric"].items()), s["values"]) for s in series)
    return json.dumps([start_s, end_s, step_s, extra or {}, canonical], sort_keys=True, default=str).encode()


def _describe(labels: dict) -> str:
    name = labels.get("__name__", "")
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__") + "}"


def _error_text(body: bytes) -> str:
    try:
        answer = json.loads(body)
        text = f"{answer.get('errorType', '')}: {answer.get('error', '')}".strip(": ")
    except ValueError:
        text = body.decode("utf-8", "replace")
    text = " ".join(text.split())
    return text[:ERROR_TEXT_MAX] + ("…" if len(text) > ERROR_TEXT_MAX else "")


def _num(value: float) -> str:
    return repr(float(value)) if value != int(value) else str(int(value))
