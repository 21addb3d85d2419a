"""CodeCarbon emissions.csv (ingest/formats/runs/codecarbon.py): the real files in ../shared/formats/codecarbon,
checked against an independent reading with the csv module, small edge cases, and the CLI."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from ingest.engine import warehouse as wh
from ingest.engine.contract import ParseContext, numbered
from ingest.formats.runs import codecarbon
from ingest.pipeline import loader

UTC = timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")
EXAMPLES = "codecarbon_examples_emissions.csv"
OLDEST = "codecarbon_tests_emissions_invalid_headers_oldschema.csv"
GREENML = "greenmlbench_emissions_RTX4070_cc3.2.3_first200KB.csv"
# Data rows per file, as listed in ../shared/formats/README.md.
DATA_ROWS = {EXAMPLES: 28, OLDEST: 1, GREENML: 383}


# --- the independent reading ------------------------------------------------------------------

def read_csv(path: Path) -> list[tuple[int, dict]]:
    """(physical line, row) for every data row, read with the csv module."""
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        return [(reader.line_num, row) for row in reader]


def expected_runs(path: Path) -> tuple[dict[int, dict], list[int]]:
    """What should load, {line: row}: the latest row per run_id (rows without one each stand
    alone); and the lines of rows CodeCarbon left incomplete (empty energy_consumed)."""
    latest: dict[object, tuple[int, dict]] = {}
    incomplete: list[int] = []
    for line, row in read_csv(path):
        if not row["energy_consumed"].strip():
            incomplete.append(line)
            continue
        key = row.get("run_id") or ("no run_id", line)
        latest.pop(key, None)
        latest[key] = (line, row)
    return dict(sorted(latest.values(), key=lambda item: item[0])), incomplete


def naive(text: str) -> datetime:
    return datetime.fromisoformat(text)


def fetch(sql: str, params: list | None = None) -> list[dict]:
    with wh.connect() as con:
        cursor = con.execute(sql, params or [])
        names = [column[0] for column in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]


def count(table: str) -> int:
    return fetch(f"SELECT count(*) AS n FROM {table}")[0]["n"]


# --- the real files ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(DATA_ROWS))
def test_every_data_row_is_loaded_or_rejected(formats_dir, warehouse, name):
    path = formats_dir / "codecarbon" / name
    data_rows = read_csv(path)
    assert len(data_rows) == DATA_ROWS[name]
    summary = loader.ingest_file(path)
    assert (summary.kind, summary.status) == ("codecarbon", "loaded")
    assert summary.rows_loaded + summary.rows_rejected == len(data_rows)
    assert count("rejects") == summary.rows_rejected


@pytest.mark.parametrize("name", sorted(DATA_ROWS))
def test_runs_and_energy_match_the_csv_module(formats_dir, warehouse, name):
    path = formats_dir / "codecarbon" / name
    latest, incomplete = expected_runs(path)
    summary = loader.ingest_file(path)
    assert summary.rows_rejected == len(incomplete)
    assert summary.totals["runs"] == len(latest)
    # the summary rounds its total to 9 decimals (nano-kWh)
    energy_kwh = sum(float(r["energy_consumed"]) for r in latest.values())
    assert summary.totals["energy_kwh_total"] == pytest.approx(energy_kwh, abs=1e-9)

    runs = fetch("SELECT * FROM runs ORDER BY source_line")
    assert [r["source_line"] for r in runs] == list(latest)
    # the energy of each run, exactly as written (the latest row of each run_id)
    assert sorted(r["energy_kwh"] for r in runs) == sorted(float(r["energy_consumed"]) for r in latest.values())
    assert sorted(r["emissions_kg"] for r in runs) == sorted(float(r["emissions"]) for r in latest.values())

    for run in runs:
        given_id = latest[run["source_line"]].get("run_id")
        if given_id:
            assert run["run_id"] == given_id
        else:
            assert run["run_id"].startswith("codecarbon-")
    assert len({r["run_id"] for r in runs}) == len(runs)


@pytest.mark.parametrize("name", sorted(DATA_ROWS))
def test_each_run_row_matches_its_csv_row(formats_dir, warehouse, name):
    path = formats_dir / "codecarbon" / name
    by_line = dict(read_csv(path))
    loader.ingest_file(path)
    for run in fetch("SELECT * FROM runs"):
        row = by_line[run["source_line"]]
        ended = naive(row["timestamp"]).replace(tzinfo=UTC)
        duration = timedelta(seconds=float(row["duration"]))
        assert run["project"] == row["project_name"]
        assert run["ended_at"] == ended
        assert abs(run["started_at"] - (ended - duration)) <= timedelta(microseconds=1)
        assert run["duration_s"] == pytest.approx(float(row["duration"]), rel=1e-12)
        assert run["energy_kwh"] == float(row["energy_consumed"])
        assert run["source_kind"] == "codecarbon"
        if row.get("run_id"):
            assert run["run_id"] == row["run_id"]


def test_incomplete_rows_of_the_examples_file_are_rejected(formats_dir, warehouse):
    path = formats_dir / "codecarbon" / EXAMPLES
    summary = loader.ingest_file(path)
    assert [r["line"] for r in summary.rejects] == [6, 7]
    assert all("energy_consumed" in r["reason"] for r in summary.rejects)
    lines = path.read_text(encoding="utf-8").splitlines()
    stored = fetch("SELECT path, line, reason, raw FROM rejects ORDER BY line")
    assert [(r["path"], r["line"], r["raw"]) for r in stored] == [
        (str(path), 6, lines[5]), (str(path), 7, lines[6])]


def test_examples_file_keeps_the_latest_row_of_a_rewritten_run(formats_dir, warehouse):
    path = formats_dir / "codecarbon" / EXAMPLES
    rewritten = "8a1d9822-56c9-4c52-8497-5a2e32dd5b03"
    rows = [(line, row) for line, row in read_csv(path) if row["run_id"] == rewritten]
    assert len(rows) == 6  # CodeCarbon wrote this run six times
    last_line, last = rows[-1]
    loader.ingest_file(path)
    [run] = fetch("SELECT source_line, energy_kwh, duration_s, region FROM runs WHERE run_id = ?", [rewritten])
    assert run == {"source_line": last_line, "energy_kwh": float(last["energy_consumed"]),
                   "duration_s": pytest.approx(float(last["duration"])), "region": "île-de-france"}


def test_rows_without_run_id_get_stable_distinct_ids(formats_dir):
    lines = (formats_dir / "codecarbon" / EXAMPLES).read_text(encoding="utf-8").splitlines()
    ctx = ParseContext(EXAMPLES, UTC)
    first = codecarbon.parse(numbered(lines), ctx).rows("runs")
    second = codecarbon.parse(numbered(lines), ctx).rows("runs")
    derived = [r["run_id"] for r in first if r["run_id"].startswith("codecarbon-")]
    assert [r["source_line"] for r in first if r["run_id"] in derived] == [3, 4, 5]
    assert len(set(derived)) == 3
    assert [r["run_id"] for r in second] == [r["run_id"] for r in first]


def test_oldest_schema_loads_one_whole_run(formats_dir, warehouse):
    loader.ingest_file(formats_dir / "codecarbon" / OLDEST)
    [run] = fetch("SELECT * EXCLUDE (load_id) FROM runs")
    ended = datetime(2021, 6, 29, 11, 0, 38, tzinfo=UTC)
    assert run.pop("duration_s") == pytest.approx(210.39603400230408, rel=1e-12)
    assert run.pop("run_id").startswith("codecarbon-")
    assert run == {
        "project": "codecarbon", "team": None, "owner": None, "model": None, "status": None,
        "region": "casablanca-settat", "host": None, "instance_type": None, "gpu_type": None,
        "gpu_count": None, "gpu_uuids": None, "gpu_indices": None,
        "started_at": ended - timedelta(seconds=210.39603400230408), "ended_at": ended,
        "price_per_hour_usd": None, "cost_usd": None, "cost_source": None, "cost_given_usd": None,
        "flags": None, "throughput_examples_per_s": None, "examples": None, "examples_source": None,
        "val_metric": None, "val_metric_name": "val_metric", "metric_goal": "max", "target_metric": None,
        "energy_kwh": 0.001308618772068, "emissions_kg": 0.0010231017276686953,
        "tags": {"country_iso_code": "MAR", "country_name": "Morocco", "on_cloud": "N"},
        "source_kind": "codecarbon", "source_line": 2,
    }


def test_greenmlbench_gpu_count(formats_dir, warehouse):
    path = formats_dir / "codecarbon" / GREENML
    rows = read_csv(path)
    no_gpu = [line for line, row in rows if not row["gpu_count"].strip()]
    assert no_gpu == [33]
    assert {row["gpu_count"] for _, row in rows if row["gpu_count"]} == {"1.0"}
    loader.ingest_file(path)
    counts = fetch("SELECT gpu_count, count(*) AS n FROM runs GROUP BY gpu_count ORDER BY gpu_count NULLS LAST")
    assert counts == [{"gpu_count": 1, "n": len(rows) - 1}, {"gpu_count": None, "n": 1}]
    [host] = fetch("SELECT run_id, gpu_count, gpu_type, region FROM runs WHERE source_line = 33")
    assert host == {"run_id": "e3081a2a-7242-48c8-9249-dda7d1b9e6bc", "gpu_count": None, "gpu_type": None,
                    "region": "brandenburg"}
    [line_2] = fetch("SELECT gpu_count, gpu_type FROM runs WHERE source_line = 2")
    assert line_2 == {"gpu_count": 1, "gpu_type": "1 x NVIDIA GeForce RTX 4070"}


def test_local_times_read_in_berlin(formats_dir, warehouse):
    path = formats_dir / "codecarbon" / GREENML
    rows = read_csv(path)
    # every row is between the 2026 clock changes (29 March, 25 October): Berlin is UTC+2
    assert all(datetime(2026, 3, 29, 3) <= naive(row["timestamp"]) < datetime(2026, 10, 25, 2) for _, row in rows)
    loader.ingest_file(path, tz=BERLIN)
    ended = {r["source_line"]: r["ended_at"] for r in fetch("SELECT source_line, ended_at FROM runs")}
    assert ended == {line: naive(row["timestamp"]).replace(tzinfo=UTC) - timedelta(hours=2) for line, row in rows}


# --- small cases of our own -------------------------------------------------------------------

HEADER = "timestamp,project_name,run_id,duration,emissions,energy_consumed"


def write(tmp_path: Path, lines: list[str], name: str = "emissions.csv") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_winter_time_in_berlin_is_utc_plus_one(tmp_path, warehouse):
    path = write(tmp_path, [HEADER, "2025-01-15T12:00:00,p,r1,3600,0.1,0.5"])
    loader.ingest_file(path, tz=BERLIN)
    [run] = fetch("SELECT started_at, ended_at FROM runs")
    assert run == {"started_at": datetime(2025, 1, 15, 10, 0, tzinfo=UTC),
                   "ended_at": datetime(2025, 1, 15, 11, 0, tzinfo=UTC)}


@pytest.mark.parametrize(
    ("bad_line", "reason_parts"),
    [
        ("2025-01-15T12:00:00,p,r2,3600,0.1,0.5,extra", ("7 fields", "6")),   # ragged: one too many
        ("2025-01-15T12:00:00,p,r2,3600,0.1", ("5 fields", "6")),             # ragged: one too few
        ("2025-01-15T12:00:00,p,r2,abc,0.1,0.5", ("duration", "abc")),
        ("2025-01-15T12:00:00,p,r2,-5,0.1,0.5", ("duration",)),
        ("2025-01-15T12:00:00,p,r2,3600,0.1,lots", ("energy_consumed", "lots")),
        ("2025-01-15T12:00:00,p,r2,3600,0.1,-0.5", ("energy_consumed is negative", "-0.5")),
        ("noon,p,r2,3600,0.1,0.5", ("timestamp", "noon")),
    ],
)
def test_bad_row_rejected_with_its_line_others_load(tmp_path, warehouse, bad_line, reason_parts):
    path = write(tmp_path, [HEADER, "2025-01-15T12:00:00,p,r1,3600,0.1,0.5", bad_line,
                            "2025-01-15T13:00:00,p,r3,60,0.1,0.25"])
    summary = loader.ingest_file(path)
    assert (summary.rows_loaded, summary.rows_rejected) == (2, 1)
    [reject] = summary.rejects
    assert reject["line"] == 3
    for part in reason_parts:
        assert part in reject["reason"]
    assert [r["run_id"] for r in fetch("SELECT run_id FROM runs ORDER BY run_id")] == ["r1", "r3"]


def test_empty_timestamp_is_rejected_not_a_crash(tmp_path, warehouse):
    path = write(tmp_path, [HEADER, "2025-01-15T12:00:00,p,r1,3600,0.1,0.5", ",p,r2,3600,0.1,0.5"])
    summary = loader.ingest_file(path)
    assert (summary.rows_loaded, summary.rows_rejected) == (1, 1)
    assert summary.rejects[0]["line"] == 3
    assert "timestamp" in summary.rejects[0]["reason"]


def test_header_without_energy_consumed_rejects_the_file(tmp_path, warehouse):
    path = write(tmp_path, ["timestamp,project_name,run_id,duration,emissions",
                            "2025-01-15T12:00:00,p,r1,3600,0.1"])
    # not recognised as CodeCarbon on its own ...
    detected = loader.ingest_file(path)
    assert detected.status == "failed" and "--kind" in detected.error
    # ... and refused as a whole when forced
    summary = loader.ingest_file(path, kind="codecarbon")
    assert (summary.status, summary.rows_loaded, summary.rows_rejected) == ("rejected", 0, 1)
    [reject] = summary.rejects
    assert reject["line"] == 1  # the whole file, pointed at its header line
    assert "energy_consumed" in reject["reason"]
    assert count("runs") == 0


def test_blank_lines_and_bom_are_tolerated(tmp_path, warehouse):
    lines = [HEADER, "2025-01-15T12:00:00,p,r1,3600,0.1,0.5", "", "2025-01-15T13:00:00,p,r2,60,0.1,0.25"]
    path = tmp_path / "emissions.csv"
    path.write_bytes(("\ufeff" + "".join(line + "\r\n" for line in lines)).encode())
    summary = loader.ingest_file(path)
    assert (summary.kind, summary.rows_loaded, summary.rows_rejected) == ("codecarbon", 2, 0)
    assert fetch("SELECT run_id, source_line FROM runs ORDER BY run_id") == [
        {"run_id": "r1", "source_line": 2}, {"run_id": "r2", "source_line": 4}]


# --- the CLI ----------------------------------------------------------------------------------

def run_cli(db: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mlcost", *args], check=False, capture_output=True, text=True,
                          env={**os.environ, "MLCOST_DB": str(db)}, cwd=db.parent, timeout=120)


def test_cli_ingest_json_then_again(formats_dir, warehouse):
    paths = [formats_dir / "codecarbon" / name for name in (EXAMPLES, OLDEST, GREENML)]
    first = run_cli(warehouse, "ingest", "--json", *map(str, paths))
    assert first.returncode == 1, first.stderr  # two rows of the examples file were rejected
    report = json.loads(first.stdout)
    assert [entry["path"] for entry in report] == [str(p) for p in paths]
    for entry, path in zip(report, paths):
        latest, incomplete = expected_runs(path)
        assert entry["kind"] == "codecarbon"
        assert entry["status"] == "loaded"
        assert entry["rows_loaded"] == len(read_csv(path)) - len(incomplete)
        assert entry["rows_rejected"] == len(incomplete)
        assert [r["line"] for r in entry["rejects"]] == incomplete
        assert entry["runs"] == len(latest)
        assert entry["energy_kwh_total"] == pytest.approx(sum(float(r["energy_consumed"]) for r in latest.values()),
                                                          abs=1e-9)
    runs_before = count("runs")
    assert runs_before == sum(entry["runs"] for entry in report)

    second = run_cli(warehouse, "ingest", "--json", *map(str, paths))
    assert second.returncode == 0, second.stderr
    again = json.loads(second.stdout)
    assert [(e["path"], e["status"], e["rows_loaded"], e["rows_rejected"]) for e in again] == [
        (str(p), "already_loaded", 0, 0) for p in paths]
    assert count("runs") == runs_before
    assert count("loads") == 3


def test_cli_tz_option(formats_dir, warehouse):
    path = formats_dir / "codecarbon" / OLDEST
    result = run_cli(warehouse, "ingest", "--tz", "Europe/Berlin", str(path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"OK {path} [codecarbon]: 1 rows loaded, 0 rejected")
    [run] = fetch("SELECT ended_at FROM runs")
    assert run["ended_at"] == datetime(2021, 6, 29, 9, 0, 38, tzinfo=UTC)  # 11:00:38 CEST


def test_cli_unknown_tz_is_refused(formats_dir, warehouse):
    result = run_cli(warehouse, "ingest", "--tz", "Mars/Olympus", str(formats_dir / "codecarbon" / OLDEST))
    assert result.returncode == 2
    assert result.stderr.startswith("mlcost: unknown time zone 'Mars/Olympus'")
