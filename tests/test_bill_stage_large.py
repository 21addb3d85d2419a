"""How a large bill is staged: its memory limit grows with the file (bill_stage._size_memory: the
default limit plus half the file's size, at most LARGE_BILL_MEMORY_MB; MLCOST_STAGE_MEMORY, when
set, wins), and a file read on several threads still numbers each row by its physical line
(bill_csv.py: the order-preserving insert's rowid). Expected limits and lines are worked out here
from the files, not read from the code under test."""
from __future__ import annotations

from datetime import timezone

import duckdb
import pytest

from ingest.engine.staging import Source
from ingest.formats.billing import bill_stage

MIB = 1 << 20


def _limit_mib(con: duckdb.DuckDBPyConnection) -> float:
    """The connection's memory limit in MiB (DuckDB shows it rounded, e.g. '732.4 MiB')."""
    text = con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    number, unit = text.split()
    return float(number) * {"MiB": 1, "GiB": 1024, "KiB": 1 / 1024}[unit]


@pytest.mark.parametrize("size_mib, expected_mb", [
    (1, 512),      # a small bill: the default limit, untouched
    (200, 612),    # 512 MB + 100
    (504, 764),    # the fleet's 1M-line FOCUS file: 512 + 252
    (2000, 768),   # capped
])
def test_the_limit_grows_with_the_file(tmp_path, monkeypatch, size_mib, expected_mb):
    monkeypatch.delenv("MLCOST_STAGE_MEMORY", raising=False)
    path = tmp_path / "bill.csv"
    with open(path, "wb") as handle:  # a sparse file: its size without writing it
        handle.truncate(size_mib * MIB)
    con = duckdb.connect(":memory:", config={"memory_limit": "512MB"})
    bill_stage._size_memory(con, Source.of(path))
    assert _limit_mib(con) == pytest.approx(expected_mb * 1000 * 1000 / MIB, abs=0.1)


def test_an_explicit_limit_is_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("MLCOST_STAGE_MEMORY", "300MB")
    path = tmp_path / "bill.csv"
    with open(path, "wb") as handle:
        handle.truncate(900 * MIB)
    con = duckdb.connect(":memory:", config={"memory_limit": "300MB"})
    bill_stage._size_memory(con, Source.of(path))
    assert _limit_mib(con) == pytest.approx(300 * 1000 * 1000 / MIB, abs=0.1)


@pytest.mark.parametrize("buffered", [False, True])
def test_a_bill_read_on_every_thread_numbers_each_row_by_its_line(tmp_path, monkeypatch, buffered):
    """A FOCUS file of ~40 MB (DuckDB reads it in several chunks, on several threads, into a
    table that keeps the reader's order): every staged row's source_line is the physical line
    its id was written on, and the bad lines spread through the file are rejected at their lines.
    The expected lines are counted here while the file is written. `buffered`: read as a large
    file is (bill_csv.LARGE_BUFFER_BYTES), here in 8 MiB buffers, several per file."""
    from ingest.formats.billing import bill_csv

    if buffered:
        monkeypatch.setattr(bill_csv, "LARGE_FILE_BYTES", MIB)
        monkeypatch.setattr(bill_csv, "LARGE_BUFFER_BYTES", 8 * MIB)
    from ingest.engine.contract import ParseContext
    from ingest.engine.staging import open_stage
    from ingest.formats.billing import billing_focus

    header = ("BilledCost,EffectiveCost,BillingCurrency,ChargePeriodStart,ChargePeriodEnd,ChargeCategory,"
              "ProviderName,ChargeDescription,Tags,x_LineItemId\n")
    description = "On Demand Linux p4d.24xlarge Instance Hour " + "x" * 120  # wide lines: fewer of them
    expected_line: dict[str, int] = {}
    bad_lines: list[int] = []
    path = tmp_path / "focus_big.csv"
    with open(path, "w", newline="") as out:
        out.write(header)
        line = 1
        for number in range(200_000):
            line += 1
            if number % 25_013 == 7:  # a bad amount, now and then, through the whole file
                out.write(f"ten,1,USD,2026-10-01 00:00:00,2026-10-01 01:00:00,Usage,AWS,{description},,bad-{number}\n")
                bad_lines.append(line)
                continue
            out.write(f"{number % 97}.25,1,USD,2026-10-01 00:00:00,2026-10-01 01:00:00,Usage,AWS,{description},"
                      f"\"{{\"\"team\"\":\"\"t{number % 5}\"\"}}\",li-{number}\n")
            expected_line[f"AWS|id|li-{number}"] = line
    assert path.stat().st_size > 35 * MIB
    con = open_stage()
    try:
        src = Source.of(path)
        billing_focus.stage(src, con, ParseContext(src.name, timezone.utc))
        found = dict(con.execute("SELECT line_key, source_line FROM billing_lines").fetchall())
        rejects = [line for (line,) in con.execute("SELECT line FROM rejects ORDER BY line").fetchall()]
    finally:
        con.close()
    assert found == expected_line
    assert rejects == bad_lines


@pytest.mark.parametrize("buffered", [False, True])
@pytest.mark.parametrize("width, too_long", [(1_900_000, False), (2_100_000, True)])
def test_a_large_file_keeps_duckdbs_line_size_limit(tmp_path, monkeypatch, buffered, width, too_long):
    """A buffer size given to read_csv would also raise its line size limit (a 2.1 MB line read
    whole): a large file's reader gives the limit with it, so a line over 2,000,000 bytes is
    rejected as too long at its line and one under it is loaded, whichever way the file is read."""
    from ingest.engine.contract import ParseContext
    from ingest.engine.staging import open_stage
    from ingest.formats.billing import bill_csv, billing_focus

    if buffered:
        monkeypatch.setattr(bill_csv, "LARGE_FILE_BYTES", 1)
        monkeypatch.setattr(bill_csv, "LARGE_BUFFER_BYTES", 8 * MIB)
    path = tmp_path / "focus_wide.csv"
    with open(path, "w", newline="") as out:
        out.write("BilledCost,EffectiveCost,BillingCurrency,ChargePeriodStart,ChargePeriodEnd,ChargeCategory,"
                  "ProviderName,ChargeDescription,x_LineItemId\n")
        for number in range(3):
            description = "d" * (width if number == 1 else 5)
            out.write(f"1.5,1,USD,2026-10-01 00:00:00,2026-10-01 01:00:00,Usage,AWS,{description},li-{number}\n")
    con = open_stage()
    try:
        src = Source.of(path)
        assert (bill_csv._buffer(src) != "") == buffered
        billing_focus.stage(src, con, ParseContext(src.name, timezone.utc))
        found = dict(con.execute("SELECT line_key, source_line FROM billing_lines").fetchall())
        rejects = con.execute("SELECT line, reason FROM rejects ORDER BY line").fetchall()
    finally:
        con.close()
    kept = [0, 2] if too_long else [0, 1, 2]
    assert found == {f"AWS|id|li-{number}": number + 2 for number in kept}
    assert rejects == ([(3, "unreadable CSV: the line is too long")] if too_long else [])
