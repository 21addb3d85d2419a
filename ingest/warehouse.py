"""The one module that knows DuckDB: where the file is, its schema, connections, loads.

Every connection is short-lived (open, work, close), so the dashboard never holds the file
and `mlcost ingest` can write while it is open. A lock held by another process is waited
for with backoff; if it persists, WarehouseBusy says so in one sentence.
"""
from __future__ import annotations

import os
import re
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Iterator

import duckdb
import pandas as pd
import pyarrow as pa

from ingest.contract import Parsed

DEFAULT_DB = "mlcost.duckdb"
LOCK_WAIT_S = float(os.environ.get("MLCOST_LOCK_WAIT_S", "30"))

# Rows that arrive again replace the older ones sharing these columns (latest load wins).
REPLACE_BY: dict[str, str] = {"runs": "run_id", "run_evals": "run_id", "serving_windows": "window_key"}

_schema_ready: set[str] = set()
_schema_lock = threading.Lock()


class WarehouseBusy(RuntimeError):
    """Another process kept the warehouse file locked for longer than we were willing to wait."""


@dataclass(frozen=True)
class LoadResult:
    load_id: int | None
    rows_loaded: int
    rows_rejected: int
    already_loaded: bool


def db_path() -> Path:
    """The warehouse file: $MLCOST_DB, else ./mlcost.duckdb."""
    return Path(os.environ.get("MLCOST_DB") or DEFAULT_DB).expanduser()


def _open(path: Path) -> duckdb.DuckDBPyConnection:
    deadline = time.monotonic() + LOCK_WAIT_S
    delay_s = 0.05
    while True:
        try:
            return duckdb.connect(str(path))
        except duckdb.IOException as error:
            if "lock" not in str(error).lower():
                raise
            if time.monotonic() >= deadline:
                holder = re.search(r"\(PID (\d+)\)", str(error))
                who = f"process {holder.group(1)}" if holder else "another process"
                raise WarehouseBusy(
                    f"The warehouse {path} is locked by {who} and stayed locked for "
                    f"{LOCK_WAIT_S:g} s; close that program or wait for its ingest to finish, "
                    f"then try again."
                ) from None
            time.sleep(delay_s)
            delay_s = min(delay_s * 2, 1.0)


@contextmanager
def connect(path: Path | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """A short-lived read-write connection with the schema in place; closed on exit."""
    path = path or db_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    con = _open(path)
    try:
        # Dates and .df() timestamps must not depend on the machine's zone.
        con.execute("SET TimeZone = 'UTC'")
        key = str(path.resolve())
        if key not in _schema_ready:
            with _schema_lock:
                con.execute(resources.files("ingest").joinpath("schema.sql").read_text())
                _schema_ready.add(key)
        yield con
    finally:
        con.close()


def query(sql: str, params: list | dict | None = None, path: Path | None = None) -> pd.DataFrame:
    """Run one read query with bound parameters and return the result as a DataFrame."""
    with connect(path) as con:
        return con.execute(sql, params or []).df()


def find_load(sha256: str, kind: str, path: Path | None = None) -> int | None:
    """The load_id of an earlier load of this exact content as this kind, if any."""
    with connect(path) as con:
        row = con.execute(
            "SELECT load_id FROM loads WHERE sha256 = ? AND kind = ?", [sha256, kind]
        ).fetchone()
    return row[0] if row else None


def load(source: str, sha256: str, kind: str, parsed: Parsed, path: Path | None = None) -> LoadResult:
    """Record one file in the ledger and load its rows and rejects in one transaction.

    A file already in the ledger (same sha256 and kind) is a no-op. Rows of a table in
    REPLACE_BY replace earlier rows with the same key (parsers keep one row per key).
    """
    with connect(path) as con:
        con.execute("BEGIN TRANSACTION")
        try:
            earlier = con.execute(
                "SELECT load_id FROM loads WHERE sha256 = ? AND kind = ?", [sha256, kind]
            ).fetchone()
            if earlier:
                con.execute("ROLLBACK")
                return LoadResult(earlier[0], 0, 0, already_loaded=True)
            load_id = con.execute(
                "INSERT INTO loads (path, sha256, kind, rows_loaded, rows_rejected, loaded_at) "
                "VALUES (?, ?, ?, ?, ?, ?) RETURNING load_id",
                [source, sha256, kind, parsed.accepted, len(parsed.rejects), datetime.now(timezone.utc)],
            ).fetchone()[0]
            for name, keys in _replaced_keys(parsed).items():
                con.execute(f"DELETE FROM {name} WHERE {REPLACE_BY[name]} IN (SELECT unnest(?))", [keys])
            for name, rows in parsed.tables.items():
                _insert_rows(con, name, rows, load_id)
            if parsed.rejects:
                con.executemany(
                    "INSERT INTO rejects VALUES (?, ?, ?, ?, ?)",
                    [[load_id, source, r.line, r.reason, r.raw[:500]] for r in parsed.rejects],
                )
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
    return LoadResult(load_id, parsed.accepted, len(parsed.rejects), already_loaded=False)


def _replaced_keys(parsed: Parsed) -> dict[str, list]:
    """Per table of this load in REPLACE_BY, the keys whose old rows go: every key that any
    table of the load carries in the same column, so a run replaced without eval points
    loses its old ones too."""
    by_column: dict[str, set] = {}
    for name, rows in parsed.tables.items():
        column = REPLACE_BY.get(name)
        if column:
            by_column.setdefault(column, set()).update(row[column] for row in rows)
    return {name: sorted(by_column[REPLACE_BY[name]]) for name in parsed.tables
            if name in REPLACE_BY and by_column[REPLACE_BY[name]]}


def _insert_rows(con: duckdb.DuckDBPyConnection, table: str, rows: list[dict], load_id: int) -> None:
    if not rows:
        return
    columns = _arrow_schema(con, table)
    records = [{**row, "load_id": load_id} if "load_id" in columns.names else row for row in rows]
    incoming = pa.Table.from_pylist(
        [{name: record.get(name) for name in columns.names} for record in records], schema=columns
    )
    # Columns are in table order, so a positional insert is exact.
    con.from_arrow(incoming).insert_into(table)


_ARROW_TYPES = {
    "VARCHAR": pa.string(),
    "DOUBLE": pa.float64(),
    "BIGINT": pa.int64(),
    "INTEGER": pa.int32(),
    "BOOLEAN": pa.bool_(),
    "DATE": pa.date32(),
    "TIMESTAMP WITH TIME ZONE": pa.timestamp("us", tz="UTC"),
    "VARCHAR[]": pa.list_(pa.string()),
    "INTEGER[]": pa.list_(pa.int32()),
    "MAP(VARCHAR, VARCHAR)": pa.map_(pa.string(), pa.string()),
}


def _arrow_schema(con: duckdb.DuckDBPyConnection, table: str) -> pa.Schema:
    fields = []
    for name, type_name, *_ in con.execute(f"DESCRIBE {table}").fetchall():
        decimal = re.fullmatch(r"DECIMAL\((\d+),\s*(\d+)\)", type_name)
        arrow = pa.decimal128(int(decimal[1]), int(decimal[2])) if decimal else _ARROW_TYPES[type_name]
        fields.append(pa.field(name, arrow))
    return pa.schema(fields)
