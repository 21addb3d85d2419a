"""`mlcost report`: the monthly efficiency retrospective as Markdown or offline HTML."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ingest.settings import config
from mlcost.common import EXIT_PROBLEMS, EXIT_USAGE, say


def register(commands) -> None:
    report = commands.add_parser(
        "report", help="write the monthly efficiency retrospective as Markdown or HTML",
        description="Write the monthly efficiency retrospective of a UTC month, against the month before, "
                    "as Markdown or as one offline HTML file.")
    report.add_argument("--month", metavar="YYYY-MM", help="the UTC month (default: the latest month with data)")
    report.add_argument("--format", choices=("md", "html"), default="md", help="md (default) or html")
    report.add_argument("--out", metavar="PATH",
                        help="file to write (default: Markdown to stdout, HTML to ./mlcost-report-YYYY-MM.html)")
    report.set_defaults(run=run_report)


def run_report(args: argparse.Namespace) -> int:
    """The retrospective of one month (metrics/retrospective.py) rendered by outputs/report.py."""
    from ingest.engine import warehouse

    with warehouse.session():  # one read connection for the report's queries
        return _report(args)


def _report(args: argparse.Namespace) -> int:
    from metrics import retrospective
    from outputs import report

    if args.month is None:
        month = retrospective.latest_month()
        if month is None:
            say("the warehouse holds no data yet; load some with `mlcost ingest PATH` first")
            return EXIT_PROBLEMS
    else:
        try:
            month = retrospective.parse_month(args.month)
        except ValueError as error:
            say(f"--month {error}")
            return EXIT_USAGE
    retro = retrospective.build(month, config.load())
    text = report.markdown(retro) if args.format == "md" else report.html_report(retro)
    out = args.out or (None if args.format == "md" else f"mlcost-report-{month:%Y-%m}.html")
    if out is None:
        sys.stdout.write(text)
        return 0
    try:
        Path(out).parent.mkdir(parents=True, exist_ok=True)  # `--out reports/2026-11.md` into a new folder
        Path(out).write_text(text, encoding="utf-8")
    except OSError as error:
        say(f"cannot write {out}: {error.strerror or error}")
        return EXIT_PROBLEMS
    say(f"wrote the {month:%Y-%m} retrospective to {out}")
    return 0
