"""What the runs speed-up (issue 23) changed, each checked against figures worked out apart from
the code under test:

- a run's cost (HourlyCost) counts the digits of price and hours only for a price from 1e5 on:
  below it the SQL pass must load the line with the cost Python's Decimal gives, above
  it a product of more than 28 digits goes to the reader, which rounds as Python does;
- Extras' agree check (price_per_hour_usd with price_per_hour, val_metric with best_val_metric)
  sends a line giving both spellings to the reader, and one giving either alone stays in SQL;
- a new warehouse gets schema.sql in one transaction: the same tables, views and macros as
  schema.sql run statement by statement, the stamp, and nothing in the derived tables; an
  existing warehouse without the stamp still stores its run energy again;
- `mlcost ingest --json` imports no tqdm (no bar is drawn).
"""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal, localcontext
from pathlib import Path

import duckdb

from ingest.formats.runs import run_summary
from tests import import_probe
from tests.test_lenient_nested import _both_ways

UTC = timezone.utc
REPO = Path(__file__).resolve().parents[1]
START = datetime(2026, 10, 15, 22, 23, 52, 123457, tzinfo=UTC)
# prices on both sides of 1e5 (at most 6 decimals, under 1e9) and spans whose hours have a
# 16-17 digit repr (seconds with microseconds over 3600)
PRICES = ("2.45", "0.000001", "99999.999999", "100000", "100000.5", "987654.321", "123456789.123456")
SPANS = (timedelta(hours=1), timedelta(seconds=11233, microseconds=123457), timedelta(seconds=7, microseconds=1),
         timedelta(hours=5, seconds=1, microseconds=999999))


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def _digits(text: str) -> int:
    """Significant digits of a decimal text (no sign or exponent), as a Decimal keeps them."""
    return len(text.replace(".", "").strip("0"))


def _python_cost(price_text: str, hours: float) -> Decimal:
    """price x hours as the reader's rule says, in plain Python: the price to 12 places, times
    Decimal(repr(hours)) in a 28-digit context, to 12 places, then to the micro-dollar."""
    with localcontext() as context:
        context.prec = 28
        product = Decimal(price_text).quantize(Decimal("1e-12")) * Decimal(repr(hours))
    with localcontext() as context:
        context.prec = 60
        product = product.quantize(Decimal("1e-12"))
    return product.quantize(Decimal("0.000001"))


def test_cost_digits_are_counted_only_from_a_price_of_1e5(tmp_path, monkeypatch):
    lines, expected, paths = [], {}, {}
    for price in PRICES:
        for span in SPANS:
            n = len(lines) + 1
            hours = span.total_seconds() / 3600
            lines.append(f'{{"run_id": "r{n}", "start_time": "{_iso(START)}", "end_time": "{_iso(START + span)}", '
                         f'"price_per_hour_usd": {price}}}')  # the price as written
            expected[f"r{n}"] = _python_cost(price, hours)
            # a product of more than 28 significant digits is not exact in SQL: the reader's
            paths[n] = "reader" if _digits(price) + _digits(repr(hours)) > 28 else "sql"
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    got, want, took = _both_ways(run_summary.RUNS, path, monkeypatch)
    assert got == want and want["rejects"] == []
    took = {n: "reader" if way == "reader" else "sql" for n, way in took.items()}  # SQL: lenient, or strict
    assert took == paths
    assert set(took.values()) == {"reader", "sql"}  # the cases reach both sides
    assert all(took[n] == "sql" for n in range(1, 4 * len(SPANS) + 1))  # every price under 1e5 stays in SQL
    assert _costs(tmp_path, path) == expected  # as loaded by `mlcost ingest`, against plain Python


def _costs(tmp_path: Path, path: Path) -> dict[str, Decimal]:
    """run_id -> cost_usd of `path` loaded by `mlcost ingest` into a fresh warehouse."""
    db = tmp_path / "costs.duckdb"
    code, _ = import_probe.imported(["ingest", "--json", str(path)], (), db, cwd=tmp_path)
    assert code in (0, 1)  # 1: a line refused or flagged
    with duckdb.connect(str(db), read_only=True) as con:
        return {run_id: Decimal(str(cost)) for run_id, cost in
                con.execute("SELECT run_id, CAST(cost_usd AS VARCHAR) FROM runs").fetchall()}


def test_both_spellings_go_to_the_reader_either_alone_stays(tmp_path, monkeypatch):
    head = f'"start_time": "{_iso(START)}", "end_time": "{_iso(START + timedelta(hours=2))}"'
    cases = [('"price_per_hour_usd": 2.5', "lenient"), ('"price_per_hour": 2.5', "lenient"),
             ('"price_per_hour_usd": 2.5, "price_per_hour": 2.5', "reader"),
             ('"price_per_hour": 2.5, "price_per_hour_usd": 3', "reader"),
             ('"price_per_hour_usd": 2.5, "val_metric": 0.5', "lenient"),
             ('"price_per_hour_usd": 2.5, "best_val_metric": 0.5', "lenient"),
             ('"price_per_hour_usd": 2.5, "val_metric": 0.5, "best_val_metric": 0.7', "reader"),
             # the other spelling as a text, not a key: looked for as text, so the reader's (as before)
             ('"price_per_hour_usd": 2.5, "model": "price_per_hour"', "reader"),
             # ends like the other spelling (looked for first) but is not it: SQL's
             ('"price_per_hour_usd": 2.5, "model": "x_price_per_hour"', "lenient")]
    lines = [f'{{"run_id": "r{n}", {head}, {extra}}}' for n, (extra, _) in enumerate(cases)]
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    got, want, took = _both_ways(run_summary.RUNS, path, monkeypatch)
    assert got == want
    assert took == {n + 1: way for n, (_, way) in enumerate(cases)}
    # every line loads, priced from the price it gives (2 hours)
    costs = _costs(tmp_path, path)
    assert costs["r0"] == costs["r1"] == Decimal("5.000000")


def _objects(con) -> dict[str, list]:
    """The database's tables (with their columns), views and macros, by name."""
    db = "current_database()"
    return {
        "tables": con.execute(f"SELECT table_name, list(column_name || ' ' || data_type ORDER BY column_index) FROM "
                              f"duckdb_columns() WHERE database_name = {db} AND NOT internal GROUP BY table_name "
                              "ORDER BY table_name").fetchall(),
        "views": con.execute(f"SELECT view_name FROM duckdb_views() WHERE database_name = {db} AND NOT internal "
                             "ORDER BY 1").fetchall(),
        "macros": con.execute(f"SELECT DISTINCT function_name FROM duckdb_functions() WHERE database_name = {db} "
                              "AND function_type IN ('macro', 'table_macro') AND NOT internal ORDER BY 1").fetchall(),
    }


def test_a_new_warehouse_gets_the_whole_schema_at_once(tmp_path):
    from importlib import resources

    from ingest.engine import wh_connection

    text = resources.files("ingest").joinpath("schema.sql").read_text()
    reference = tmp_path / "reference.duckdb"
    with duckdb.connect(str(reference)) as con:  # schema.sql statement by statement, each committed
        for statement in con.extract_statements(text):
            con.execute(statement.query)
        want = _objects(con)
    made = tmp_path / "made.duckdb"
    with duckdb.connect(str(made)) as con:
        wh_connection._put_schema(con)
        got = _objects(con)
        assert con.execute("SELECT count(*) FROM schema_stamp").fetchone()[0] == 1
        derived = ("run_gpu_time", "gpu_minutes_allocated", "run_gpu_energy", "run_gpu_days", "gpu_days")
        assert [con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in derived] == [0] * len(derived)
    assert got == want and len(want["tables"]) > 20 and want["views"] and want["macros"]


def test_a_warehouse_without_its_stamp_stores_its_run_energy_again(tmp_path):
    """Not new (it has tables): the run energy is stored again, as before. The sample runs and
    GPU traces loaded, their per-run GPU time deleted by hand with the stamp: putting the schema
    again brings back as many rows as the loads stored."""
    from ingest.engine import wh_connection

    db = tmp_path / "w.duckdb"
    traces = sorted(str(p) for p in (REPO / "sample_data" / "gpu_traces").iterdir())
    for files in ([str(REPO / "sample_data" / "runs.jsonl")], traces):
        code, _ = import_probe.imported(["ingest", "--json", *files], (), db, cwd=tmp_path)
        assert code in (0, 1)
    with duckdb.connect(str(db)) as con:
        stored = con.execute("SELECT count(*) FROM run_gpu_time").fetchone()[0]
        assert stored > 0
        con.execute("DELETE FROM run_gpu_time")
        con.execute("DELETE FROM schema_stamp")
        wh_connection._put_schema(con)
        assert con.execute("SELECT count(*) FROM run_gpu_time").fetchone()[0] == stored
        assert con.execute("SELECT count(*) FROM schema_stamp").fetchone()[0] == 1


def test_ingest_json_imports_no_bar(tmp_path):
    line = json.dumps({"run_id": "r", "start_time": "2026-10-01T00:00:00Z", "end_time": "2026-10-01T01:00:00Z",
                       "price_per_hour_usd": 1})
    (tmp_path / "runs.jsonl").write_text(line + "\n")
    code, imported = import_probe.imported(["ingest", "--json", "runs.jsonl"], ("tqdm", "ingest.formats.runs.run_summary"),
                                           tmp_path / "w.duckdb", cwd=tmp_path)
    assert code == 0 and imported == ["ingest.formats.runs.run_summary"]
