"""Turn paths into loaded files: expand, stream (.gz and .zst too), detect the kind, stage, merge, summarise."""
from __future__ import annotations

import codecs
import fnmatch
import glob
import hashlib
import importlib
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
from ingest.engine.staging import BOM, NotText, Source, Staged
from ingest.pipeline.beside import Beside
from ingest.settings import config, limits

# The format modules in the order detection tries them. Each module is its format's one definition
# (KIND, sniff, stage or parse); it is imported when detection reaches it or a --kind asks for it,
# so a serving file's load imports no bill, trace or Prometheus parser (tests/test_startup.py).
# serving sniffs before run_summary: run detection keys on generic fields such as "start_time";
# bills too (a GCP label named run_id would look like a run). FOCUS sniffs before Azure: an
# Azure FOCUS export is FOCUS.
FORMATS: tuple[str, ...] = (
    "ingest.formats.runs.codecarbon", "ingest.importers.wandb_runs", "ingest.formats.serving",
    "ingest.formats.billing.billing_focus", "ingest.formats.billing.billing_aws", "ingest.formats.billing.billing_gcp",
    "ingest.formats.billing.billing_azure", "ingest.formats.billing.billing_aws_dbr", "ingest.formats.runs.run_summary",
    "ingest.formats.gpu.gpu_collector", "ingest.formats.gpu.nvidia_smi", "ingest.formats.mixed_scrape",
    "ingest.formats.gpu.dcgm", "ingest.formats.serving_metrics", "ingest.importers.slurm")
FILE_SUFFIXES = {".jsonl", ".json", ".ndjson", ".csv", ".gz", ".zst", ".prom", ".parquet"}
PARQUET_MAGIC = b"PAR1"  # a parser with BINARY = True gets such files as bytes
SNIFF_BYTES = 64 * 1024  # detection reads this much of the decompressed file
PARQUET_FOOTER_BYTES = 16 << 20  # a Parquet file's schema is in its footer: read up to this much of the end
SNIFF_CHARS = SNIFF_BYTES  # and hands detect() that head as text
HASH_CHUNK_BYTES = 8 << 20  # _sha256's chunks, each hashed on a thread while the next is read
# The formats whose staging asks for the file's newline count (line_numbers.count_lines: a CSV
# bill's line numbers), which the sha256 pass counts on its way; for any other it stops counting.
COUNTS_LINES = ("ingest.formats.billing.",)
STAGE_CHECKPOINT = "1TB"  # the staging database's checkpoint_threshold until the merge
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
    _batch.settled = False  # until this file's merge has stored what was left
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
    except OSError as error:
        summary.error = f"{name}: cannot read ({error.strerror or error})"
        return summary
    digest = _Digest(path)  # beside the head, detection and the stage's opening
    opening = Beside(staging.open_stage, name="mlcost-open-stage")  # beside the head and detection
    try:
        summary = _read_file(src, kind, context, digest, opening, summary)
        digest.value()  # a file that could not be hashed says so, as when it was hashed first
        return summary
    except _Unreadable as error:  # the file could not be hashed: said as before, whatever came after
        summary = FileSummary(name, kind)
        summary.error = f"{name}: cannot read ({error.cause.strerror or error.cause})"
        return summary
    finally:
        digest.join()
        opening.discard(close=lambda stage: stage.close())  # closed already when the file was staged


def _read_file(src: Source, kind: str | None, context: ParseContext, digest: _Digest,
               opening: Beside, summary: FileSummary) -> FileSummary:
    """_ingest_file once the file is found, its sha256 worked out by `digest` and its staging
    database opened by `opening` meanwhile."""
    name, tz = context.source, context.tz
    try:
        head = _head(src)
    except (OSError, EOFError, zstandard.ZstdError) as error:
        digest.value()  # a file that cannot be read at all says so as before (_Unreadable)
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
        parser = of_kind(kind) if kind else detect_bytes(name, _parquet_probe(src, head))
        if parser is not None and not getattr(parser, "BINARY", False):
            summary.error = f"{name}: a Parquet file cannot be read as {parser.KIND}"
            return summary
    else:
        parser = of_kind(kind) if kind else detect(name, text)
    if parser is not None and not parser.__name__.startswith(COUNTS_LINES):
        digest.count_lines = False  # the rest of the hash pass does not count newlines for nothing
    if parser is None and text is not None and is_prometheus(text):
        summary.error = (f"{name}: a Prometheus scrape without DCGM GPU metrics (DCGM_FI_*) or an inference "
                         "server's request counters (vLLM, Triton, TorchServe): nothing in it for mlcost")
        return summary
    if parser is None:
        summary.error = (f"{name}: could not tell what kind of file this is; "
                         f"pass --kind ({', '.join(_kinds())})")
        return summary
    summary.kind = parser.KIND
    # While the stage opens: the warehouse's schema put in place (a new one: ~0.1 s) once the file
    # is hashed (one that cannot be is said unreadable, the warehouse left alone), and the format's
    # first batch read and split (batch_sql.read_early; None for a format that reads otherwise).
    schema = Beside(lambda path: (digest.value(), warehouse.ensure_schema(path)), warehouse.db_path())
    early = None
    try:
        early = parser.read_early(src, text) if text is not None and hasattr(parser, "read_early") else None
        return _stage_and_merge(src, parser, context, digest, opening, schema, summary, binary, text, early)
    finally:
        schema.discard()
        if early is not None:
            early.close(wait=False)  # e.g. a file already loaded: its batch is not waited for


def _stage_and_merge(src: Source, parser: ModuleType, context: ParseContext, digest: _Digest, opening: Beside,
                     schema: Beside, summary: FileSummary, binary: bool, text: str | None, early) -> FileSummary:
    """_read_file once the format is known: stage the file (with `early`, read_early()'s batches,
    when the format has them) and merge it, unless the warehouse has it already."""
    name, tz = context.source, context.tz
    options = warehouse.load_options(getattr(tz, "key", None) or str(tz), context.host, context.at,
                                     context.started_at, context.scrape_interval_s)
    stage = opening.value()
    try:
        sha256 = digest.value()
        schema.value()  # WarehouseBusy and ConfigError stop the command here, as from earlier_loads
    except BaseException:
        stage.close()
        raise
    # The stage is private and thrown away: never checkpointed while it is filled (an in-memory
    # database checkpoints too, in one thread: 0.3-0.4 s of a 500k-window serving file's inserts).
    stage.execute(f"SET checkpoint_threshold = '{STAGE_CHECKPOINT}'")
    try:
        earlier = warehouse.earlier_loads(stage, sha256)
        if any(load[1:] == (parser.KIND, options) for load in earlier):
            summary.status = "already_loaded"
            return summary
        try:
            staged = _stage(parser, src, stage, context, binary, early)
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
        stage.execute("RESET checkpoint_threshold")  # the warehouse's commit checkpoints as it always did
        # The same file read before with another kind or other options: this reading replaces it,
        # in the merge's own transaction (a merge that fails leaves the earlier load whole).
        deferring = getattr(_batch, "active", False)
        result = warehouse.merge(stage, name, sha256, parser.KIND, staged.accepted, options=options,
                                 replaces=tuple(load_id for load_id, _, _ in earlier), defer_derived=deferring)
        _batch.settled = not deferring and not result.already_loaded
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


def _stage(parser: ModuleType, src: Source, stage, context: ParseContext, binary: bool, early=None) -> Staged:
    """Parse the file into the staging database: a columnar parser reads it itself (`early`: its
    read_early()'s batches); an older one gets its lines streamed, its Parsed staged in Arrow batches."""
    if hasattr(parser, "stage"):
        staged = parser.stage(src, stage, context, early) if early is not None else parser.stage(src, stage, context)
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


def _sha256(path: Path, counting: Callable[[], bool] = lambda: True) -> str:
    """The file's sha256 (hex), read in chunks: each chunk is hashed on a thread of its own (hashlib
    lets go of the GIL) while this one counts its newlines and reads the next, in order (a 504 MB
    bill: hashing ~0.3 s, reading and counting ~0.17 s, one after the other before). The count stops,
    and is not remembered, once `counting()` says no one asks for it (_Digest.count_lines: 0.035 CPU s
    of a 125 MB trace file)."""
    digest = hashlib.sha256()
    newlines, last, count = 0, b"\n", None  # counted on the way (bytes.count is cheap): a bill's line numbers need them
    hashing: threading.Thread | None = None
    with open(path, "rb") as handle:
        try:
            while chunk := handle.read(HASH_CHUNK_BYTES):
                if hashing is not None:
                    hashing.join()  # the chunks go into the digest in the file's order
                hashing = threading.Thread(target=digest.update, args=(chunk,), daemon=True)
                hashing.start()
                if count is None:  # JSON (an object or array first) is no CSV bill: its newlines are not asked for
                    count = not chunk.removeprefix(BOM).lstrip().startswith((b"{", b"["))
                if count and not counting():
                    count = False
                if count:
                    newlines += chunk.count(b"\n")
                last = chunk[-1:]
        finally:
            if hashing is not None:
                hashing.join()
        if count is not False:
            line_numbers.remember_count(os.fstat(handle.fileno()), newlines, last == b"\n")
    return digest.hexdigest()


class _Unreadable(Exception):
    """The file could not be read to hash it (`cause`: the OSError)."""

    def __init__(self, cause: OSError) -> None:
        super().__init__(str(cause))
        self.cause = cause


class _Digest(threading.Thread):
    """A file's sha256 worked out on a thread of its own (hashlib lets go of the GIL), while the
    loader reads the head, detects the kind and opens the stage: 237 MB take ~0.2 s."""

    def __init__(self, path: Path) -> None:
        super().__init__(name="mlcost-sha256", daemon=True)
        self._path, self._hex, self._error = path, "", None
        self.count_lines = True  # set False once the file's format is known not to read the count
        self.start()

    def run(self) -> None:
        try:
            self._hex = _sha256(self._path, lambda: self.count_lines)
        except OSError as error:
            self._error = error

    def value(self) -> str:
        """The sha256 (hex); raises _Unreadable when the file could not be read."""
        self.join()
        if self._error is not None:
            raise _Unreadable(self._error)
        return self._hex


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


def _formats() -> Iterator[ModuleType]:
    """The format modules in detection order, each imported when it is reached."""
    return (importlib.import_module(name) for name in FORMATS)


def of_kind(kind: str) -> ModuleType | None:
    """The format module whose KIND is `kind` (None for an unknown kind); imports the modules before it."""
    return next((parser for parser in _formats() if parser.KIND == kind), None)


def _kinds() -> list[str]:
    """Every format's KIND, in detection order (every format imported: for a message)."""
    return [parser.KIND for parser in _formats()]


def __getattr__(name: str):
    """PARSERS (every format module, in detection order) and KINDS (KIND -> module): every format imported."""
    if name == "PARSERS":
        return tuple(_formats())
    if name == "KINDS":
        return {parser.KIND: parser for parser in _formats()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def detect(name: str, head: str) -> ModuleType | None:
    """The first parser whose sniff accepts this file (the ones after it are not imported)."""
    return next((parser for parser in _formats() if parser.sniff(name, head)), None)


def detect_bytes(name: str, data: bytes) -> ModuleType | None:
    """The first parser that reads binary files (Parquet) and whose sniff_bytes accepts this one."""
    return next((parser for parser in _formats()
                 if getattr(parser, "BINARY", False) and parser.sniff_bytes(name, data)), None)


# .active: files loaded on this thread leave derived tables to batch()'s end; .settled: the last file's
# merge, not deferred, stored all that was left (pending.take): the end has nothing to store (~0.03 s)
_batch = threading.local()


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
    _batch.active, _batch.settled = len(files) > 1, False
    try:
        yield
    finally:
        _batch.active = False
    if not _batch.settled:
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
