"""The one entry point to the warehouse: where the file is, connections, reads, writes, loads.

Everyone imports this module; its parts live beside it by topic:
- ingest/engine/wh_connection.py: the file, locking between processes and threads, read sessions, the schema;
- ingest/engine/wh_merge.py: merging a file's staging database in one short transaction;
- ingest/engine/wh_loads.py: the load ledger (earlier loads, options, unloading) and GPU rollups.
"""
from __future__ import annotations

from datetime import date, datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

from ingest.derived import run_trace_costs
from ingest.engine.wh_connection import (  # noqa: F401  (the warehouse's API, re-exported)
    DEFAULT_DB, LOCK_WAIT_S, SESSION_IDLE_S, WarehouseBusy, connect, db_path, ensure_schema, lake_url, read, session,
    writer_waiting,
)
from ingest.engine.wh_loads import (  # noqa: F401
    earlier_loads, find_load, load_options, loads_of_content, rebuild_gpu_rollups, settle_derived, unload,
)
from ingest.engine.wh_merge import REPLACE_BY, LoadResult, load, merge  # noqa: F401

if TYPE_CHECKING:  # pandas is imported by the reads that return frames, not by `mlcost ingest`
    import pandas as pd


def query(sql: str, params: list | dict | None = None, path: Path | None = None) -> pd.DataFrame:
    """Run one read query with bound parameters (read-only) and return the result as a DataFrame."""
    import pandas  # noqa: F401  (.df() needs it; imported here so that ingest does not)

    with read(path) as con:
        return con.execute(sql, params or []).df()


def query_exact(sql: str, params: list | dict | None = None, path: Path | None = None) -> pd.DataFrame:
    """Like query(), but DECIMAL columns come back as decimal.Decimal (money stays exact)."""
    import pandas as pd

    with read(path) as con:
        result = con.execute(sql, params or [])
        columns = [column[0] for column in result.description]
        return pd.DataFrame(result.fetchall(), columns=columns, dtype=object)


def execute(statements: list[tuple[str, list | dict]], path: Path | None = None) -> None:
    """Run write statements with bound parameters in one transaction (all or nothing)."""
    with connect(path) as con:
        con.execute("BEGIN TRANSACTION")
        try:
            for sql, params in statements:
                con.execute(sql, params)
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise


def priced_from_traces(run_ids: list[str], path: Path | None = None) -> tuple[int, Decimal]:
    """How many of these runs the warehouse has priced from GPU traces (ingest/derived/run_trace_costs.py),
    and their cost (USD, exact)."""
    found = query_exact("SELECT count(*) AS runs, coalesce(sum(cost_usd), 0) AS cost_usd FROM runs "
                        "WHERE cost_source = ? AND list_contains(?::VARCHAR[], run_id)",
                        [run_trace_costs.SOURCE, run_ids], path)
    return int(found["runs"][0]), Decimal(found["cost_usd"][0])


DECISION_KINDS = ("decision", "note")


def add_decision(month: date, kind: str, text: str, author: str | None = None, path: Path | None = None) -> int:
    """Add one entry to the retrospective's decisions log for `month` (its first day); returns its id."""
    if kind not in DECISION_KINDS:
        raise ValueError(f"kind must be one of {', '.join(DECISION_KINDS)}, not {kind!r}")
    if not text.strip():
        raise ValueError("an empty note says nothing: write what was observed or decided")
    with connect(path) as con:
        return con.execute(
            "INSERT INTO decisions (month, kind, text, author, written_at) VALUES (?, ?, ?, ?, ?) "
            "RETURNING decision_id",
            [month.replace(day=1), kind, text.strip(), (author or "").strip() or None,
             datetime.now(timezone.utc)],
        ).fetchone()[0]
