"""ingest/engine/warehouse.py: schema, the load ledger, rejects, safe re-loading and the file lock."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timezone
from pathlib import Path

import duckdb
import pytest

from ingest.engine import warehouse as wh
from ingest.engine import wh_connection
from ingest.engine.contract import ParseContext, Parsed, numbered
from ingest.formats.runs import run_summary
from ingest.pipeline import loader

TABLES = ("loads", "rejects", "run_evals", "runs")
VIEWS = ("run_costs",)
# Three lines: a run with two eval points, a malformed line, a run with a negative price.
RUNS_FILE = [
    json.dumps({"run_id": "r1", "start_time": "2025-05-05T16:00:00Z", "end_time": "2025-05-05T18:30:00Z",
                "price_per_hour_usd": 4.0,
                "eval_history": [{"elapsed_s": 600, "value": 2.5}, {"elapsed_s": 1200, "value": 1.5}]}),
    '{"run_id": "r2", ',
    json.dumps({"run_id": "r3", "start_time": "2025-05-05T16:00:00Z", "price_per_hour_usd": -1}),
]
# Holds the warehouse file open until killed (or argv[2] seconds pass).
HOLD_LOCK = ("import duckdb, sys, time\n"
             "con = duckdb.connect(sys.argv[1])\n"
             "print('locked', flush=True)\n"
             "time.sleep(float(sys.argv[2]))\n"
             "con.close()\n")


def write_runs(tmp_path: Path, lines: list[str] = RUNS_FILE, name: str = "runs.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def fetch(sql: str, params: list | None = None) -> list[tuple]:
    with wh.connect() as con:
        return con.execute(sql, params or []).fetchall()


def schema_objects() -> list[tuple[str, str]]:
    """(name, BASE TABLE or VIEW) of everything in the warehouse, duplicates included."""
    return fetch("SELECT table_name, table_type FROM information_schema.tables ORDER BY ALL")


def assert_schema_once(objects: list[tuple[str, str]]) -> None:
    names = [name for name, _ in objects]
    assert len(names) == len(set(names))
    assert {(t, "BASE TABLE") for t in TABLES} | {(v, "VIEW") for v in VIEWS} <= set(objects)


def counts() -> dict[str, int]:
    return {table: fetch(f"SELECT count(*) FROM {table}")[0][0] for table in TABLES}


@contextmanager
def lock_held(db: Path, seconds: float) -> Iterator[subprocess.Popen]:
    """Another process holding the warehouse file; yields once it has the lock."""
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(db), str(seconds)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        yield holder
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.wait(timeout=60)
        holder.stdout.close()


# --- schema -----------------------------------------------------------------------------------

def test_schema_creation_is_idempotent(tmp_path, warehouse, monkeypatch):
    loader.ingest_file(write_runs(tmp_path))
    first = schema_objects()
    assert_schema_once(first)
    # forget that this process created the schema, so the next connection runs schema.sql again
    monkeypatch.setattr(wh_connection, "_schema_ready", set())
    assert schema_objects() == first
    assert counts() == {"loads": 1, "rejects": 2, "run_evals": 2, "runs": 1}  # nothing dropped
    # the load id sequence was not restarted either
    loader.ingest_file(write_runs(tmp_path, RUNS_FILE[:1], "again.jsonl"))
    assert fetch("SELECT load_id FROM loads ORDER BY load_id") == [(1,), (2,)]


def test_schema_in_a_fresh_process_too(warehouse):
    script = "from ingest.engine import warehouse\nwith warehouse.connect() as con: pass\n"
    env = {**os.environ, "MLCOST_DB": str(warehouse)}
    subprocess.run([sys.executable, "-c", script], check=True, env=env)
    first = schema_objects()  # this process runs schema.sql a second time, on the existing file
    subprocess.run([sys.executable, "-c", script], check=True, env=env)  # and a third process
    assert_schema_once(first)
    assert schema_objects() == first


# --- the ledger and rejects --------------------------------------------------------------------

def test_reingesting_the_same_file_is_a_no_op(tmp_path, warehouse):
    path = write_runs(tmp_path)
    first = loader.ingest_file(path)
    assert (first.status, first.rows_loaded, first.rows_rejected) == ("loaded", 1, 2)
    before = counts()
    assert before == {"loads": 1, "rejects": 2, "run_evals": 2, "runs": 1}

    again = loader.ingest_file(path)
    assert (again.status, again.rows_loaded, again.rows_rejected, again.rejects) == ("already_loaded", 0, 0, [])
    assert again.ok
    # the same bytes under another name are the same content
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(path.read_bytes())
    assert loader.ingest_file(copy).status == "already_loaded"
    assert counts() == before


def test_load_twice_with_the_same_sha_is_a_no_op(warehouse):
    """The check inside the load transaction, for a file that two ingests raced to load."""
    parsed = run_summary.parse(numbered(RUNS_FILE), ParseContext("f.jsonl", timezone.utc))
    first = wh.load("f.jsonl", "abc123", "runs", parsed)
    second = wh.load("f.jsonl", "abc123", "runs", parsed)
    assert first == wh.LoadResult(1, 1, 2, already_loaded=False)
    assert second == wh.LoadResult(1, 0, 0, already_loaded=True)
    assert counts() == {"loads": 1, "rejects": 2, "run_evals": 2, "runs": 1}
    # the same content read as another kind is a different load
    assert wh.find_load("abc123", "runs") == 1
    assert wh.find_load("abc123", "codecarbon") is None


def test_rejects_rows_carry_path_line_reason_and_raw(tmp_path, warehouse):
    path = write_runs(tmp_path)
    loader.ingest_file(path)
    rows = fetch("SELECT load_id, path, line, reason, raw FROM rejects ORDER BY line")
    assert [(load_id, p, line, raw) for load_id, p, line, _, raw in rows] == [
        (1, str(path), 2, RUNS_FILE[1]), (1, str(path), 3, RUNS_FILE[2])]
    assert "not valid JSON" in rows[0][3]
    assert "price_per_hour_usd" in rows[1][3]


def test_ledger_row(tmp_path, warehouse):
    path = write_runs(tmp_path)
    loader.ingest_file(path)
    [(load_id, ledger_path, sha256, kind, rows_loaded, rows_rejected, loaded_at, options)] = fetch("SELECT * FROM loads")
    assert (load_id, ledger_path, sha256, kind, rows_loaded, rows_rejected, options) == (
        1, str(path), hashlib.sha256(path.read_bytes()).hexdigest(), "runs", 1, 2, "")
    assert loaded_at.utcoffset() is not None
    # every loaded row points at its load
    assert fetch("SELECT DISTINCT load_id FROM runs") == [(1,)]


def rows_breaking_a_constraint() -> Parsed:
    parsed = Parsed()
    parsed.rows("runs").append({"run_id": "x"})  # no source_kind / source_line: NOT NULL fails
    return parsed


def test_a_failed_load_leaves_nothing_behind(warehouse):
    with pytest.raises(duckdb.Error):
        wh.load("bad.jsonl", "deadbeef", "runs", rows_breaking_a_constraint())
    assert counts() == {"loads": 0, "rejects": 0, "run_evals": 0, "runs": 0}


def test_a_failed_load_reports_its_own_error(warehouse):
    with pytest.raises(duckdb.ConstraintException, match="source_kind"):
        wh.load("bad.jsonl", "deadbeef", "runs", rows_breaking_a_constraint())


def test_connections_are_closed_after_use(tmp_path, warehouse):
    loader.ingest_file(write_runs(tmp_path))
    other = subprocess.run([sys.executable, "-c", "import duckdb, sys; duckdb.connect(sys.argv[1]).close()",
                            str(warehouse)], check=False, capture_output=True, text=True)
    assert other.returncode == 0, other.stderr


# --- the file lock ------------------------------------------------------------------------------

def test_a_lock_held_briefly_is_waited_for(tmp_path, warehouse, monkeypatch):
    monkeypatch.setattr(wh_connection, "LOCK_WAIT_S", 60.0)
    path = write_runs(tmp_path)
    with lock_held(warehouse, 2) as holder:
        assert holder.poll() is None  # the other process still has the file
        summary = loader.ingest_file(path)
    assert (summary.status, summary.rows_loaded) == ("loaded", 1)
    assert fetch("SELECT run_id FROM runs") == [("r1",)]


def test_a_lock_that_persists_is_warehouse_busy(tmp_path, warehouse, monkeypatch):
    monkeypatch.setattr(wh_connection, "LOCK_WAIT_S", 0.5)
    path = write_runs(tmp_path)
    with lock_held(warehouse, 30) as holder, pytest.raises(wh.WarehouseBusy) as busy:
        loader.ingest_file(path)
    message = str(busy.value)
    assert str(warehouse) in message
    assert f"process {holder.pid}" in message
    assert "0.5 s" in message
    # one sentence: a single line, one full stop, at the end
    assert "\n" not in message
    assert message.endswith(".")
    assert ". " not in message
    # nothing was half-done: once the other process is gone the file loads normally
    assert loader.ingest_file(path).status == "loaded"
    assert counts()["loads"] == 1


def test_cli_exits_3_with_one_line_when_the_warehouse_stays_locked(tmp_path, warehouse):
    path = write_runs(tmp_path)
    env = {**os.environ, "MLCOST_DB": str(warehouse), "MLCOST_LOCK_WAIT_S": "0.5"}
    with lock_held(warehouse, 30):
        result = subprocess.run([sys.executable, "-m", "mlcost", "ingest", str(path)],
                                check=False, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert result.returncode == 3
    assert "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("mlcost:")
    assert str(warehouse) in line
    assert result.stdout == ""


def test_cli_says_so_for_an_empty_folder_and_an_empty_file(tmp_path, warehouse, capsys):
    from mlcost import cli

    (tmp_path / "nothing_here").mkdir()
    (tmp_path / "notes.txt").write_text("not a kind mlcost reads")
    (tmp_path / "empty.jsonl").write_text("\n")
    assert cli.main(["ingest", str(tmp_path / "nothing_here"), str(tmp_path / "empty.jsonl")]) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"FAILED {tmp_path / 'nothing_here'}: a folder without files to load "
        "(.csv, .gz, .json, .jsonl, .ndjson, .parquet, .prom, .zst)",
        f"FAILED {tmp_path / 'empty.jsonl'}: the file is empty"]
