"""The lenient JSON read of lists, maps and eval items (ingest/engine/batch_nested.py): a line it
trusts loads as the generic reader (ingest/engine/reader.py) reads it, and a line it would read
otherwise goes on to the strict read or the reader.

Each case is a run line with one quirk (or none) in its lists, tags or eval_history, and the
path it must take: "lenient" (one json_transform), "strict" (batch_json.json_fields) or
"reader". The expected path is reasoned from the reader's rules (reader_values.py, values.py)
and DuckDB's JSON reader (json_transform reads 1.5, "1" and true as BIGINTs, writes a double
back without its spelling), not copied from the code's output. Rows, eval rows and rejects are
compared with the reader's own reading of the same lines (reader.parse, staged as a load stages
the reader's rows), which is independent of the SQL.
"""
from __future__ import annotations

import json
import random
from datetime import timezone
from pathlib import Path

import duckdb
import pytest

from ingest.engine import batch_sql, reader, staging
from ingest.engine.batch_json import quirk_pattern
from ingest.engine.contract import ParseContext
from ingest.formats import serving
from ingest.formats.runs import run_summary

UTC = timezone.utc
HEAD = '"start_time": "2026-10-15T22:23:52Z", "end_time": "2026-10-16T03:36:15Z", "price_per_hour_usd": 2.45'
UUID = "GPU-8f4c6fc3-99f0-6659-5e28-2d8a2af2003c"  # hex that reads like an exponent (5e28): a string, not a number
FLEET = (f'"gpu_indices": [3, 0], "gpu_uuids": ["{UUID}"], "tags": {{"resource_id": "i-03bbb950c2cb2550b"}}, '
         '"eval_history": [{"elapsed_s": 4685.7, "step": 500, "value": 0.20519}, {"elapsed_s": 9371.3, "step": 1000, "value": 0.225}]')

# (the line's lists, tags and items as JSON text, the path it takes)
RUN_CASES = [
    (FLEET, "lenient"),
    ('"gpu_indices": [], "gpu_uuids": [], "tags": {}, "eval_history": []', "lenient"),
    ('"gpu_indices": [ -0 , 1000000, -1000000 ], "gpu_uuids": ["", "GPU-a", "x]y"]', "lenient"),  # bounds are inclusive
    ('"tags": {"n": -0, "big": 123456789012345, "b": "x}y", "a": "é w", "c": "", "d": "1.5"}', "lenient"),
    ('"tags": {"on": true, "off": false, "none": null, "n": -0}', "strict"),  # True, False, '' as Python's str() writes them
    ('"eval_history": [{"value": -0}, {"value": -0.0, "step": -5}, {"value": 1000000000000000, "elapsed_s": 0}]', "lenient"),
    ('"eval_history" : [ {"step": 1 ,"value":2} ]', "strict"),  # a blank before a key's colon
    ('"eval_history": [{"step": 1, "value": 2}], "gpu_count": 2', "lenient"),
    # counts: a point, an exponent, text, true, null, a nested list, out of bounds, not a list, another spelling
    ('"gpu_indices": [1.5]', "reader"),
    ('"gpu_indices": [1.0]', "reader"),
    ('"gpu_indices": [1e3]', "reader"),
    ('"gpu_indices": ["1"]', "reader"),
    ('"gpu_indices": [true]', "reader"),
    ('"gpu_indices": [null, 2]', "strict"),
    ('"gpu_indices": [[1]]', "reader"),
    ('"gpu_indices": [1000001]', "reader"),
    ('"gpu_indices": 3', "reader"),
    ('"gpu_indices": "1,2"', "reader"),
    ('"gpu_indices": null', "strict"),
    ('"gpu_index": [2]', "reader"),
    ('"gpu_indices": [12345678901234567890]', "reader"),
    ('"gpu_indices": [1,]', "reader"),
    # texts: a number, a blank at an edge, null, a nested list, an escape
    ('"gpu_uuids": [1]', "reader"),
    ('"gpu_uuids": [" GPU-a"]', "reader"),
    ('"gpu_uuids": ["GPU-a "]', "reader"),
    ('"gpu_uuids": [null]', "reader"),
    ('"gpu_uuids": ["a", ["b"]]', "reader"),
    ('"gpu_uuids": ["GPU-\\u00e9"]', "strict"),
    ('"gpu_uuids": {"a": "b"}', "reader"),
    # tags: nested values, a double (Python's str() keeps its spelling), a repeated or empty name, not an object
    ('"tags": {"a": {"b": 1}}', "reader"),
    ('"tags": {"a": [1]}', "reader"),
    ('"tags": {"a": 1.5}', "reader"),
    ('"tags": {"a": 1.50}', "reader"),
    ('"tags": {"a": 1e3}', "reader"),
    ('"tags": {"a": NaN}', "reader"),
    ('"tags": {"a": 1, "a": 2}', "reader"),
    ('"tags": {"": 1}', "reader"),
    ('"tags": "x"', "reader"),
    ('"tags": null', "strict"),
    ('"tags": {"a": " x "}', "strict"),
    ('"tags": {"a": "x", "b": 2, "c": 3.25}', "reader"),
    ('"tags": {"a": 2 , "b": "x"}', "lenient"),
    ('"tags": {"a": 12345678901234567890}', "reader"),
    ('"tags": {"a": "\\u00e9"}', "strict"),
    ('"tags": {"a": 1}, "tags": {"b": 2}', "reader"),
    # eval items: an unknown or repeated key, text, true, null, an exponent, a fraction for a count,
    # a time (the reader works out elapsed_s), out of bounds, not objects, not a list
    ('"eval_history": [{"value": 1, "note": "x"}]', "reader"),
    ('"eval_history": [{"value": 1, "value": 2}]', "reader"),
    ('"eval_history": [{"value": "1"}]', "reader"),
    ('"eval_history": [{"value": true}]', "reader"),
    ('"eval_history": [{"value": null}]', "reader"),
    ('"eval_history": [{"value": 1e3}]', "strict"),  # the strict read checks the double DuckDB writes back: 1000.0
    ('"eval_history": [{"value": 1, "step": 1.5}]', "reader"),
    ('"eval_history": [{"value": 1, "step": 2.0}]', "reader"),
    ('"eval_history": [{"value": 1, "step": null}]', "strict"),
    ('"eval_history": [{"value": 1, "time": "2026-10-16T00:00:00Z"}]', "reader"),
    ('"eval_history": [{"value": 1, "elapsed_s": -1}]', "reader"),
    ('"eval_history": [{"value": 1234567890123456}]', "reader"),
    ('"eval_history": [{"value": 1}, {"step": 2}]', "reader"),
    ('"eval_history": [{"value": 1}, {}]', "reader"),
    ('"eval_history": [1]', "reader"),
    ('"eval_history": [{"value": 1}, null]', "reader"),
    ('"eval_history": [[{"value": 1}]]', "reader"),
    ('"eval_history": {"value": 1}', "reader"),
    ('"eval_history": null', "strict"),
    ('"eval_history": [{"value": 1}], "eval_history": []', "reader"),
    ('"eval_history": [{"value": 1.00000000000000001}]', "strict"),  # 1.0 in either
    # a key the vocabulary does not know (kept as a tag), one in another case
    ('"tags": {"a": "b"}, "optimizer": "adamw"', "reader"),
    ('"Gpu_Indices": [1]', "reader"),
]


class Spied:
    """A staging connection noting which pass settled each line (loaded or refused in SQL)."""

    def __init__(self, con) -> None:
        self._con, self.paths, self._pass = con, {}, None

    def execute(self, sql, *args, **kwargs):
        text = str(sql)
        if "CREATE OR REPLACE TEMP TABLE typed" in text:
            self._pass = "lenient" if "TRY(json_transform(raw" in text else "strict"
        if "CREATE OR REPLACE TEMP TABLE rest" in text:  # the pass's rows are loaded or refused by now
            for (line,) in self._con.execute("SELECT line FROM typed WHERE ok OR reason IS NOT NULL").fetchall():
                self.paths[line] = self._pass
        return self._con.execute(sql, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._con, name)


def _tables(con, definition) -> dict:
    """Every table the load fills, as text rows (lines and load ids as staged)."""
    tables = {}
    for table in (definition.table, *(items.table for items in definition.items)):
        tables[table] = sorted(map(repr, con.execute(f"SELECT COLUMNS(*)::VARCHAR FROM {table}").fetchall()))
    tables["rejects"] = sorted(con.execute("SELECT line, reason FROM rejects").fetchall())
    return tables


def _both_ways(definition, path: Path, monkeypatch, lenient_first: bool = True) -> tuple[dict, dict, dict]:
    """(the SQL pass's tables, the reader's tables, the path of each line)."""
    by_reader: list[int] = []
    read_lines = reader.read_lines

    def spy(definition, lines, *args, **kwargs):
        by_reader.extend(line for line, _ in lines)
        return read_lines(definition, lines, *args, **kwargs)

    ctx = ParseContext(str(path), UTC)
    with monkeypatch.context() as patch:
        patch.setattr(reader, "read_lines", spy)
        if lenient_first:  # a batch of mostly quirks would skip the lenient pass
            patch.setattr(batch_sql, "_mostly_quirks", lambda definition, con: False)
        con = Spied(staging.open_stage())
        try:
            batch_sql.stage(definition, staging.Source.of(path), con, ctx)
            got = _tables(con, definition)
        finally:
            con.close()
    paths = {**con.paths, **{line: "reader" for line in by_reader}}
    parsed = reader.parse(definition, staging.lines(staging.Source.of(path)), ctx)
    con = staging.open_stage()
    try:
        staging.insert_parsed(con, parsed, path.name)
        want = _tables(con, definition)
    finally:
        con.close()
    return got, want, paths


def test_each_quirk_takes_its_path_and_loads_as_the_reader(tmp_path, monkeypatch):
    lines = [f'{{"run_id": "r{n}", {HEAD}, {extra}}}' for n, (extra, _) in enumerate(RUN_CASES)]
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    got, want, paths = _both_ways(run_summary.RUNS, path, monkeypatch)
    assert got == want
    assert {n + 1: way for n, (_, way) in enumerate(RUN_CASES)} == paths
    assert len(want["run_evals"]) > 10 and len(want["rejects"]) > 10  # the cases load items and refuse lines


def test_the_fleets_lines_are_read_by_the_lenient_pass(tmp_path, monkeypatch):
    """Fleet-like runs (every line with lists, tags and items; GPU ids in hex) are not mostly
    quirks: the lenient pass is chosen for the batch, and it loads every line."""
    rng = random.Random(5)
    lines = []
    for n in range(300):
        uuids = [f"GPU-{rng.getrandbits(128):032x}" for _ in range(rng.randrange(1, 4))]
        evals = [{"elapsed_s": round(rng.uniform(0, 9e4), 1), "step": 500 * k, "value": round(rng.random(), 5)}
                 for k in range(rng.randrange(5))]
        record = {"run_id": f"fleet-{n}", "gpu_count": len(uuids), "gpu_indices": list(range(len(uuids))),
                  "gpu_uuids": uuids, "tags": {"resource_id": f"i-{rng.getrandbits(64):016x}"}, "eval_history": evals}
        lines.append(json.dumps(record)[:-1] + f", {HEAD}}}")
    path = tmp_path / "fleet.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    got, want, paths = _both_ways(run_summary.RUNS, path, monkeypatch, lenient_first=False)
    assert got == want and want["rejects"] == []
    assert paths == {n: "lenient" for n in range(1, 301)}


def test_serving_lists_without_keep_empty(tmp_path, monkeypatch):
    """Serving's gpu_uuids (an empty list is no list): plain lists in the lenient pass."""
    head = ('"window_start": "2026-10-01T00:00:00Z", "window_end": "2026-10-01T00:02:00Z", "service": "s", '
            '"model_version": "v1", "requests_total": 10, "requests_success": 9, "cost_usd": 0.5')
    cases = [('"gpu_uuids": []', "lenient"), ('"gpu_uuids": ["", ""]', "lenient"), ('"gpu_uuids": ["a", "b"]', "lenient"),
             ('"gpu_uuids": [" a"]', "reader"), ('"gpu_uuids": [2]', "reader"), ('"gpu_uuids": "a,b"', "reader")]
    lines = [f'{{"host": "h{n}", {head}, {extra}}}' for n, (extra, _) in enumerate(cases)]
    path = tmp_path / "serving.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    got, want, paths = _both_ways(serving.SERVING, path, monkeypatch)
    assert got == want
    assert {n + 1: way for n, (_, way) in enumerate(cases)} == paths


@pytest.mark.parametrize("text", ['"gpu_indices": [1.5]', '"tags": [1]', '"eval_history": [1]',
                                  '"gpu_uuids": [" a"]', '"eval_history": [{"value": "1"}]', '"x": 1e5'])
def test_the_quirk_pattern_catches(text):
    line = f'{{"run_id": "r", {text}}}'
    assert duckdb.connect().execute("SELECT regexp_matches(?, ?)", [line, quirk_pattern(run_summary.RUNS)]).fetchone()[0]


ODD = [1.5, "1", True, False, None, 1e3, -0, 0, 10**6, 10**6 + 1, -(10**6), [1], {"a": 1}, " x", "x ", "", "x]", "é",
       12345678901234567890, 1e15, 1e16, -1, 2.0, "GPU-a", "\u00a0"]


def _odd_record(rng: random.Random, n: int) -> str:
    """A fleet-like run line, often with one odd value in its lists, tags or items (or a key
    repeated, unknown, escaped or spaced out in its text)."""
    record = {"run_id": f"r{n}", "gpu_indices": [rng.randrange(8)], "gpu_uuids": [f"GPU-{rng.getrandbits(64):016x}"],
              "tags": {"team": "nlp", "seed": rng.randrange(100)},
              "eval_history": [{"elapsed_s": 10.5 * k, "step": k, "value": round(rng.random(), 4)} for k in range(3)]}
    where = rng.randrange(9)
    odd = rng.choice(ODD)
    if where == 0:
        record["gpu_indices"].append(odd)
    elif where == 1:
        record["gpu_uuids"].append(odd)
    elif where == 2:
        record["tags"][rng.choice(["team", "new", ""])] = odd
    elif where == 3:
        record["eval_history"][rng.randrange(3)][rng.choice(["value", "step", "elapsed_s", "time", "note"])] = odd
    elif where == 4:
        record[rng.choice(["gpu_indices", "gpu_uuids", "tags", "eval_history"])] = odd
    elif where == 5:
        record["eval_history"].append(odd)
    text = json.dumps(record, ensure_ascii=rng.random() < 0.5)[:-1] + f", {HEAD}}}"
    twist = rng.randrange(12)
    if twist == 0:
        text = text.replace('"seed": ', '"seed": 1, "seed": ', 1)  # a repeated name in the tags
    elif twist == 1:
        text = text.replace('"step": 0', '"step": 0, "step": 5', 1)  # ... in an item
    elif twist == 2:
        text = text.replace('"team"', '"te\\u0061m"', 1)
    elif twist == 3:
        text = text.replace('"value":', '"value" :', 1)
    elif twist == 4:
        text = text.replace("[", "[ ", 1).replace(", ", ",", 3)
    return text


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_odd_nested_values_load_as_the_reader_reads_them(tmp_path, monkeypatch, seed):
    rng = random.Random(seed)
    path = tmp_path / "odd.jsonl"
    path.write_text("\n".join(_odd_record(rng, n) for n in range(400)) + "\n", encoding="utf-8")
    got, want, paths = _both_ways(run_summary.RUNS, path, monkeypatch)
    assert got == want
    assert len(want["rejects"]) > 20 and len(want["run_evals"]) > 600
    assert 0.15 < sum(way == "lenient" for way in paths.values()) / 400 < 0.9  # the lenient pass read some, not all


def test_a_spelling_the_batchs_first_lines_do_not_give_goes_to_the_strict_read(tmp_path, monkeypatch):
    """The lenient read transforms only the keys the batch's first lines give (batch_sql._keys_seen):
    a later line with another spelling of a field (avg_gpu_util_pct for avg_gpu_util, start_time
    for window_start), or a field none gave, is not trusted and loads by the strict read alike."""
    head = ('"service": "s", "model_version": "v1", "requests_total": 10, "requests_success": 9, "cost_usd": 0.5, '
            '"window_end": "2026-10-01T00:02:00Z"')
    first = [f'{{"host": "h{n}", "window_start": "2026-10-01T00:00:00Z", "avg_gpu_util": {n}, {head}}}' for n in range(6)]
    later = [f'{{"host": "x1", "window_start": "2026-10-01T00:00:00Z", "avg_gpu_util_pct": 5, {head}}}',
             f'{{"host": "x2", "start_time": "2026-10-01T00:00:00Z", "avg_gpu_util": 5, {head}}}',
             f'{{"host": "x3", "window_start": "2026-10-01T00:00:00Z", "avg_gpu_util": 5, "gpu_uuids": ["a"], {head}}}',
             f'{{"host": "x4", "window_start": "2026-10-01T00:00:00Z", "avg_gpu_util": 500, "energy_kwh": null, {head}}}']
    path = tmp_path / "serving.jsonl"
    path.write_text("\n".join(first + later) + "\n", encoding="utf-8")
    seen = {key for line in first for key in json.loads(line)}
    monkeypatch.setattr(batch_sql, "_keys_seen", lambda con: seen)
    got, want, paths = _both_ways(serving.SERVING, path, monkeypatch, lenient_first=False)
    assert got == want and len(want["serving_windows"]) == 9 and len(want["rejects"]) == 1  # 500 % is refused
    assert paths == {**{n: "lenient" for n in range(1, 7)}, 7: "strict", 8: "strict", 9: "strict", 10: "reader"}
