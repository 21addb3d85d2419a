"""One kind's `mlcost ingest` by two checkouts, timed in turns, with the fleet's baselines in the same rounds.

    python bench/paired_ingest.py --old DIR [--new .] [--rounds 3] [--baseline json|pandas] [--fmt json|csv]
                                  [--base DB] FILE...

Each round runs, one after another (so a busy spell of the shared machine hits every side alike):
OLD's `python -m mlcost ingest --json FILE...` into a fresh warehouse (empty, or a copy of --base),
NEW's the same, the plain baseline (json.loads of every line, or pandas.read_csv) and bare DuckDB
reading the files into a table. Each child is timed by bench/fleet.py's measure() (its own
launcher: wall seconds, user+system CPU seconds, its own peak RSS). Prints every run, then the
median of each side and the ratios the issue's targets use: baseline wall / ingest wall (target
>= 1: not slower than json.loads or pandas) and bare DuckDB wall / ingest wall (target >= 0.5).
The checkouts' bytecode should be compiled beforehand (bench/fleet.py compile_project does it for
this one; a copy made with `git archive` needs `python -m compileall`): this machine sets
PYTHONDONTWRITEBYTECODE=1, so an uncompiled checkout compiles every module again in each child.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import fleet  # noqa: E402  (a sibling module: measure() and the workers' command lines)


def env_of(checkout: Path, db: Path | None) -> dict:
    env = {key: value for key, value in os.environ.items() if key not in ("MLCOST_CONFIG", "PYTHONPATH")}
    env["PYTHONPATH"] = str(checkout)
    env["MLCOST_LOCK_WAIT_S"] = "3600"
    if db is not None:
        env["MLCOST_DB"] = str(db)
    return env


def ingest(checkout: Path, files: list[str], base: Path | None, work: Path) -> fleet.Measured:
    db = work / "paired.duckdb"
    for stale in work.glob("paired.duckdb*"):
        stale.unlink()
    if base is not None:
        shutil.copy(base, db)
    run = fleet.measure([sys.executable, "-m", "mlcost", "ingest", "--json", *files], env_of(checkout, db), checkout)
    if run.returncode != 0:
        raise RuntimeError(f"ingest by {checkout} failed: {run.stderr[-2000:]}")
    return run


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("files", nargs="+")
    options.add_argument("--old", type=Path, required=True)
    options.add_argument("--new", type=Path, default=BENCH_DIR.parent)
    options.add_argument("--rounds", type=int, default=3)
    options.add_argument("--baseline", choices=("json", "pandas"), default="json")
    options.add_argument("--fmt", choices=("json", "csv"), default="json")
    options.add_argument("--base", type=Path, help="a warehouse each ingest starts from (copied)")
    args = options.parse_args()
    files = [str(Path(f).resolve()) for f in args.files]
    sides: dict[str, list[fleet.Measured]] = {"old": [], "new": [], args.baseline: [], "duckdb": []}
    with tempfile.TemporaryDirectory(prefix="mlcost-paired-") as spool:
        work = Path(spool)
        for round_ in range(args.rounds):
            order = ("old", "new") if round_ % 2 == 0 else ("new", "old")
            for side in order:
                sides[side].append(ingest(args.old.resolve() if side == "old" else args.new.resolve(), files,
                                          args.base, work))
            sides[args.baseline].append(fleet.measure([sys.executable, str(fleet.WORKERS), args.baseline, *files],
                                                      env_of(BENCH_DIR.parent, None), work))
            sides["duckdb"].append(fleet.measure([sys.executable, str(fleet.WORKERS), "duckdb", args.fmt,
                                                  str(work / "bare.duckdb"), *files], env_of(BENCH_DIR.parent, None), work))
            (work / "bare.duckdb").unlink(missing_ok=True)
            print(f"round {round_ + 1}: " + "; ".join(
                f"{side} {runs[-1].wall_s:.2f} s wall {runs[-1].cpu_s:.2f} CPU s {runs[-1].peak_rss_mb:,.0f} MB"
                for side, runs in sides.items()), flush=True)
    median = {side: (statistics.median(r.wall_s for r in runs), statistics.median(r.cpu_s for r in runs))
              for side, runs in sides.items()}
    for side, (wall, cpu) in median.items():
        print(f"median {side:7} {wall:6.2f} s wall {cpu:6.2f} CPU s")
    for side in ("old", "new"):
        wall = median[side][0]
        print(f"{side}: {args.baseline} wall / ingest wall {median[args.baseline][0] / wall:.2f}x (target >= 1), "
              f"bare DuckDB wall / ingest wall {median['duckdb'][0] / wall:.3f}x (target >= 0.5)")
    print(f"new / old: wall {median['new'][0] / median['old'][0]:.3f}, CPU {median['new'][1] / median['old'][1]:.3f}")


if __name__ == "__main__":
    main()
