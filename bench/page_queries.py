"""Why a page is slow cold: every warehouse query it makes, timed, and the slowest re-run with
DuckDB's profile (the operators that took the time).

    python bench/page_queries.py WAREHOUSE.duckdb [--page "Costs"] [--queries 3] [--operators 6]

Run it in the folder whose mlcost.toml the dashboard uses (bench/fleet.py's --keep folder holds
the fleet's). Per page (cold: caches cleared, as bench/page_timings.py): its cold seconds, how many
queries it made and their sum, then its slowest queries with the app function that made each and
the top operators of a re-run (seconds, rows, operator, details).
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
for folder in (REPO, BENCH_DIR):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))


@dataclass
class Query:
    """One warehouse query a page made: seconds, the app function that made it, its SQL and parameters."""

    seconds: float
    caller: str
    sql: str
    params: object
    operators: list[tuple[float, int, str, str]] = field(default_factory=list)


def _caller() -> str:
    """file:function of the nearest app/, metrics/ or outputs/ frame that made the query."""
    for frame in inspect.stack()[2:]:
        if any(f"{os.sep}{package}{os.sep}" in frame.filename for package in ("app", "metrics", "outputs")):
            return f"{Path(frame.filename).relative_to(REPO)}:{frame.function}"
    return "?"


def record_queries(log: list[Query]) -> None:
    """Time every warehouse.query/query_exact call from now on into `log`."""
    from ingest.engine import warehouse

    for name in ("query", "query_exact"):
        original = getattr(warehouse, name)

        def timed(sql, params=None, path=None, _original=original):
            caller = _caller()
            began = time.perf_counter()
            try:
                return _original(sql, params, path)
            finally:
                log.append(Query(time.perf_counter() - began, caller, sql, params))

        setattr(warehouse, name, timed)


def operators(sql: str, params: object, top: int) -> list[tuple[float, int, str, str]]:
    """The query re-run with DuckDB's JSON profile: its `top` operators by their own seconds,
    as (seconds, rows out, operator, details)."""
    from ingest.engine import warehouse

    fd, out = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        with warehouse.read() as con:
            con.execute("PRAGMA enable_profiling = 'json'")
            con.execute(f"PRAGMA profiling_output = '{out}'")  # a temp path of ours, no quotes in it
            con.execute(sql, params).fetchall()
            con.execute("PRAGMA disable_profiling")
        tree = json.loads(Path(out).read_text())
    finally:
        os.unlink(out)
    found = []
    pending = list(tree.get("operator", []))
    while pending:
        node = pending.pop()
        found.append((node.get("timing", 0.0), node.get("intermediate_rows", 0), node.get("type", "?"),
                      json.dumps(node.get("extra_info", {}))[:240]))
        pending.extend(node.get("children", []))
    return sorted(found, key=lambda op: -op[0])[:top]


def profile_pages(db: Path, only: list[str] | None, queries: int, top: int) -> list[tuple]:
    """Per page: (title, cold seconds, error, every Query made cold, slowest first; the first
    `queries` of them with their top operators)."""
    os.environ["MLCOST_DB"] = str(db)
    import page_timings

    log: list[Query] = []
    record_queries(log)
    import plotly.express  # noqa: F401  (imports are paid once per server, not per page)
    from app import cache  # noqa: F401
    from metrics import queries as app_queries, retrospective  # noqa: F401
    from outputs import report  # noqa: F401
    from present import charts  # noqa: F401

    page_timings._start_up()
    results = []
    for title, path in page_timings.pages():
        if only and title not in only:
            continue
        log.clear()
        timing = page_timings.time_page(path)
        made = sorted(log, key=lambda q: -q.seconds)  # the cold run's and the (mostly cached) rerun's
        for query in made[:queries]:
            query.operators = operators(query.sql, query.params, top)
        results.append((title, timing.cold_s, timing.error, made))
    return results


def report(results: list[tuple], queries: int) -> str:
    """The profile as text."""
    lines = []
    for title, cold_s, error, made in results:
        lines.append(f"== {title}: cold {cold_s:.2f} s; {len(made)} queries (cold run and rerun), "
                     f"{sum(q.seconds for q in made):.2f} s"
                     + (f"; the page raised: {error}" if error else ""))
        for query in made[:queries]:
            lines.append(f"  {query.seconds:6.2f} s  {query.caller}  {' '.join(query.sql.split())[:110]}")
            for seconds, rows, name, details in query.operators:
                lines.append(f"      {seconds:6.3f} s {rows:>11,} rows  {name}  {details}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("db", type=Path)
    parser.add_argument("--page", action="append", help="only this page title (repeatable)")
    parser.add_argument("--queries", type=int, default=3, help="slowest queries profiled per page")
    parser.add_argument("--operators", type=int, default=6, help="operators shown per query")
    args = parser.parse_args()
    print(report(profile_pages(args.db, args.page, args.queries, args.operators), args.queries))
    return 0


if __name__ == "__main__":
    sys.exit(main())
