"""`mlcost collect` against a fake NVML (tests/fake_pynvml.py): files that ingest to the expected
values, rotation, a clean stop on SIGTERM, and one sentence plus a non-zero exit without a driver.

The fake node: GPU 0 draws 300 W (300,000 mW) at 85 % with 4 GiB used and has an energy
counter; GPU 1 draws 70 W at 0 % and has none (NVML says NotSupported), and its name comes as
bytes, as older nvidia-ml-py returned it.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from ingest.formats.gpu import collector
from ingest.pipeline import loader
from mlcost import cli
from ingest.engine import warehouse as wh
from tests import fake_pynvml

START = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)
STEP_S = 10.0
HOST = "lab-node-7"


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch):
    """The fake pynvml, in sys.modules, with two GPUs."""
    fake_pynvml.reset()
    fake_pynvml.gpus.extend([
        fake_pynvml.Gpu("GPU-aaaa0000-0000-0000-0000-000000000000", "NVIDIA A100-SXM4-40GB",
                        power_mw=300_000, util_pct=85, mem_used_bytes=4 * 2**30, energy_mj_at_zero=5_000_000),
        fake_pynvml.Gpu("GPU-bbbb0000-0000-0000-0000-000000000000", b"Tesla T4",
                        power_mw=70_000, util_pct=0, mem_used_bytes=0),
    ])
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml)
    yield fake_pynvml
    fake_pynvml.reset()


def fake_clock():
    """A clock that moves STEP_S per reading and moves the fake GPUs' energy counters with it."""
    ticks = iter(range(10_000))

    def now() -> datetime:
        seconds = next(ticks) * STEP_S
        fake_pynvml.now = seconds
        return START + timedelta(seconds=seconds)
    return now


def test_collected_files_ingest_to_the_expected_values(nvml, warehouse, tmp_path):
    out = tmp_path / "traces"
    files = collector.collect(nvml, out, interval_s=0.001, rotate_s=30, host=HOST,
                              stop=threading.Event(), clock=fake_clock(), samples=6)
    # Samples at 0, 10, ..., 50 s; a new file once 30 s have passed since a file was opened.
    assert [f.name for f in files] == [f"{HOST}_20260302T090000Z.csv", f"{HOST}_20260302T090030Z.csv"]
    assert sorted(p.name for p in out.iterdir()) == [f.name for f in files]  # no .part left
    assert files[0].read_text().splitlines()[:2] == [
        "timestamp,host,gpu_index,gpu_uuid,gpu_name,power_w,energy_mj,gpu_util_pct,mem_used_mib",
        (f"2026-03-02T09:00:00.000Z,{HOST},0,GPU-aaaa0000-0000-0000-0000-000000000000,"
         "NVIDIA A100-SXM4-40GB,300.000,5000000,85.0,4096.0"),
    ]

    summaries = [summary for _, summary in loader.ingest_paths([str(out)])]
    assert [(s.kind, s.status, s.rows_loaded, s.rows_rejected) for s in summaries] == [
        ("gpu-collector", "loaded", 6, 0), ("gpu-collector", "loaded", 6, 0)]
    assert summaries[0].totals["gpus"] == 2 and summaries[0].totals["first_ts"] == "2026-03-02T09:00:00Z"

    stored = wh.query("SELECT gpu_index, gpu_uuid, gpu_name, count(*) AS samples, min(power_w) AS power_w, "
                      "min(energy_mj) AS first_mj, max(energy_mj) AS last_mj, max(gpu_util_pct) AS util, "
                      "max(mem_used_mib) AS mem FROM gpu_samples GROUP BY ALL ORDER BY gpu_index")
    assert stored.to_dict("records") == [
        {"gpu_index": 0, "gpu_uuid": "GPU-aaaa0000-0000-0000-0000-000000000000", "gpu_name": "NVIDIA A100-SXM4-40GB",
         "samples": 6, "power_w": 300.0, "first_mj": 5_000_000, "last_mj": 5_000_000 + 300_000 * 50,
         "util": 85.0, "mem": 4096.0},
        {"gpu_index": 1, "gpu_uuid": "GPU-bbbb0000-0000-0000-0000-000000000000", "gpu_name": "Tesla T4",
         "samples": 6, "power_w": 70.0, "first_mj": None, "last_mj": None, "util": 0.0, "mem": 0.0},
    ]
    # Energy over the 60 s the six samples cover (the last one stands for one more interval):
    # GPU 0 by its counter (300 W x 50 s) plus 300 W x 10 s; GPU 1 by its power, 70 W x 60 s.
    energy = wh.query("SELECT gpu_index, sum(energy_kwh) AS kwh, sum(coverage_s) AS s, sum(busy_s) AS busy, "
                      "sum(idle_s) AS idle FROM gpu_minutes GROUP BY 1 ORDER BY 1")
    assert energy["kwh"].tolist() == pytest.approx([300 * 60 / 3.6e6, 70 * 60 / 3.6e6])
    assert energy["s"].tolist() == [60.0, 60.0]
    # GPU 1 reads 0 % but only for 60 s: under the 5 minutes the idle rule asks for.
    assert energy[["busy", "idle"]].values.tolist() == [[60.0, 0.0], [60.0, 0.0]]


def test_sigterm_stops_cleanly_and_the_files_are_complete(nvml, warehouse, tmp_path):
    out = tmp_path / "traces"
    before = signal.getsignal(signal.SIGTERM)
    timer = threading.Timer(0.5, os.kill, [os.getpid(), signal.SIGTERM])
    timer.start()
    try:
        code = collector.main(out, interval_s=0.05, rotate_s=3600, host=HOST)
    finally:
        timer.cancel()
    assert code == 0
    assert signal.getsignal(signal.SIGTERM) is before  # handlers restored
    assert not nvml.initialised  # nvmlShutdown called
    (written,) = out.iterdir()
    assert written.suffix == ".csv"
    lines = written.read_text().splitlines()
    assert len(lines) >= 5 and len(lines) % 2 == 1  # header + 2 rows per sample, no torn sample
    (summary,) = [s for _, s in loader.ingest_paths([str(out)])]
    assert summary.ok and summary.rows_loaded == len(lines) - 1


def test_without_a_driver_one_sentence_and_exit_1(nvml, tmp_path, capsys):
    nvml.library_missing = True
    assert cli.main(["collect", "--out", str(tmp_path / "traces")]) == 1
    err = capsys.readouterr().err
    assert err == ("mlcost collect: this machine has no NVIDIA driver (NVML's library was not found), "
                   "so there are no GPUs to sample.\n")
    assert not (tmp_path / "traces").exists()


def test_without_nvidia_ml_py_one_sentence_and_exit_1(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    assert collector.main(tmp_path / "traces", 10, 3600) == 1
    assert capsys.readouterr().err == ("mlcost collect: the nvidia-ml-py package is not installed, so NVML "
                                       "cannot be reached (pip install nvidia-ml-py).\n")


def test_real_pynvml_without_a_driver_raises_library_not_found():
    """The fact the collector relies on, checked on the real package (no NVIDIA driver here)."""
    pynvml = pytest.importorskip("pynvml")
    if Path("/proc/driver/nvidia").exists():
        pytest.skip("this machine has an NVIDIA driver")
    with pytest.raises(pynvml.NVMLError_LibraryNotFound):
        pynvml.nvmlInit()
