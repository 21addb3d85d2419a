"""Bounds on what one file may make an ingest read: decompressed size, expansion ratio, line length.

A compressed file is read through `bounded()`, which stops with TooLarge as soon as the
decompressed bytes pass `max_decompressed_bytes`, or `max_ratio` times the compressed bytes read
so far (past a 64 MB floor, so a small, very regular file still loads): a 7 MB gzip that expands
to 2 GB is refused after 64 MB of it, never held. A line longer than `max_line_bytes` is never held either:
staging.line_batches hands it on as `too_long_marker(size)`, and the loader rejects that line
with `too_long_reason` (its number and size), so the rest of the file still loads.
Settings: `[ingest]` in mlcost.toml (ingest/defaults.toml, docs/configuration.md).
"""
from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from typing import IO, Callable

RATIO_FLOOR_BYTES = 64 << 20  # below this much output the ratio is not judged
_MARKER = "\x00mlcost: line too long\x00"
MARKER_RE = re.compile(re.escape(_MARKER) + r"(\d+)")


@dataclass(frozen=True)
class Limits:
    """What one file may expand to (bytes, and times its stored size) and its longest line (bytes)."""

    max_decompressed_bytes: int = 4 << 30
    max_ratio: float = 100.0
    max_line_bytes: int = 1 << 20


class TooLarge(Exception):
    """The file expands past a limit; the message names the file and the limit, in one sentence."""


_current = Limits()


def current() -> Limits:
    """The limits in force (set from the [ingest] settings by configure())."""
    return _current


def configure(limits: Limits) -> None:
    """Put `limits` in force; CSV fields may then be as long as a line (Python's csv stops at 128 KB)."""
    global _current
    _current = limits
    csv.field_size_limit(max(limits.max_line_bytes, 1 << 17))


class _Bounded(io.RawIOBase):
    """A decompressed stream that raises TooLarge when it yields more than the limits allow."""

    def __init__(self, stream: IO[bytes], name: str, consumed: Callable[[], int], limits: Limits,
                 raw: IO[bytes] | None) -> None:
        self._stream, self._name, self._limits, self._raw = stream, name, limits, raw
        self._consumed = consumed  # compressed bytes read so far: the ratio is judged as it goes
        self._allowed = limits.max_decompressed_bytes
        self._read = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self._stream.read(len(buffer))
        self._read += len(data)
        if self._read > self._allowed:
            raise TooLarge(f"{self._name}: expands past {self._allowed:,} bytes when decompressed "
                           f"([ingest] max_decompressed_bytes); refused before reading it all")
        if self._read > RATIO_FLOOR_BYTES and self._read > self._limits.max_ratio * max(self._consumed(), 1):
            raise TooLarge(f"{self._name}: expands more than {self._limits.max_ratio:g} times its stored size "
                           f"when decompressed ([ingest] max_ratio), as a decompression bomb does; refused")
        buffer[:len(data)] = data
        return len(data)

    def close(self) -> None:
        self._stream.close()
        if self._raw is not None:
            self._raw.close()
        super().close()


def bounded(stream: IO[bytes], name: str, consumed: Callable[[], int], limits: Limits | None = None,
            raw: IO[bytes] | None = None) -> IO[bytes]:
    """`stream` (decompressed) read through the limits, buffered; `consumed()` says how many
    compressed bytes it has read so far; `raw`, when given, is closed with it."""
    return io.BufferedReader(_Bounded(stream, name, consumed, limits or _current, raw), 1 << 20)


def too_long_marker(size_bytes: int) -> str:
    """What staging hands on in place of a line over max_line_bytes (the line itself is dropped)."""
    return f"{_MARKER}{size_bytes}"


def too_long_reason(text: str) -> str | None:
    """The reject reason when `text` is a too-long marker, else None."""
    found = MARKER_RE.match(text)
    if found is None:
        return None
    return (f"the line is {int(found[1]):,} bytes, longer than the {_current.max_line_bytes:,} allowed "
            f"([ingest] max_line_bytes); not read")
