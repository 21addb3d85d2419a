"""A gpu-collector CSV streamed in many batches, plain, gzip and zstd: every good line loads with
the values Python's csv module reads from it, every bad line is refused with its number and why.

The expectations come from the file as written (csv.reader, float, int, datetime), not from the
loader: a good line is one this test builds to be good, a bad one carries what its reason names.
"""
from __future__ import annotations

import csv
import gzip
from datetime import datetime, timedelta, timezone
from pathlib import Path

import duckdb
import pytest
import zstandard

from ingest.engine import batch_sql, staging
from ingest.formats.gpu import gpu_collector
from ingest.pipeline import loader
from ingest.settings import config, limits

HEADER = "timestamp,host,gpu_index,gpu_uuid,gpu_name,power_w,energy_mj,gpu_util_pct,mem_used_mib"
START = datetime(2026, 3, 1, tzinfo=timezone.utc)


def good(at: datetime, gpu: int, tail: str = "L4,50.25,1000,40,10") -> str:
    return f"{at:%Y-%m-%dT%H:%M:%S}Z,n1,{gpu},GPU-{gpu}," + tail


def block(at: datetime) -> list[tuple[str, str | None]]:
    """One block of lines: (text, None) for a good line, (text, what the reason names) for a bad one."""
    return [
        (good(at, 0), None),
        (good(at, 1, "L4, 12 ,2000, 40 ,10"), None),                 # blanks around numbers
        (good(at, 2, '"L4, PCIe",7,3000,40,10'), None),             # a quoted comma
        (good(at, 3, "L4,,,,"), None),                              # no readings: NULL, not 0
        (good(at, 4, "L4,60,5000,40,10") + "\r", None),            # a CRLF line end
        ("", None), ("   ", None),                                  # blank lines: skipped
        (good(at, 5, "L4,50,3000"), "expected 9 fields as in the header, got 7"),
        (good(at, 5, "L4,50,3000,40,10,"), "expected 9 fields as in the header, got 10"),
        (good(at, 6, '"L4,50,1,40,10'), "expected 9 fields"),        # an unterminated quote
        (good(at, 7, "L4,abc,1,40,10"), "power_w"),
        (good(at, 7, "L4,1_000,1,40,10"), "power_w"),
        (good(at, 7, "L4,NaN,1,40,10"), "power_w"),
        (good(at, 7, "L4,1e400,1,40,10"), "power_w"),
        (good(at, 7, "L4,20000,1,40,10"), "power_w"),
        (good(at, 8, "L4,50,12.5,40,10"), "energy_mj"),
        (good(at, 8, "L4,50,-5,40,10"), "energy_mj"),
        (good(at, 9, "L4,50,1,101,10"), "gpu_util_pct"),
        (good(at, 9, "L4,50,1,40,-1"), "mem_used_mib"),
        (f"{at:%Y-%m-%dT%H:%M:%S}Z,n1,70000,GPU-x,L4,50,1,40,10", "gpu_index"),
        (f"{at:%Y-%m-%dT%H:%M:%S}Z,n1,,GPU-x,L4,50,1,40,10", "gpu_index"),
        (f"{at:%Y-%m-%dT%H:%M:%S}Z,n1,0x1,GPU-x,L4,50,1,40,10", "gpu_index"),
        ("yesterday,n1,10,GPU-x,L4,50,1,40,10", "timestamp"),
        ("1980-01-01T00:00:00Z,n1,10,GPU-x,L4,50,1,40,10", "timestamp"),
        (",n1,10,GPU-x,L4,50,1,40,10", "timestamp"),
        (f"{at:%Y-%m-%dT24:%M:%S}Z,n1,10,GPU-x,L4,50,1,40,10", "timestamp"),
    ]


def expected_sample(line: int, text: str) -> dict:
    """What a good line says, read with the csv module."""
    fields = dict(zip(HEADER.split(","), next(csv.reader([text.rstrip("\r")]))))

    def number(name: str, kind=float):
        value = fields[name].strip()
        return kind(value) if value else None

    return {"source_line": line, "host": fields["host"], "gpu_index": int(fields["gpu_index"]),
            "sampled_at": datetime.fromisoformat(fields["timestamp"].replace("Z", "+00:00")),
            "gpu_uuid": fields["gpu_uuid"], "gpu_name": fields["gpu_name"], "power_w": number("power_w"),
            "energy_mj": number("energy_mj", int), "gpu_util_pct": number("gpu_util_pct"),
            "mem_used_mib": number("mem_used_mib")}


def build(blocks: int) -> tuple[list[str], list[dict], dict[int, str]]:
    """The file's lines, the samples it holds and the bad lines (line -> what the reason names)."""
    lines, samples, bad = [HEADER], [], {}
    for n in range(blocks):
        for text, reason in block(START + timedelta(minutes=n)):
            lines.append(text)
            if reason is not None:
                bad[len(lines)] = reason
            elif text.strip():
                samples.append(expected_sample(len(lines), text))
    return lines, samples, bad


def write(path: Path, lines: list[str], compress: str | None) -> Path:
    data = ("\n".join(lines) + "\n").encode()
    if compress == "gzip":
        data = gzip.compress(data)
    elif compress == "zstd":
        data = zstandard.ZstdCompressor().compress(data)
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("compress", [None, "gzip", "zstd"])
def test_many_batches_load_every_good_line_and_refuse_every_bad_one(warehouse, tmp_path, monkeypatch, compress):
    monkeypatch.setattr(staging, "LINE_BATCH_BYTES", 512)      # a batch every few lines
    monkeypatch.setattr(batch_sql, "JOINED_BYTES", 512)        # and each typed alone (the engine joins them up)
    lines, samples, bad = build(40)
    path = write(tmp_path / "n1_trace.csv", lines, compress)
    summary = loader.ingest_file(path)
    assert summary.kind == "gpu-collector" and summary.status == "loaded"
    assert (summary.rows_loaded, summary.rows_rejected) == (len(samples), len(bad))
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        got = con.execute("SELECT source_line, host, gpu_index, sampled_at, gpu_uuid, gpu_name, power_w, energy_mj, "
                          "gpu_util_pct, mem_used_mib FROM gpu_samples ORDER BY source_line").df()
        rejects = con.execute("SELECT line, reason FROM rejects ORDER BY line").fetchall()
    finally:
        con.close()
    rows = [{k: (None if v != v else v) for k, v in row.items()} for row in got.to_dict("records")]  # NaN -> None
    for row in rows:
        row["sampled_at"] = row["sampled_at"].to_pydatetime().astimezone(timezone.utc)
        row["source_line"], row["gpu_index"] = int(row["source_line"]), int(row["gpu_index"])
        row["energy_mj"] = None if row["energy_mj"] is None else int(row["energy_mj"])
    assert rows == samples
    assert [line for line, _ in rejects] == sorted(bad)
    for line, reason in rejects:
        assert bad[line] in reason, (line, reason, lines[line - 1])
    assert summary.totals["samples"] == len(samples)


def test_an_over_long_line_is_refused_with_its_size_and_the_rest_loads(warehouse, tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "_current", limits.current())  # the loader puts the limits in force: undone after
    monkeypatch.setattr(config, "ingest_limits", lambda: limits.Limits(max_line_bytes=200))
    monkeypatch.setattr(staging, "LINE_BATCH_BYTES", 256)
    lines, samples, bad = build(3)
    lines.insert(5, good(START, 0, "L4," + "9" * 300 + ",1,40,10"))
    summary = loader.ingest_file(write(tmp_path / "n1_long.csv", lines, None))
    assert summary.rows_loaded == len(samples) and summary.rows_rejected == len(bad) + 1
    reasons = {reject["line"]: reject["reason"] for reject in summary.rejects}
    assert "longer than the 200 allowed" in reasons[6]


@pytest.mark.parametrize("host", [None, "named-host"])
def test_a_header_with_only_the_required_columns_loads_with_the_host_given_or_the_file_name(
        warehouse, tmp_path, host):
    lines = ["timestamp,gpu_index,power_w", "2026-01-01T00:00:00Z,0,5", "2026-01-01T00:00:10Z,0,abc",
             "2026-01-01T00:00:20Z,1", " 2026-01-01T00:00:30Z , 2 , 7 "]
    summary = loader.ingest_file(write(tmp_path / "node-4_trace.csv", lines, None), host=host)
    assert (summary.rows_loaded, summary.rows_rejected) == (2, 2)
    assert [r["line"] for r in summary.rejects] == [3, 4]
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        rows = con.execute("SELECT source_line, host, gpu_index, power_w, gpu_uuid, gpu_name FROM gpu_samples "
                           "ORDER BY source_line").fetchall()
    finally:
        con.close()
    want = []
    for line in (2, 5):
        stamp, index, power = next(csv.reader([lines[line - 1]]))
        want.append((line, host or "node-4", int(index), float(power), None, None))
    assert rows == want


def test_rollups_derived_again_after_their_intervals_were_dropped(tmp_path):
    """The merge derives the rollups a second time when another load came in between: the staged
    samples' intervals, dropped after the first, are computed again, to the same minutes."""
    from ingest.derived import gpu_rollups
    from ingest.settings import config
    from ingest.engine.contract import ParseContext

    lines = [HEADER] + [good(START + timedelta(seconds=10 * n), 0, "L4,100,,40,10") for n in range(60)]
    path = write(tmp_path / "n1_twice.csv", lines, None)
    con = staging.open_stage()
    try:
        gpu_collector.stage(staging.Source.of(path), con, ParseContext(str(path), timezone.utc))
        gpu = config.load().gpu
        gpu_rollups.touched(con, gpu)
        minutes = []
        for _ in range(2):
            gpu_rollups.derive(con, gpu, with_context=False)
            minutes.append(con.execute("SELECT minute, coverage_s, energy_kwh FROM new_minutes "
                                       "ORDER BY minute").fetchall())
        # ten whole minutes, each covered by six 10 s intervals at 100 W: 6000 J
        assert [(m, c) for m, c, _ in minutes[0]] == [(START + timedelta(minutes=n), 60.0) for n in range(10)]
        assert all(abs(kwh - 100 * 60 / 3.6e6) < 1e-12 for _, _, kwh in minutes[0])
        assert minutes[1] == minutes[0]
    finally:
        con.close()
