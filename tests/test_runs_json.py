"""JSON run summaries (ingest/formats/runs/run_summary.py, read by the generic reader): parsed directly and loaded end to end."""
from __future__ import annotations

import gzip
import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest

from ingest.engine import warehouse as wh
from ingest.engine.contract import ParseContext, Parsed, numbered
from ingest.formats.runs import run_summary
from ingest.pipeline import loader

UTC = timezone.utc
CTX = ParseContext("f.jsonl", UTC)

# Every column of `runs` a parser fills (the warehouse adds load_id).
RUN_COLUMNS = (
    "run_id", "project", "team", "owner", "model", "status", "region", "host", "instance_type",
    "gpu_type", "gpu_count", "gpu_uuids", "gpu_indices", "started_at", "ended_at", "duration_s",
    "price_per_hour_usd", "cost_usd", "cost_source", "cost_given_usd", "flags",
    "throughput_examples_per_s", "examples", "examples_source", "val_metric", "val_metric_name",
    "metric_goal", "target_metric", "energy_kwh", "emissions_kg", "tags", "source_kind", "source_line",
)

# A run summary with exactly the fields the seed document's write_run_summary() writes.
# 1746460800 is 2025-05-05T16:00:00Z (1746478724 is 20:58:44, see test_values), so
# end_time is 2.5 h later; 1.212 $/h x 2.5 h = 3.03 $; 812.5 ex/s x 9000 s = 7,312,500 examples.
SEED = {
    "run_id": "bert-base-042",
    "project": "my_model",
    "start_time": 1746460800.0,
    "end_time": 1746469800.0,
    "duration_hours": 2.5,
    "instance_type": "g5.2xlarge",
    "price_per_hour_usd": 1.212,
    "estimated_cost_usd": 3.03,
    "throughput_examples_per_sec": 812.5,
    "val_metric": 0.913,
}
START = datetime(2025, 5, 5, 16, 0, tzinfo=UTC)
# A bare run: 2.5 h from START, nothing else.
BARE = {"run_id": "r1", "start_time": "2025-05-05T16:00:00Z", "end_time": "2025-05-05T18:30:00Z"}
NO_COST_FLAG = ("no cost: neither estimated_cost_usd nor price_per_hour_usd is given, and the price catalog has no "
                "price for a run that names no instance_type or gpu_type")


def run_row(**fields) -> dict:
    """A whole `runs` row as a parser emits it: the given fields, defaults for the rest."""
    row = dict.fromkeys(RUN_COLUMNS)
    row.update(val_metric_name="val_metric", metric_goal="max", source_kind="runs", source_line=1)
    row.update(fields)
    return row


SEED_ROW = run_row(
    run_id="bert-base-042", project="my_model", instance_type="g5.2xlarge",
    started_at=START, ended_at=START + timedelta(hours=2.5), duration_s=9000.0,
    price_per_hour_usd=Decimal("1.212"), cost_usd=Decimal("3.03"), cost_source="given",
    cost_given_usd=Decimal("3.03"), throughput_examples_per_s=812.5, examples=7_312_500,
    examples_source="derived", val_metric=0.913,
)


def jsonl(*records) -> list[str]:
    return [json.dumps(record) for record in records]


def parse(lines: list[str], ctx: ParseContext = CTX) -> Parsed:
    return run_summary.parse(numbered(lines), ctx)


def parse_one(record: dict) -> dict:
    """The single run a one-record file yields; fails on any reject."""
    parsed = parse(jsonl(record))
    assert parsed.rejects == []
    [run] = parsed.rows("runs")
    return run


def reject_of(record: dict) -> str:
    """The reason a one-record file is refused; fails if it loads."""
    parsed = parse(jsonl(record))
    assert parsed.rows("runs") == []
    [reject] = parsed.rejects
    assert reject.line == 1
    return reject.reason


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def fetch(sql: str, params: list | None = None) -> list[dict]:
    """Rows of a query on the test warehouse as dicts (exact Decimals, aware datetimes)."""
    with wh.connect() as con:
        cursor = con.execute(sql, params or [])
        names = [column[0] for column in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]


def warehouse_runs() -> list[dict]:
    return fetch(f"SELECT {', '.join(RUN_COLUMNS)} FROM runs ORDER BY run_id")


def warehouse_evals() -> list[tuple]:
    rows = fetch("SELECT run_id, seq, step, elapsed_s, value FROM run_evals ORDER BY run_id, seq")
    return [tuple(row.values()) for row in rows]


# --- the seed record --------------------------------------------------------------------------

def test_seed_record_parses_to_one_whole_row():
    parsed = parse(jsonl(SEED))
    assert parsed.rejects == []
    assert parsed.accepted == 1
    assert parsed.rows("runs") == [SEED_ROW]
    assert parsed.rows("run_evals") == []


def test_seed_record_loads_end_to_end(tmp_path, warehouse):
    path = write_lines(tmp_path / "training_runs.jsonl", jsonl(SEED))
    summary = loader.ingest_file(path)
    record = summary.to_json()
    assert 0 <= record.pop("merge_s") < 600  # seconds the warehouse was locked for the merge: varies run to run
    assert record == {
        "path": str(path), "kind": "runs", "status": "loaded", "rows_loaded": 1, "rows_rejected": 0,
        "rejects": [], "runs": 1, "cost_usd_total": "3.03", "runs_with_cost": 1,
        "energy_kwh_total": None, "runs_with_energy": 0,
    }
    assert warehouse_runs() == [SEED_ROW]


# --- cost, duration and examples -------------------------------------------------------------

@pytest.mark.parametrize(
    ("timing", "price", "expected_cost"),
    [
        ({"end_time": "2025-05-05T18:30:00Z"}, "4.00", "10.000000"),      # 2.5 h x 4.00
        ({"duration_hours": 2.5}, 4.0, "10.000000"),                       # end derived from duration
        ({"end_time": "2025-05-05T17:30:00Z"}, 1.212, "1.818000"),        # 1.5 h x 1.212
        ({"end_time": "2025-05-05T16:45:00Z"}, 32.7726, "24.579450"),     # 0.75 h x 32.7726
        ({"end_time": "2025-05-05T16:00:00Z"}, 4.0, "0.000000"),          # zero-length run
    ],
)
def test_cost_absent_is_derived_from_hours_and_price(timing, price, expected_cost):
    run = parse_one({"run_id": "r1", "start_time": "2025-05-05T16:00:00Z", "price_per_hour_usd": price, **timing})
    assert str(run["cost_usd"]) == expected_cost  # exact to the micro-dollar, no float noise
    assert run["cost_source"] == "derived"
    assert run["cost_given_usd"] is None
    assert run["flags"] is None


def test_no_price_means_no_cost():
    run = parse_one(BARE)
    assert (run["cost_usd"], run["cost_source"], run["price_per_hour_usd"]) == (None, None, None)


def test_given_cost_wins_exactly():
    run = parse_one({**BARE, "price_per_hour_usd": 4.0, "estimated_cost_usd": 10.000000000001})
    assert run["cost_usd"] == Decimal("10.000000000001")
    assert run["cost_source"] == "given"


@pytest.mark.parametrize(
    ("given", "flagged"),
    [
        ("12.00", True),    # 2.5 h x 4.00 = 10.00; 2.00 off
        ("10.50", True),    # 0.50 off > 1 % of 10.00
        ("10.05", False),   # within 1 %
        ("10.00", False),
    ],
)
def test_given_cost_disagreeing_is_loaded_with_a_flag(given, flagged):
    run = parse_one({**BARE, "price_per_hour_usd": "4.00", "estimated_cost_usd": given})
    assert run["cost_usd"] == Decimal(given)
    assert run["cost_given_usd"] == Decimal(given)
    assert run["cost_source"] == "given"
    if flagged:
        [flag] = run["flags"]
        assert "estimated_cost_usd" in flag
        assert "10.00" in flag
    else:
        assert run["flags"] is None


@pytest.mark.parametrize(("duration_hours", "flagged"), [(3.0, True), (2.0, True), (2.51, False), (2.5, False)])
def test_duration_hours_disagreeing_is_flagged_and_timestamps_win(duration_hours, flagged):
    run = parse_one({**BARE, "duration_hours": duration_hours})
    assert run["duration_s"] == 9000.0
    assert run["ended_at"] - run["started_at"] == timedelta(hours=2.5)
    about_duration = [flag for flag in run["flags"] or [] if "duration_hours" in flag]
    assert len(about_duration) == (1 if flagged else 0)
    assert [flag for flag in run["flags"] if flag not in about_duration] == [NO_COST_FLAG]  # BARE has no price


def test_start_derived_from_end_and_duration():
    run = parse_one({"run_id": "r1", "end_time": "2025-05-05T18:30:00Z", "duration_hours": 2.5})
    assert (run["started_at"], run["ended_at"], run["duration_s"]) == (START, START + timedelta(hours=2.5), 9000.0)


@pytest.mark.parametrize(
    ("fields", "examples", "source"),
    [
        ({"throughput_examples_per_sec": 100.0}, 900_000, "derived"),     # 100/s x 9000 s
        ({"throughput_examples_per_sec": 812.5}, 7_312_500, "derived"),
        ({"throughput_examples_per_sec": 100.0, "examples": 5000}, 5000, "given"),
        ({}, None, None),
    ],
)
def test_examples_given_or_derived_from_throughput(fields, examples, source):
    run = parse_one({**BARE, **fields})
    assert (run["examples"], run["examples_source"]) == (examples, source)


# --- run_meta.json and arrays -----------------------------------------------------------------

def write_run_meta(path: Path, indent: int = 2) -> Path:
    """A run_meta.json written the way the seed document's snippet writes it."""
    run_meta = {"start_time": 1746460800.123456, "instance_type": "local-dev", "price_per_hour_usd": 0.9}
    run_meta["end_time"] = 1746464400.123456  # one hour later
    duration_hours = (run_meta["end_time"] - run_meta["start_time"]) / 3600.0
    run_meta["duration_hours"] = duration_hours
    run_meta["estimated_cost_usd"] = duration_hours * run_meta["price_per_hour_usd"]
    with open(path, "w") as f:
        json.dump(run_meta, f, indent=indent)
    return path


def test_run_meta_json_loads_as_one_run_with_a_stable_auto_id(tmp_path, warehouse):
    first = loader.ingest_file(write_run_meta(tmp_path / "run_meta.json"))
    assert (first.kind, first.status, first.rows_loaded, first.rows_rejected) == ("runs", "loaded", 1, 0)
    [run] = warehouse_runs()
    assert run["run_id"].startswith("auto-")
    started = datetime(2025, 5, 5, 16, 0, 0, 123456, tzinfo=UTC)
    assert (run["started_at"], run["ended_at"]) == (started, started + timedelta(hours=1))
    assert run["instance_type"] == "local-dev"
    assert run["cost_source"] == "given"
    given = json.loads((tmp_path / "run_meta.json").read_text(), parse_float=Decimal)["estimated_cost_usd"]
    assert run["cost_usd"] == given
    assert abs(given - Decimal("0.9")) < Decimal("0.000001")  # 1 h x 0.9 $/h, up to float noise
    assert run["flags"] is None

    # the same run saved again (other whitespace, so other bytes) is the same run, not a second one
    (tmp_path / "copy").mkdir()
    again = loader.ingest_file(write_run_meta(tmp_path / "copy" / "run_meta.json", indent=4))
    assert again.status == "loaded"
    assert [r["run_id"] for r in warehouse_runs()] == [run["run_id"]]


def test_run_meta_auto_id_depends_on_content_not_file_name(tmp_path):
    one = write_run_meta(tmp_path / "a.json").read_text().splitlines()
    two = write_run_meta(tmp_path / "b.json").read_text().splitlines()
    id_one = run_summary.parse(numbered(one), ParseContext("a.json", UTC)).rows("runs")[0]["run_id"]
    id_two = run_summary.parse(numbered(two), ParseContext("b.json", UTC)).rows("runs")[0]["run_id"]
    assert id_one == id_two
    other = {**BARE, "run_id": None, "start_time": "2025-05-05T16:00:01Z"}
    assert parse_one(other)["run_id"] not in (id_one, None)


def test_run_meta_with_float_noise_in_the_cost_loads(tmp_path, warehouse):
    """The seed snippet exactly, with times that do not divide evenly: the cost is a 17-digit float."""
    run_meta = {"start_time": 1746460800.123456, "instance_type": "g5.xlarge", "price_per_hour_usd": 1.006}
    run_meta["end_time"] = 1746465123.654321
    duration_hours = (run_meta["end_time"] - run_meta["start_time"]) / 3600.0
    run_meta["duration_hours"] = duration_hours
    run_meta["estimated_cost_usd"] = duration_hours * run_meta["price_per_hour_usd"]
    path = tmp_path / "run_meta.json"
    path.write_text(json.dumps(run_meta, indent=2))
    assert "1.2081866805954773" in path.read_text()  # 16 decimals: more than DECIMAL(38, 12) holds

    summary = loader.ingest_file(path)
    assert (summary.status, summary.rows_loaded, summary.rows_rejected) == ("loaded", 1, 0)
    [run] = warehouse_runs()
    assert abs(run["cost_usd"] - Decimal("1.2081866805954773")) < Decimal("0.000001")  # to the micro-dollar


@pytest.mark.parametrize(
    ("fields", "name"),
    [
        ({"examples": 1e20}, "examples"),                                   # > BIGINT
        ({"gpu_count": 3e9}, "gpu_count"),                                  # > INTEGER
        ({"price_per_hour_usd": "1e30"}, "price_per_hour_usd"),             # > DECIMAL(38, 12)
        ({"eval_history": [{"value": 1.0, "step": 1e20}]}, "eval_history[0].step"),
    ],
)
def test_values_too_large_for_the_warehouse_reject_the_line(tmp_path, warehouse, fields, name):
    path = write_lines(tmp_path / "runs.jsonl", jsonl({**BARE, "run_id": "ok"}, {**BARE, **fields}))
    summary = loader.ingest_file(path)
    assert (summary.rows_loaded, summary.rows_rejected) == (1, 1)
    assert summary.rejects[0]["line"] == 2
    assert name in summary.rejects[0]["reason"]


def test_json_array_of_objects(tmp_path, warehouse):
    records = [SEED, {**BARE, "run_id": "r2", "price_per_hour_usd": 4}]
    path = tmp_path / "runs.json"
    path.write_text(json.dumps(records, indent=2))
    summary = loader.ingest_file(path)
    assert (summary.kind, summary.rows_loaded, summary.rows_rejected) == ("runs", 2, 0)
    runs = {r["run_id"]: r for r in warehouse_runs()}
    assert runs["bert-base-042"] == SEED_ROW
    assert runs["r2"]["cost_usd"] == Decimal(10)
    assert set(runs) == {"bert-base-042", "r2"}


# --- goal, status, tags -------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("fields", "goal"),
    [
        ({}, "max"),                                               # plain val_metric
        ({"val_metric_name": "eval_loss"}, "min"),
        ({"val_metric_name": "WER"}, "min"),
        ({"val_metric_name": "perplexity"}, "min"),
        ({"val_metric_name": "p95_latency_ms"}, "min"),
        ({"val_metric_name": "accuracy"}, "max"),
        ({"val_metric_name": "f1"}, "max"),
        ({"val_metric_name": "eval_loss", "goal": "max"}, "max"),  # explicit goal wins
        ({"val_metric_name": "accuracy", "goal": "minimize"}, "min"),
        ({"val_metric_name": "accuracy", "goal": "Lower"}, "min"),
    ],
)
def test_goal_inferred_from_metric_name_unless_given(fields, goal):
    assert parse_one({**BARE, "val_metric": 0.5, **fields})["metric_goal"] == goal


def test_goal_words_match_whole_words_only():
    assert parse_one({**BARE, "val_metric_name": "answer_accuracy"})["metric_goal"] == "max"


def test_unknown_goal_is_rejected():
    reason = reject_of({**BARE, "goal": "sideways"})
    assert "goal" in reason and "sideways" in reason


@pytest.mark.parametrize(
    ("given", "status"),
    [("completed", "completed"), ("success", "completed"), ("Succeeded", "completed"),
     ("finished", "completed"), ("error", "failed"), ("crashed", "failed"), ("FAILED", "failed"),
     ("preempted", "preempted"), ("running", "running"), (None, None)],
)
def test_status_synonyms(given, status):
    assert parse_one({**BARE, "status": given})["status"] == status


def test_unknown_status_is_rejected():
    reason = reject_of({**BARE, "status": "exploded"})
    assert "status" in reason and "exploded" in reason


def test_tags_are_stored_as_a_map(tmp_path, warehouse):
    record = {**BARE, "tags": {"team": "nlp", "seed": 42, "note": None}}
    loader.ingest_file(write_lines(tmp_path / "runs.jsonl", jsonl(record)))
    [row] = fetch("SELECT tags, tags['seed'] AS seed FROM runs")
    assert row == {"tags": {"note": "", "seed": "42", "team": "nlp"}, "seed": "42"}


@pytest.mark.parametrize("tags", [{"sweep": {"lr": 0.1}}, {"gpus": [0, 1]}, ["a", "b"], "team=nlp"])
def test_nested_or_non_object_tags_are_rejected(tags):
    assert "tag" in reject_of({**BARE, "tags": tags})


# --- eval history -------------------------------------------------------------------------------

def test_eval_history_with_elapsed_seconds(tmp_path, warehouse):
    history = [{"step": 100, "elapsed_s": 600, "value": 2.5}, {"step": 200, "elapsed_s": 1200.5, "value": 1.75}]
    loader.ingest_file(write_lines(tmp_path / "runs.jsonl", jsonl({**BARE, "eval_history": history})))
    assert warehouse_evals() == [("r1", 0, 100, 600.0, 2.5), ("r1", 1, 200, 1200.5, 1.75)]


def test_eval_history_time_becomes_seconds_since_start():
    history = [
        {"time": "2025-05-05T16:10:00Z", "value": 0.5},            # 10 min after START
        {"time": "2025-05-05T18:00:00+02:00", "value": 0.6},      # 16:00Z: the start itself
        {"time": 1746466200, "step": 7, "value": 0.7},           # epoch: 17:30Z, 90 min in
    ]
    parsed = parse(jsonl({**BARE, "eval_history": history}))
    assert parsed.rows("run_evals") == [
        {"run_id": "r1", "seq": 0, "step": None, "elapsed_s": 600.0, "value": 0.5},
        {"run_id": "r1", "seq": 1, "step": None, "elapsed_s": 0.0, "value": 0.6},
        {"run_id": "r1", "seq": 2, "step": 7, "elapsed_s": 5400.0, "value": 0.7},
    ]


@pytest.mark.parametrize(
    ("history", "where"),
    [
        ([{"elapsed_s": 60, "value": 0.5}, {"elapsed_s": 120}], "eval_history[1]"),
        ([{"elapsed_s": 60, "value": "high"}], "eval_history[0]"),
        ([{"elapsed_s": 60, "value": 0.5}, {"elapsed_s": 90, "value": 0.4}, 0.3], "eval_history[2]"),
        ([{"time": "2025-05-05T15:00:00Z", "value": 0.5}], "eval_history[0]"),  # before the start
        ([{"elapsed_s": 60, "value": 0.5, "step": 1.5}], "eval_history[0]"),
        ({"elapsed_s": 60, "value": 0.5}, "eval_history"),
    ],
)
def test_bad_eval_point_rejects_the_whole_line(history, where):
    parsed = parse(jsonl({**BARE, "eval_history": history}))
    assert parsed.rows("runs") == [] and parsed.rows("run_evals") == []
    [reject] = parsed.rejects
    assert reject.line == 1
    assert where in reject.reason


# --- bad lines, blank lines, line numbers --------------------------------------------------------

MIXED_FILE = [
    json.dumps({**BARE, "run_id": "good-1"}),                                          # 1
    '{"run_id": "broken", "start_time": ',                                             # 2
    '["not", "an", "object"]',                                                         # 3
    json.dumps({**BARE, "run_id": "backwards", "end_time": "2025-05-05T15:00:00Z"}),  # 4
    "",                                                                                # 5
    "   ",                                                                             # 6
    json.dumps({**BARE, "run_id": "cheap", "price_per_hour_usd": -1}),                # 7
    json.dumps({"run_id": "no-start", "end_time": "2025-05-05T18:30:00Z"}),           # 8
    json.dumps({**BARE, "run_id": "good-2"}),                                          # 9
]
MIXED_REJECTS = [
    (2, "not valid JSON"),
    (3, "expected a JSON object"),
    (4, "before start_time"),
    (7, "price_per_hour_usd is negative"),
    (8, "no start_time"),
]


def test_bad_lines_rejected_with_line_numbers_good_lines_kept():
    parsed = parse(MIXED_FILE)
    assert [(r.line, r.raw) for r in parsed.rejects] == [(n, MIXED_FILE[n - 1]) for n, _ in MIXED_REJECTS]
    for reject, (_, reason_part) in zip(parsed.rejects, MIXED_REJECTS):
        assert reason_part in reject.reason
    assert [(r["run_id"], r["source_line"]) for r in parsed.rows("runs")] == [("good-1", 1), ("good-2", 9)]
    assert parsed.accepted == 2


def test_bad_lines_end_to_end(tmp_path, warehouse):
    path = write_lines(tmp_path / "mixed.jsonl", MIXED_FILE)
    summary = loader.ingest_file(path)
    assert (summary.status, summary.rows_loaded, summary.rows_rejected) == ("loaded", 2, 5)
    assert [r["line"] for r in summary.rejects] == [n for n, _ in MIXED_REJECTS]
    assert not summary.ok
    rejects = fetch("SELECT path, line, reason, raw FROM rejects ORDER BY line")
    assert [(r["path"], r["line"], r["raw"]) for r in rejects] == [
        (str(path), n, MIXED_FILE[n - 1]) for n, _ in MIXED_REJECTS]
    assert [r["run_id"] for r in warehouse_runs()] == ["good-1", "good-2"]


def test_blank_lines_keep_physical_line_numbers():
    lines = ["", json.dumps({**BARE, "run_id": "a"}), "", "", json.dumps({**BARE, "run_id": "b"}), ""]
    parsed = parse(lines)
    assert parsed.rejects == []
    assert [(r["run_id"], r["source_line"]) for r in parsed.rows("runs")] == [("a", 2), ("b", 5)]


def test_crlf_file_loads_like_lf(tmp_path, warehouse):
    path = tmp_path / "crlf.jsonl"
    path.write_bytes(("\r\n".join(jsonl(SEED, {**BARE, "run_id": "r2"})) + "\r\n").encode())
    summary = loader.ingest_file(path)
    assert (summary.rows_loaded, summary.rows_rejected) == (2, 0)
    assert warehouse_runs()[0] == SEED_ROW


# --- the same run twice -----------------------------------------------------------------------

def test_run_repeated_in_one_file_keeps_the_later_record(tmp_path, warehouse):
    lines = jsonl(
        {**BARE, "val_metric": 0.1,
         "eval_history": [{"elapsed_s": 1, "value": 0.1}, {"elapsed_s": 2, "value": 0.2}]},
        {**BARE, "run_id": "other"},
        {**BARE, "val_metric": 0.3, "status": "completed", "eval_history": [{"elapsed_s": 3, "value": 0.3}]},
    )
    loader.ingest_file(write_lines(tmp_path / "runs.jsonl", lines))
    runs = {r["run_id"]: r for r in warehouse_runs()}
    assert set(runs) == {"r1", "other"}
    assert runs["r1"] == run_row(run_id="r1", started_at=START, ended_at=START + timedelta(hours=2.5),
                                 duration_s=9000.0, val_metric=0.3, status="completed", source_line=3,
                                 flags=[NO_COST_FLAG])
    assert warehouse_evals() == [("r1", 0, None, 3.0, 0.3)]


def test_run_in_a_second_file_replaces_the_first(tmp_path, warehouse):
    old = {**BARE, "val_metric": 0.1, "eval_history": [{"elapsed_s": s, "value": s / 10} for s in (1, 2, 3)]}
    new = {**BARE, "val_metric": 0.9, "eval_history": [{"elapsed_s": 50, "value": 0.9}]}
    loader.ingest_file(write_lines(tmp_path / "monday.jsonl", jsonl(old)))
    second = loader.ingest_file(write_lines(tmp_path / "tuesday.jsonl", jsonl(new)))
    assert second.status == "loaded"
    [run] = fetch("SELECT run_id, val_metric, load_id FROM runs")
    assert run == {"run_id": "r1", "val_metric": 0.9, "load_id": 2}
    assert warehouse_evals() == [("r1", 0, None, 50.0, 0.9)]


def test_replacing_run_without_eval_history_drops_old_eval_points(tmp_path, warehouse):
    old = {**BARE, "eval_history": [{"elapsed_s": 1, "value": 0.1}, {"elapsed_s": 2, "value": 0.2}]}
    loader.ingest_file(write_lines(tmp_path / "monday.jsonl", jsonl(old)))
    loader.ingest_file(write_lines(tmp_path / "tuesday.jsonl", jsonl({**BARE, "val_metric": 0.9})))
    assert [r["val_metric"] for r in warehouse_runs()] == [0.9]
    assert warehouse_evals() == []


def test_gzip_file_loads_the_same_rows(tmp_path, warehouse):
    lines = jsonl(SEED, {**BARE, "eval_history": [{"elapsed_s": 60, "value": 1.0}]}, {**BARE, "run_id": "r2"})
    plain = write_lines(tmp_path / "runs.jsonl", lines)
    loader.ingest_file(plain)
    plain_runs, plain_evals = warehouse_runs(), warehouse_evals()

    packed = tmp_path / "runs.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    summary = loader.ingest_file(packed)
    assert (summary.kind, summary.status, summary.rows_loaded, summary.rows_rejected) == ("runs", "loaded", 3, 0)
    # the gz load replaced every row (load 2) with identical values
    assert {r["load_id"] for r in fetch("SELECT load_id FROM runs")} == {2}
    assert warehouse_runs() == plain_runs
    assert warehouse_evals() == plain_evals
    assert len(plain_runs) == 3
