"""A call run beside the caller (ingest/pipeline/beside.py) and what the loader runs so: its value
or its error where it is asked for, a discarded result closed, a file that cannot be loaded
leaving no warehouse behind."""
from __future__ import annotations

import json
import threading

import pytest

from ingest.pipeline import loader
from ingest.pipeline.beside import Beside


def test_the_value_and_the_thread_it_was_made_on():
    made_on = []
    beside = Beside(lambda a, b: made_on.append(threading.current_thread()) or a + b, 2, 3)
    assert beside.value() == 5
    assert made_on and made_on[0] is not threading.current_thread()


def test_the_error_is_raised_where_the_value_is_asked_for():
    def fails():
        raise PermissionError(13, "Permission denied")

    beside = Beside(fails)
    with pytest.raises(PermissionError):
        beside.value()
    beside.discard(close=lambda value: pytest.fail("no value to close"))  # the error dropped, nothing closed


def test_discard_closes_the_result():
    closed = []
    Beside(lambda: "stage").discard(close=closed.append)
    assert closed == ["stage"]


@pytest.mark.parametrize("text", ["a plain sentence, not a format mlcost reads\n", "\xff not text\n", ""])
def test_a_file_that_is_not_loaded_leaves_no_warehouse(tmp_path, warehouse, text):
    """The schema is put in place beside the staging only once the kind is known and the file hashed."""
    path = tmp_path / "notes.jsonl"
    path.write_bytes(text.encode("latin-1"))
    summary = loader.ingest_file(path)
    assert summary.error and summary.rows_loaded == 0
    assert not warehouse.exists()


def run_line(i: int, price: str = "2.5") -> str:
    return json.dumps({"run_id": f"r{i}", "start_time": f"2026-10-01T{i % 24:02d}:00:00Z",
                       "end_time": f"2026-10-01T{i % 24:02d}:30:00Z", "price_per_hour_usd": float(price),
                       "gpu_count": 1 + i % 3})


def test_a_runs_file_read_early_loads_the_rows_python_expects(tmp_path, warehouse, monkeypatch):
    """The loader hands the format the batches it began reading before the stage was open
    (batch_sql.read_early): every batch marked on the read-ahead thread, the rows and costs those
    plain Python works out; loaded again, the file is already loaded and nothing waits for its read."""
    import duckdb

    from ingest.engine import batch_sql, line_marks, staging

    monkeypatch.setattr(staging, "LINE_BATCH_BYTES", 2048)
    monkeypatch.setattr(batch_sql, "JOINED_BYTES", 4096)
    marked_on, early = [], []
    real_marked, real_early = line_marks.marked, batch_sql.read_early

    def marked(batch, pattern):
        marked_on.append(threading.current_thread())
        return real_marked(batch, pattern)

    def read_early(definition, src, head):
        early.append(real_early(definition, src, head))
        return early[-1]

    monkeypatch.setattr(line_marks, "marked", marked)
    monkeypatch.setattr(batch_sql, "read_early", read_early)
    from ingest.formats.runs import run_summary
    monkeypatch.setattr(run_summary, "read_early", lambda src, head: read_early(run_summary.RUNS, src, head))
    lines = [run_line(i) for i in range(300)]
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(lines) + "\n")
    summary = loader.ingest_file(path)
    assert (summary.status, summary.rows_loaded, summary.rows_rejected) == ("loaded", 300, 0)
    assert len(early) == 1 and early[0] is not None
    assert len(marked_on) > 5 and all(thread is not threading.current_thread() for thread in marked_on)
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        rows = dict(con.execute("SELECT run_id, cost_usd FROM runs").fetchall())
    finally:
        con.close()
    # 30 minutes at 2.5 USD/h: 1.25 USD each (worked out here, not by the engine)
    assert rows == {json.loads(line)["run_id"]: 2.5 * 0.5 for line in lines}
    again = loader.ingest_file(path)
    assert again.status == "already_loaded" and len(early) == 2


@pytest.mark.parametrize("head, reads_early", [('{"run_id": "a"}', True), ('\ufeff  {"run_id": "a"}', True),
                                               ('[{"run_id": "a"}]', False), ("run_id,started_at", False)])
def test_read_early_only_for_json_lines(tmp_path, head, reads_early):
    from ingest.engine import batch_sql, staging
    from ingest.formats.runs import run_summary

    path = tmp_path / "runs.jsonl"
    path.write_text(head + "\n")
    early = batch_sql.read_early(run_summary.RUNS, staging.Source.of(path), head)
    assert (early is not None) is reads_early
    if early is not None:
        assert [batch.column_names for batch in early] == [["line", "raw", "quirk_found", "key_marks"]]
        early.close()


def test_close_without_waiting_leaves_the_thread_to_stop_on_its_own(tmp_path):
    """Ahead.close(wait=False) returns while a batch is being split; the thread then stops and closes the file."""
    from ingest.engine import read_ahead, staging

    path = tmp_path / "a.jsonl"
    path.write_text('{"a": 1}\n')
    splitting, go_on, closed = threading.Event(), threading.Event(), threading.Event()

    def make(_src):
        try:
            splitting.set()
            go_on.wait(5)
            yield "batch"
            yield "next"
        finally:
            closed.set()

    ahead = read_ahead.Ahead(staging.Source.of(path), make)
    ahead.start()
    assert splitting.wait(5)
    ahead.close(wait=False)
    assert ahead._thread.is_alive() and not closed.is_set()  # not waited for
    go_on.set()
    ahead._thread.join(5)
    assert not ahead._thread.is_alive() and closed.is_set()


def test_a_one_file_batch_whose_merge_stored_everything_does_not_settle_again(tmp_path, warehouse, monkeypatch):
    """The end of a batch stores what is left for later unless its last file's merge, not deferred,
    did (pending.take); a file found already loaded leaves it to the end, as before."""
    from ingest.engine import warehouse as wh

    settled = []
    real = wh.settle_derived
    monkeypatch.setattr(wh, "settle_derived", lambda *args: settled.append(True) or real(*args))
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(run_line(i) for i in range(5)) + "\n")
    with loader.batch([path]):
        assert loader.ingest_file(path).status == "loaded"
    assert settled == []
    with loader.batch([path]):
        assert loader.ingest_file(path).status == "already_loaded"
    assert settled == [True]
    other = tmp_path / "more.jsonl"
    other.write_text(run_line(7) + "\n")
    with loader.batch([path, other]):  # two files: deferred merges, settled at the end as before
        for each in (path, other):
            loader.ingest_file(each)
    assert settled == [True, True]
