"""The loader's pass over a file before staging (ingest/pipeline/loader.py `_sha256`): the file's
sha256 and its newline count, each chunk hashed on a thread while the next is read. Expected
values come from hashlib over the whole bytes and from counting the lines written here."""
from __future__ import annotations

import hashlib
import random

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
