"""Issue 13, rows 1-5: hostile and broken input, tried as a new user would, each with a clear answer.

Each test builds its file here, computes what must happen from the raw text (csv, json,
Decimal), then ingests it into a real warehouse file and reads the ledger back.
"""
from __future__ import annotations

import csv
import gzip
import io
import json
import re
import unicodedata
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest

from ingest.engine import values
from ingest.engine import warehouse as wh
from ingest.engine.contract import BadValue
from ingest.engine import batch_spellings
from ingest.pipeline import loader
from mlcost import cli
from tests.conftest import REPO_ROOT

SAMPLE = REPO_ROOT / "sample_data"


def _trace_lines(count: int) -> list[str]:
    """The header and `count` sample lines of the collector's own GPU trace CSV."""
    with gzip.open(SAMPLE / "gpu_traces" / "gpu-node-1_2026-08.csv.gz", "rt") as handle:
        return [next(handle).rstrip("\n") for _ in range(count + 1)]


def _run() -> dict:
    with open(SAMPLE / "runs.jsonl") as handle:
        return json.loads(handle.readline())


def _ledger(path: str) -> tuple[int, int, int]:
    """(rows_loaded, rows_rejected, rejects stored) of the load of `path`."""
    loaded, rejected, load_id = wh.query(
        "SELECT rows_loaded, rows_rejected, load_id FROM loads WHERE path = ?", [path]).iloc[0]
    stored = wh.query("SELECT count(*) AS n FROM rejects WHERE load_id = ?", [int(load_id)])["n"][0]
    return int(loaded), int(rejected), int(stored)


# Row 1: a small .csv.gz that expands to gigabytes, and lines longer than anyone writes.

def test_row1_decompression_bomb_is_refused_by_ratio_and_the_batch_goes_on(warehouse, tmp_path):
    lines = _trace_lines(60)
    block = ("\n".join(lines[1:]) + "\n").encode()  # repeated within gzip's 32 KB window
    bomb = tmp_path / "bomb.csv.gz"
    member = gzip.compress(block * ((1 << 20) // len(block)), compresslevel=9)  # 1 MB of lines
    with open(bomb, "wb") as out:  # gzip members in a row read as one stream: 100 MB
        out.write(gzip.compress((lines[0] + "\n").encode()))
        for _ in range(100):
            out.write(member)
    assert bomb.stat().st_size * 100 < 100 << 20  # expands more than 100 times
    good = tmp_path / "good.csv"
    good.write_text("\n".join(lines[:11]) + "\n")

    summaries = [s for _, s in loader.ingest_paths([str(bomb), str(good)])]

    assert summaries[0].status == "failed"
    assert str(bomb) in summaries[0].error and "max_ratio" in summaries[0].error
    assert summaries[1].status == "loaded" and summaries[1].rows_loaded == 10
    assert wh.query("SELECT count(*) AS n FROM loads WHERE path = ?", [str(bomb)])["n"][0] == 0


def test_row1_decompressed_size_limit_is_a_setting(warehouse, tmp_path, monkeypatch):
    settings = tmp_path / "mlcost.toml"
    settings.write_text("[ingest]\nmax_decompressed_bytes = 1000000\nmax_ratio = 100000\n")
    monkeypatch.setenv("MLCOST_CONFIG", str(settings))
    lines = _trace_lines(50)
    packed = tmp_path / "big.csv.gz"
    with gzip.open(packed, "wt") as out:
        out.write(lines[0] + "\n")
        for _ in range(400):  # about 2.8 MB once decompressed
            out.write("\n".join(lines[1:]) + "\n")

    summary = loader.ingest_file(packed)

    assert summary.status == "failed"
    assert str(packed) in summary.error and "max_decompressed_bytes" in summary.error


def test_row1_a_5mb_line_in_a_trace_csv_is_that_line_rejected(warehouse, tmp_path):
    lines = _trace_lines(30)
    lines[4] = "9" * 5_000_000  # physical line 5
    trace = tmp_path / "trace.csv"
    trace.write_text("\n".join(lines) + "\n")

    summary = loader.ingest_file(trace)

    assert summary.status == "loaded"
    assert (summary.rows_loaded, summary.rows_rejected) == (29, 1)  # 30 data lines
    assert summary.rejects[0]["line"] == 5 and "5,000,000 bytes" in summary.rejects[0]["reason"]
    assert _ledger(str(trace)) == (29, 1, 1)


@pytest.mark.parametrize("size", [3_000_000, 20_000_000])  # within one read batch, and across several
def test_row1_a_long_line_in_a_runs_file_is_that_line_rejected(warehouse, tmp_path, size):
    run = _run()
    lines = [json.dumps(dict(run, run_id=f"r{i}")) for i in range(5)]
    lines[2] = json.dumps(dict(run, run_id="long", notes="n" * size))
    lines.append("z" * size)  # the last line, without a line end
    runs = tmp_path / "runs.jsonl"
    runs.write_text("\n".join(lines))

    summary = loader.ingest_file(runs)

    assert (summary.rows_loaded, summary.rows_rejected) == (4, 2)
    assert [r["line"] for r in summary.rejects] == [3, 6]
    assert all("max_line_bytes" in r["reason"] for r in summary.rejects)
    assert f"{size:,} bytes" in summary.rejects[1]["reason"]


# Row 2: a FOCUS CSV with one 200 KB field in row 6 of 100.

def test_row2_focus_with_a_200kb_field_loses_no_line(warehouse, tmp_path):
    with gzip.open(SAMPLE / "billing" / "focus_2026-08.csv.gz", "rt", newline="") as handle:
        rows = [row for _, row in zip(range(101), csv.reader(handle))]
    rows[6][rows[0].index("ChargeDescription")] = "d" * 200_000
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows(rows)
    bill = tmp_path / "focus.csv"
    bill.write_text(text.getvalue())
    billed = sum(Decimal(row[rows[0].index("BilledCost")]) for row in rows[1:])

    summary = loader.ingest_file(bill)

    assert summary.rows_loaded + summary.rows_rejected == 100
    loaded, rejected, stored = _ledger(str(bill))
    assert loaded + rejected == 100 and stored == rejected
    lines = wh.query_exact("SELECT count(*) AS n, sum(billed_cost) AS usd FROM billing_lines")
    if rejected == 0:  # the long description is a legal value: every line's dollars are in
        assert lines["n"][0] == 100 and lines["usd"][0] == billed


# Row 3: values past what the warehouse holds, deep JSON, long CSV fields, a stray quote, a
# 5 MB line: each a rejected line naming its column, and the batch goes on.

def test_row3_every_file_gets_an_answer_and_the_batch_goes_on(warehouse, tmp_path, capsys, formats_dir):
    run = _run()
    files: dict[str, tuple[str, str | None]] = {}  # name -> (text, the column its reject names)

    def runs(name: str, column: str | None, **fields) -> None:
        bad = dict(run, run_id=f"{name}-bad", **fields)
        files[name] = (json.dumps(bad) + "\n" + json.dumps(dict(run, run_id=f"{name}-ok")) + "\n", column)

    runs("date.jsonl", "end_time", end_time="9999-12-31T23:00:00-05:00")
    without_end = {k: v for k, v in run.items() if k != "end_time"}
    files["duration.jsonl"] = (json.dumps(dict(without_end, run_id="d-bad", duration_hours=1e12 / 3600)) + "\n"
                               + json.dumps(dict(run, run_id="d-ok")) + "\n", "duration_hours")
    runs("throughput.jsonl", "throughput_examples_per_sec", throughput_examples_per_sec=1e308)
    files["deep.jsonl"] = (json.dumps(dict(run, run_id="deep-ok")) + "\n" + "[" * 100_000 + "]" * 100_000 + "\n",
                           "nested")
    with open(formats_dir / "codecarbon" / "codecarbon_examples_emissions.csv") as handle:
        header, row = handle.readline(), handle.readline()
    files["codecarbon.csv"] = (header + row.replace("codecarbon,", '"' + "y" * 200_000 + '",', 1) + row, None)
    trace = _trace_lines(20)
    quoted = list(trace)
    quoted[3] = quoted[3].replace(",", ',"', 1)
    files["trace_quote.csv"] = ("\n".join(quoted) + "\n", None)
    long_line = list(trace)
    long_line[3] = "z" * 5_000_000
    files["trace_long.csv"] = ("\n".join(long_line) + "\n", "max_line_bytes")
    for name, (text, _) in files.items():
        (tmp_path / name).write_text(text)
    good = tmp_path / "zz_good.jsonl"
    good.write_text(json.dumps(dict(run, run_id="last-file")) + "\n")

    code = cli.main(["ingest", "--json", *(str(tmp_path / name) for name in files), str(good)])

    records = {Path(r["path"]).name: r for r in json.loads(capsys.readouterr().out)}
    assert set(records) == set(files) | {good.name}
    assert code != 0  # something was refused
    assert records[good.name]["status"] == "loaded" and records[good.name]["rows_loaded"] == 1
    for name, (text, column) in files.items():
        record = records[name]
        data_lines = sum(1 for line in text.splitlines() if line.strip()) - (1 if name.endswith(".csv") else 0)
        assert record["status"] == "loaded", record
        assert record["rows_loaded"] + record["rows_rejected"] == data_lines, record
        if column:
            assert record["rows_rejected"] == 1 and column in record["rejects"][0]["reason"], record


# Row 4: only ASCII decimal numbers are numbers.

def _probes() -> list[str]:
    """Numbers written with every non-ASCII decimal digit, and the other spellings float() takes."""
    digits = [chr(c) for c in range(0x80, 0x30000) if unicodedata.category(chr(c)) == "Nd"]
    return (["1" + d + "3" for d in digits] + ["1_000", "12\x10", "\x1012", " 12 ", "12 ", "\t12", "0x10",
                                                  "nan", "NaN", "inf", "-Infinity", "1e", "١٢٣", "１２"])


def test_row4_non_ascii_digits_are_not_numbers_in_python():
    probes = _probes()
    assert len(probes) > 256
    for probe in probes:
        for read in (values.number, values.money, values.integer):
            with pytest.raises(BadValue):
                read(probe, "x")
    assert values.number("12.5e3", "x") == 12500.0 and values.money("-0.25", "x") == Decimal("-0.25")


def test_row4_sql_checks_use_the_same_pattern():
    probes = _probes() + ["12", "-1.5", ".5", "5.", "1e10", "+3E-2", "1.2.3", ""]
    # the engine's CSV spellings of a number (read in SQL) are numbers as Python reads them
    assert all(values.is_number_text(p) for p in probes
               if re.fullmatch(batch_spellings.CSV_NUMBER, p) or re.fullmatch(batch_spellings.CSV_COUNT, p))
    con = duckdb.connect()
    in_sql = [row[0] for row in con.execute(
        "SELECT regexp_full_match(p, ?) FROM unnest(?) WITH ORDINALITY AS t(p, i) ORDER BY i",
        [values.NUMBER_TEXT, probes]).fetchall()]
    assert in_sql == [values.is_number_text(p) for p in probes]


def test_row4_arabic_digits_are_rejected_in_runs_and_traces(warehouse, tmp_path):
    run = _run()
    runs = tmp_path / "runs.jsonl"
    runs.write_text("\n".join(json.dumps(dict(run, run_id=f"r{i}", estimated_cost_usd=v))
                              for i, v in enumerate(["١٢٣", "1_000", "12\x10", " 12 ", "12"])) + "\n")
    summary = loader.ingest_file(runs)
    assert (summary.rows_loaded, summary.rows_rejected) == (1, 4)
    assert all("estimated_cost_usd" in r["reason"] for r in summary.rejects)

    lines = _trace_lines(5)
    column = lines[0].split(",").index("power_w")
    fields = lines[2].split(",")
    fields[column] = "١٢٣"
    lines[2] = ",".join(fields)
    trace = tmp_path / "trace.csv"
    trace.write_text("\n".join(lines) + "\n")
    summary = loader.ingest_file(trace)
    assert (summary.rows_loaded, summary.rows_rejected) == (4, 1) and summary.rejects[0]["line"] == 3


# Row 5: runs costing 6e25 USD.

def test_row5_costs_past_what_sums_hold_are_rejected_and_queries_still_add_up(warehouse, tmp_path):
    run = _run()
    runs = tmp_path / "runs.jsonl"
    costs = [6e25, 6e25, 5e15, None]
    runs.write_text("\n".join(json.dumps(dict(run, run_id=f"r{i}", estimated_cost_usd=c,
                                              price_per_hour_usd=None if c else run.get("price_per_hour_usd")))
                              for i, c in enumerate(costs)) + "\n")

    summary = loader.ingest_file(runs)

    assert (summary.rows_loaded, summary.rows_rejected) == (1, 3)
    assert all("estimated_cost_usd" in r["reason"] and "too large" in r["reason"] for r in summary.rejects)
    total = wh.query_exact("SELECT sum(cost_usd) AS usd FROM runs")["usd"][0]
    assert total is not None and total < Decimal("1e15")
