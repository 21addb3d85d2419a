"""The read side of a lake: on a warehouse connection, temp views named like the warehouse's
tables over the lake's committed files, so metrics/ and the pages run unchanged.

Temp objects come first in DuckDB's name lookup, so every query (and every view of
ingest/schema.sql, which binds its tables by name when queried) reads the lake; the tables the
app writes while it reads (layout.LOCAL: alerts, snoozes, decisions) are not shadowed and stay
in the local DuckDB file.

- loads: the ledger's visible loads (committed, not superseded);
- each loaded table (layout.LOADED): the rows of visible loads, latest committed load winning
  per layout.REPLACE_BY key (a serving window also gives way to a later load's overlapping window
  of the same series), as the embedded merge keeps them: ingest/lake/visible.py's SELECT, the one
  the Spark job runs too;
- each derived table (layout.DERIVED): the files of the generation derived/_current.json names,
  empty before the first `mlcost derive --lake`;
- runs: with the derived run_cost_estimates applied (an imported run's cost from its traced GPU-hours).
"""
from __future__ import annotations

import duckdb

from ingest.lake import layout, visible
from ingest.lake.store import open_lake

_LOADS_COLUMNS = ("load_id", "path", "sha256", "kind", "rows_loaded", "rows_rejected", "loaded_at", "options")


def attach(con: duckdb.DuckDBPyConnection, url: str, with_estimates: bool = True, with_derived: bool = True) -> None:
    """Create the temp views of the lake at `url` on `con` (a connection to the local DuckDB file
    with the warehouse schema in place); the derive step asks for the loaded tables alone
    (`with_derived` False: no derived views; `with_estimates` False: runs as loaded)."""
    lake = open_lake(url)
    lake.register(con)
    visible = lake.visible()
    db = _quoted(con.execute("SELECT current_database()").fetchone()[0])
    columns = _columns(con)
    con.execute("CREATE OR REPLACE TEMP TABLE lake_loads (load_id BIGINT, seq INTEGER, path VARCHAR, sha256 VARCHAR, "
                "kind VARCHAR, rows_loaded BIGINT, rows_rejected BIGINT, loaded_at TIMESTAMPTZ, options VARCHAR)")
    if visible:
        records = [entry.record for entry in visible]
        con.execute("INSERT INTO lake_loads SELECT unnest($ids), unnest($seq), unnest($path), unnest($sha), "
                    "unnest($kind), unnest($loaded), unnest($rejected), unnest($at)::TIMESTAMPTZ, "
                    "unnest($options)", {
                        "ids": [entry.load_id for entry in visible], "seq": list(range(1, len(visible) + 1)),
                        "path": [r["path"] for r in records], "sha": [r["sha256"] for r in records],
                        "kind": [r["kind"] for r in records], "loaded": [r["rows_loaded"] for r in records],
                        "rejected": [r["rows_rejected"] for r in records],
                        "at": [r["loaded_at"] for r in records], "options": [r.get("options", "") for r in records]})
    con.execute(f"CREATE OR REPLACE TEMP VIEW loads AS SELECT {', '.join(_LOADS_COLUMNS)} FROM lake_loads")
    current = lake.current() if with_derived or with_estimates else {}
    derived_files = current.get("tables", {})
    for table in layout.DERIVED if with_derived else ():
        if table == "run_cost_estimates":
            continue
        files = [lake.duckdb_path(f) for f in lake.derived_files(derived_files.get(table, []))]
        con.execute(f"CREATE OR REPLACE TEMP VIEW {table} AS "
                    + _select(columns[table], _source(files, db, table)))
    estimates = ([lake.duckdb_path(f) for f in lake.derived_files(derived_files.get("run_cost_estimates", []))]
                 if with_estimates else [])
    for table in layout.LOADED:
        files = [lake.duckdb_path(f) for entry in visible for f in entry.files.get(table, [])]
        con.execute(f"CREATE OR REPLACE TEMP VIEW {table} AS "
                    + _loaded(table, columns[table], files, db, estimates))


def _loaded(table: str, columns: list[tuple[str, str]], files: list[str], db: str, estimates: list[str]) -> str:
    """The SELECT of a loaded table's view: its visible rows (ingest/lake/visible.py, the rule
    Spark runs too), with the derived run cost estimates applied to runs."""
    if not files:
        return f"SELECT * FROM {db}.main.{table} WHERE false"
    rows = f"({visible.visible(table, _parquet(files))})"
    if table == "runs" and estimates:
        overrides = ", ".join(f"CASE WHEN e.run_id IS NULL THEN r.{c} ELSE e.{c} END AS {c}"
                              for c in layout.RUN_COST_COLUMNS)
        rows = (f"(SELECT r.* REPLACE ({overrides}) FROM {rows} r LEFT JOIN {_parquet(estimates)} e "
                "ON e.run_id = r.run_id AND e.load_id = r.load_id)")
    return _select(columns, rows)


def _source(files: list[str], db: str, table: str) -> str:
    return _parquet(files) if files else f"(SELECT * FROM {db}.main.{table} WHERE false)"


def _parquet(files: list[str]) -> str:
    listed = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
    return f"read_parquet([{listed}], hive_partitioning = false, union_by_name = true)"


def _select(columns: list[tuple[str, str]], source: str) -> str:
    """Every warehouse column of the table, in its order and type."""
    return "SELECT " + ", ".join(f'CAST("{name}" AS {kind}) AS "{name}"' for name, kind in columns) + f" FROM {source}"


def _columns(con: duckdb.DuckDBPyConnection) -> dict[str, list[tuple[str, str]]]:
    """Each table's (column, type) in the local file's schema (schema.sql)."""
    rows = con.execute(
        "SELECT table_name, column_name, data_type FROM information_schema.columns "
        "WHERE table_catalog = current_database() AND table_schema = 'main' ORDER BY table_name, ordinal_position"
    ).fetchall()
    found: dict[str, list[tuple[str, str]]] = {}
    for table, column, kind in rows:
        found.setdefault(table, []).append((column, kind))
    return found


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
