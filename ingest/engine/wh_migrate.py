"""Moving a warehouse made by an older schema.sql to tables without the keys it no longer declares.

The tables of KEYLESS once had a PRIMARY KEY (billing_lines, runs, run_evals, serving_windows and
the derived run_gpu_energy, billing_line_runs): DuckDB kept an ART index for each, which only
re-checked what the merge guarantees (ingest/engine/wh_merge.py deletes the stored rows of every key
a load brings; staging keeps one row per key) at ~1 s CPU per million rows inserted. DuckDB
cannot drop a key with ALTER TABLE, and schema.sql's CREATE TABLE IF NOT EXISTS leaves an existing
table as it is, so such a table is set aside (renamed), schema.sql creates it anew, and its rows
are copied back: set_aside() before schema.sql runs, move_back() after, in one transaction
(ingest/engine/wh_connection.py _put_schema). Views and macros bind tables by name when queried,
so they read the new table.
"""
from __future__ import annotations

import duckdb

# Tables schema.sql declares without a PRIMARY KEY or UNIQUE constraint that older ones had.
KEYLESS = ("billing_lines", "billing_line_runs", "run_evals", "run_gpu_energy", "runs", "serving_windows")
ASIDE_PREFIX = "keyed_before_"


def keyed(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The tables of KEYLESS that still carry a PRIMARY KEY or UNIQUE constraint in this file."""
    return [name for (name,) in con.execute(
        "SELECT DISTINCT table_name FROM duckdb_constraints() WHERE database_name = current_database() "
        "AND schema_name = 'main' AND constraint_type IN ('PRIMARY KEY', 'UNIQUE') "
        "AND list_contains(?, table_name) ORDER BY table_name", [list(KEYLESS)]).fetchall()]


def set_aside(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Rename every keyed table of KEYLESS to ASIDE_PREFIX + its name (schema.sql then creates it
    without the key); the names set aside. Run inside the transaction that runs move_back()."""
    names = keyed(con)
    for name in names:
        con.execute(f"ALTER TABLE {name} RENAME TO {ASIDE_PREFIX}{name}")
    return names


def move_back(con: duckdb.DuckDBPyConnection, names: list[str]) -> None:
    """Copy the rows of each table set aside into the new table of its name (by column name: a
    column schema.sql added since is NULL, as ADD COLUMN would leave it) and drop the old one."""
    for name in names:
        con.execute(f"INSERT INTO {name} BY NAME SELECT * FROM {ASIDE_PREFIX}{name}")
        con.execute(f"DROP TABLE {ASIDE_PREFIX}{name}")
