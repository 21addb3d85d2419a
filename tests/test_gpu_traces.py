"""GPU traces: the real nvidia-smi and DCGM files, our collector CSV, energy, idle rule, rollups, pages.

Expected figures on the sample data come from a plain Python pass over the CSV files
(`plain_samples` below: the documented rule, written out loop by loop) and from the generator's
truth.json, never from the warehouse's SQL.
"""
from __future__ import annotations

import csv
import gzip
import json
from bisect import bisect_left
from collections import defaultdict
from datetime import datetime, timezone
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from zoneinfo import ZoneInfo

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from ingest.pipeline import loader
from ingest.settings import config
from mlcost import cli
from ingest.engine import warehouse as wh
from tests.conftest import REPO_ROOT, SAMPLE_DIR

APP = REPO_ROOT / "app" / "main.py"
IDLE_PAGE = "app_pages/idle_gpus.py"
TRACES = SAMPLE_DIR / "gpu_traces"
TRUTH = SAMPLE_DIR / "truth.json"
NVIDIA_SMI = "nvidia_gpu/powertracesim_burn_nvidia-smi_8gpu_first137lines.csv"
DCGM = "nvidia_gpu/dcgm_exporter_scrape_L4_kops.prom"
MAX_GAP_S, IDLE_UTIL_PCT, IDLE_MIN_S = 300, 5, 300  # the shipped [gpu] defaults
COLLECTOR_HEADER = "timestamp,host,gpu_index,gpu_uuid,gpu_name,power_w,energy_mj,gpu_util_pct,mem_used_mib"


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def samples_of(query_where: str = "TRUE") -> list[dict]:
    """Stored samples as dicts, NULL as None (not NaN)."""
    frame = wh.query(f"SELECT * FROM gpu_samples WHERE {query_where} ORDER BY host, gpu_index, sampled_at")
    return [{k: (None if not isinstance(v, str) and pd.isna(v) else v) for k, v in row.items()}
            for row in frame.to_dict("records")]


# --- the real nvidia-smi log ---------------------------------------------------------------

def test_real_nvidia_smi_log_ingests_with_gpu_identity_by_row_order(warehouse, formats_dir):
    """8 GPUs, 17 loops; the loop at 20:58:48.835 is stamped 1 + 7 rows apart and stays one loop."""
    summary = loader.ingest_file(formats_dir / NVIDIA_SMI, tz=ZoneInfo("Europe/Paris"))
    assert (summary.kind, summary.status, summary.rows_loaded, summary.rows_rejected) == ("nvidia-smi", "loaded", 136, 0)
    assert summary.totals["gpus"] == 8 and summary.totals["samples"] == 136
    # Local Paris time in May is UTC+2.
    assert (summary.totals["first_ts"], summary.totals["last_ts"]) == ("2025-05-05T18:58:44.813000Z",
                                                                        "2025-05-05T18:58:49.652000Z")
    rows = {r["source_line"]: r for r in samples_of()}
    # Line 98: `2025/05/05 20:58:48.084, 287.12 W, 100 %, 6706 MiB`, the first row of its loop.
    assert {k: rows[98][k] for k in ("host", "gpu_index", "power_w", "gpu_util_pct", "mem_used_mib")} == {
        "host": "powertracesim", "gpu_index": 0, "power_w": 287.12, "gpu_util_pct": 100.0, "mem_used_mib": 6706.0}
    assert rows[98]["sampled_at"] == datetime(2025, 5, 5, 18, 58, 48, 84000, tzinfo=timezone.utc)
    # The split loop: line 122 alone at .835, then lines 123-129 at 49.401 are GPUs 1-7.
    assert [rows[n]["gpu_index"] for n in range(122, 130)] == list(range(8))
    assert (rows[129]["power_w"], rows[123]["power_w"]) == (65.13, 60.31)
    per_gpu = wh.query("SELECT gpu_index, count(*) AS n FROM gpu_samples GROUP BY 1 ORDER BY 1")
    assert per_gpu["n"].tolist() == [17] * 8


def nvidia_smi_variant(formats_dir: Path, tmp_path: Path, name: str, edit) -> Path:
    lines = (formats_dir / NVIDIA_SMI).read_text().splitlines()
    path = tmp_path / name
    path.write_text("\n".join(edit(lines)) + "\n")
    return path


@pytest.mark.parametrize("variant, edit", [
    ("noheader", lambda lines: lines[1:]),
    ("nounits", lambda lines: [lines[0]] + [l.replace(" W", "").replace(" %", "").replace(" MiB", "") for l in lines[1:]]),
    ("index_column", lambda lines: ["index, " + lines[0]]
     + [f"{n % 8 if n < 120 else (0 if n == 120 else n - 120)}, {l}" for n, l in enumerate(lines[1:])]),
    ("offset", lambda lines: [lines[0]] + [l.replace(",", "+02:00,", 1) for l in lines[1:]]),
])
def test_nvidia_smi_variants_read_the_same_values(warehouse, formats_dir, tmp_path, variant, edit):
    path = nvidia_smi_variant(formats_dir, tmp_path, f"gpu-node-9_{variant}.csv", edit)
    summary = loader.ingest_file(path)  # naive times read as UTC (no --tz)
    assert (summary.kind, summary.rows_loaded, summary.rows_rejected) == ("nvidia-smi", 136, 0), summary.to_json()
    first_row = 1 if variant == "noheader" else 2
    row = next(r for r in samples_of() if r["source_line"] == 98 - 2 + first_row)
    assert (row["host"], row["gpu_index"], row["power_w"], row["gpu_util_pct"]) == ("gpu-node-9", 0, 287.12, 100.0)
    hour = 18 if variant == "offset" else 20
    assert row["sampled_at"] == datetime(2025, 5, 5, hour, 58, 48, 84000, tzinfo=timezone.utc)


def test_nvidia_smi_broken_groups_and_missing_readings(warehouse, formats_dir, tmp_path):
    def edit(lines: list[str]) -> list[str]:
        lines = list(lines)
        lines[10] = lines[10].replace(" 60.64 W", " [N/A]")  # line 11: GPU 1, no power reading
        del lines[20]                                          # line 21 gone: its loop has 7 rows
        return lines
    path = nvidia_smi_variant(formats_dir, tmp_path, "node_x.csv", edit)
    summary = loader.ingest_file(path, host="gpu-node-3")
    assert (summary.rows_loaded, summary.rows_rejected) == (128, 7)
    assert {r["line"] for r in summary.rejects} == set(range(18, 25))  # the rest of the broken loop
    assert "which GPU each row is cannot be told" in summary.rejects[0]["reason"]
    rows = {r["source_line"]: r for r in samples_of()}
    assert rows[11]["power_w"] is None and rows[11]["gpu_index"] == 1 and rows[11]["gpu_util_pct"] == 0
    assert {r["host"] for r in rows.values()} == {"gpu-node-3"}
    assert rows[25]["gpu_index"] == 0  # the loop after the broken one is whole again


def test_nvidia_smi_noheader_without_units_is_refused_whole(warehouse, formats_dir, tmp_path):
    path = nvidia_smi_variant(formats_dir, tmp_path, "bare.csv", lambda lines: [
        l.replace(" W", "").replace(" %", "").replace(" MiB", "") for l in lines[1:]])
    summary = loader.ingest_file(path, kind="nvidia-smi")
    assert summary.rows_loaded == 0
    assert summary.rejects == [{"line": 1, "reason": "without a header or units the columns cannot be told "
                                                     "apart (log with the header: drop noheader)"}]


# --- the real DCGM exporter scrape ---------------------------------------------------------

def test_real_dcgm_scrape_needs_at_and_then_loads_its_gpu(warehouse, formats_dir):
    failed = loader.ingest_file(formats_dir / DCGM)
    assert failed.status == "failed" and failed.error.endswith(
        "its samples carry no timestamps: pass --at with the time of the scrape")
    assert wh.query("SELECT count(*) AS n FROM loads")["n"][0] == 0  # not in the ledger: --at can follow

    at = datetime(2025, 11, 20, 10, 0, tzinfo=timezone.utc)
    summary = loader.ingest_file(formats_dir / DCGM, at=at)
    assert (summary.kind, summary.status, summary.rows_loaded, summary.rows_rejected) == ("dcgm", "loaded", 1, 0)
    (row,) = samples_of()
    assert {k: row[k] for k in ("host", "gpu_index", "gpu_uuid", "gpu_name", "power_w", "energy_mj",
                                "gpu_util_pct", "mem_used_mib", "sampled_at", "source_line")} == {
        "host": "i-030791dc5a37cd257", "gpu_index": 0, "gpu_uuid": "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c",
        "gpu_name": "NVIDIA L4", "power_w": 16.365, "energy_mj": 4742776, "gpu_util_pct": 0.0,
        "mem_used_mib": 0.0, "sampled_at": at, "source_line": 15}
    assert summary.totals == {"gpus": 1, "samples": 1, "first_ts": "2025-11-20T10:00:00Z",
                              "last_ts": "2025-11-20T10:00:00Z", "energy_kwh_total": None}


def test_a_prometheus_scrape_with_nothing_mlcost_reads_is_refused_saying_why(warehouse, tmp_path):
    """Prometheus text without DCGM or inference-server metrics: the reason says what mlcost reads
    instead of suggesting a --kind under which every line would be rejected."""
    path = tmp_path / "node.prom"
    path.write_text("# HELP node_load1 1m load average.\n# TYPE node_load1 gauge\nnode_load1 0.42\n")
    summary = loader.ingest_file(path)
    assert (summary.status, summary.kind, summary.rows_loaded) == ("failed", None, 0)
    assert summary.error == (f"{path}: a Prometheus scrape without DCGM GPU metrics (DCGM_FI_*) or an inference "
                             "server's request counters (vLLM, Triton, TorchServe): nothing in it for mlcost")
    assert wh.query("SELECT count(*) AS n FROM loads")["n"][0] == 0


def test_cli_passes_at_and_host_through(warehouse, formats_dir, capsys):
    code = cli.main(["ingest", "--json", "--at", "2025-11-20 11:00", "--tz", "Europe/Paris",
                     "--host", "l4-box", str(formats_dir / DCGM)])
    (summary,) = json.loads(capsys.readouterr().out)
    assert code == 0 and summary["first_ts"] == "2025-11-20T10:00:00Z"
    assert [r["host"] for r in samples_of()] == ["l4-box"]
    assert cli.main(["ingest", "--at", "yesterday", str(formats_dir / DCGM)]) == 2


def test_dcgm_many_scrapes_with_timestamps_energy_from_the_counter(warehouse, formats_dir, tmp_path):
    """Two scrapes 60 s apart (sample timestamps in ms), a pod label, and one unreadable line."""
    scrape = (formats_dir / DCGM).read_text()
    t0 = 1_763_632_800_000  # 2025-11-20T10:00:00Z in ms

    def stamped(text: str, ms: int, energy_mj: int) -> str:
        out = []
        for line in text.splitlines():
            if line.startswith("DCGM_FI_"):
                line = line.replace('Hostname="', 'pod="trainer-0",namespace="ml",Hostname="')
                if line.startswith("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"):
                    line = line.rsplit(" ", 1)[0] + f" {energy_mj}"
                line += f" {ms}"
            out.append(line)
        return "\n".join(out)
    path = tmp_path / "dcgm_two.prom"
    path.write_text(stamped(scrape, t0, 4_742_776) + "\n" + stamped(scrape, t0 + 60_000, 4_742_776 + 1_200_000)
                    + '\nDCGM_FI_DEV_POWER_USAGE{gpu="0" 12\n')
    summary = loader.ingest_file(path)
    assert (summary.kind, summary.rows_loaded, summary.rows_rejected) == ("dcgm", 2, 1)
    assert summary.rejects[0]["line"] == 139 and summary.rejects[0]["reason"].startswith("not Prometheus text")
    rows = samples_of()
    assert [(r["pod"], r["namespace"], r["energy_mj"]) for r in rows] == [
        ("trainer-0", "ml", 4_742_776), ("trainer-0", "ml", 5_942_776)]
    # 1,200,000 mJ over the first minute (the counter), then 16.365 W x 60 s for the last sample.
    assert summary.totals["energy_kwh_total"] == round((1200 + 16.365 * 60) / 3.6e6, 6)


# --- our collector CSV: rejects, resets, holes, replacing ------------------------------------

def collector_file(tmp_path: Path, name: str, rows: list[str]) -> Path:
    path = tmp_path / name
    path.write_text(COLLECTOR_HEADER + "\n" + "\n".join(rows) + "\n")
    return path


def test_collector_csv_rejects_bad_lines_with_reasons(warehouse, tmp_path):
    path = collector_file(tmp_path, "n1_x.csv", [
        "2026-01-01T00:00:00Z,n1,0,GPU-a,L4,50.5,1000,40,10",
        "2026-01-01T00:02:00Z,n1,0,GPU-a,L4,abc,2000,40,10",
        "2026-01-01T00:04:00Z,n1,0,GPU-a,L4,50,3000,140,10",
        "2026-01-01T00:06:00Z,n1,0,GPU-a,L4,50,3000",
        "2026-13-01T00:08:00Z,n1,0,GPU-a,L4,50,3000,40,10",
        "2026-01-01T00:10:00Z,n1,,GPU-a,L4,50,3000,40,10",
        "2026-01-01T00:12:00Z,n1,0,GPU-a,L4,,,,",
    ])
    summary = loader.ingest_file(path)
    assert (summary.rows_loaded, summary.rows_rejected) == (2, 5)
    assert summary.rejects == [
        {"line": 3, "reason": "power_w must be a number, got 'abc'"},
        {"line": 4, "reason": "gpu_util_pct 140.0 is outside 0 to 100"},
        {"line": 5, "reason": "expected 9 fields as in the header, got 7"},
        {"line": 6, "reason": "timestamp '2026-13-01T00:08:00Z' is not an ISO-8601 timestamp or epoch seconds"},
        {"line": 7, "reason": "gpu_index is missing"},
    ]
    assert [(r["source_line"], r["power_w"], r["energy_mj"]) for r in samples_of()] == [(2, 50.5, 1000), (8, None, None)]


def test_counter_reset_falls_back_to_power_and_a_gap_is_a_hole(warehouse, tmp_path):
    path = collector_file(tmp_path, "n2_x.csv", [
        "2026-01-01T00:00:00Z,n2,0,GPU-b,L4,60,1000000,90,100",
        "2026-01-01T00:02:00Z,n2,0,GPU-b,L4,60,8200000,90,100",   # +7,200,000 mJ = 7,200 J
        "2026-01-01T00:04:00Z,n2,0,GPU-b,L4,20,500000,90,100",    # reset: (60 + 20) / 2 x 120 s = 4,800 J
        "2026-01-01T00:06:00Z,n2,0,GPU-b,L4,20,2900000,90,100",   # +2,400 J (00:04 to 00:06)
        "2026-01-01T01:00:00Z,n2,0,GPU-b,L4,30,9000000,90,100",   # after a 54 min hole
    ])
    assert loader.ingest_file(path).ok
    # The 00:06 sample stands for 120 s (its previous spacing: 20 W x 120 s); 00:08 to 01:00 is
    # a hole; the 01:00 sample has holes (or nothing) on both sides, so it covers nothing.
    expected_j = 7200 + 4800 + 2400 + 20 * 120
    rollup = wh.query("SELECT sum(energy_kwh) AS kwh, sum(coverage_s) AS s FROM gpu_minutes").iloc[0]
    assert rollup["kwh"] == pytest.approx(expected_j / 3.6e6)
    assert rollup["s"] == 4 * 120
    holes = wh.query("SELECT gap_start, gap_end, gap_s FROM gpu_gaps").to_dict("records")
    assert holes == [{"gap_start": utc("2026-01-01T00:08:00Z"), "gap_end": utc("2026-01-01T01:00:00Z"), "gap_s": 3120.0}]


def test_a_repeated_sample_keeps_its_later_line_in_the_energy_too(warehouse, tmp_path):
    path = collector_file(tmp_path, "n5_x.csv", [
        "2026-01-01T00:00:00Z,n5,0,GPU-e,L4,100,,50,1",
        "2026-01-01T00:02:00Z,n5,0,GPU-e,L4,40,,50,1",   # line 3: written again on line 4
        "2026-01-01T00:02:00Z,n5,0,GPU-e,L4,70,,50,1",
        "2026-01-01T00:04:00Z,n5,0,GPU-e,L4,40,,50,1",
    ])
    summary = loader.ingest_file(path)
    assert summary.ok
    assert [(r["source_line"], r["power_w"]) for r in samples_of()] == [(2, 100.0), (4, 70.0), (5, 40.0)]
    # trapezoids over the kept samples, and the last one stands for its previous spacing (120 s)
    expected_j = (100 + 70) / 2 * 120 + (70 + 40) / 2 * 120 + 40 * 120
    assert summary.totals["energy_kwh_total"] == pytest.approx(expected_j / 3.6e6)
    assert summary.totals["samples"] == 4 and summary.rows_loaded == 4  # lines read; the repeat counts
    kwh = wh.query("SELECT sum(energy_kwh) AS kwh FROM gpu_minutes")["kwh"][0]
    assert kwh == pytest.approx(expected_j / 3.6e6)


def test_a_hole_inside_a_run_of_low_samples_cuts_it_into_two_stretches(warehouse, tmp_path):
    # 2 % utilisation throughout, every 60 s: 00:00-00:05 (six samples), a 10 min hole, then
    # 00:15-00:17 (three). Idle needs a stretch of 300 s unbroken by a hole: the first stretch
    # covers 6 x 60 s = 360 s (its last sample stands for its previous spacing), the second 3 x 60 s.
    minutes = [0, 1, 2, 3, 4, 5, 15, 16, 17]
    rows = [f"2026-01-01T00:{m:02d}:00Z,n6,0,GPU-f,L4,16,,2,0" for m in minutes]
    assert loader.ingest_file(collector_file(tmp_path, "n6_x.csv", rows)).ok
    idle = wh.query("SELECT sum(idle_s) AS idle, sum(coverage_s) AS covered FROM gpu_minutes").iloc[0]
    assert (idle["idle"], idle["covered"]) == (360, 360 + 180)


def test_overlapping_file_replaces_samples_and_rollups(warehouse, tmp_path):
    first = collector_file(tmp_path, "n3_a.csv", [f"2026-01-01T00:0{m}:00Z,n3,0,GPU-c,L4,100,,50,1" for m in range(0, 10, 2)])
    second = collector_file(tmp_path, "n3_b.csv", [f"2026-01-01T00:0{m}:00Z,n3,0,GPU-c,L4,40,,50,1" for m in (4, 6, 8)]
                            + ["2026-01-01T00:10:00Z,n3,0,GPU-c,L4,40,,50,1"])
    assert loader.ingest_file(first).ok and loader.ingest_file(second).ok
    assert [(r["sampled_at"].minute, r["power_w"]) for r in samples_of()] == [
        (0, 100.0), (2, 100.0), (4, 40.0), (6, 40.0), (8, 40.0), (10, 40.0)]
    kwh = wh.query("SELECT sum(energy_kwh) AS kwh FROM gpu_minutes")["kwh"][0]
    # Trapezoids: 100 W for 0-2, 100->40 for 2-4, 40 W for 4-10, and 120 s at 40 W for the last sample.
    assert kwh == pytest.approx((100 * 120 + 70 * 120 + 40 * 360 + 40 * 120) / 3.6e6)


def test_changed_idle_rule_takes_effect_with_mlcost_rollup(warehouse, tmp_path, monkeypatch, capsys):
    rows = [f"2026-01-01T00:{m:02d}:00Z,n4,0,GPU-d,L4,16,,{2 if 4 <= m <= 6 else 80},0" for m in range(0, 12, 2)]
    assert loader.ingest_file(collector_file(tmp_path, "n4_a.csv", rows)).ok
    assert wh.query("SELECT sum(idle_s) AS s FROM gpu_minutes")["s"][0] == 0  # 240 s at 2 %: too short
    settings = tmp_path / "mlcost.toml"
    settings.write_text("[gpu]\nidle_min_s = 240\n")
    monkeypatch.setenv("MLCOST_CONFIG", str(settings))
    assert cli.main(["rollup"]) == 0
    assert "recomputed the per-minute figures of 1 GPUs" in capsys.readouterr().out
    assert wh.query("SELECT sum(idle_s) AS s FROM gpu_minutes")["s"][0] == 240
    assert wh.query("SELECT idle_min_s FROM gpu_rollup_settings")["idle_min_s"][0] == 240


# --- the sample data, computed a second way --------------------------------------------------

def plain_samples() -> dict[tuple[str, int], list[dict]]:
    """Every sample of the sample traces per (host, GPU index), each with its interval (s),
    energy (J) and idle flag by the documented rule, in plain Python."""
    by_gpu: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for path in sorted(TRACES.glob("*.csv.gz")):
        with gzip.open(path, "rt", newline="") as handle:
            for row in csv.DictReader(handle):
                by_gpu[(row["host"], int(row["gpu_index"]))].append({
                    "t": utc(row["timestamp"]).timestamp(), "uuid": row["gpu_uuid"], "name": row["gpu_name"],
                    "power": float(row["power_w"]), "counter": int(row["energy_mj"]),
                    "util": float(row["gpu_util_pct"])})
    for samples in by_gpu.values():
        samples.sort(key=lambda s: s["t"])
        for i, s in enumerate(samples):
            nxt = samples[i + 1] if i + 1 < len(samples) else None
            prev_gap = s["t"] - samples[i - 1]["t"] if i else None
            next_gap = nxt["t"] - s["t"] if nxt else None
            if next_gap is not None and next_gap <= MAX_GAP_S:
                s["interval"] = next_gap
                if nxt["counter"] >= s["counter"]:
                    s["energy_j"] = (nxt["counter"] - s["counter"]) / 1000
                else:  # reset: the power trapezoid
                    s["energy_j"] = (s["power"] + nxt["power"]) / 2 * next_gap
            else:
                s["interval"] = prev_gap if prev_gap is not None and prev_gap <= MAX_GAP_S else 0
                s["energy_j"] = s["power"] * s["interval"]
            s["breaks"] = prev_gap is None or prev_gap > MAX_GAP_S
        # Idle: runs of consecutive low samples (a hole breaks them) lasting idle_min_s or more.
        stretch: list[dict] = []
        for s in samples + [None]:
            low = s is not None and s["util"] <= IDLE_UTIL_PCT
            if stretch and (not low or s["breaks"]):
                sustained = sum(x["interval"] for x in stretch) >= IDLE_MIN_S
                for x in stretch:
                    x["idle"] = sustained
                stretch = []
            if s is not None:
                s["idle"] = False
                if low:
                    stretch.append(s)
    return by_gpu


def node_runs() -> list[dict]:
    runs = [json.loads(line) for line in (SAMPLE_DIR / "runs.jsonl").read_text().splitlines() if line.strip()]
    for run in runs:
        for key in ("start_time", "end_time"):
            value = run[key]
            run[key] = float(value) if isinstance(value, (int, float)) else utc(value).timestamp()
    return [run for run in runs if run.get("gpu_uuids")]


@pytest.fixture(scope="module")
def plain() -> dict[tuple[str, int], list[dict]]:
    """plain_samples(), each sample also with `runs`: the node runs holding its GPU at its time
    (start <= timestamp < end, the GPU by uuid)."""
    by_gpu = plain_samples()
    by_uuid = {samples[0]["uuid"]: samples for samples in by_gpu.values()}
    for samples in by_gpu.values():
        for sample in samples:
            sample["runs"] = []
    for run in node_runs():
        for uuid in run["gpu_uuids"]:
            samples = by_uuid[uuid]
            times = [sample["t"] for sample in samples]
            for sample in samples[bisect_left(times, run["start_time"]):bisect_left(times, run["end_time"])]:
                sample["runs"].append(run["run_id"])
    return by_gpu


@pytest.fixture(scope="module")
def sample_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A warehouse with the sample traces and runs, loaded once for this module (read-only after)."""
    path = tmp_path_factory.mktemp("gpu_sample") / "sample.duckdb"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLCOST_DB", str(path))
        summaries = [s for _, s in loader.ingest_paths([str(TRACES), str(SAMPLE_DIR / "runs.jsonl")])]
    assert all(s.status == "loaded" for s in summaries), [s.to_json() for s in summaries]
    assert all(s.rows_rejected == 0 for s in summaries if s.kind == "gpu-collector")
    return path


@pytest.fixture
def on_sample(sample_db: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MLCOST_DB", str(sample_db))
    return sample_db


@pytest.fixture(scope="module")
def run_kwh(plain) -> dict[str, float]:
    """kWh per node run: its GPUs' sample energies with start <= timestamp < end."""
    joules: dict[str, float] = defaultdict(float)
    for samples in plain.values():
        for sample in samples:
            for run_id in sample["runs"]:
                joules[run_id] += sample["energy_j"]
    return {run_id: j / 3.6e6 for run_id, j in joules.items()}


def test_sample_counts(on_sample):
    truth = json.loads(TRUTH.read_text())
    counts = wh.query("SELECT count(*) AS samples, count(DISTINCT (host, gpu_index)) AS gpus FROM gpu_samples").iloc[0]
    assert (counts["samples"], counts["gpus"]) == (truth["counts"]["trace_rows"], len(truth["node_gpus"]))
    holes = wh.query("SELECT host, gap_start, gap_end FROM gpu_gaps ORDER BY gpu_index").to_dict("records")
    gap = truth["collector_gap"]
    assert holes == [{"host": gap["host"], "gap_start": utc(gap["start"]), "gap_end": utc(gap["end"])}] * 4


def test_sample_idle_hours_match_plain_python_and_truth(on_sample, plain):
    truth = json.loads(TRUTH.read_text())
    plain_idle = {gpu: sum(s["interval"] for s in samples if s["idle"]) for gpu, samples in plain.items()}
    truth_idle = defaultdict(float)
    for day in truth["gpu_idle_by_day"]:
        truth_idle[(day["host"], day["gpu_index"])] += day["idle_sustained_s"]
    stored = wh.query("SELECT host, gpu_index, sum(idle_s) AS idle_s FROM gpu_minutes GROUP BY ALL")
    assert {(r.host, r.gpu_index): r.idle_s for r in stored.itertuples()} == plain_idle == dict(truth_idle)


def test_sample_energy_per_run_matches_plain_python_and_truth(on_sample, run_kwh):
    truth = json.loads(TRUTH.read_text())["node_runs"]
    measured = wh.query("SELECT run_id, gpu_energy_kwh, gpu_energy_coverage_pct FROM run_energy").set_index("run_id")
    runs = node_runs()
    assert sorted(measured.index) == sorted(r["run_id"] for r in runs) == sorted(truth)
    for run in runs:
        got = measured.at[run["run_id"], "gpu_energy_kwh"]
        assert got == pytest.approx(run_kwh[run["run_id"]], rel=1e-9), run["run_id"]
        assert got == pytest.approx(truth[run["run_id"]]["energy_kwh"], rel=0.01), run["run_id"]
        assert measured.at[run["run_id"], "gpu_energy_coverage_pct"] == pytest.approx(100)
    # The run the counter reset killed: its last interval comes from power, 0.05 % off the truth.
    reset = json.loads(TRUTH.read_text())["counter_reset"]["run_id"]
    assert measured.at[reset, "gpu_energy_kwh"] == pytest.approx(truth[reset]["energy_kwh"], rel=0.001)


def test_sample_allocated_idle_matches_the_stalls(on_sample, plain):
    truth = json.loads(TRUTH.read_text())["allocated_idle"]
    allocated_s = sum(s["interval"] for samples in plain.values() for s in samples if s["idle"] and s["runs"])
    stored = wh.query("SELECT sum(idle_s) FILTER (WHERE allocated) AS s FROM gpu_minute_use")["s"][0]
    assert stored == allocated_s
    # Every stall of truth.json is idle throughout on each of its GPUs ...
    for stall in truth:
        stalled = wh.query("SELECT sum(idle_s) AS s FROM gpu_minute_use WHERE allocated AND host = $host "
                           "AND list_contains($gpus, gpu_index) AND minute >= $start AND minute < $end",
                           {"host": stall["host"], "gpus": stall["gpu_indices"],
                            "start": utc(stall["start"]), "end": utc(stall["end"])})["s"][0]
        assert stalled == stall["seconds"] * len(stall["gpu_indices"]), stall["run_id"]
    # ... and the rest (3 samples, 360 s) is idle that ran on into a run's first sample or was
    # already there at its last: an idle stretch does not stop at a run's edge.
    assert stored - sum(stall["seconds"] * len(stall["gpu_indices"]) for stall in truth) == 360


# --- pages ----------------------------------------------------------------------------------

def idle_page() -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    at.switch_page(IDLE_PAGE).run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def test_idle_page_on_an_empty_warehouse_says_how_to_load(warehouse):
    at = idle_page()
    advice = " ".join(info.value for info in at.info)
    assert "mlcost ingest" in advice and "**Data** page" in advice
    assert not at.dataframe and not at.metric


def test_idle_page_figures_match_plain_python(on_sample, plain):
    at = idle_page()
    shown = {metric.label: metric.value for metric in at.metric}
    prices = config.load().prices
    idle_s = sum(s["interval"] for samples in plain.values() for s in samples if s["idle"])
    idle_j = sum(s["energy_j"] for samples in plain.values() for s in samples if s["idle"])
    idle_usd = sum(Decimal(sum(s["interval"] for s in samples if s["idle"])) / 3600 * prices.gpu(samples[0]["name"])
                   for samples in plain.values())
    allocated_s = sum(s["interval"] for samples in plain.values() for s in samples if s["idle"] and s["runs"])
    assert shown["Idle GPU-hours"] == f"{idle_s / 3600:,.1f}"
    assert shown["Idle energy"] == f"{idle_j / 3.6e6:,.1f} kWh"
    assert abs(Decimal(shown["Idle cost"].strip("$").replace(",", "")) - idle_usd) <= Decimal("0.01")
    # shown so that the parts add up: the total and the idle no run held each rounded, the held part their difference
    tenth = lambda hours: Decimal(repr(hours)).quantize(Decimal("0.1"), ROUND_HALF_UP)  # noqa: E731
    held_h = tenth(idle_s / 3600) - tenth((idle_s - allocated_s) / 3600)
    assert abs(held_h - Decimal(allocated_s) / 3600) <= Decimal("0.1")
    assert shown["Held by runs while idle"] == f"{held_h:,.1f} GPU-h"
    candidates, holes, every_gpu = (frame.value for frame in at.dataframe)
    truth = json.loads(TRUTH.read_text())
    right = truth["right_size_candidate"]
    assert candidates[["host", "gpu_index", "project"]].values.tolist() == [
        [right["host"], right["gpu_index"], "search-ranking"]]
    assert candidates["run_ids"][0].split(", ") == right["run_ids"]  # a list of runs reads as one line of text
    assert candidates["mean_util_pct"][0] == pytest.approx(right["mean_gpu_util_pct"], abs=0.005)
    assert len(holes) == 4 and set(holes["gap_h"]) == {3.0}
    assert len(every_gpu) == 8
    assert len(at.get("plotly_chart")) == 5  # heatmap, idle split, histogram, two hour-of-day heatmaps


def test_training_runs_page_shows_measured_energy(on_sample, run_kwh):
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    at.switch_page("app_pages/training_runs.py").run()
    table = at.dataframe[-1]  # the runs table, the page's last
    by_run = table.value.set_index("run_id")
    energy = config.load().energy
    for run in node_runs():
        kwh = run_kwh[run["run_id"]]
        assert by_run.at[run["run_id"], "gpu_energy_kwh"] == pytest.approx(kwh, rel=1e-9)
        assert by_run.at[run["run_id"], "gpu_emissions_kg"] == pytest.approx(
            kwh * energy.pue_for("us-east-1") * energy.grid_for("us-east-1") / 1000, rel=1e-9)
        assert by_run.at[run["run_id"], "gpu_energy_wh_per_1k_examples"] == pytest.approx(
            kwh * 1e6 / run["examples"], rel=1e-9)
    assert by_run["gpu_energy_kwh"].isna().sum() == len(by_run) - len(node_runs())  # cloud runs: no traces
    at.segmented_control(key="runs_x_axis").set_value("GPU energy").run()
    assert not at.exception
    assert any(s.value.startswith("GPU energy vs ") for s in at.subheader)


def test_overview_counts_measured_gpu_energy_of_traced_runs(on_sample, run_kwh):
    """The sample runs carry no energy_kwh of their own: Overview's energy and emissions are the
    traced runs' GPU energy (plain Python above) and that energy x PUE x grid of us-east-1."""
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    assert not at.exception, [e.message for e in at.exception]
    shown = {metric.label: metric.value for metric in at.metric}
    energy = config.load().energy
    kwh = sum(run_kwh[run["run_id"]] for run in node_runs())
    kg = kwh * energy.pue_for("us-east-1") * energy.grid_for("us-east-1") / 1000
    assert shown["Measured energy"] == f"{kwh:,.2f} kWh"
    assert shown["Emissions"] == f"{kg:,.0f} kg CO₂e"  # 367 kg: whole kilograms fit the metric
    runs = sum(1 for line in (SAMPLE_DIR / "runs.jsonl").read_text().splitlines() if line.strip())
    traced = len(node_runs())
    captions = [caption.value for caption in at.caption]
    assert captions.count(f"{traced:,} of {runs:,} runs measured ({traced:,} from GPU traces)") == 2
