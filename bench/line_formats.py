"""Time nvidia-smi, DCGM and CodeCarbon staging: the engine's SQL pass (`stage`), its line reader
alone where a format offers one, and bare DuckDB reading the same file, in one run (ratios, not
seconds: the machine is shared).

    python bench/line_formats.py DIR [--lines 1000000] [--repeats 3] [--kinds nvidia_smi,dcgm,codecarbon]
        [--old-lines N]

Writes one deterministic file per format into DIR (reused when present), then for each prints
the best of --repeats wall and CPU seconds of:
- reader: the engine's line reader over every line (`parse`: CodeCarbon; nvidia-smi and DCGM have
  whole-file rules that only the SQL pass applies, so they have no such path), staged as
  loader._stage stages a parser without `stage` (insert_parsed + totals);
- stage: the module's columnar `stage` into a fresh staging database;
- bare: `CREATE TABLE bare AS SELECT * FROM read_csv(FILE, all_varchar=true, ...)` into a fresh
  DuckDB file (the team's baseline; a Prometheus scrape is read as one text column).
--old-lines caps the file the reader path reads (its first N lines, a separate file): parse holds
every row as a dict, gigabytes at a million CodeCarbon rows.
"""
from __future__ import annotations

import argparse
import importlib
import random
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ingest.engine import staging  # noqa: E402
from ingest.engine.contract import ParseContext  # noqa: E402

KINDS = ("nvidia_smi", "dcgm", "codecarbon")
START = datetime(2026, 3, 1, tzinfo=timezone.utc)


def nvidia_smi_lines(count: int):
    """An 8-GPU `nvidia-smi --query-gpu=timestamp,power.draw,utilization.gpu,memory.used --format=csv
    -l 1` log: rows a few ms apart within a loop, loops a second apart, no index column."""
    rnd = random.Random(42)
    yield "timestamp, power.draw [W], utilization.gpu [%], memory.used [MiB]"
    for row in range(count - 1):
        loop, gpu = divmod(row, 8)
        at = START + timedelta(seconds=loop, milliseconds=3 * gpu)
        util = rnd.choice((0, 0, 35, 87, 100))
        yield (f"{at:%Y/%m/%d %H:%M:%S}.{at.microsecond // 1000:03d}, {60 + util * 2.5 + rnd.random():.2f} W, "
               f"{util} %, {rnd.randrange(14, 80000)} MiB")


DCGM_OTHER = ("DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_MEMORY_TEMP",
              "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_FB_FREE")
DCGM_OURS = ("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_GPU_UTIL",
             "DCGM_FI_DEV_FB_USED")


def dcgm_lines(count: int):
    """Stored dcgm-exporter scrapes of an 8-GPU node, every sample stamped (ms): per metric a
    HELP and a TYPE line and one sample per GPU, ten metrics of which mlcost reads four."""
    rnd = random.Random(42)
    written, scrape = 0, 0
    energy = [1_000_000] * 8
    while written < count:
        ms = int((START + timedelta(seconds=30 * scrape)).timestamp() * 1000)
        for metric in DCGM_OTHER[:3] + DCGM_OURS + DCGM_OTHER[3:]:
            yield f"# HELP {metric} {metric.lower()}."
            yield f"# TYPE {metric} {'counter' if 'ENERGY' in metric or 'COUNTER' in metric else 'gauge'}"
            written += 2
            for gpu in range(8):
                if metric == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION":
                    energy[gpu] += rnd.randrange(1_000, 9_000_000)
                    value = str(energy[gpu])
                else:
                    value = f"{rnd.uniform(0, 100):.6f}" if metric == "DCGM_FI_DEV_POWER_USAGE" else str(rnd.randrange(0, 100))
                yield (f'{metric}{{gpu="{gpu}",UUID="GPU-{gpu:08x}-7953-256e-8f33-1343419b1a1c",pci_bus_id="00000000:3{gpu}:00.0",'
                       f'device="nvidia{gpu}",modelName="NVIDIA L4",Hostname="node-1",DCGM_FI_DRIVER_VERSION="580.105.08"}} '
                       f"{value} {ms}")
                written += 1
        scrape += 1


CODECARBON_HEADER = ("timestamp,project_name,run_id,duration,emissions,emissions_rate,cpu_power,gpu_power,ram_power,"
                     "cpu_energy,gpu_energy,ram_energy,energy_consumed,country_name,country_iso_code,region,cloud_provider,"
                     "cloud_region,os,python_version,codecarbon_version,cpu_count,cpu_model,gpu_count,gpu_model,longitude,"
                     "latitude,ram_total_size,tracking_mode,on_cloud,pue")


def codecarbon_lines(count: int):
    """CodeCarbon 2.4 rows (31 columns, as the real examples file), one run each."""
    rnd = random.Random(42)
    yield CODECARBON_HEADER
    for row in range(count - 1):
        at = START + timedelta(seconds=37 * row)
        duration = rnd.uniform(1, 20_000)
        energy = duration * rnd.uniform(1e-6, 1e-4)
        yield (f"{at:%Y-%m-%dT%H:%M:%S},project-{row % 40},{rnd.getrandbits(128):032x},{duration!r},{energy * 0.4!r},"
               f"{0.4 / duration!r},4.1335,0.0215,3.0,{energy * 0.3!r},{energy * 0.6!r},{energy * 0.1!r},{energy!r},France,"
               "FRA,île-de-france,,,Linux-6.1-x86_64,3.11.9,2.4.3,32,AMD EPYC 7R13,1,1 x NVIDIA A10G,2.792,48.399,"
               "64.0,machine,N,1.0")


GENERATORS = {"nvidia_smi": nvidia_smi_lines, "dcgm": dcgm_lines, "codecarbon": codecarbon_lines}
SUFFIX = {"nvidia_smi": "node-1_nvidia-smi.csv", "dcgm": "node-1_dcgm.prom", "codecarbon": "emissions.csv"}


def generated(folder: Path, kind: str, lines: int) -> Path:
    path = folder / f"{lines}_{SUFFIX[kind]}"
    if not path.exists():
        with open(path, "w", encoding="utf-8") as out:
            for number, line in enumerate(GENERATORS[kind](lines)):
                if number >= lines:
                    break
                out.write(line + "\n")
    return path


def timed(run) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process and its threads) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    return time.perf_counter() - wall, time.process_time() - cpu


def best(repeats: int, run) -> tuple[float, float]:
    timings = [timed(run) for _ in range(repeats)]
    return min(t[0] for t in timings), min(t[1] for t in timings)


def bare(path: Path, kind: str) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-bare-") as folder:
        con = duckdb.connect(str(Path(folder) / "bare.duckdb"))
        if kind == "dcgm":  # not CSV: every line as one text value
            con.execute("CREATE TABLE bare AS SELECT * FROM read_csv(?, all_varchar=true, header=false, delim='\\x01', "
                        "quote='', escape='', columns={'raw': 'VARCHAR'})", [str(path)])
        else:
            con.execute("CREATE TABLE bare AS SELECT * FROM read_csv(?, all_varchar=true, header=true)", [str(path)])
        con.close()


MODULES = {"nvidia_smi": "ingest.formats.gpu.nvidia_smi", "dcgm": "ingest.formats.gpu.dcgm",
           "codecarbon": "ingest.formats.runs.codecarbon"}


def context(path: Path, kind: str) -> ParseContext:
    return ParseContext(str(path), timezone.utc, None, None)


def old(path: Path, kind: str) -> None:
    module = importlib.import_module(MODULES[kind])
    con = staging.open_stage()
    parsed = module.parse(staging.lines(staging.Source.of(path)), context(path, kind))
    staging.insert_parsed(con, parsed, str(path))
    module.totals(parsed)
    con.close()


def new(path: Path, kind: str) -> None:
    module = importlib.import_module(MODULES[kind])
    con = staging.open_stage()
    module.stage(staging.Source.of(path), con, context(path, kind))
    con.close()


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("folder", type=Path)
    options.add_argument("--lines", type=int, default=1_000_000)
    options.add_argument("--old-lines", type=int, default=None)
    options.add_argument("--repeats", type=int, default=3)
    options.add_argument("--kinds", default=",".join(KINDS))
    args = options.parse_args()
    args.folder.mkdir(parents=True, exist_ok=True)
    print(f"{'kind':<11} {'lines':>9} {'path':<6} {'wall s':>8} {'cpu s':>8} {'bare/x wall':>11} {'bare/x cpu':>10}")
    for kind in args.kinds.split(","):
        path = generated(args.folder, kind, args.lines)
        old_path = generated(args.folder, kind, args.old_lines) if args.old_lines else path
        base = best(args.repeats, lambda: bare(path, kind))
        rows = [("bare", args.lines, base, base),
                ("stage", args.lines, best(args.repeats, lambda: new(path, kind)), base)]
        if old_path != path:  # the old path on the smaller file, against bare on that file
            rows.append(("bare", args.old_lines, small := best(args.repeats, lambda: bare(old_path, kind)), None))
            rows.append(("stage", args.old_lines, best(args.repeats, lambda: new(old_path, kind)), small))
            if hasattr(importlib.import_module(MODULES[kind]), "parse"):
                rows.append(("reader", args.old_lines, best(args.repeats, lambda: old(old_path, kind)), small))
        elif hasattr(importlib.import_module(MODULES[kind]), "parse"):  # CodeCarbon: nvidia-smi and DCGM have none
            rows.append(("reader", args.lines, best(args.repeats, lambda: old(path, kind)), base))
        for name, lines, (wall, cpu), against in rows:
            against = against or (wall, cpu)
            print(f"{kind:<11} {lines:>9,} {name:<6} {wall:>8.2f} {cpu:>8.2f} {against[0] / wall:>11.2f} "
                  f"{against[1] / cpu:>10.2f}", flush=True)


if __name__ == "__main__":
    main()
