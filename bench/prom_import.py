"""CPU seconds of the Prometheus importer's DCGM path on generated series, for comparing two trees.

    PYTHONPATH=/path/to/tree python bench/prom_import.py [--hosts 2 --gpus 8 --steps 10000] [--whole]

Generates the series a Prometheus server answers for dcgm-exporter's four metrics (hosts x GPUs x 4
series, `steps` points each, values as text as the HTTP API writes them), then times
`prometheus.gpu_samples` (or, with --whole, `prometheus.pull` with a client answering the generated
series, and the load of its GPU samples into a fresh warehouse) in this process: CPU s (user+sys,
DuckDB's threads included) and wall s. The generation is not timed; with --warm, neither are the
first call's imports (pandas, ~0.2 CPU s) and staging schema. Run old and new interleaved.
"""
from __future__ import annotations

import argparse
import os
import random
import resource
import sys
import tempfile
import time
from datetime import datetime, timezone

T0 = 1_764_000_000
STEP_S = 15
METRICS = ("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_GPU_UTIL",
           "DCGM_FI_DEV_FB_USED")


def series(hosts: int, gpus: int, steps: int, seed: int = 42) -> list[dict]:
    """hosts x gpus x 4 series of `steps` points each: [[t_s, "value"], ...] as the HTTP API gives them."""
    rng = random.Random(seed)
    out = []
    for h in range(hosts):
        for g in range(gpus):
            labels = {"gpu": str(g), "UUID": f"GPU-{h}-{g}", "modelName": "NVIDIA H100 80GB HBM3",
                      "Hostname": f"node-{h}", "instance": f"10.0.0.{h}:9400", "job": "dcgm",
                      "pod": f"trainer-{h}", "namespace": "ml"}
            energy = rng.randrange(10**9)
            power, util, mem = [], [], []
            energies = []
            for _ in range(steps):
                p = round(rng.uniform(60, 700), 3)
                energy += int(p * STEP_S * 1000)
                power.append(repr(p))
                energies.append(str(energy))
                util.append(str(rng.randrange(101)))
                mem.append(str(rng.randrange(81_920)))
            times = [T0 + STEP_S * i for i in range(steps)]
            for name, texts in zip(METRICS, (power, energies, util, mem)):
                out.append({"metric": {"__name__": name, **labels}, "values": [[t, v] for t, v in zip(times, texts)]})
    return out


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--whole", action="store_true", help="time pull() and the load, not gpu_samples alone")
    parser.add_argument("--warm", action="store_true",
                        help="run gpu_samples on a few points first (imports such as pandas, the staging schema)")
    args = parser.parse_args()
    from ingest.importers import prometheus

    data = series(args.hosts, args.gpus, args.steps)
    if args.warm:
        prometheus.gpu_samples(series(1, 1, 3))
    points = sum(len(s["values"]) for s in data)
    if not args.whole:
        cpu0, wall0 = cpu_s(), time.perf_counter()
        parsed = prometheus.gpu_samples(data)
        cpu, wall = cpu_s() - cpu0, time.perf_counter() - wall0
        print(f"gpu_samples points={points} samples={parsed.accepted} rejects={len(parsed.rejects)} "
              f"cpu_s={cpu:.2f} wall_s={wall:.2f}")
        return 0

    from ingest.importers import ledger
    from ingest.formats.gpu import traces

    class Client:
        display = "http://bench"

        def query_range(self, query, start_s, end_s, step_s):
            return data if "DCGM" in query else []

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["MLCOST_DB"] = os.path.join(tmp, "bench.duckdb")
        since = datetime.fromtimestamp(T0, timezone.utc)
        until = datetime.fromtimestamp(T0 + STEP_S * (args.steps - 1), timezone.utc)
        cpu0, wall0 = cpu_s(), time.perf_counter()
        pulled = prometheus.pull(Client(), since, until, STEP_S)
        cpu1 = cpu_s()
        summary = ledger.load_import("bench", prometheus.KIND, pulled.gpu, pulled.gpu_content, traces.totals(pulled.gpu))
        cpu, wall = cpu_s() - cpu0, time.perf_counter() - wall0
    print(f"pull+load points={points} loaded={summary.rows_loaded} rejected={summary.rows_rejected} "
          f"pull_cpu_s={cpu1 - cpu0:.2f} cpu_s={cpu:.2f} wall_s={wall:.2f}", file=sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
