"""The next line batch split on a thread (ingest/engine/read_ahead.py): the same batches, progress
calls and errors as reading on the caller's thread, and a JSON-lines file of many batches loads
the rows and rejects plain Python expects."""
from __future__ import annotations

import json
import threading
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest

from ingest.engine import batch_sql, line_marks, read_ahead, staging
from ingest.pipeline import loader


def lines_file(path: Path, count: int, bad_at: int | None = None) -> Path:
    data = "".join(f'{{"n": {i}, "text": "{"x" * (i % 50)}"}}\n' for i in range(count)).encode()
    if bad_at is not None:
        data = data[:bad_at] + b"\xff" + data[bad_at:]
    path.write_bytes(data)
    return path


def plain(src: staging.Source) -> tuple[list, list]:
    """Every batch's rows and the progress calls, read on this thread without Ahead."""
    calls: list[tuple[int, int]] = []
    src = staging.Source(src.path, src.name, src.compression, lambda done, lines: calls.append((done, lines)))
    return [batch.to_pylist() for batch in staging.line_batches(src)], calls


def test_the_same_batches_and_progress_calls_on_the_callers_thread(tmp_path, monkeypatch):
    monkeypatch.setattr(staging, "LINE_BATCH_BYTES", 512)  # a batch every few lines
    path = lines_file(tmp_path / "a.jsonl", 400)
    expected, expected_calls = plain(staging.Source.of(path))
    assert len(expected) > 20
    calls, threads, made_on = [], [], []

    def progress(done: int, lines: int) -> None:
        calls.append((done, lines))
        threads.append(threading.current_thread())

    def make(source):
        for batch in staging.line_batches(source):
            made_on.append(threading.current_thread())
            yield batch

    ahead = read_ahead.Ahead(staging.Source.of(path, progress=progress), make)
    got = [next(ahead).to_pylist()]  # the first on this thread
    ahead.start()
    got += [batch.to_pylist() for batch in ahead]
    ahead.close()
    assert got == expected
    assert [row["line"] for batch in got for row in batch] == list(range(1, 401))
    assert calls == expected_calls
    assert set(threads) == {threading.current_thread()}  # progress is drawn by the caller
    assert made_on[0] is threading.current_thread()
    assert all(thread is not threading.current_thread() for thread in made_on[1:])  # the rest on the thread


def test_an_error_of_the_split_is_raised_where_its_batch_would_come(tmp_path, monkeypatch):
    monkeypatch.setattr(staging, "LINE_BATCH_BYTES", 512)
    path = lines_file(tmp_path / "bad.jsonl", 400, bad_at=9000)
    with pytest.raises(staging.NotText) as plain_error:
        list(staging.line_batches(staging.Source.of(path)))
    before = sum(1 for _ in zip(range(10_000), _batches_until_error(staging.line_batches(staging.Source.of(path)))))
    ahead = read_ahead.Ahead(staging.Source.of(path), staging.line_batches)
    next(ahead)
    ahead.start()
    handed = 1
    with pytest.raises(staging.NotText) as error:
        for _ in ahead:
            handed += 1
    ahead.close()
    assert error.value.byte == plain_error.value.byte == 9000
    assert handed == before


def test_the_thread_splits_one_batch_ahead_and_no_more(tmp_path, monkeypatch):
    """Memory for one more batch: the next is split only once the caller has taken the one before."""
    import time

    monkeypatch.setattr(staging, "LINE_BATCH_BYTES", 512)
    path = lines_file(tmp_path / "a.jsonl", 400)
    made = []

    def make(source):
        for batch in staging.line_batches(source):
            made.append(batch)
            yield batch

    ahead = read_ahead.Ahead(staging.Source.of(path), make)
    taken = [next(ahead)]
    ahead.start()
    for batch in ahead:
        taken.append(batch)
        time.sleep(0.02)  # the thread has had time to run ahead
        assert len(made) <= len(taken) + 1
    ahead.close()
    assert len(taken) == len(made) > 20


def _batches_until_error(batches):
    try:
        yield from batches
    except staging.NotText:
        return


def test_close_stops_the_thread_before_the_end(tmp_path, monkeypatch):
    monkeypatch.setattr(staging, "LINE_BATCH_BYTES", 512)
    path = lines_file(tmp_path / "a.jsonl", 2000)
    ahead = read_ahead.Ahead(staging.Source.of(path), staging.line_batches)
    next(ahead)
    ahead.start()
    next(ahead)
    ahead.close()
    assert not ahead._thread.is_alive()


def serving_line(i: int) -> str:
    record = {"window_start": f"2026-10-01T{i // 60 % 24:02d}:{i % 60:02d}:00Z", "window_seconds": 60,
              "service": f"svc-{i % 7}", "model_version": "v1", "host": f"h{i}", "requests_total": 10 + i,
              "requests_success": 10 + i, "cost_usd": f"{i}.25"}
    if i % 97 == 5:
        record["requests_success"] = record["requests_total"] + 1  # refused: more successes than requests
    if i % 89 == 3:
        return "{not json"
    line = json.dumps(record)
    return line.replace('"cost_usd": "', '"cost_usd": ').replace('.25"', ".25")  # cost as a JSON number


def test_a_serving_file_of_many_batches_loads_what_plain_python_expects(warehouse, tmp_path, monkeypatch):
    monkeypatch.setattr(staging, "LINE_BATCH_BYTES", 2048)
    monkeypatch.setattr(batch_sql, "JOINED_BYTES", 4096)  # ~20 typed batches: most split on the thread
    marked_on = []  # the thread that marked each batch's lines (line_marks.py), and its first line
    real_marked = line_marks.marked

    def marked(batch, pattern):
        marked_on.append((batch.column("line")[0].as_py(), threading.current_thread()))
        return real_marked(batch, pattern)

    monkeypatch.setattr(line_marks, "marked", marked)
    lines = [serving_line(i) for i in range(600)]
    path = tmp_path / "serving.jsonl"
    path.write_text("\n".join(lines) + "\n")
    summary = loader.ingest_file(path)
    marked_on.sort(key=lambda found: found[0])  # the thread may mark the second batch before this one the first
    assert marked_on[0][0] == 1 and len(marked_on) > 10 and len({line for line, _ in marked_on}) == len(marked_on)
    # every batch marked ahead, the first while the loader opened the stage (batch_sql.read_early)
    assert all(thread is not threading.current_thread() for _, thread in marked_on)
    expected_rows, expected_bad = {}, []
    for number, text in enumerate(lines, 1):  # plain Python over the same lines
        try:
            record = json.loads(text)
        except json.JSONDecodeError:
            expected_bad.append(number)
            continue
        if record["requests_success"] > record["requests_total"]:
            expected_bad.append(number)
            continue
        expected_rows[number] = (record["host"], record["requests_total"], Decimal(str(record["cost_usd"])))
    assert (summary.status, summary.rows_loaded, summary.rows_rejected) == ("loaded", len(expected_rows), len(expected_bad))
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        rows = con.execute("SELECT source_line, host, requests_total, cost_usd FROM serving_windows").fetchall()
        rejects = [line for (line,) in con.execute("SELECT line FROM rejects ORDER BY line").fetchall()]
    finally:
        con.close()
    assert {line: (host, total, cost) for line, host, total, cost in rows} == expected_rows
    assert rejects == expected_bad


def test_a_byte_not_utf8_in_a_batch_read_ahead_fails_the_file_with_its_offset(warehouse, tmp_path, monkeypatch):
    monkeypatch.setattr(staging, "LINE_BATCH_BYTES", 2048)
    monkeypatch.setattr(batch_sql, "JOINED_BYTES", 4096)
    data = "".join(serving_line(i) + "\n" for i in range(400)).encode()
    at = len(data) * 3 // 4  # well past the first batch: split on the thread
    data = data[:at] + b"\xff" + data[at:]
    path = tmp_path / "serving.jsonl"
    path.write_bytes(data)
    where = data.index(b"\xff")
    summary = loader.ingest_file(path)
    assert (summary.status, summary.error) == ("failed", f"{path}: not UTF-8 text (byte {where})")
    if warehouse.exists():  # nothing was merged
        con = duckdb.connect(str(warehouse), read_only=True)
        try:
            assert con.execute("SELECT count(*) FROM loads").fetchone()[0] == 0
        finally:
            con.close()
