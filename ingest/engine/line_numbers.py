"""Physical line numbers of a text file's records, found by vectorized scans of its bytes.

DuckDB's CSV reader returns rows without their line numbers and numbers a rejected line by
records (a newline inside quotes does not count, a blank line does). These scans give the rest:
how many physical lines the file has (when that equals the records DuckDB saw, every record is
one line and none is blank: row k is line k + 1 plus the rejected lines before it), and, for a
file with quoted newlines or blank lines, where each record starts. Memory stays flat: the file
is scanned in blocks.
"""
from __future__ import annotations

import io
from collections.abc import Iterator

import numpy as np

from ingest.engine.staging import Source

BLOCK_BYTES = 32 << 20
NEWLINE, QUOTE, RETURN = 10, 34, 13


def _blocks(src: Source) -> Iterator[np.ndarray]:
    """The decompressed bytes of the file as uint8 arrays of up to BLOCK_BYTES."""
    if src.compression is None:  # one reused buffer: the file never counts toward memory
        buffer = np.empty(BLOCK_BYTES, np.uint8)
        with open(src.path, "rb", buffering=0) as handle:
            while size := handle.readinto(memoryview(buffer)):
                yield buffer[:size]
        return
    with src.open_binary() as stream:
        while block := stream.read(BLOCK_BYTES):
            yield np.frombuffer(block, np.uint8)


# Newlines of files already read whole (the loader's sha256 pass counts them on its way through
# the bytes, so a bill is not read once more to count them): file identity -> (newlines, whether
# the last byte is a newline)
_COUNTED: dict[tuple, tuple[int, bool]] = {}


def _identity(stat) -> tuple:
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns


def remember_count(stat, newlines: int, ends_with_newline: bool) -> None:
    """Note the newlines of an uncompressed file read whole (`stat`: os.fstat of it as read)."""
    _COUNTED.clear()  # one file at a time: nothing accumulates over a long batch
    _COUNTED[_identity(stat)] = (newlines, ends_with_newline)


def count_lines(src: Source) -> int:
    """Physical lines of the file (a last line without a newline counts)."""
    if src.compression is None:
        import os

        known = _COUNTED.get(_identity(os.stat(src.path)))
        if known is not None:
            newlines, ends_with_newline = known
            return newlines + (not ends_with_newline)
    lines, last = 0, NEWLINE
    for block in _blocks(src):
        lines += int(np.count_nonzero(block == NEWLINE))
        last = int(block[-1])
    return lines + (last != NEWLINE)


def record_starts(src: Source, quoted: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """For each record as DuckDB counts them (split at newlines outside double quotes, blank
    records included): the physical line it starts on (1-based) and whether it is blank."""
    starts: list[np.ndarray] = []
    blanks: list[np.ndarray] = []
    quotes = 0  # quotes seen so far: odd means inside a quoted field
    line = 0  # physical lines before this block
    open_start, open_bytes, open_first = 1, 0, -1  # the unfinished record: first line, size, first byte
    for block in _blocks(src):
        newlines = np.flatnonzero(block == NEWLINE)
        if quoted:
            quote_at = np.flatnonzero(block == QUOTE)
            parity = (np.searchsorted(quote_at, newlines) + quotes) & 1
            quotes += len(quote_at)
            ends = newlines[parity == 0]  # the newlines that end a record
        else:
            ends = newlines
        if len(ends):
            end_lines = line + np.searchsorted(newlines, ends) + 1
            begins = np.concatenate(([0], ends[:-1] + 1))  # where each record's bytes start here
            lengths = ends - begins
            firsts = block[np.minimum(begins, len(block) - 1)].astype(np.int16)
            if open_bytes:
                lengths[0] += open_bytes
                firsts[0] = open_first
            blank = (lengths == 0) | ((lengths == 1) & (firsts == RETURN))
            starts.append(np.concatenate(([open_start], end_lines[:-1] + 1)))
            blanks.append(blank)
            open_start, open_bytes = int(end_lines[-1]) + 1, 0
            rest = block[int(ends[-1]) + 1:]
        else:
            rest = block
        if len(rest):
            if not open_bytes:
                open_first = int(rest[0])
            open_bytes += len(rest)
        line += len(newlines)
    if open_bytes:  # a last record without a newline
        starts.append(np.array([open_start]))
        blanks.append(np.array([open_bytes == 1 and open_first == RETURN]))
    if not starts:
        return np.zeros(0, np.int64), np.zeros(0, bool)
    return np.concatenate(starts).astype(np.int64), np.concatenate(blanks).astype(bool)


def line_texts(src: Source, spans: dict[int, int], limit: int = 500) -> dict[int, str]:
    """The text of physical lines `first`..`last` for each (first, last) in spans, joined with
    newlines and cut to `limit` characters (a reject's raw text)."""
    wanted = sorted(spans.items())
    if not wanted:
        return {}
    found: dict[int, list[str]] = {}
    position = 0
    # a raw text shows a byte that is not UTF-8 as U+FFFD (its line says why it was refused)
    with io.TextIOWrapper(src.open_binary(), encoding="utf-8-sig", errors="replace", newline="") as text:
        for number, line in enumerate(text, start=1):
            while position < len(wanted) and wanted[position][1] < number:
                position += 1
            if position == len(wanted):
                break
            for first, last in wanted[position:]:
                if first > number:
                    break
                if first <= number <= last:
                    found.setdefault(first, []).append(line.rstrip("\r\n"))
    return {first: "\n".join(parts)[:limit] for first, parts in found.items()}
