"""`mlcost ingest` (files, folders, globs), `mlcost collect` (NVML sampler), `mlcost rollup`."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ingest import loader, values, warehouse
from ingest.contract import BadValue
from ingest.report import summary_lines
from mlcost.common import EXIT_PROBLEMS, EXIT_USAGE, say


def register(commands) -> None:
    ingest = commands.add_parser("ingest", help="load files, folders or globs into the warehouse")
    ingest.add_argument("paths", nargs="+", metavar="PATH", help="file, folder (recursive) or glob; .gz is read too")
    ingest.add_argument("--kind", choices=sorted(loader.KINDS), help="skip detection and read every file as this kind")
    ingest.add_argument("--json", action="store_true", help="print a JSON array with one summary per file")
    ingest.add_argument("--tz", default="UTC", help="time zone of timestamps written without an offset (default UTC)")
    ingest.add_argument("--host", help="GPU traces: the host the samples come from (overrides the file's host column or label)")
    ingest.add_argument("--at", help="DCGM scrapes without sample timestamps: when the scrape was taken (ISO-8601)")
    ingest.set_defaults(run=run_ingest)

    collect = commands.add_parser("collect", help="sample every NVIDIA GPU through NVML into rotating trace files")
    collect.add_argument("--out", default="gpu_traces", help="folder for the trace files (default ./gpu_traces)")
    collect.add_argument("--interval", type=float, default=10.0, help="seconds between samples (default 10)")
    collect.add_argument("--rotate", type=float, default=3600.0,
                         help="seconds after which a new file is started (default 3600)")
    collect.add_argument("--host", help="host name written in the files (default: this machine's name)")
    collect.set_defaults(run=run_collect)

    rollup = commands.add_parser("rollup", help="recompute the per-minute GPU figures with the current [gpu] settings")
    rollup.set_defaults(run=run_rollup)


def run_ingest(args: argparse.Namespace) -> int:
    tz = values.zone(args.tz)
    if tz is None:
        say(f"unknown time zone {args.tz!r} (use an IANA name such as Europe/Paris)")
        return EXIT_USAGE
    try:
        at = values.timestamp(args.at, "--at", tz)
    except BadValue as error:
        say(str(error))
        return EXIT_USAGE
    files, _ = loader.expand(args.paths)
    progress = _Progress(sum(p.stat().st_size for p in files)) if _show_progress(args) else None
    summaries = []
    for path, summary in loader.ingest_paths(args.paths, args.kind, tz, host=args.host, at=at):
        summaries.append(summary)
        if progress:
            progress.clear()
        if not args.json:
            print("\n".join(summary_lines(summary)), flush=True)
        if progress and path is not None:
            progress.advance(path.stat().st_size)
    if progress:
        progress.clear()
    if args.json:
        print(json.dumps([s.to_json() for s in summaries], indent=2))
    return 0 if summaries and all(s.ok for s in summaries) else EXIT_PROBLEMS


def run_collect(args: argparse.Namespace) -> int:
    from ingest import collector

    return collector.main(Path(args.out), args.interval, args.rotate, args.host)


def run_rollup(args: argparse.Namespace) -> int:
    gpus = warehouse.rebuild_gpu_rollups()
    print(f"mlcost: recomputed the per-minute figures of {gpus} GPUs with the current [gpu] settings")
    return 0


def _show_progress(args: argparse.Namespace) -> bool:
    return not args.json and sys.stderr.isatty()


class _Progress:
    """A one-line progress bar on stderr, by bytes read."""

    WIDTH = 30

    def __init__(self, total_bytes: int) -> None:
        self.total, self.done = max(total_bytes, 1), 0

    def advance(self, size_bytes: int) -> None:
        self.done += size_bytes
        filled = int(self.WIDTH * self.done / self.total)
        bar = "#" * filled + "." * (self.WIDTH - filled)
        sys.stderr.write(f"\r[{bar}] {self.done / 1e6:.1f}/{self.total / 1e6:.1f} MB")
        sys.stderr.flush()

    def clear(self) -> None:
        sys.stderr.write("\r" + " " * (self.WIDTH + 30) + "\r")
        sys.stderr.flush()
