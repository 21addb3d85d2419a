"""A batch hashes its next file while the current one loads (ingest/pipeline/hash_ahead.py): each
load's ledger row carries its own file's sha256, a file changed after it was hashed ahead is
hashed again, and a bill counts its lines from the count taken ahead."""
from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import duckdb

from ingest.engine import line_numbers
from ingest.pipeline import hash_ahead, loader

HEADER = "timestamp,host,gpu_index,gpu_uuid,gpu_name,power_w,energy_mj,gpu_util_pct,mem_used_mib\n"


def trace(path: Path, host: str, samples: int) -> Path:
    lines = [f"2026-09-14T00:{minute:02d}:{second:02d}Z,{host},0,GPU-{host},A100,{100 + second},,{second},1\n"
             for minute in range(samples // 6 + 1) for second in range(0, 60, 10)][:samples]
    path.write_text(HEADER + "".join(lines))
    return path


def test_digest_and_newlines_are_the_files(tmp_path: Path) -> None:
    data = b"a,b\n1,2\n\n3,4"  # the last line without a newline
    path = tmp_path / "x.csv"
    path.write_bytes(data)
    digest, stat, newlines, ends_with_newline = hash_ahead.digest_of(path)
    assert (digest, newlines, ends_with_newline) == (hashlib.sha256(data).hexdigest(), 3, False)
    assert stat.st_size == len(data)


def test_a_file_changed_after_it_was_hashed_is_not_taken(tmp_path: Path) -> None:
    path = tmp_path / "x.csv"
    path.write_bytes(b"one\n")
    ahead = hash_ahead.Ahead(path)
    assert ahead.take(tmp_path / "other.csv") is None  # another file: nothing
    assert ahead.take(path)[0] == hashlib.sha256(b"one\n").hexdigest()
    ahead = hash_ahead.Ahead(path)
    ahead.thread.join()
    path.write_bytes(b"two lines\nnow\n")
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert ahead.take(path) is None


def test_each_load_of_a_batch_carries_its_own_files_sha256(warehouse: Path, tmp_path: Path) -> None:
    files = [trace(tmp_path / f"node-{n}_2026-09.csv", f"node-{n}", 30 + n) for n in range(4)]
    with loader.batch(files):
        summaries = [loader.ingest_file(path) for path in files]
    assert [s.rows_loaded for s in summaries] == [30, 31, 32, 33]
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        stored = dict(con.execute("SELECT path, sha256 FROM loads").fetchall())
    finally:
        con.close()
    assert stored == {str(path): hashlib.sha256(path.read_bytes()).hexdigest() for path in files}


def test_the_line_count_taken_ahead_is_the_files(tmp_path: Path, monkeypatch) -> None:
    """The count a bill's reader asks for (line_numbers.count_lines) is the file's own, whether
    it was hashed ahead or in turn."""
    first, second = tmp_path / "a.csv", tmp_path / "b.csv"
    first.write_bytes(b"h\n1\n")
    second.write_bytes(b"h\n1\n2\n3")  # 4 lines, the last without a newline
    monkeypatch.setattr(loader._batch, "files", [first, second], raising=False)
    loader._batch.ahead = None
    assert loader._sha256(first) == hashlib.sha256(first.read_bytes()).hexdigest()
    loader._hash_next(first)
    assert loader._batch.ahead.path == second
    assert loader._sha256(second) == hashlib.sha256(second.read_bytes()).hexdigest()
    from ingest.engine.staging import Source
    assert line_numbers.count_lines(Source.of(second, str(second))) == 4
    loader._batch.ahead = loader._batch.files = None
