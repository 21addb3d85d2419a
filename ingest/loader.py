"""Turn paths into loaded files: expand, read (.gz too), detect the kind, parse, load, summarise."""
from __future__ import annotations

import glob
import gzip
import hashlib
from dataclasses import dataclass, field
from datetime import timezone, tzinfo
from pathlib import Path
from types import ModuleType
from typing import Iterator

from ingest import codecarbon, runs_json, serving, warehouse
from ingest.contract import ParseContext, numbered

# serving sniffs before runs_json: run detection keys on generic fields such as "start_time".
PARSERS: tuple[ModuleType, ...] = (codecarbon, serving, runs_json)
KINDS = {parser.KIND: parser for parser in PARSERS}
FILE_SUFFIXES = {".jsonl", ".json", ".ndjson", ".csv", ".gz"}
SNIFF_CHARS = 64 * 1024
REJECTS_SHOWN = 10


@dataclass
class FileSummary:
    """What happened to one file; `to_json` is the --json record."""

    path: str
    kind: str | None = None
    status: str = "failed"  # loaded | already_loaded | failed
    rows_loaded: int = 0
    rows_rejected: int = 0
    rejects: list[dict] = field(default_factory=list)
    totals: dict = field(default_factory=dict)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status != "failed" and self.rows_rejected == 0

    def to_json(self) -> dict:
        record = {
            "path": self.path, "kind": self.kind, "status": self.status,
            "rows_loaded": self.rows_loaded, "rows_rejected": self.rows_rejected,
            "rejects": self.rejects, **self.totals,
        }
        if self.error:
            record["error"] = self.error
        return record


def expand(patterns: list[str]) -> tuple[list[Path], list[FileSummary]]:
    """Files named by paths, folders (searched recursively) and globs, in a stable order."""
    files: list[Path] = []
    missing: list[FileSummary] = []
    for pattern in patterns:
        matches = [Path(p) for p in sorted(glob.glob(pattern, recursive=True))] or [Path(pattern)]
        for match in matches:
            if match.is_dir():
                files.extend(sorted(p for p in match.rglob("*") if p.is_file() and p.suffix.lower() in FILE_SUFFIXES))
            elif match.is_file():
                files.append(match)
            else:
                missing.append(FileSummary(str(match), error=f"{match}: no such file or folder"))
    unique = list(dict.fromkeys(files))
    return unique, missing


def ingest_file(path: Path, kind: str | None = None, tz: tzinfo = timezone.utc,
                display_name: str | None = None) -> FileSummary:
    """Load one file into the warehouse; never raises for bad content, only for a busy warehouse."""
    name = display_name or str(path)
    summary = FileSummary(name, kind)
    try:
        raw = path.read_bytes()
    except OSError as error:
        summary.error = f"{name}: cannot read ({error.strerror or error})"
        return summary
    try:
        text = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode("utf-8-sig")
    except (OSError, EOFError):
        summary.error = f"{name}: looks gzip-compressed but cannot be decompressed"
        return summary
    except UnicodeDecodeError as error:
        summary.error = f"{name}: not UTF-8 text (byte {error.start})"
        return summary
    parser = KINDS.get(kind) if kind else detect(name, text[:SNIFF_CHARS])
    if parser is None:
        summary.error = (f"{name}: could not tell what kind of file this is; "
                         f"pass --kind ({', '.join(KINDS)})")
        return summary
    summary.kind = parser.KIND
    sha256 = hashlib.sha256(raw).hexdigest()
    if warehouse.find_load(sha256, parser.KIND) is not None:
        summary.status = "already_loaded"
        return summary
    parsed = parser.parse(numbered(text.split("\n")), ParseContext(name, tz))
    result = warehouse.load(name, sha256, parser.KIND, parsed)
    summary.status = "already_loaded" if result.already_loaded else "loaded"
    if not result.already_loaded:
        summary.rows_loaded, summary.rows_rejected = result.rows_loaded, result.rows_rejected
        summary.rejects = [{"line": r.line, "reason": r.reason} for r in parsed.rejects[:REJECTS_SHOWN]]
        summary.totals = parser.totals(parsed)
    return summary


def detect(name: str, head: str) -> ModuleType | None:
    """The first parser whose sniff accepts this file."""
    return next((parser for parser in PARSERS if parser.sniff(name, head)), None)


def ingest_paths(patterns: list[str], kind: str | None = None,
                 tz: tzinfo = timezone.utc) -> Iterator[tuple[Path | None, FileSummary]]:
    """Expand the patterns and ingest each file in turn, yielding its summary."""
    files, missing = expand(patterns)
    for summary in missing:
        yield None, summary
    for path in files:
        yield path, ingest_file(path, kind, tz)
