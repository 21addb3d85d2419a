"""`mlcost allocation`: the bill of a period split into buckets and by a key, as a table or JSON."""
from __future__ import annotations

import argparse
import json
import re
from datetime import date, timedelta
from decimal import Decimal

from ingest.settings import config
from mlcost.common import EXIT_PROBLEMS, EXIT_USAGE, say


def register(commands) -> None:
    allocation = commands.add_parser(
        "allocation", help="split the bill of a period into training, serving, idle GPUs, shared and unallocated",
        description="Split the bill of a period so that every dollar of effective cost is in one bucket: "
                    "training, serving, idle GPUs, shared or unallocated; and by team, project or any tag.")
    period = allocation.add_mutually_exclusive_group()
    period.add_argument("--month", metavar="YYYY-MM",
                        help="the UTC month (default: the latest month with bill lines)")
    period.add_argument("--from", dest="date_from", metavar="DATE",
                        help="first UTC day (YYYY-MM-DD) of the period; with --to")
    allocation.add_argument("--to", dest="date_to", metavar="DATE",
                            help="last UTC day of the period, included (default: the --from day)")
    allocation.add_argument("--by", default="team", metavar="KEY",
                            help="split by team (default), project, namespace, pod or any tag key")
    allocation.add_argument("--json", action="store_true",
                            help="print JSON with exact amounts as decimal strings (to the bill's precision) "
                                 "instead of a table in cents")
    allocation.set_defaults(run=run_allocation)


def run_allocation(args: argparse.Namespace) -> int:
    """The allocation of the period (metrics/allocation.py) as a table or JSON on stdout."""
    from metrics import allocation

    try:
        start, end = _period(args)
    except ValueError as error:
        say(str(error))
        return EXIT_USAGE
    if start is None:
        say("the warehouse holds no bill lines yet; load a bill with `mlcost ingest BILL` first")
        return EXIT_PROBLEMS
    key = args.by.strip()
    if not key:
        say("--by needs a key: team, project, namespace, pod or a tag key")
        return EXIT_USAGE
    result = with_idle(allocation.summary(start, end, key, allocation.Rules.of(settings := config.load())),
                       start, end, settings)
    if args.json:
        print(json.dumps(trimmed(result), default=_plain, indent=2, ensure_ascii=False))
    else:
        print(table(result))
    if not result["currencies"]:
        say(f"no bill lines with an effective cost from {start} to {end - timedelta(days=1)}")
    return 0


def with_idle(result: dict, start: date, end: date, settings: config.Config) -> dict:
    """The allocation summary with each currency's idle GPUs (metrics/idle.py) under `idle`: all idle
    = not held by any run (the idle_gpu bucket) + held by runs while idle (in training)."""
    from metrics import allocation, idle

    found = idle.idle_cost(start, end, allocation.Rules.of(settings), tuple(settings.prices.gpu_usd_per_hour.items()))
    for currency, figures in result["currencies"].items():
        parts = found.billed.get(currency)
        if parts is not None:
            figures["idle"] = {"cost": parts.cost, "gpu_hours": parts.gpu_hours,
                               "not_held_by_runs": {"cost": parts.unallocated_cost,
                                                    "gpu_hours": parts.unallocated_gpu_hours},
                               "held_by_runs": {"cost": parts.held_cost, "gpu_hours": parts.held_gpu_hours},
                               "text": idle.parts_text(parts), "hours_text": idle.hours_text(parts)}
    return result


def _period(args: argparse.Namespace) -> tuple[date | None, date | None]:
    """[start, end) of --month, --from/--to, or the latest month with bill lines."""
    from metrics import allocation, queries

    if args.date_to and not args.date_from:
        raise ValueError("--to needs --from")
    if args.date_from:
        start = _day(args.date_from, "--from")
        last = _day(args.date_to, "--to") if args.date_to else start
        if last < start:
            raise ValueError(f"--to {last} is before --from {start}")
        return start, last + timedelta(days=1)
    if args.month:
        match = re.fullmatch(r"(\d{4})-(\d{2})", args.month.strip())
        if not match or not 1 <= int(match[2]) <= 12:
            raise ValueError(f"--month {args.month!r} is not a month (YYYY-MM)")
        return allocation.month_span(date(int(match[1]), int(match[2]), 1))
    last_day = queries.bill_days()["last_day"].iloc[0]
    if last_day is None or last_day != last_day:  # no bill: NULL
        return None, None
    return allocation.month_span(last_day)


def _day(text: str, option: str) -> date:
    try:
        return date.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{option} {text!r} is not a day (YYYY-MM-DD)") from None


def trimmed(result: dict) -> dict:
    """`result` with every amount at the bill's precision (BILL_PLACES decimals, the warehouse's
    DECIMAL(38,12)): a share computed by division carries no more decimals than the bill, and
    the allocation's pieces, rounded to that precision so that they add up to their line, still add up
    exactly. Trailing zeros are dropped ('4939.2', '2.45', '3670.070517511333')."""
    from present.format import BILL_PLACES

    return {**result, "currencies": {currency: _trim(figures, BILL_PLACES)
                                     for currency, figures in result["currencies"].items()}}


def _trim(node: object, places: int) -> object:
    from present.format import exact

    if isinstance(node, dict):
        return {key: _trim(value, places) for key, value in node.items()}
    if isinstance(node, list):
        return [_trim(value, places) for value in node]
    if isinstance(node, Decimal):
        return exact(node, places)
    return node


def _plain(value: object) -> object:
    from present.format import exact

    if isinstance(value, Decimal):
        return exact(value)
    if isinstance(value, date):
        return value.isoformat()
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def table(result: dict) -> str:
    """The allocation as aligned text: per currency the buckets, the split by key, the GPU nodes."""
    from metrics.allocation import BUCKET_LABELS
    from present.format import money

    out = [f"Allocation of the bill from {result['from']} to {result['to']} (UTC, by charge period)"]
    if not result["currencies"]:
        out.append("No bill lines in this period.")
    for currency, figures in result["currencies"].items():
        billed = figures["billed"]
        out += ["", f"{currency}: billed (effective cost) {money(billed, currency)} over {figures['lines']:,} bill lines"]
        if figures["lines_without_effective_cost"]:
            out.append(f"  ({figures['lines_without_effective_cost']:,} lines without an effective cost are left out)")
        rows = [(BUCKET_LABELS[bucket], amount) for bucket, amount in figures["buckets"].items()]
        out += _rows("bucket", rows, billed, currency)
        if "idle" in figures:  # the Idle GPUs bucket is the idle no run held; runs' idle is in Training runs
            out += ["", f"  {figures['idle']['text']}", f"  {figures['idle']['hours_text']}"]
        out += _rows(f"by {result['by']}", sorted(figures["by_key"].items(), key=lambda kv: -kv[1]), billed, currency)
        if figures["nodes"]:
            # the node's idle no run held (its share of the Idle GPUs bucket); runs' idle is in the line above
            out += ["", f"  {'GPU node':<24}{'Billed':>14}{'Per GPU-hour':>14}{'Idle GPU-h, no run':>20}"
                        f"{'Idle cost, no run':>20}"]
            for host, node in figures["nodes"].items():
                out.append(f"  {host:<24}{money(node['billed'], currency):>14}"
                           f"{money(node['rate_per_gpu_hour'] or 0, currency):>14}"
                           f"{node['idle_gpu_hours']:>20,.1f}{money(node['idle_gpu'], currency):>20}")
    return "\n".join(out)


def _rows(title: str, rows: list[tuple[str, Decimal]], billed: Decimal, currency: str) -> list[str]:
    """One amount per row, rounded half-up to cents with the currency; its share of the bill in %."""
    from present.format import money, rounded

    lines = ["", f"  {title:<50}{'Amount':>16}{'Share':>8}"]
    for name, amount in rows:
        share = f"{rounded(amount / billed * 100, 1)}%" if billed else ""
        lines.append(f"  {name[:50]:<50}{money(amount, currency):>16}{share:>8}")
    return lines
