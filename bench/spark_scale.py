"""Issue 24's scale benchmark: the same fleet (bench/fleet_data.py) through the embedded path and
through Spark local[2], at growing scales, printing each path's seconds per stage and how they grow.

    nice -n 10 python bench/spark_scale.py [--scales 0.05 0.25 1.0] [--cache DIR] [--skip-spark]

Per scale, each in its own child process:
- embedded: `python -m mlcost ingest --json` of runs, serving windows, the bill, then the traces into a
  fresh warehouse file (each load updates the derived tables it changes, as mlcost does today);
- lake: the warehouse's base tables exported to a lake folder (tests/lake_export.py: DuckDB COPY,
  Hive partitions by month, a ledger entry);
- duckdb-derive: ingest/derived/sql's SELECTs on DuckDB over the lake (every derived table at once);
- spark-derive: the same SELECTs translated to Spark SQL (mlcost/spark_job.py derive) on local[2],
  1 GB driver (SPARK_SCALE_DRIVER_MEMORY changes it).
Prints one JSON line per scale and a table at the end. The machine may be shared: ratios matter.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))
sys.path.insert(0, str(REPO_ROOT))

KINDS = ("runs", "serving", "bill", "traces")  # runs first: trace loads attribute energy to them


def env_for(db: Path | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "MLCOST_CONFIG"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env["MLCOST_LOCK_WAIT_S"] = "3600"
    if db is not None:
        env["MLCOST_DB"] = str(db)
    return env


def timed(command: list[str], env: dict) -> tuple[float, str]:
    began = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{command[:4]} failed: {done.stderr[-3000:]}")
    return time.perf_counter() - began, done.stdout


def worker(kind: str, lake: Path) -> None:
    """In a child: derive the lake's tables with DuckDB or Spark and print the stages' seconds (JSON)."""
    from ingest.derived import sql as derived_sql
    from ingest.settings import config

    settings = derived_sql.Settings.of(config.load())
    timings: dict = {}
    if kind == "duckdb":
        from tests.lake_export import duckdb_over

        began = time.perf_counter()
        con = duckdb_over(lake)
        con.execute("SET threads = 2")
        con.execute("SET memory_limit = '1GB'")
        for step in derived_sql.base_steps(settings):
            at = time.perf_counter()
            con.execute(f"CREATE OR REPLACE TEMP TABLE {step.name} AS {step.sql}")
            timings[step.name] = time.perf_counter() - at
        at = time.perf_counter()
        months = derived_sql.months_of(con.execute(derived_sql.MONTHS).fetchall())
        con.execute("CREATE TEMP TABLE bill_allocation_days AS "
                    + " UNION ALL ".join(f"({derived_sql.allocation_month(m, settings)})" for m in months))
        timings["bill_allocation_days"] = time.perf_counter() - at
        timings["total"] = time.perf_counter() - began
        timings["rows"] = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                           for t in ("gpu_samples", "gpu_minutes", "run_gpu_time", "bill_allocation_days")}
    else:
        from mlcost import spark_job

        spark = spark_job.session("local[2]", os.environ.get("SPARK_SCALE_DRIVER_MEMORY", "1g"))
        spark_job.derive(spark, str(lake), settings, (), timings=timings)
        spark.stop()
    print(json.dumps({k: (round(v, 2) if isinstance(v, float) else v) for k, v in timings.items()}))


def one_scale(scale: float, cache: Path, work: Path, spark: bool) -> dict:
    import fleet
    import fleet_data  # noqa: F401
    from tests.lake_export import export

    folder, manifest = fleet.dataset(cache, scale)
    db, lake = work / f"fleet-{scale:g}.duckdb", work / f"lake-{scale:g}"
    db.unlink(missing_ok=True)
    shutil.rmtree(lake, ignore_errors=True)
    result: dict = {"scale": scale, "trace_rows": manifest["files"]["traces"]["rows"],
                    "bill_lines": manifest["files"]["bill"]["rows"], "runs": manifest["files"]["runs"]["rows"],
                    "embedded": {}}
    for kind in KINDS:
        seconds, _ = timed([sys.executable, "-m", "mlcost", "ingest", "--json",
                            *fleet.files_of(folder, manifest["files"][kind])], env_for(db))
        result["embedded"][f"ingest {kind}"] = round(seconds, 2)
        fleet.say(f"scale {scale:g}: embedded ingest {kind} {seconds:.1f} s")
    began = time.perf_counter()
    export(db, lake)
    result["lake_export_s"] = round(time.perf_counter() - began, 2)
    for kind in ("duckdb",) + (("spark",) if spark else ()):
        seconds, out = timed([sys.executable, __file__, "--worker", kind, "--lake", str(lake)], env_for())
        result[f"{kind}_derive"] = {"wall_s": round(seconds, 2), **json.loads(out.strip().splitlines()[-1])}
        fleet.say(f"scale {scale:g}: {kind} derive {seconds:.1f} s wall")
    print(json.dumps(result), flush=True)
    return result


def table(results: list[dict]) -> str:
    rows = ["| scale | trace rows | bill lines | embedded ingest (s) | DuckDB derive (s) | Spark local[2] derive (s) "
            "| Spark: rollups / run time+energy / allocation (s) |", "|---|---|---|---|---|---|---|"]
    for r in results:
        spark = r.get("spark_derive", {})
        parts = (f"{spark.get('sample_intervals', 0) + spark.get('gpu_minutes', 0):.0f} / "
                 f"{sum(spark.get(k, 0) for k in ('run_gpu_time', 'gpu_minutes_allocated', 'run_gpu_energy')):.0f} / "
                 f"{spark.get('bill_allocation_days', 0):.0f}") if spark else "-"
        rows.append(f"| {r['scale']:g} | {r['trace_rows']:,} | {r['bill_lines']:,} | "
                    f"{sum(r['embedded'].values()):.1f} | {r['duckdb_derive']['wall_s']:.1f} | "
                    f"{spark.get('wall_s', float('nan')):.1f} | {parts} |")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scales", type=float, nargs="+", default=[0.05, 0.25, 1.0])
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "mlcost" / "fleet")
    parser.add_argument("--skip-spark", action="store_true")
    parser.add_argument("--worker", choices=("duckdb", "spark"), help=argparse.SUPPRESS)
    parser.add_argument("--lake", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.lake)
        return 0
    results = []
    with tempfile.TemporaryDirectory(prefix="spark-scale-") as work:
        for scale in args.scales:
            results.append(one_scale(scale, args.cache, Path(work), not args.skip_spark))
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
