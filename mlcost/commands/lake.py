"""`mlcost load --lake` (files into an open lake), `mlcost derive` (its derived tables), `mlcost lake vacuum`."""
from __future__ import annotations

import argparse
import json

from ingest.engine import values
from ingest.engine.contract import BadValue
from ingest.engine.report import summary_lines
from mlcost.common import EXIT_PROBLEMS, EXIT_USAGE, say

LAKE_HELP = "a folder or s3://bucket/prefix (default: [warehouse] lake of the settings, or $MLCOST_LAKE)"


def register(commands) -> None:
    load = commands.add_parser(
        "load", help="load files into an open lake (Parquet and a ledger in a folder or on S3)",
        description="Check each file with mlcost's own loader (rejects with line numbers, as `mlcost ingest`), then "
                    "write its rows as Parquet files into the lake and commit the load in the lake's ledger. Any "
                    "number of processes on any number of machines may load disjoint files into one lake at once.")
    load.add_argument("paths", nargs="+", metavar="PATH", help="file, folder (recursive) or glob; .gz and .zst are read too")
    load.add_argument("--lake", metavar="LAKE", help=LAKE_HELP)
    load.add_argument("--kind", help="skip detection and read every file as this kind (the kinds of `mlcost ingest --kind`)")
    load.add_argument("--json", action="store_true", help="print a JSON array with one summary per file")
    load.add_argument("--tz", default="UTC", metavar="ZONE", help="time zone of timestamps written without an offset (default UTC)")
    load.add_argument("--host", help="GPU traces: the host the samples come from")
    load.set_defaults(run=run_load)

    derive = commands.add_parser(
        "derive", help="compute the lake's derived tables (GPU rollups, run energy, the bill's allocation)",
        description="Compute the derived tables (per-minute GPU rollups, idle GPU-hours, run energy, bill lines' runs, "
                    "the bill's allocation by day) from the lake's committed loads with DuckDB, write them under "
                    "derived/ and make them the generation readers use.")
    derive.add_argument("--lake", metavar="LAKE", help=LAKE_HELP)
    derive.set_defaults(run=run_derive)

    lake = commands.add_parser("lake", help="look after an open lake", description="Look after an open lake.")
    actions = lake.add_subparsers(required=True, metavar="ACTION", help="run `mlcost lake ACTION --help` for its options")
    vacuum = actions.add_parser(
        "vacuum", help="remove files no reader reads (dead loads' files, old derived generations)",
        description="Remove the lake's files no reader reads once older than --older-than: data files of loads that "
                    "were never committed (a process killed mid-load) or were superseded, and derived generations "
                    "other than the current one.")
    vacuum.add_argument("--lake", metavar="LAKE", help=LAKE_HELP)
    vacuum.add_argument("--older-than", type=float, default=3600.0, metavar="SECONDS",
                        help="leave files younger than this alone: a load may still be writing them (default 3600)")
    vacuum.set_defaults(run=run_vacuum)
    status = actions.add_parser("status", help="the lake's committed loads and derived generation",
                                description="Print the lake's visible loads and the derived generation readers use, as JSON.")
    status.add_argument("--lake", metavar="LAKE", help=LAKE_HELP)
    status.set_defaults(run=run_status)


def _lake(args: argparse.Namespace) -> str | None:
    from ingest.lake import settings

    url = args.lake or settings.lake_url()
    if not url:
        say("no lake: pass --lake FOLDER_OR_S3_PREFIX or set [warehouse] lake in mlcost.toml")
    return url


def run_load(args: argparse.Namespace) -> int:
    from ingest.pipeline import loader
    from ingest.pipeline import lake_load as writer

    url = _lake(args)
    if not url:
        return EXIT_USAGE
    if args.kind and args.kind not in loader.KINDS:
        say(f"unknown kind {args.kind!r} (known: {', '.join(loader.KINDS)})")
        return EXIT_USAGE
    tz = values.zone(args.tz)
    if tz is None:
        say(f"unknown time zone {args.tz!r} (use an IANA name such as Europe/Paris)")
        return EXIT_USAGE
    files, missing = loader.expand(args.paths)
    summaries = list(missing)
    if not args.json:
        for summary in missing:
            print("\n".join(summary_lines(summary)), flush=True)
    try:
        for summary in writer.load_files(url, files, args.kind, tz, host=args.host):
            summaries.append(summary)
            if not args.json:
                print("\n".join(summary_lines(summary)), flush=True)
    except (OSError, BadValue) as error:
        say(f"the lake {url} cannot be written: {error}")
        return EXIT_PROBLEMS
    if args.json:
        print(json.dumps([s.to_json() for s in summaries], indent=2))
    return 0 if summaries and all(s.ok for s in summaries) else EXIT_PROBLEMS


def run_derive(args: argparse.Namespace) -> int:
    from ingest.pipeline import lake_derive as derive

    url = _lake(args)
    if not url:
        return EXIT_USAGE
    record = derive.derive(url)
    rows = ", ".join(f"{table} {count:,}" for table, count in record["rows"].items() if count)
    print(f"mlcost: derived generation {record['generation']} from {len(record['loads'])} loads ({rows or 'no rows'})")
    return 0


def run_vacuum(args: argparse.Namespace) -> int:
    from ingest.pipeline import lake_load as writer
    from ingest.lake.store import open_lake

    url = _lake(args)
    if not url:
        return EXIT_USAGE
    removed = writer.vacuum(open_lake(url), args.older_than)
    print(f"mlcost: removed {len(removed)} files no reader reads")
    return 0


def run_status(args: argparse.Namespace) -> int:
    from ingest.lake.store import open_lake

    url = _lake(args)
    if not url:
        return EXIT_USAGE
    lake = open_lake(url)
    visible = lake.visible(fresh=True)
    current = lake.current(fresh=True)
    covered = {int(load) for load in current.get("loads", [])}
    print(json.dumps({"loads": [{key: entry.record.get(key) for key in
                                 ("load_id", "path", "kind", "rows_loaded", "rows_rejected", "committed_at")}
                                for entry in visible],
                      "derived_generation": current.get("generation"),
                      "derived_is_current": covered == {entry.load_id for entry in visible}}, indent=2))
    return 0
