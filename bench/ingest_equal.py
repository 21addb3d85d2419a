"""Whether two checkouts load the same files to the same warehouse: every table equal.

    python bench/ingest_equal.py --old /work/main --new . [--hostile N] [--base DB] FILE...

Each file is ingested (`python -m mlcost ingest --json FILE`, its kind sniffed) into a fresh
warehouse by each checkout (PYTHONPATH=checkout), then every table of the two warehouses is
compared row for row both ways (EXCEPT ALL), rejects included; columns that say when a load
ran (loaded_at and the like) are left out. --hostile N adds N generated files of mangled runs
and serving lines (random.Random(42)): escapes, long and spelled numbers, blanks, repeated and
unknown keys, lists, maps, CRLF, a BOM, broken JSON, so the generic reader's path is compared too.
--base DB starts both warehouses from a copy of DB (e.g. one holding runs and traces, so that a
bill's allocation has runs and GPUs to allocate to) instead of an empty one; --base-new DB gives
the new side its own (e.g. DB opened once by the new checkout, when its schema.sql changed).
Prints one line per file and table that differ, and a last line: files compared, differences.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb

WHEN_COLUMNS = {"loaded_at", "merged_at", "computed_at", "updated_at", "created_at", "unloaded_at", "stamped_at",
                "options", "source_path", "path", "sha256"}  # when a load ran / where the temp copy was


def load(checkout: Path, db: Path, path: Path, config: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("MLCOST_CONFIG",)}
    env.update(PYTHONPATH=str(checkout), MLCOST_DB=str(db))
    if config:
        env["MLCOST_CONFIG"] = config
    done = subprocess.run([sys.executable, "-m", "mlcost", "ingest", "--json", str(path)], env=env,
                          capture_output=True, text=True, cwd=checkout)
    out = done.stdout
    try:
        summary = json.loads(out[out.index("["):])
        for s in summary:
            s.pop("merge_s", None)
            s.pop("path", None)
        return json.dumps(summary, sort_keys=True)
    except ValueError:
        return f"exit {done.returncode}: {done.stderr[-500:]}"


def compare(old_db: Path, new_db: Path) -> list[str]:
    con = duckdb.connect()
    con.execute(f"ATTACH '{old_db}' AS a (READ_ONLY)")
    con.execute(f"ATTACH '{new_db}' AS b (READ_ONLY)")
    problems = []
    tables = {t for (t,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = 'a'").fetchall()}
    tables_b = {t for (t,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = 'b'").fetchall()}
    if tables != tables_b:
        problems.append(f"tables differ: {sorted(tables ^ tables_b)}")
    for table in sorted((tables & tables_b) - {"schema_stamp"}):  # when the schema was made
        columns = [c for (c,) in con.execute("SELECT column_name FROM duckdb_columns() WHERE database_name = 'a' "
                                              "AND table_name = ? ORDER BY column_index", [table]).fetchall()
                   if c not in WHEN_COLUMNS]
        cols = ", ".join(f'"{c}"' for c in columns)
        rows = con.execute(f"SELECT count(*) FROM a.{table}").fetchone()[0]
        for x, y in (("a", "b"), ("b", "a")):
            n = con.execute(f"SELECT count(*) FROM (SELECT {cols} FROM {x}.{table} EXCEPT ALL SELECT {cols} FROM {y}.{table})"
                            ).fetchone()[0]
            if n:
                sample = con.execute(f"SELECT {cols} FROM {x}.{table} EXCEPT ALL SELECT {cols} FROM {y}.{table} LIMIT 2").fetchall()
                problems.append(f"{table} ({rows} rows): {n} rows only in {'old' if x == 'a' else 'new'}: {sample}"[:1500])
    return problems


# --- hostile files ------------------------------------------------------------------------------
def _mangle(rng: random.Random, record: dict) -> str:
    """One line of a record, mangled in one or two of the ways the strict and generic reads handle."""
    r = dict(record)
    keys = list(r)
    for _ in range(rng.choice((1, 1, 2))):
        how = rng.randrange(26)
        key = rng.choice(keys)
        if how == 0:
            r[key] = None
        elif how == 1:
            r.pop(key, None)
        elif how == 2:
            r[key] = str(r.get(key))
        elif how == 3:
            r[key] = " " + str(r.get(key)) + " "
        elif how == 4:
            r[key] = 1e300 if rng.random() < 0.5 else 12345678901234567890
        elif how == 5:
            r[key] = -abs(r[key]) if isinstance(r.get(key), (int, float)) else "-1"
        elif how == 6:
            r[key] = 1.5
        elif how == 7:
            r["unknown_" + key] = r.get(key)
        elif how == 8:
            r[key] = [1, 2, "x"]
        elif how == 9:
            r[key] = {"a": 1, "b": "c"}
        elif how == 10:
            r[key] = "caf\u00e9 \u2028"
        elif how == 11:
            r[key] = "2026-10-01T00:00:00+02:00"
        elif how == 12:
            r[key] = "2026-10-01 00:00:00"
        elif how == 13:
            r[key] = 1790000000
        elif how == 14:
            r[key] = True
        elif how == 15:
            r[key] = ""
        elif how == 16:
            r["tags"] = {"team": "x", "n": 3, "flag": False, "none": None}
        elif how == 17:
            r["gpu_uuids"] = ["GPU-a", "GPU-b", ""]
        elif how == 18:
            r["gpu_indices"] = [0, 1, None]
        elif how == 19:
            r["eval_history"] = [{"step": 1, "value": 0.5}, {"step": 2, "value": 0.25, "elapsed_s": 10}]
        elif how == 20:
            r["price_per_hour_usd"] = rng.choice([None, 0, "2.5", 1.1234567, 3])
        elif how == 21:
            r["instance_type"], r["gpu_type"] = rng.choice([("g5.12xlarge", None), (None, "NVIDIA A10G"),
                                                            ("unknown-x", "NVIDIA H100 80GB HBM3"), ("p4d.24xlarge", "x")])
            r.pop("price_per_hour_usd", None)
            r.pop("cost_usd", None)
        elif how == 22:
            r[key] = 0
        elif how == 23:
            r["window_seconds"] = rng.choice([120, 60.5, -1, "120"])
            r.pop("window_end", None)
        elif how == 24:
            r[key] = 3.000000000000001
        else:
            r["gpu_count"] = rng.choice([0, 2, 8, -1, 2.0])
    text = json.dumps(r)
    twist = rng.randrange(40)
    if twist == 0:
        text = text.replace(", ", ",\t", 1)
    elif twist == 1:
        text = text[:-1] + ', "' + keys[0] + '": ' + json.dumps(record.get(keys[0])) + "}"  # a repeated key
    elif twist == 2:
        text = text[: len(text) // 2]
    elif twist == 3:
        text = text[:-1] + ",}"
    elif twist == 4:
        text = json.dumps(r, ensure_ascii=False)
    elif twist == 5:
        text = "  " + text + "  "
    elif twist == 6:
        text = text.replace('"', '\\u0022', 0).replace(":", ": ", 1)
    elif twist == 7:
        text = "[" + text + "]"
    return text


def hostile_files(folder: Path, count: int) -> list[Path]:
    rng = random.Random(42)
    root = Path(__file__).resolve().parents[1]
    runs = [json.loads(line) for line in (root / "sample_data" / "runs.jsonl").read_text().splitlines() if line.strip()]
    with gzip.open(root / "sample_data" / "serving_windows.jsonl.gz", "rt") as handle:
        serving = [json.loads(line) for line in handle if line.strip()][:2000]
    out = []
    for index in range(count):
        for kind, records in (("runs", runs), ("serving", serving)):
            lines = []
            for _ in range(600):
                record = rng.choice(records)
                lines.append(json.dumps(record) if rng.random() < 0.5 else _mangle(rng, record))
                if rng.random() < 0.01:
                    lines.append(rng.choice(["", "   ", "not json", "{}", "null", "[]"]))
            end = "\r\n" if index % 3 == 1 else "\n"
            data = end.join(lines) + end
            if index % 4 == 2:
                data = "\ufeff" + data
            path = folder / f"hostile_{kind}_{index}.jsonl"
            path.write_text(data, encoding="utf-8", newline="")
            out.append(path)
    return out


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("files", nargs="*", type=Path)
    options.add_argument("--old", type=Path, default=Path("/work/main"))
    options.add_argument("--new", type=Path, default=Path(__file__).resolve().parents[1])
    options.add_argument("--hostile", type=int, default=0)
    options.add_argument("--config", help="MLCOST_CONFIG for both sides")
    options.add_argument("--base", type=Path, help="a warehouse both sides start from (copied)")
    options.add_argument("--base-new", type=Path, help="the new side's warehouse to start from (default: --base)")
    args = options.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        files = list(args.files) + hostile_files(Path(tmp), args.hostile)
        differing = 0
        for index, path in enumerate(files):
            old_db, new_db = Path(tmp) / f"old{index}.duckdb", Path(tmp) / f"new{index}.duckdb"
            if args.base:
                shutil.copy(args.base, old_db)
            if args.base or args.base_new:
                shutil.copy(args.base_new or args.base, new_db)
            old_summary = load(args.old.resolve(), old_db, path.resolve(), args.config)
            new_summary = load(args.new.resolve(), new_db, path.resolve(), args.config)
            problems = [] if old_summary == new_summary else [f"summaries differ:\n  old {old_summary[:800]}\n  new {new_summary[:800]}"]
            problems += compare(old_db, new_db) if old_db.exists() and new_db.exists() else ["no warehouse"]
            differing += bool(problems)
            rows = duckdb.connect(str(old_db), read_only=True).execute(
                "SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM serving_windows), (SELECT count(*) FROM rejects)"
            ).fetchone() if old_db.exists() else None
            print(f"{'DIFFERENT' if problems else 'same     '} {path.name}: runs, windows, rejects {rows}", flush=True)
            for problem in problems:
                print("   ", problem, flush=True)
            old_db.unlink(missing_ok=True)
            new_db.unlink(missing_ok=True)
        print(f"{len(files)} files compared, {differing} differ")


if __name__ == "__main__":
    main()
