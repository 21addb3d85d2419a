"""Run records for the run tests: a file of every kind of record (good, odd and bad), seeded random
records that vary each field over good, odd and bad values, and fleet-like plain records."""
from __future__ import annotations

import json
import random
from datetime import timezone
from pathlib import Path

UTC = timezone.utc
BARE = {"run_id": "r1", "start_time": "2025-05-05T16:00:00Z", "end_time": "2025-05-05T18:30:00Z"}
SEED = {"run_id": "bert-base-042", "project": "my_model", "start_time": 1746460800.0, "end_time": 1746469800.0,
        "duration_hours": 2.5, "instance_type": "g5.2xlarge", "price_per_hour_usd": 1.212,
        "estimated_cost_usd": 3.03, "throughput_examples_per_sec": 812.5, "val_metric": 0.913}


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
