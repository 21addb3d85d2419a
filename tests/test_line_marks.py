"""Arrow's marks of JSON lines (ingest/engine/line_marks.py) against what DuckDB's SQL gave before:
`regexp_matches(raw, quirk_pattern)` and `(strlen(raw) - strlen(replace(raw, '":', ''))) // 2`,
line by line, for every JSON definition's pattern, over lines made to hit each branch of the
pattern (blanks Python strips, escapes, long and spelled numbers, trailing commas, lists, maps,
items) and random text. Also against plain Python where the rule is plain: the count of `":`."""
from __future__ import annotations

import json
import random
from datetime import timezone
from zoneinfo import ZoneInfo

import duckdb
import pyarrow as pa
import pytest

from ingest.engine import line_marks
from ingest.engine.batch_json import quirk_pattern
from ingest.formats import serving
from ingest.formats.runs import codecarbon, run_summary

DEFINITIONS = [serving.SERVING, run_summary.RUNS, codecarbon.CODECARBON]
BLANKS = [" ", "\t", "\x0b", "\x0c", "\x1c", "\x1f", "\x85", "\xa0", "\u1680", "\u2000", "\u200a", "\u2028",
          "\u2029", "\u202f", "\u205f", "\u3000", "\u200b", "\ufeff"]  # the last two: not blanks to Python
SERVING_LINE = ('{"window_start": "2026-10-01T00:00:00Z", "window_end": "2026-10-01T00:02:00Z", "service": "svc-00", '
                '"model_version": "v1", "host": "serve-00-0", "requests_total": 115, "requests_success": 114, '
                '"requests_error": 1, "latency_ms_p50": 73.6, "avg_gpu_util": 31.4, "gpu_uuids": ["GPU-5e3"], '
                '"cost_usd": 0.189067, "energy_kwh": 0.024344}')
RUN_LINE = ('{"run_id": "r1", "start_time": "2026-10-15T22:23:52Z", "gpu_indices": [3, 0], "gpu_uuids": ["GPU-8f4c"], '
            '"tags": {"team": "nlp"}, "eval_history": [{"elapsed_s": 4685.7, "step": 500, "value": 0.20519}]}')
SWAPS = [
    ("115", "1.5"), ("115", "1e3"), ("115", '"115"'), ("115", "true"), ("115", "null"), ("115", "-0"),
    ("115", "12345678901234567890"), ("73.6", "73.60000000000000001"), ("73.6", '"73.6"'), ("73.6", "7E2"),
    ('"svc-00"', "7"), ('"svc-00"', '" svc"'), ('"svc-00"', '"svc "'), ('"svc-00"', '"s\\u0076c"'),
    ('"svc-00"', "nil"), ('"svc-00"', "null"), ('"service":', '"service" :'), ('"GPU-5e3"', '" GPU"'),
    ('"GPU-5e3"', "1"), ('["GPU-5e3"]', '"GPU"'), ("}", ",}"), ("}", ", }"), ('{"window', ' {"window'),
    ('{"window', '["window'), ("[3, 0]", "[3.5]"), ("[3, 0]", '["3"]'), ("[3, 0]", "[3,]"),
    ('{"team": "nlp"}', '{"team": 1.5}'), ('{"team": "nlp"}', "[1]"), ('"step": 500', '"step": "500"'),
    ('"value": 0.20519', '"value": 1e-3'), ("4685.7", "4685.7e0"), ('"run_id": "r1"', '"run_id": "r1", "run_id": "r2"'),
]


def sql_marks(lines: list[str], pattern: str) -> list[tuple[bool, int]]:
    con = duckdb.connect()
    con.register("batch", pa.table({"raw": pa.array(lines, pa.string())}))
    return [(bool(q), int(n)) for q, n in con.execute(
        f"SELECT regexp_matches(raw, '{pattern}'), (strlen(raw) - strlen(replace(raw, '\":', ''))) // 2 "
        "FROM batch").fetchall()]


def arrow_marks(lines: list[str], pattern: str) -> list[tuple[bool, int]]:
    table = line_marks.marked(pa.table({"line": pa.array(range(1, len(lines) + 1), pa.int64()),
                                        "raw": pa.array(lines, pa.string())}), pattern)
    assert table.column_names == ["line", "raw", *line_marks.COLUMNS]
    return list(zip(table.column("quirk_found").to_pylist(), table.column("key_marks").to_pylist()))


def made_lines() -> list[str]:
    lines = [SERVING_LINE, RUN_LINE, "", " ", "{}", "[]", "not json", '{"a": "\\"":"}']
    for base in (SERVING_LINE, RUN_LINE):
        lines += [base.replace(old, new, 1) for old, new in SWAPS if old in base]
        for blank in BLANKS:  # a blank at each edge of a text, before a colon, between values
            lines += [base.replace('": "', f'": "{blank}', 1), base.replace('", "', f'{blank}", "', 1),
                      base.replace('":', f'"{blank}:', 1).replace('""', '"', 1), base.replace(", ", f",{blank}", 1)]
    rng = random.Random(7)
    alphabet = '{}[]":,. -+0123456789eEnulltrfas\\x\u00a0\u3000é😀'
    for _ in range(3000):  # random text made of the pattern's own characters
        lines.append("".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 60))))
    for _ in range(500):  # a real line with one random character changed
        base = rng.choice((SERVING_LINE, RUN_LINE))
        at = rng.randrange(len(base))
        lines.append(base[:at] + rng.choice(alphabet) + base[at + 1:])
    return lines


@pytest.mark.parametrize("definition", DEFINITIONS, ids=lambda d: d.kind)
def test_arrow_marks_lines_as_duckdb_did(definition):
    lines = made_lines()
    pattern = quirk_pattern(definition)
    got, want = arrow_marks(lines, pattern), sql_marks(lines, pattern)
    assert [n for _, n in got] == [line.count('":') for line in lines]  # plain Python: no overlap in `":`
    different = [(line, g, w) for line, g, w in zip(lines, got, want) if g != w]
    assert different == []
    found = [q for q, _ in got]
    assert 0.1 < sum(found) / len(found) < 0.99  # both kinds of line are among them
    assert not got[0][0] and got[lines.index(SERVING_LINE.replace("115", "1.5", 1))][0] is (definition is serving.SERVING)


def test_the_fleets_lines_are_marked_as_duckdb_did(tmp_path):
    from pathlib import Path

    folder = Path.home() / ".cache/mlcost/fleet/scale-0.05"
    files = [folder / "serving.jsonl", folder / "runs.jsonl"]
    if not all(f.exists() for f in files):  # generated by bench/fleet.py; made here when absent
        import sys
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
        import fleet_data
        fleet_data.generate(tmp_path, 0.002)
        files = [tmp_path / "serving.jsonl", tmp_path / "runs.jsonl"]
    for path, definition in zip(files, (serving.SERVING, run_summary.RUNS)):
        lines = path.read_text(encoding="utf-8").splitlines()[:20_000]
        pattern = quirk_pattern(definition)
        assert arrow_marks(lines, pattern) == sql_marks(lines, pattern)
        assert json.loads(lines[0])  # a real line


def test_marking_does_not_import_pandas(tmp_path):
    """A load imports pandas only when it must (~0.5 s): the batch is read as a load reads it."""
    import subprocess
    import sys

    path = tmp_path / "a.jsonl"
    path.write_text(SERVING_LINE + "\n")
    code = ("import sys; from pathlib import Path; from ingest.engine import line_marks, staging; "
            f"batch = next(staging.line_batches(staging.Source.of(Path({str(path)!r})))); "
            "before = 'pandas' in sys.modules; marked = line_marks.marked(batch, 'x'); "
            "tight = [line_marks.csv_marked(batch, p).column('tight_marked').to_pylist() for p in ('x', None)]; "
            "print(before, 'pandas' in sys.modules, marked.column('key_marks').to_pylist(), tight)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == f"False False [{SERVING_LINE.count(chr(34) + ':')}] [[False], [False]]"


# --- CSV: each line's tight mark (line_marks.csv_marked), as DuckDB's regexp_full_match gave it ---

COLLECTOR_HEADER = "timestamp,host,gpu_index,gpu_uuid,gpu_name,power_w,energy_mj,gpu_util_pct,mem_used_mib"
COLLECTOR_LINE = "2026-10-01T00:00:00Z,fleet-node-01,0,GPU-21bade02-6a6a,NVIDIA A100-SXM4-40GB,369.31,43290452343,98,29262"
CSV_SWAPS = [  # (old, new) in COLLECTOR_LINE: what makes a line tight or not
    ("fleet-node-01", " fleet-node-01"), ("fleet-node-01", "fleet-node-01 "), ("fleet-node-01", "fleet node"),
    ("fleet-node-01", ""), ("fleet-node-01", '"fleet"'), ("fleet-node-01", "fleet\tnode"), ("fleet-node-01", "flé"),
    ("fleet-node-01", "\u3000x"), ("fleet-node-01", "x\u00a0"), ("fleet-node-01", "x\x7f"), ("369.31", " 369.31"),
    ("369.31", "1e3"), ("369.31", "1E+300"), ("369.31", "-1"), ("369.31", "+1"), ("369.31", "1.5.5"), ("369.31", ""),
    ("369.31", "1234567890123456"), ("43290452343", "1.0"), ("43290452343", "1.5"), ("43290452343", "0x1F"),
    ("43290452343", "1234567890123456789"), (",0,", ",,"), (",0,", ",00,"), ("Z", "+02:00"), ("Z", "-24:00"),
    ("Z", ""), ("00:00:00Z", "00:00Z"), ("00:00:00Z", "00:00:00.1234567Z"), ("T", " "), ("2026-10-01", "2026/10/01"),
    ("2026-10-01T00:00:00Z", "1790000000"), (",98,", ",98,,"), (",98,", ",98"), ("29262", "29262\r"),
]


def csv_lines(header: list[str]) -> list[str]:
    lines = [COLLECTOR_LINE, "", " ", ",,,,,,,,", "," * (len(header) - 1), ",".join(header)]
    lines += [COLLECTOR_LINE.replace(old, new, 1) for old, new in CSV_SWAPS]
    rng = random.Random(11)
    alphabet = '0123456789,.-:+ ZTeE"\tabxé\u3000\u00a0'
    for _ in range(2000):  # random text made of the patterns' own characters, about as many fields as the header
        lines.append(",".join("".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 6)))
                              for _ in range(len(header) + rng.choice((-1, 0, 0, 0, 1)))))
    for _ in range(500):  # the real line with one character changed
        at = rng.randrange(len(COLLECTOR_LINE))
        lines.append(COLLECTOR_LINE[:at] + rng.choice(alphabet) + COLLECTOR_LINE[at + 1:])
    return lines


def csv_marks_sql(lines: list[str], pattern: str) -> list[bool]:
    con = duckdb.connect()
    con.register("batch", pa.table({"raw": pa.array(lines, pa.string())}))
    return [bool(t) for (t,) in con.execute("SELECT regexp_full_match(raw, ?) FROM batch", [pattern]).fetchall()]


def csv_marks_arrow(lines: list[str], pattern: str | None) -> list[bool]:
    table = line_marks.csv_marked(pa.table({"line": pa.array(range(1, len(lines) + 1), pa.int64()),
                                            "raw": pa.array(lines, pa.string())}), pattern)
    assert table.column_names == ["line", "raw", line_marks.CSV_COLUMN]
    return table.column(line_marks.CSV_COLUMN).to_pylist()


def _csv_definitions():
    from ingest.formats.gpu import gpu_collector
    from ingest.formats.runs import codecarbon

    return [(gpu_collector.COLLECTOR, COLLECTOR_HEADER.split(",")),
            (codecarbon.CODECARBON, ["timestamp", "project_name", "run_id", "duration", "emissions", "energy_consumed",
                                     "gpu_count", "gpu_model", "price_per_hour_usd", "pue", "other"]),
            (serving.SERVING, ["window_start", "window_end", "service", "model_version", "host", "requests_total",
                               "latency_ms_p50", "cost_usd", "gpu_uuids"])]


@pytest.mark.parametrize("zone", [timezone.utc, ZoneInfo("Europe/Paris")], ids=["utc", "paris"])
@pytest.mark.parametrize("index", range(3))
def test_csv_lines_are_marked_tight_as_duckdb_did(index, zone):
    from ingest.engine.batch_csv import tight_pattern
    from ingest.engine.contract import ParseContext

    definition, header = _csv_definitions()[index]
    pattern = tight_pattern(definition, header, ParseContext("x.csv", zone))
    lines = csv_lines(header)
    got, want = csv_marks_arrow(lines, pattern), csv_marks_sql(lines, pattern)
    assert [(line, g, w) for line, g, w in zip(lines, got, want) if g != w] == []
    assert 0 < sum(got) < len(got)  # both kinds of line are among them


def test_collector_lines_tight_or_not_as_written_out_here():
    """Which collector lines are tight, by hand: every field in its plain spelling, no blank at an
    edge, no quote or control character, as many fields as the header."""
    from ingest.engine.batch_csv import tight_pattern
    from ingest.engine.contract import ParseContext
    from ingest.formats.gpu import gpu_collector

    header = COLLECTOR_HEADER.split(",")
    pattern = tight_pattern(gpu_collector.COLLECTOR, header, ParseContext("x.csv", timezone.utc))
    tight = {COLLECTOR_LINE: True, ",,,,,,,,": True, "": False, COLLECTOR_LINE + ",": False,
             COLLECTOR_LINE.replace("fleet-node-01", "fleet node"): True,  # a blank inside a text
             COLLECTOR_LINE.replace("fleet-node-01", " fleet"): False, COLLECTOR_LINE.replace("fleet-node-01", "x\u3000"): False,
             COLLECTOR_LINE.replace("fleet-node-01", '"x"'): False, COLLECTOR_LINE.replace("fleet-node-01", "x\ty"): False,
             COLLECTOR_LINE.replace("369.31", "1e3"): True, COLLECTOR_LINE.replace("369.31", "-1"): False,
             COLLECTOR_LINE.replace("43290452343", "1.5"): False, COLLECTOR_LINE.replace("43290452343", "7.0"): True,
             COLLECTOR_LINE.replace("Z", "+02:00", 1): True, COLLECTOR_LINE.replace("Z", "", 1): True,  # naive: UTC
             COLLECTOR_LINE.replace("2026-10-01", "2026/10/01"): False}
    assert dict(zip(tight, csv_marks_arrow(list(tight), pattern))) == tight
    # naive times read in another zone are not tight (the zone is applied value by value)
    paris = tight_pattern(gpu_collector.COLLECTOR, header, ParseContext("x.csv", ZoneInfo("Europe/Paris")))
    assert csv_marks_arrow([COLLECTOR_LINE.replace("Z", "", 1), COLLECTOR_LINE], paris) == [False, True]
    # one column: no line is tight (a tight line could be blank)
    assert tight_pattern(gpu_collector.COLLECTOR, ["timestamp"], ParseContext("x.csv", timezone.utc)) is None
    assert csv_marks_arrow(["2026-10-01T00:00:00Z", ""], None) == [False, False]


def test_a_large_batch_is_marked_in_two_halves_to_the_same_marks(monkeypatch):
    """Past SPLIT_ROWS the first half is marked on a thread of its own: the marks are the same,
    line by line (halves in order), as DuckDB's SQL and plain Python give them."""
    import threading

    monkeypatch.setattr(line_marks, "SPLIT_ROWS", 100)
    threads = []
    real = line_marks._marks

    def spied(raw, pattern):
        threads.append(threading.current_thread())
        return real(raw, pattern)

    monkeypatch.setattr(line_marks, "_marks", spied)
    lines = made_lines()
    pattern = quirk_pattern(run_summary.RUNS)
    got = arrow_marks(lines, pattern)
    assert len(threads) == 2 and threads[0] is not threads[1]  # two halves, one on another thread
    assert [n for _, n in got] == [line.count('":') for line in lines]
    assert got == sql_marks(lines, pattern)
    assert arrow_marks(lines[:150], pattern) == sql_marks(lines[:150], pattern)  # halves of 75 lines
