"""The warehouse as an open lake (ingest/lake/, docs/lake.md): loads from several processes at
once, a load killed mid-write, loads repeated, and every page and table read from a lake (a
folder, and S3 through moto_server) giving the figures of the embedded DuckDB file.

Row counts are checked against plain Python over the input files (lines, run ids), never
against the program's own output; the pages' figures against the embedded warehouse's.
"""
from __future__ import annotations

import gzip
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import duckdb
import pytest

from tests.conftest import REPO_ROOT, SAMPLE_DIR
from tests.lake_fixtures import SETTINGS, lake_of, mlcost, moto_s3, new_bucket, sample_pair  # noqa: F401  (fixtures)

TRACES = sorted((SAMPLE_DIR / "gpu_traces").glob("*.csv.gz"))
PAGES = sorted(p.name for p in (REPO_ROOT / "app" / "app_pages").glob("*.py") if p.name != "__init__.py")


# --- independent figures: plain Python over the input files ----------------------------------

def run_ids(path: Path) -> list[str]:
    return [json.loads(line)["run_id"] for line in path.read_text().splitlines() if line.strip()]


def trace_rows(path: Path) -> Counter:
    """Samples per host in a gpu-collector CSV (every line after the header is one sample)."""
    with gzip.open(path, "rt") as source:
        next(source)
        return Counter(line.split(",")[1] for line in source if line.strip())


def split_runs(folder: Path, parts: int) -> list[Path]:
    """sample_data/runs.jsonl dealt into `parts` files of disjoint runs."""
    lines = [line for line in (SAMPLE_DIR / "runs.jsonl").read_text().splitlines() if line.strip()]
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for part in range(parts):
        path = folder / f"runs-part{part}.jsonl"
        path.write_text("\n".join(lines[part::parts]) + "\n")
        files.append(path)
    return files


# --- reading a lake as the program's readers do, and raw -------------------------------------

def lake_env(kind: str, tmp_path: Path, moto: dict | None) -> tuple[str, dict]:
    if kind == "folder":
        return str(tmp_path / "lake"), {}
    return new_bucket(moto), dict(moto)


def ledger(url: str, env: dict) -> dict[int, dict]:
    """Every committed ledger entry, read with fsspec directly (not through mlcost's reader)."""
    fs, root = _fs(url, env)
    if not fs.exists(f"{root}/_ledger"):
        return {}
    return {int(Path(name).stem): json.loads(fs.cat_file(name)) for name in fs.find(f"{root}/_ledger")
            if name.endswith(".json")}


def data_files(url: str, env: dict) -> list[str]:
    fs, root = _fs(url, env)
    return [name[len(root) + 1:] for name in fs.find(f"{root}/tables")] if fs.exists(f"{root}/tables") else []


def raw_rows(url: str, env: dict, table: str, columns: str) -> list[tuple]:
    """`columns` of every row in the files the committed ledger entries list for `table`."""
    fs, root = _fs(url, env)
    con = duckdb.connect()
    if url.startswith("s3://"):
        con.register_filesystem(fs)
    files = [(f"s3://{root}/{f}" if url.startswith("s3://") else f"{root}/{f}")
             for entry in ledger(url, env).values() for f in entry["files"].get(table, [])]
    if not files:
        return []
    return con.execute(f"SELECT {columns} FROM read_parquet({files!r})").fetchall()


def _fs(url: str, env: dict):
    if url.startswith("s3://"):
        import s3fs

        return (s3fs.S3FileSystem(endpoint_url=env["AWS_ENDPOINT_URL_S3"], key="testing", secret="testing",
                                  use_listings_cache=False, skip_instance_cache=True), url.removeprefix("s3://"))
    from ingest.lake.store import LocalFiles

    class Local(LocalFiles):
        def cat_file(self, path: str) -> bytes:
            return Path(path).read_bytes()

    return Local(), url


def read_through_mlcost(url: str, env: dict, tmp_path: Path, sql: str) -> list[tuple]:
    """A query on the warehouse as the dashboard opens it over the lake (child process: a clean environment)."""
    code = ("import json, sys; from ingest.engine import warehouse\n"
            "with warehouse.read() as con: print(json.dumps(con.execute(sys.argv[1]).fetchall(), default=str))")
    done = subprocess.run([sys.executable, "-c", code, sql], cwd=REPO_ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **env, "MLCOST_LAKE": url,
                               "MLCOST_DB": str(tmp_path / "local.duckdb")}, timeout=120)
    assert done.returncode == 0, done.stderr
    return [tuple(row) for row in json.loads(done.stdout)]


# --- writers at once ---------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["folder", "s3"])
def test_four_processes_loading_disjoint_files_at_once_leave_every_row_once(kind, tmp_path, request):
    moto = request.getfixturevalue("moto_s3") if kind == "s3" else None
    url, env = lake_env(kind, tmp_path, moto)
    runs = split_runs(tmp_path / "in", 4)
    traces = TRACES[:4]
    children = [subprocess.Popen([sys.executable, "-m", "mlcost", "load", "--lake", url, "--json", str(runs[i]),
                                  str(traces[i])], cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **env})
                for i in range(4)]
    for child in children:
        out, err = child.communicate(timeout=600)
        assert child.returncode == 0, out + err
        assert [s["status"] for s in json.loads(out)] == ["loaded", "loaded"]

    expected_runs = sorted(run for path in runs for run in run_ids(path))
    expected_samples = sum((trace_rows(path) for path in traces), Counter())
    assert len(ledger(url, env)) == 8
    # every row once in the committed files themselves (no reader's deduplication hiding a double)
    assert sorted(r for (r,) in raw_rows(url, env, "runs", "run_id")) == expected_runs
    samples = raw_rows(url, env, "gpu_samples", "host, gpu_index, sampled_at")
    assert len(samples) == len(set(samples)) == sum(expected_samples.values())
    assert Counter(host for host, _, _ in samples) == expected_samples
    # and as the warehouse reads the lake
    seen = read_through_mlcost(url, env, tmp_path, "SELECT (SELECT count(*) FROM runs), "
                                                    "(SELECT count(DISTINCT run_id) FROM runs), "
                                                    "(SELECT count(*) FROM gpu_samples), (SELECT count(*) FROM loads)")
    assert seen == [(len(expected_runs), len(expected_runs), sum(expected_samples.values()), 8)]


# --- a load killed between its data files and its ledger entry ------------------------------

KILLED_LOAD = """
import os, sys, time
from pathlib import Path
from ingest.pipeline import lake_load as writer
def stop_here(load_id):
    Path(sys.argv[3]).write_text(str(load_id))
    time.sleep(600)
list(writer.load_files(sys.argv[1], [Path(sys.argv[2])], after_commit=stop_here))
"""


@pytest.mark.parametrize("kind", ["folder", "s3"])
def test_a_load_killed_before_its_ledger_entry_is_never_seen_and_is_vacuumed(kind, tmp_path, request):
    moto = request.getfixturevalue("moto_s3") if kind == "s3" else None
    url, env = lake_env(kind, tmp_path, moto)
    first, second = split_runs(tmp_path / "in", 2)
    assert mlcost(env, "load", "--lake", url, str(first)).returncode == 0
    ready = tmp_path / "between-files-and-ledger"
    child = subprocess.Popen([sys.executable, "-c", KILLED_LOAD, url, str(second), str(ready)], cwd=REPO_ROOT,
                             env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **env})
    deadline = time.monotonic() + 120
    while not ready.exists():
        assert child.poll() is None and time.monotonic() < deadline, "the load ended before its ledger entry"
        time.sleep(0.1)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    killed = int(ready.read_text())

    orphans = [f for f in data_files(url, env) if Path(f).name.startswith(f"{killed}-")]
    assert orphans, "the killed load had written its data files"
    assert killed not in ledger(url, env)
    seen = read_through_mlcost(url, env, tmp_path, "SELECT run_id FROM runs")
    assert sorted(r for (r,) in seen) == sorted(run_ids(first))  # nothing of the killed load

    # young orphans are left alone (a load may still be writing them); old ones go
    assert mlcost(env, "lake", "vacuum", "--lake", url).returncode == 0
    assert set(orphans) <= set(data_files(url, env))
    vacuumed = mlcost(env, "lake", "vacuum", "--lake", url, "--older-than", "0")
    assert vacuumed.returncode == 0, vacuumed.stderr
    assert not set(orphans) & set(data_files(url, env))
    # the file loads afterwards as if nothing had happened
    assert mlcost(env, "load", "--lake", url, str(second)).returncode == 0
    seen = read_through_mlcost(url, env, tmp_path, "SELECT run_id FROM runs")
    assert sorted(r for (r,) in seen) == sorted(run_ids(first) + run_ids(second))


# --- the same load twice; the same file read otherwise ---------------------------------------

def test_the_same_load_twice_changes_nothing_and_another_reading_supersedes_it(tmp_path):
    url, env = str(tmp_path / "lake"), {}
    trace = TRACES[0]
    once = mlcost(env, "load", "--lake", url, "--json", str(trace))
    assert once.returncode == 0, once.stderr
    files = sorted(data_files(url, env))
    entries = ledger(url, env)
    again = mlcost(env, "load", "--lake", url, "--json", str(trace))
    assert again.returncode == 0 and json.loads(again.stdout)[0]["status"] == "already_loaded"
    assert sorted(data_files(url, env)) == files and ledger(url, env) == entries

    # read again as another host's samples: a new load that supersedes the first
    other = mlcost(env, "load", "--lake", url, "--json", "--host", "renamed-node", str(trace))
    assert other.returncode == 0, other.stderr
    (first,) = entries
    after = ledger(url, env)
    (new,) = set(after) - {first}
    assert after[new]["supersedes"] == [str(first)]
    total = sum(trace_rows(trace).values())
    seen = read_through_mlcost(url, env, tmp_path, "SELECT host, count(*) FROM gpu_samples GROUP BY host")
    assert seen == [("renamed-node", total)]
    assert read_through_mlcost(url, env, tmp_path, "SELECT load_id FROM loads") == [(new,)]


def test_a_changed_file_replaces_rows_by_key_as_the_embedded_warehouse_does(tmp_path):
    """Latest load wins per run_id: the second version of a run is the one read, the other runs stay."""
    url, env = str(tmp_path / "lake"), {}
    lines = [json.loads(line) for line in (SAMPLE_DIR / "runs.jsonl").read_text().splitlines() if line.strip()]
    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps(r) for r in lines[:3]) + "\n")
    changed = dict(lines[1], project="moved-project")
    (tmp_path / "b.jsonl").write_text(json.dumps(changed) + "\n")
    for name in ("a.jsonl", "b.jsonl"):
        assert mlcost(env, "load", "--lake", url, str(tmp_path / name)).returncode == 0
    seen = dict(read_through_mlcost(url, env, tmp_path, "SELECT run_id, project FROM runs"))
    assert seen == {lines[0]["run_id"]: lines[0]["project"], lines[1]["run_id"]: "moved-project",
                    lines[2]["run_id"]: lines[2]["project"]}


def test_the_warehouse_over_a_lake_refuses_loads_in_one_sentence(tmp_path, monkeypatch):
    from ingest.engine import warehouse
    from ingest.pipeline import loader

    monkeypatch.setenv("MLCOST_DB", str(tmp_path / "local.duckdb"))
    monkeypatch.setenv("MLCOST_LAKE", str(tmp_path / "lake"))
    with pytest.raises(warehouse.WarehouseBusy, match="mlcost load --lake"):
        loader.ingest_file(SAMPLE_DIR / "runs.jsonl")
    done = mlcost({"MLCOST_LAKE": str(tmp_path / "lake"), "MLCOST_DB": str(tmp_path / "local.duckdb")},
                  "ingest", str(SAMPLE_DIR / "runs.jsonl"))
    assert done.returncode != 0 and "mlcost load --lake" in done.stdout + done.stderr
    assert "Traceback" not in done.stderr


# --- every table and every page: the lake and the embedded file agree -----------------------

WAREHOUSE_TABLES = ("runs", "run_evals", "gpu_samples", "serving_windows", "billing_lines", "rejects",
                    "gpu_minutes", "gpu_gaps", "run_gpu_time", "gpu_minutes_allocated", "run_gpu_energy",
                    "run_gpu_days", "gpu_days", "billing_line_runs", "bill_allocation_days",
                    "run_costs", "billing_costs", "serving_costs", "run_energy")
# columns that differ by construction: load ids (a sequence there, a content hash here), when computed
NOT_COMPARED = {"load_id", "computed_at", "loaded_at"}


def table_rows(con, table: str) -> list[tuple]:
    columns = [c for (c,) in con.execute(f"SELECT column_name FROM (DESCRIBE {table})").fetchall()
               if c not in NOT_COMPARED]
    return sorted(con.execute(f"SELECT {', '.join(chr(34) + c + chr(34) for c in columns)} FROM {table}").fetchall(),
                  key=repr)


def same_rows(left: list[tuple], right: list[tuple]) -> bool:
    """Equal row for row; floats within 1e-9 relative (a sum over other orders of the same
    minutes), everything else (money: DECIMAL) exactly."""
    if len(left) != len(right):
        return False
    for a, b in zip(left, right):
        if len(a) != len(b):
            return False
        for x, y in zip(a, b):
            if isinstance(x, float) and isinstance(y, float):
                if not (math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9) or (math.isnan(x) and math.isnan(y))):
                    return False
            elif x is not y and x != y and not (_missing(x) and _missing(y)):
                return False
    return True


def _sort_key(row: tuple) -> str:
    return repr([round(v, 6) if isinstance(v, float) and math.isfinite(v) else v for v in row])


def _missing(value) -> bool:
    import pandas as pd

    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


@pytest.mark.parametrize("kind", ["folder", "s3"])
def test_every_warehouse_table_reads_the_same_from_the_lake(sample_pair, kind, tmp_path, monkeypatch, request):
    from ingest.engine import warehouse

    db, folder = sample_pair
    url = lake_of(folder, kind, request, monkeypatch)
    monkeypatch.setenv("MLCOST_CONFIG", str(SETTINGS))
    monkeypatch.delenv("MLCOST_LAKE", raising=False)
    with warehouse.read(db) as con:
        embedded = {table: table_rows(con, table) for table in WAREHOUSE_TABLES}
    monkeypatch.setenv("MLCOST_LAKE", url)
    with warehouse.read(tmp_path / "local.duckdb") as con:
        lake = {table: table_rows(con, table) for table in WAREHOUSE_TABLES}
    assert all(embedded[table] for table in ("runs", "gpu_minutes", "bill_allocation_days", "run_gpu_energy"))
    differ = [table for table in WAREHOUSE_TABLES if not same_rows(embedded[table], lake[table])]
    assert differ == []


def page_figures(page: str) -> tuple[dict, list]:
    """A page's metrics (label: value) and tables (each a list of row dicts) as AppTest renders it."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    st.cache_data.clear()
    st.cache_resource.clear()
    at = AppTest.from_file(str(REPO_ROOT / "app" / "main.py"), default_timeout=120).run()
    if page != "overview.py":
        at.switch_page(f"app_pages/{page}").run()
    assert not at.exception, [e.message for e in at.exception]
    metrics = {m.label: m.value for m in at.metric}
    tables = [] if page == "data.py" else [
        [tuple(row) for row in frame.value.itertuples(index=False)] for frame in at.dataframe]
    return metrics, tables


@pytest.mark.parametrize("kind", ["folder", "s3"])
def test_every_page_shows_the_same_figures_from_the_lake(sample_pair, kind, tmp_path, monkeypatch, request):
    """Each page rendered over the embedded file and over the lake: the same metrics and tables
    (the Data page lists loads by id, which differ by construction: its metrics only)."""
    db, folder = sample_pair
    url = lake_of(folder, kind, request, monkeypatch)
    monkeypatch.setenv("MLCOST_CONFIG", str(SETTINGS))
    copy = tmp_path / "embedded.duckdb"
    shutil.copyfile(db, copy)
    shown: dict[str, dict] = {}
    for mode in ("embedded", "lake"):
        if mode == "embedded":
            monkeypatch.delenv("MLCOST_LAKE", raising=False)
            monkeypatch.setenv("MLCOST_DB", str(copy))
        else:
            monkeypatch.setenv("MLCOST_LAKE", url)
            monkeypatch.setenv("MLCOST_DB", str(tmp_path / "local.duckdb"))
        shown[mode] = {page: page_figures(page) for page in PAGES}
    assert sum(len(metrics) for metrics, _ in shown["embedded"].values()) > 20
    for page in PAGES:
        (metrics, tables), (lake_metrics, lake_tables) = shown["embedded"][page], shown["lake"][page]
        assert lake_metrics == metrics, page
        assert len(lake_tables) == len(tables), page
        # rows that tie on a page's sort order come in either order, in both warehouses
        differ = [i for i, (a, b) in enumerate(zip(tables, lake_tables))
                  if not same_rows(sorted(a, key=_sort_key), sorted(b, key=_sort_key))]
        shown_rows = {i: (sorted(tables[i], key=_sort_key)[:5], sorted(lake_tables[i], key=_sort_key)[:5]) for i in differ}
        assert differ == [], f"{page}: tables {differ} differ (first rows, embedded then lake): {shown_rows}"


def test_the_settings_files_lake_is_where_load_writes_and_the_warehouse_reads(tmp_path):
    """`[warehouse] lake` in mlcost.toml, no --lake and no $MLCOST_LAKE: `mlcost load` writes there and
    every warehouse read (here `mlcost loads`) reads it; `mlcost derive` without a lake says how to name one."""
    lake = tmp_path / "team lake"
    settings = tmp_path / "mlcost.toml"
    settings.write_text(f'[warehouse]\nlake = "{lake}"\n')
    env = {"MLCOST_CONFIG": str(settings), "MLCOST_DB": str(tmp_path / "local.duckdb")}
    (part,) = split_runs(tmp_path / "in", 1)
    clean = {k: v for k, v in os.environ.items() if k != "MLCOST_LAKE"}
    done = subprocess.run([sys.executable, "-m", "mlcost", "load", str(part)], cwd=REPO_ROOT, capture_output=True,
                          text=True, env={**clean, "PYTHONPATH": str(REPO_ROOT), **env}, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(ledger(str(lake), {})) == 1
    listed = subprocess.run([sys.executable, "-m", "mlcost", "loads", "--json"], cwd=REPO_ROOT, capture_output=True,
                            text=True, env={**clean, "PYTHONPATH": str(REPO_ROOT), **env}, timeout=300)
    assert listed.returncode == 0, listed.stderr
    (load,) = json.loads(listed.stdout)
    assert (load["kind"], load["rows_loaded"]) == ("runs", len(run_ids(part)))
    elsewhere = tmp_path / "elsewhere"  # no mlcost.toml here
    elsewhere.mkdir()
    no_lake = subprocess.run([sys.executable, "-m", "mlcost", "derive"], cwd=elsewhere, capture_output=True, text=True,
                             env={**clean, "PYTHONPATH": str(REPO_ROOT), "MLCOST_CONFIG": ""}, timeout=300)
    assert no_lake.returncode == 2 and "--lake" in no_lake.stderr + no_lake.stdout


def test_vacuum_keeps_only_the_current_derived_generation(tmp_path):
    """`mlcost derive --lake` twice, then vacuum: the first generation's files (and intermediates
    under derived/_work/) go; the current one's stay, and readers still read it."""
    url, env = str(tmp_path / "lake"), {"MLCOST_CONFIG": str(SETTINGS)}
    assert mlcost(env, "load", "--lake", url, str(SAMPLE_DIR / "runs.jsonl"), str(TRACES[0])).returncode == 0
    first = mlcost(env, "derive", "--lake", url)
    assert first.returncode == 0, first.stderr
    old = json.loads((tmp_path / "lake" / "derived" / "_current.json").read_text())
    second = mlcost(env, "derive", "--lake", url)
    assert second.returncode == 0, second.stderr
    current = json.loads((tmp_path / "lake" / "derived" / "_current.json").read_text())
    assert current["generation"] != old["generation"]
    work = tmp_path / "lake" / "derived" / "_work" / "sample_intervals" / f"generation={current['generation']}"
    work.mkdir(parents=True)
    (work / "part-0.parquet").write_bytes(b"an intermediate no reader reads")

    def derived_files() -> set[str]:
        return {p.relative_to(tmp_path / "lake").as_posix() for p in (tmp_path / "lake" / "derived").rglob("*")
                if p.is_file()}

    kept = {f"{folder}/0.parquet" for folder in current["tables"].values()} | {"derived/_current.json"}
    assert kept < derived_files() and any(old["generation"] in f for f in derived_files())
    assert mlcost(env, "lake", "vacuum", "--lake", url).returncode == 0  # young files stay
    assert any(old["generation"] in f for f in derived_files())
    vacuumed = mlcost(env, "lake", "vacuum", "--lake", url, "--older-than", "0")
    assert vacuumed.returncode == 0, vacuumed.stderr
    assert derived_files() == kept
    days = read_through_mlcost(url, env, tmp_path, "SELECT count(*) FROM gpu_days")
    assert days[0][0] == current["rows"]["gpu_days"] > 0
