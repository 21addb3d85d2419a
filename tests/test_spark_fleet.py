"""The fleet dataset at a small scale through both paths, end to end as a user runs them (issue 24):

- embedded: `mlcost ingest` of the fleet's files into a DuckDB file;
- lake: `mlcost load --lake` of the same files (the real writer and ledger), then the Spark entry
  point `python -m mlcost.spark_job derive --lake ... --master local[2]`.

The derived tables Spark wrote equal the embedded warehouse's row for row (idle GPU-hours by GPU
and day, run energy, per-minute rollups, the allocation by day with exact decimals), the allocation
by month and team equals the Costs page's showback on the embedded file to the cent, and
`mlcost allocation --json` reads the same figures from the lake as from the file.
"""
from __future__ import annotations

import csv
import json
import math
import os
import shutil
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest

from tests.conftest import REPO_ROOT, need_spark

sys.path.insert(0, str(REPO_ROOT / "bench"))
import fleet_data  # noqa: E402  (bench/ is not a package)

SCALE = 0.01  # 16 hosts x 4 GPUs for ~7 hours at 10 s, a 10,000-line bill, 1,000 runs, 5,000 windows
DOUBLE_DIGITS = 9  # DOUBLE sums in another order differ in the last bits


def _mlcost(args: list[str], env: dict, cwd: Path) -> str:
    done = subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=900, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> dict:
    need_spark()
    work = tmp_path_factory.mktemp("fleet")
    manifest = fleet_data.generate(work / "data", SCALE)
    files = [str(work / "data" / manifest["files"][kind]["path"]) for kind in ("traces", "bill", "runs", "serving")]
    base = {k: v for k, v in os.environ.items() if k not in ("MLCOST_LAKE", "MLCOST_DB")}
    embedded = {**base, "MLCOST_DB": str(work / "embedded.duckdb")}
    lake = work / "lake"
    over_lake = {**base, "MLCOST_DB": str(work / "local.duckdb"), "MLCOST_LAKE": str(lake)}
    _mlcost(["mlcost", "ingest", *files], embedded, work)
    _mlcost(["mlcost", "load", "--lake", str(lake), *files], {**over_lake, "MLCOST_LAKE": ""}, work)
    _mlcost(["mlcost.spark_job", "derive", "--lake", str(lake), "--master", "local[2]"], over_lake, work)
    return {"work": work, "lake": lake, "db": work / "embedded.duckdb", "embedded": embedded, "over_lake": over_lake}


@pytest.fixture(scope="module")
def both(fleet: dict) -> duckdb.DuckDBPyConnection:
    """The derived tables Spark wrote (as views through derived/_current.json, written last) and the
    embedded warehouse attached as `wh`."""
    pointer = json.loads((fleet["lake"] / "derived" / "_current.json").read_text())
    assert pointer["engine"].startswith("spark")
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    for table, folder in pointer["tables"].items():
        con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{fleet['lake'] / folder}/*.parquet', "
                    "hive_partitioning = false)")
    copy = fleet["work"] / "embedded-copy.duckdb"  # a handle on the file itself would lock out the product's
    shutil.copyfile(fleet["db"], copy)
    con.execute(f"ATTACH '{copy}' AS wh (READ_ONLY)")
    return con


def _rows(con: duckdb.DuckDBPyConnection, table: str, schema: str) -> list[tuple]:
    """Every row of `table`, sorted with DOUBLEs rounded to DOUBLE_DIGITS significant digits (the
    order only: _same compares the values within a relative 1e-9); a tag map as its sorted key=value
    pairs (Parquet keeps a map's entries in the order the engine wrote them)."""
    columns = [c for (c,) in con.execute(f"SELECT column_name FROM (DESCRIBE wh.{table})").fetchall()]
    picked = ", ".join("list_sort(list_transform(map_entries(tags), lambda e: e.key || '=' || e.value))"
                       if c == "tags" else c for c in columns)

    def order(row: tuple) -> str:
        return repr(tuple(float(f"{v:.{DOUBLE_DIGITS}g}") if isinstance(v, float) else v for v in row))
    return sorted(con.execute(f"SELECT {picked} FROM {schema}{table}").fetchall(), key=order)


@pytest.mark.parametrize("table, at_least", [
    ("gpu_days", 64),             # idle GPU-hours by GPU and day
    ("run_gpu_energy", 50),       # run energy
    ("gpu_minutes", 20_000),      # per-minute rollups
    ("run_gpu_time", 20_000),
    ("billing_line_runs", 1_000),
    ("bill_allocation_days", 1_000),  # the allocation by day and key, DECIMAL(38, 12) exact
])
def test_spark_derives_the_embedded_tables_row_for_row(both: duckdb.DuckDBPyConnection, table: str,
                                                        at_least: int) -> None:
    stored = _rows(both, table, "wh.")
    assert len(stored) >= at_least
    _same(_rows(both, table, ""), stored, both.execute(f"SELECT * FROM wh.{table} LIMIT 0").description)


def _same(found: list[tuple], stored: list[tuple], description) -> None:
    """Row for row equal: exact but for DOUBLEs, which may differ in their last bits (sums in another
    order) and so are compared within a relative 1e-9."""
    assert len(found) == len(stored)
    for got, want in zip(found, stored):
        for column, a, b in zip(description, got, want):
            if isinstance(a, float) and isinstance(b, float):
                assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), (column[0], got, want)
            else:
                assert a == b, (column[0], got, want)


def test_spark_allocation_by_month_and_team_is_the_costs_pages_to_the_cent(both, fleet, monkeypatch) -> None:
    from tests.test_spark_derived import _team_figures, _team_found

    months = [m for (m,) in both.execute("SELECT DISTINCT month FROM wh.bill_allocation_days").fetchall()]
    expected = _team_figures(fleet["db"], months, monkeypatch)
    assert len(expected) > 5
    assert _team_found(both) == expected


def test_the_lake_reads_the_same_allocation_as_the_file(fleet: dict) -> None:
    """`mlcost allocation --json` over the Spark-derived lake and over the embedded file."""
    args = ["mlcost", "allocation", "--month", "2026-10", "--json"]
    from_file = json.loads(_mlcost(args, fleet["embedded"], fleet["work"]))
    from_lake = json.loads(_mlcost(args, fleet["over_lake"], fleet["work"]))
    assert from_file == from_lake
    billed: dict[str, Decimal] = {}  # the bill's EffectiveCost per currency, read with csv
    with open(fleet["work"] / "data" / "focus_2026-10.csv", newline="") as handle:
        for line in csv.DictReader(handle):
            billed[line["BillingCurrency"]] = billed.get(line["BillingCurrency"], Decimal(0)) + Decimal(line["EffectiveCost"])
    assert {c: Decimal(v["billed"]) for c, v in from_lake["currencies"].items()} == billed
