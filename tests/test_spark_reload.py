"""A changed file loaded again: the latest load wins per key on every engine (issue 24).

October's bill, one node's October GPU trace, the serving windows and the runs are loaded, then
the bill, the trace and the windows change at the same paths and are loaded again:
- the bill restates one line (same x_LineItemId, new amounts) and leaves another out (its line
  stays, as in the embedded warehouse: a line is replaced by key, never deleted by absence);
- the trace's samples of one GPU over six hours change (utilisation and power to idle levels);
- a serving window comes again with another start and length, overlapping the old one (whose
  line is gone from the file): the old window gives way to the overlapping one.

The same two loads go into an embedded DuckDB file (`mlcost ingest` twice) and into a lake folder
(`mlcost load --lake` twice); then the Spark job (`python -m mlcost.spark_job derive`) and
`mlcost derive --lake` compute the derived tables from the lake. Both must equal the embedded
file's row for row: idle GPU-hours by GPU and day, run energy, the allocation by day (exact
decimals), by month, team and bucket to the cent (the Costs page's showback), budget burn by day
(the Budgets page's query). Independently of the program: the allocation adds up to the bill as
plain Python reads the two files (the second file's lines, plus the line only the first had).
"""
from __future__ import annotations

import csv
import gzip
import io
import json
import os
import shutil
import subprocess
import sys
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest

from ingest.settings import config
from tests.conftest import REPO_ROOT, SAMPLE_DIR, need_spark
from tests.test_spark_derived import _burn_figures, _burn_found, _team_figures, _team_found
from tests.test_spark_fleet import _rows, _same

# Jobs imported from Slurm (no cost of their own): 3001 on the changed node (an A100, priced in the
# catalog below), 3002 on the other node (an L4, the default catalog's price), 3003 on an untraced node.
SACCT = """JobID|JobName|User|Account|Partition|AllocTRES|Start|End|Elapsed|State|NodeList
3001|finetune|alice|nlp|gpu|cpu=16,gres/gpu=2,node=1|2026-10-14T05:00:00|2026-10-14T09:00:00|04:00:00|COMPLETED|gpu-node-1
3002|eval|bob|cv|gpu|cpu=8,gres/gpu=1,node=1|2026-10-15T10:00:00|2026-10-15T12:00:00|02:00:00|COMPLETED|gpu-node-2
3003|prep|carol|data|gpu|cpu=8,gres/gpu=1,node=1|2026-10-16T10:00:00|2026-10-16T11:00:00|01:00:00|COMPLETED|gpu-node-9
"""
A100_USD_PER_HOUR = Decimal("4.1")
BILL = "focus_2026-10.csv"
TRACE = "gpu-node-1_2026-10.csv"
OTHER_TRACE = "gpu-node-2_2026-10.csv.gz"  # loaded twice unchanged
WINDOWS = "serving_windows.jsonl"
RESTATED, REMOVED = "li-202610-000002", "li-202610-000003"  # x_LineItemId of the changed bill lines
CHANGED_GPU, CHANGED_FROM, CHANGED_HOURS = "3", datetime(2026, 10, 14, 6), 6


def _bill_lines() -> tuple[list[str], list[dict]]:
    with gzip.open(SAMPLE_DIR / "billing" / f"{BILL}.gz", "rt", newline="") as source:
        reader = csv.DictReader(source)
        return list(reader.fieldnames or []), list(reader)


def _write_bill(path: Path, header: list[str], lines: list[dict]) -> None:
    out = io.StringIO()
    writer = csv.DictWriter(out, header, lineterminator="\n")
    writer.writeheader()
    writer.writerows(lines)
    path.write_text(out.getvalue())


def _second_bill(lines: list[dict]) -> list[dict]:
    """The bill again: RESTATED with its costs raised by 7.5, REMOVED left out."""
    changed = []
    for line in lines:
        if line["x_LineItemId"] == REMOVED:
            continue
        if line["x_LineItemId"] == RESTATED:
            line = {**line, **{c: str(Decimal(line[c]) + Decimal("7.5")) for c in ("BilledCost", "EffectiveCost")}}
        changed.append(line)
    return changed


def _second_trace(text: str) -> str:
    """The trace again: GPU CHANGED_GPU's samples over CHANGED_HOURS from CHANGED_FROM idle (0 %, 55 W)."""
    header, *rows = text.splitlines()
    columns = header.split(",")
    util, power, index = columns.index("gpu_util_pct"), columns.index("power_w"), columns.index("gpu_index")
    end = CHANGED_FROM + timedelta(hours=CHANGED_HOURS)
    out, changed = [header], 0
    for row in rows:
        fields = row.split(",")
        at = datetime.fromisoformat(fields[0].replace("Z", ""))
        if fields[index] == CHANGED_GPU and CHANGED_FROM <= at < end:
            fields[util], fields[power] = "0", "55.0"
            changed += 1
        out.append(",".join(fields))
    assert changed > 100
    return "\n".join(out) + "\n"


def _windows() -> list[dict]:
    with gzip.open(SAMPLE_DIR / "serving_windows.jsonl.gz", "rt") as source:
        return [json.loads(line) for line in source if line.strip()]


def _second_windows(windows: list[dict]) -> tuple[list[dict], dict]:
    """The windows again: the first October window of a service comes as one starting 15 minutes
    later and lasting 45 (overlapping it, ending where the next one starts), with other counts;
    its own line is gone."""
    old = next(w for w in windows if w["window_start"].startswith("2026-10-0"))
    start = datetime.fromisoformat(old["window_start"].replace("Z", "+00:00")) + timedelta(minutes=15)
    new = {**old, "window_start": start.isoformat().replace("+00:00", "Z"),
           "window_end": (start + timedelta(minutes=45)).isoformat().replace("+00:00", "Z"),
           "requests_total": old["requests_total"] * 2, "requests_success": old["requests_success"] * 2,
           "requests_error": old["requests_error"] * 2}
    return [new if w is old else w for w in windows], old


def _cli(args: list[str], env: dict) -> str:
    done = subprocess.run([sys.executable, "-m", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=900, env=env, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def reloaded(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Both paths after the two loads; the Spark job's and `mlcost derive`'s generations."""
    need_spark()
    work = tmp_path_factory.mktemp("reload")
    data = work / "in"
    data.mkdir()
    header, lines = _bill_lines()
    with gzip.open(SAMPLE_DIR / "gpu_traces" / f"{TRACE}.gz", "rt") as source:
        trace = source.read()
    windows = _windows()
    shutil.copy(SAMPLE_DIR / "runs.jsonl", data / "runs.jsonl")
    shutil.copy(SAMPLE_DIR / "gpu_traces" / OTHER_TRACE, data / OTHER_TRACE)
    (data / "sacct.txt").write_text(SACCT)
    settings = work / "mlcost.toml"  # the sample's (its budgets) and a catalog price for the A100s
    settings.write_text((SAMPLE_DIR / "mlcost.toml").read_text()
                        + f'\n[prices.gpu_usd_per_hour]\n"A100-SXM4-40GB" = {A100_USD_PER_HOUR}\n')
    base = {k: v for k, v in os.environ.items() if k not in ("MLCOST_LAKE", "MLCOST_DB")}
    base.update({"PYTHONPATH": str(REPO_ROOT), "MLCOST_CONFIG": str(settings)})
    embedded = {**base, "MLCOST_DB": str(work / "embedded.duckdb")}
    lake = work / "lake"
    files = [str(data / name) for name in (BILL, TRACE, OTHER_TRACE, WINDOWS, "runs.jsonl", "sacct.txt")]

    def load_both() -> None:
        _cli(["mlcost", "ingest", *files], embedded)
        _cli(["mlcost", "load", "--lake", str(lake), *files], {**base, "MLCOST_DB": str(work / "unused.duckdb")})

    _write_bill(data / BILL, header, lines)
    (data / TRACE).write_text(trace)
    (data / WINDOWS).write_text("".join(json.dumps(w) + "\n" for w in windows))
    load_both()
    second, old_window = _second_windows(windows)
    _write_bill(data / BILL, header, _second_bill([dict(line) for line in lines]))
    (data / TRACE).write_text(_second_trace(trace))
    (data / WINDOWS).write_text("".join(json.dumps(w) + "\n" for w in second))
    load_both()

    over_lake = {**base, "MLCOST_LAKE": str(lake), "MLCOST_DB": str(work / "local.duckdb")}
    _cli(["mlcost.spark_job", "derive", "--lake", str(lake), "--master", "local[2]"], over_lake)
    spark_pointer = json.loads((lake / "derived" / "_current.json").read_text())
    _cli(["mlcost", "derive", "--lake", str(lake)], over_lake)
    duckdb_pointer = json.loads((lake / "derived" / "_current.json").read_text())
    return {"work": work, "lake": lake, "db": work / "embedded.duckdb", "lines": lines, "settings": settings,
            "old_window": old_window, "pointers": {"spark": spark_pointer, "duckdb": duckdb_pointer}}


@pytest.fixture(scope="module", params=["spark", "duckdb"])
def both(request: pytest.FixtureRequest, reloaded: dict) -> duckdb.DuckDBPyConnection:
    """One engine's derived tables (views over the generation its pointer named) and the embedded
    warehouse attached as `wh`."""
    pointer = reloaded["pointers"][request.param]
    assert pointer["engine"].startswith(request.param)
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    for table, folder in pointer["tables"].items():
        listed = folder if isinstance(folder, list) else [f"{folder}/*.parquet"]
        files = [str(reloaded["lake"] / f) for f in listed]
        con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet({files!r}, hive_partitioning = false)")
    copy = reloaded["work"] / f"embedded-{request.param}.duckdb"  # a handle on the file would lock out others
    shutil.copyfile(reloaded["db"], copy)
    con.execute(f"ATTACH '{copy}' AS wh (READ_ONLY)")
    return con


def test_the_embedded_warehouse_kept_the_latest_rows(reloaded: dict) -> None:
    """What the comparison rests on, from plain Python over the files: the restated line's new
    amount, the removed line still there, the old window gone, the new one there."""
    with duckdb.connect(str(reloaded["db"]), read_only=True) as con:
        costs = dict(con.execute("SELECT split_part(line_key, '|id|', 2), effective_cost FROM billing_lines").fetchall())
        old = reloaded["old_window"]
        starts = [str(s) for (s,) in con.execute(
            "SELECT strftime(window_start AT TIME ZONE 'UTC', '%Y-%m-%dT%H:%M') FROM serving_windows "
            "WHERE service = ? AND model_version = ? AND host = ? AND window_start < ?::TIMESTAMPTZ + INTERVAL 2 HOUR "
            "AND window_end > ?::TIMESTAMPTZ", [old["service"], old["model_version"], old["host"],
                                                old["window_start"], old["window_start"]]).fetchall()]
    first = {line["x_LineItemId"]: Decimal(line["EffectiveCost"]) for line in reloaded["lines"]}
    assert costs[RESTATED] == first[RESTATED] + Decimal("7.5")
    assert costs[REMOVED] == first[REMOVED]
    assert len(costs) == len(first)
    assert old["window_start"][:16] not in starts and any(s.endswith(":15") for s in starts)


@pytest.mark.parametrize("table, at_least", [
    ("gpu_days", 100),              # idle GPU-hours by GPU and day
    ("run_gpu_energy", 10),         # run energy
    ("bill_allocation_days", 300),  # the allocation by day and key, DECIMAL(38, 12) exact
    ("billing_line_runs", 10),
])
def test_the_derived_tables_are_the_embedded_warehouses(both: duckdb.DuckDBPyConnection, table: str,
                                                         at_least: int) -> None:
    stored = _rows(both, table, "wh.")
    assert len(stored) >= at_least
    _same(_rows(both, table, ""), stored, both.execute(f"SELECT * FROM wh.{table} LIMIT 0").description)


def test_the_allocation_adds_up_to_the_bill_as_plain_python_reads_it(both: duckdb.DuckDBPyConnection,
                                                                      reloaded: dict) -> None:
    """Per currency: the second file's EffectiveCost, plus the line only the first file had."""
    expected: dict[str, Decimal] = {}
    kept = _second_bill([dict(line) for line in reloaded["lines"]])
    kept += [line for line in reloaded["lines"] if line["x_LineItemId"] == REMOVED]
    for line in kept:
        expected[line["BillingCurrency"]] = expected.get(line["BillingCurrency"], Decimal(0)) + Decimal(line["EffectiveCost"])
    found = dict(both.execute("SELECT billing_currency, sum(effective_cost) FROM bill_allocation_days "
                              "GROUP BY billing_currency").fetchall())
    assert found == expected


def test_idle_gpu_hours_see_the_changed_samples(both: duckdb.DuckDBPyConnection) -> None:
    """The changed GPU's day holds at least the six idle hours the second trace gave it."""
    idle = both.execute("SELECT idle_s / 3600 FROM gpu_days WHERE host = 'gpu-node-1' AND gpu_index = ? "
                        "AND day = ?", [int(CHANGED_GPU), CHANGED_FROM.date()]).fetchone()[0]
    assert idle >= CHANGED_HOURS - 0.1


def test_allocation_by_month_and_team_to_the_cent(both: duckdb.DuckDBPyConnection, reloaded: dict,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLCOST_CONFIG", str(reloaded["settings"]))
    months = [m for (m,) in both.execute("SELECT DISTINCT month FROM wh.bill_allocation_days").fetchall()]
    expected = _team_figures(reloaded["db"], months, monkeypatch)
    assert len(expected) > 5
    assert _team_found(both) == expected


def test_budget_burn_by_day(both: duckdb.DuckDBPyConnection, reloaded: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLCOST_CONFIG", str(reloaded["settings"]))
    expected = _burn_figures(reloaded["db"], both, monkeypatch)
    assert len(expected) > 20
    assert _burn_found(both) == expected


def test_run_cost_estimates_are_the_embedded_runs_costs(both: duckdb.DuckDBPyConnection, reloaded: dict) -> None:
    """The imported runs' cost columns the lake keeps apart (run_cost_estimates, applied by the runs
    view) equal those the embedded warehouse set on its runs (run_trace_costs.refresh)."""
    columns = "run_id, cost_usd, price_per_hour_usd, cost_source, flags"
    stored = sorted(both.execute(f"SELECT {columns} FROM wh.runs WHERE source_kind = 'slurm'").fetchall())
    found = sorted(both.execute(f"SELECT {columns} FROM run_cost_estimates").fetchall())
    assert [row[0] for row in stored] == ["slurm-3001", "slurm-3002", "slurm-3003"]
    assert found == stored
    costs, settings = {row[0]: row for row in found}, reloaded["settings"]
    # 2 of gpu-node-1's 8 traced GPUs for 4 h: a quarter of each GPU, 8 GPU-hours at the catalog price
    assert costs["slurm-3001"][1:4:2] == (A100_USD_PER_HOUR * 8, "gpu_traces_catalog")
    # 1 GPU of gpu-node-2 for 2 h: 2 GPU-hours of an L4 at the default catalog's price
    assert costs["slurm-3002"][1] == config.load(settings).prices.gpu("NVIDIA L4") * 2
    assert costs["slurm-3003"][1] is None  # no traces of its node: no estimate
