"""Loads you can manage: `mlcost loads`, `mlcost unload`, a reload with other options replacing the
earlier load, the status words of a file nothing of which loaded, the local-time warning."""
from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import duckdb
import pytest

from ingest.engine import values
from ingest.engine import warehouse as wh
from ingest.engine.report import summary_lines
from ingest.pipeline import loader
from mlcost import cli

TRACE_HEADER = "timestamp,host,gpu_index,gpu_uuid,gpu_name,power_w,energy_mj,gpu_util_pct,mem_used_mib"
NVIDIA_SMI = ["timestamp, index, power.draw [W], utilization.gpu [%], memory.used [MiB]",
              "2025/05/05 20:58:44.813, 0, 62.39 W, 0 %, 122 MiB",
              "2025/05/05 20:58:54.813, 0, 80.00 W, 40 %, 2000 MiB",
              "2025/05/05 20:59:04.813, 0, 81.00 W, 45 %, 2000 MiB"]


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def rows(sql: str, params: list | None = None) -> list[tuple]:
    with wh.connect() as con:
        return con.execute(sql, params or []).fetchall()


def trace(path: Path, start: datetime, samples: int, util: float) -> Path:
    """A gpu-collector file: one GPU of host h sampled every 10 s from `start`."""
    lines = [TRACE_HEADER]
    for i in range(samples):
        at = (start + timedelta(seconds=10 * i)).strftime("%Y-%m-%dT%H:%M:%SZ")
        lines.append(f"{at},h,0,GPU-a,NVIDIA A100,{100 + i % 7},,{util},1000")
    return write(path, lines)


def runs_file(path: Path, runs: dict[str, str]) -> Path:
    return write(path, [json.dumps({"run_id": run_id, "project": project, "start_time": "2025-05-05T10:00:00Z",
                                    "end_time": "2025-05-05T11:00:00Z", "price_per_hour_usd": 2,
                                    "eval_history": [{"elapsed_s": 60, "value": 1.0}]})
                        for run_id, project in runs.items()])


def mlcost(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_unload_by_file_removes_its_rows_and_rejects_and_nothing_else(tmp_path, warehouse, capsys):
    keep = runs_file(tmp_path / "keep.jsonl", {"k1": "a", "k2": "a"})
    wrong = write(tmp_path / "wrong.jsonl", [*runs_file(tmp_path / "w.jsonl", {"w1": "b", "w2": "b", "w3": "b"})
                                             .read_text().splitlines(), "{not json"])
    assert [loader.ingest_file(p).status for p in (keep, wrong)] == ["loaded", "loaded"]

    code, out, _ = mlcost(capsys, "loads", "--json")
    ledger = json.loads(out)
    assert code == 0
    assert [(r["load_id"], Path(r["path"]).name, r["kind"], r["rows_loaded"], r["rows_rejected"], r["rows_current"])
            for r in ledger] == [(2, "wrong.jsonl", "runs", 3, 1, 3), (1, "keep.jsonl", "runs", 2, 0, 2)]

    code, out, _ = mlcost(capsys, "unload", str(wrong))
    assert code == 0 and "unloaded load 2" in out and "3 from runs" in out
    assert rows("SELECT run_id FROM runs ORDER BY 1") == [("k1",), ("k2",)]
    assert rows("SELECT DISTINCT run_id FROM run_evals ORDER BY 1") == [("k1",), ("k2",)]
    assert rows("SELECT count(*) FROM rejects") == [(0,)]
    assert rows("SELECT load_id FROM loads") == [(1,)]
    assert rows("SELECT load_id, rows_removed, reason FROM unloads") == [(2, 6, "unloaded")]  # 3 runs, 3 evals
    # the file can be loaded again afterwards, as new
    assert loader.ingest_file(wrong).status == "loaded"


def test_unload_by_id_and_by_name_and_what_is_not_found(tmp_path, warehouse, capsys):
    first = runs_file(tmp_path / "a.jsonl", {"a1": "p"})
    loader.ingest_file(first, display_name="upload.jsonl")  # as the Data page records an upload
    assert mlcost(capsys, "unload", "upload.jsonl")[0] == 0
    loader.ingest_file(first)
    assert mlcost(capsys, "unload", "2")[0] == 0
    assert rows("SELECT count(*) FROM runs") == [(0,)]
    code, _, err = mlcost(capsys, "unload", "7")
    assert code == 1 and "no load matches '7'" in err


def test_latest_wins_an_unloaded_load_takes_the_rows_it_replaced_with_it(tmp_path, warehouse, capsys):
    """Documented: unloading the newer file of a run does not bring its older version back."""
    loader.ingest_file(runs_file(tmp_path / "old.jsonl", {"r1": "old", "r2": "old"}))
    newer = runs_file(tmp_path / "new.jsonl", {"r1": "new"})
    loader.ingest_file(newer)
    assert rows("SELECT run_id, project FROM runs ORDER BY 1") == [("r1", "new"), ("r2", "old")]
    assert mlcost(capsys, "unload", str(newer))[0] == 0
    assert rows("SELECT run_id, project FROM runs ORDER BY 1") == [("r2", "old")]


def test_a_reload_with_another_zone_replaces_the_earlier_load(tmp_path, warehouse):
    path = write(tmp_path / "gpu.csv", NVIDIA_SMI)
    first = loader.ingest_file(path, host="box")
    assert first.status == "loaded" and len(first.warnings) == 1 and "--tz" in first.warnings[0]
    assert any(line.startswith("  warning: nvidia-smi writes the local time") for line in summary_lines(first))
    assert loader.ingest_file(path, host="box").status == "already_loaded"  # same options: nothing to do

    paris = values.zone("Europe/Paris")
    again = loader.ingest_file(path, tz=paris, host="box")
    assert (again.status, again.rows_loaded, again.replaced, again.warnings) == ("loaded", 3, [1], [])
    assert "replaces load 1" in summary_lines(again)[0]
    assert again.to_json()["replaced_load_ids"] == [1]
    assert rows("SELECT load_id, kind, options FROM loads") == [(2, "nvidia-smi", "tz=Europe/Paris host=box")]
    expected = [datetime(2025, 5, 5, 20, 58, 44, 813000, tzinfo=ZoneInfo("Europe/Paris")).astimezone(timezone.utc)
                + timedelta(seconds=10 * i) for i in range(3)]
    stored = [r[0] for r in rows("SELECT sampled_at FROM gpu_samples ORDER BY 1")]
    assert stored == expected  # 18:58:44.813 UTC: the earlier reading (20:58 UTC) is gone
    assert rows("SELECT min(minute) FROM gpu_minutes")[0][0] == expected[0].replace(second=0, microsecond=0)
    assert rows("SELECT load_id, reason FROM unloads") == [(1, "replaced")]
    # with --tz the same file says nothing about zones; with another host it replaces again
    assert loader.ingest_file(path, tz=paris, host="other").replaced == [2]
    assert rows("SELECT DISTINCT host FROM gpu_samples") == [("other",)]


def test_a_reload_that_fails_midway_leaves_the_earlier_load_whole(tmp_path, warehouse, monkeypatch):
    """Replacing a load is one transaction with the new load's merge: when the merge fails after the
    earlier load's rows were removed, every one of them is back (ledger, samples, minutes)."""
    from ingest.derived import gpu_rollups
    from ingest.engine import wh_merge

    path = write(tmp_path / "gpu.csv", NVIDIA_SMI)
    assert loader.ingest_file(path, host="box").status == "loaded"
    tables = ("loads", "gpu_samples", "gpu_minutes", "gpu_days", "unloads")
    before = {table: rows(f"SELECT * FROM {table} ORDER BY ALL") for table in tables}
    assert before["gpu_samples"] and before["gpu_minutes"] and not before["unloads"]
    removed = []
    real_remove = wh_merge._remove_loads

    def remove_then_fail_later(stage, load_ids):
        removed.extend(real_remove(stage, load_ids))
        assert stage.execute("SELECT count(*) FROM wh.gpu_samples").fetchall()[0][0] == 0  # gone, inside
        return removed

    real_replace, calls = gpu_rollups.replace, []

    def fail_on_the_new_rollups(*args, **kwargs):  # the first call rewrites the removed load's GPUs
        calls.append(1)
        if len(calls) > 1:
            raise RuntimeError("disk full")
        return real_replace(*args, **kwargs)

    monkeypatch.setattr(wh_merge, "_remove_loads", remove_then_fail_later)
    monkeypatch.setattr(gpu_rollups, "replace", fail_on_the_new_rollups)
    again = loader.ingest_file(path, tz=values.zone("Europe/Paris"), host="box")
    assert again.status == "failed" and "disk full" in again.error and removed == [1]
    assert {table: rows(f"SELECT * FROM {table} ORDER BY ALL") for table in tables} == before


def test_a_reload_as_another_kind_replaces_the_earlier_load(tmp_path, warehouse):
    path = runs_file(tmp_path / "runs.jsonl", {"r1": "p"})
    assert loader.ingest_file(path).kind == "runs"
    forced = loader.ingest_file(path, kind="serving")  # wrong kind: every line refused
    assert (forced.status, forced.rows_loaded, forced.rows_rejected, forced.replaced) == ("rejected", 0, 1, [1])
    assert summary_lines(forced)[0].startswith(f"REJECTED {path} [serving]: 0 rows loaded, 1 rejected")
    assert forced.to_json()["status"] == "rejected"
    assert rows("SELECT count(*) FROM runs") == [(0,)]
    assert rows("SELECT kind FROM loads") == [("serving",)]


def test_unloading_traces_recomputes_the_rollups_of_the_gpus_touched(tmp_path, warehouse, capsys):
    """The rollups after unloading file B equal those of a warehouse that only ever saw file A."""
    start = datetime(2025, 5, 5, 10, 0, tzinfo=timezone.utc)
    a = trace(tmp_path / "a.csv", start, 60, util=0)  # 10 idle minutes
    b = trace(tmp_path / "b.csv", start + timedelta(minutes=10), 60, util=0)  # extends the idle stretch
    other = trace(tmp_path / "c.csv", start, 30, util=90)
    other.write_text(other.read_text().replace(",h,0,GPU-a,", ",g,1,GPU-c,"))
    for path in (a, other, b):
        assert loader.ingest_file(path).status == "loaded"
    assert mlcost(capsys, "unload", str(b))[0] == 0

    def rollups(db: Path) -> tuple[list, list]:
        con = duckdb.connect(str(db), read_only=True)
        try:
            return (con.execute("SELECT * FROM gpu_minutes ORDER BY ALL").fetchall(),
                    con.execute("SELECT * FROM gpu_gaps ORDER BY ALL").fetchall())
        finally:
            con.close()

    reference = tmp_path / "reference.duckdb"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLCOST_DB", str(reference))
        for path in (shutil.copy(a, tmp_path / "a2.csv"), shutil.copy(other, tmp_path / "c2.csv")):
            loader.ingest_file(Path(path))
    assert rollups(warehouse) == rollups(reference)
    assert len(rollups(warehouse)[0]) == 10 + 5


def test_the_data_page_lists_loads_and_unloads_one(tmp_path, warehouse):
    from streamlit.testing.v1 import AppTest

    from tests.conftest import REPO_ROOT

    loader.ingest_file(runs_file(tmp_path / "keep.jsonl", {"k1": "a"}))
    loader.ingest_file(runs_file(tmp_path / "wrong.jsonl", {"w1": "b", "w2": "b"}))
    at = AppTest.from_file(str(REPO_ROOT / "app" / "main.py"), default_timeout=60).run()
    at.switch_page("app_pages/data.py").run()
    assert not at.exception
    history = at.dataframe[0].value
    assert history[["load_id", "rows_loaded", "rows_current", "options"]].values.tolist() == [[2, 2, 2, ""], [1, 1, 1, ""]]
    picker = at.selectbox(key="unload_pick")
    assert picker.value is None  # nothing preselected: a removal is always the user's pick
    (wrong,) = [option for option in picker.options if option.startswith(f"2: {tmp_path / 'wrong.jsonl'} (runs,")]
    picker.select(wrong)
    at.button(key="FormSubmitter:unload-Unload").click()
    at = at.run()
    assert not at.exception, [e.message for e in at.exception]
    assert any(s.value.startswith("Unloaded 2: ") and "2 runs" in s.value for s in at.success)
    assert at.dataframe[0].value["load_id"].tolist() == [1]
    assert rows("SELECT run_id FROM runs") == [("k1",)]


def test_a_warehouse_made_before_the_options_column_gains_it(tmp_path, warehouse):
    con = duckdb.connect(str(warehouse))
    con.execute("CREATE TABLE loads (load_id BIGINT PRIMARY KEY, path VARCHAR NOT NULL, sha256 VARCHAR NOT NULL, "
                "kind VARCHAR NOT NULL, rows_loaded BIGINT NOT NULL, rows_rejected BIGINT NOT NULL, "
                "loaded_at TIMESTAMPTZ NOT NULL, UNIQUE (sha256, kind))")
    con.execute("INSERT INTO loads VALUES (7, 'old.jsonl', 'abc', 'runs', 1, 0, now())")
    con.close()
    assert rows("SELECT load_id, options FROM loads") == [(7, None)]
    assert wh.find_load("abc", "runs", options="") == 7  # no options recorded: read with none
