"""`mlcost import prometheus` against a real Prometheus server (Debian's package) on 127.0.0.1,
scraping a small exporter in this test whose every served value (and its timestamp) is logged, so
the expected samples and windows are computed from what the exporter served."""
from __future__ import annotations

import json
import math
import shutil
import subprocess
import threading
import time
import urllib.request
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ingest.engine import warehouse as wh
from ingest.importers import prometheus
from mlcost import cli
from tests.conftest import IN_CI, free_port

STEP_S = 2
RESTART_AT = 5  # the vLLM server restarts before its 5th scrape: its counters start again
HOST = "gpu-node-1"
VLLM = (("model_name", "llama-3-8b"), ("pod", "vllm-0"))  # the vLLM pod, which holds GPU 1
TRITON_ENERGY = ("nv_energy_consumption", (("gpu_uuid", "GPU-T4"),))


def served_values(k: int) -> dict[tuple[str, tuple], float]:
    """The exporter's values at its k-th scrape (series name and labels -> value)."""
    stop = 10 * k if k < RESTART_AT else 4 * (k - RESTART_AT) + 2
    abort = k // 2 if k < RESTART_AT else (k - RESTART_AT) // 2
    vllm = VLLM
    served = stop + abort
    values = {
        ("vllm:request_success_total", vllm + (("finished_reason", "stop"),)): stop,
        ("vllm:request_success_total", vllm + (("finished_reason", "abort"),)): abort,
        ("vllm:prompt_tokens_total", vllm): 100 * stop,
        ("vllm:generation_tokens_total", vllm): 30 * stop,
        # every request took between 0.1 and 0.25 s
        ("vllm:e2e_request_latency_seconds_bucket", vllm + (("le", "0.1"),)): 0,
        ("vllm:e2e_request_latency_seconds_bucket", vllm + (("le", "0.25"),)): served,
        ("vllm:e2e_request_latency_seconds_bucket", vllm + (("le", "+Inf"),)): served,
        ("nv_inference_request_success", (("model", "resnet"), ("version", "2"))): 3 * k,
        ("nv_inference_request_failure", (("model", "resnet"), ("version", "2"))): k // 3,
        ("nv_inference_compute_infer_duration_us", (("model", "resnet"), ("version", "2"))): 40_000 * k,
        ("nv_energy_consumption", (("gpu_uuid", "GPU-T4"),)): 70.5 * k + 1_000,  # J since Triton started
        ("node_load1", ()): 0.5,  # something mlcost does not read
    }
    for gpu in (0, 1):
        labels = (("gpu", str(gpu)), ("UUID", f"GPU-{gpu}"), ("modelName", "NVIDIA L4"), ("Hostname", HOST))
        labels += (("pod", "trainer-0"), ("namespace", "ml")) if gpu == 0 else (("pod", "vllm-0"), ("namespace", "serve"))
        values[("DCGM_FI_DEV_POWER_USAGE", labels)] = 100 + 10 * gpu + k
        values[("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", labels)] = 1_000_000 + 150_000 * k + gpu
        values[("DCGM_FI_DEV_GPU_UTIL", labels)] = 50 + gpu
    return values


class Exporter(BaseHTTPRequestHandler):
    log: list[tuple[int, dict]] = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        k = len(self.log)
        at_ms = int(time.time() * 1000)
        values = served_values(k)
        lines = [f'{name}{{{",".join(f"{a}={json.dumps(b)}" for a, b in labels)}}} {value} {at_ms}'
                 for (name, labels), value in values.items()]
        body = ("\n".join(lines) + "\n").encode()
        self.log.append((at_ms, values))
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    """(Prometheus URL, the exporter's log) after the exporter has been scraped 11 times."""
    binary = shutil.which("prometheus")
    if binary is None:
        if IN_CI:
            pytest.fail("the prometheus binary is missing in CI (apt-get install prometheus)")
        pytest.skip("the prometheus binary is absent: apt-get install prometheus")
    tmp = tmp_path_factory.mktemp("prometheus")
    Exporter.log = []
    exporter = ThreadingHTTPServer(("127.0.0.1", 0), Exporter)
    threading.Thread(target=exporter.serve_forever, daemon=True).start()
    config = tmp / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n"
                      "  - job_name: exporter\n    static_configs:\n"
                      f"      - targets: ['127.0.0.1:{exporter.server_address[1]}']\n")
    port = free_port()
    log = open(tmp / "prometheus.log", "w")
    server = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'data'}",
                               f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while len(Exporter.log) < 11:
            assert time.monotonic() < deadline, (tmp / "prometheus.log").read_text()[-2000:]
            assert server.poll() is None, (tmp / "prometheus.log").read_text()[-2000:]
            time.sleep(0.2)
        last_ms = Exporter.log[10][0]
        while True:  # until the 11th scrape is stored (it is appended right after the response)
            answer = get_json(f"{url}/api/v1/query?query=DCGM_FI_DEV_GPU_UTIL&time={last_ms / 1000}")
            if len(answer["data"]["result"]) == 2 and any(float(v[1]) == 51 for v in [
                    r["value"] for r in answer["data"]["result"]]):
                break
            assert time.monotonic() < deadline
            time.sleep(0.2)
        yield url, list(Exporter.log[:11])
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
        exporter.shutdown()


def at(log: list[tuple[int, dict]], t_ms: int) -> dict | None:
    """What an instant query at t_ms sees: the latest scrape at or before it."""
    seen = [values for at_ms, values in log if at_ms <= t_ms]
    return seen[-1] if seen else None


def since_s(log) -> int:
    """The import's start: the first multiple of the step at or after the 2nd scrape (so every
    series has a sample at or before it)."""
    return math.ceil(log[1][0] / 1000 / STEP_S) * STEP_S


def grid(log) -> list[int]:
    """The step times (ms) of the import below: multiples of the step up to the 11th scrape."""
    start = since_s(log)
    end = math.floor(log[10][0] / 1000 / STEP_S) * STEP_S
    return [int(t * 1000) for t in range(start, end + 1, STEP_S)]


def increase(before: float, after: float) -> float:
    return after - before if after >= before else after


def test_import_prometheus_pulls_gpu_samples_and_serving_windows(prom, warehouse, capsys, monkeypatch):
    url, log = prom
    monkeypatch.setattr(prometheus, "MAX_POINTS", 3)  # a long range in miniature: several chunks
    asked = []
    real_get = prometheus.Client._get
    monkeypatch.setattr(prometheus.Client, "_get", lambda self, path, params: asked.append(params) or real_get(
        self, path, params))
    since = datetime.fromtimestamp(since_s(log), timezone.utc).isoformat()
    until = datetime.fromtimestamp(log[10][0] / 1000, timezone.utc).isoformat()
    code = cli.main(["import", "prometheus", url, "--since", since, "--until", until, "--step", f"{STEP_S}s",
                     "--gpu-type", "L4", "--gpu-count", "1", "--json"])
    summaries = json.loads(capsys.readouterr().out)
    assert code == 0, summaries
    times = grid(log)
    # two queries (DCGM, serving), each in chunks of at most 3 steps, covering every step once
    assert len(asked) == 2 * math.ceil(len(times) / 3)
    starts = sorted(float(p["start"]) * 1000 for p in asked if "DCGM" in p["query"])
    assert starts == [float(t) for t in times[::3]]

    # GPU samples: each GPU at each step, as the latest scrape at or before it.
    expected = []
    for t_ms in times:
        for (name, labels), value in at(log, t_ms).items():
            if name == "DCGM_FI_DEV_POWER_USAGE":
                label = dict(labels)
                energy = at(log, t_ms)[("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", labels)]
                util = at(log, t_ms)[("DCGM_FI_DEV_GPU_UTIL", labels)]
                expected.append((HOST, int(label["gpu"]), t_ms, float(value), energy, float(util),
                                 label.get("pod"), label.get("namespace"), f"GPU-{label['gpu']}", "NVIDIA L4"))
    rows = wh.query("SELECT host, gpu_index, epoch_ms(sampled_at) AS t, power_w, energy_mj, gpu_util_pct, pod, "
                    "namespace, gpu_uuid, gpu_name, source_kind FROM gpu_samples ORDER BY t, gpu_index")
    assert set(rows["source_kind"]) == {"prometheus"}
    got = [(r.host, r.gpu_index, r.t, r.power_w, r.energy_mj, r.gpu_util_pct,
            None if r.pod is None or r.pod != r.pod else r.pod,
            None if r.namespace is None or r.namespace != r.namespace else r.namespace, r.gpu_uuid, r.gpu_name)
           for r in rows.itertuples()]
    assert sorted(got, key=lambda x: (x[2], x[1])) == sorted(expected, key=lambda x: (x[2], x[1]))

    # Serving windows: one per model and step; counters' increases, resets counted from 0.
    windows = wh.query("SELECT service, model_version, epoch_ms(window_start) AS t0, epoch_ms(window_end) AS t1, "
                       "requests_total, requests_success, requests_error, prompt_tokens, output_tokens, "
                       "latency_ms_p50, latency_ms_p95, cost_usd, energy_kwh, energy_source, host, source_kind "
                       "FROM serving_windows "
                       "ORDER BY service, t0")
    vllm = windows[windows.service == "llama-3-8b"].to_dict("records")
    triton = windows[windows.service == "resnet"].to_dict("records")
    assert len(vllm) == len(triton) == len(times) - 1
    for row, t0, t1 in zip(vllm, times, times[1:]):
        before, after = at(log, t0), at(log, t1)
        key = lambda reason: ("vllm:request_success_total", VLLM + (("finished_reason", reason),))  # noqa: E731
        stop = increase(before[key("stop")], after[key("stop")])
        abort = increase(before[key("abort")], after[key("abort")])
        tokens = ("vllm:prompt_tokens_total", VLLM)
        assert (row["t0"], row["t1"], row["model_version"]) == (t0, t1, "unversioned")
        assert (row["requests_total"], row["requests_success"], row["requests_error"]) == (stop + abort, stop, abort)
        assert row["prompt_tokens"] == increase(before[tokens], after[tokens])
        if stop + abort:  # all in (0.1, 0.25] s: p50 = 0.1 + 0.15 x 0.5, p95 = 0.1 + 0.15 x 0.95
            assert row["latency_ms_p50"] == pytest.approx(175.0)
            assert row["latency_ms_p95"] == pytest.approx(242.5)
        else:
            assert math.isnan(row["latency_ms_p50"])
        # the pod's GPU (GPU 1): its energy counter's increase over the window, mJ -> kWh
        counter = next(k for k in before if k[0] == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" and ("gpu", "1") in k[1])
        assert row["host"] == "vllm-0" and row["energy_source"] == "gpu_traces"
        assert row["energy_kwh"] == pytest.approx((after[counter] - before[counter]) / 3.6e9)
        # L4 at the catalog's USD per GPU-hour x 1 GPU x the window's hours
        assert float(row["cost_usd"]) == pytest.approx(0.8048 * STEP_S / 3600, rel=1e-9)
    assert any(r["requests_total"] for r in vllm) and vllm[0]["source_kind"] == "prometheus"
    resnet = ("nv_inference_request_success", (("model", "resnet"), ("version", "2")))
    failed = ("nv_inference_request_failure", (("model", "resnet"), ("version", "2")))
    for row, t0, t1 in zip(triton, times, times[1:]):
        success = at(log, t1)[resnet] - at(log, t0)[resnet]
        failure = at(log, t1)[failed] - at(log, t0)[failed]
        assert (row["model_version"], row["requests_success"], row["requests_error"]) == ("2", success, failure)
        # no pod, but Triton's own GPU energy counter, all of it resnet's (the server's one model), J -> kWh
        joules = at(log, t1)[TRITON_ENERGY] - at(log, t0)[TRITON_ENERGY]
        assert row["energy_source"] == "gpu_counter" and row["energy_kwh"] == pytest.approx(joules / 3.6e6)

    assert [s["kind"] for s in summaries] == ["prometheus", "prometheus"]
    gpu_summary, serving_summary = summaries
    assert (gpu_summary["samples"], gpu_summary["gpus"]) == (len(expected), 2)
    assert serving_summary["windows"] == 2 * (len(times) - 1)
    assert serving_summary["requests_total"] == sum(r["requests_total"] for r in vllm + triton)

    # The same range again: the same content, nothing changes.
    assert cli.main(["import", "prometheus", url, "--since", since, "--until", until, "--step", f"{STEP_S}s",
                     "--gpu-type", "L4", "--gpu-count", "1", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert [s["status"] for s in again] == ["already_loaded", "already_loaded"]
    assert len(wh.query("SELECT * FROM serving_windows")) == serving_summary["windows"]

    # The same range at twice the step: its windows overlap the first import's, of the same series, and
    # replace them (latest wins), so each request counts once: the totals are the counters' increases
    # over the range, computed from the log, whichever step read them.
    assert cli.main(["import", "prometheus", url, "--since", since, "--until", until, "--step", f"{2 * STEP_S}s",
                     "--gpu-type", "L4", "--gpu-count", "1", "--json"]) == 0
    coarse = json.loads(capsys.readouterr().out)
    assert [s["status"] for s in coarse] == ["loaded", "loaded"]
    assert any("stored serving windows overlapped" in w for w in coarse[1].get("warnings", []))
    stored = wh.query("SELECT service, epoch_ms(window_start) AS t0, epoch_ms(window_end) AS t1, requests_success "
                      "FROM serving_windows ORDER BY service, t0")
    for service in ("llama-3-8b", "resnet"):
        spans = stored[stored.service == service][["t0", "t1"]].values.tolist()
        assert all(b[0] >= a[1] for a, b in zip(spans, spans[1:])), spans  # no two windows of a series overlap
    # the stored windows tile the range once: contiguous, each the counter's increase over its own span
    key = ("vllm:request_success_total", VLLM + (("finished_reason", "stop"),))
    llama = stored[stored.service == "llama-3-8b"]
    spans = sorted(zip(llama.t0, llama.t1, llama.requests_success))
    assert all(later[0] == earlier[1] for earlier, later in zip(spans, spans[1:])), spans
    assert spans[0][0] <= times[0] and spans[-1][1] >= times[-1]  # the coarse grid is aligned to its own step
    for t0, t1, served in spans:
        assert served == increase(at(log, t0)[key], at(log, t1)[key]), (t0, t1)
    assert any(t1 - t0 == 2 * STEP_S * 1000 for t0, t1, _ in spans)  # the second import's windows are in


def test_a_refused_query_shows_the_servers_reason(prom, warehouse, capsys, monkeypatch):
    url, _ = prom
    monkeypatch.setattr(prometheus, "MAX_POINTS", 20_000)  # more than Prometheus answers in one query
    assert cli.main(["import", "prometheus", url, "--since", "1d", "--step", "1s"]) == 1
    err = capsys.readouterr().err
    assert f"{url} answered HTTP 400: bad_data:" in err and "11,000 points" in err
    assert wh.query("SELECT count(*) AS n FROM loads")["n"][0] == 0


def test_an_unreachable_server_and_bad_options_say_why(warehouse, capsys):
    port = free_port()  # nothing listens there
    assert cli.main(["import", "prometheus", f"http://user:secret@127.0.0.1:{port}", "--since", "1h"]) == 1
    err = capsys.readouterr().err
    assert f"cannot reach http://127.0.0.1:{port}" in err and "secret" not in err
    assert cli.main(["import", "prometheus", "http://127.0.0.1:9", "--since", "1h", "--step", "0s"]) == 2
    assert "--step '0s' must be a duration" in capsys.readouterr().err
    assert cli.main(["import", "prometheus", "--since", "1h"]) == 2
    assert "MLCOST_PROMETHEUS_URL" in capsys.readouterr().err


def test_an_energy_counter_that_is_not_a_finite_whole_number_refuses_its_sample():
    """No server needed: the series as the HTTP API gives them (values as text). +Inf, NaN and 1000.5 mJ
    are not whole numbers of mJ (an infinite counter was once stored as -9223372036854775808)."""
    def series(value: str, gpu: str) -> dict:
        return {"metric": {"__name__": "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "gpu": gpu, "Hostname": "h"},
                "values": [[1_763_632_800, value]]}

    parsed = prometheus.gpu_samples([series("+Inf", "0"), series("NaN", "1"), series("1000.5", "2"),
                                     series("1200", "3")])
    rows = parsed.tables["gpu_samples"].to_pylist()
    assert [(r["gpu_index"], r["energy_mj"]) for r in rows] == [(3, 1200)]
    energy = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
    assert [(r.line, r.reason) for r in parsed.rejects] == [
        (1, f"{energy} must be a finite number, got inf"), (2, f"{energy} must be a finite number, got nan"),
        (3, f"{energy} must be a whole number, got 1000.5")]
