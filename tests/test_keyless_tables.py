"""The load-path tables without PRIMARY KEY (ingest/schema.sql, ingest/engine/wh_migrate.py): a warehouse
made with the keys is rebuilt without them, every row kept; the merge alone keeps one row per key.

Expected rows are written out from the input lines here (which line of which file should win), never
read back from the code under test.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import duckdb
import pytest

from ingest.engine import warehouse as wh
from ingest.engine import wh_connection, wh_merge, wh_migrate
from ingest.pipeline import loader
from tests.conftest import REPO_ROOT, SAMPLE_DIR

UTC = timezone.utc
BASE = "6bb17cb"  # main before the keys went: its schema.sql declares them
KEYED_BEFORE = {  # the keys that commit's schema.sql declared (billing_lines' went earlier, in 737a615)
    "runs": "run_id", "run_evals": "run_id, seq", "serving_windows": "window_key",
    "run_gpu_energy": "run_id", "billing_line_runs": "line_key", "billing_lines": "line_key",
}
SAMPLES = [SAMPLE_DIR / "runs.jsonl", SAMPLE_DIR / "serving_windows.jsonl.gz",
           SAMPLE_DIR / "billing" / "focus_2026-10.csv.gz", SAMPLE_DIR / "gpu_traces" / "gpu-node-1_2026-10.csv.gz"]
# Rows the migration must keep; the derived ones are also stored again by _put_schema (same rules).
COPIED = ("runs", "run_evals", "serving_windows", "billing_lines")
DERIVED = ("run_gpu_energy", "billing_line_runs")


def keys(path: Path) -> set[tuple[str, str]]:
    """(table, constraint type) of every PRIMARY KEY and UNIQUE constraint in the file."""
    with duckdb.connect(str(path), read_only=True) as con:
        return set(con.execute("SELECT table_name, constraint_type FROM duckdb_constraints() "
                               "WHERE constraint_type IN ('PRIMARY KEY', 'UNIQUE')").fetchall())


def differences(path: Path, before: Path, table: str) -> tuple[int, int, int, int]:
    """Rows of `table` in `path` and in `before`, and the rows each has that the other has not
    (EXCEPT ALL, columns of `before` by name). The derived tables are stored again on the way (the
    same rules, DOUBLE sums in another order): their DOUBLEs are compared to 9 significant digits."""
    with duckdb.connect(str(path), read_only=True) as con:
        con.execute(f"ATTACH '{before}' AS old (READ_ONLY)")
        columns = ", ".join(
            f'round("{name}" / 10 ** (floor(log10(abs(nullif("{name}", 0)))) - 8)) * 10 ** (floor(log10(abs('
            f'nullif("{name}", 0)))) - 8)' if table in DERIVED and kind == "DOUBLE" else f'"{name}"'
            for name, kind in con.execute(
                "SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = 'old' AND table_name = ? "
                "ORDER BY column_index", [table]).fetchall())
        count = con.execute(f"SELECT count(*) FROM main.{table}").fetchone()[0]
        old = con.execute(f"SELECT count(*) FROM old.{table}").fetchone()[0]
        new_only = con.execute(f"SELECT count(*) FROM (SELECT {columns} FROM main.{table} EXCEPT ALL "
                               f"SELECT {columns} FROM old.{table})").fetchone()[0]
        old_only = con.execute(f"SELECT count(*) FROM (SELECT {columns} FROM old.{table} EXCEPT ALL "
                               f"SELECT {columns} FROM main.{table})").fetchone()[0]
    return count, old, new_only, old_only


def open_for_writing(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wh_connection, "_schema_ready", set())  # as a new process would
    with wh.connect(path):
        pass


def assert_migrated(path: Path, before: Path) -> None:
    remaining = {table for table, _ in keys(path)}
    assert remaining.isdisjoint(KEYED_BEFORE), remaining
    assert {"loads", "alerts", "alert_snoozes", "decisions", "import_watermarks"} <= remaining  # kept
    for table in COPIED + DERIVED:
        count, old, new_only, old_only = differences(path, before, table)
        assert (count, new_only, old_only) == (old, 0, 0), table
        assert old > 0, table  # the fixture must hold rows of every table it checks
    with duckdb.connect(str(path), read_only=True) as con:
        assert con.execute(f"SELECT count(*) FROM duckdb_tables() WHERE table_name LIKE "
                           f"'{wh_migrate.ASIDE_PREFIX}%'").fetchone()[0] == 0
        assert con.execute("SELECT sha256 FROM schema_stamp").fetchall() == [(wh_connection._schema()[1],)]


@pytest.fixture(scope="module")
def old_warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A warehouse made by main's code at BASE (schema.sql with the keys), holding the sample runs,
    serving windows, one month's bill and one GPU node's trace; skipped where git has not that commit."""
    folder = tmp_path_factory.mktemp("old")
    archive = subprocess.run(["git", "-C", str(REPO_ROOT), "archive", BASE, "ingest"], capture_output=True)
    if archive.returncode != 0:
        pytest.skip(f"git cannot give commit {BASE} here (a shallow clone?): {archive.stderr.decode()[:200]}")
    code = folder / "code"
    code.mkdir()
    subprocess.run(["tar", "-x", "-C", str(code)], input=archive.stdout, check=True)
    path = folder / "old.duckdb"
    script = ("import sys; from ingest.pipeline import loader; "
              "s = [x for _, x in loader.ingest_paths(sys.argv[1:])]; assert all(x.ok for x in s), s")
    subprocess.run([sys.executable, "-c", script, *map(str, SAMPLES)], check=True, cwd=folder,
                   env={**os.environ, "PYTHONPATH": str(code), "MLCOST_DB": str(path)})
    return path


def test_a_warehouse_made_with_the_keys_loses_them_and_keeps_every_row(old_warehouse, tmp_path, monkeypatch):
    assert set(KEYED_BEFORE) - {"billing_lines"} <= {table for table, _ in keys(old_warehouse)}
    path, before = tmp_path / "wh.duckdb", tmp_path / "before.duckdb"
    shutil.copyfile(old_warehouse, path)
    shutil.copyfile(old_warehouse, before)
    open_for_writing(path, monkeypatch)
    assert_migrated(path, before)
    # once: opened again, nothing to do, and loads still work
    open_for_writing(path, monkeypatch)
    assert_migrated(path, before)
    monkeypatch.setenv("MLCOST_DB", str(path))
    assert loader.ingest_file(SAMPLE_DIR / "billing" / "focus_2026-09.csv.gz").status == "loaded"


def rekey(path: Path) -> None:
    """Make a warehouse of today's schema look like an older one: every table of KEYED_BEFORE
    rebuilt with its key, rows kept, and a schema_stamp of another schema.sql."""
    with duckdb.connect(str(path)) as con:
        for table, key in KEYED_BEFORE.items():
            ddl = con.execute("SELECT sql FROM duckdb_tables() WHERE table_name = ?", [table]).fetchone()[0]
            head, _, _ = ddl.rstrip().rstrip(";").rpartition(")")
            con.execute(f"ALTER TABLE {table} RENAME TO {table}_keyless")
            con.execute(f"{head}, PRIMARY KEY ({key}))")
            con.execute(f"INSERT INTO {table} SELECT * FROM {table}_keyless")
            con.execute(f"DROP TABLE {table}_keyless")
        con.execute("UPDATE schema_stamp SET sha256 = 'older'")


@pytest.fixture
def keyed_warehouse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A warehouse of the samples (this code), re-keyed as an older one was (rekey), and a copy of it."""
    path = tmp_path / "keyed.duckdb"
    monkeypatch.setenv("MLCOST_DB", str(path))
    assert all(s.ok for _, s in loader.ingest_paths([str(p) for p in SAMPLES]))
    rekey(path)
    assert {table for table, kind in keys(path) if kind == "PRIMARY KEY"} >= set(KEYED_BEFORE)
    before = tmp_path / "before.duckdb"
    shutil.copyfile(path, before)
    return path, before


def test_a_re_keyed_warehouse_loses_its_keys_and_keeps_every_row(keyed_warehouse, monkeypatch):
    path, before = keyed_warehouse
    open_for_writing(path, monkeypatch)
    assert_migrated(path, before)


def test_a_migration_that_fails_half_way_leaves_the_warehouse_as_it_was(keyed_warehouse, monkeypatch):
    path, before = keyed_warehouse
    moved: list[str] = []
    original = wh_migrate.move_back

    def fail_after_one(con, names):
        original(con, names[:1])  # one table copied back, then a failure
        moved.extend(names[:1])
        raise OSError("disk full")

    monkeypatch.setattr(wh_migrate, "move_back", fail_after_one)
    monkeypatch.setattr(wh_connection, "_schema_ready", set())
    with pytest.raises(OSError, match="disk full"):
        with wh.connect(path):
            pass
    assert moved
    assert keys(path) == keys(before)  # every key still there: the transaction rolled back
    for table in COPIED + DERIVED:
        count, old, new_only, old_only = differences(path, before, table)
        assert (count, new_only, old_only) == (old, 0, 0), table
    monkeypatch.setattr(wh_migrate, "move_back", original)
    open_for_writing(path, monkeypatch)  # the next open migrates
    assert_migrated(path, before)


# --- one row per key, kept by the merge alone -------------------------------------------------------

def window(start: str, end: str, host: str = "h1", total: int = 100, error: int = 0) -> dict:
    return {"window_start": start, "window_end": end, "service": "chat", "model_version": "v1", "host": host,
            "requests_total": total, "requests_success": total - error, "requests_error": error}


def run(run_id: str, metric: float, evals: list[float]) -> dict:
    return {"run_id": run_id, "start_time": "2026-08-01T00:00:00Z", "end_time": "2026-08-01T02:00:00Z",
            "val_metric": metric, "eval_history": [{"elapsed_s": i + 1, "value": v} for i, v in enumerate(evals)]}


def write(path: Path, *records: dict) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def at(hour: int) -> str:
    return f"2026-08-01T{hour:02d}:00:00Z"


def load_twice_and_restated(tmp_path: Path) -> tuple[list, list, list]:
    """Serving and runs files loaded, loaded again with a line more, then restated; the stored
    windows (host, start hour, end hour, requests_total, requests_error, load_id), runs (run_id,
    val_metric, load_id) and eval points (run_id, seq, value)."""
    serving = [window(at(0), at(1)), window(at(1), at(2), total=200), window(at(1), at(2), total=210, error=7),
               window(at(2), at(3), total=300), window(at(0), at(1), host="h2", total=400)]
    first = write(tmp_path / "serving.jsonl", *serving)
    again = write(tmp_path / "serving_again.jsonl", *serving, window(at(5), at(6), total=600))
    # the first window restated, and 02:00-04:00 at another granularity overlapping the stored 02:00-03:00
    restated = write(tmp_path / "serving_restated.jsonl", window(at(0), at(1), total=110, error=1),
                     window(at(2), at(4), total=700, error=2))
    runs = [run("r1", 0.1, [0.1, 0.2]), run("r2", 0.5, [0.5]), run("r1", 0.3, [0.3, 0.35, 0.4])]
    runs_first = write(tmp_path / "runs.jsonl", *runs)
    runs_again = write(tmp_path / "runs_again.jsonl", *runs, run("r3", 0.7, []))
    runs_restated = write(tmp_path / "runs_restated.jsonl", run("r1", 0.9, [0.9]))
    for path in (first, again, restated, runs_first, runs_again, runs_restated):
        assert loader.ingest_file(path).status == "loaded", path
    assert loader.ingest_file(first).status == "already_loaded"
    windows = wh.query("SELECT host, hour(window_start) AS s, hour(window_end) AS e, requests_total, requests_error, "
                       "load_id FROM serving_windows ORDER BY ALL")
    stored_runs = wh.query("SELECT run_id, val_metric, load_id FROM runs ORDER BY ALL")
    evals = wh.query("SELECT run_id, seq, value FROM run_evals ORDER BY ALL")
    return ([tuple(r) for r in windows.itertuples(index=False)], [tuple(r) for r in stored_runs.itertuples(index=False)],
            [tuple(r) for r in evals.itertuples(index=False)])


def test_the_merge_keeps_one_row_per_key_from_the_latest_line(tmp_path, warehouse):
    windows, runs, evals = load_twice_and_restated(tmp_path)
    assert keys(warehouse).isdisjoint({(t, "PRIMARY KEY") for t in KEYED_BEFORE})  # nothing else guards them
    # loads: 1 serving, 2 serving again (+05:00), 3 restated, 4 runs, 5 runs again (+r3), 6 runs restated
    assert windows == [
        ("h1", 0, 1, 110, 1, 3),   # restated by the third file
        ("h1", 1, 2, 210, 7, 2),   # the later of the two lines in one file, from the second load
        ("h1", 2, 4, 700, 2, 3),   # the 02:00-03:00 window it overlaps is gone
        ("h1", 5, 6, 600, 0, 2),
        ("h2", 0, 1, 400, 0, 2),
    ]
    assert runs == [("r1", 0.9, 6), ("r2", 0.5, 5), ("r3", 0.7, 5)]
    assert evals == [("r1", 0, 0.9), ("r2", 0, 0.5)]


def test_without_the_merges_deletes_the_tables_would_keep_every_copy(tmp_path, warehouse, monkeypatch):
    """The test above can fail: with the merge's deletes taken out, no constraint stops the copies."""
    keyed_by = wh_merge._replaced_keys
    monkeypatch.setattr(wh_merge, "_replaced_keys", lambda stage, tables: keyed_by(stage, tables) and [])
    monkeypatch.setattr(wh_merge, "OVERLAPPING_WINDOWS", "CREATE OR REPLACE TEMP TABLE overlapped_windows AS "
                                                         "SELECT window_key FROM wh.serving_windows WHERE false")
    windows, runs, evals = load_twice_and_restated(tmp_path)
    assert len(windows) == 4 + 5 + 2 and len(runs) == 2 + 3 + 1  # every load's keys (one per key within a file)
    assert len(evals) > 2


def test_overlapped_windows_are_those_plain_python_finds():
    """wh_merge.OVERLAPPING_WINDOWS (an ASOF match on the latest reach) against every pair compared
    in Python: random windows of a few series (a host NULL, lengths and steps mixed, ties in start)."""
    import random

    rng = random.Random(42)
    con = duckdb.connect()
    con.execute("ATTACH ':memory:' AS wh")
    for table in ("wh.serving_windows", "serving_windows"):
        con.execute(f"CREATE TABLE {table} (window_key VARCHAR, service VARCHAR, model_version VARCHAR, "
                    "host VARCHAR, window_start TIMESTAMPTZ, window_end TIMESTAMPTZ)")
    series = [("chat", "v1", "h1"), ("chat", "v1", None), ("chat", "v2", "h1"), ("rank", "v1", "h1")]
    base = datetime(2026, 8, 1, tzinfo=UTC).timestamp()
    windows: dict[str, list[tuple]] = {"wh.serving_windows": [], "serving_windows": []}
    for table, count in (("wh.serving_windows", 400), ("serving_windows", 60)):
        for i in range(count):
            service, version, host = rng.choice(series)
            start = rng.randrange(0, 48 * 60) * 60
            end = start + rng.choice([60, 300, 3600, 7200, 86400])
            windows[table].append((f"{table}-{i}", service, version, host, start, end))
        con.executemany(f"INSERT INTO {table} VALUES (?, ?, ?, ?, to_timestamp(?), to_timestamp(?))",
                        [(k, s, v, h, base + a, base + b) for k, s, v, h, a, b in windows[table]])
    con.execute(wh_merge.OVERLAPPING_WINDOWS)
    found = {key for (key,) in con.execute("SELECT window_key FROM overlapped_windows").fetchall()}
    expected = {w[0] for w in windows["wh.serving_windows"] for n in windows["serving_windows"]
                if w[1:4] == n[1:4] and w[4] < n[5] and n[4] < w[5]}
    assert found == expected
    assert 0 < len(expected) < 400
