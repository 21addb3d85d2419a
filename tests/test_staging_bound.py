"""The reader's rows staged as bound lists (staging._insert_bound, no pandas) equal the same rows
staged through Arrow (from_pylist), for every column type of the runs, run_evals and serving
tables: money, times, lists, maps, NULLs."""
from __future__ import annotations

import json
from datetime import timezone
from decimal import Decimal

from ingest.engine import reader, staging
from ingest.engine.contract import ParseContext
from ingest.formats.runs.run_summary import RUNS
from ingest.formats.serving import SERVING
from ingest.settings import config

RUN = {"run_id": "r", "project": "p", "team": "t", "start_time": "2026-10-01T00:00:00Z",
       "end_time": "2026-10-01T02:30:00.250000+02:00", "gpu_count": 2, "price_per_hour_usd": "2.123456",
       "gpu_uuids": ["GPU-a", "GPU-b"], "gpu_indices": [0, 3], "tags": {"team": "x", "n": 3, "flag": True, "none": None},
       "eval_history": [{"step": 1, "value": 0.5}, {"step": 2, "value": 0.25, "elapsed_s": 10}], "status": "completed"}
WINDOW = {"window_start": "2026-10-01T00:00:00Z", "window_seconds": 120, "service": "s", "model_version": "v1",
          "host": "h", "requests_total": 10, "requests_success": 9, "instance_type": "g5.12xlarge", "replicas": 2,
          "gpu_uuids": ["GPU-a"], "energy_kwh": 0.5}


def _lines() -> dict:
    runs = [dict(RUN, run_id=f"r{i}", project=None if i % 3 else "p", tags={} if i % 4 == 1 else RUN["tags"],
                 gpu_uuids=None if i % 2 else RUN["gpu_uuids"], estimated_cost_usd=None if i % 5 else 12.5)
            for i in range(40)]
    windows = [dict(WINDOW, host=f"h{i}", cost_usd=None if i % 2 else 1.25, energy_kwh=None if i % 3 else 0.5)
               for i in range(40)]
    return {RUNS: [(n + 1, json.dumps(r)) for n, r in enumerate(runs)],
            SERVING: [(n + 1, json.dumps(w)) for n, w in enumerate(windows)]}


def _staged(definition, lines, bound_rows: int, monkeypatch):
    monkeypatch.setattr(staging, "BOUND_ROWS", bound_rows)
    parsed = reader.read_lines(definition, lines, ParseContext("x.jsonl", timezone.utc), config.load().prices, None)
    con = staging.open_stage()
    staging.insert_parsed(con, parsed, "x.jsonl")
    return con, parsed


def test_bound_rows_equal_arrow_rows(monkeypatch) -> None:
    for definition, lines in _lines().items():
        bound, parsed = _staged(definition, lines, 10_000, monkeypatch)
        arrow, _ = _staged(definition, lines, -1, monkeypatch)
        tables = [t for t, rows in parsed.tables.items() if rows]
        assert definition.table in tables
        for table in tables:
            rows = bound.execute(f"SELECT * FROM {table} ORDER BY ALL").fetchall()
            assert rows == arrow.execute(f"SELECT * FROM {table} ORDER BY ALL").fetchall()
            assert len(rows) == len(parsed.tables[table])
        # values as the reader gave them, not only equal between the two paths
        if definition is RUNS:
            got = dict(bound.execute("SELECT run_id, tags FROM runs WHERE run_id = 'r0'").fetchall())
            assert got["r0"] == {"flag": "True", "n": "3", "none": "", "team": "x"}
            price = bound.execute("SELECT price_per_hour_usd FROM runs WHERE run_id = 'r2'").fetchall()[0][0]
            assert price == Decimal("2.123456")
            ended = bound.execute("SELECT epoch(ended_at - started_at) FROM runs WHERE run_id = 'r2'").fetchall()[0][0]
            assert ended == 0.5 * 3600 + 0.25
