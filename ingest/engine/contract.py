"""The one contract every source parser follows.

A parser module exposes:

    KIND: str                                   the kind name users pass to --kind
    TABLES: tuple[str, ...]                     warehouse tables it fills; KEY[t] says how rows replace
    def sniff(name: str, head: str) -> bool     does a file with this name and first text look like mine?
    def parse(lines, ctx: ParseContext) -> Parsed
    def totals(parsed: Parsed) -> dict          kind-specific figures for the --json summary

A parser that also reads a binary format (Parquet) sets `BINARY = True` and adds
`sniff_bytes(name, data: bytes) -> bool` and `parse_bytes(data, ctx) -> Parsed`: the loader
hands it the file's bytes (decompressed from .gz) whenever they start with Parquet's magic
`PAR1`, and a record's line number is then its 1-based row number.

`lines` yields (line_number, text) with 1-based physical line numbers and the newline removed.
Rows are dicts keyed by warehouse column names (see docs/schema.md); every row carries
`source_line`. A parser with many rows (GPU traces) may give a table's rows as one
pyarrow.Table with those column names instead. A parser never turns a bad value into NULL or
0: it rejects the line instead. A parser may raise BadValue for a file it cannot read at all
as given (a scrape without timestamps and no --at): the file then fails and is not recorded.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import Iterable, Iterator

Lines = Iterable[tuple[int, str]]


@dataclass(frozen=True)
class Reject:
    """One line that could not be loaded, and why (line 0 means the whole file)."""

    line: int
    reason: str
    raw: str = ""


@dataclass
class Parsed:
    """What a parser made of one file: rows per warehouse table, the lines it refused, and
    how many records it accepted (a record seen twice counts twice, though only the later row loads)."""

    tables: dict[str, list[dict]] = field(default_factory=dict)
    rejects: list[Reject] = field(default_factory=list)
    accepted: int = 0
    warnings: list[str] = field(default_factory=list)  # how the file was read, for the user: assumptions

    def rows(self, table: str) -> list[dict]:
        return self.tables.setdefault(table, [])


@dataclass(frozen=True)
class ParseContext:
    """What a parser may know besides the text: the file's display name, the zone of naive
    times and, for GPU traces, the host the user named (--host) and the time of a scrape
    whose samples carry none (--at, UTC); for inference servers' scrapes, when the server
    started (--started-at) and the seconds between the scrapes of a file (--scrape-interval)."""

    source: str
    tz: tzinfo
    host: str | None = None
    at: datetime | None = None
    started_at: datetime | None = None
    scrape_interval_s: float | None = None


class BadValue(ValueError):
    """A field that cannot be read; the message is the reject reason shown to the user."""


class FileRefused(BadValue):
    """A record that shows the whole file cannot be read as given (a scrape without timestamps and
    no --at): the file fails and is not recorded; readers let it through rather than refuse a line."""


def numbered(text_lines: Iterable[str]) -> Iterator[tuple[int, str]]:
    """Yield (1-based line number, line without its newline) for an iterable of text lines."""
    for number, line in enumerate(text_lines, start=1):
        yield number, line.rstrip("\r\n")
