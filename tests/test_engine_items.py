"""The engine's vocabulary for record families with nested values (ingest/engine/definition.py):
a MAP text field (TEXT_MAP), a value read through synonyms (OneOf), an id hashed from other values
when the record gives none (HashedId), and a list of objects read into a second table (Items,
Since). A small definition over the warehouse's runs/run_evals tables is read both ways (the SQL
pass and the generic per-line reader); every row, item and reject is checked against what this
test computes itself with plain Python (hashlib, datetime, str()), and each line's path against
the reader's log: plain lines in SQL, odd and bad ones in the reader."""
from __future__ import annotations

import hashlib
import json
import logging
import random
from datetime import datetime, timezone
from functools import partial
from pathlib import Path

from ingest.engine import batch_sql, reader, staging
from ingest.engine.contract import ParseContext
from ingest.engine.definition import (COUNT, COUNT_LIST, NUMBER, TEXT, TEXT_LIST, TEXT_MAP, TIME, Definition, Detect, CountOf, Field, HashedId, Items,
                                      Key, OneOf, Required, Since, Total)

UTC = timezone.utc
LOGGER = "ingest.engine.batch_sql"
STATUS = (("completed", "completed"), ("success", "completed"), ("finished", "completed"),
          ("failed", "failed"), ("crashed", "failed"), ("running", "running"))
TOY = Definition(
    kind="runs", table="runs",
    detect=Detect(all_of=("run_id",), any_of=("start_time",)),
    header_requires=("started_at",), header_reason="not a toy-run header",
    steps=(
        Field("run_id", TEXT), Field("project", TEXT), Field("host", TEXT),
        Field("started_at", TIME, names=("start_time",)),
        Required("started_at", "no start_time"),
        Field("status", TEXT),
        OneOf("status", STATUS, "status {value!r} is not one of completed, failed, running"),
        Field("examples", COUNT),
        Field("tags", TEXT_MAP),
        Field("gpu_uuids", TEXT_LIST, keep_empty=True),
        Field("gpu_indices", COUNT_LIST, names=("gpu_indices", "gpu_index"), maximum=64),
        Field("gpu_count", COUNT),
        CountOf("gpu_count", "gpu_uuids"),
        CountOf("gpu_count", "gpu_indices"),
        HashedId("run_id", ("project", "host", "started_at"), stand_ins=("unknown",)),
        Items("eval_history", "run_evals", parent="run_id", seq="seq", not_list="eval_history must be a list",
              steps=(Field("value", NUMBER, minimum=None), Required("value", "{item} has no value"),
                     Field("elapsed_s", NUMBER), Field("step", COUNT, minimum=None), Field("time", TIME),
                     Since("elapsed_s", "time", "started_at", "{item} is before the run started"))),
    ),
    key=Key("run_id", ("run_id",)),
    totals=(Total("runs", "rows"), Total("examples", "sum", "examples")),
)
stage_toy = partial(batch_sql.stage, TOY)


# --- the expectation, computed here --------------------------------------------------------
def instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def expected(record: dict, line: int) -> tuple[dict, list[tuple]]:
    """The run row and its eval points a good record makes, worked out with plain Python."""
    start = instant(record["start_time"])
    run_id = record.get("run_id")
    if run_id in (None, "unknown"):
        identity = f"{record.get('project', '')}|{record.get('host', '')}|{start.isoformat()}"
        run_id = "auto-" + hashlib.sha256(identity.encode()).hexdigest()[:12]
    status = dict(STATUS)[record["status"].strip().lower()] if "status" in record else None
    tags = None
    if "tags" in record:
        tags = {k: "" if v is None else "True" if v is True else "False" if v is False else str(v)
                for k, v in sorted(record["tags"].items())}
    points = []
    for seq, point in enumerate(record.get("eval_history", [])):
        elapsed = point.get("elapsed_s")
        if elapsed is None and "time" in point:
            elapsed = (instant(point["time"]) - start).total_seconds()
        points.append((run_id, seq, point.get("step"), None if elapsed is None else float(elapsed), float(point["value"])))
    uuids = None if "gpu_uuids" not in record else [u for u in record["gpu_uuids"] if u]
    indices = record.get("gpu_indices", record.get("gpu_index"))
    indices = [indices] if isinstance(indices, int) else [i for i in indices if i is not None] if indices else None
    count = record.get("gpu_count") or (len(uuids) if uuids else len(indices) if indices else None)
    return {"run_id": run_id, "started_at": start, "status": status, "examples": record.get("examples"),
            "tags": tags, "gpu_uuids": uuids, "gpu_indices": indices or None, "gpu_count": count, "source_line": line}, points


def generated(seed: int, count: int) -> list[dict]:
    """Good records: some plain, some with spellings only the reader takes (an eval time, a
    status in capitals with a blank, a tag that is a float), a few with the same run_id."""
    rng = random.Random(seed)
    records = []
    for index in range(count):
        record = {"project": rng.choice(["nlp", "vision"]), "host": f"h{rng.randrange(4)}",
                  "start_time": f"2026-10-{rng.randrange(1, 29):02d}T{rng.randrange(24):02d}:00:0{rng.randrange(10)}Z"}
        if rng.random() < 0.8:
            record["run_id"] = rng.choice([f"r{index}", f"r{index}", "unknown", f"r{rng.randrange(index + 1)}"])
        if rng.random() < 0.7:
            record["status"] = rng.choice([k for k, _ in STATUS] + ["SUCCESS", "Crashed"])
        if rng.random() < 0.6:
            record["examples"] = rng.randrange(10**6)
        if rng.random() < 0.6:
            record["tags"] = {rng.choice("abc") + str(i): rng.choice(["x", 3, True, False, None, "ü w"]) for i in range(3)}
        if rng.random() < 0.7:
            record["eval_history"] = [{"value": rng.choice([0.5, 1, -2.25]), "step": step * 100,
                                       **({"elapsed_s": step * 60.5} if rng.random() < 0.8 else {})}
                                      for step in range(rng.randrange(5))]
        if rng.random() < 0.05:
            record["eval_history"] = [{"value": 1.0, "time": "2026-10-29T00:00:00Z"}]
        if rng.random() < 0.3:
            record["gpu_uuids"] = rng.choice([[], ["GPU-a", ""], ["GPU-b", "GPU-c"]])
        if rng.random() < 0.3:
            record["gpu_indices"] = rng.choice([[], [0, 1], [3, None], [63]])
        elif rng.random() < 0.05:
            record["gpu_index"] = rng.choice([2, 7])  # one number, another spelling: the reader's
        if rng.random() < 0.2:
            record["gpu_count"] = rng.choice([1, 8])
        if rng.random() < 0.05 and record.get("status"):
            record["status"] = " " + record["status"].upper()
        records.append(record)
    return records


def reader_only(record: dict) -> bool:
    """Whether the SQL pass leaves the record to the reader (what the test knows of its spellings)."""
    return ("gpu_index" in record or any("time" in p for p in record.get("eval_history", []))
            or record.get("status", "x") != record.get("status", "x").strip())


# A bad record and its reason, written out by hand (and whether SQL itself refuses it).
BAD = [
    ({"run_id": "b1"}, "no start_time", True),
    ({"run_id": "b2", "start_time": "2026-10-01T00:00:00Z", "status": "done"},
     "status 'done' is not one of completed, failed, running", False),
    ({"run_id": "b3", "start_time": "2026-10-01T00:00:00Z", "tags": ["a"]}, "tags must be an object of name: value", False),
    ({"run_id": "b4", "start_time": "2026-10-01T00:00:00Z", "tags": {"a": [1]}}, "tags 'a' must be a single value", False),
    ({"run_id": "b5", "start_time": "2026-10-01T00:00:00Z", "eval_history": {"value": 1}}, "eval_history must be a list", False),
    ({"run_id": "b6", "start_time": "2026-10-01T00:00:00Z", "eval_history": [1]}, "eval_history[0] must be an object", False),
    ({"run_id": "b7", "start_time": "2026-10-01T00:00:00Z", "eval_history": [{"value": 1}, {"step": 2}]},
     "eval_history[1] has no value", False),
    ({"run_id": "b8", "start_time": "2026-10-01T00:00:00Z", "eval_history": [{"value": "x"}]},
     "eval_history[0].value must be a number, got 'x'", False),
    ({"run_id": "b9", "start_time": "2026-10-01T00:00:00Z", "eval_history": [{"value": 1, "elapsed_s": -1}]},
     "eval_history[0].elapsed_s is negative (-1)", False),
    ({"run_id": "b11", "start_time": "2026-10-01T00:00:00Z", "gpu_indices": [1, 65]},
     "gpu_indices 65 is too large (at most 64)", False),
    ({"run_id": "b12", "start_time": "2026-10-01T00:00:00Z", "gpu_indices": {"a": 1}},
     "gpu_indices must be a list of whole numbers", False),
    ({"run_id": "b10", "start_time": "2026-10-02T00:00:00Z", "eval_history": [{"value": 1, "time": "2026-10-01T00:00:00Z"}]},
     "eval_history[0] is before the run started", False),
]


def write(path: Path, records: list) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    return path


def staged(path: Path, caplog):
    con = staging.open_stage()
    try:
        with caplog.at_level(logging.DEBUG, logger=LOGGER):
            caplog.clear()
            result = stage_toy(staging.Source.of(path), con, ParseContext(str(path), UTC))
        runs = con.execute("SELECT run_id, started_at, status, examples, tags, gpu_uuids, gpu_indices, gpu_count, "
                           "source_line FROM runs").df()
        evals = con.execute("SELECT run_id, seq, step, elapsed_s, value FROM run_evals").fetchall()
        rejects = dict(con.execute("SELECT line, reason FROM rejects").fetchall())
    finally:
        con.close()
    rows = {}
    for row in runs.to_dict("records"):
        row["started_at"] = row["started_at"].to_pydatetime()
        row["status"] = row["status"] if isinstance(row["status"], str) else None
        row["tags"] = None if not isinstance(row["tags"], dict) else dict(row["tags"])
        row["examples"] = None if row["examples"] is None or row["examples"] != row["examples"] else int(row["examples"])
        row["source_line"] = int(row["source_line"])
        row["gpu_uuids"] = None if row["gpu_uuids"] is None else list(row["gpu_uuids"])
        row["gpu_indices"] = None if row["gpu_indices"] is None else [int(i) for i in row["gpu_indices"]]
        row["gpu_count"] = None if row["gpu_count"] != row["gpu_count"] or row["gpu_count"] is None else int(row["gpu_count"])
        rows[row["run_id"]] = row
    lines = {line for r in caplog.records if r.name == LOGGER for line in getattr(r, "reader_lines", [])}
    return rows, sorted(evals, key=repr), rejects, lines, result


def test_nested_values_load_alike_in_sql_and_the_reader(tmp_path, caplog):
    records = generated(42, 400)
    path = write(tmp_path / "runs.jsonl", records + [bad for bad, _, _ in BAD])
    want_rows, want_evals = {}, {}
    for line, record in enumerate(records, start=1):
        row, points = expected(record, line)
        want_rows[row["run_id"]] = row  # a later record of the same run_id replaces the earlier, with its points
        want_evals[row["run_id"]] = points
    evals = sorted((p for points in want_evals.values() for p in points), key=repr)
    want_rejects = {len(records) + i + 1: reason for i, (_, reason, _) in enumerate(BAD)}

    rows, got_evals, rejects, reader_lines, result = staged(path, caplog)
    assert rows == want_rows
    assert got_evals == evals
    assert rejects == want_rejects
    assert result.totals == {"runs": len(want_rows), "examples": sum(r["examples"] or 0 for r in want_rows.values())}
    # which lines took which path: the odd spellings and the reasons SQL does not word went to the reader
    assert {line for line, record in enumerate(records, start=1) if reader_only(record)} <= reader_lines
    assert reader_lines - set(want_rejects) <= {line for line, r in enumerate(records, start=1) if reader_only(r)
                                                or any(isinstance(v, float) and v != int(v) for v in r.get("tags", {}).values())}
    assert {line for line, (_, _, in_sql) in zip(want_rejects, BAD) if in_sql}.isdisjoint(reader_lines)
    assert len(reader_lines) < len(records) / 4  # most lines settled in SQL

    # the reader alone, line by line, gives the same
    parsed = reader.parse(TOY, staging.lines(staging.Source.of(path)), ParseContext(str(path), UTC))
    assert {r["run_id"]: {k: r[k] for k in ("run_id", "started_at", "status", "examples", "tags", "gpu_uuids", "gpu_indices",
                                             "gpu_count", "source_line")}
            for r in parsed.tables["runs"]} == want_rows
    assert sorted(((p["run_id"], p["seq"], p["step"], p["elapsed_s"], p["value"]) for p in parsed.tables["run_evals"]),
                  key=repr) == evals
    assert {r.line: r.reason for r in parsed.rejects} == want_rejects
