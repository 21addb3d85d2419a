"""The next file of a batch hashed while the current one loads.

A file's sha256 (the ledger's key: is this content loaded already?) is needed before its parse
starts, and reading it costs ~0.2 s of one core per 120 MB (sha256 and the newline count the
bill reader uses, ingest/engine/line_numbers.py), every other core idle meanwhile. In a batch
of files (loader.batch) the loader hashes file k+1 on a thread while file k is parsed and
merged: DuckDB releases the GIL, so the hash runs beside it. The same digest and count as
hashing in turn (`take` gives them only for the file as it is now: the same device, inode, size
and modification time as when it was read, else None and the caller hashes it again).
"""
from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

CHUNK_BYTES = 1 << 20


def digest_of(path: Path) -> tuple[str, os.stat_result, int, bool]:
    """The file's sha256 (hex), its fstat as read, its newlines and whether its last byte is one."""
    digest = hashlib.sha256()
    newlines, last = 0, b"\n"
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            digest.update(chunk)
            newlines += chunk.count(b"\n")
            last = chunk[-1:]
        stat = os.fstat(handle.fileno())
    return digest.hexdigest(), stat, newlines, last == b"\n"


def _identity(stat: os.stat_result) -> tuple:
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns


class Ahead:
    """One file being hashed on a thread of its own (a daemon: a batch cut short does not wait)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.found: tuple[str, os.stat_result, int, bool] | None = None
        self.thread = threading.Thread(target=self._run, name="mlcost-hash-ahead", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.found = digest_of(self.path)
        except Exception:  # noqa: BLE001 - unreadable: the loader hashes it in turn and says why
            self.found = None

    def take(self, path: Path) -> tuple[str, os.stat_result, int, bool] | None:
        """What digest_of(path) gives, when this is that file and it has not changed since it
        was read (waits for the thread); else None."""
        if path != self.path:
            return None
        self.thread.join()
        if self.found is None:
            return None
        try:
            now = os.stat(path)
        except OSError:
            return None
        return self.found if _identity(now) == _identity(self.found[1]) else None
