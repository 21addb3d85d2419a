"""The loader's pass over a file before staging (ingest/pipeline/loader.py `_sha256`): the file's
sha256 and its newline count, each chunk hashed on a thread while the next is read. Expected
values come from hashlib over the whole bytes and from counting the lines written here."""
from __future__ import annotations

import hashlib
import random
from pathlib import Path

import pytest

from ingest.engine import line_numbers
from ingest.engine.staging import Source
from ingest.pipeline import loader


@pytest.mark.parametrize("lines, last_newline", [(0, True), (1, False), (3, True), (60_000, True), (60_001, False)])
def test_the_hash_and_the_lines_of_a_file_over_several_chunks(tmp_path, monkeypatch, lines, last_newline):
    monkeypatch.setattr(loader, "HASH_CHUNK_BYTES", 64 * 1024)  # ~2.4 MB of lines: dozens of chunks
    rng = random.Random(lines)
    rows = [("x" * rng.randrange(0, 80)) + f",{number}" for number in range(lines)]
    data = "\n".join(rows).encode() + (b"\n" if last_newline and rows else b"")
    path = tmp_path / "file.csv"
    path.write_bytes(data)
    assert loader._sha256(path) == hashlib.sha256(data).hexdigest()
    assert line_numbers.count_lines(Source.of(path)) == lines


def test_chunks_are_hashed_in_the_files_order(tmp_path, monkeypatch):
    """A hash that takes longer for some chunks than reading the next: the digest still takes
    the chunks in order (a slow update is waited for before the next one starts)."""
    import threading
    import time
    import types

    class SlowDigest:
        def __init__(self):
            self.real = hashlib.sha256()
            self.lock = threading.Lock()
            self.calls = 0

        def update(self, chunk):
            with self.lock:
                self.calls += 1
                delay = 0.02 if self.calls % 2 else 0.0  # every other chunk is slow
            time.sleep(delay)
            with self.lock:
                self.real.update(chunk)

        def hexdigest(self):
            return self.real.hexdigest()

    monkeypatch.setattr(loader, "hashlib", types.SimpleNamespace(sha256=SlowDigest))
    monkeypatch.setattr(loader, "HASH_CHUNK_BYTES", 4096)
    data = b"".join(f"{number:07d}\n".encode() for number in range(8_000))  # 64,000 bytes: 16 chunks
    path = tmp_path / "file.csv"
    path.write_bytes(data)
    assert loader._sha256(path) == hashlib.sha256(data).hexdigest()


def test_the_count_stops_when_no_one_asks_for_it(tmp_path, monkeypatch):
    """Once the format is known not to read the count (`counting()` false), the pass stops counting
    and remembers nothing, so count_lines counts for itself; the hash is whole all the same."""
    import os

    monkeypatch.setattr(loader, "HASH_CHUNK_BYTES", 4096)
    data = b"".join(f"{number},x\n".encode() for number in range(5_000))
    path = tmp_path / "file.csv"
    path.write_bytes(data)
    line_numbers._COUNTED.clear()
    asked = []
    assert loader._sha256(path, lambda: asked.append(1) is None and len(asked) < 3) == hashlib.sha256(data).hexdigest()
    assert len(asked) == 3  # asked each chunk until the answer was no, then never again
    assert line_numbers._identity(os.stat(path)) not in line_numbers._COUNTED
    assert line_numbers.count_lines(Source.of(path)) == 5_000
    loader._sha256(path)
    assert line_numbers._COUNTED[line_numbers._identity(os.stat(path))] == (5_000, True)


def test_only_a_bill_has_its_newlines_counted_on_the_way(tmp_path, warehouse, monkeypatch):
    """Detection tells the hash pass: a trace file's stops counting, a CSV bill's keeps on (its
    line numbers read the count)."""
    made = []

    class Recorded(loader._Digest):
        def __init__(self, path):
            super().__init__(path)
            made.append(self)

    monkeypatch.setattr(loader, "_Digest", Recorded)
    trace = tmp_path / "node-a_1.csv"
    trace.write_text("timestamp,host,gpu_index,gpu_uuid,gpu_name,power_w,energy_mj,gpu_util_pct,mem_used_mib\n"
                     + "".join(f"2026-10-01T00:00:{s:02d}Z,node-a,0,GPU-1,L4,{s}.5,{s},1,2\n" for s in range(50)))
    assert loader.ingest_file(trace).rows_loaded == 50
    bill = Path(__file__).parent / "cases" / "billing" / "aws_cur2.csv"
    summary = loader.ingest_file(bill)
    assert summary.kind == loader.detect(bill.name, bill.read_text()).KIND and summary.status == "loaded"
    assert [digest.count_lines for digest in made] == [False, True]
