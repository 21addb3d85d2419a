"""Runs staged in SQL (ingest/formats/runs/runs_columnar.py) equal runs read line by line (runs_json.parse).

Both paths stage the same file into their own staging database; the runs, eval points and
rejects (line, reason, raw text) must be identical. The files: the repository's sample runs,
a synthetic file mixing good records with every kind of bad one, a seeded random file that
varies each field over good, odd and bad values, and the same records as one JSON array.
"""
from __future__ import annotations

import gzip
import json
import logging
import random
import re
from datetime import timezone
from decimal import Decimal
from pathlib import Path

import pytest

from ingest.engine import staging
from ingest.engine.batch_sql import LONG_NUMBER
from ingest.engine.contract import ParseContext
from ingest.formats.runs import runs_columnar, runs_json

REPO = Path(__file__).resolve().parents[1]
UTC = timezone.utc
BARE = {"run_id": "r1", "start_time": "2025-05-05T16:00:00Z", "end_time": "2025-05-05T18:30:00Z"}
SEED = {"run_id": "bert-base-042", "project": "my_model", "start_time": 1746460800.0, "end_time": 1746469800.0,
        "duration_hours": 2.5, "instance_type": "g5.2xlarge", "price_per_hour_usd": 1.212,
        "estimated_cost_usd": 3.03, "throughput_examples_per_sec": 812.5, "val_metric": 0.913}


def staged(con) -> dict[str, list[tuple]]:
    """Everything a load stages for runs, in a stable order (maps as sorted items)."""
    runs = con.execute("SELECT * EXCLUDE (tags), map_entries(tags) FROM runs ORDER BY run_id").fetchall()
    evals = con.execute("SELECT * FROM run_evals ORDER BY run_id, seq").fetchall()
    rejects = con.execute("SELECT path, line, reason, raw FROM rejects ORDER BY line, reason").fetchall()
    return {"runs": runs, "run_evals": evals, "rejects": rejects}


def both_paths(path: Path, tz=UTC) -> tuple[dict, dict, int, int]:
    """(old staged, new staged, old accepted, new accepted) of one file."""
    ctx = ParseContext(str(path), tz)
    old = staging.open_stage()
    parsed = runs_json.parse(staging.lines(staging.Source.of(path)), ctx)
    staging.insert_parsed(old, parsed, str(path))
    new = staging.open_stage()
    result = runs_columnar.stage(staging.Source.of(path), new, ctx)
    try:
        return staged(old), staged(new), parsed.accepted, result.accepted
    finally:
        old.close()
        new.close()


def assert_same(path: Path, tz=UTC) -> dict:
    old, new, old_accepted, new_accepted = both_paths(path, tz)
    for table in old:
        assert new[table] == old[table], table
    assert new_accepted == old_accepted
    return new


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


EVERY_KIND = [
    json.dumps(SEED),
    json.dumps(BARE),
    json.dumps({**BARE, "run_id": "offset", "start_time": "2025-05-05T18:00:00+02:00", "end_time": "2025-05-05 17:00:00.250"}),
    json.dumps({**BARE, "run_id": "dur-only", "end_time": None, "duration_hours": 1.2345678, "price_per_hour_usd": 3.1}),
    json.dumps({"run_id": "end-dur", "end_time": "2025-05-05T18:30:00Z", "duration_hours": 0.3333333}),
    json.dumps({**BARE, "run_id": "derived", "price_per_hour_usd": 32.7726, "throughput_examples_per_sec": 99.9}),
    json.dumps({**BARE, "run_id": "given", "price_per_hour_usd": "4.00", "estimated_cost_usd": "10.05", "examples": 12}),
    json.dumps({**BARE, "run_id": "flag-cost", "price_per_hour_usd": 4, "estimated_cost_usd": 12}),
    json.dumps({**BARE, "run_id": "flag-dur", "duration_hours": 3.0}),
    json.dumps({**BARE, "run_id": "tags", "tags": {"team": "nlp", "seed": 42, "note": None, "on": True, "lr": 0.1}}),
    json.dumps({**BARE, "run_id": "tags-plain", "tags": {"b": "x", "a": -3, "off": False, "z": None}}),
    json.dumps({**BARE, "run_id": "nested-tags", "tags": {"sweep": {"lr": 0.1}}}),
    json.dumps({**BARE, "run_id": "evals", "eval_history": [{"step": 1, "elapsed_s": 60, "value": 1.5}, {"elapsed_s": 90.5, "value": 2}]}),
    json.dumps({**BARE, "run_id": "eval-time", "eval_history": [{"time": "2025-05-05T16:10:00Z", "value": 0.5}]}),
    json.dumps({**BARE, "run_id": "eval-bad", "eval_history": [{"elapsed_s": 60}]}),
    json.dumps({**BARE, "run_id": "eval-neg", "eval_history": [{"elapsed_s": -1, "value": 1}]}),
    json.dumps({**BARE, "run_id": "eval-step", "eval_history": [{"step": 1.5, "value": 1}]}),
    json.dumps({**BARE, "run_id": "eval-obj", "eval_history": {"value": 1}}),
    json.dumps({**BARE, "run_id": "gpus", "gpu_uuids": ["GPU-a", "", None, "GPU-b"], "gpu_indices": [0, 1]}),
    json.dumps({**BARE, "run_id": "gpu-idx", "gpu_indices": [3, None], "gpu_type": "NVIDIA L4"}),
    json.dumps({**BARE, "run_id": "gpu-empty", "gpu_uuids": []}),
    json.dumps({**BARE, "run_id": "gpu-csv", "gpu_uuid": "GPU-a,GPU-b"}),
    json.dumps({**BARE, "run_id": "gpu-one", "gpu_index": 2}),
    json.dumps({**BARE, "run_id": "status", "status": "Succeeded", "goal": "Lower", "val_metric_name": "eval_loss"}),
    json.dumps({**BARE, "run_id": "status-bad", "status": "exploded"}),
    json.dumps({**BARE, "run_id": "goal-bad", "goal": "sideways"}),
    json.dumps({**BARE, "run_id": "metric-words", "val_metric_name": "p95_latency_ms"}),
    json.dumps({**BARE, "run_id": "metric-accent", "val_metric_name": "précision"}),
    json.dumps({**BARE, "run_id": None}),
    json.dumps({**BARE, "run_id": "unknown", "project": "p"}),
    json.dumps({**BARE, "run_id": "num-text", "price_per_hour_usd": "4.00", "val_metric": "0.5"}),
    json.dumps({**BARE, "run_id": "neg-price", "price_per_hour_usd": -1}),
    json.dumps({**BARE, "run_id": "neg-energy", "energy_kwh": -0.5}),
    json.dumps({**BARE, "run_id": "energy", "energy_kwh": 1.25, "emissions_kg": 0.5, "target_metric": -2}),
    json.dumps({**BARE, "run_id": "huge-examples", "examples": 1e20}),
    json.dumps({**BARE, "run_id": "huge-gpus", "gpu_count": 3_000_000_000}),
    json.dumps({**BARE, "run_id": "huge-price", "price_per_hour_usd": "1e30"}),
    json.dumps({**BARE, "run_id": " padded "}),
    json.dumps({**BARE, "run_id": "noise", "price_per_hour_usd": 1.006, "estimated_cost_usd": 1.2081866805954773}),
    '{"run_id": "dup", "run_id": "dup2", "start_time": "2025-05-05T16:00:00Z"}',
    '{"run_id": "broken", "start_time": ',
    '["not", "an", "object"]',
    "",
    "   ",
    "\u00a0\t",
    '{"run_id": "nan", "start_time": "2025-05-05T16:00:00Z", "val_metric": NaN}',
    json.dumps({**BARE, "run_id": "backwards", "end_time": "2025-05-05T15:00:00Z"}),
    json.dumps({"run_id": "no-start", "end_time": "2025-05-05T18:30:00Z"}),
    json.dumps({**BARE, "run_id": "ms", "start_time": 1746460800000}),
    json.dumps({**BARE, "run_id": "old", "start_time": "1980-01-01T00:00:00Z"}),
    json.dumps({**BARE, "run_id": "bad-date", "start_time": "2025-02-30T00:00:00Z"}),
    json.dumps({**BARE, "run_id": "slash", "start_time": "2025/05/05 16:00:00"}),
    json.dumps({"run_id": "catalog", "start_time": "2025-05-05T16:00:00Z", "end_time": "2025-05-05T17:00:00Z",
                "instance_type": "g4dn.xlarge"}),
    json.dumps({**BARE, "run_id": "text-number", "project": 7}),
    json.dumps({**BARE, "val_metric": 0.9, "eval_history": [{"elapsed_s": 5, "value": 0.9}]}),  # r1 again: wins
    json.dumps({**BARE, "run_id": "dup-bad", "status": "exploded"}),
    # numbers with more digits than a double keeps, wherever a number goes (read exactly in Python)
    '{"run_id": "long-1", "start_time": "2025-05-05T16:00:00Z", "duration_hours": 1.0000000000000001}',
    '{"run_id": "long-2", "start_time": "2025-05-05T16:00:00Z", "duration_hours": 1, "val_metric":-0.12345678901234567}',
    '{"run_id": "long-3", "start_time": "2025-05-05T16:00:00Z", "duration_hours": 1, "gpu_indices": [1,  12345678901234567]}',
    '{"run_id": "long-4", "start_time": "2025-05-05T16:00:00Z", "duration_hours": 1, "tags": {"n":\t12345678901234567890}}',
    '{"run_id": "long-5", "start_time": "2025-05-05T16:00:00Z", "duration_hours": 1, "val_metric": 1.5e00000000000000000001}',
    '{"run_id": "long-6", "start_time": "2025-05-05T16:00:00Z", "duration_hours": 1, "examples": 12345678901234567}',
    '{"run_id": "long-7", "start_time": "2025-05-05T16:00:00Z", "duration_hours": 1, "price_per_hour_usd": 2.4500000000000001}',
    # long money: both read it to the same 12 places (0.1), or it is no amount
    '{"run_id": "long-8", "start_time": "2025-05-05T16:00:00Z", "duration_hours": 1, "price_per_hour_usd": 0.1000000000000000055511151231257827}',
    '{"run_id": "long-9", "start_time": "2025-05-05T16:00:00Z", "duration_hours": 1, "estimated_cost_usd":[0.1000000000000000055511151231257827][0]}',
    '{"run_id": "long-10", "start_time": "2025-05-05T16:00:00Z", "duration_hours": 1, "estimated_cost_usd":\r\n 3.0300000000000000000001}',
    json.dumps({**BARE, "run_id": "digits-in-text", "tags": {"resource_id": "i-06831718843699913"}, "note": "x: 12345678901234567"}),
]


def test_every_kind_of_record_stages_the_same(tmp_path):
    new = assert_same(write(tmp_path / "runs.jsonl", EVERY_KIND))
    assert len(new["rejects"]) >= 20 and len(new["runs"]) >= 25  # the file holds both, plenty of each


def no_whole_file_parse(monkeypatch) -> None:
    """Make the columnar path fail if it hands the file to the line-by-line reference whole
    (else the comparison would compare the reference with itself)."""
    def refuse(*args, **kwargs):
        raise AssertionError("the file went to json_records.parse whole")
    monkeypatch.setattr(runs_columnar.json_records, "parse", refuse)


def test_the_same_records_as_one_json_array_stage_the_same(tmp_path, monkeypatch):
    """DuckDB's array reader, not the reference, reads the array (no number too long for a double
    in it: such an array goes to the reference whole, below)."""
    records = [json.loads(line) for line in EVERY_KIND if line.strip().startswith("{") and _valid(line)
               and not re.search(LONG_NUMBER, line)]
    path = tmp_path / "runs.json"
    path.write_text(json.dumps(records, indent=2))
    old, _, _, _ = both_paths(path)  # the reference first, then the columnar path alone
    no_whole_file_parse(monkeypatch)
    new = staged_columnar(path)
    assert new == old
    assert len(new["runs"]) > 20 and len(new["rejects"]) > 10


def staged_columnar(path: Path, tz=UTC) -> dict:
    con = staging.open_stage()
    try:
        runs_columnar.stage(staging.Source.of(path), con, ParseContext(str(path), tz))
        return staged(con)
    finally:
        con.close()


def test_a_broken_array_and_one_object_over_many_lines(tmp_path):
    """Both go to the line-by-line reading whole (DuckDB reads neither): checked against what
    they hold, not against that reading itself."""
    broken = tmp_path / "broken.json"
    text = json.dumps([BARE, SEED], indent=2)[:-3]
    broken.write_text(text)
    new = staged_columnar(broken)
    filled = [n for n, line in enumerate(text.split("\n"), start=1) if line.strip()]
    assert new["runs"] == [] and [line for _, line, _, _ in new["rejects"]] == filled  # each line is no run
    one = tmp_path / "run_meta.json"
    one.write_text(json.dumps(SEED, indent=2))
    con = staging.open_stage()
    try:
        runs_columnar.stage(staging.Source.of(one), con, ParseContext(str(one), UTC))
        row = con.execute("SELECT run_id, project, epoch(started_at), epoch(ended_at), duration_s, cost_usd, "
                          "cost_given_usd, examples, val_metric, source_line FROM runs").fetchall()
    finally:
        con.close()
    hours = (SEED["end_time"] - SEED["start_time"]) / 3600
    assert row == [(SEED["run_id"], SEED["project"], SEED["start_time"], SEED["end_time"], hours * 3600,
                    Decimal(str(SEED["estimated_cost_usd"])), Decimal(str(SEED["estimated_cost_usd"])),
                    round(SEED["throughput_examples_per_sec"] * hours * 3600), SEED["val_metric"], 1)]


def test_the_sample_runs_and_a_gzip_copy_stage_the_same(tmp_path):
    sample = REPO / "sample_data" / "runs.jsonl"
    assert_same(sample)
    packed = tmp_path / "runs.jsonl.gz"
    packed.write_bytes(gzip.compress(sample.read_bytes()))
    assert_same(packed)


def test_naive_times_in_another_zone_stage_the_same(tmp_path):
    from zoneinfo import ZoneInfo

    assert_same(write(tmp_path / "runs.jsonl", EVERY_KIND), ZoneInfo("Europe/Paris"))


def test_random_records_stage_the_same(tmp_path):
    rng = random.Random(42)
    lines = [json.dumps(random_record(rng, n)) for n in range(3000)]
    new = assert_same(write(tmp_path / "random.jsonl", lines))
    assert len(new["runs"]) > 1500 and len(new["rejects"]) > 100


def test_plain_records_are_settled_in_sql(tmp_path, caplog):
    """A fleet-like file loads without a record read in Python (the fallback is for quirks)."""
    rng = random.Random(7)
    lines = [json.dumps(plain_record(rng, n)) for n in range(500)]
    path = write(tmp_path / "plain.jsonl", lines)
    with caplog.at_level(logging.DEBUG, logger="ingest.formats.runs.runs_columnar"):
        new = assert_same(path)
    assert len(new["runs"]) == 500 and new["rejects"] == []
    assert "read in Python" not in caplog.text


def plain_record(rng: random.Random, n: int) -> dict:
    start = 1_790_000_000 + rng.randrange(0, 30 * 86400)
    record = {"run_id": f"run-{n}", "project": rng.choice(["vision", "nlp"]), "team": "t", "owner": f"user{n % 7}",
              "status": rng.choice(["completed", "failed", "Succeeded"]), "gpu_type": "NVIDIA L4",
              "gpu_count": rng.randrange(1, 9), "price_per_hour_usd": round(rng.uniform(0.5, 40), rng.randrange(0, 5)),
              "start_time": _iso(start), "end_time": _iso(start + rng.randrange(60, 200_000)),
              "throughput_examples_per_sec": round(rng.uniform(1, 5000), 2), "val_metric": round(rng.random(), 5),
              "val_metric_name": rng.choice(["accuracy", "eval_loss", "ndcg@10"]), "tags": {"resource_id": f"i-{n:08x}", "instance": f"i-0{n:016d}"}}
    if n % 3 == 0:
        record["eval_history"] = [{"elapsed_s": 100.5 * k, "step": 500 * k, "value": round(rng.random(), 4)} for k in range(1, 4)]
    if n % 10 == 0:
        record["gpu_uuids"] = [f"GPU-{n}-{k}" for k in range(2)]
        record["gpu_indices"] = [0, 1]
    return record


FIELD_VALUES = {
    "run_id": [None, "unknown", "", " x ", "dup-a", "dup-b", 5],
    "start_time": [None, "", "2025-05-05T16:00:00Z", "2025-05-05T16:00:00.123456+05:30", "2025-05-05 16:00",
                   "2025-05-05", 1746460800, 1746460800.1234567, "1746460800", "1980-01-01T00:00:00Z", "garbage",
                   1746460800123, -5, True],
    "end_time": [None, "2025-05-05T18:30:00Z", "2025-05-05T15:00:00Z", 1746469800.5, "2025-05-06T00:00:00-07:00",
                 "2101-01-01T00:00:00Z", 1746460800.0000001],
    "duration_hours": [None, 2.5, 0.0, 1e-5, 0.1234567891234, 3.0, -1, "2.5", 1e6, 87840],
    "price_per_hour_usd": [None, 1.212, 4, "4.00", 0.000001, 123456789.123456, 1.0000001, -1, "1e30", 0, 2.45],
    "estimated_cost_usd": [None, 3.03, 10, "10.05", 0.1234567, -0.5, 1e15],
    "throughput_examples_per_sec": [None, 812.5, 0, 1e15, -1, "12"],
    "examples": [None, 0, 5000, 1e20, 2.0, -3],
    "gpu_count": [None, 0, 4, 4.0, -1, 2_000_000],
    "gpu_uuids": [None, [], ["GPU-a"], ["GPU-a", "", None], "GPU-a,GPU-b", [" GPU-a"], [1], {}],
    "gpu_indices": [None, [], [0, 1], [1.0], ["0"], 3, "0,1", [2_000_000]],
    "status": [None, "completed", "SUCCESS", "crashed", "Running", "exploded", "", 1],
    "goal": [None, "max", "Minimize", "LOWER", "up", ""],
    "val_metric_name": [None, "", "eval_loss", "WER", "answer_accuracy", "naïve_loss", "Loss"],
    "val_metric": [None, 0.5, -2, 1e16, "0.5", True],
    "energy_kwh": [None, 1.5, 0, -1, 1e15],
    "tags": [None, {}, {"a": "b"}, {"n": 1, "t": True, "z": None}, {"f": 1.5}, {"x": [1]}, ["a"], {"": "e"},
             {"k": " spaced "}],
    "eval_history": [None, [], [{"elapsed_s": 1, "value": 1}], [{"step": 3, "value": 2.5, "elapsed_s": None}],
                     [{"time": "2025-05-05T17:00:00Z", "value": 1}], [{"value": "x"}], [{"elapsed_s": -1, "value": 1}],
                     [1], {"value": 1}, [{"value": 1e16}], [{"value": 1, "step": 2**63}]],
    "instance_type": [None, "g4dn.xlarge", "G4DN.XLARGE", "local", " g5 "],
    "gpu_type": [None, "NVIDIA L4", "A100", "l4"],
    "host": [None, "node-1", "\u00a0node"],
}


# Values SQL settles itself, so that most random records take the SQL path and are compared.
GOOD_VALUES = {
    "start_time": ["2025-05-05T16:00:00Z", "2025-05-05T16:00:00.123456+05:30", "2025-05-05 16:00", 1746460800,
                   1746460800.123456, 1746460800.5],
    "end_time": ["2025-05-05T18:30:00Z", 1746469800.5, "2025-05-06T00:00:00-07:00", 1746460800.0000001],
    "duration_hours": [2.5, 0.1234567891234, 3.0, 0.0],
    "price_per_hour_usd": [1.212, 4, 0.000001, 123456789.123456, 2.45, 32.7726, 0],
    "estimated_cost_usd": [3.03, 10, 0.123456],
    "throughput_examples_per_sec": [812.5, 0, 1e9, 3.3],
    "examples": [0, 5000],
    "gpu_count": [0, 4],
    "gpu_uuids": [[], ["GPU-a"], ["GPU-a", "", None]],
    "gpu_indices": [[], [0, 1], [5, None]],
    "status": ["completed", "SUCCESS", "crashed", "Running"],
    "goal": ["max", "Minimize", "LOWER"],
    "val_metric_name": ["eval_loss", "WER", "answer_accuracy", "Loss", "ndcg@10"],
    "val_metric": [0.5, -2, 1e13],
    "instance_type": ["g4dn.xlarge", "G4DN.XLARGE", "local"],
    "gpu_type": ["NVIDIA L4", "A100", "l4"],
    "host": ["node-1"],
    "energy_kwh": [1.5, 0, 0.001],
    "tags": [{}, {"a": "b"}, {"n": 1, "t": True, "z": None, "neg": -4}],
    "eval_history": [[], [{"elapsed_s": 1, "value": 1}], [{"step": 3, "value": 2.5, "elapsed_s": None}, {"value": -1}]],
}


def random_record(rng: random.Random, n: int) -> dict:
    """A record whose fields are each absent or, mostly, a value SQL settles (GOOD_VALUES) and
    now and then any of FIELD_VALUES (good, odd or bad)."""
    record = {}
    for name, choices in FIELD_VALUES.items():
        if rng.random() < 0.5:
            good = GOOD_VALUES.get(name)
            value = rng.choice(good if good and rng.random() < 0.97 else choices)
            record[name] = value
    if rng.random() < 0.95:
        record["run_id"] = f"run-{n % 2500}"  # mostly distinct, some repeated
    if "start_time" not in record and rng.random() < 0.8:
        record["start_time"] = "2025-05-05T16:00:00Z"
    if "end_time" in record and "duration_hours" in record and rng.random() < 0.9:
        del record["duration_hours"]  # both disagree (a flag, read in Python) unless the times match
    return record


def _iso(seconds: int) -> str:
    from datetime import datetime

    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _valid(line: str) -> bool:
    try:
        json.loads(line)
    except json.JSONDecodeError:
        return False
    return True


@pytest.mark.parametrize("hours", [0.3333333, 1.2345678, 2.5, 0.1234567891234, 87839.999999, 1e-4 + 1e-12])
def test_duration_hours_reach_the_same_microsecond(tmp_path, hours):
    lines = [json.dumps({"run_id": "a", "start_time": "2025-05-05T16:00:00Z", "duration_hours": hours}),
             json.dumps({"run_id": "b", "end_time": "2025-05-05T16:00:00Z", "duration_hours": hours})]
    assert_same(write(tmp_path / "runs.jsonl", lines))


def test_a_long_array_with_repeated_runs_keeps_each_runs_last_element(tmp_path, monkeypatch):
    """Read by DuckDB's array reader (the tags hold no 17-digit text, which would send the array
    to the reference whole); each run keeps its last element, worked out here."""
    rng = random.Random(11)
    records = [{**plain_record(rng, n % 1500), "val_metric": n} for n in range(6000)]  # each run_id 4 times
    for record in records:
        record["tags"].pop("instance")
    path = tmp_path / "runs.json.gz"
    path.write_bytes(gzip.compress(json.dumps(records, indent=1).encode()))
    old, _, _, _ = both_paths(path)
    no_whole_file_parse(monkeypatch)
    new = staged_columnar(path)
    assert new == old
    last = {record["run_id"]: record["val_metric"] for record in records}
    con = staging.open_stage()
    try:
        runs_columnar.stage(staging.Source.of(path), con, ParseContext(str(path), UTC))
        assert dict(con.execute("SELECT run_id, val_metric FROM runs").fetchall()) == last
    finally:
        con.close()


FIRST_LINES = {  # the same runs after blank lines of every kind, with a BOM, with CRLF line ends
    "blank-first.jsonl": "\n \t\n\r\n" + "\n".join(json.dumps({**BARE, "run_id": f"b{n}"}) for n in range(3)) + "\n",
    "bom.jsonl": "\ufeff" + json.dumps(SEED) + "\n" + json.dumps(BARE) + "\n",
    "crlf.jsonl": "\r\n".join(["", json.dumps(SEED), json.dumps(BARE), "{not json", ""]),
    "blank-array.json": "\n\n  " + json.dumps([BARE, SEED], indent=2) + "\n",
    "blank-object.json": "\n \n" + json.dumps(SEED, indent=2) + "\n",
    "only-blanks.jsonl": "\n  \n\t\n",
    # blank lines of Unicode spaces (DuckDB's trim strips them, Python's strip too), a tab, a form feed
    "unicode-blanks.jsonl": "\n".join([json.dumps(SEED), "\u00a0\u3000 \u2009", "\t", "\f", " \u00a0",
                                       json.dumps(BARE), "\u00a0x"]) + "\n",
}


@pytest.mark.parametrize("name", sorted(FIRST_LINES))
def test_the_first_line_read_from_the_head_is_the_one_line_batches_give(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(FIRST_LINES[name].encode("utf-8"))
    source = staging.Source.of(path)
    # the reference: every line as line_batches numbers and splits them, the first non-blank one
    numbered = [(number, text) for number, text in staging.lines(source) if text.strip(" \t\n\r\f")]
    assert runs_columnar._first_line(source) == (numbered[0] if numbered else None)
    assert_same(path)


def test_a_first_line_past_the_head_is_found_in_the_batches(tmp_path, monkeypatch):
    monkeypatch.setattr(runs_columnar, "HEAD_BYTES", 64)  # the blank lines fill more than the head
    path = write(tmp_path / "late.jsonl", [" " * 30] * 5 + [json.dumps(SEED), json.dumps(BARE)])
    assert runs_columnar._first_line(staging.Source.of(path)) == (6, json.dumps(SEED))
    assert_same(path)


def test_a_file_past_the_one_value_bound_is_read_as_lines_without_counting_its_values(tmp_path, monkeypatch):
    """A `{` line that is not JSON by itself: one object over many lines only when the file is
    small enough for DuckDB to read as one value; a longer file is lines (its first one rejected)."""
    monkeypatch.setattr(runs_columnar, "ONE_VALUE_BYTES", 4096)
    lines = ['{"run_id": "cut-short",'] + [json.dumps({**BARE, "run_id": f"r{n}"}) for n in range(60)]
    plain = write(tmp_path / "cut.jsonl", lines)
    packed = tmp_path / "cut.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    one = tmp_path / "run_meta.json"
    one.write_text(json.dumps(SEED, indent=2))
    big = tmp_path / "big_meta.json"  # one object, but larger than the bound: not read as one value
    big.write_text(json.dumps({**SEED, "tags": {f"k{n}": "v" * 50 for n in range(100)}}, indent=2))
    con = Recording(staging.open_stage())
    try:
        assert [runs_columnar._one_value(staging.Source.of(p), con) for p in (plain, packed, one, big)] == \
            [False, False, True, False]
        assert len(con.queries) == 1  # DuckDB was asked about the small file alone
    finally:
        con.close()
    for path in (plain, packed):
        new = assert_same(path)
        assert len(new["runs"]) == 60 and [line for _, line, *_ in new["rejects"]] == [1]


class Recording:
    """A DuckDB connection that keeps the text of every statement it is given."""

    def __init__(self, con):
        self.con, self.queries = con, []

    def execute(self, sql, *args):
        self.queries.append(sql)
        return self.con.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self.con, name)
