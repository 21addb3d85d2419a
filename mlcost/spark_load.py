"""`mlcost-spark load` (docs/spark.md): raw files loaded into a lake as Spark tasks, one file per task.

The driver expands the paths (files, folders, globs, s3:// prefixes) into raw files and hands each
to its own task; the task runs mlcost's own lake load on it (ingest/pipeline/lake_load.load_file:
the embedded loader's detection, strict parsing and rejects with line numbers, Parquet into the lake,
the ledger entry last), exactly what `mlcost load --lake` runs for that file, and returns the file's
FileSummary. A file that fails fails alone: its task returns a failed summary, never raises.

Everything the loader reads on an executor travels with the task (LoadSettings): the lake, --kind,
--tz, --host, the settings file's text (its [ingest] limits, [prices], [billing] and [gpu] sections
change what a load reads) and the S3 endpoint; never credentials (executors use their own AWS chain).
"""
from __future__ import annotations

import fnmatch
import hashlib
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ingest.engine.report import FileSummary

ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")  # what ingest/lake/store.py reads


@dataclass(frozen=True)
class LoadSettings:
    """What every task needs to load a file as `mlcost load --lake` would on the driver."""

    lake: str
    kind: str | None = None
    tz: str = "UTC"
    host: str | None = None
    config_text: str = ""  # the settings file's TOML ('' : the defaults)
    endpoints: tuple[tuple[str, str], ...] = ()  # (variable, URL) of an S3-compatible endpoint


@dataclass(frozen=True)
class RawFile:
    """One raw file to load: `name` as the ledger and the rejects will carry it (the path as given,
    or an s3:// URL); `size_bytes` (schedules the largest first)."""

    name: str
    size_bytes: int = 0


def s3_url(text: str) -> str:
    """s3a:// and s3n:// (Hadoop's names, which `mlcost-spark derive` takes) as s3://, which the lake store reads."""
    for scheme in ("s3a://", "s3n://"):
        if text.startswith(scheme):
            return "s3://" + text[len(scheme):]
    return text


def expand(paths: list[str]) -> tuple[list[RawFile], list[FileSummary]]:
    """The raw files `paths` name, in a stable order, and a summary for each path naming nothing
    (failed) or declared not data by a .mlcostignore: local paths as `mlcost load` expands them
    (loader.expand), s3:// ones through the lake store's filesystem."""
    from ingest.pipeline import loader

    local = [p.removeprefix("file://") for p in map(s3_url, paths) if not p.startswith("s3://")]
    files, skipped = loader.expand(local) if local else ([], [])
    found = [RawFile(str(path), _size(path)) for path in files]
    for url in (p for p in map(s3_url, paths) if p.startswith("s3://")):
        objects, missing = _expand_s3(url)
        found += objects
        skipped += missing
    return list({f.name: f for f in found}.values()), skipped


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _expand_s3(url: str) -> tuple[list[RawFile], list[FileSummary]]:
    """The objects an s3:// URL names: the object itself, or every object under the prefix with one
    of the loader's suffixes, less those a .mlcostignore under the prefix declares not data."""
    from ingest.lake.store import Lake, LakeError
    from ingest.pipeline import loader

    rules = []
    try:
        fs = Lake(url).fs
        root = url.removeprefix("s3://").rstrip("/")
        if fs.isfile(root):
            return [RawFile(url, int(fs.info(root).get("size") or 0))], []
        listing = fs.find(root, detail=True) if fs.exists(root) else {}
        for key in sorted(k for k in listing if PurePosixPath(k).name == loader.NOT_DATA):
            text = fs.cat_file(key).decode("utf-8", errors="replace")
            rules += [(PurePosixPath(key).parent, line.strip()) for line in text.splitlines()
                      if line.strip() and not line.lstrip().startswith("#")]
    except LakeError as error:
        return [], [FileSummary(url, error=f"{url}: {error}")]
    except Exception as error:  # storage refusing (no credentials, no such bucket): this path fails, not the run
        return [], [FileSummary(url, error=f"{url}: cannot be listed ({type(error).__name__}: {_first_line(error)})")]
    files, skipped = [], []
    for key, info in sorted(listing.items()):
        name = PurePosixPath(key)
        if not any(name.name.lower().endswith(suffix) for suffix in loader.FILE_SUFFIXES):
            continue
        declared = next((f"s3://{base}/{loader.NOT_DATA}" for base, pattern in rules
                         if base in name.parents and fnmatch.fnmatchcase(str(name.relative_to(base)), pattern)), None)
        if declared:
            skipped.append(FileSummary(f"s3://{key}", status="not_data",
                                       warnings=[f"declared not data by {declared}: not read"]))
        else:
            files.append(RawFile(f"s3://{key}", int(info.get("size") or 0)))
    if not files and not skipped:
        skipped.append(FileSummary(url, error=f"{url}: no such object, or a prefix without files to load"))
    return files, skipped


def load_one(raw: RawFile, settings: LoadSettings) -> FileSummary:
    """Load one raw file into the lake (runs in a Spark task): lake_load.load_file, the function
    `mlcost load --lake` runs for each file; an s3:// object is read from a local copy but keeps its
    URL as its name. Never raises: any surprise is this file's failure, with its reason."""
    try:
        with _task_settings(settings):
            return _load_one(raw, settings)
    except Exception as error:  # the per-file barrier: one file never stops the others
        detail = _first_line(error)
        return FileSummary(raw.name, settings.kind, error=f"{raw.name}: could not be loaded ({type(error).__name__}"
                                                          f"{': ' + detail if detail else ''}); nothing from it was loaded")


def _load_one(raw: RawFile, settings: LoadSettings) -> FileSummary:
    from ingest.engine import values, warehouse
    from ingest.lake.store import open_lake
    from ingest.pipeline import lake_load, loader

    tz = values.zone(settings.tz)
    if tz is None:
        return FileSummary(raw.name, settings.kind, error=f"unknown time zone {settings.tz!r}")
    lake = open_lake(settings.lake)
    # the zone's canonical name, as lake_load.load_files names it: 'utc' and 'UTC' give one load id
    options = warehouse.load_options(getattr(tz, "key", None) or str(tz), settings.host, None, None, None)
    if not raw.name.startswith("s3://"):
        return lake_load.load_file(lake, Path(raw.name).resolve(), settings.kind, tz, settings.host, None, None, None,
                                   options, None, loader, display_name=raw.name)
    from ingest.lake.store import Lake

    with tempfile.TemporaryDirectory(prefix="mlcost-spark-raw-") as scratch:
        local = Path(scratch) / PurePosixPath(raw.name).name  # the same suffix: .csv.gz is read as gzip
        try:
            Lake(raw.name).fs.get_file(raw.name.removeprefix("s3://"), str(local))
        except (OSError, ValueError) as error:
            return FileSummary(raw.name, settings.kind, error=f"{raw.name}: cannot read ({error})")
        return lake_load.load_file(lake, local, settings.kind, tz, settings.host, None, None, None, options, None,
                                   loader, display_name=raw.name)


def _first_line(error: BaseException) -> str:
    """An error's first line of text, at most 300 characters (never a traceback)."""
    return (str(error).strip().splitlines() or [""])[0][:300]


class _task_settings:
    """Within it, this worker process reads the driver's settings file (written to a local file
    named by its content: identical text, identical file) and the driver's S3 endpoint."""

    def __init__(self, settings: LoadSettings) -> None:
        self.settings = settings
        self.saved: dict[str, str | None] = {}

    def __enter__(self) -> None:
        text = self.settings.config_text
        path = Path(tempfile.gettempdir()) / f"mlcost-spark-{hashlib.sha256(text.encode()).hexdigest()[:16]}.toml"
        if not path.exists():
            partial = path.with_suffix(f".{os.getpid()}.partial")
            partial.write_text(text, encoding="utf-8")
            os.replace(partial, path)
        wanted = {"MLCOST_CONFIG": str(path), **dict(self.settings.endpoints)}
        for name, value in wanted.items():
            self.saved[name] = os.environ.get(name)
            os.environ[name] = value

    def __exit__(self, *_) -> None:
        for name, value in self.saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def load(spark, files: list[RawFile], settings: LoadSettings) -> list[FileSummary]:
    """Every file loaded by its own Spark task (the largest first); their summaries in `files`' order."""
    if not files:
        return []
    order = sorted(range(len(files)), key=lambda i: -files[i].size_bytes)
    tasks = spark.sparkContext.parallelize([(i, files[i]) for i in order], numSlices=len(files))
    done = dict(tasks.map(lambda item: (item[0], load_one(item[1], settings))).collect())
    return [done[i] for i in range(len(files))]


def totals(summaries: list[FileSummary]) -> dict[str, int]:
    """Files by outcome and the rows loaded and rejected over all of them."""
    count = {"files": len(summaries), "loaded": 0, "already_loaded": 0, "rejected": 0, "not_data": 0, "failed": 0}
    for summary in summaries:
        outcome = "failed" if summary.error else summary.status
        count[outcome if outcome in count else "failed"] += 1
    count["rows_loaded"] = sum(s.rows_loaded for s in summaries)
    count["rows_rejected"] = sum(s.rows_rejected for s in summaries)
    return count


def totals_line(count: dict[str, int], seconds: float, where: str) -> str:
    return (f"mlcost-spark: {count['files']:,} files: {count['loaded']:,} loaded, {count['already_loaded']:,} "
            f"already loaded, {count['rejected']:,} rejected, {count['not_data']:,} not data, {count['failed']:,} "
            f"failed; {count['rows_loaded']:,} rows loaded, {count['rows_rejected']:,} rejected; "
            f"{seconds:.1f} s on {where}")


def settings_for(lake: str, kind: str | None, tz: str, host: str | None, config_path: Path | None) -> LoadSettings:
    """The tasks' settings from the driver's: its settings file's text (config_path, else the user's
    file as `mlcost load` finds it: $MLCOST_CONFIG, else ./mlcost.toml) and S3 endpoint."""
    from ingest.settings import config

    path = config_path or config.user_path()
    text = path.read_text(encoding="utf-8") if path else ""
    config.check_text(text, path or Path("mlcost.toml"))  # ConfigError on the driver, once, not in every task
    endpoints = tuple((name, os.environ[name]) for name in ENDPOINT_VARIABLES if os.environ.get(name))
    return LoadSettings(s3_url(lake), kind, tz, host, text, endpoints)


def run(spark, paths: list[str], settings: LoadSettings, as_json: bool = False) -> int:
    """The `load` subcommand after its arguments are checked: 0 when every file loaded cleanly (or
    was loaded before), 1 when a file failed or had rejected lines (as `mlcost load --lake`)."""
    import json

    from ingest.engine.report import summary_lines
    from ingest.lake.store import open_lake
    from ingest.pipeline import lake_load

    started = time.perf_counter()
    files, skipped = expand(paths)
    lake_load.vacuum(open_lake(settings.lake))  # what a load killed mid-write left behind, once, on the driver
    try:
        summaries = skipped + load(spark, files, settings)
    except Exception as error:  # a task that died (a lost executor, a killed worker): the job stops
        detail = _first_line(error)
        print(f"mlcost-spark: the Spark job stopped ({type(error).__name__}: {detail}); files already "
              "committed stay loaded, run the same command again to load the rest", flush=True)
        return 1
    count = totals(summaries)
    if as_json:
        print(json.dumps({"files": [s.to_json() for s in summaries], "totals": count}, indent=2, default=str))
    else:
        for summary in summaries:
            print("\n".join(summary_lines(summary)), flush=True)
        print(totals_line(count, time.perf_counter() - started, f"Spark {spark.sparkContext.master}"), flush=True)
    return 0 if summaries and all(s.ok for s in summaries) else 1


def add_parser(commands) -> None:
    """The `load` subcommand of mlcost-spark (mlcost/spark_job.py)."""
    load_ = commands.add_parser(
        "load", help="load raw files into the lake as Spark tasks, one file per task, each checked by mlcost's loader",
        description="Expand the paths on the driver, then load each raw file in its own Spark task exactly as "
                    "`mlcost load --lake` loads it (detection, strict parsing, rejects with line numbers, Parquet "
                    "into the lake, the ledger entry last). One line per file and the totals; exit 1 when a file "
                    "failed or had rejected lines.")
    load_.add_argument("paths", nargs="+", metavar="PATH",
                       help="file, folder (recursive), glob or s3:// object or prefix; .gz and .zst are read too")
    load_.add_argument("--lake", required=True, help="the lake's root: a folder or s3:// (or s3a://) bucket/prefix")
    load_.add_argument("--kind", help="skip detection and read every file as this kind (as `mlcost load --kind`)")
    load_.add_argument("--tz", default="UTC", metavar="ZONE",
                       help="time zone of timestamps written without an offset (default UTC)")
    load_.add_argument("--host", help="GPU traces: the host the samples come from")
    load_.add_argument("--config", help="the settings file the tasks load with (default: $MLCOST_CONFIG, else ./mlcost.toml)")
    load_.add_argument("--json", action="store_true", help="print one JSON document: each file's summary and the totals")
    load_.add_argument("--master", help="Spark master when not set by spark-submit (default local[2])")
    load_.add_argument("--driver-memory", default="1g", help="driver memory for a local master (default 1g)")


def main(args, session) -> int:
    """`mlcost-spark load` with parsed `args`; `session(master, memory)` gives the SparkSession."""
    import sys

    from ingest.engine import values
    from ingest.lake.store import LakeError
    from ingest.pipeline import loader
    from ingest.settings import config

    def problem(message: str, code: int = 2) -> int:
        print(f"mlcost-spark: {message}", file=sys.stderr, flush=True)
        return code

    if args.kind and args.kind not in loader.KINDS:
        return problem(f"unknown kind {args.kind!r} (known: {', '.join(loader.KINDS)})")
    if values.zone(args.tz) is None:
        return problem(f"unknown time zone {args.tz!r} (use an IANA name such as Europe/Paris)")
    try:
        settings = settings_for(args.lake, args.kind, args.tz, args.host, Path(args.config) if args.config else None)
    except config.ConfigError as error:
        return problem(str(error))
    except OSError as error:
        return problem(f"{args.config}: cannot be read ({error.strerror or error})")
    try:
        spark = session(args.master, args.driver_memory)
    except ImportError:
        return problem("pyspark is not installed: pip install 'mlcost[spark]' (and Java 17)")
    try:
        return run(spark, args.paths, settings, args.json)
    except LakeError as error:
        return problem(f"the lake {args.lake} cannot be used: {error}", 1)
    except Exception as error:  # the driver's vacuum of the lake: storage refusing, no credentials
        return problem(f"the lake {args.lake} cannot be used ({type(error).__name__}: {_first_line(error)})", 1)
