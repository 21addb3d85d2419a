"""Benchmark the runs slice against baselines measured in the same process (ratios, not seconds).

    python bench/bench_runs.py [--runs N]

- parse: ingest.formats.runs.run_summary.parse vs plain json.loads of the same lines
- ingest: loader.ingest_file (parse + validate + load into DuckDB) vs the same json.loads
- page query: metrics.queries.training_runs (frontier, dominance, cost-to-target) vs SELECT * FROM runs
"""
from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path


def synthetic_runs(count: int) -> list[str]:
    rng = random.Random(7)
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    lines = []
    for i in range(count):
        begin = start + timedelta(minutes=rng.randrange(0, 300 * 24 * 60))
        hours = rng.uniform(0.2, 30)
        record = {
            "run_id": f"bench-{i:06d}", "project": f"p{i % 12}", "team": f"t{i % 4}",
            "start_time": begin.isoformat(), "end_time": (begin + timedelta(hours=hours)).isoformat(),
            "instance_type": "g5.xlarge", "price_per_hour_usd": 1.006,
            "throughput_examples_per_sec": rng.uniform(100, 2000), "val_metric": rng.uniform(0.5, 0.95),
            "val_metric_name": "accuracy", "status": "completed",
            "eval_history": [{"elapsed_s": hours * 3600 * k / 4, "step": k * 100,
                              "value": 0.5 + 0.1 * k} for k in range(1, 5)],
        }
        lines.append(json.dumps(record))
    return lines


def best_of(repeats: int, action) -> float:
    timings = []
    for _ in range(repeats):
        began = time.perf_counter()
        action()
        timings.append(time.perf_counter() - began)
    return min(timings)


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--runs", type=int, default=20000)
    count = options.parse_args().runs
    with tempfile.TemporaryDirectory() as folder:
        os.environ["MLCOST_DB"] = str(Path(folder) / "bench.duckdb")
        from metrics import queries
        from app.filters import Filters
        from ingest.engine import warehouse
        from ingest.formats.runs import run_summary
        from ingest.pipeline import loader
        from ingest.engine.contract import ParseContext, numbered

        lines = synthetic_runs(count)
        path = Path(folder) / "runs.jsonl"
        path.write_text("\n".join(lines) + "\n")
        context = ParseContext("runs.jsonl", timezone.utc)

        baseline = best_of(3, lambda: [json.loads(line, parse_float=Decimal) for line in lines])
        parse = best_of(3, lambda: run_summary.parse(numbered(lines), context))
        began = time.perf_counter()
        summary = loader.ingest_file(path)
        ingest = time.perf_counter() - began
        assert summary.rows_loaded == count, summary

        select_all = best_of(3, lambda: warehouse.query("SELECT * FROM runs"))
        page = best_of(3, lambda: queries.training_runs(Filters(), "accuracy", 0.7))

    print(f"runs: {count}")
    print(f"json.loads baseline      {baseline:8.3f} s")
    print(f"parse / baseline         {parse / baseline:8.2f} x")
    print(f"ingest_file / baseline   {ingest / baseline:8.2f} x  ({count / ingest:,.0f} runs/s)")
    print(f"SELECT * FROM runs       {select_all:8.3f} s")
    print(f"training_runs / SELECT * {page / select_all:8.2f} x")


if __name__ == "__main__":
    main()
