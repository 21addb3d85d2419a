"""CodeCarbon and the GPU collector (nvidia-smi: tests/test_nvidia_smi_definition.py; DCGM:
tests/test_dcgm_definition.py): the columnar `stage` (lines typed in SQL per batch) against
the per-line `parse` it replaced, on the real files and on files mixing good lines with bad ones.

Both paths stage into a private DuckDB each; the rows, rejects (line, reason, text), records
accepted and --json totals must be identical. `parse` is what the format tests check against
independent readings (tests/test_gpu_traces.py, tests/test_codecarbon.py); here it is the
reference. Each test also counts the lines the columnar path hands to its Python fallback: none
on the real files (but CodeCarbon's two incomplete rows), only lines this test broke elsewhere.
"""
from __future__ import annotations

import random
from datetime import timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from ingest.engine import reader, staging
from ingest.engine.contract import ParseContext
from ingest.formats.gpu import gpu_collector
from ingest.formats.runs import codecarbon
from ingest.pipeline import loader
from ingest.settings import limits

UTC, PARIS, BERLIN = timezone.utc, ZoneInfo("Europe/Paris"), ZoneInfo("Europe/Berlin")
CODECARBON = ("codecarbon/codecarbon_examples_emissions.csv",
              "codecarbon/codecarbon_tests_emissions_invalid_headers_oldschema.csv",
              "codecarbon/greenmlbench_emissions_RTX4070_cc3.2.3_first200KB.csv")


def stage_both(module, path: Path, monkeypatch, tz=UTC, host=None, at=None) -> set[int]:
    """Stage `path` by `parse` and by `stage`, assert both staged the same, and return the
    line numbers the columnar path read in Python."""
    ctx = ParseContext(str(path), tz, host, at)
    src = staging.Source.of(path, str(path))
    old, new = staging.open_stage(), staging.open_stage()
    try:
        parsed = module.parse(staging.lines(src), ctx)  # the old path, as loader._stage ran it
        staging.insert_parsed(old, parsed, src.name)
        old_totals = module.totals(parsed)
        with monkeypatch.context() as patch:
            in_python = _count_fallback(module, patch)
            staged = module.stage(src, new, ctx)
        for table in module.TABLES:
            for con in (old, new):
                if table in staging.UNIQUE_BY:
                    staging.keep_last(con, table)
            assert rows(new, table) == rows(old, table), table
        assert rows(new, "rejects", "line, reason, raw") == rows(old, "rejects", "line, reason, raw")
        assert (staged.accepted, staged.totals) == (parsed.accepted, old_totals)
        return in_python
    finally:
        old.close()
        new.close()


def rows(con, table: str, columns: str = "*") -> list[tuple]:
    return con.execute(f"SELECT {columns} FROM {table} ORDER BY ALL").fetchall()


def _count_fallback(module, monkeypatch) -> set[int]:
    """Record the lines the columnar path passes to its per-line Python reader."""
    seen: set[int] = set()
    read_lines = reader.read_lines  # a definition's lines the engine's SQL pass hands to its reader

    def counting(definition, lines, *args):
        lines = list(lines)
        seen.update(number for number, _ in lines)
        return read_lines(definition, lines, *args)
    monkeypatch.setattr(reader, "read_lines", counting)
    return seen


def write(tmp_path: Path, name: str, lines: list[str]) -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# --- CodeCarbon -------------------------------------------------------------------------------

@pytest.mark.parametrize("tz", [UTC, BERLIN], ids=["utc", "berlin"])
def test_codecarbon_real_files(formats_dir, monkeypatch, tz):
    """Every generation; the reader gets the rows without run_id (examples 3-5, the oldest schema's
    line 2: their id is made of the values as written) and line 29 (energy_consumed with 20 decimals)."""
    found = {name: stage_both(codecarbon, formats_dir / name, monkeypatch, tz) for name in CODECARBON}
    assert found == {CODECARBON[0]: {3, 4, 5, 29}, CODECARBON[1]: {2}, CODECARBON[2]: set()}


def test_codecarbon_mixed_good_and_bad_lines(formats_dir, tmp_path, monkeypatch):
    lines = (formats_dir / CODECARBON[2]).read_text(encoding="utf-8").splitlines()
    header = lines[0].split(",")
    column = {name: header.index(name) for name in header}
    rnd = random.Random(42)
    changed = set()
    for n in range(2, len(lines), 9):
        fields = lines[n].split(",")
        name, value = rnd.choice([
            ("duration", "abc"), ("duration", "-5"), ("duration", "1e400"), ("energy_consumed", ""),
            ("energy_consumed", "-0.5"), ("emissions", "NaN"), ("timestamp", "noon"), ("timestamp", "2026-02-30T10:00:00"),
            ("timestamp", "1780000000"), ("gpu_count", "1.5"), ("gpu_count", "-1"), ("run_id", "unknown"),
            ("run_id", " padded "), ("gpu_model", "Tesla T4"), ("project_name", '"quoted, with a comma"'),
            ("duration", "1_000"), ("timestamp", "2026-05-10 23:47:11+02:00"), ("region", "\u00a0berlin"),
        ])
        fields[column[name]] = value
        lines[n] = ",".join(fields)
        changed.add(n + 1)
    lines[20] = lines[20].replace(",1.0,1 x NVIDIA GeForce RTX 4070,", ",2,NVIDIA L4,")  # priced by the catalog
    lines[30] = lines[9]  # a run written twice: the later line wins
    lines += ["", "a,b,c", lines[40] + ",extra", "   "]
    changed |= {21, len(lines) - 1, len(lines) - 2}
    path = write(tmp_path, "emissions.csv", lines)
    for tz in (UTC, BERLIN):
        in_python = stage_both(codecarbon, path, monkeypatch, tz)
        assert in_python and in_python <= changed


def test_codecarbon_summer_time_change_and_oldest_schema(tmp_path, monkeypatch):
    """Naive times at Berlin's autumn change (02:30 happens twice) read by Python's rule, as before;
    the oldest schema has no run_id, so every row is the reader's (its id is made of the values as written)."""
    lines = ["timestamp,project_name,duration,emissions,energy_consumed,country_name,on_cloud,cloud_region,region",
             "2025-10-26T02:30:00,p,10,0.1,0.2,Germany,Y,eu-central-1,berlin",
             "2025-10-26T12:30:00,p,0.000001,0.1,0.2,Germany,N,eu-central-1,",
             "2025-03-30T02:30:00,p,3600,0.1,0.2,,N,,",
             "2025-01-15T12:00:00.5,p,7200.25,0,0,Germany,y,,berlin"]
    path = write(tmp_path, "emissions.csv", lines)
    assert stage_both(codecarbon, path, monkeypatch, BERLIN) == {2, 3, 4, 5}
    assert stage_both(codecarbon, path, monkeypatch, UTC) == {2, 3, 4, 5}


def test_codecarbon_header_without_energy_is_refused_alike(tmp_path, monkeypatch):
    path = write(tmp_path, "emissions.csv", ["timestamp,project_name,run_id,duration,emissions",
                                             "2025-01-15T12:00:00,p,r1,3600,0.1"])
    assert stage_both(codecarbon, path, monkeypatch) == set()


# --- gpu-collector ----------------------------------------------------------------------------

COLLECTOR_HEADER = "timestamp,host,gpu_index,gpu_uuid,gpu_name,power_w,energy_mj,gpu_util_pct,mem_used_mib"
# Spellings of a sample's time: with and without seconds, fraction, offset, `T`; slashed dates;
# days alone; naive times at Berlin's summer-time changes (02:30 does not exist on 30 March and
# happens twice on 26 October) and next to them; out of range and impossible ones.
STAMPS = ("2025-06-01T12:00:00Z", "2025-06-01 12:00:00", "2025-06-01T12:00", "2025-06-01T12:00Z",
          "2025-06-01T12:00:00.123456", "2025-06-01T12:00:00.5+02:00", "2025/06/01 12:00:00",
          "2025/06/01T12:00:00-05:30", "2025-06-01", "2025-06-01Z", "2025-03-30T02:30:00",
          "2025-03-30T01:59:59", "2025-03-30T04:00:00", "2025-10-26T02:30:00", "2025-10-26T01:30:00",
          "2025-10-26T03:30:00+01:00", "2025-10-26T05:00:00", "1989-12-31T23:59:59Z", "2099-12-31T23:00:00",
          "2100-01-01T00:00:00Z", "2025-02-30T00:00:00", "2025-06-01T23:59:59.9999999", "2025-06-01T12:00:00+24:00")
# Lines Python's `not line.strip()` skips, though none is empty or ASCII blank alone.
BLANKS = ("\u3000", " \u2007 ", "\u2028", "\x1c\x1d", "\u205f\t", "\r")


def test_collector_times_and_blank_lines_as_the_per_line_path_reads_them(tmp_path, monkeypatch):
    """Every time spelling in UTC, in Berlin (summer time) and in a zone DuckDB does not know,
    and lines of Unicode blanks before the header and among the rows: what `parse` made of them."""
    lines = list(BLANKS) + [COLLECTOR_HEADER]
    for n, stamp in enumerate(STAMPS):
        lines.append(f"{stamp},n1,{n % 4},GPU-{n % 4},L4,{50 + n},{1000 * n},{n},{n * 10}")
        lines.append(BLANKS[n % len(BLANKS)])
    path = write(tmp_path, "node-1_times.csv", lines)
    fixed = timezone(timedelta(hours=-3))  # no IANA name: its naive times are read in Python
    for tz in (UTC, BERLIN, fixed):
        stage_both(gpu_collector, path, monkeypatch, tz)


@pytest.mark.parametrize("module, lines", [
    (gpu_collector, [COLLECTOR_HEADER, "2025-06-01T12:00:00Z,n1,0,GPU-0,L4,50,1000,40,10"]),
    (codecarbon, ["timestamp,project_name,run_id,duration,emissions,energy_consumed",
                  "2025-01-15T12:00:00,p,r1,3600,0.1,0.5"]),
], ids=["gpu-collector", "codecarbon"])
def test_a_too_long_first_line_is_refused_and_the_next_one_is_the_header(tmp_path, monkeypatch, module, lines):
    """As the per-line path reads it: the too-long line is refused with its size, the file loads."""
    monkeypatch.setattr(limits, "_current", limits.current())
    limits.configure(limits.Limits(max_line_bytes=100))
    path = write(tmp_path, "node-1_long.csv", ["x" * 300] + lines)
    ctx = ParseContext(str(path), UTC)
    src = staging.Source.of(path, str(path))
    old, new = staging.open_stage(), staging.open_stage()
    try:
        too_long: list = []
        parsed = module.parse(loader._within_limit(staging.lines(src), too_long), ctx)  # as loader._stage runs it
        parsed.rejects.extend(too_long)
        staging.insert_parsed(old, parsed, src.name)
        staged = module.stage(src, new, ctx)
        loader._name_too_long_lines(new)
        for table in module.TABLES:
            if table in staging.UNIQUE_BY:
                staging.keep_last(new, table)
            assert rows(new, table) == rows(old, table)
        assert rows(new, "rejects", "line, reason, raw") == rows(old, "rejects", "line, reason, raw")
        assert staged.accepted == parsed.accepted == 1
        [(line, reason)] = rows(new, "rejects", "line, reason")
        assert line == 1 and "longer than the 100" in reason
    finally:
        old.close()
        new.close()
