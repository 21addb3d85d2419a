"""`mlcost collect`: sample every NVIDIA GPU through NVML into rotating collector-CSV files.

Each sample reads, per GPU: power (NVML's mW, written in W), the total-energy counter (mJ
since the driver loaded; empty on GPUs without one), utilization (%), memory used (MiB), uuid,
name, and the host. Rows go to `<out>/<host>_<start>.csv.part`, flushed after every sample;
after `rotate_s` (and on SIGTERM or SIGINT) the file is closed and renamed to `.csv`, so
`mlcost ingest <out>` only ever reads finished files. The format is the one
ingest/formats/gpu/gpu_collector.py reads.
"""
from __future__ import annotations

import signal
import socket
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType
from typing import Callable, TextIO

from ingest.formats.gpu.gpu_collector import COLUMNS

MIB = 1024 * 1024


def main(out: Path, interval_s: float, rotate_s: float, host: str | None = None) -> int:
    """Collect until SIGTERM or SIGINT; 0 after a clean stop, 1 (with one sentence) without NVML."""
    if interval_s <= 0 or rotate_s <= 0:
        print("mlcost collect: --interval and --rotate must be more than 0 seconds.", file=sys.stderr)
        return 2
    try:
        import pynvml
    except ImportError:
        print("mlcost collect: the nvidia-ml-py package is not installed, so NVML cannot be reached "
              "(pip install nvidia-ml-py).", file=sys.stderr)
        return 1
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        print("mlcost collect: this machine has no NVIDIA driver (NVML's library was not found), "
              "so there are no GPUs to sample.", file=sys.stderr)
        return 1
    except pynvml.NVMLError as error:
        print(f"mlcost collect: NVML could not start ({error}).", file=sys.stderr)
        return 1
    stop = threading.Event()
    previous = _on_signals(lambda *_: stop.set())
    try:
        files = collect(pynvml, out, interval_s, rotate_s, host or socket.gethostname(), stop)
    finally:
        _restore(previous)
        pynvml.nvmlShutdown()
    print(f"mlcost collect: stopped; {len(files)} trace files in {out}", file=sys.stderr)
    return 0


def collect(nvml: ModuleType, out: Path, interval_s: float, rotate_s: float, host: str,
            stop: threading.Event, clock: Callable[[], datetime] | None = None,
            samples: int | None = None) -> list[Path]:
    """Sample every interval_s until `stop` is set (or `samples` were taken); the finished files."""
    clock = clock or (lambda: datetime.now(timezone.utc))
    writer = _Writer(out, host, rotate_s)
    taken = 0
    next_due = time.monotonic()
    try:
        while not stop.is_set() and (samples is None or taken < samples):
            at = clock()
            writer.write(at, read_gpus(nvml))
            taken += 1
            next_due += interval_s
            stop.wait(max(0.0, next_due - time.monotonic()))
    finally:
        writer.close()
    return writer.finished


def read_gpus(nvml: ModuleType) -> list[tuple]:
    """(index, uuid, name, power W, energy mJ, util %, memory MiB) per GPU; None where NVML has no reading."""
    readings = []
    for index in range(nvml.nvmlDeviceGetCount()):
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid, name = _text(nvml.nvmlDeviceGetUUID(handle)), _text(nvml.nvmlDeviceGetName(handle))
        except nvml.NVMLError:
            continue  # a GPU that fell off the bus: no row rather than a row of blanks
        power_mw = _reading(nvml, nvml.nvmlDeviceGetPowerUsage, handle)
        energy_mj = _reading(nvml, nvml.nvmlDeviceGetTotalEnergyConsumption, handle)
        rates = _reading(nvml, nvml.nvmlDeviceGetUtilizationRates, handle)
        memory = _reading(nvml, nvml.nvmlDeviceGetMemoryInfo, handle)
        readings.append((index, uuid, name,
                         None if power_mw is None else power_mw / 1000,
                         energy_mj,
                         None if rates is None else rates.gpu,
                         None if memory is None else memory.used / MIB))
    return readings


class _Writer:
    """Rotating CSV files: `<host>_<start>.csv.part` while open, renamed to `.csv` when done."""

    def __init__(self, out: Path, host: str, rotate_s: float) -> None:
        self.out, self.host, self.rotate_s = out, host, rotate_s
        self.file: TextIO | None = None
        self.path: Path | None = None
        self.opened_at: datetime | None = None
        self.finished: list[Path] = []

    def write(self, at: datetime, readings: list[tuple]) -> None:
        if self.file is None or (at - self.opened_at).total_seconds() >= self.rotate_s:
            self.close()
            self._open(at)
        stamp = at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        for index, uuid, name, power_w, energy_mj, util_pct, mem_mib in readings:
            fields = [stamp, self.host, str(index), uuid, name,
                      _number(power_w, 3), "" if energy_mj is None else str(int(energy_mj)),
                      _number(util_pct, 1), _number(mem_mib, 1)]
            self.file.write(",".join(field.replace(",", " ") for field in fields) + "\n")
        self.file.flush()

    def close(self) -> None:
        if self.file is None:
            return
        self.file.close()
        done = self.path.with_suffix("")  # drop .part
        self.path.rename(done)
        self.finished.append(done)
        self.file = None

    def _open(self, at: datetime) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        self.path = self.out / f"{self.host.replace('_', '-')}_{at.astimezone(timezone.utc):%Y%m%dT%H%M%S}Z.csv.part"
        self.file = self.path.open("w", encoding="utf-8")
        self.file.write(",".join(COLUMNS) + "\n")
        self.opened_at = at


def _reading(nvml: ModuleType, read: Callable, handle: object) -> object:
    try:
        return read(handle)
    except nvml.NVMLError:  # NotSupported (no energy counter on older GPUs) and the like
        return None


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _number(value: float | None, places: int) -> str:
    return "" if value is None else f"{value:.{places}f}"


def _on_signals(handler: Callable) -> dict:
    previous = {}
    for number in (signal.SIGTERM, signal.SIGINT):
        try:
            previous[number] = signal.signal(number, handler)
        except ValueError:  # not the main thread: the caller stops us through the event
            pass
    return previous


def _restore(previous: dict) -> None:
    for number, handler in previous.items():
        signal.signal(number, handler)
