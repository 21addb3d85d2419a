"""The run-summary definition (ingest/formats/runs/run_summary.py) read by the engine's two paths,
the SQL pass (ingest/engine/batch_sql.py) and the generic reader (ingest/engine/reader.py), over
every run file of the corpus: the sample runs, the tests' run fixtures, the record kinds and seeded
random records of tests/run_cases.py, the fuzz findings of tests/test_fuzz.py, and hand-made lines
for every rule of the definition. Both paths must stage the same runs, eval points, rejects and
totals. (The definition was compared with the old run parsers line by line until they were
deleted; the values themselves are checked against plain Python in tests/test_runs_staged.py.)"""
from __future__ import annotations

import json
import random
import re
from datetime import timezone
from pathlib import Path
from typing import Any

from ingest.engine import batch_sql, reader, staging
from ingest.engine.batch_spellings import LONG_NUMBER
from ingest.engine.contract import ParseContext
from ingest.formats.runs import run_summary
from tests import run_cases
from tests.conftest import REPO_ROOT

UTC = timezone.utc
BARE = {"run_id": "h", "start_time": "2025-05-05T16:00:00Z", "end_time": "2025-05-05T18:30:00Z"}
COMPARED = ("runs", "run_evals", "rejects")


def staged(con) -> dict[str, list]:
    cursor = con.execute("SELECT * EXCLUDE (tags, load_id), map_entries(tags) AS tags FROM runs ORDER BY run_id")
    names = [d[0] for d in cursor.description]
    runs = [dict(zip(names, row)) for row in cursor.fetchall()]
    evals = con.execute("SELECT * FROM run_evals ORDER BY run_id, seq").fetchall()
    rejects = con.execute("SELECT line, reason, raw FROM rejects ORDER BY line, reason").fetchall()
    return {"runs": {r["run_id"]: r for r in runs}, "run_evals": evals, "rejects": rejects}


def two_ways(path: Path, tz=UTC) -> tuple[dict, dict, object, Any]:
    """(staged by the SQL pass, staged by the reader alone, the SQL pass's Staged, the reader's Parsed)."""
    ctx = ParseContext(str(path), tz)
    cons = [staging.open_stage() for _ in range(2)]
    try:
        result = run_summary.stage(staging.Source.of(path), cons[0], ctx)
        parsed = run_summary.parse(staging.lines(staging.Source.of(path)), ctx)
        staging.insert_parsed(cons[1], parsed, str(path))
        return staged(cons[0]), staged(cons[1]), result, parsed
    finally:
        for con in cons:
            con.close()


# --- the files ----------------------------------------------------------------------------------
def hand_made() -> list[str]:
    """A line for every rule of the definition: each field's bad value, each synonym, the hashed
    id, the tags map, every eval-history reason."""
    lines = [json.dumps({**BARE, "run_id": f"field-{name}", name: value}) for name, value in (
        ("start_time", "garbage"), ("end_time", 5e20), ("price_per_hour_usd", "x"), ("estimated_cost_usd", -1),
        ("gpu_uuids", {"a": 1}), ("gpu_count", -1), ("gpu_count", 2_000_000), ("energy_kwh", -1),
        ("throughput_examples_per_sec", "fast"), ("examples", 1.5), ("val_metric_name", ["x"]), ("project", {}),
        ("status", "Exploded"), ("status", " finished "), ("status", "CRASHED"), ("goal", "up"), ("goal", "Higher"),
        ("val_metric", "NaN"), ("target_metric", True), ("emissions_kg", -2), ("tags", []), ("tags", {"k": {}}),
        ("tags", {"b": 2, "a": None, "c": False, "d": "x"}), ("eval_history", "x"), ("eval_history", ["x"]),
        ("eval_history", [{"step": 1}]), ("eval_history", [{"value": "v"}]), ("eval_history", [{"value": 1, "elapsed_s": -3}]),
        ("eval_history", [{"value": 1, "time": "2025-05-05T15:00:00Z"}]), ("eval_history", [{"value": 1, "step": 1.5}]),
        ("eval_history", [{"value": 1, "time": "2025-05-05T16:30:00Z", "step": 4}]))]
    lines += [json.dumps({"start_time": "2025-05-05T16:00:00Z", "project": "p", "host": "h"}),
              json.dumps({"run_id": "unknown", "start_time": "2025-05-05T16:00:00Z", "instance_type": "g5"}),
              json.dumps({"run_id": "no-start", "project": "p"})]
    # the seed's spellings, measures and fields outside the vocabulary; spans, costs and rates
    lines += [json.dumps({**BARE, "run_id": f"seed-{n}", **fields}) for n, fields in enumerate((
        {"price_per_hour": 2.0}, {"price_per_hour": 2.0, "price_per_hour_usd": 3.0}, {"price_per_hour": 2, "price_per_hour_usd": 2.0},
        {"best_val_metric": 0.9, "val_metric": 0.8}, {"best_val_metric": "x", "val_metric": 0.8}, {"tokens_per_sec": -1},
        {"average_power_watts": 300.123456789}, {"average_power_watts": 300, "energy_kwh": 1}, {"optimizer": "adamw", "lr": {"k": 1}},
        {"epochs": 3, "tags": {"epochs": "4"}}, {"nothing": None}, {"duration_hours": 2.5}, {"duration_hours": 3},
        {"duration_hours": 1e6}, {"end_time": None, "duration_hours": 1.25, "price_per_hour_usd": 1.5},
        {"start_time": None, "duration_hours": 0.5, "throughput_examples_per_sec": 10.5},
        {"estimated_cost_usd": 3, "price_per_hour_usd": 1.2}, {"estimated_cost_usd": 3, "price_per_hour_usd": 1.21},
        {"price_per_hour_usd": 1e8}, {"throughput_examples_per_sec": 1e15}, {"instance_type": "g5.xlarge"},
        {"gpu_type": "A100", "gpu_count": 2}, {"gpu_type": "A100", "gpu_uuids": ["g1", "g2"], "instance_type": "g5.xlarge"},
        {"gpu_type": "A100", "gpu_count": 0}, {"instance_type": "no-such-box", "gpu_type": "H999"},
        {"end_time": None}, {"end_time": "2025-05-05T15:00:00Z"}))]
    return lines


def corpus(tmp_path: Path) -> list[Path]:
    from tests.test_fuzz import ISSUE_RUNS

    rng = random.Random(42)
    write = run_cases.write
    files = [REPO_ROOT / "sample_data" / "runs.jsonl", REPO_ROOT / "tests" / "cases" / "pages_runs.jsonl",
             REPO_ROOT / "tests" / "cases" / "pages_bad_lines.jsonl",
             write(tmp_path / "every_kind.jsonl", run_cases.EVERY_KIND),
             write(tmp_path / "random.jsonl", [json.dumps(run_cases.random_record(rng, n)) for n in range(1500)]),
             write(tmp_path / "plain.jsonl", [json.dumps(run_cases.plain_record(rng, n)) for n in range(300)]),
             write(tmp_path / "fuzz.jsonl", [line for line in ISSUE_RUNS if len(line) < 1_000_000]),
             write(tmp_path / "hand.jsonl", hand_made())]
    # the same records as one JSON array (DuckDB's array reader in SQL), and an array repeating runs
    # (and with numbers longer than a double keeps: the element's text is read as written)
    objects = [json.loads(line) for line in run_cases.EVERY_KIND + hand_made() if run_cases._valid(line)]
    (tmp_path / "every_kind.json").write_text(json.dumps([o for o in objects if not long_number(o)], indent=2))
    repeated = [{**run_cases.random_record(rng, n % 400), "val_metric": n} for n in range(1200)]
    (tmp_path / "repeated.json").write_text("\n\n" + json.dumps([r for r in repeated if not long_number(r)]))
    (tmp_path / "long.json").write_text(json.dumps(objects))
    return files + [tmp_path / "every_kind.json", tmp_path / "repeated.json", tmp_path / "long.json"]


def long_number(record: dict) -> bool:
    return re.search(LONG_NUMBER, json.dumps(record)) is not None


def test_the_engine_reads_the_run_definition_alike_in_sql_and_line_by_line(tmp_path, monkeypatch):
    whole: list[str] = []  # the files the SQL pass handed to the reader whole
    parse = reader.parse

    def spy(definition, lines, *args, **kwargs):
        lines = list(lines)
        whole.append(lines[0][1][:20] if lines else "")
        return parse(definition, lines, *args, **kwargs)

    monkeypatch.setattr(batch_sql.reader, "parse", spy)
    for path in corpus(tmp_path):
        whole.clear()
        sql, by_reader, result, parsed = two_ways(path)
        assert whole == [], path.name  # arrays too: DuckDB's array reader, then the SQL pass
        for table in COMPARED:
            assert sql[table] == by_reader[table], (path.name, table)
        assert result.totals == run_summary.totals(parsed), path.name
        assert result.accepted == parsed.accepted and result.warnings == parsed.warnings, path.name
        assert len(sql["runs"]) + len(sql["rejects"]) > 0, path.name


def test_naive_times_in_another_zone_read_alike(tmp_path):
    from zoneinfo import ZoneInfo

    sql, by_reader, _, _ = two_ways(run_cases.write(tmp_path / "runs.jsonl", run_cases.EVERY_KIND), ZoneInfo("Europe/Paris"))
    assert sql == by_reader and len(sql["runs"]) >= 25 and len(sql["rejects"]) >= 20
