"""GPU trace files in `mlcost collect`'s CSV format written by tests, and the energy the tests
expect of them computed straight from the CSV (csv + arithmetic, not the code under test)."""
from __future__ import annotations

import csv
from datetime import datetime, timedelta
from pathlib import Path

HEADER = ["timestamp", "host", "gpu_index", "gpu_uuid", "gpu_name", "power_w", "energy_mj", "gpu_util_pct",
          "mem_used_mib"]
STEP_S = 10


def write_trace(path: Path, host: str, gpus: int, gpu_name: str, start: datetime, end: datetime,
                base_w: float) -> Path:
    """Samples every STEP_S s from start to end (both included) of `gpus` GPUs of `host`; power
    varies with the GPU and the sample so the integration is not trivial. No energy counter: the
    energy is power integrated over time."""
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(HEADER)
        at, sample = start, 0
        while at <= end:
            for index in range(gpus):
                power = base_w + 40 * index + 5 * (sample % 7)
                writer.writerow([at.isoformat().replace("+00:00", "Z"), host, index, f"GPU-{host}-{index}", gpu_name,
                                 f"{power:.1f}", "", "85", "1000"])
            at += timedelta(seconds=STEP_S)
            sample += 1
    return path


def energy_kwh(paths: list[Path], start: datetime, end: datetime) -> float:
    """Energy of every GPU in the files over [start, end), kWh: the trapezoid of power over each
    sample interval that starts in the window (the windows here fall on sample times)."""
    series: dict[tuple[str, str], list[tuple[datetime, float]]] = {}
    for path in paths:
        with path.open(newline="") as source:
            for row in csv.DictReader(source):
                at = datetime.fromisoformat(row["timestamp"].replace("Z", "+00:00"))
                series.setdefault((row["host"], row["gpu_index"]), []).append((at, float(row["power_w"])))
    joules = 0.0
    for points in series.values():
        points.sort()
        for (t0, p0), (t1, p1) in zip(points, points[1:]):
            if start <= t0 < end:
                joules += (p0 + p1) / 2 * (t1 - t0).total_seconds()
    return joules / 3.6e6
