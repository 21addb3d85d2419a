"""Loading several files with the next one staged while this one merges (loader.ingest_files, what
`mlcost ingest A B C` does): the same summaries and warehouse as one file at a time, the staging
really beside the merge, and a stage staged ahead thrown away when the load stops early.
Expected figures come from the trace files as written here (plain Python over their rows)."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import duckdb
import pytest

from ingest.pipeline import loader
from tests.conftest import REPO_ROOT

HEADER = "timestamp,host,gpu_index,gpu_uuid,gpu_name,power_w,energy_mj,gpu_util_pct,mem_used_mib"


def write_trace(path: Path, host: str, minutes: int, bad: tuple[int, ...] = ()) -> Path:
    """A collector CSV of 2 GPUs sampled every 10 s for `minutes`; the data lines in `bad` get a
    power of -5 W (refused)."""
    rows = [HEADER]
    for step in range(minutes * 6):
        for gpu in range(2):
            line = len(rows) + 1
            power = "-5" if line in bad else f"{100 + (step * 7 + gpu * 13) % 300}.5"
            rows.append(f"2026-10-01T{step * 10 // 3600:02d}:{step * 10 // 60 % 60:02d}:{step * 10 % 60:02d}Z,"
                        f"{host},{gpu},GPU-{host}-{gpu},NVIDIA L4,{power},{1000 + step},{step % 101},{step}")
    path.write_text("\n".join(rows) + "\n")
    return path


def plain_figures(paths: list[Path]) -> tuple[int, float]:
    """Rows and the sum of power_w over the rows with a power of at least 0, by plain Python."""
    rows, power = 0, 0.0
    for path in paths:
        with path.open(newline="") as handle:
            for record in csv.DictReader(handle):
                if float(record["power_w"]) >= 0:
                    rows += 1
                    power += float(record["power_w"])
    return rows, power


@pytest.fixture()
def files(tmp_path: Path) -> list[Path]:
    folder = tmp_path / "in"
    folder.mkdir()
    a = write_trace(folder / "node-a.csv", "node-a", 30)
    same = folder / "node-a-again.csv"  # the same content under another name, right after it: already loaded
    same.write_bytes(a.read_bytes())
    b = write_trace(folder / "node-b.csv", "node-b", 20, bad=(5, 9))
    empty = folder / "empty.csv"
    empty.write_text("")
    c = write_trace(folder / "node-c.csv", "node-c", 10)
    return [a, same, b, empty, c]


def stored(db: Path) -> dict[str, list]:
    """Every table of the warehouse file (times of the load itself left out), its rows sorted."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        out = {}
        for (table,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' "
                                    "AND table_name <> 'schema_stamp'").fetchall():  # stamped when made
            columns = [c for (c,) in con.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = ? "
                                                 "AND schema_name = 'main'", [table]).fetchall()
                       if c not in ("loaded_at", "computed_at", "updated_at", "noted_at")]
            out[table] = sorted(map(repr, con.execute(f"SELECT {', '.join(columns)} FROM {table}").fetchall()))
        return out
    finally:
        con.close()


def test_the_same_summaries_and_warehouse_as_one_file_at_a_time(files, tmp_path, monkeypatch):
    one_db, ahead_db = tmp_path / "one.duckdb", tmp_path / "ahead.duckdb"
    monkeypatch.setenv("MLCOST_DB", str(one_db))
    with loader.batch(files):
        one = [loader.ingest_file(path) for path in files]
    monkeypatch.setenv("MLCOST_DB", str(ahead_db))
    with loader.batch(files):
        ahead = list(loader.ingest_files(files))
    assert [path for path, _ in ahead] == files
    for summary in one + [s for _, s in ahead]:
        summary.merge_s = None
    assert [s for _, s in ahead] == one
    assert [s.status for s in one] == ["loaded", "already_loaded", "loaded", "failed", "loaded"]
    loaded = [files[0], files[2], files[4]]
    rows, power = plain_figures(loaded)
    assert sum(s.rows_loaded for s in one) == rows
    assert [(r["line"], r["reason"].startswith("power_w -5")) for r in one[2].rejects] == [(5, True), (9, True)]
    assert stored(ahead_db) == stored(one_db)
    con = duckdb.connect(str(ahead_db), read_only=True)
    try:
        count, total = con.execute("SELECT count(*), sum(power_w) FROM gpu_samples").fetchall()[0]
    finally:
        con.close()
    assert count == rows and total == pytest.approx(power)


def test_the_next_file_is_staged_while_this_one_merges(files, warehouse, monkeypatch):
    """The first merge waits until the second file has begun staging: were the files loaded one
    after the other, it would wait out its timeout and the test fail."""
    second_started = threading.Event()
    merges: list[bool] = []
    warehouse_merge = loader.warehouse.merge

    def waiting_merge(*args, **kwargs):
        if not merges:
            merges.append(second_started.wait(timeout=30))
        return warehouse_merge(*args, **kwargs)

    monkeypatch.setattr(loader.warehouse, "merge", waiting_merge)
    started: list[str] = []

    def on_start(path: Path) -> None:
        started.append(path.name)
        if len(started) == 2:
            second_started.set()

    trace_files = [files[0], files[2], files[4]]
    with loader.batch(trace_files):
        summaries = [s for _, s in loader.ingest_files(trace_files, on_start=on_start)]
    assert merges == [True]
    assert [s.status for s in summaries] == ["loaded", "loaded", "loaded"]
    assert started == [path.name for path in trace_files]


def test_a_load_stopped_early_throws_the_file_staged_ahead_away(files, warehouse, monkeypatch):
    closed: list[str] = []
    close = loader._Staged.close

    def recorded_close(self):
        closed.append(self.context.source)
        close(self)

    monkeypatch.setattr(loader._Staged, "close", recorded_close)
    loads = loader.ingest_files([files[0], files[2], files[4]])
    path, summary = next(loads)
    assert summary.status == "loaded"
    loads.close()  # the caller stops: node-b was staged meanwhile, never merged
    assert closed == [str(files[2])]
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        assert con.execute("SELECT count(*), min(path) FROM loads").fetchall() == [(1, str(files[0]))]
    finally:
        con.close()


def test_a_busy_warehouse_stops_the_load_and_closes_the_stage_ahead(files, warehouse, monkeypatch):
    closed: list[str] = []
    close = loader._Staged.close
    monkeypatch.setattr(loader._Staged, "close", lambda self: (closed.append(self.context.source), close(self)))

    def busy(*_args, **_kwargs):
        raise warehouse_busy

    warehouse_busy = loader.warehouse.WarehouseBusy("busy")
    monkeypatch.setattr(loader.warehouse, "merge", busy)
    with pytest.raises(loader.warehouse.WarehouseBusy):
        list(loader.ingest_files([files[0], files[2]]))
    assert closed == [str(files[2])]


def test_the_cli_loads_files_ahead_with_the_same_json(files, tmp_path):
    """`mlcost ingest --json` over the files prints what one file at a time gives."""
    env = {**os.environ, "MLCOST_DB": str(tmp_path / "cli.duckdb"), "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-m", "mlcost", "ingest", "--json", *map(str, files)],
                          capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=180)
    printed = json.loads(done.stdout)
    assert [r["status"] for r in printed] == ["loaded", "already_loaded", "loaded", "failed", "loaded"]
    rows, _ = plain_figures([files[0], files[2], files[4]])
    assert sum(r["rows_loaded"] for r in printed) == rows
    assert printed[2]["rows_rejected"] == 2 and done.returncode != 0


def merge_waiting_for_a_stage(monkeypatch, timeout_s: float) -> tuple[list[bool], list[str]]:
    """warehouse.merge patched: the first merge waits (up to timeout_s) for a second file's
    staging to begin; returns (whether it began in time, the files staged in order with their
    staging memory limit)."""
    second = threading.Event()
    waited: list[bool] = []
    stages: list[str] = []
    merge, stage = loader.warehouse.merge, loader._stage

    def waiting_merge(*args, **kwargs):
        if not waited:
            waited.append(second.wait(timeout=timeout_s))
        return merge(*args, **kwargs)

    def recorded_stage(parser, src, con, context, binary):
        (limit,) = con.execute("SELECT current_setting('memory_limit')").fetchall()[0]
        stages.append(f"{Path(src.name).name} {limit}")
        if len(stages) == 2:
            second.set()
        return stage(parser, src, con, context, binary)

    monkeypatch.setattr(loader.warehouse, "merge", waiting_merge)
    monkeypatch.setattr(loader, "_stage", recorded_stage)
    return waited, stages


def test_only_trace_files_are_staged_beside_a_merge_with_a_lower_memory_limit(files, warehouse, monkeypatch):
    monkeypatch.delenv("MLCOST_STAGE_MEMORY", raising=False)
    waited, stages = merge_waiting_for_a_stage(monkeypatch, timeout_s=30)
    pair = [files[0], files[2]]
    assert [s.status for _, s in loader.ingest_files(pair)] == ["loaded", "loaded"]
    assert waited == [True]
    limit = duckdb.connect(config={"memory_limit": loader.AHEAD_MEMORY}).execute(
        "SELECT current_setting('memory_limit')").fetchall()[0][0]
    assert limit != duckdb.connect(config={"memory_limit": loader.staging.MEMORY_LIMIT}).execute(
        "SELECT current_setting('memory_limit')").fetchall()[0][0]
    assert stages == [f"node-a.csv {limit}", f"node-b.csv {limit}"]


def test_a_file_of_another_kind_waits_for_the_merge_before_it(files, warehouse, monkeypatch, tmp_path):
    runs = tmp_path / "runs.jsonl"
    runs.write_text(json.dumps({"run_id": "r1", "start_time": "2026-10-01T00:00:00Z",
                                "end_time": "2026-10-01T01:00:00Z", "host": "node-a", "gpu_indices": [0]}) + "\n")
    waited, stages = merge_waiting_for_a_stage(monkeypatch, timeout_s=3)
    summaries = [s for _, s in loader.ingest_files([files[0], runs])]
    assert [s.status for s in summaries] == ["loaded", "loaded"]
    assert waited == [False]  # the runs file was not staged while the trace file merged
    assert [entry.split()[0] for entry in stages] == ["node-a.csv", "runs.jsonl"]


def test_one_file_keeps_the_usual_staging_memory(files, warehouse, monkeypatch):
    monkeypatch.delenv("MLCOST_STAGE_MEMORY", raising=False)
    _, stages = merge_waiting_for_a_stage(monkeypatch, timeout_s=0)
    assert [s.status for _, s in loader.ingest_files([files[0]])] == ["loaded"]
    usual = duckdb.connect(config={"memory_limit": loader.staging.MEMORY_LIMIT}).execute(
        "SELECT current_setting('memory_limit')").fetchall()[0][0]
    assert stages == [f"node-a.csv {usual}"]


def test_malloc_arenas_are_limited_for_several_files_only(files, warehouse, monkeypatch):
    calls: list[int] = []
    real = loader._few_arenas
    monkeypatch.setattr(loader, "_few_arenas", lambda: calls.append(1))
    list(loader.ingest_files([files[0]]))
    assert calls == []
    list(loader.ingest_files([files[2], files[4]]))
    assert calls == [1]
    real()  # the real call: glibc takes it, another C library is left alone (no error)
