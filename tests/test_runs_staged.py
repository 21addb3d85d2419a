"""Run files staged through the run-summary definition (ingest/formats/runs/run_summary.py): which
lines the SQL pass loads and which go to the generic reader (a spy on reader.read_lines), and each
run's values worked out here in plain Python from the record's own numbers (not by the code under
test): the span, the cost to the micro-dollar, examples and energy from rates, flags, tags, ids.
Files that are one JSON value (an array, one object over many lines), blank first lines, a BOM,
CRLF and gzip are read as the records they hold."""
from __future__ import annotations

import gzip
import hashlib
import json
import random
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest

from ingest.engine import batch_sql, reader, staging
from ingest.engine.contract import ParseContext
from ingest.formats.runs import run_summary
from ingest.settings import config
from tests.run_cases import BARE, SEED, plain_record, write

UTC = timezone.utc
START, END = "2025-05-05T16:00:00Z", "2025-05-05T18:30:00Z"
HOURS = 2.5  # END - START
MICRO = Decimal("0.000001")


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def priced(price: object, hours: float) -> Decimal:
    """USD of price x hours to the micro-dollar (the price as written, the hours as repr writes them)."""
    return (Decimal(str(price)) * Decimal(repr(hours))).quantize(Decimal("1e-12")).quantize(MICRO)


def stage(path: Path, monkeypatch) -> tuple[dict, list, list[int], object]:
    """(runs by run_id as dicts, rejects (line, reason), the lines the reader read, Staged)."""
    by_reader: list[int] = []
    read_lines = reader.read_lines

    def spy(definition, lines, *args, **kwargs):
        by_reader.extend(line for line, _ in lines)
        return read_lines(definition, lines, *args, **kwargs)

    monkeypatch.setattr(reader, "read_lines", spy)
    con = staging.open_stage()
    try:
        result = run_summary.stage(staging.Source.of(path), con, ParseContext(str(path), UTC))
        cursor = con.execute("SELECT * EXCLUDE (load_id) FROM runs")
        names = [d[0] for d in cursor.description]
        runs = {row[0]: dict(zip(names, row)) for row in cursor.fetchall()}
        rejects = con.execute("SELECT line, reason FROM rejects ORDER BY line").fetchall()
    finally:
        con.close()
    return runs, rejects, by_reader, result


# (record, the path it takes, the values expected: a dict of columns, or the reason it is refused)
L4 = config.load().prices.gpu("NVIDIA L4")
G4DN = config.load().prices.instance("g4dn.xlarge")
CASES = [
    ({**BARE, "run_id": "priced", "price_per_hour_usd": 2.45}, "sql",
     {"duration_s": HOURS * 3600, "cost_usd": priced("2.45", HOURS), "cost_source": "derived", "flags": None}),
    ({"run_id": "from-hours", "start_time": START, "duration_hours": 1.2345678, "price_per_hour_usd": 3.1}, "sql",
     {"ended_at": at(START) + timedelta(hours=1.2345678), "duration_s": 1.2345678 * 3600,
      "cost_usd": priced("3.1", 1.2345678)}),
    ({"run_id": "to-start", "end_time": END, "duration_hours": 0.3333333, "price_per_hour_usd": 1}, "sql",
     {"started_at": at(END) - timedelta(hours=0.3333333), "cost_usd": priced(1, 0.3333333)}),
    ({**BARE, "run_id": "given", "price_per_hour_usd": 4, "estimated_cost_usd": 10.005}, "sql",
     {"cost_usd": Decimal("10.005"), "cost_source": "given", "cost_given_usd": Decimal("10.005")}),
    ({**BARE, "run_id": "given-differs", "price_per_hour_usd": 4, "estimated_cost_usd": 12}, "reader",
     {"cost_usd": Decimal(12), "cost_source": "given",
      "flags": ["estimated_cost_usd 12.000000000000 differs from duration x price = 10.00"]}),
    ({**BARE, "run_id": "hours-differ", "duration_hours": 3.0, "price_per_hour_usd": 1}, "reader",
     {"duration_s": HOURS * 3600, "cost_usd": priced(1, HOURS),
      "flags": ["duration_hours 3 differs from end_time - start_time (2.5 h); used the timestamps"]}),
    ({**BARE, "run_id": "examples", "price_per_hour_usd": 1, "throughput_examples_per_sec": 99.9}, "sql",
     {"examples": round(99.9 * HOURS * 3600), "examples_source": "derived", "throughput_examples_per_s": 99.9}),
    ({**BARE, "run_id": "examples-given", "price_per_hour_usd": 1, "examples": 12, "throughput_examples_per_sec": 5}, "sql",
     {"examples": 12, "examples_source": "given"}),
    ({**BARE, "run_id": "words", "price_per_hour_usd": 1, "status": "Succeeded", "val_metric_name": "eval_loss"}, "sql",
     {"status": "completed", "metric_goal": "min"}),
    ({**BARE, "run_id": "gpus", "price_per_hour_usd": 1, "gpu_uuids": ["GPU-a", "GPU-b"], "gpu_indices": [0, 1]}, "sql",
     {"gpu_count": 2, "gpu_uuids": ["GPU-a", "GPU-b"], "gpu_indices": [0, 1]}),
    ({**BARE, "run_id": "tags", "price_per_hour_usd": 1, "tags": {"b": 2, "a": None, "on": True}}, "sql",
     {"tags": {"a": "", "b": "2", "on": "True"}}),
    ({**BARE, "run_id": "catalog", "instance_type": "g4dn.xlarge"}, "reader",
     {"cost_usd": priced(G4DN, HOURS), "cost_source": "catalog", "price_per_hour_usd": G4DN}),
    ({**BARE, "run_id": "catalog-gpus", "instance_type": "g4dn.xlarge", "gpu_type": "NVIDIA L4", "gpu_uuids": ["g1", "g2"]},
     "reader", {"cost_usd": priced(L4 * 2, HOURS), "cost_source": "catalog", "gpu_count": 2}),
    ({**BARE, "run_id": "no-price", "instance_type": "no-such-box"}, "reader",
     {"cost_usd": None, "flags": ["no cost: neither estimated_cost_usd nor price_per_hour_usd is given, and the price "
                                  "catalog has no price for instance_type 'no-such-box'"]}),
    ({"run_id": "open", "start_time": START}, "reader",
     {"cost_usd": None, "ended_at": None, "duration_s": None, "flags": ["no cost: the run has no end_time or duration_hours yet"]}),
    ({**BARE, "run_id": "seed-words", "price_per_hour": 2.0, "average_power_watts": 300, "optimizer": "adamw"}, "reader",
     {"cost_usd": priced(2, HOURS), "energy_kwh": 300 * HOURS / 1000,
      "tags": {"average_power_w": "300", "optimizer": "adamw"},
      "flags": ["energy_kwh derived: average_power_watts 300 W x 2.5 h"]}),
    ({**BARE, "run_id": "time-points", "price_per_hour_usd": 1,
      "eval_history": [{"time": "2025-05-05T16:10:00Z", "value": 0.5}]}, "reader", {}),
    ({"start_time": START, "end_time": END, "project": "p", "host": None, "price_per_hour_usd": 1}, "reader", "id"),
    ({**BARE, "run_id": "disagree", "price_per_hour": 2.0, "price_per_hour_usd": 3.0}, "reader",
     "price_per_hour 2.0 and price_per_hour_usd 3.0 disagree"),
    ({**BARE, "run_id": "backwards", "end_time": "2025-05-05T15:00:00Z"}, "reader",
     "end_time 2025-05-05T15:00:00+00:00 is before start_time 2025-05-05T16:00:00+00:00"),
    ({"run_id": "neg", "start_time": START, "duration_hours": -1}, "reader", "duration_hours is negative (-1)"),
    # epoch seconds as JSON whole numbers are read in SQL; a fraction, or milliseconds, by the reader
    ({"run_id": "epoch", "start_time": int(at(START).timestamp()), "end_time": int(at(END).timestamp()),
      "price_per_hour_usd": 1}, "sql", {"started_at": at(START), "ended_at": at(END), "duration_s": HOURS * 3600, "cost_usd": priced(1, HOURS)}),
    ({"run_id": "epoch-fraction", "start_time": at(START).timestamp() + 0.5, "end_time": END, "price_per_hour_usd": 1},
     "reader",
     {"started_at": at(START) + timedelta(seconds=0.5), "duration_s": HOURS * 3600 - 0.5}),
    ({"run_id": "epoch-ms", "start_time": int(at(START).timestamp()) * 1000, "end_time": END}, "reader",
     f"start_time {int(at(START).timestamp()) * 1000} looks like milliseconds; epoch values must be seconds"),
    ({"run_id": "no-start", "end_time": END}, "sql", "no start_time (and no end_time with duration_hours to derive it)"),
    ({**BARE, "run_id": "nested", "tags": {"sweep": {"lr": 0.1}}}, "reader", "tags 'sweep' must be a single value"),
    ({"run_id": "too-many", "start_time": START, "duration_hours": 3000, "price_per_hour_usd": 1,
      "throughput_examples_per_sec": 9e14}, "reader",
     "throughput_examples_per_sec 9e+14 x 3000 h is more examples than the warehouse holds (at most 9,223,372,036,854,775,807)"),
]


def test_each_line_takes_its_path_with_its_values(tmp_path, monkeypatch):
    path = write(tmp_path / "runs.jsonl", [json.dumps(record) for record, _, _ in CASES])
    runs, rejects, by_reader, result = stage(path, monkeypatch)
    assert by_reader == [n + 1 for n, (_, way, _) in enumerate(CASES) if way == "reader"]
    assert rejects == [(n + 1, want) for n, (_, _, want) in enumerate(CASES) if isinstance(want, str) and want != "id"]
    for n, (record, _, want) in enumerate(CASES):
        if want == "id":  # the id hashed from the values as written (null as 'None') and the start
            identity = "|".join(str(record.get(k, "")) for k in ("project", "host", "instance_type"))
            run_id = "auto-" + hashlib.sha256(f"{identity}|{at(START).isoformat()}".encode()).hexdigest()[:12]
            assert runs[run_id]["source_line"] == n + 1
        elif isinstance(want, dict):
            run = runs[record["run_id"]]
            assert run["source_line"] == n + 1 and run["started_at"] == (want["started_at"] if "started_at" in want
                                                                   else at(record.get("start_time") or START))
            assert {column: run[column] for column in want} == want, record["run_id"]
    assert result.warnings == ["fields not recognised, kept as the runs' tags: optimizer"]
    assert result.accepted == len(runs) == sum(not isinstance(want, str) or want == "id" for _, _, want in CASES)
    # the reader alone (parse) loads the same runs and refuses the same lines with the same reasons
    parsed = run_summary.parse(staging.lines(staging.Source.of(path)), ParseContext(str(path), UTC))
    assert [(r.line, r.reason) for r in parsed.rejects] == rejects
    assert {r["run_id"]: r["cost_usd"] for r in parsed.rows("runs")} == {k: r["cost_usd"] for k, r in runs.items()}


def test_plain_records_take_the_sql_path_with_their_values(tmp_path, monkeypatch):
    """A fleet-like file loads with no line read by the reader; every value worked out here."""
    rng = random.Random(7)
    records = [plain_record(rng, n) for n in range(500)]
    runs, rejects, by_reader, result = stage(write(tmp_path / "plain.jsonl", [json.dumps(r) for r in records]), monkeypatch)
    assert by_reader == [] and rejects == [] and result.accepted == 500
    status = {"completed": "completed", "failed": "failed", "Succeeded": "completed"}
    for n, record in enumerate(records):
        run = runs[record["run_id"]]
        hours = (at(record["end_time"]) - at(record["start_time"])).total_seconds() / 3600
        assert run["source_line"] == n + 1
        assert (run["started_at"], run["ended_at"], run["duration_s"]) == (at(record["start_time"]), at(record["end_time"]), hours * 3600)
        assert (run["cost_usd"], run["cost_source"]) == (priced(record["price_per_hour_usd"], hours), "derived")
        assert (run["examples"], run["examples_source"]) == (round(record["throughput_examples_per_sec"] * hours * 3600), "derived")
        assert run["status"] == status[record["status"]] and run["gpu_count"] == record["gpu_count"]
        assert run["metric_goal"] == ("min" if record["val_metric_name"] == "eval_loss" else "max")
        assert run["tags"] == record["tags"] and run["flags"] is None
    total = sum((priced(r["price_per_hour_usd"], (at(r["end_time"]) - at(r["start_time"])).total_seconds() / 3600)
                 for r in records), Decimal(0))
    assert result.totals["cost_usd_total"] == str(total.quantize(Decimal("0.01")))


@pytest.mark.parametrize("hours", [0.3333333, 1.2345678, 2.5, 0.1234567891234, 87839.999999, 1e-4 + 1e-12])
def test_duration_hours_reach_the_microsecond_python_gives(tmp_path, monkeypatch, hours):
    lines = [json.dumps({"run_id": "a", "start_time": START, "duration_hours": hours, "price_per_hour_usd": 1}),
             json.dumps({"run_id": "b", "end_time": START, "duration_hours": hours, "price_per_hour_usd": 1})]
    runs, rejects, by_reader, _ = stage(write(tmp_path / "runs.jsonl", lines), monkeypatch)
    assert rejects == []
    assert runs["a"]["ended_at"] == at(START) + timedelta(hours=hours)
    assert runs["b"]["started_at"] == at(START) - timedelta(hours=hours)
    assert [runs[r]["cost_usd"] for r in "ab"] == [priced(1, hours)] * 2


def test_an_array_of_runs_keeps_each_runs_last_element(tmp_path, monkeypatch):
    rng = random.Random(11)
    records = [{**plain_record(rng, n % 150), "val_metric": n} for n in range(600)]  # each run_id 4 times
    path = tmp_path / "runs.json.gz"
    path.write_bytes(gzip.compress(json.dumps(records, indent=1).encode()))

    def whole(*args, **kwargs):
        raise AssertionError("the array went to the reader whole")

    monkeypatch.setattr(reader, "parse", whole)  # read by DuckDB's array reader and the SQL pass
    runs, rejects, by_reader, result = stage(path, monkeypatch)
    assert rejects == [] and result.accepted == 600 and by_reader == []
    assert {k: r["val_metric"] for k, r in runs.items()} == {r["run_id"]: r["val_metric"] for r in records}
    assert {r["source_line"] for r in runs.values()} == {1}  # an element is numbered with the array's first line


def test_one_object_over_many_lines_and_a_broken_array(tmp_path, monkeypatch):
    one = tmp_path / "run_meta.json"
    one.write_text("\n \n" + json.dumps(SEED, indent=2))
    runs, rejects, _, _ = stage(one, monkeypatch)
    hours = (SEED["end_time"] - SEED["start_time"]) / 3600
    run = runs[SEED["run_id"]]
    assert rejects == [] and run["source_line"] == 3 and run["duration_s"] == hours * 3600
    assert (run["cost_usd"], run["cost_source"]) == (Decimal(str(SEED["estimated_cost_usd"])), "given")
    assert run["examples"] == round(SEED["throughput_examples_per_sec"] * hours * 3600)
    broken = tmp_path / "broken.json"
    text = json.dumps([BARE, SEED], indent=2)[:-3]
    broken.write_text(text)
    runs, rejects, _, _ = stage(broken, monkeypatch)
    assert runs == {} and [line for line, _ in rejects] == [n for n, line in enumerate(text.split("\n"), start=1) if line.strip()]


def test_a_file_past_the_one_value_bound_is_read_as_lines(tmp_path, monkeypatch):
    monkeypatch.setattr(batch_sql, "ONE_VALUE_BYTES", 4096)
    lines = ['{"run_id": "cut-short",'] + [json.dumps({**BARE, "run_id": f"r{n}", "price_per_hour_usd": 1}) for n in range(60)]
    runs, rejects, by_reader, _ = stage(write(tmp_path / "cut.jsonl", lines), monkeypatch)
    assert len(runs) == 60 and [line for line, _ in rejects] == [1] and by_reader == [1]


FIRST_LINES = {  # the same runs after blank lines of every kind, with a BOM, with CRLF line ends
    "blank-first.jsonl": "\n \t\n\r\n" + "\n".join(json.dumps({**BARE, "run_id": f"b{n}"}) for n in range(3)) + "\n",
    "bom.jsonl": "\ufeff" + json.dumps(SEED) + "\n" + json.dumps(BARE) + "\n",
    "crlf.jsonl": "\r\n".join(["", json.dumps(SEED), json.dumps(BARE), "{not json", ""]),
    "unicode-blanks.jsonl": "\n".join([json.dumps(SEED), "\u00a0\u3000 \u2009", "\t", "\f", " \u00a0",
                                       json.dumps(BARE), "\u00a0x"]) + "\n",
}


@pytest.mark.parametrize("name", sorted(FIRST_LINES))
def test_blank_lines_a_bom_and_crlf_keep_the_physical_line_numbers(tmp_path, monkeypatch, name):
    path = tmp_path / name
    path.write_bytes(FIRST_LINES[name].encode("utf-8"))
    runs, rejects, _, _ = stage(path, monkeypatch)
    text = FIRST_LINES[name].lstrip("\ufeff").replace("\r\n", "\n").split("\n")
    expected = {}
    for number, line in enumerate(text, start=1):
        try:
            expected[json.loads(line)["run_id"]] = number
        except ValueError:
            continue
    assert {k: r["source_line"] for k, r in runs.items()} == expected
    assert [line for line, _ in rejects] == [n for n, line in enumerate(text, start=1)
                                            if line.strip() and not line.startswith("{\"")]


def test_the_sample_runs_and_a_gzip_copy_load_alike(tmp_path, monkeypatch):
    sample = Path(__file__).resolve().parents[1] / "sample_data" / "runs.jsonl"
    packed = tmp_path / "runs.jsonl.gz"
    packed.write_bytes(gzip.compress(sample.read_bytes()))
    plain, packed_runs = stage(sample, monkeypatch)[0], stage(packed, monkeypatch)[0]
    ids = [json.loads(line)["run_id"] for line in sample.read_text().splitlines() if line.strip()]
    assert plain == packed_runs and set(plain) == set(ids)


def test_an_array_with_a_number_longer_than_a_double_is_read_exactly(tmp_path, monkeypatch):
    """The array reader hands each element's text as written, so the amount is read exactly, not
    as a double (alone on its line, as an indented array may write it)."""
    text = json.dumps([{**BARE, "price_per_hour_usd": 1, "estimated_cost_usd": 0}], indent=2)
    path = tmp_path / "runs.json"
    path.write_text(text.replace('"estimated_cost_usd": 0', '"estimated_cost_usd":\n    123456.1234567890123'))
    runs, rejects, _, _ = stage(path, monkeypatch)
    assert rejects == [] and runs["r1"]["cost_given_usd"] == Decimal("123456.1234567890123").quantize(Decimal("1e-12"))
