"""The ingest engine: streamed files, the staging database, SQL fast paths and the merge.

The SQL fast paths (gpu-collector CSV, serving JSON lines) are checked against the parsers'
own line-by-line Python reading of the same text (`parse`), row for row and reject for reject,
on files made of the quirks each path must either read or hand over to Python.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import logging
import math
import subprocess
import sys
from datetime import timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import zstandard

from ingest.engine import staging
from ingest.engine import warehouse as wh
from ingest.engine.contract import ParseContext, numbered
from ingest.formats import serving
from ingest.formats.gpu import gpu_collector
from ingest.pipeline import loader
from tests.conftest import SAMPLE_DIR

COLLECTOR_HEADER = "timestamp,host,gpu_index,gpu_uuid,gpu_name,power_w,energy_mj,gpu_util_pct,mem_used_mib"
COLLECTOR_QUIRKS = [
    "2026-01-01T00:00:00Z,n1,0,GPU-a,L4,50.5,1000,40,10",
    "2026-01-01T00:00:05Z,n1,0,GPU-a,L4, 12 ,2000,40,10",        # spaces around a number: read
    "2026-01-01T00:00:10Z,n1,0,GPU-a,L4,1_000,3000,40,10",       # refused (TRY_CAST would read 1000)
    "2026-01-01T00:00:15Z,n1,0,GPU-a,L4,NaN,3000,40,10",         # refused
    "2026-01-01T00:00:20Z,n1,0,GPU-a,L4,1e400,3000,40,10",       # refused (not finite)
    "2026-01-01T00:00:25Z,n1,0,GPU-a,\"L4, PCIe\",50,4000,40,10",  # quoted comma: Python reads it
    "",
    "   ",
    "2026-01-01T00:00:30Z,n1,0,GPU-a,L4,50,5000,40",             # a field short
    "2026-01-01T00:00:35,n1,0,GPU-a,L4,50,6000,40,10",           # naive: read in --tz
    "2026/01/01 00:00:40,n1,0,GPU-a,L4,50,7000,40,10",           # slash date
    "1767225645,n1,0,GPU-a,L4,50,8000,40,10",                    # epoch seconds: Python reads it
    "2026-01-01T00:00:50Z,,1,GPU-b,L4,50,8000,40,10",            # no host: the file name's
    "2026-01-01T00:00:55Z,n1,1.0,GPU-b,L4,50,9000,40,10",        # index 1.0: Python reads it
    "2026-01-01T00:01:00Z,n1,70000,GPU-b,L4,50,9000,40,10",      # index out of range
    "2026-01-01T00:01:05Z,n1,1,GPU-b,L4,50,-5,40,10",            # counter below 0
    "2026-01-01T00:01:10Z,n1,1,GPU-b,L4,50,99999999999999999999,40,10",  # beyond BIGINT
    "2026-01-01T24:00:00Z,n1,1,GPU-b,L4,50,9000,40,10",          # hour 24
    "2026-01-01T00:01:15+02:00,n1,1,GPU-b,L4,50,9000,40,10\r",   # CRLF line end
    "2026-03-29T02:30:00,n1,2,GPU-c,L4,50,9000,40,10",           # not a time in Paris (summer time)
    "2026-10-25T02:30:00,n1,2,GPU-c,L4,50,9000,40,10",           # twice a time in Paris
    "2026-01-01T00:00:00Z,n1,0,GPU-a,L4,60.5,1000,40,10",        # repeats line 2's sample: the last wins
]
SERVING_BASE = {"window_start": "2026-08-01T00:00:00Z", "window_end": "2026-08-01T01:00:00Z",
                "service": "a", "model_version": "v1", "requests_total": 10, "requests_success": 9, "cost_usd": 1.5}
SERVING_QUIRKS = [
    json.dumps(SERVING_BASE),
    json.dumps({**SERVING_BASE, "window_end": None, "window_seconds": 3600, "service": " a ",
                "window_start": "2026-08-01T00:00:00+02:00"}),
    json.dumps({**SERVING_BASE, "requests_total": "10", "model_version": 2}),
    json.dumps({**SERVING_BASE, "window_end": SERVING_BASE["window_start"]}),
    json.dumps({**SERVING_BASE, "requests_success": 11}),
    "not json",
    "[1, 2]",
    '{"window_start": "2026-08-01T00:00:00Z", "window_end": "2026-08-01T01:00:00Z", "service": "d", '
    '"model_version": "v1", "requests_total": 10, "requests_success": 9, "cost_usd": 1.12345678901234567}',
    json.dumps({**SERVING_BASE, "model_version": "v2", "cost_usd": -1}),
    json.dumps({**SERVING_BASE, "service": "e", "cost_usd": None, "instance_type": "g6.xlarge", "replicas": 2}),
    json.dumps({**SERVING_BASE, "service": "f", "avg_gpu_util": 101}),
    json.dumps({**SERVING_BASE, "service": "f", "gpu_uuids": ["GPU-1", "", " GPU-2"], "latency_ms_p50": True}),
    json.dumps({**SERVING_BASE, "service": "g", "gpu_uuids": ["GPU-1", "", "GPU-2"], "energy_kwh": 0.5,
                "host": "h1", "gpu_count": None}),
    json.dumps({**SERVING_BASE, "window_start": "2026-08-01T00:00:00.25Z", "window_end": None,
                "window_seconds": 0.5, "requests_error": 1, "cost_usd": 0, "host": "", "avg_cpu_util_pct": 3}),
    json.dumps({**SERVING_BASE, "service": "h", "window_seconds": 3600, "window_end": "2026-08-01T01:00:00.9Z"}),
    json.dumps({**SERVING_BASE, "service": "h", "window_seconds": 3600, "window_end": "2026-08-01T01:00:01.5Z"}),
    json.dumps({**SERVING_BASE, "service": "i", "requests_total": 18446744073709551615}),
    json.dumps({**SERVING_BASE, "service": "j", "window_start": "1989-08-01T00:00:00Z"}),
    json.dumps({**SERVING_BASE, "service": "k", "window_start": 1785542400, "window_end": None,
                "window_seconds": 60}),
    json.dumps({**SERVING_BASE, "replicas": 3000000000}),
    json.dumps({**SERVING_BASE, "service": "a\u00a0", "model_version": "v9"}),
    "   ",
    json.dumps({**SERVING_BASE, "requests_success": 7}),  # repeats line 1's window: the last wins
]


def staged_rows(con, table: str) -> dict[int, dict]:
    result = con.execute(f"SELECT * EXCLUDE (load_id) FROM {table}")
    columns = [c[0] for c in result.description]
    return {row["source_line"]: row for row in (dict(zip(columns, r)) for r in result.fetchall())}


def assert_same_rows(got: dict[int, dict], want: list[dict]) -> None:
    want_by_line = {row["source_line"]: row for row in want}
    assert set(got) == set(want_by_line)
    for line, row in want_by_line.items():
        for column, value in row.items():
            other = got[line][column]
            if isinstance(value, float) and isinstance(other, float):
                assert math.isclose(value, other, rel_tol=0, abs_tol=0), (line, column, value, other)
            else:
                assert other == value, (line, column, value, other)


def write(path: Path, lines: list[str]) -> Path:
    path.write_bytes(("\n".join(lines) + "\n").encode())
    return path


@pytest.mark.parametrize("tz", [timezone.utc, ZoneInfo("Europe/Paris")])
def test_collector_sql_path_reads_what_python_reads(tmp_path, tz):
    path = write(tmp_path / "node-7_x.csv", [COLLECTOR_HEADER] + COLLECTOR_QUIRKS)
    ctx = ParseContext(str(path), tz)
    reference = gpu_collector.parse(numbered(path.read_text().split("\n")), ctx)
    con = staging.open_stage()
    staged = gpu_collector.stage(staging.Source.of(path), con, ctx)
    staging.keep_last(con, "gpu_samples")
    table = reference.tables["gpu_samples"]
    last = {}
    for row in table:  # the stage keeps a key's last line, as the reader does
        last[(row["host"], row["gpu_index"], row["sampled_at"])] = {k: v for k, v in row.items() if k != "sample_key"}
    assert staged.accepted == reference.accepted
    assert_same_rows(staged_rows(con, "gpu_samples"), list(last.values()))
    assert con.execute("SELECT line, reason FROM rejects ORDER BY line").fetchall() == [
        (r.line, r.reason) for r in reference.rejects]
    assert len(reference.rejects) >= 8 and 12 not in {r.line for r in reference.rejects}


def test_serving_sql_path_reads_what_python_reads(tmp_path, caplog):
    path = write(tmp_path / "serving.jsonl", SERVING_QUIRKS)
    ctx = ParseContext(str(path), timezone.utc)
    reference = serving.parse(numbered(path.read_text().split("\n")), ctx)
    con = staging.open_stage()
    with caplog.at_level(logging.DEBUG, logger="ingest.engine.batch_sql"):
        staged = serving.stage(staging.Source.of(path), con, ctx)
    assert staged.accepted == reference.accepted
    assert_same_rows(staged_rows(con, "serving_windows"), reference.rows("serving_windows"))
    assert sorted(con.execute("SELECT line, reason FROM rejects").fetchall()) == sorted(
        (r.line, r.reason) for r in reference.rejects)
    assert staged.totals == serving.totals(reference)
    # most of the plain lines went through SQL, not the generic reader (its log names its lines)
    in_python = sum(len(getattr(r, "reader_lines", [])) for r in caplog.records)
    assert staged.accepted - (in_python - len(reference.rejects)) >= 5


def test_serving_sample_through_sql_equals_python():
    path = SAMPLE_DIR / "serving_windows.jsonl.gz"
    ctx = ParseContext(str(path), timezone.utc)
    reference = serving.parse(numbered(gzip.decompress(path.read_bytes()).decode().split("\n")), ctx)
    con = staging.open_stage()
    staged = serving.stage(staging.Source.of(path), con, ctx)
    assert_same_rows(staged_rows(con, "serving_windows"), reference.rows("serving_windows"))
    assert staged.totals == serving.totals(reference)


@pytest.mark.parametrize("compress", ["gzip", "zstd"])
def test_compressed_files_stream_to_the_same_rows(warehouse, tmp_path, compress):
    plain = write(tmp_path / "node-8_plain.csv", [COLLECTOR_HEADER] + COLLECTOR_QUIRKS[:6])
    data = plain.read_bytes()
    packed = tmp_path / f"node-8_packed.csv.{'gz' if compress == 'gzip' else 'zst'}"
    packed.write_bytes(gzip.compress(data) if compress == "gzip" else zstandard.ZstdCompressor().compress(data))
    progress: list[tuple[int, int]] = []
    summary = loader.ingest_file(packed, on_progress=lambda done, rows: progress.append((done, rows)))
    assert (summary.kind, summary.rows_loaded, summary.rows_rejected) == ("gpu-collector", 3, 3), summary.to_json()
    assert progress[-1] == (packed.stat().st_size, 6)
    assert [done for done, _ in progress] == sorted(done for done, _ in progress)
    ledger = wh.query("SELECT sha256 FROM loads")["sha256"].tolist()
    assert ledger == [hashlib.sha256(packed.read_bytes()).hexdigest()]
    rows = wh.query("SELECT source_line, power_w FROM gpu_samples ORDER BY source_line")
    assert rows.values.tolist() == [[2, 50.5], [3, 12.0], [7, 50.0]]


def test_a_corrupt_zstd_file_fails_with_one_sentence(warehouse, tmp_path):
    path = tmp_path / "broken.csv.zst"
    path.write_bytes(b"\x28\xb5\x2f\xfd" + b"not zstd at all")
    summary = loader.ingest_file(path)
    assert summary.status == "failed"
    assert summary.error == f"{path}: looks zstd-compressed but cannot be decompressed"


def test_the_warehouse_is_free_while_a_file_is_parsed(warehouse, tmp_path, monkeypatch):
    """Another process opens the warehouse while the loader is reading the file: the lock is
    taken for the merge only."""
    monkeypatch.setattr(staging, "LINE_BATCH_BYTES", 64)  # many batches, so progress comes mid-file
    path = write(tmp_path / "node-9_x.csv", [COLLECTOR_HEADER] + [
        f"2026-01-01T00:{m:02d}:00Z,n9,0,GPU-z,L4,50,,40,10" for m in range(30)])
    opened: list[int] = []

    def other_process_opens(done: int, rows: int) -> None:
        if not opened and done < path.stat().st_size:
            opened.append(subprocess.run([sys.executable, "-c", "import duckdb, sys; duckdb.connect(sys.argv[1]).close()",
                                          str(warehouse)], capture_output=True, timeout=120).returncode)

    summary = loader.ingest_file(path, on_progress=other_process_opens)
    assert opened == [0]
    assert (summary.status, summary.rows_loaded) == ("loaded", 30)


SAMPLE_LINE = b"2026-01-01T00:00:00Z,n1,0,GPU-a,L4,50,1,40,10\n"


def test_bytes_past_the_head_that_are_not_utf8_fail_the_file_with_their_offset(warehouse, tmp_path):
    good = (COLLECTOR_HEADER + "\n").encode() + SAMPLE_LINE * 2000  # past the 64 KB read to detect the kind
    path = tmp_path / "n1_bad.csv"
    path.write_bytes(good + b"2026-01-01T00:00:00Z,n1,0,GPU-\xff,L4,50,1,40,10\n")
    summary = loader.ingest_file(path)
    assert (summary.status, summary.error) == ("failed", f"{path}: not UTF-8 text (byte {len(good) + 30})")
    assert wh.query("SELECT count(*) AS n FROM loads")["n"][0] == 0


def test_a_gzip_file_cut_short_past_its_head_fails_with_one_sentence(warehouse, tmp_path):
    data = (COLLECTOR_HEADER + "\n").encode() + SAMPLE_LINE * 20000
    path = tmp_path / "n1_cut.csv.gz"
    path.write_bytes(gzip.compress(data)[:-50])
    summary = loader.ingest_file(path)
    assert (summary.status, summary.error) == ("failed", f"{path}: looks gzip-compressed but cannot be decompressed")
