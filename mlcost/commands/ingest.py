"""`mlcost ingest` (files, folders, globs), `mlcost collect` (NVML sampler), `mlcost rollup`."""
from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import time
from pathlib import Path

from ingest.engine import values
from ingest.engine.contract import BadValue
from ingest.engine.report import summary_lines
from mlcost.common import EXIT_PROBLEMS, EXIT_USAGE, say

# loader.KINDS' names, written out so that registering `--kind` does not import every parser
# (tests/test_startup.py checks the two agree)
KIND_CHOICES = ("billing_aws", "billing_aws_dbr", "billing_azure", "billing_focus", "billing_gcp", "codecarbon", "dcgm",
                "dcgm+serving-metrics", "gpu-collector", "nvidia-smi", "runs", "serving", "serving-metrics", "slurm", "wandb")


def register(commands) -> None:
    ingest = commands.add_parser(
        "ingest", help="load files, folders or globs into the warehouse",
        description="Load files, folders (recursive) or globs into the warehouse, checking every line; .gz and "
                    ".zst files are decompressed as they are read.")
    ingest.add_argument("paths", nargs="+", metavar="PATH", help="file, folder (recursive) or glob; .gz and .zst are read too")
    ingest.add_argument("--kind", choices=KIND_CHOICES, help="skip detection and read every file as this kind")
    ingest.add_argument("--json", action="store_true", help="print a JSON array with one summary per file")
    ingest.add_argument("--tz", default="UTC", metavar="ZONE", help="time zone of timestamps written without an offset (default UTC)")
    ingest.add_argument("--host", help="GPU traces: the host the samples come from (overrides the file's host column or label)")
    ingest.add_argument("--at", metavar="TIME", help="scrapes without sample timestamps (DCGM, inference servers): when the scrape "
                                     "(of a sequence, the last one) was taken (ISO-8601)")
    ingest.add_argument("--started-at", metavar="TIME", help="an inference server's single scrape: when the server started, i.e. its "
                                             "counters' zero (ISO-8601; else read from _created or process_start_time_seconds)")
    ingest.add_argument("--scrape-interval", metavar="SECONDS", type=_seconds,
                        help="a file of inference-server scrapes one after another without timestamps: the time between "
                             "them (e.g. 60, 60s, 5m), the last taken --at")
    ingest.set_defaults(run=run_ingest)

    collect = commands.add_parser(
        "collect", help="sample every NVIDIA GPU through NVML into rotating trace files",
        description="Sample every NVIDIA GPU through NVML (power, energy, utilization, memory) into rotating "
                    "CSV trace files that `mlcost ingest` reads.")
    collect.add_argument("--out", default="gpu_traces", metavar="DIR", help="folder for the trace files (default ./gpu_traces)")
    collect.add_argument("--interval", type=float, default=10.0, metavar="SECONDS", help="seconds between samples (default 10)")
    collect.add_argument("--rotate", type=float, default=3600.0, metavar="SECONDS",
                         help="seconds after which a new file is started (default 3600)")
    collect.add_argument("--host", help="host name written in the files (default: this machine's name)")
    collect.set_defaults(run=run_collect)

    rollup = commands.add_parser(
        "rollup", help="recompute the per-minute GPU figures with the current [gpu] settings",
        description="Recompute the per-minute GPU figures (idle, energy, coverage) with the current [gpu] "
                    "settings of mlcost.toml.")
    rollup.set_defaults(run=run_rollup)


def run_ingest(args: argparse.Namespace) -> int:
    from ingest.pipeline import loader

    tz = values.zone(args.tz)
    if tz is None:
        say(f"unknown time zone {args.tz!r} (use an IANA name such as Europe/Paris)")
        return EXIT_USAGE
    try:
        at = values.timestamp(args.at, "--at", tz)
        started_at = values.timestamp(args.started_at, "--started-at", tz)
    except BadValue as error:
        say(str(error))
        return EXIT_USAGE
    files, missing = loader.expand(args.paths)
    summaries = list(missing)
    if not args.json:
        for summary in missing:
            print("\n".join(summary_lines(summary)), flush=True)
    with _Progress(files, enabled=_show_progress(args)) as progress, loader.batch(files):
        for path in files:
            progress.start(path)
            summary = loader.ingest_file(path, args.kind, tz, host=args.host, at=at, on_progress=progress.update,
                                         started_at=started_at, scrape_interval_s=args.scrape_interval)
            summaries.append(summary)
            if not args.json:
                progress.write("\n".join(summary_lines(summary)))
    if args.json:
        print(json.dumps([s.to_json() for s in summaries], indent=2))
    return 0 if summaries and all(s.ok for s in summaries) else EXIT_PROBLEMS


def _seconds(text: str) -> float:
    """Seconds from '60', '60s', '5m' or '1h'; argparse shows the error of anything else."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not found or float(found[1]) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a length of time such as 60, 60s, 5m or 1h")
    return float(found[1]) * {"": 1, "s": 1, "m": 60, "h": 3600}[found[2]]


def run_collect(args: argparse.Namespace) -> int:
    from ingest.formats.gpu import collector

    return collector.main(Path(args.out), args.interval, args.rotate, args.host)


def run_rollup(args: argparse.Namespace) -> int:
    from ingest.engine import warehouse

    gpus = warehouse.rebuild_gpu_rollups()
    print(f"mlcost: recomputed the per-minute figures of {gpus} GPUs with the current [gpu] settings")
    return 0


def _show_progress(args: argparse.Namespace) -> bool:
    return not args.json and sys.stderr.isatty()


class _Progress:
    """Two bars on stderr (tqdm): every file's bytes, and the current file's bytes and rows, each
    with its rate and time left. Disabled, it draws nothing and write() just prints."""

    def __init__(self, files: list[Path], enabled: bool) -> None:
        from tqdm import tqdm

        self.enabled, self.files_total = enabled, len(files)
        self.files_done, self.bytes_before, self.started = 0, 0, 0.0
        total_bytes = sum(_size(path) for path in files)
        # a terminal that reports no size (0 x 0, as a bare pty does) gets the fallback's:
        # tqdm would draw nothing in 0 rows
        width, height = shutil.get_terminal_size((100, 24))
        self.overall = tqdm(total=total_bytes, unit="B", unit_scale=True, unit_divisor=1024, position=0,
                            desc=f"files 0/{len(files)}", disable=not enabled, file=sys.stderr,
                            ncols=width, nrows=height, leave=False)
        self.current = tqdm(total=0, unit="B", unit_scale=True, unit_divisor=1024, position=1,
                            disable=not enabled, file=sys.stderr, ncols=width, nrows=height, leave=False)

    def __enter__(self) -> _Progress:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.current.close()
        self.overall.close()

    def start(self, path: Path) -> None:
        """A new file begins: the file bar restarts at 0 of its size."""
        if self.files_done:  # the previous file is done whole
            self.bytes_before += self.current.total or 0
        self.files_done += 1
        self.started = time.monotonic()
        self.overall.set_description(f"files {self.files_done}/{self.files_total}", refresh=False)
        self.current.set_description(_short(path.name), refresh=False)
        self.current.set_postfix_str("0 rows", refresh=False)
        self.current.reset(total=_size(path))

    def update(self, bytes_done: int, rows_done: int) -> None:
        """loader's on_progress: bytes and rows done within the current file."""
        if not self.enabled:
            return
        self.current.update(max(bytes_done - self.current.n, 0))
        self.overall.update(max(self.bytes_before + bytes_done - self.overall.n, 0))
        elapsed_s = max(time.monotonic() - self.started, 1e-9)
        self.current.set_postfix_str(f"{rows_done:,} rows, {rows_done / elapsed_s:,.0f} rows/s")

    def write(self, text: str) -> None:
        """A summary on stdout, above the bars."""
        if self.enabled:
            self.current.write(text, file=sys.stdout)
            sys.stdout.flush()
        else:
            print(text, flush=True)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _short(name: str, width: int = 28) -> str:
    return name if len(name) <= width else "…" + name[-(width - 1):]
