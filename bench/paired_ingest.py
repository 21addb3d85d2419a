"""One kind's `mlcost ingest` by two checkouts, interleaved, with json.loads or pandas timed in the same runs.

    python bench/paired_ingest.py --old DIR --new DIR [--runs 3] [--before FILE]... [--baseline json] FILE...

Each round runs, in turn (the order alternating between rounds): the old checkout's
`python -m mlcost ingest --json FILE...`, the new one's, and the plain baseline of bench/fleet.py
(`fleet_workers.py json|pandas FILE...`). Every figure is one child process measured by
bench/fleet.py's own `measure` (wall and CPU seconds, the child's own peak RSS). Each ingest goes
into a copy of a warehouse that checkout made beforehand from the `--before` files (the fleet
loads runs before serving: bench/fleet.py LOAD_ORDER), so both load into the same state. Both
checkouts are compiled to bytecode first (compileall), as fleet.py does for its own.
On a shared machine compare the CPU seconds first; wall seconds are what a user waits.
"""
from __future__ import annotations

import argparse
import compileall
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fleet  # noqa: E402  (a sibling module: measure, child_env, WORKERS)

PACKAGES = ("app", "ingest", "metrics", "mlcost", "outputs", "present")


def env_of(checkout: Path, db: Path | None) -> dict:
    """fleet.child_env, with `checkout` (not this script's) first on PYTHONPATH."""
    env = fleet.child_env(db)
    env["PYTHONPATH"] = str(checkout)
    return env


def ingest(checkout: Path, files: list[str], db: Path, work: Path) -> fleet.Measured:
    run = fleet.measure([sys.executable, "-m", "mlcost", "ingest", "--json", *files], env_of(checkout, db), work)
    if run.returncode != 0:
        raise RuntimeError(f"{checkout}: ingest failed: {run.stderr[-2000:]}")
    return run


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--old", type=Path, required=True)
    options.add_argument("--new", type=Path, required=True)
    options.add_argument("--runs", type=int, default=3)
    options.add_argument("--before", action="append", default=[], help="a file loaded into the warehouse first (repeatable)")
    options.add_argument("--baseline", choices=("json", "pandas"), default="json")
    options.add_argument("files", nargs="+")
    args = options.parse_args()
    sides = {"old": args.old.resolve(), "new": args.new.resolve()}
    for checkout in sides.values():
        for package in PACKAGES:
            compileall.compile_dir(checkout / package, quiet=1)
    results: dict[str, list[fleet.Measured]] = {"old": [], "new": [], args.baseline: []}
    with tempfile.TemporaryDirectory(prefix="mlcost-paired-") as folder:
        work = Path(folder)
        templates = {}
        for side, checkout in sides.items():
            templates[side] = work / f"{side}-template.duckdb"
            if args.before:
                ingest(checkout, args.before, templates[side], work)
        for round_ in range(args.runs):
            order = ["old", "new", args.baseline] if round_ % 2 == 0 else [args.baseline, "new", "old"]
            for side in order:
                if side == args.baseline:
                    run = fleet.measure([sys.executable, str(fleet.WORKERS), args.baseline, *args.files],
                                        fleet.child_env(), work)
                else:
                    db = work / f"{side}.duckdb"
                    db.unlink(missing_ok=True)
                    if templates[side].exists():
                        shutil.copy(templates[side], db)
                    run = ingest(sides[side], args.files, db, work)
                results[side].append(run)
                print(f"round {round_ + 1} {side:6s} {run.wall_s:6.2f} s wall {run.cpu_s:6.2f} s CPU "
                      f"{run.peak_rss_mb:6.0f} MB", flush=True)
    print()
    print("| side | wall s (each) | CPU s (each) | median wall | median CPU | peak RSS MB |")
    print("|---|---|---|---:|---:|---:|")
    for side, runs in results.items():
        walls, cpus = [r.wall_s for r in runs], [r.cpu_s for r in runs]
        print(f"| {side} | {', '.join(f'{w:.2f}' for w in walls)} | {', '.join(f'{c:.2f}' for c in cpus)} | "
              f"{statistics.median(walls):.2f} | {statistics.median(cpus):.2f} | "
              f"{max(r.peak_rss_mb for r in runs):.0f} |")
    base = statistics.median(r.wall_s for r in results[args.baseline])
    for side in ("old", "new"):
        print(f"{side}: {base / statistics.median(r.wall_s for r in results[side]):.2f}x of {args.baseline}'s speed (median wall)")
    print(json.dumps({side: [{"wall_s": r.wall_s, "cpu_s": r.cpu_s, "peak_rss_mb": r.peak_rss_mb} for r in runs]
                      for side, runs in results.items()}))


if __name__ == "__main__":
    main()
