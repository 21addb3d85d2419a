"""Inference servers' saved /metrics scrapes (vLLM, Triton) as serving windows, from the real scrapes."""
from __future__ import annotations

import json
import math
import re
from datetime import datetime, timedelta, timezone

import pandas as pd
import pytest

from ingest.engine import warehouse as wh
from ingest.pipeline import loader
from mlcost import cli
from tests import corpus

VLLM = "serving_metrics/vllm_metrics_scrape_kops.prom"
TRITON = "serving_metrics/triton_2.24_metrics_after_traffic_P100.prom"
T0_MS = 1_763_632_800_000  # 2025-11-20T10:00:00Z
T0 = datetime(2025, 11, 20, 10, 0, tzinfo=timezone.utc)
MODEL = "Qwen/Qwen2.5-0.5B-Instruct"


def stamped(text: str, ms: int, values: dict[str, float]) -> str:
    """The scrape with every sample stamped at `ms`, and the samples whose line contains a key of
    `values` (metric name plus a label fragment) set to that value."""
    out = []
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            for fragment, new in values.items():
                name, _, label = fragment.partition("|")
                if series.split("{", 1)[0] == name and label in series:
                    value = repr(float(new))
            line = f"{series} {value} {ms}"
        out.append(line)
    return "\n".join(out)


def windows() -> list[dict]:
    return wh.query("SELECT * FROM serving_windows ORDER BY window_start, service").to_dict("records")


def series_values(text: str, name: str) -> list[tuple[str, float]]:
    """(labels text, value) of every sample of `name` in a scrape, read with a regex, not the parser."""
    return [(found[1] or "", float(found[2])) for found in
            re.finditer(rf"^{re.escape(name)}(?:\{{([^}}]*)\}})? (\S+)$", text, re.MULTILINE)]


def test_a_real_vllm_scrape_is_one_window_from_its_counters_creation_to_at(warehouse, formats_dir, capsys):
    """The real vLLM scrape has no sample timestamps: refused without --at, naming it; with --at,
    one window from the earliest `_created` of the counters read to --at."""
    path = corpus.require(formats_dir, VLLM)
    text = path.read_text()
    assert cli.main(["ingest", "--json", str(path)]) == 1
    (refused,) = json.loads(capsys.readouterr().out)
    assert refused["status"] == "failed" and "pass --at TIME" in refused["error"] and "--started-at" not in refused["error"]
    assert wh.query("SELECT count(*) AS n FROM loads")["n"][0] == 0

    created = min(value for name in ("vllm:request_success_created", "vllm:prompt_tokens_created",
                                     "vllm:generation_tokens_created")
                  for _, value in series_values(text, name))
    requests = sum(value for _, value in series_values(text, "vllm:request_success_total"))
    prompt = sum(value for _, value in series_values(text, "vllm:prompt_tokens_total"))
    at = datetime.fromtimestamp(created, timezone.utc) + timedelta(minutes=30)
    assert cli.main(["ingest", "--json", "--at", at.isoformat(), str(path)]) == 0
    (summary,) = json.loads(capsys.readouterr().out)
    assert (summary["status"], summary["rows_loaded"], summary["requests_total"]) == ("loaded", 1, requests)
    assert "from the server's start" in summary["warnings"][0]
    (row,) = windows()
    assert (row["service"], row["requests_total"], row["prompt_tokens"]) == (MODEL, requests, prompt)
    assert row["window_start"].timestamp() == pytest.approx(created, abs=1e-6)
    assert row["window_end"] == at and row["window_s"] == pytest.approx(at.timestamp() - created, abs=1e-6)
    assert pd.isna(row["energy_kwh"])
    # Loaded again with another --at: the options are the ledger's, so the new reading replaces the old.
    later = at + timedelta(hours=1)
    again = loader.ingest_file(path, at=later)
    assert again.status == "loaded" and again.replaced
    assert [r["window_end"] for r in windows()] == [later]
    assert loader.ingest_file(path, at=later).status == "already_loaded"


def triton_counts(text: str) -> dict[tuple[str, str], dict[str, float]]:
    """model, version -> success, failure and compute µs, read from the scrape's text."""
    counts: dict[tuple[str, str], dict[str, float]] = {}
    for name, key in (("nv_inference_request_success", "success"), ("nv_inference_request_failure", "failure"),
                      ("nv_inference_compute_infer_duration_us", "compute_us")):
        for labels, value in series_values(text, name):
            found = re.fullmatch(r'model="([^"]+)",version="([^"]+)"', labels)
            counts.setdefault((found[1], found[2]), {})[key] = value
    return counts


def test_the_real_triton_scrape_needs_both_ends_and_its_zero_energy_counter_stays_unknown(
        warehouse, formats_dir, capsys):
    """Triton 2.24 says neither when it started nor when it was scraped; its P100 reports an energy
    counter of 0 after traffic (Pascal has none): the windows load, their energy unknown, not 0."""
    path = corpus.require(formats_dir, TRITON)
    text = path.read_text()
    assert cli.main(["ingest", "--json", str(path)]) == 1
    (refused,) = json.loads(capsys.readouterr().out)
    assert "pass --at TIME" in refused["error"] and "and --started-at TIME" in refused["error"]
    assert cli.main(["ingest", "--json", "--at", "2026-03-20T13:00:00Z", str(path)]) == 1
    (refused,) = json.loads(capsys.readouterr().out)
    assert "pass --started-at TIME" in refused["error"] and "--at" not in refused["error"]

    counts = triton_counts(text)
    (energy_j,) = [value for _, value in series_values(text, "nv_energy_consumption")]
    assert cli.main(["ingest", "--json", "--at", "2026-03-20T13:00:00Z", "--started-at", "2026-03-20T12:00:00Z",
                     str(path)]) == 0
    (summary,) = json.loads(capsys.readouterr().out)
    rows = {(r["service"], r["model_version"]): r for r in windows()}
    assert set(rows) == set(counts)
    for key, row in rows.items():
        assert (row["requests_success"], row["requests_error"], row["requests_total"]) == (
            counts[key]["success"], counts[key]["failure"], counts[key]["success"] + counts[key]["failure"])
        assert row["window_start"] == T0.replace(year=2026, month=3, day=20, hour=12)
        assert row["window_s"] == 3600.0
    assert energy_j == 0  # what the file says; the load must not turn it into 0 kWh
    assert all(pd.isna(r["energy_kwh"]) for r in rows.values())
    assert any("nv_energy_consumption did not rise" in w for w in summary["warnings"])


def with_values(text: str, values: dict[str, float]) -> str:
    """The scrape with the samples whose name (and label fragment, after `|`) match set to a value."""
    out = []
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, _ = line.rsplit(" ", 1)
            for fragment, new in values.items():
                name, _, label = fragment.partition("|")
                if series.split("{", 1)[0] == name and label in series:
                    line = f"{series} {new!r}"
        out.append(line)
    return "\n".join(out)


def test_triton_energy_counter_from_the_servers_start_is_shared_by_compute_time(warehouse, formats_dir, tmp_path):
    """A single scrape whose GPU counted energy: the window's energy is the counter from --started-at,
    shared among the models by their compute time, each share computed here from the text."""
    path = tmp_path / "triton_energy.prom"
    path.write_text(with_values(corpus.require(formats_dir, TRITON).read_text(), {"nv_energy_consumption": 90_000.0}))
    text = path.read_text()
    counts = triton_counts(text)
    energy_j = sum(value for _, value in series_values(text, "nv_energy_consumption"))
    compute_total = sum(c["compute_us"] for c in counts.values())
    summary = loader.ingest_file(path, at=datetime(2026, 3, 20, 13, tzinfo=timezone.utc),
                                 started_at=datetime(2026, 3, 20, 12, tzinfo=timezone.utc))
    assert (summary.status, summary.rows_loaded) == ("loaded", len(counts))
    rows = {(r["service"], r["model_version"]): r for r in windows()}
    for key, row in rows.items():
        assert row["energy_kwh"] == pytest.approx(energy_j / 3.6e6 * counts[key]["compute_us"] / compute_total)
        assert row["energy_source"] == "gpu_counter" and list(row["gpu_uuids"]) == [
            labels.split('"')[1] for labels, _ in series_values(text, "nv_energy_consumption")]
    assert summary.totals["energy_kwh_total"] == pytest.approx(energy_j / 3.6e6)


def test_a_sequence_of_scrapes_without_timestamps_needs_its_spacing(warehouse, formats_dir, tmp_path, capsys):
    """`curl` appended twice, a comment and a blank line between: refused without --scrape-interval
    (saying how), then one window per model between the scrapes, with the energy and counter deltas."""
    real = corpus.require(formats_dir, TRITON).read_text()
    first = with_values(real, {"nv_energy_consumption": 1_000.0})
    second = with_values(real, {"nv_energy_consumption": 4_600.5, "nv_inference_request_success|add_sub": 45.0,
                                "nv_inference_request_failure|add_sub": 2.0,
                                "nv_inference_compute_infer_duration_us|add_sub": 149_477.0,
                                "nv_inference_compute_infer_duration_us|particlenet_PT": 7_547_242.0})
    path = tmp_path / "appended.prom"
    path.write_text(first + "\n\n# scraped again\n" + second + "\n")
    assert cli.main(["ingest", "--json", "--at", "2026-03-20T13:00:00Z", str(path)]) == 1
    (refused,) = json.loads(capsys.readouterr().out)
    assert refused["error"].endswith("2 scrapes one after another without sample timestamps: pass "
                                     "--scrape-interval SECONDS (the time between them)")

    assert cli.main(["ingest", "--json", "--scrape-interval", "5m", "--at", "2026-03-20T13:00:00Z", str(path)]) == 0
    capsys.readouterr()
    before, after = triton_counts(first), triton_counts(second)
    energy_j = (sum(v for _, v in series_values(second, "nv_energy_consumption"))
                - sum(v for _, v in series_values(first, "nv_energy_consumption")))
    compute = {key: after[key]["compute_us"] - before[key]["compute_us"] for key in after}
    rows = {(r["service"], r["model_version"]): r for r in windows()}
    assert set(rows) == set(after)
    for key, row in rows.items():
        success = after[key]["success"] - before[key]["success"]
        failure = after[key]["failure"] - before[key]["failure"]
        assert (row["requests_success"], row["requests_error"], row["requests_total"]) == (
            success, failure, success + failure)
        assert row["window_start"] == datetime(2026, 3, 20, 12, 55, tzinfo=timezone.utc)
        assert row["window_s"] == 300.0
        assert row["energy_kwh"] == pytest.approx(energy_j / 3.6e6 * compute[key] / sum(compute.values()))


def latency_buckets(cumulative: dict[str, float]) -> dict[str, float]:
    """Bucket overrides: each le gets the cumulative count of the largest listed bound at or below it."""
    bounds = ["0.3", "0.5", "0.8", "1.0", "1.5", "2.0", "2.5", "5.0", "10.0", "15.0", "20.0", "30.0", "40.0",
              "50.0", "60.0", "120.0", "240.0", "480.0", "960.0", "1920.0", "7680.0", "+Inf"]
    result, running = {}, 0.0
    for le in bounds:
        running = cumulative.get(le, running)
        result[f'vllm:e2e_request_latency_seconds_bucket|le="{le}"'] = running
    return result


def test_vllm_scrapes_become_windows_with_deltas_percentiles_tokens_and_a_restart(warehouse, formats_dir, tmp_path):
    """Three scrapes of the real vLLM /metrics a minute apart: traffic, then a restart (counters drop)."""
    real = corpus.require(formats_dir, VLLM).read_text()
    second = {"vllm:request_success_total|stop": 40, "vllm:request_success_total|length": 8,
              "vllm:request_success_total|abort": 2, "vllm:prompt_tokens_total|": 12_000,
              "vllm:generation_tokens_total|": 3_000,
              **latency_buckets({"0.3": 0, "0.5": 10, "0.8": 30, "1.0": 40, "1.5": 50})}
    third = {"vllm:request_success_total|stop": 5, "vllm:request_success_total|error": 1,
             "vllm:prompt_tokens_total|": 900, "vllm:generation_tokens_total|": 200,
             **latency_buckets({"0.3": 6})}
    path = tmp_path / "vllm_scrapes.prom"
    path.write_text("\n".join([stamped(real, T0_MS, {}), stamped(real, T0_MS + 60_000, second),
                               stamped(real, T0_MS + 120_000, third),
                               'vllm:request_success_total{model_name="x" 3 1763632920000']))
    summary = loader.ingest_file(path)
    lines = 3 * len(real.splitlines()) + 1
    assert (summary.kind, summary.status, summary.rows_loaded, summary.rows_rejected) == (
        "serving-metrics", "loaded", 2, 1)
    assert summary.rejects[0]["line"] == lines and summary.rejects[0]["reason"].startswith("not Prometheus text")
    first, restart = windows()
    # Window 1: 40 + 8 finished normally, 2 aborted; 50 requests in the latency buckets.
    # p50: rank 25 in (0.5, 0.8] holding 10..30 -> 0.5 + 0.3 x 15/20; p95: rank 47.5 in (1.0, 1.5]
    # holding 40..50 -> 1.0 + 0.5 x 7.5/10; p99: rank 49.5 -> 1.0 + 0.5 x 9.5/10 (seconds).
    assert {k: first[k] for k in ("service", "model_version", "requests_total", "requests_success",
                                  "requests_error", "prompt_tokens", "output_tokens", "window_s")} == {
        "service": MODEL, "model_version": "unversioned", "requests_total": 50, "requests_success": 48,
        "requests_error": 2, "prompt_tokens": 12_000, "output_tokens": 3_000, "window_s": 60.0}
    assert first["window_start"] == T0 and first["window_end"] == T0 + timedelta(seconds=60)
    assert first["latency_ms_p50"] == pytest.approx(725.0)
    assert first["latency_ms_p95"] == pytest.approx(1375.0)
    assert first["latency_ms_p99"] == pytest.approx(1475.0)
    assert first["throughput_rps"] == pytest.approx(50 / 60)
    # Window 2: the server restarted, so each counter's new value is its increase.
    assert {k: restart[k] for k in ("requests_total", "requests_success", "requests_error",
                                    "prompt_tokens", "output_tokens")} == {
        "requests_total": 6, "requests_success": 5, "requests_error": 1,
        "prompt_tokens": 900, "output_tokens": 200}
    assert restart["latency_ms_p50"] == pytest.approx(0.3 * 3 / 6 * 1000)
    assert restart["latency_ms_p99"] == pytest.approx(0.3 * 5.94 / 6 * 1000)
    assert restart["source_kind"] == "serving-metrics"
    assert summary.totals["prompt_tokens_total"] == 12_900


def test_triton_scrapes_per_model_and_version_and_loading_again_changes_nothing(warehouse, formats_dir, tmp_path):
    """The real Triton scrape as the second of two (the first before any traffic), per model/version."""
    real = corpus.require(formats_dir, TRITON).read_text()
    counts = {}
    for line in real.splitlines():  # the figures the test expects, read straight from the scrape
        found = re.match(r'nv_inference_request_(success|failure)\{model="([^"]+)",version="([^"]+)"\} (\S+)', line)
        if found:
            counts[(found[2], found[3], found[1])] = float(found[4])
    zero = {f"nv_inference_request_{kind}|{model}": 0 for model, _, kind in counts}
    path = tmp_path / "triton_two.prom"
    path.write_text(stamped(real, T0_MS, zero) + "\n" + stamped(real, T0_MS + 30_000, {}))
    code = cli.main(["ingest", "--json", str(path)])
    assert code == 0
    rows = {(r["service"], r["model_version"]): r for r in windows()}
    assert set(rows) == {(model, version) for model, version, _ in counts}
    for (model, version), row in rows.items():
        success, failure = counts[(model, version, "success")], counts[(model, version, "failure")]
        assert (row["requests_success"], row["requests_error"], row["requests_total"]) == (
            success, failure, success + failure)
        assert row["window_s"] == 30.0 and math.isnan(row["latency_ms_p50"])  # Triton 2.24 has no histogram
    summary = loader.ingest_file(path)
    assert summary.status == "already_loaded" and len(windows()) == len({(m, v) for m, v, _ in counts})


def test_pulled_series_with_a_broken_point_reject_it_and_its_windows_not_the_rest():
    """The HTTP importer's path: a NaN counter value is rejected, never read as 0; the window then
    spans the two steps around it, so no request is lost or counted twice."""
    from ingest.engine.contract import ParseContext
    from ingest.importers import prometheus

    base = {"__name__": "nv_inference_request_success", "model": "resnet", "version": "3", "instance": "srv:8002"}
    values = [[1_763_632_800 + 60 * i, text] for i, text in enumerate(["10", "20", "NaN", "40", "55"])]
    parsed = prometheus.serving_windows([{"metric": base, "values": values}],
                                        ParseContext("test", timezone.utc))
    rows = parsed.tables["serving_windows"]
    assert [(r["requests_total"], r["host"], r["window_s"]) for r in rows] == [
        (10, "srv:8002", 60.0), (20, "srv:8002", 120.0), (15, "srv:8002", 60.0)]
    assert [r.line for r in parsed.rejects] == [3] and "'NaN'" in parsed.rejects[0].reason


def test_torchserve_scrapes_count_every_request_as_served_and_errors_unknown(warehouse, tmp_path):
    path = tmp_path / "torchserve.prom"
    path.write_text(
        "# HELP ts_inference_requests_total Total number of inference requests.\n"
        "# TYPE ts_inference_requests_total counter\n"
        f'ts_inference_requests_total{{model_name="bert",model_version="2.0",hostname="ts-0"}} 100.0 {T0_MS}\n'
        f'ts_inference_requests_total{{model_name="bert",model_version="2.0",hostname="ts-0"}} 160.0 {T0_MS + 60_000}\n')
    summary = loader.ingest_file(path)
    assert (summary.kind, summary.rows_loaded, summary.rows_rejected) == ("serving-metrics", 1, 0)
    (row,) = windows()
    assert (row["service"], row["model_version"], row["host"], row["requests_total"], row["requests_success"]) == (
        "bert", "2.0", "ts-0", 60, 60)
    assert pd.isna(row["requests_error"])


def test_scrapes_where_no_model_is_seen_twice_are_refused_not_loaded_empty(warehouse, tmp_path):
    """Two timed scrapes, a different model in each: no window can be made, and the file says so."""
    path = tmp_path / "two_models.prom"
    path.write_text(f'nv_inference_request_success{{model="a",version="1"}} 5 {T0_MS}\n'
                    f'nv_inference_request_success{{model="b",version="1"}} 7 {T0_MS + 60_000}\n')
    summary = loader.ingest_file(path)
    assert summary.status == "failed" and "no model was scraped twice" in summary.error
    assert wh.query("SELECT count(*) AS n FROM loads")["n"][0] == 0


def test_pulled_triton_series_share_the_gpu_energy_and_a_flat_counter_is_a_warning(warehouse):
    """The HTTP importer's path: Triton's energy counter rising 7,200 J over a window goes to its two
    models by compute time (3:1); a counter that stays flat leaves the window's energy unknown and
    the import's summary says why."""
    from ingest.engine.contract import ParseContext
    from ingest.importers import ledger, prometheus

    def series(name, labels, values):
        return {"metric": {"__name__": name, "instance": "triton:8002", **labels},
                "values": [[1_763_632_800 + 60 * i, str(v)] for i, v in enumerate(values)]}

    pulled = [series("nv_inference_request_success", {"model": "a", "version": "1"}, [0, 30, 60]),
              series("nv_inference_request_success", {"model": "b", "version": "1"}, [0, 10, 20]),
              series("nv_inference_compute_infer_duration_us", {"model": "a", "version": "1"}, [0, 300, 600]),
              series("nv_inference_compute_infer_duration_us", {"model": "b", "version": "1"}, [0, 100, 200]),
              series("nv_energy_consumption", {"gpu_uuid": "GPU-x"}, [1_000, 8_200, 8_200])]
    parsed = prometheus.serving_windows(pulled, ParseContext("test", timezone.utc))
    energy = {(r["service"], r["window_start"].timestamp()): r["energy_kwh"] for r in parsed.tables["serving_windows"]}
    assert energy[("a", 1_763_632_800)] == pytest.approx(7_200 * 0.75 / 3.6e6)
    assert energy[("b", 1_763_632_800)] == pytest.approx(7_200 * 0.25 / 3.6e6)
    assert energy[("a", 1_763_632_860)] is None and energy[("b", 1_763_632_860)] is None
    summary = ledger.load_import("prometheus test", prometheus.KIND, parsed, b"pulled", {})
    assert summary.status == "loaded" and "nv_energy_consumption did not rise" in summary.warnings[0]


def test_a_scrape_with_dcgm_and_vllm_series_loads_both_halves_as_one_load(warehouse, formats_dir, tmp_path, capsys):
    """A /metrics file holding GPU (dcgm-exporter) and vLLM series, as one exporter or a merged scrape
    shows them: detected as both, the GPU samples and the serving window load in one load. Figures
    from the two real scrapes' text (regexes), not from the readers."""
    dcgm_text = corpus.require(formats_dir, "nvidia_gpu/dcgm_exporter_scrape_L4_kops.prom").read_text()
    vllm_text = corpus.require(formats_dir, VLLM).read_text()
    path = tmp_path / "node_metrics.prom"
    path.write_text(dcgm_text.rstrip("\n") + "\n" + vllm_text)
    created = min(value for name in ("vllm:request_success_created", "vllm:prompt_tokens_created",
                                     "vllm:generation_tokens_created") for _, value in series_values(vllm_text, name))
    at = datetime.fromtimestamp(created, timezone.utc) + timedelta(minutes=30)
    assert cli.main(["ingest", "--json", "--at", at.isoformat(), str(path)]) == 0
    (summary,) = json.loads(capsys.readouterr().out)
    gpus = {re.search(r'gpu="(\d+)"', labels)[1] for labels, _ in series_values(dcgm_text, "DCGM_FI_DEV_POWER_USAGE")}
    requests = sum(value for _, value in series_values(vllm_text, "vllm:request_success_total"))
    assert (summary["kind"], summary["status"], summary["rows_loaded"]) == ("dcgm+serving-metrics", "loaded",
                                                                            len(gpus) + 1)
    assert (summary["gpus"], summary["samples"], summary["windows"], summary["requests_total"]) == (
        len(gpus), len(gpus), 1, requests)
    (row,) = windows()
    assert (row["service"], row["requests_total"], row["window_end"]) == (MODEL, requests, at)
    power = dict(series_values(dcgm_text, "DCGM_FI_DEV_POWER_USAGE"))
    stored = wh.query("SELECT gpu_index, power_w, sampled_at FROM gpu_samples ORDER BY gpu_index")
    assert sorted(stored["power_w"]) == sorted(power.values()) and set(stored["sampled_at"]) == {at}
    assert wh.query("SELECT count(*) AS n FROM loads")["n"][0] == 1
