"""The derived tables written once (ingest/derived/sql) give the embedded warehouse's figures on
both engines (issue 24): the sample warehouse's base tables exported to a lake (tests/lake_export.py,
plus a load that never committed), then
- DuckDB running derived_sql over the lake gives the warehouse's stored derived tables row for row;
- PySpark local[2] running `mlcost-spark derive` over the lake gives, row for row: idle GPU-hours by
  GPU and day (gpu_days), run energy (run_gpu_energy), the stored allocation (bill_allocation_days,
  exact decimals), the allocation by month, team and bucket to the cent against
  metrics/allocation.figures(), and budget burn by day against metrics/queries.budget_daily_billed().

Spark tests skip when pyspark or java is missing locally, and fail under CI=true (.ci/run installs both).
"""
from __future__ import annotations

import calendar
import json
import re
from datetime import date
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest

from ingest.derived import sql as derived_sql
from ingest.settings import config
from tests import lake_export
from tests.conftest import SAMPLE_DIR, need_spark

CENT = Decimal("0.01")
DOUBLE_DIGITS = 9  # DOUBLE sums in another order differ in the last bits: compared to 9 significant digits


@pytest.fixture(scope="module")
def month_db(demo_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """October 2026 of the sample (runs, traces, bill lines, serving windows that start in it), its
    derived tables computed by the embedded path: small enough for Spark local[2] in CI."""
    return lake_export.month_warehouse(demo_db, tmp_path_factory.mktemp("month") / "october.duckdb",
                                       "2026-10-01", "2026-11-01")


def _lake(db: Path, root: Path) -> Path:
    """`db`'s base tables as a committed load, and its bill again as a load that never committed (no
    ledger entry): readers must not see it."""
    lake_export.export(db, root)
    lake_export.export(db, root, load_id=2, tables={"billing_lines": "charge_period_start"},
                       uncommitted=True)
    return root


@pytest.fixture(scope="module")
def lake(demo_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The whole sample as a lake."""
    return _lake(demo_db, tmp_path_factory.mktemp("lake"))


@pytest.fixture(scope="module")
def month_lake(month_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _lake(month_db, tmp_path_factory.mktemp("month_lake"))


def _settings() -> tuple[derived_sql.Settings, tuple]:
    """The settings the sample warehouse was loaded with (the defaults) and the sample's budgets."""
    return derived_sql.Settings.of(config.load()), config.load(SAMPLE_DIR / "mlcost.toml").budgets


def _rows(con: duckdb.DuckDBPyConnection, sql: str) -> list[tuple]:
    """Sorted rows, DOUBLEs to DOUBLE_DIGITS significant digits."""
    def norm(value):
        return float(f"{value:.{DOUBLE_DIGITS}g}") if isinstance(value, float) else value
    return sorted((tuple(norm(v) for v in row) for row in con.execute(sql).fetchall()), key=repr)


STORED = ("gpu_minutes", "gpu_gaps", "run_gpu_time", "gpu_minutes_allocated", "run_gpu_days", "gpu_days",
          "run_gpu_energy", "billing_line_runs", "bill_allocation_days")


def test_duckdb_over_the_lake_gives_the_stored_tables(lake: Path, demo_db: Path) -> None:
    settings, _ = _settings()
    con = lake_export.duckdb_over(lake)
    names = derived_sql.run_duckdb(con, settings)
    assert set(STORED) <= set(names)
    con.execute(f"ATTACH '{demo_db}' AS wh (READ_ONLY)")
    for table in STORED:
        stored = _rows(con, f"SELECT * FROM wh.{table}")
        assert stored, table  # the sample has rows of every derived table
        assert _rows(con, f"SELECT * FROM temp.main.{table}") == stored, table


def test_duckdb_over_the_lake_gives_the_pages_team_split_and_budget_burn(lake: Path, demo_db: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The allocation by month and team (to the cent) and budget burn by day of derived_sql on
    DuckDB, against what the Costs and Budgets pages compute on the sample warehouse."""
    settings, budgets = _settings()
    con = lake_export.duckdb_over(lake)
    derived_sql.run_duckdb(con, settings, budgets)
    con.execute(f"ATTACH '{demo_db}' AS wh (READ_ONLY)")
    months = [m for (m,) in con.execute("SELECT DISTINCT month FROM wh.bill_allocation_days").fetchall()]
    assert len(months) >= 3
    assert _team_found(con) == _team_figures(demo_db, months, monkeypatch)
    burn = _burn_figures(demo_db, con, monkeypatch)
    assert len(burn) > 100
    assert _burn_found(con) == burn


def test_the_spark_text_of_the_allocation() -> None:
    """Every MATERIALIZED CTE of the allocation is its own stage, the query reads the stages by
    name, and no DuckDB-only function is left in any stage."""
    from ingest.derived.sql import spark as spark_sql

    settings, _ = _settings()
    sql = derived_sql.allocation_month(date(2026, 10, 1), settings)
    marked = sql.count("AS MATERIALIZED")
    stages = spark_sql.staged(sql, "m_")
    assert marked >= 5 and len(stages) == marked + 1 and stages[-1][0] is None
    for name, text in stages:
        for duckdb_only in ("MATERIALIZED", "EPOCH_US(", "MAKE_TIMESTAMPTZ(", "TO_SECONDS(", "REGEXP_ESCAPE(",
                            "UNNEST(", "GENERATE_SERIES(", "LIST_CONTAINS(", "QUALIFY", "query_table"):
            assert duckdb_only.lower() not in text.lower(), (name, duckdb_only)
    # the query reads the stages by name (the bill's lines themselves are not one: each reader scans
    # them for its own columns, as in DuckDB, where `lines` is NOT MATERIALIZED)
    assert {"m_pieces", "m_run_lines", "m_node_lines"} <= set(re.findall(r"FROM (m_\w+)", stages[-1][1]))
    assert "m_lines" not in [name for name, _ in stages]


def test_an_uncommitted_load_is_not_read(lake: Path, demo_db: Path) -> None:
    assert any(p.name.startswith("2-") for p in (lake / "tables" / "billing_lines").rglob("*.parquet"))
    con = lake_export.duckdb_over(lake)
    lines = con.execute("SELECT count(*) FROM billing_lines").fetchone()[0]
    with duckdb.connect(str(demo_db), read_only=True) as wh:
        assert lines == wh.execute("SELECT count(*) FROM billing_lines").fetchone()[0]


# --- the Spark path ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def spark():
    need_spark()
    from mlcost import spark_job

    session = spark_job.session("local[2]", "1g")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def derived(spark, month_lake: Path, month_db: Path) -> duckdb.DuckDBPyConnection:
    """The Spark job run over the month's lake; a DuckDB connection with each derived table it wrote
    as a view (through the pointer written last) and the month's warehouse attached as `wh`."""
    from mlcost import spark_job

    settings, budgets = _settings()
    spark_job.derive(spark, str(month_lake), settings, budgets)
    pointer = json.loads((month_lake / "derived" / "_current.json").read_text())
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    for table, folder in pointer["tables"].items():
        con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{month_lake / folder}/*.parquet', "
                    "hive_partitioning = false)")
    con.execute(f"ATTACH '{month_db}' AS wh (READ_ONLY)")
    return con


def test_spark_idle_gpu_hours_by_gpu_and_day(derived: duckdb.DuckDBPyConnection) -> None:
    query = ("SELECT host, gpu_index, day, idle_s / 3600 AS idle_gpu_hours, allocated_idle_s / 3600, "
             "unallocated_idle_s / 3600, coverage_s, busy_s, energy_kwh, gpu_uuid, gpu_name FROM {}")
    stored = _rows(derived, query.format("wh.gpu_days"))
    assert len(stored) > 100
    assert _rows(derived, query.format("gpu_days")) == stored


def test_spark_run_energy(derived: duckdb.DuckDBPyConnection) -> None:
    stored = _rows(derived, "SELECT * FROM wh.run_gpu_energy")
    assert len(stored) > 20
    assert _rows(derived, "SELECT * FROM run_gpu_energy") == stored


def test_spark_allocation_days_exact(derived: duckdb.DuckDBPyConnection) -> None:
    """Every stored allocation row, its DECIMAL(38, 12) cost to the last digit."""
    columns = ("month, day, billing_currency, bucket, rule, run_id, host, service, model_version, "
               "CAST(tags AS VARCHAR), provider, charge_category, service_name, instance_type, line_key, "
               "effective_cost, gpu_hours, lines")
    stored = _rows(derived, f"SELECT {columns} FROM wh.bill_allocation_days")
    assert {row[3] for row in stored} >= {"training", "serving", "idle_gpu", "unallocated", "shared"}
    assert _rows(derived, f"SELECT {columns} FROM bill_allocation_days") == stored
    assert derived.execute("SELECT typeof(effective_cost) FROM bill_allocation_days LIMIT 1").fetchone()[0] \
        == "DECIMAL(38,12)"


def _team_figures(db: Path, months: list[date], monkeypatch: pytest.MonkeyPatch) -> dict:
    """(month, currency, team, bucket): allocated cost to the cent, as the Costs page's showback by
    team computes it on warehouse `db` (metrics/allocation.figures, key 'team')."""
    from metrics import allocation

    monkeypatch.setenv("MLCOST_DB", str(db))
    rules = allocation.Rules.of(config.load())
    expected = {}
    for month in months:
        end = date.fromordinal(month.replace(day=calendar.monthrange(month.year, month.month)[1]).toordinal() + 1)
        rows = allocation.figures(month, end, "team", rules)
        for row in rows[rows["split"] == "key"].itertuples():
            expected[(month, row.billing_currency, row.key_value, row.bucket)] = Decimal(row.effective_cost).quantize(CENT)
    return expected


def _team_found(con: duckdb.DuckDBPyConnection) -> dict:
    return {(m, c, t, b): Decimal(v).quantize(CENT) for m, c, t, b, v in con.execute(
        "SELECT month, billing_currency, team, bucket, effective_cost FROM allocation_month_team").fetchall()}


def _burn_figures(db: Path, con: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """Per budget and day: billed spend and other-currency lines, as the Budgets page reads them on
    warehouse `db` (metrics/queries.budget_daily_billed), over the bill's days."""
    from metrics.queries import budget_daily_billed

    monkeypatch.setenv("MLCOST_DB", str(db))
    settings, budgets = _settings()
    first, last = con.execute("SELECT min(charge_period_start AT TIME ZONE 'UTC')::DATE, "
                              "max(charge_period_start AT TIME ZONE 'UTC')::DATE FROM wh.billing_lines").fetchone()
    spans = [(b, first, date.fromordinal(last.toordinal() + 1)) for b in budgets]
    frame = budget_daily_billed(spans, (settings.project_tag, settings.team_tag))
    return sorted((int(r.budget_no), r.day, Decimal(r.spend), int(r.other_currency_lines)) for r in frame.itertuples())


def _burn_found(con: duckdb.DuckDBPyConnection) -> list[tuple]:
    return sorted((int(n), d, Decimal(s), int(o)) for n, d, s, o in con.execute(
        "SELECT budget_no, day, spend, other_currency_lines FROM budget_burn_days").fetchall())


def test_spark_allocation_by_month_and_team_to_the_cent(derived: duckdb.DuckDBPyConnection, month_db: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    months = [m for (m,) in derived.execute("SELECT DISTINCT month FROM wh.bill_allocation_days").fetchall()]
    expected = _team_figures(month_db, months, monkeypatch)
    assert len(expected) > 10
    assert _team_found(derived) == expected


def test_spark_budget_burn_by_day(derived: duckdb.DuckDBPyConnection, month_db: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    expected = _burn_figures(month_db, derived, monkeypatch)
    assert len(expected) > 30
    assert _burn_found(derived) == expected
