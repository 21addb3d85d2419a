"""A stand-in for nvidia-ml-py's `pynvml`: the NVML calls `mlcost collect` makes, on GPUs a test sets up.

Tests put this module in sys.modules["pynvml"]. Each GPU's energy counter follows the fake
clock (`now`, seconds): counter = energy_mj_at_zero + power x now, as NVML's counter grows with
the energy the GPU draws. `library_missing` makes nvmlInit fail as it does without a driver.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace


class NVMLError(Exception):
    pass


class NVMLError_LibraryNotFound(NVMLError):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


@dataclass
class Gpu:
    uuid: str
    name: str | bytes
    power_mw: int
    util_pct: int
    mem_used_bytes: int
    energy_mj_at_zero: int | None = None  # None: the GPU has no energy counter


gpus: list[Gpu] = []
now = 0.0
library_missing = False
initialised = False


def reset() -> None:
    global now, library_missing, initialised
    gpus.clear()
    now, library_missing, initialised = 0.0, False, False


def nvmlInit() -> None:
    global initialised
    if library_missing:
        raise NVMLError_LibraryNotFound("NVML Shared Library Not Found")
    initialised = True


def nvmlShutdown() -> None:
    global initialised
    initialised = False


def nvmlDeviceGetCount() -> int:
    return len(gpus)


def nvmlDeviceGetHandleByIndex(index: int) -> Gpu:
    return gpus[index]


def nvmlDeviceGetUUID(gpu: Gpu) -> str:
    return gpu.uuid


def nvmlDeviceGetName(gpu: Gpu) -> str | bytes:
    return gpu.name  # older nvidia-ml-py returned bytes: the collector must take both


def nvmlDeviceGetPowerUsage(gpu: Gpu) -> int:
    return gpu.power_mw


def nvmlDeviceGetTotalEnergyConsumption(gpu: Gpu) -> int:
    if gpu.energy_mj_at_zero is None:
        raise NVMLError_NotSupported("Not Supported")
    return gpu.energy_mj_at_zero + round(gpu.power_mw * now)  # mW x s = mJ


def nvmlDeviceGetUtilizationRates(gpu: Gpu) -> SimpleNamespace:
    return SimpleNamespace(gpu=gpu.util_pct, memory=0)


def nvmlDeviceGetMemoryInfo(gpu: Gpu) -> SimpleNamespace:
    return SimpleNamespace(total=16 * 2**30, used=gpu.mem_used_bytes, free=16 * 2**30 - gpu.mem_used_bytes)
