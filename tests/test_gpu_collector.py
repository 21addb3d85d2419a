"""The collector CSV (ingest/formats/gpu/gpu_collector.py, one Definition read by ingest/engine):
each line's values or reason written out here by hand, which lines the SQL pass reads and which
go to the engine's per-line reader (a spy on reader.read_lines), and the sample traces read a
second way with the csv module, int, float and datetime (not the code under test)."""
from __future__ import annotations

import csv
import gzip
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from ingest.engine import reader, staging
from ingest.engine.contract import ParseContext
from ingest.formats.gpu import collector, gpu_collector
from tests.conftest import SAMPLE_DIR
from tests.spied_stage import stage_spied

UTC = timezone.utc
HEADER = "timestamp,host,gpu_index,gpu_uuid,gpu_name,power_w,energy_mj,gpu_util_pct,mem_used_mib"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
# (line after the header, path, expected (host, gpu_index, sampled_at, gpu_uuid, gpu_name, power_w,
# energy_mj, gpu_util_pct, mem_used_mib) or the reason it is refused)
LINES = [
    ("2026-01-01T00:00:00Z,n1,0,GPU-a,L4,50.5,1000,40,10", "sql",
     ("n1", 0, T0, "GPU-a", "L4", 50.5, 1000, 40.0, 10.0)),
    ("2026-01-01T00:00:01Z,,1,,,,,,", "sql",  # no host: the file name's; absent readings stay NULL
     ("node-7", 1, T0.replace(second=1), None, None, None, None, None, None)),
    ("2026-01-01 00:00:02,n1,2,GPU-c,L4,0.25,0,0,0", "sql",  # naive: UTC (no --tz)
     ("n1", 2, T0.replace(second=2), "GPU-c", "L4", 0.25, 0, 0.0, 0.0)),
    (" 2026-01-01T00:00:03Z , n1 , 3 , GPU-d , L4 , 12 , 5 , 1 , 2 ", "reader",  # blanks around values
     ("n1", 3, T0.replace(second=3), "GPU-d", "L4", 12.0, 5, 1.0, 2.0)),
    ('2026-01-01T00:00:04Z,n1,4,GPU-e,"L4, PCIe",7,1,2,3', "reader",  # a quoted comma
     ("n1", 4, T0.replace(second=4), "GPU-e", "L4, PCIe", 7.0, 1, 2.0, 3.0)),
    ("2026/01/01 00:00:05,n1,5,GPU-f,L4,1e3,2,3,4", "reader",  # a slashed date, an exponent
     ("n1", 5, T0.replace(second=5), "GPU-f", "L4", 1000.0, 2, 3.0, 4.0)),
    ("1767225606,n1,6,GPU-g,L4,9,1.0,4,5", "reader",  # epoch seconds; a counter written 1.0
     ("n1", 6, T0.replace(second=6), "GPU-g", "L4", 9.0, 1, 4.0, 5.0)),
    ("2026-01-01T00:00:07Z,n1,0,GPU-a,L4,abc,1,2,3", "reader", "power_w must be a number, got 'abc'"),
    ("2026-01-01T00:00:08Z,n1,0,GPU-a,L4,50,1,140,3", "reader", "gpu_util_pct 140.0 is outside 0 to 100"),
    ("2026-01-01T00:00:09Z,n1,70000,GPU-a,L4,50,1,40,3", "reader", "gpu_index 70000 is outside 0 to 65535"),
    ("2026-01-01T00:00:10Z,n1,0,GPU-a,L4,50,1.5,40,3", "reader", "energy_mj must be a whole number, got '1.5'"),
    ("2026-01-01T00:00:11Z,n1,0,GPU-a,L4,50,-5,40,3", "reader", "energy_mj -5 is outside 0 to 9.22337e+18"),
    ("2026-01-01T00:00:12Z,n1,0,GPU-a,L4,1e16,1,40,3", "reader", "power_w '1e16' is too large (at most 1e+15)"),
    ("2026-13-01T00:00:13Z,n1,0,GPU-a,L4,50,1,40,3", "reader",
     "timestamp '2026-13-01T00:00:13Z' is not an ISO-8601 timestamp or epoch seconds"),
    ("1989-12-31T23:59:59Z,n1,0,GPU-a,L4,50,1,40,3", "reader", "timestamp '1989-12-31T23:59:59Z' is outside 1990-2099"),
    ("noon,n1,x,GPU-a,L4,abc,1,140,3", "reader",  # several bad values: the timestamp's reason first
     "timestamp 'noon' is not an ISO-8601 timestamp or epoch seconds"),
    ("2026-01-01T00:00:15Z,n1,,GPU-a,L4,50,1,40,3", "sql", "gpu_index is missing"),
    (",n1,0,GPU-a,L4,50,1,40,3", "sql", "timestamp is missing"),
    ("2026-01-01T00:00:17Z,n1,0,GPU-a,L4,50,1,40", "sql", "expected 9 fields as in the header, got 8"),
    ('2026-01-01T00:00:18Z,n1,0,GPU-a,"L4, PCIe",50,1,40', "reader", "expected 9 fields as in the header, got 8"),
    ("", None, None), ("\u3000 ", None, None),  # blank lines: skipped
]


def stage(path: Path, ctx: ParseContext) -> tuple[dict, list, list[int], object]:
    """Stage `path`: its samples by line, its rejects, the lines the reader read, and the Staged."""
    rows, rejects, by_reader, staged = stage_spied(gpu_collector, reader, "host, gpu_index, sampled_at, gpu_uuid, gpu_name, power_w, energy_mj, gpu_util_pct, mem_used_mib", path, ctx)
    return rows, rejects, by_reader, staged


def test_each_line_takes_its_path_with_its_values(tmp_path):
    path = tmp_path / "node-7_x.csv"
    path.write_text(HEADER + "\n" + "\n".join(text for text, _, _ in LINES) + "\n")
    rows, rejects, by_reader, staged = stage(path, ParseContext(str(path), UTC))
    numbered = [(n + 2, way, want) for n, (_, way, want) in enumerate(LINES)]
    assert {line: tuple(row) for line, row in rows.items()} == {
        line: want for line, _, want in numbered if isinstance(want, tuple)}
    assert rejects == [(line, want) for line, _, want in numbered if isinstance(want, str)]
    assert sorted(by_reader) == [line for line, way, _ in numbered if way == "reader"]
    assert staged.accepted == len(rows) == 7 and staged.totals["samples"] == 7 and staged.totals["gpus"] == 7
    # the per-line reader alone (parse) reads the same rows and reasons
    parsed = gpu_collector.parse(staging.lines(staging.Source.of(path)), ParseContext(str(path), UTC))
    assert [(r.line, r.reason) for r in parsed.rejects] == rejects
    assert {r["source_line"]: r["power_w"] for r in parsed.tables["gpu_samples"]} == {
        line: row[5] for line, row in rows.items()}


def test_host_from_the_option_the_column_or_the_file_name(tmp_path):
    lines = [HEADER, "2026-01-01T00:00:00Z,n1,0,,,1,,,", "2026-01-01T00:00:01Z,,0,,,1,,,",
             "2026-01-01T00:00:02Z, ,0,,,1,,,"]
    path = tmp_path / "gpu-node-3_2026-01.csv.gz"
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    rows, _, _, _ = stage(path, ParseContext(str(path), UTC))
    assert {line: row[0] for line, row in rows.items()} == {2: "n1", 3: "gpu-node-3", 4: "gpu-node-3"}
    rows, _, by_reader, _ = stage(path, ParseContext(str(path), UTC, "box"))
    assert {line: row[0] for line, row in rows.items()} == {2: "box", 3: "box", 4: "box"}
    plain = tmp_path / "plain.csv"  # no `_`: the whole name without its suffixes
    plain.write_text("timestamp,gpu_index,power_w\n2026-01-01T00:00:00Z,0,1\n")
    rows, _, _, _ = stage(plain, ParseContext(str(plain), UTC))
    assert [row[0] for row in rows.values()] == ["plain"]


def test_naive_times_are_read_in_the_zone_given(tmp_path):
    path = tmp_path / "n1_paris.csv"
    stamps = ["2026-07-01T12:00:00", "2026-07-01T12:00:00Z", "2026-10-25T02:30:00", "2026-03-29T02:30:00"]
    path.write_text("gpu_index,timestamp,power_w\n" + "".join(f"0,{stamp},5\n" for stamp in stamps))
    paris = ZoneInfo("Europe/Paris")
    rows, rejects, by_reader, _ = stage(path, ParseContext(str(path), paris))
    # in SQL, but within 3 hours of a change of offset (02:30 twice in October, never in March): the reader's
    assert rejects == [] and by_reader == [4, 5]
    want = [datetime.fromisoformat(s.replace("Z", "+00:00")) for s in stamps]  # Python's rule: fold=0
    want = [(w if w.tzinfo else w.replace(tzinfo=paris)).astimezone(UTC) for w in want]
    assert {line: row[2] for line, row in rows.items()} == dict(zip(range(2, 6), want))
    assert want[0] == datetime(2026, 7, 1, 10, tzinfo=UTC)


@pytest.mark.parametrize("text, reject", [
    ("timestamp,host,power_w\n2026-01-01T00:00:00Z,n1,5\n",
     (1, "the header lacks gpu_index (expected " + HEADER + ")")),
    ("\n\ngpu_uuid;power_w\n", (3, "the header lacks timestamp, gpu_index (expected " + HEADER + ")")),
    ("\n \n", (0, "the file is empty")),
])
def test_a_file_refused_whole(tmp_path, text, reject):
    path = tmp_path / "n1.csv"
    path.write_text(text)
    rows, rejects, by_reader, staged = stage(path, ParseContext(str(path), UTC))
    assert (rows, rejects, by_reader, staged.accepted) == ({}, [reject], [], 0)
    parsed = gpu_collector.parse(staging.lines(staging.Source.of(path)), ParseContext(str(path), UTC))
    assert [(r.line, r.reason) for r in parsed.rejects] == [reject]


def test_the_header_collect_writes_is_the_header_read():
    assert collector.COLUMNS is gpu_collector.COLUMNS
    assert gpu_collector.sniff("x.csv", ",".join(gpu_collector.COLUMNS) + "\n")
    assert not gpu_collector.sniff("x.jsonl", '{"timestamp": 1, "gpu_index": 0, "power_w": 5}\n')


def test_a_sample_trace_loads_as_the_csv_module_reads_it_all_in_sql():
    path = SAMPLE_DIR / "gpu_traces" / "gpu-node-2_2026-09.csv.gz"
    want = {}
    with gzip.open(path, "rt", newline="") as handle:
        for line, row in enumerate(csv.DictReader(handle), start=2):
            want[line] = (row["host"], int(row["gpu_index"]),
                          datetime.fromisoformat(row["timestamp"].replace("Z", "+00:00")), row["gpu_uuid"],
                          row["gpu_name"], float(row["power_w"]), int(row["energy_mj"]), float(row["gpu_util_pct"]),
                          float(row["mem_used_mib"]))
    rows, rejects, by_reader, staged = stage(path, ParseContext(str(path), UTC))
    assert rejects == [] and by_reader == []
    assert {line: tuple(row) for line, row in rows.items()} == want
    assert staged.totals["samples"] == len(want)
    assert staged.totals["gpus"] == len({(w[0], w[1]) for w in want.values()})
    assert staged.totals["first_ts"] == min(w[2] for w in want.values()).isoformat().replace("+00:00", "Z")
    assert staged.totals["last_ts"] == max(w[2] for w in want.values()).isoformat().replace("+00:00", "Z")


def test_lines_of_later_batches_are_read_as_the_first_batchs(tmp_path, monkeypatch):
    """A file of many small batches (its header in the second, after a batch of blank lines): the
    batches after the header's are marked on the read-ahead thread (line_marks.csv_marked) and load
    what the per-line reader (parse) loads, line for line, the plain lines in SQL."""
    from ingest.engine import batch_sql

    monkeypatch.setattr(staging, "LINE_BATCH_BYTES", 4096)
    monkeypatch.setattr(batch_sql, "JOINED_BYTES", 1)  # every batch typed on its own
    lines = [" "] * 3000 + [HEADER]
    for step in range(3000):
        text, way, _ = LINES[step % len(LINES)]
        stamp = (T0 + timedelta(seconds=step)).strftime("%Y-%m-%dT%H:%M:%SZ")
        lines.append(text.replace("2026-01-01T00:00:00Z", stamp) if way else text)
    path = tmp_path / "node-7_x.csv"
    path.write_text("\n".join(lines) + "\n")
    ctx = ParseContext(str(path), UTC)
    rows, rejects, by_reader, staged = stage(path, ctx)
    parsed = gpu_collector.parse(staging.lines(staging.Source.of(path)), ctx)
    columns = ("host", "gpu_index", "sampled_at", "gpu_uuid", "gpu_name", "power_w", "energy_mj", "gpu_util_pct", "mem_used_mib")
    assert rows == {r["source_line"]: tuple(r[c] for c in columns) for r in parsed.tables["gpu_samples"]}
    assert rejects == [(r.line, r.reason) for r in parsed.rejects]
    read_by_sql = [n for n, text in enumerate(lines, 1) if n > 3001 and LINES[(n - 3002) % len(LINES)][1] == "sql"]
    assert len(read_by_sql) > 500 and not set(read_by_sql) & set(by_reader)
    assert staged.accepted >= len(rows) > 100
