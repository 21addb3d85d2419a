"""Read sessions (warehouse.session()): a render's queries share one read-only connection, and a
loader in another process is never kept waiting by it: not while the session is idle, not while
it reads without pause. Real processes on a real warehouse file, as tests/test_crash_concurrency.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import duckdb
import pytest

from ingest.engine import warehouse as wh
from ingest.engine import wh_connection

REPO = Path(__file__).resolve().parents[1]

# A reader process: opens a session, reads once, says "ready", then reads (in a loop with
# `busy`, else not at all: idle) inside the same session until the file `done` appears; then
# reads the runs once more, still in the session, and prints what it counted.
READER = """
import json, sys, time
from pathlib import Path
import duckdb
from ingest.engine import warehouse as wh

done, busy = Path(sys.argv[1]), sys.argv[2] == "busy"
opened = 0
connect = duckdb.connect
def counting(*args, **kwargs):
    global opened
    opened += 1
    return connect(*args, **kwargs)
duckdb.connect = counting
reads = 0
with wh.session():
    wh.query("SELECT count(*) FROM runs")
    print("ready", flush=True)
    deadline = time.monotonic() + 120
    while not done.exists() and time.monotonic() < deadline:
        if busy:
            wh.query("SELECT count(*) FROM runs")
            reads += 1
        else:
            time.sleep(0.01)
    runs = int(wh.query("SELECT count(*) AS n FROM runs")["n"][0])
print(json.dumps({"runs": runs, "reads": reads, "opened": opened}), flush=True)
"""


def runs_file(folder: Path, count: int) -> Path:
    path = folder / "runs.jsonl"
    lines = [json.dumps({"run_id": f"r{i}", "project": "p", "start_time": "2026-10-01T00:00:00Z",
                         "end_time": "2026-10-01T01:00:00Z", "gpu_type": "NVIDIA A100", "gpu_count": 1})
             for i in range(count)]
    path.write_text("\n".join(lines) + "\n")
    return path


def env_for(db: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "MLCOST_DB": str(db), **extra}


@pytest.mark.parametrize("mode", ["idle", "busy"])
def test_a_loader_in_another_process_does_not_wait_for_a_reading_session(tmp_path, mode):
    db = tmp_path / "w.duckdb"
    wh.query("SELECT 1", path=db)  # the file and its schema exist
    done = tmp_path / "done"
    reader = subprocess.Popen([sys.executable, "-c", READER, str(done), mode], env=env_for(db), cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert reader.stdout.readline().strip() == "ready", reader.stderr.read()
        # the loader gives up after 15 s: a session holding its connection (idle, or reading
        # back to back) for the 120 s the reader lasts would make it fail as busy
        loaded = subprocess.run([sys.executable, "-m", "mlcost", "ingest", "--json", str(runs_file(tmp_path, 7))],
                                env=env_for(db, MLCOST_LOCK_WAIT_S="15"), cwd=REPO, capture_output=True,
                                text=True, timeout=300)
        assert loaded.returncode == 0, loaded.stderr
        assert json.loads(loaded.stdout)[0]["status"] == "loaded"
        assert reader.poll() is None  # the reader is still inside its session
        done.touch()
        out, err = reader.communicate(timeout=120)
    finally:
        reader.kill()
    assert reader.returncode == 0, err
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["runs"] == 7  # the session reads what the loader wrote
    if mode == "busy":
        # reads went on meanwhile, and far fewer connections were opened than reads made
        assert seen["reads"] > 20 and seen["opened"] < seen["reads"] / 2, seen


def test_a_session_opens_one_connection_for_many_reads(tmp_path, monkeypatch):
    db = tmp_path / "w.duckdb"
    wh.query("SELECT 1", path=db)
    opened = []
    connect = duckdb.connect
    monkeypatch.setattr(duckdb, "connect", lambda *a, **k: opened.append(a) or connect(*a, **k))
    for _ in range(5):
        wh.query("SELECT count(*) FROM runs", path=db)
    assert len(opened) == 5  # outside a session: one connection per read
    opened.clear()
    with wh.session(db):
        counts = [int(wh.query("SELECT count(*) AS n FROM runs", path=db)["n"][0]) for _ in range(30)]
        # a write on the same thread within the session: the read connection makes way for it
        wh.add_decision(date(2026, 10, 1), "note", "written mid-session", path=db)
        notes = wh.query("SELECT text FROM decisions", path=db)["text"].tolist()
    assert counts == [0] * 30 and notes == ["written mid-session"]
    # 1 read connection for 30 reads, 1 for the write, 1 read connection again after it
    assert len(opened) == 3, opened


def test_an_idle_session_lets_go_of_the_file(tmp_path):
    db = tmp_path / "w.duckdb"
    wh.query("SELECT 1", path=db)
    with wh.session(db):
        wh.query("SELECT count(*) FROM runs", path=db)
        session = wh_connection._held.session
        assert session.con is not None
        deadline = time.monotonic() + 30
        while session.con is not None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert session.con is None
        # another process can write now, while this one is still in its session
        done = subprocess.run([sys.executable, "-c", "import duckdb, sys; duckdb.connect(sys.argv[1]).close()",
                               str(db)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert int(wh.query("SELECT count(*) AS n FROM runs", path=db)["n"][0]) == 0
    assert session.con is None


def test_a_dead_writers_marker_is_ignored(tmp_path):
    db = tmp_path / "w.duckdb"
    wh.query("SELECT 1", path=db)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (tmp_path / f"w.duckdb{wh_connection.WAITING_SUFFIX}{gone.pid}").touch()
    assert not wh.writer_waiting(db)
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / f"w.duckdb{wh_connection.WAITING_SUFFIX}{alive.pid}").touch()
        assert wh.writer_waiting(db)
    finally:
        alive.kill()
        alive.wait()
    assert not wh.writer_waiting(db)


def test_a_reader_gives_way_to_a_waiting_writer_for_at_most_the_lock_wait(tmp_path, monkeypatch):
    db = tmp_path / "w.duckdb"
    wh.query("SELECT 1", path=db)
    monkeypatch.setattr(wh_connection, "LOCK_WAIT_S", 0.5)
    waiting = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / f"w.duckdb{wh_connection.WAITING_SUFFIX}{waiting.pid}").touch()
        began = time.monotonic()
        # the marker stays (its writer never gets to write): the read waits its turn, then reads
        assert wh.query("SELECT count(*) AS n FROM loads", path=db)["n"].tolist() == [0]
        assert time.monotonic() - began >= 0.5
    finally:
        waiting.kill()
        waiting.wait()
