"""Turn paths into loaded files: expand, read (.gz too), detect the kind, parse, load, summarise."""
from __future__ import annotations

import glob
import gzip
import hashlib
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone, tzinfo
from pathlib import Path
from types import ModuleType
from typing import Iterator

from ingest import codecarbon, dcgm, gpu_collector, nvidia_smi, runs_json, serving, warehouse
from ingest import billing_aws, billing_azure, billing_focus, billing_gcp
from ingest.contract import BadValue, ParseContext, numbered

# serving sniffs before runs_json: run detection keys on generic fields such as "start_time";
# bills too (a GCP label named run_id would look like a run). FOCUS sniffs before Azure: an
# Azure FOCUS export is FOCUS.
PARSERS: tuple[ModuleType, ...] = (codecarbon, serving, billing_focus, billing_aws, billing_gcp,
                                   billing_azure, runs_json, gpu_collector, nvidia_smi, dcgm)
KINDS = {parser.KIND: parser for parser in PARSERS}
FILE_SUFFIXES = {".jsonl", ".json", ".ndjson", ".csv", ".gz", ".prom", ".parquet"}
PARQUET_MAGIC = b"PAR1"  # a parser with BINARY = True gets such files as bytes
SNIFF_CHARS = 64 * 1024
REJECTS_SHOWN = 10
# A time of day followed by a zone ('10:00:00Z', '10:00:00.5+02:00'): the file says its zone.
OFFSET_TIME = re.compile(r"\d{2}:\d{2}(:\d{2}(\.\d+)?)?\s?(Z|[+-]\d{2}:?\d{2})\b")


@dataclass
class FileSummary:
    """What happened to one file; `to_json` is the --json record."""

    path: str
    kind: str | None = None
    status: str = "failed"  # loaded | rejected (every line refused) | already_loaded | failed
    rows_loaded: int = 0
    rows_rejected: int = 0
    rejects: list[dict] = field(default_factory=list)
    totals: dict = field(default_factory=dict)
    error: str | None = None
    replaced: list[int] = field(default_factory=list)  # earlier loads of this file, read otherwise
    warnings: list[str] = field(default_factory=list)

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
        if self.replaced:
            record["replaced_load_ids"] = self.replaced
        if self.warnings:
            record["warnings"] = self.warnings
        return record


def expand(patterns: list[str]) -> tuple[list[Path], list[FileSummary]]:
    """Files named by paths, folders (searched recursively) and globs, in a stable order."""
    files: list[Path] = []
    missing: list[FileSummary] = []
    for pattern in patterns:
        matches = [Path(p) for p in sorted(glob.glob(pattern, recursive=True))] or [Path(pattern)]
        for match in matches:
            if match.is_dir():
                found = sorted(p for p in match.rglob("*") if p.is_file() and p.suffix.lower() in FILE_SUFFIXES)
                if not found:  # say so: an empty folder must not end in silence
                    missing.append(FileSummary(str(match), error=f"{match}: a folder without files to load "
                                                                 f"({', '.join(sorted(FILE_SUFFIXES))})"))
                files.extend(found)
            elif match.is_file():
                files.append(match)
            else:
                missing.append(FileSummary(str(match), error=f"{match}: no such file or folder"))
    unique = list(dict.fromkeys(files))
    return unique, missing


def ingest_file(path: Path, kind: str | None = None, tz: tzinfo = timezone.utc,
                display_name: str | None = None, host: str | None = None,
                at: datetime | None = None) -> FileSummary:
    """Load one file into the warehouse; never raises for bad content, only for a busy warehouse."""
    name = display_name or str(path)
    summary = FileSummary(name, kind)
    try:
        raw = path.read_bytes()
    except OSError as error:
        summary.error = f"{name}: cannot read ({error.strerror or error})"
        return summary
    try:
        data = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
        text = None if data[:4] == PARQUET_MAGIC else data.decode("utf-8-sig")
    except (OSError, EOFError):
        summary.error = f"{name}: looks gzip-compressed but cannot be decompressed"
        return summary
    except UnicodeDecodeError as error:
        summary.error = f"{name}: not UTF-8 text (byte {error.start})"
        return summary
    if text is not None and not text.strip():
        summary.error = f"{name}: the file is empty"
        return summary
    if text is None:  # Parquet: only parsers that read bytes
        parser = KINDS.get(kind) if kind else detect_bytes(name, data)
        if parser is not None and not getattr(parser, "BINARY", False):
            summary.error = f"{name}: a Parquet file cannot be read as {parser.KIND}"
            return summary
    else:
        parser = KINDS.get(kind) if kind else detect(name, text[:SNIFF_CHARS])
    if parser is None and text is not None and is_prometheus(text[:SNIFF_CHARS]):
        summary.error = (f"{name}: a Prometheus scrape without DCGM GPU metrics (DCGM_FI_*): mlcost reads "
                         "GPU power from DCGM exporter scrapes only, and serving figures from serving-window "
                         "files (JSONL or CSV), not from an inference server's /metrics")
        return summary
    if parser is None:
        summary.error = (f"{name}: could not tell what kind of file this is; "
                         f"pass --kind ({', '.join(KINDS)})")
        return summary
    summary.kind = parser.KIND
    sha256 = hashlib.sha256(raw).hexdigest()
    options = warehouse.load_options(getattr(tz, "key", None) or str(tz), host, at)
    if warehouse.find_load(sha256, parser.KIND, options=options) is not None:
        summary.status = "already_loaded"
        return summary
    try:
        context = ParseContext(name, tz, host, at)
        parsed = (parser.parse_bytes(data, context) if text is None
                  else parser.parse(numbered(text.split("\n")), context))
    except BadValue as problem:  # the file cannot be read as given (e.g. a scrape without --at)
        summary.error = f"{name}: {problem}"
        return summary
    # The same file read before with another kind or other options: this reading replaces it.
    summary.replaced = [load_id for load_id in warehouse.loads_of_content(sha256)
                        if warehouse.unload(load_id, reason="replaced") is not None]
    result = warehouse.load(name, sha256, parser.KIND, parsed)
    if not result.already_loaded:
        warehouse.record_options(result.load_id, options)
    summary.status = ("already_loaded" if result.already_loaded
                      else "rejected" if result.rows_loaded == 0 and result.rows_rejected else "loaded")
    if not result.already_loaded:
        summary.rows_loaded, summary.rows_rejected = result.rows_loaded, result.rows_rejected
        summary.rejects = [{"line": r.line, "reason": r.reason} for r in parsed.rejects[:REJECTS_SHOWN]]
        summary.totals = parser.totals(parsed)
        if getattr(parser, "LOCAL_TIME", False) and tz is timezone.utc and text is not None \
                and not OFFSET_TIME.search(text[:SNIFF_CHARS]):
            summary.warnings.append(
                f"{parser.KIND} writes the local time of the machine it ran on, without a zone, and no --tz was "
                "given: its times were read as UTC. If that machine was not on UTC, load the file again with "
                "--tz ZONE (e.g. --tz Europe/Paris; on the Data page, the time zone box); that load replaces this one")
    return summary


def is_prometheus(head: str) -> bool:
    """Prometheus text exposition: its first non-blank line is a # HELP or # TYPE comment."""
    first = next((line.strip() for line in head.splitlines() if line.strip()), "")
    return first.startswith(("# HELP ", "# TYPE "))


def detect(name: str, head: str) -> ModuleType | None:
    """The first parser whose sniff accepts this file."""
    return next((parser for parser in PARSERS if parser.sniff(name, head)), None)


def detect_bytes(name: str, data: bytes) -> ModuleType | None:
    """The first parser that reads binary files (Parquet) and whose sniff_bytes accepts this one."""
    return next((parser for parser in PARSERS
                 if getattr(parser, "BINARY", False) and parser.sniff_bytes(name, data)), None)


def ingest_paths(patterns: list[str], kind: str | None = None, tz: tzinfo = timezone.utc,
                 host: str | None = None, at: datetime | None = None,
                 ) -> Iterator[tuple[Path | None, FileSummary]]:
    """Expand the patterns and ingest each file in turn, yielding its summary."""
    files, missing = expand(patterns)
    for summary in missing:
        yield None, summary
    for path in files:
        yield path, ingest_file(path, kind, tz, host=host, at=at)
