"""Where one `mlcost ingest` spends its time: every statement on the load's staging connection
(the parse and the merge, which runs on the same connection with the warehouse attached), with
the CPU seconds of the whole process while it ran, the slowest first.

    python bench/ingest_profile.py FILE... [--top 25] [--sql OUT.sql]

Run it with MLCOST_DB pointing at a warehouse copy (the files are loaded into it). CPU seconds
(time.process_time: every thread of this process, DuckDB's included) are used rather than wall
seconds because they hardly change when other processes share the cores: on a busy 2-core
machine a statement's wall time was 3-4x its CPU time, its CPU time within ~15 % run to run.
Also printed: the staging database's memory and spill after the largest statements, and
the CPU seconds outside any statement (Python, imports, hashing the file).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ingest.engine import staging  # noqa: E402

STATEMENTS: list[tuple[float, float, str, str]] = []  # CPU s, wall s, SQL, memory after


class Timed:
    """A staging connection whose statements are timed (everything else is passed through)."""

    def __init__(self, con) -> None:
        self._con = con

    def execute(self, sql, *args, **kwargs):
        cpu, wall = time.process_time(), time.perf_counter()
        result = self._con.execute(sql, *args, **kwargs)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        memory = ""
        if cpu > 0.5:
            used, spilled = self._con.execute("SELECT sum(memory_usage_bytes), sum(temporary_storage_bytes) "
                                              "FROM duckdb_memory()").fetchone()
            memory = f"staging memory {used / 1e6:,.0f} MB, spilled {spilled / 1e6:,.0f} MB"
        STATEMENTS.append((cpu, wall, " ".join(str(sql).split()), memory))
        return result

    def __getattr__(self, name):
        return getattr(self._con, name)


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("files", nargs="+")
    options.add_argument("--top", type=int, default=25, help="statements shown (the costliest)")
    options.add_argument("--sql", type=Path, help="write every statement with its seconds here")
    args = options.parse_args()
    opened = staging.open_stage
    staging.open_stage = lambda *args, **kwargs: Timed(opened(*args, **kwargs))  # loader and merge call it through the module
    from mlcost.cli import main as mlcost

    began = time.perf_counter()
    sys.argv = ["mlcost", "ingest", "--json", *args.files]
    try:
        mlcost()
    except SystemExit:
        pass
    wall_s, cpu_s = time.perf_counter() - began, time.process_time()
    in_sql = sum(cpu for cpu, *_ in STATEMENTS)
    print(f"\n{len(STATEMENTS)} statements: {in_sql:.2f} CPU s of {cpu_s:.2f} CPU s in all "
          f"({cpu_s - in_sql:.2f} s outside them); {wall_s:.1f} s wall", file=sys.stderr)
    for cpu, wall, sql, memory in sorted(STATEMENTS, reverse=True)[:args.top]:
        print(f"{cpu:7.2f} CPU s {wall:7.2f} s wall  {sql[:140]}" + (f"\n{'':28}{memory}" if memory else ""),
              file=sys.stderr)
    if args.sql:
        args.sql.write_text("".join(f"-- {cpu:.3f} CPU s, {wall:.3f} s wall\n{sql};\n"
                                    for cpu, wall, sql, _ in STATEMENTS))


if __name__ == "__main__":
    main()
