"""Trace loads by two checkouts compared table by table (issue 23: a speed change keeps every row).

    python bench/compare_trace_tables.py --old /work/main [--new .] [--work DIR] [--case NAME ...]

Each case loads the same trace files with `python -m mlcost ingest` twice, once with
PYTHONPATH=OLD and once with PYTHONPATH=NEW, each into its own copy of the same starting
warehouse (the fleet's runs, serving windows and bill loaded first by OLD, so run energy and the
allocation of the bill have work to do), then compares every table of the two warehouses with
EXCEPT ALL both ways. Columns that hold the time of the load (loaded_at, computed_at, ...) and
schema_stamp's digest of schema.sql are left out. Where rows differ and the table has DOUBLE columns, the rows are paired by their place in
the order of every column and compared again with each DOUBLE within 1e-12 relative of the other
side's (a sum may be added up in another order): such a table is reported as "equal within 1e-12 relative", with its column names.

Cases: fleet-0.05, fleet4-0.05, fleet-0.25, fleet4-0.25 (16 trace files in one ingest, or the
4-host file, from ~/.cache/mlcost/fleet/scale-S), sample (sample_data's runs, then its GPU traces
in one ingest), real (every trace file in ../shared/formats/nvidia_gpu, one ingest), messy (a
collector file with bad, repeated, reset and out-of-order lines, then a second file overlapping it).
--work DIR keeps the warehouses and the fleet bases there (a later run given the same DIR reuses the
bases); without it each run works in a new temporary folder, so two runs side by side never share one.
"""
from __future__ import annotations

import argparse
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FLEET = Path.home() / ".cache" / "mlcost" / "fleet"
SHARED = REPO.parent / "shared" / "formats" / "nvidia_gpu"  # ../shared beside the checkout, as the tests read it
TIME_COLUMNS = {"loaded_at", "computed_at", "unloaded_at", "applied_at", "created_at", "updated_at"}
# schema_stamp.sha256 is schema.sql's digest: it differs whenever a checkout changed schema.sql
SKIPPED = {("schema_stamp", "sha256")}


def ingest(checkout: Path, db: Path, files: list[Path], cwd: Path) -> float:
    env = dict(os.environ, PYTHONPATH=str(checkout), MLCOST_DB=str(db))
    began = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "mlcost", "ingest", "--json", *map(str, files)],
                         env=env, cwd=cwd, capture_output=True, text=True)
    if run.returncode not in (0, 1):
        raise RuntimeError(f"{checkout}: ingest failed ({run.returncode}): {run.stderr[-2000:]}")
    return time.perf_counter() - began


def tables(con, db: str) -> list[str]:
    return [name for (name,) in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = ? AND NOT temporary ORDER BY table_name",
        [db]).fetchall()]


def compare(old_db: Path, new_db: Path) -> list[str]:
    import duckdb

    con = duckdb.connect()
    con.execute(f"ATTACH '{old_db}' AS a (READ_ONLY)")
    con.execute(f"ATTACH '{new_db}' AS b (READ_ONLY)")
    lines = []
    names_a, names_b = tables(con, "a"), tables(con, "b")
    if names_a != names_b:
        lines.append(f"  tables differ: {sorted(set(names_a) ^ set(names_b))}")
    for table in names_a:
        if table not in names_b:
            continue
        columns = con.execute("SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = 'a' "
                              "AND table_name = ? ORDER BY column_index", [table]).fetchall()
        kept = [(name, kind) for name, kind in columns if name not in TIME_COLUMNS and (table, name) not in SKIPPED]
        listed = ", ".join(f'"{name}"' for name, _ in kept) or "count(*)"  # nothing left: the row counts
        rows = con.execute(f"SELECT count(*) FROM a.{table}").fetchone()[0]
        rows_b = con.execute(f"SELECT count(*) FROM b.{table}").fetchone()[0]

        def differ(select: str) -> tuple[int, int]:
            only_a = con.execute(f"SELECT count(*) FROM ({select.format(db='a')} EXCEPT ALL {select.format(db='b')})").fetchone()[0]
            only_b = con.execute(f"SELECT count(*) FROM ({select.format(db='b')} EXCEPT ALL {select.format(db='a')})").fetchone()[0]
            return only_a, only_b

        only_a, only_b = differ(f"SELECT {listed} FROM {{db}}.{table}")
        if only_a == only_b == 0:
            lines.append(f"  {table}: {rows:,} rows equal")
            continue
        doubles = [name for name, kind in kept if kind == "DOUBLE"]
        if doubles and rows == rows_b:
            # rows paired by their place in the order of every column; DOUBLEs within 1e-12 relative
            # (rounding both sides to 12 digits fails a 1e-15 difference that meets a rounding edge)
            numbered = (f"SELECT row_number() OVER (ORDER BY {listed}) AS _row, {listed} FROM {{db}}.{table}")
            same = " AND ".join(
                f'(x."{n}" IS NOT DISTINCT FROM y."{n}" OR abs(x."{n}" - y."{n}") '
                f'<= 1e-12 * greatest(abs(x."{n}"), abs(y."{n}")))' if kind == "DOUBLE"
                else f'x."{n}" IS NOT DISTINCT FROM y."{n}"' for n, kind in kept)
            apart = con.execute(f"SELECT count(*) FROM ({numbered.format(db='a')}) x "
                                f"JOIN ({numbered.format(db='b')}) y USING (_row) WHERE NOT ({same})").fetchone()[0]
            if apart == 0:
                lines.append(f"  {table}: {rows:,} rows equal within 1e-12 relative in DOUBLE columns "
                             f"({only_a} rows differ exactly; columns {', '.join(doubles)})")
                continue
        lines.append(f"  {table}: DIFFERENT: {rows:,} old rows, {rows_b:,} new; {only_a} only in old, {only_b} only in new")
    con.close()
    return lines


def fleet_base(work: Path, old: Path, scale: str) -> Path:
    """A warehouse with the fleet's runs, serving windows and bill (loaded by OLD), kept in work/."""
    base = work / f"base-{scale}.duckdb"
    if base.exists():
        return base
    folder = FLEET / f"scale-{scale}"
    sys.path.insert(0, str(REPO / "bench"))
    import fleet_data

    (work / "mlcost.toml").write_text(fleet_data.settings_toml(float(scale)))
    for name in ("runs.jsonl", "serving.jsonl", "focus_2026-10.csv"):
        ingest(old, base, [folder / name], work)
    return base


def messy_files(work: Path) -> list[list[Path]]:
    """Two collector files: the first with bad lines of every kind, repeats, a counter reset, a
    hole, lines out of order; the second overlapping the first's last hour (the stored samples
    around it are read back)."""
    header = "timestamp,host,gpu_index,gpu_uuid,gpu_name,power_w,energy_mj,gpu_util_pct,mem_used_mib"
    uuid = ["GPU-aaaaaaaa-0000-0000-0000-000000000000", "GPU-bbbbbbbb-0000-0000-0000-000000000000"]
    rows, energy = [], [10_000_000, 20_000_000]
    for step in range(2000):
        second = step * 10 + (3600 if step > 1500 else 0)  # a hole of an hour
        stamp = f"2026-10-01T{second // 3600 % 24:02d}:{second // 60 % 60:02d}:{second % 60:02d}Z"
        day = 1 + second // 86400
        stamp = f"2026-10-{day:02d}" + stamp[10:]
        for gpu in (0, 1):
            energy[gpu] += 3000 * (1 + gpu) if step != 700 else -energy[gpu] + 5  # a reset at 700
            util = 2 if 300 <= step < 420 else 80 - gpu
            power = 60.5 if util < 5 else 300.25 + gpu
            rows.append(f"{stamp},messy-node,{gpu},{uuid[gpu]},NVIDIA A100,{power},{energy[gpu]},{util},{1000 + step}")
    bad = ['2026-10-01T00:00:05Z,messy-node,0,x,y,abc,1,2,3', '"2026-10-01T00:00:06Z",messy-node,1,x,y,1,1,2,3',
           "2026-10-01T00:00:07Z,messy-node,0,x", "", "   ", "2026-10-01T00:00:08Z,messy-node,0,x,y,1e3,1,101,3",
           "2026-10-01 00:00:09,messy-node,0,x,y, 12 ,1,2,3", "1790000000,messy-node,1,x,y,1,,2,3",
           ",messy-node,0,x,y,1,1,2,3", "2026-10-01T00:00:10Z,,0,x,y,1,1,2,3", "2026-10-01T00:00:11Z,messy-node,70000,x,y,1,1,2,3"]
    lines = rows[:500] + bad + rows[500:900] + rows[880:900] + rows[1200:1100:-1] + rows[900:1100] + rows[1200:]
    first = work / "messy-node_a.csv"
    first.write_text("\n".join([header, *lines]) + "\n")
    second = work / "messy-node_b.csv.gz"
    with gzip.open(second, "wt") as out:
        out.write("\n".join([header, *(r.replace(",300.", ",310.") for r in rows[3500:])]) + "\n")
    return [[first], [second]]


def cases(work: Path, old: Path) -> dict:
    """name -> (base warehouse or None, [files of one ingest, ...])."""
    found = {}
    for scale in ("0.05", "0.25"):
        folder = FLEET / f"scale-{scale}"
        if folder.exists():
            found[f"fleet-{scale}"] = (lambda s=scale: fleet_base(work, old, s),
                                       [sorted((folder / "traces").glob("*.csv"))])
            found[f"fleet4-{scale}"] = (lambda s=scale: fleet_base(work, old, s), [[folder / "trace_4hosts.csv"]])

    def sample_base() -> Path:
        base = work / "base-sample.duckdb"
        if not base.exists():
            ingest(old, base, [REPO / "sample_data" / "runs.jsonl"], work)
        return base

    found["sample"] = (sample_base, [sorted((REPO / "sample_data" / "gpu_traces").glob("*.csv.gz"))])
    found["real"] = (None, [sorted(SHARED.glob("*"))])
    found["messy"] = (sample_base, messy_files(work))
    return found


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--old", type=Path, required=True)
    options.add_argument("--new", type=Path, default=REPO)
    options.add_argument("--work", type=Path, default=None,
                         help="where warehouses and fleet bases are kept (reused by the next run given it); "
                              "default: a new temporary folder, so that runs side by side never share one")
    options.add_argument("--case", action="append", help="only these cases (default: all)")
    args = options.parse_args()
    if args.work is None:
        args.work = Path(tempfile.mkdtemp(prefix="compare-trace-tables-"))
    args.work.mkdir(parents=True, exist_ok=True)
    print(f"warehouses in {args.work}", flush=True)
    found = cases(args.work, args.old)
    failed = False
    for name, (base, loads) in found.items():
        if args.case and name not in args.case:
            continue
        start = base() if base else None
        seconds = {}
        dbs = {}
        for side, checkout in (("old", args.old), ("new", args.new)):
            db = args.work / f"{name}-{side}.duckdb"
            for stale in (db, Path(str(db) + ".wal")):
                stale.unlink(missing_ok=True)
            if start is not None:
                shutil.copy(start, db)
            seconds[side] = sum(ingest(checkout, db, files, args.work) for files in loads)
            dbs[side] = db
        result = compare(dbs["old"], dbs["new"])
        failed |= any("DIFFERENT" in line or "tables differ" in line for line in result)
        print(f"{name}: {sum(map(len, loads))} file(s) in {len(loads)} ingest(s); "
              f"old {seconds['old']:.1f} s, new {seconds['new']:.1f} s wall", flush=True)
        print("\n".join(result), flush=True)
    print("RESULT:", "DIFFERENT" if failed else "every table equal")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
