"""Issue 12's fleet benchmark: generate the fleet dataset, then measure mlcost against baselines
in the same run and print (and write to bench/RESULTS.md) a table of figures, ratios and targets.

    python bench/fleet.py [--scale 1.0] [--cache DIR] [--results bench/RESULTS.md]

--scale 1.0 is the issue's fleet: 64 GPUs x 30 days of 10 s traces (16.6M rows in 16 files),
a 1M-line FOCUS bill, 100k runs, 500k serving windows (bench/fleet_data.py). The dataset is
generated once per scale into the cache folder (default ~/.cache/mlcost/fleet) and reused.

Measured, each in its own child process (wall seconds and peak RSS from wait4's rusage, taken by a
small launcher process of its own, so the figure is the child's own peak: see measure()):
- each kind's `python -m mlcost ingest --json` into the fleet warehouse (a fresh file; each kind
  loads into tables no earlier kind touched), against bare DuckDB reading the same files into a
  table (`read_csv(all_varchar=true)` / `read_json`) and pandas.read_csv / json.loads;
- one 4-host trace file (4.1M rows at scale 1) ingested into a fresh warehouse while another
  process reads the warehouse every 0.1 s: how long that page read waits;
- the Idle GPUs page's query (per-minute rollups) against the naive window query over raw samples;
- every page cold and warm under AppTest, with the points of its largest chart.
Ratios matter, not seconds: the machine is shared and noisy.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))

import fleet_data  # noqa: E402  (a sibling module; bench/ is not a package)
from ingest.engine.wh_connection import READER_BACKOFF_S  # noqa: E402

WORKERS = BENCH_DIR / "fleet_workers.py"
STARTED = time.perf_counter()
# kind: (dataset entry, bare DuckDB reader, plain-Python baseline)
KINDS = {
    "bill": ("bill", "csv", "pandas"),
    "serving": ("serving", "json", "json"),
    "runs": ("runs", "json", "json"),
    "traces": ("traces", "csv", "pandas"),
}
LOAD_ORDER = ("runs", "serving", "bill", "traces")  # runs first: trace loads attribute energy to them
LABELS = {"bill": "FOCUS bill", "serving": "serving windows (JSONL)", "runs": "runs (JSONL)",
          "traces": "trace rows (16 files)", "trace_big": "one 4-host trace file"}
THROUGHPUT_TARGET = 0.5  # issue 23: >= 0.5x bare DuckDB, and never slower than pandas/json
RSS_TARGET_MB = 1024
WARM_TARGET_S, COLD_TARGET_S, RETRO_COLD_TARGET_S = 0.5, 2.0, 5.0
POINTS_TARGET = 5000
IDLE_SPEEDUP_TARGET = 5.0


def say(message: str) -> None:
    """A progress line on stdout, stamped with the seconds since the start."""
    print(f"[{time.perf_counter() - STARTED:6.1f} s] {message}", flush=True)


@dataclass
class Measured:
    """One child process: wall seconds, CPU seconds (user + system, its own and its children's),
    peak RSS (MB), exit code and its output."""

    wall_s: float
    cpu_s: float
    peak_rss_mb: float
    returncode: int
    stdout: str
    stderr: str

    def last_json(self):
        lines = [line for line in self.stdout.splitlines() if line.strip()]
        if not lines:
            raise RuntimeError(f"no output; stderr: {self.stderr[-2000:]}")
        return json.loads(lines[-1]) if lines[-1].lstrip().startswith("{") else json.loads(self.stdout)


def figures(run: Measured) -> str:
    """A child's figures for a progress line."""
    return f"{run.wall_s:.1f} s wall, {run.cpu_s:.1f} s CPU, peak RSS {run.peak_rss_mb:,.0f} MB, exit {run.returncode}"


def child_env(db: Path | None = None) -> dict:
    env = {key: value for key, value in os.environ.items() if key != "MLCOST_CONFIG"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env["MLCOST_LOCK_WAIT_S"] = "3600"
    if db is not None:
        env["MLCOST_DB"] = str(db)
    return env


# The child is started by a small launcher of its own (a fresh interpreter without site
# packages), which waits for it and writes its rusage. A child started by this process directly
# would report this process's peak as its own: Linux keeps the high-water RSS of the process
# image an exec replaces (ru_maxrss of a forked or vforked child starts at its parent's peak),
# and this process may have generated the dataset. The launcher's own peak (~10 MB) is the floor.
LAUNCHER = """
import json, os, subprocess, sys, time
out = sys.argv[1]
began = time.perf_counter()
child = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(child.pid, 0)
wall_s = time.perf_counter() - began
with open(out, "w") as handle:
    json.dump({"wall_s": wall_s, "cpu_s": usage.ru_utime + usage.ru_stime, "maxrss_kib": usage.ru_maxrss,
               "returncode": os.waitstatus_to_exitcode(status)}, handle)
"""


def measure(command: list[str], env: dict, cwd: Path) -> Measured:
    """Run one child to its end through LAUNCHER: its wall and CPU seconds and its own peak RSS
    (wait4's ru_maxrss of that child, KiB on Linux), whatever this process's own peak."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err, \
            tempfile.TemporaryDirectory(prefix="mlcost-measure-") as spool:
        usage_file = Path(spool) / "usage.json"
        launcher = subprocess.run([sys.executable, "-I", "-S", "-c", LAUNCHER, str(usage_file), *command],
                                  stdout=out, stderr=err, env=env, cwd=cwd)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
        if launcher.returncode != 0 or not usage_file.exists():
            raise RuntimeError(f"the launcher of {command[:3]} failed: {stderr[-2000:]}")
        usage = json.loads(usage_file.read_text())
        return Measured(usage["wall_s"], usage["cpu_s"], usage["maxrss_kib"] / 1024, usage["returncode"],
                        stdout, stderr)


def compile_project() -> None:
    """Compile the project's modules to bytecode once, as `pip install` does for a user: this
    machine sets PYTHONDONTWRITEBYTECODE=1, so without it every child would compile ~100 modules
    again (0.1-0.25 s of each ingest's CPU that a user's installed copy never spends)."""
    import compileall
    for package in ("app", "ingest", "metrics", "mlcost", "outputs", "present"):
        compileall.compile_dir(REPO_ROOT / package, quiet=1)


def dataset(cache: Path, scale: float) -> tuple[Path, dict]:
    """The dataset folder of this scale and its manifest, generated when absent or outdated."""
    folder = cache / f"scale-{scale:g}"
    manifest_path = folder / "manifest.json"
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
        if manifest.get("generator_version") == fleet_data.GENERATOR_VERSION:
            say(f"dataset: reusing {folder}")
            return folder, manifest
    say(f"dataset: generating scale {scale:g} into {folder} ...")
    began = time.perf_counter()
    manifest = fleet_data.generate(folder, scale)
    manifest_path.write_text(json.dumps(manifest, indent=1))  # written last: a partial set is redone
    say(f"dataset: generated in {time.perf_counter() - began:.1f} s")
    return folder, manifest


def files_of(folder: Path, entry: dict) -> list[str]:
    target = folder / entry["path"]
    return sorted(str(p) for p in target.glob("*.csv")) if target.is_dir() else [str(target)]


def ingest_summary(run: Measured, expected_rows: int) -> dict:
    """Rows loaded and rejected from the --json summaries, and whether every row loaded."""
    try:
        summaries = json.loads(run.stdout)
    except json.JSONDecodeError:
        return {"rows_loaded": 0, "rows_rejected": 0, "ok": False, "merge_s": None,
                "error": (run.stderr or run.stdout)[-500:]}
    loaded = sum(s.get("rows_loaded", 0) for s in summaries)
    rejected = sum(s.get("rows_rejected", 0) for s in summaries)
    merges = [s["merge_s"] for s in summaries if isinstance(s.get("merge_s"), (int, float))]
    return {"rows_loaded": loaded, "rows_rejected": rejected, "merge_s": max(merges) if merges else None,
            "ok": loaded == expected_rows and rejected == 0 and all(s.get("status") == "loaded" for s in summaries),
            "error": None}


def measure_kind(name: str, files: list[str], rows: int, fmt: str, baseline: str, db: Path,
                 work: Path) -> dict:
    """mlcost ingest of `files` into `db`, bare DuckDB and the plain baseline on the same files."""
    say(f"{LABELS[name]}: {rows:,} rows: mlcost ingest ...")
    ingest = measure([sys.executable, "-m", "mlcost", "ingest", "--json", *files], child_env(db), work)
    say(f"{LABELS[name]}: mlcost ingest: {figures(ingest)}")
    result = {"kind": name, "rows": rows, "ingest": ingest, **ingest_summary(ingest, rows)}
    result.update(compare(name, files, fmt, baseline, work))
    return result


def compare(name: str, files: list[str], fmt: str, baseline: str, work: Path) -> dict:
    say(f"{LABELS[name]}: bare DuckDB, {baseline} ...")
    bare_db = work / f"bare_{name}.duckdb"
    bare = measure([sys.executable, str(WORKERS), "duckdb", fmt, str(bare_db), *files], child_env(), work)
    bare_db.unlink(missing_ok=True)
    say(f"{LABELS[name]}: bare DuckDB: {figures(bare)}")
    plain = measure([sys.executable, str(WORKERS), baseline, *files], child_env(), work)
    say(f"{LABELS[name]}: {baseline}: {figures(plain)}")
    for run, label in ((bare, "bare DuckDB"), (plain, baseline)):
        if run.returncode != 0:
            raise RuntimeError(f"{label} on {name} failed: {run.stderr[-2000:]}")
    return {"bare": bare, "plain": plain, "plain_label": "pandas.read_csv" if baseline == "pandas" else "json.loads"}


def measure_big_file(folder: Path, entry: dict, work: Path) -> dict:
    """The 4-host trace file into a fresh warehouse while a reader process reads it every 0.1 s."""
    db, stop = work / "big.duckdb", work / "big.stop"
    files = files_of(folder, entry)
    reader = subprocess.Popen([sys.executable, str(WORKERS), "reader", str(db), str(stop)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=child_env(db), cwd=work)
    first = reader.stdout.readline().strip()
    if first != "ready":
        reader.kill()
        raise RuntimeError(f"the reader did not start: {first} {reader.stderr.read()[-2000:]}")
    say(f"{LABELS['trace_big']}: {entry['rows']:,} rows: mlcost ingest with a reader ...")
    try:
        ingest = measure([sys.executable, "-m", "mlcost", "ingest", "--json", *files], child_env(db), work)
    finally:
        stop.touch()
        out, err = reader.communicate(timeout=600)
    say(f"{LABELS['trace_big']}: mlcost ingest: {figures(ingest)}; reader: {out.strip()[-300:]}")
    if reader.returncode != 0:
        raise RuntimeError(f"the reader failed: {err[-2000:]}")
    result = {"kind": "trace_big", "rows": entry["rows"], "ingest": ingest,
              **ingest_summary(ingest, entry["rows"]), "reader": json.loads(out.strip().splitlines()[-1])}
    result.update(compare("trace_big", files, "csv", "pandas", work))
    db.unlink(missing_ok=True)
    return result


def run_worker(mode: str, *args: str, work: Path) -> dict:
    run = measure([sys.executable, str(WORKERS), mode, *args], child_env(), work)
    if run.returncode != 0:
        raise RuntimeError(f"{mode} failed: {run.stderr[-3000:]}")
    return run.last_json()


# --- the report ---------------------------------------------------------------------------------

def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else "met" if ok else "**not met**"


def ingest_table(results: list[dict]) -> list[str]:
    lines = ["| file | rows | mlcost ingest | bare DuckDB | pandas/json | throughput vs DuckDB "
             f"(target ≥ {THROUGHPUT_TARGET}×) | not slower than pandas/json | mlcost peak RSS (target ≤ 1 GB: bill, 4-host file) "
             "| DuckDB RSS | pandas/json RSS | loaded / rejected |",
             "|---|---:|---:|---:|---:|---|---|---|---:|---:|---|"]
    for r in results:
        ingest, bare, plain = r["ingest"], r["bare"], r["plain"]
        ratio = bare.wall_s / ingest.wall_s
        rss = ingest.peak_rss_mb
        rss_cell = f"{rss:,.0f} MB"
        if r["kind"] in ("bill", "trace_big"):
            rss_cell += f" {verdict(rss <= RSS_TARGET_MB)}"
        loaded = f"{r['rows_loaded']:,} / {r['rows_rejected']:,}" + ("" if r["ok"] else " **(not all loaded)**")
        cpu_ratio = bare.cpu_s / ingest.cpu_s if ingest.cpu_s else float("nan")
        merge = f"; longest merge {r['merge_s']:.1f} s" if r.get("merge_s") is not None else ""
        lines.append(
            f"| {LABELS[r['kind']]} | {r['rows']:,} | {ingest.wall_s:.1f} s ({r['rows'] / ingest.wall_s:,.0f} rows/s; "
            f"{ingest.cpu_s:.1f} s CPU{merge}) | {bare.wall_s:.2f} s ({bare.cpu_s:.1f} s CPU) "
            f"| {plain.wall_s:.2f} s ({r['plain_label']}) | {ratio:.3f}× {verdict(ratio >= THROUGHPUT_TARGET)} "
            f"(by CPU seconds {cpu_ratio:.3f}×) | {plain.wall_s / ingest.wall_s:.2f}× of its speed "
            f"{verdict(ingest.wall_s <= plain.wall_s)} | {rss_cell} | {bare.peak_rss_mb:,.0f} MB | {plain.peak_rss_mb:,.0f} MB | {loaded} |")
    return lines


def page_table(pages: dict) -> list[str]:
    lines = [f"Pages on the fleet warehouse (timed by `{pages['source']}`):", "",
             f"| page | cold (target ≤ {COLD_TARGET_S:g} s; Retrospective ≤ {RETRO_COLD_TARGET_S:g} s) "
             f"| warm (target ≤ {WARM_TARGET_S:g} s) | points in its largest chart (target ≤ {POINTS_TARGET:,}) |",
             "|---|---|---|---|"]
    for page, cold_s, warm_s, points, error in pages["pages"]:
        cold_target = RETRO_COLD_TARGET_S if page == "Retrospective" else COLD_TARGET_S
        # a page that raised drew nothing: its seconds and points are no figures of the page
        failed = f" (the page raised: {' '.join(error.split())[:200]})" if error else ""
        lines.append(f"| {page} | {cold_s:.2f} s {verdict(cold_s <= cold_target and not error)}{failed} "
                     f"| {warm_s:.2f} s {verdict(warm_s <= WARM_TARGET_S and not error)} "
                     f"| {points:,} {verdict(points <= POINTS_TARGET and not error)} |")
    return lines


def other_table(big: dict, idle: dict) -> list[str]:
    reader = big["reader"]
    ingest_s = big["ingest"].wall_s
    merge_s = big["merge_s"]
    wait_ok = None if merge_s is None else reader["max_wait_s"] <= merge_s + READER_BACKOFF_S  # + one backoff step
    merge_note = (f"merge {merge_s:.2f} s (from the ingest summary)" if merge_s is not None
                  else "the ingest reports no merge time")
    speedup = idle["naive_query_s"] / idle["idle_query_s"]
    slowest = reader.get("slow_reads_s", [])
    slow_list = f" ({', '.join(f'{wait:.2f}' for wait in slowest)} s)" if slowest else ""
    return [
        "| figure | value | target |", "|---|---|---|",
        f"| Idle GPUs query (rollups) vs naive window query over raw samples | {idle['idle_query_s']:.3f} s vs "
        f"{idle['naive_query_s']:.3f} s: **{speedup:.1f}×** faster (idle GPU-hours {idle['idle_h_rollups']:,.1f} vs "
        f"{idle['idle_h_naive']:,.1f}) | ≥ {IDLE_SPEEDUP_TARGET:g}× {verdict(speedup >= IDLE_SPEEDUP_TARGET)} |",
        f"| a page read while the 4-host file ({big['rows']:,} rows) is ingested | longest wait "
        f"**{reader['max_wait_s']:.2f} s** during a {ingest_s:.1f} s ingest ({reader['max_wait_s'] / ingest_s:.0%} "
        f"of it); {reader['reads']} reads waited {reader['total_wait_s']:.1f} s in all, "
        f"{reader.get('slow_reads', 0)} of them over 0.5 s{slow_list}; an unlocked read "
        f"takes {reader['unlocked_read_s']:.3f} s; {merge_note} | ≤ the merge (+ {READER_BACKOFF_S:g} s, the reader's "
        f"longest backoff step) {verdict(wait_ok)} |",
    ]


def machine() -> str:
    memory_kb = next((int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                      if line.startswith("MemTotal")), 0) if Path("/proc/meminfo").exists() else 0
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    import duckdb
    import pandas

    return (f"{os.cpu_count()} CPUs ({model}), {memory_kb / 1024 ** 2:.1f} GiB memory, {platform.system()} "
            f"{platform.release()}; Python {platform.python_version()}, duckdb {duckdb.__version__}, "
            f"pandas {pandas.__version__}")


def commit() -> str:
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    # changes to what is measured, not to the docs or to this file's own output
    changed = git("status", "--porcelain", "--untracked-files=no", "--", "ingest", "app", "mlcost", "bench",
                  ":!bench/RESULTS.md")
    return head + (" (with uncommitted changes)" if changed else "")


def report(scale: float, manifest: dict, results: list[dict], big: dict, idle: dict, pages: dict,
           total_s: float) -> str:
    files = manifest["files"]
    sizes = ", ".join(f"{LABELS[k]} {v['rows']:,} rows in {v['files']} file(s), {v['bytes'] / 1e6:,.0f} MB"
                      for k, v in files.items())
    return "\n".join([
        "# Fleet benchmark (bench/fleet.py)", "",
        f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; commit {commit()}",
        f"- machine: {machine()}",
        f"- command: `python bench/fleet.py --scale {scale:g}` ({total_s / 60:.1f} min in all)",
        f"- dataset (scale {scale:g}; 1.0 = 64 GPUs × 30 days, 1M bill lines, 100k runs, 500k windows): {sizes}",
        "- each figure comes from its own child process; seconds are wall time including Python's start, "
        "RSS is the child's own peak (wait4, in a launcher of its own). Throughput vs DuckDB = bare DuckDB seconds / mlcost seconds on "
        "the same files (wall, the target; CPU seconds, user + system from wait4, beside it: less noisy on a "
        "shared machine, but bare DuckDB reads on every core, so wall is what a user waits). The 4-host file's ingest ran with a reader polling the warehouse.", "",
        "## Ingest", "", *ingest_table(results + [big]), "",
        "## Queries and locking", "", *other_table(big, idle), "",
        "## Pages", "", *page_table(pages), "",
    ])


NOTES_MARK = "<!-- bench/fleet.py rewrites everything above this line and keeps everything below it. -->"


def kept_notes(results: Path) -> str:
    """The team's notes below NOTES_MARK in an existing results file ("" when none): a run keeps them."""
    old = results.read_text() if results.exists() else ""
    return "\n" + old[old.index(NOTES_MARK):] if NOTES_MARK in old else ""


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--scale", type=float, default=1.0, help="1.0 = the issue's fleet (default)")
    options.add_argument("--cache", type=Path,
                         default=Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mlcost" / "fleet",
                         help="folder the generated datasets are kept in and reused from")
    options.add_argument("--results", type=Path, default=BENCH_DIR / "RESULTS.md", help="where the table is written")
    options.add_argument("--repeats", type=int, default=3, help="runs of each query; the best counts")
    options.add_argument("--keep", type=Path, default=None,
                         help="a folder to work in and keep (the fleet warehouse stays there for profiling)")
    args = options.parse_args()
    if args.scale <= 0:
        options.error("--scale must be above 0")
    if args.keep is not None and any((args.keep / name).exists() for name in ("fleet.duckdb", "big.duckdb")):
        # its files would be loaded already: every ingest a no-op, every figure wrong
        options.error(f"--keep {args.keep} already holds a warehouse of an earlier run; give an empty folder")
    began = time.perf_counter()
    compile_project()
    folder, manifest = dataset(args.cache.expanduser(), args.scale)
    entries = manifest["files"]
    with tempfile.TemporaryDirectory(prefix="mlcost-fleet-") as scratch:
        work = Path(scratch) if args.keep is None else args.keep
        work.mkdir(parents=True, exist_ok=True)
        fleet_db = work / "fleet.duckdb"
        (work / "mlcost.toml").write_text(fleet_data.settings_toml(args.scale))  # children run in work/
        results = []
        for name in LOAD_ORDER:
            entry_name, fmt, baseline = KINDS[name]
            entry = entries[entry_name]
            results.append(measure_kind(name, files_of(folder, entry), entry["rows"], fmt, baseline,
                                        fleet_db, work))
        big = measure_big_file(folder, entries["trace_big"], work)
        say("idle query vs naive window query ...")
        idle = run_worker("queries", str(fleet_db), str(args.repeats), work=work)
        say("pages cold and warm ...")
        pages = run_worker("pages", str(fleet_db), work=work)
    order = ("bill", "serving", "runs", "traces")
    results.sort(key=lambda r: order.index(r["kind"]))
    text = report(args.scale, manifest, results, big, idle, pages, time.perf_counter() - began)
    print()
    print(text)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(text + kept_notes(args.results))
    print(f"written to {args.results}")


if __name__ == "__main__":
    main()
