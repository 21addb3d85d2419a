"""Turn paths into loaded files: expand, stream (.gz and .zst too), detect the kind, stage, merge, summarise."""
from __future__ import annotations

import codecs
import fnmatch
import glob
import hashlib
import os
import re
import threading
from contextlib import contextmanager
from datetime import datetime, timezone, tzinfo
from pathlib import Path
from types import ModuleType
from typing import Callable, Iterator, Sequence

import duckdb
import zstandard

from ingest.engine import line_numbers, staging, warehouse
from ingest.engine.contract import BadValue, ParseContext, Reject
from ingest.engine.report import REJECTS_SHOWN, FileSummary  # noqa: F401  (loader.FileSummary, as before)
from ingest.engine.staging import NotText, Source, Staged
from ingest.formats import mixed_scrape, serving, serving_metrics
from ingest.formats.billing import billing_aws, billing_aws_dbr, billing_azure, billing_focus, billing_gcp
from ingest.formats.gpu import dcgm, gpu_collector, nvidia_smi
from ingest.formats.runs import codecarbon, run_summary
from ingest.importers import slurm, wandb_runs
from ingest.pipeline import hash_ahead
from ingest.settings import config, limits

# serving sniffs before run_summary: run detection keys on generic fields such as "start_time";
# bills too (a GCP label named run_id would look like a run). FOCUS sniffs before Azure: an
# Azure FOCUS export is FOCUS.
PARSERS: tuple[ModuleType, ...] = (codecarbon, wandb_runs, serving, billing_focus, billing_aws, billing_gcp,
                                   billing_azure, billing_aws_dbr, run_summary, gpu_collector, nvidia_smi, mixed_scrape, dcgm, serving_metrics, slurm)
KINDS = {parser.KIND: parser for parser in PARSERS}
FILE_SUFFIXES = {".jsonl", ".json", ".ndjson", ".csv", ".gz", ".zst", ".prom", ".parquet"}
PARQUET_MAGIC = b"PAR1"  # a parser with BINARY = True gets such files as bytes
SNIFF_BYTES = 64 * 1024  # detection reads this much of the decompressed file
PARQUET_FOOTER_BYTES = 16 << 20  # a Parquet file's schema is in its footer: read up to this much of the end
SNIFF_CHARS = SNIFF_BYTES  # and hands detect() that head as text
HASH_CHUNK_BYTES = 1 << 20
# A folder's list of files that are not data (answer keys, manifests): a folder given to ingest
# skips them and says so; a file named on its own is always read.
NOT_DATA = ".mlcostignore"
Progress = Callable[[int, int], None]  # (bytes of the file read, lines or rows read)
# A time of day followed by a zone ('10:00:00Z', '10:00:00.5+02:00'): the file says its zone.
OFFSET_TIME = re.compile(r"\d{2}:\d{2}(:\d{2}(\.\d+)?)?\s?(Z|[+-]\d{2}:?\d{2})\b")


def not_data(folder: Path, files: list[Path]) -> dict[Path, Path]:
    """The files of a folder that a NOT_DATA file (in the folder or a folder above the file,
    within `folder`) declares not data, each with the NOT_DATA file that says so. Each line of a
    NOT_DATA file is a glob matched against the path relative to that file's folder (`truth.json`,
    `answers/*.json`); blank lines and lines starting with # are ignored."""
    rules: list[tuple[Path, str]] = []
    for listing in sorted(folder.rglob(NOT_DATA)):
        try:
            lines = listing.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        rules += [(listing, line.strip()) for line in lines if line.strip() and not line.lstrip().startswith("#")]
    skipped: dict[Path, Path] = {}
    for path in files:
        for listing, pattern in rules:
            base = listing.parent
            if base in path.parents and fnmatch.fnmatchcase(path.relative_to(base).as_posix(), pattern):
                skipped[path] = listing
                break
    return skipped


def expand(patterns: list[str]) -> tuple[list[Path], list[FileSummary]]:
    """Files named by paths, folders (searched recursively) and globs, in a stable order; the
    second list holds a summary for each path that names nothing (failed) and for each file of a
    folder that the folder's NOT_DATA file declares not data (status "not_data": not read)."""
    files: list[Path] = []
    missing: list[FileSummary] = []
    for pattern in patterns:
        matches = [Path(p) for p in sorted(glob.glob(pattern, recursive=True))] or [Path(pattern)]
        for match in matches:
            if match.is_dir():
                found = sorted(p for p in match.rglob("*") if p.is_file() and p.suffix.lower() in FILE_SUFFIXES)
                skipped = not_data(match, found)
                missing += [FileSummary(str(path), status="not_data",
                                        warnings=[f"declared not data by {listing}: not read"])
                            for path, listing in skipped.items()]
                found = [path for path in found if path not in skipped]
                if not found and not skipped:  # say so: an empty folder must not end in silence
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
                at: datetime | None = None, on_progress: Progress | None = None,
                started_at: datetime | None = None, scrape_interval_s: float | None = None) -> FileSummary:
    """Load one file into the warehouse; never raises for bad content, only for a busy warehouse.

    The file is streamed (gzip and zstd decompressed on the fly), parsed into a private staging
    database and merged into the warehouse in one short transaction. `on_progress(bytes_done,
    rows_done)`, when given, is called as the file is read (bytes of the file as stored, so of
    the compressed stream) and once at the end, with the file's size and the rows it gave.
    """
    context = ParseContext(display_name or str(path), tz, host, at, started_at, scrape_interval_s)
    summary = _guarded(path, kind, context, on_progress)
    if on_progress is not None:
        try:
            size_bytes = path.stat().st_size
        except OSError:  # an unreadable file has said so in its summary
            size_bytes = 0
        on_progress(size_bytes, summary.rows_loaded + summary.rows_rejected)
    return summary


def _guarded(path: Path, kind: str | None, context: ParseContext, on_progress: Progress | None) -> FileSummary:
    """_ingest_file behind the per-file barrier: any surprise fails this file, not the batch."""
    limits.configure(config.ingest_limits())
    try:
        return _ingest_file(path, kind, context, on_progress)
    except (warehouse.WarehouseBusy, config.ConfigError):  # the command stops: not this file's fault
        raise
    except limits.TooLarge as refused:
        return FileSummary(context.source, kind, error=str(refused))
    except Exception as error:  # the per-file barrier: one file's surprise never stops the batch
        name = context.source
        detail = (str(error).strip().splitlines() or [""])[0][:200]
        return FileSummary(name, kind, error=f"{name}: could not be read ({type(error).__name__}"
                                             f"{': ' + detail if detail else ''}); nothing from it was loaded")


def _ingest_file(path: Path, kind: str | None, context: ParseContext, on_progress: Progress | None) -> FileSummary:
    """ingest_file without its barrier: bad content ends in a failed summary, surprises raise."""
    name, tz = context.source, context.tz
    summary = FileSummary(name, kind)
    try:
        src = Source.of(path, name, on_progress)
        sha256 = _sha256(path)
        _hash_next(path)  # in a batch: the next file's hash runs while this one loads
    except OSError as error:
        summary.error = f"{name}: cannot read ({error.strerror or error})"
        return summary
    try:
        head = _head(src)
    except (OSError, EOFError, zstandard.ZstdError) as error:
        summary.error = (f"{name}: looks {src.compression}-compressed but cannot be decompressed"
                         if src.compression else f"{name}: cannot read ({getattr(error, 'strerror', None) or error})")
        return summary
    binary = head[:4] == PARQUET_MAGIC
    text = None
    if not binary:
        try:
            text = codecs.getincrementaldecoder("utf-8-sig")().decode(head, final=len(head) < SNIFF_BYTES)
        except UnicodeDecodeError as error:
            summary.error = f"{name}: not UTF-8 text (byte {error.start})"
            return summary
        if not text.strip() and len(head) < SNIFF_BYTES:
            summary.error = f"{name}: the file is empty"
            return summary
    if binary:  # Parquet: only parsers that read it
        parser = KINDS.get(kind) if kind else detect_bytes(name, _parquet_probe(src, head))
        if parser is not None and not getattr(parser, "BINARY", False):
            summary.error = f"{name}: a Parquet file cannot be read as {parser.KIND}"
            return summary
    else:
        parser = KINDS.get(kind) if kind else detect(name, text)
    if parser is None and text is not None and is_prometheus(text):
        summary.error = (f"{name}: a Prometheus scrape without DCGM GPU metrics (DCGM_FI_*) or an inference "
                         "server's request counters (vLLM, Triton, TorchServe): nothing in it for mlcost")
        return summary
    if parser is None:
        summary.error = (f"{name}: could not tell what kind of file this is; "
                         f"pass --kind ({', '.join(KINDS)})")
        return summary
    summary.kind = parser.KIND
    options = warehouse.load_options(getattr(tz, "key", None) or str(tz), context.host, context.at,
                                     context.started_at, context.scrape_interval_s)
    stage = staging.open_stage()
    try:
        earlier = warehouse.earlier_loads(stage, sha256)
        if any(load[1:] == (parser.KIND, options) for load in earlier):
            summary.status = "already_loaded"
            return summary
        try:
            staged = _stage(parser, src, stage, context, binary)
        except BadValue as problem:  # the file cannot be read as given (e.g. a scrape without --at)
            summary.error = f"{name}: {problem}"
            return summary
        except (EOFError, OSError, zstandard.ZstdError) as error:  # e.g. a .gz cut short past its head
            summary.error = (f"{name}: looks {src.compression}-compressed but cannot be decompressed"
                             if src.compression else f"{name}: cannot read ({getattr(error, 'strerror', None) or error})")
            return summary
        except NotText as problem:
            summary.error = f"{name}: not UTF-8 text (byte {problem.byte})"
            return summary
        except duckdb.Error as problem:  # a file DuckDB cannot read as this kind: one sentence, no traceback
            reason = ("not UTF-8 text" if "unicode" in str(problem).lower()
                      else f"cannot be read as {parser.KIND} ({str(problem).splitlines()[0]})")
            summary.error = f"{name}: {reason}"
            return summary
        # The same file read before with another kind or other options: this reading replaces it,
        # in the merge's own transaction (a merge that fails leaves the earlier load whole).
        result = warehouse.merge(stage, name, sha256, parser.KIND, staged.accepted, options=options,
                                 replaces=tuple(load_id for load_id, _, _ in earlier),
                                 defer_derived=getattr(_batch, "active", False))
        summary.replaced = result.replaced
        summary.status = ("already_loaded" if result.already_loaded
                          else "rejected" if result.rows_loaded == 0 and result.rows_rejected else "loaded")
        if not result.already_loaded:
            summary.rows_loaded, summary.rows_rejected = result.rows_loaded, result.rows_rejected
            summary.merge_s = result.lock_s
            summary.rejects = [{"line": line, "reason": reason} for line, reason in stage.execute(
                "SELECT line, reason FROM rejects ORDER BY line LIMIT ?", [REJECTS_SHOWN]).fetchall()]
            summary.totals = staged.totals
            summary.warnings.extend(staged.warnings)
            summary.warnings.extend(result.warnings)
            if getattr(parser, "LOCAL_TIME", False) and tz is timezone.utc and text is not None \
                    and not OFFSET_TIME.search(text):
                summary.warnings.append(
                    f"{parser.KIND} writes the local time of the machine it ran on, without a zone, and no --tz was "
                    "given: its times were read as UTC. If that machine was not on UTC, load the file again with "
                    "--tz ZONE (e.g. --tz Europe/Paris; on the Data page, the time zone box); that load replaces this one")
    finally:
        stage.close()
    return summary


def _stage(parser: ModuleType, src: Source, stage, context: ParseContext, binary: bool) -> Staged:
    """Parse the file into the staging database: a columnar parser reads it itself; an older one
    gets its lines streamed and its Parsed staged in Arrow batches."""
    if hasattr(parser, "stage"):
        staged = parser.stage(src, stage, context)
        _name_too_long_lines(stage)
        return staged
    if binary:  # Parquet through an old-style parser: its parse_bytes takes the whole file
        with src.open_binary() as stream:
            parsed = parser.parse_bytes(stream.read(), context)
    else:
        too_long: list[Reject] = []
        parsed = parser.parse(_within_limit(staging.lines(src), too_long), context)
        parsed.rejects.extend(too_long)
    staging.insert_parsed(stage, parsed, src.name)
    return Staged(parsed.accepted, parser.totals(parsed), parsed.warnings)


def _within_limit(lines: Iterator[tuple[int, str]], too_long: list[Reject]) -> Iterator[tuple[int, str]]:
    """The lines a parser reads: a line over [ingest] max_line_bytes goes to `too_long` instead."""
    for number, text in lines:
        reason = limits.too_long_reason(text) if text.startswith("\x00") else None
        if reason is None:
            yield number, text
        else:
            too_long.append(Reject(number, reason, ""))


def _name_too_long_lines(stage) -> None:
    """A columnar parser rejected the markers of over-long lines as malformed: say why instead."""
    marked = stage.execute("SELECT DISTINCT raw FROM rejects WHERE starts_with(raw, ?)",
                           [limits.too_long_marker(0)[:-1]]).fetchall()
    for (raw,) in marked:
        stage.execute("UPDATE rejects SET reason = ?, raw = '' WHERE raw = ?", [limits.too_long_reason(raw), raw])


def _sha256(path: Path) -> str:
    """The file's sha256 (hex), read in chunks (or as the batch hashed it ahead, hash_ahead.py)."""
    ahead = getattr(_batch, "ahead", None)
    found = ahead.take(path) if ahead is not None else None
    if found is not None:
        digest_hex, stat, newlines, ends_with_newline = found
        line_numbers.remember_count(stat, newlines, ends_with_newline)
        return digest_hex
    digest = hashlib.sha256()
    newlines, last = 0, b"\n"  # counted on the way (bytes.count is cheap): a bill's line numbers need them
    with open(path, "rb") as handle:
        while chunk := handle.read(HASH_CHUNK_BYTES):
            digest.update(chunk)
            newlines += chunk.count(b"\n")
            last = chunk[-1:]
        line_numbers.remember_count(os.fstat(handle.fileno()), newlines, last == b"\n")
    return digest.hexdigest()


def _head(src: Source) -> bytes:
    """The first SNIFF_BYTES of the decompressed file."""
    with src.open_binary() as stream:
        return stream.read(SNIFF_BYTES)


def _parquet_probe(src: Source, head: bytes) -> bytes:
    """The Parquet file's magic and footer (where its schema is: the head alone lacks it past
    SNIFF_BYTES), a readable Parquet for sniff_bytes; bounded to PARQUET_FOOTER_BYTES."""
    try:
        with src.open_binary() as stream:
            if src.compression:  # streamed: only the last bytes are kept
                tail = b""
                while chunk := stream.read(1 << 20):
                    tail = (tail + chunk)[-PARQUET_FOOTER_BYTES:]
            else:
                size = src.path.stat().st_size
                stream.seek(max(0, size - PARQUET_FOOTER_BYTES))
                tail = stream.read()
    except (OSError, EOFError, zstandard.ZstdError, BadValue):  # reading it says why, with its own message
        return head
    if len(tail) < 12 or tail[-4:] != PARQUET_MAGIC:
        return head
    length = int.from_bytes(tail[-8:-4], "little")
    if length + 8 > len(tail):  # a footer larger than the bound: the head, as before
        return head
    return PARQUET_MAGIC + tail[-8 - length:]


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


_batch = threading.local()  # .active: files loaded on this thread leave derived tables to batch()'s end
# (.files: the batch's files in order; .ahead: the next one being hashed, hash_ahead.Ahead)


def _hash_next(path: Path) -> None:
    """In a batch, start hashing the file after `path` (the one before it is done with)."""
    files = getattr(_batch, "files", None)
    _batch.ahead = None
    if not files:
        return
    try:
        following = files[files.index(path) + 1]
    except (ValueError, IndexError):  # not the batch's, or its last
        return
    _batch.ahead = hash_ahead.Ahead(following)


@contextmanager
def batch(files: Sequence[Path]) -> Iterator[None]:
    """Load `files` with ingest_file() inside: when they are more than one, what GPU samples
    change beyond their own rollups (per-run GPU time and energy, GPU days, the allocation of the
    bill: ingest/derived/pending.py) is stored once after the last file rather than after each
    (16 trace files: the month's allocation once, not 16 times); a file of another kind stores it
    at its own merge. The end of the block stores what is left (for one file too: what a load cut
    short left, its files now already loaded). Until then a page may show those tables as they
    were before the batch; a batch cut short (an error, Ctrl-C) leaves them to the next load,
    unload or `mlcost rollup`."""
    if not files or getattr(_batch, "active", False):
        yield
        return
    _batch.active = len(files) > 1
    _batch.files = list(files) if len(files) > 1 else None
    try:
        yield
    finally:
        _batch.active = False
        _batch.files = _batch.ahead = None
    warehouse.settle_derived()  # also what an earlier load cut short left (its files now already loaded)


def ingest_paths(patterns: list[str], kind: str | None = None, tz: tzinfo = timezone.utc,
                 host: str | None = None, at: datetime | None = None, on_progress: Progress | None = None,
                 ) -> Iterator[tuple[Path | None, FileSummary]]:
    """Expand the patterns and ingest each file in turn (one batch()), yielding its summary;
    `on_progress` hears each file's progress as in ingest_file."""
    files, missing = expand(patterns)
    for summary in missing:
        yield None, summary
    with batch(files):
        for path in files:
            yield path, ingest_file(path, kind, tz, host=host, at=at, on_progress=on_progress)
