"""`mlcost loads` (the load ledger) and `mlcost unload FILE|LOAD_ID` (remove one load and its rows)."""
from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

from ingest.engine import warehouse
from mlcost.common import EXIT_PROBLEMS, EXIT_USAGE, say

if TYPE_CHECKING:  # annotations only: `mlcost ingest` starts without pandas (metrics.queries imports it)
    import pandas as pd

COLUMNS = {"load_id": "Load", "loaded_at": "Loaded (UTC)", "path": "File", "kind": "Kind",
           "options": "Options", "rows_loaded": "Loaded", "rows_rejected": "Rejected",
           "rows_current": "Rows in use"}


def register(commands) -> None:
    loads = commands.add_parser(
        "loads", help="list every load: id, when, file, kind, options, rows loaded and rejected",
        description="List every load, newest first: id, when, file, kind, options, rows loaded, rejected "
                    "and still in use.")
    loads.add_argument("--json", action="store_true", help="print a JSON array with one record per load")
    loads.set_defaults(run=run_loads)

    unload = commands.add_parser(
        "unload", help="remove one load and every row it brought",
        description="Remove one load: every row it brought and its rejected lines.")
    unload.add_argument("target", metavar="FILE|LOAD_ID",
                        help="a file loaded before (found by its content, else by the name it was loaded as) "
                             "or a load id from `mlcost loads`")
    unload.set_defaults(run=run_unload)


def run_loads(args: argparse.Namespace) -> int:
    from metrics import queries
    from present.format import plain_table, text_table

    ledger = queries.loads()
    if args.json:
        records = ledger.drop(columns="sha256").assign(
            loaded_at=ledger["loaded_at"].map(lambda t: t.isoformat())).to_dict("records")
        print(json.dumps(records, indent=2, default=int))
        return 0
    if ledger.empty:
        print("mlcost: nothing loaded yet (mlcost ingest PATH, or mlcost demo for the sample data)")
        return 0
    header, rows = text_table(ledger[list(COLUMNS)], labels=COLUMNS)  # counts with separators, UTC times
    print("\n".join(plain_table(header, rows)))
    return 0


def run_unload(args: argparse.Namespace) -> int:
    from metrics import queries
    from present.format import plain_table, text_table

    ledger = queries.loads()
    matches = find(ledger, args.target)
    if matches.empty:
        say(f"no load matches {args.target!r}: give a file loaded before or a load id (see `mlcost loads`)")
        return EXIT_PROBLEMS
    if len(matches) > 1:
        listed = ", ".join(f"{row.load_id} ({row.path}, {row.loaded_at:%Y-%m-%d %H:%M})"
                           for row in matches.itertuples())
        say(f"{args.target!r} names {len(matches)} loads: {listed}; unload one by its id")
        return EXIT_USAGE
    load = matches.iloc[0]
    removed = warehouse.unload(int(load["load_id"]))
    if removed is None:  # another process removed it meanwhile
        say(f"load {load['load_id']} is no longer in the warehouse")
        return EXIT_PROBLEMS
    rows = ", ".join(f"{count:,} from {table}" for table, count in removed.items()) or "no rows"
    print(f"mlcost: unloaded load {load['load_id']} ({load['path']}, {load['kind']}): removed {rows}. "
          "Rows it had replaced from earlier loads are not restored; load those files again if you need them.")
    return 0


def find(ledger: pd.DataFrame, target: str) -> pd.DataFrame:
    """The loads `target` names: an existing file by its content, else a load id, else the name it
    was loaded as (the path as given, or its file name for uploads)."""
    path = Path(target).expanduser()
    if path.is_file():
        sha256 = hashlib.sha256(path.read_bytes()).hexdigest()
        return ledger[ledger["sha256"] == sha256]
    if target.strip().isdigit():
        return ledger[ledger["load_id"] == int(target)]
    names = ledger["path"].map(lambda p: {p, Path(p).name, str(Path(p).expanduser().resolve())})
    return ledger[names.map(lambda known: target in known or str(path.resolve()) in known)]
