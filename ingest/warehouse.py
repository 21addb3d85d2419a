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
from datetime import date, datetime, timezone
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
# A tuple is a composite key (tables given as pyarrow tables; a repeat within the load keeps
# its last line).
REPLACE_BY: dict[str, str | tuple[str, ...]] = {
    "runs": "run_id", "run_evals": "run_id", "serving_windows": "window_key",
    "gpu_samples": ("host", "gpu_index", "sampled_at"),
    "billing_lines": "line_key",  # ingest/billing.py says how a bill line's key is made
}

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


def query_exact(sql: str, params: list | dict | None = None, path: Path | None = None) -> pd.DataFrame:
    """Like query(), but DECIMAL columns come back as decimal.Decimal (money stays exact)."""
    with connect(path) as con:
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


def find_load(sha256: str, kind: str, path: Path | None = None, options: str | None = None) -> int | None:
    """The load_id of an earlier load of this exact content as this kind, if any; with `options`
    (load_options() text), only one read with the same options."""
    with connect(path) as con:
        row = con.execute(
            "SELECT load_id FROM loads WHERE sha256 = ? AND kind = ? "
            "AND (CAST(? AS VARCHAR) IS NULL OR coalesce(options, '') = ?)",
            [sha256, kind, options, options or ""],
        ).fetchone()
    return row[0] if row else None


# --- Managing loads: the options a file was read with, replacing and removing loads -----------

def load_options(tz_name: str | None = None, host: str | None = None, at: datetime | None = None) -> str:
    """The options that change how a file is read, as canonical text for the ledger ('' for none):
    'tz=Europe/Paris host=gpu-node-1 at=2025-11-20T10:00:00+00:00'."""
    given = {"tz": None if tz_name in (None, "", "UTC") else tz_name, "host": host or None,
             "at": at.astimezone(timezone.utc).isoformat() if at else None}
    return " ".join(f"{key}={value}" for key, value in given.items() if value is not None)


def record_options(load_id: int, options: str, path: Path | None = None) -> None:
    """Note in the ledger the options load `load_id` was read with ('' for none)."""
    with connect(path) as con:
        con.execute("UPDATE loads SET options = ? WHERE load_id = ?", [options, load_id])


def loads_of_content(sha256: str, path: Path | None = None) -> list[int]:
    """Every load of this exact content (any kind, any options), oldest first."""
    with connect(path) as con:
        rows = con.execute("SELECT load_id FROM loads WHERE sha256 = ? ORDER BY load_id", [sha256]).fetchall()
    return [row[0] for row in rows]


def unload(load_id: int, reason: str = "unloaded", path: Path | None = None) -> dict[str, int] | None:
    """Remove one load, every row it brought and its rejects, in one transaction; returns the rows
    removed per table, or None when there is no such load.

    Latest wins: a row this load had replaced (an older version of a run, a bill line) is not
    brought back, it was gone when this load came. The GPU rollups of the GPUs whose samples go
    are recomputed from the samples that stay."""
    with connect(path) as con:
        con.execute("BEGIN TRANSACTION")
        try:
            ledger = con.execute("SELECT path, sha256, kind, options FROM loads WHERE load_id = ?",
                                 [load_id]).fetchone()
            if ledger is None:
                con.execute("ROLLBACK")
                return None
            removed = {"run_evals": con.execute(
                "DELETE FROM run_evals WHERE run_id IN (SELECT run_id FROM runs WHERE load_id = ?)",
                [load_id]).fetchone()[0]}
            # The first removed sample of each GPU bounds what its rollups must recompute.
            con.execute("CREATE OR REPLACE TEMP TABLE removed_samples AS SELECT host, gpu_index, "
                        "min(sampled_at) AS sampled_at FROM gpu_samples WHERE load_id = ? "
                        "GROUP BY host, gpu_index", [load_id])
            for table in _tables_with_load_id(con):
                removed[table] = con.execute(f"DELETE FROM {table} WHERE load_id = ?", [load_id]).fetchone()[0]
            if con.execute("SELECT count(*) FROM removed_samples").fetchone()[0]:
                _refresh_gpu_rollups(con, new_samples="removed_samples")
            con.execute("DELETE FROM loads WHERE load_id = ?", [load_id])
            con.execute("INSERT INTO unloads VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        [load_id, *ledger, sum(n for t, n in removed.items() if t != "rejects"),
                         datetime.now(timezone.utc), reason])
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
    return {table: count for table, count in removed.items() if count}


def _tables_with_load_id(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Every base table whose rows carry the load they came from (the ledger itself aside)."""
    return [name for (name,) in con.execute(
        "SELECT c.table_name FROM information_schema.columns c JOIN information_schema.tables t "
        "USING (table_catalog, table_schema, table_name) WHERE c.column_name = 'load_id' "
        "AND t.table_type = 'BASE TABLE' AND c.table_name NOT IN ('loads', 'unloads') "
        "AND t.table_catalog = current_database() AND t.table_schema = 'main' ORDER BY 1").fetchall()]


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
            if "gpu_samples" in parsed.tables:
                _refresh_gpu_rollups(con, new_samples="incoming_keyed")
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
        if isinstance(column, str):  # composite keys are replaced as their rows go in
            by_column.setdefault(column, set()).update(row[column] for row in rows)
    return {name: sorted(by_column[REPLACE_BY[name]]) for name in parsed.tables
            if isinstance(REPLACE_BY.get(name), str) and by_column[REPLACE_BY[name]]}


def _insert_rows(con: duckdb.DuckDBPyConnection, table: str, rows: list[dict] | pa.Table, load_id: int) -> None:
    if isinstance(rows, pa.Table):
        _insert_arrow(con, table, rows, load_id)
        return
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


def _insert_arrow(con: duckdb.DuckDBPyConnection, table: str, rows: pa.Table, load_id: int) -> None:
    """Insert a parser's pyarrow table; with a composite REPLACE_BY key, the last line of a key
    wins within the load and replaces the stored row. Leaves the rows in temp table incoming_keyed."""
    schema = _arrow_schema(con, table)
    count = rows.num_rows
    columns = [pa.array([load_id] * count, pa.int64()) if field.name == "load_id"
               else rows[field.name].cast(field.type) if field.name in rows.column_names
               else pa.nulls(count, field.type) for field in schema]
    con.register("incoming_rows", pa.Table.from_arrays(columns, schema=schema))
    key = REPLACE_BY.get(table)
    try:
        if isinstance(key, tuple):
            keys = ", ".join(key)
            con.execute("CREATE OR REPLACE TEMP TABLE incoming_keyed AS SELECT * FROM incoming_rows "
                        f"QUALIFY row_number() OVER (PARTITION BY {keys} ORDER BY source_line DESC) = 1")
            con.execute(f"DELETE FROM {table} USING incoming_keyed i WHERE "
                        + " AND ".join(f"{table}.{c} = i.{c}" for c in key))
        else:
            con.execute("CREATE OR REPLACE TEMP TABLE incoming_keyed AS SELECT * FROM incoming_rows")
        con.execute(f"INSERT INTO {table} SELECT * FROM incoming_keyed")
    finally:
        con.unregister("incoming_rows")


# --- GPU traces: energy per sample interval, per-minute rollups, coverage holes ----------------
#
# Each sample of a GPU stands for the interval up to that GPU's next sample. When the next
# sample is more than max_gap_s away (or there is none), the interval is as long as the one
# before it (a collector's usual spacing) and the rest, up to the next sample, is a coverage
# hole (gpu_gaps); a sample with holes on both sides covers nothing.
# Energy of an interval: the counter's delta (energy_mj, exact) where both ends have one and it
# did not go down; a counter that went down was reset (reboot, driver reload), and as its new
# value only covers the time since the reset, that interval falls back to power. Without a
# counter: trapezoidal integration of power_w between the two samples, or power x interval for
# the last interval before a hole.
# Idle: a sample with gpu_util_pct <= idle_util_max_pct (and power_w <= idle_power_max_w when
# set) inside a run of such samples, unbroken by a hole, whose intervals add up to at least
# idle_min_s. Busy: any other sample with a utilization reading (short dips included).

SAMPLE_INTERVALS = """
WITH ordered AS (
    SELECT host, gpu_index, sampled_at, gpu_uuid, gpu_name, power_w, energy_mj, gpu_util_pct, mem_used_mib,
           lead(sampled_at) OVER w                       AS next_at,
           epoch(lead(sampled_at) OVER w - sampled_at)   AS next_s,
           epoch(sampled_at - lag(sampled_at) OVER w)    AS prev_s,
           lead(power_w) OVER w                          AS next_power_w,
           lead(energy_mj) OVER w                        AS next_energy_mj
    FROM {source}
    WINDOW w AS (PARTITION BY host, gpu_index ORDER BY sampled_at)
), intervals AS (
    SELECT *,
           CASE WHEN next_s <= $max_gap_s THEN next_s
                WHEN prev_s <= $max_gap_s THEN prev_s ELSE 0 END AS interval_s,
           gpu_util_pct <= $idle_util_max_pct
               AND ($idle_power_max_w IS NULL OR power_w <= $idle_power_max_w) AS low,
           CASE WHEN next_s <= $max_gap_s AND next_energy_mj >= energy_mj
                    THEN (next_energy_mj - energy_mj) / 1000.0
                WHEN next_s <= $max_gap_s AND next_power_w IS NOT NULL AND power_w IS NOT NULL
                    THEN (power_w + next_power_w) / 2 * next_s
           END AS paired_energy_j
    FROM ordered
), measured AS (
    SELECT *, coalesce(paired_energy_j, power_w * interval_s) AS energy_j,
           sampled_at + to_microseconds(CAST(round(interval_s * 1e6) AS BIGINT)) AS end_at,
           CASE WHEN prev_s IS NULL OR prev_s > $max_gap_s
                     OR low IS DISTINCT FROM lag(low) OVER (PARTITION BY host, gpu_index ORDER BY sampled_at)
                THEN 1 ELSE 0 END AS starts_stretch
    FROM intervals
), stretched AS (
    SELECT *, sum(starts_stretch) OVER (PARTITION BY host, gpu_index ORDER BY sampled_at
                                        ROWS UNBOUNDED PRECEDING) AS stretch
    FROM measured
), samples AS (
    SELECT *, coalesce(low, false)
              AND sum(interval_s) OVER (PARTITION BY host, gpu_index, stretch) >= $idle_min_s AS idle
    FROM stretched
)
"""

GPU_ROLLUP = SAMPLE_INTERVALS + """
, pieces AS (
    SELECT *, unnest(generate_series(date_trunc('minute', sampled_at), end_at - INTERVAL 1 MICROSECOND,
                                     INTERVAL 1 MINUTE)) AS minute
    FROM samples WHERE interval_s > 0
), weighted AS (
    SELECT *, epoch(least(end_at, minute + INTERVAL 1 MINUTE) - greatest(sampled_at, minute)) AS piece_s
    FROM pieces
)
SELECT host, gpu_index, minute,
       arg_max(gpu_uuid, sampled_at)                                          AS gpu_uuid,
       arg_max(gpu_name, sampled_at)                                          AS gpu_name,
       sum(piece_s)                                                           AS coverage_s,
       coalesce(sum(piece_s) FILTER (WHERE energy_j IS NOT NULL), 0)          AS energy_s,
       sum(energy_j * piece_s / interval_s) / 3.6e6                           AS energy_kwh,
       coalesce(sum(piece_s) FILTER (WHERE idle), 0)                          AS idle_s,
       sum(energy_j * piece_s / interval_s) FILTER (WHERE idle) / 3.6e6       AS idle_energy_kwh,
       coalesce(sum(piece_s) FILTER (WHERE NOT idle AND gpu_util_pct IS NOT NULL), 0) AS busy_s,
       sum(energy_j * piece_s / interval_s)
           / sum(piece_s) FILTER (WHERE energy_j IS NOT NULL)                 AS power_w_mean,
       max(power_w)                                                           AS power_w_max,
       sum(gpu_util_pct * piece_s)
           / sum(piece_s) FILTER (WHERE gpu_util_pct IS NOT NULL)             AS util_pct_mean,
       max(gpu_util_pct)                                                      AS util_pct_max,
       sum(gpu_util_pct * piece_s) FILTER (WHERE NOT idle)
           / sum(piece_s) FILTER (WHERE NOT idle AND gpu_util_pct IS NOT NULL) AS util_pct_busy_mean,
       max(mem_used_mib)                                                      AS mem_used_mib_max
FROM weighted
GROUP BY host, gpu_index, minute
"""

GPU_GAPS = SAMPLE_INTERVALS + """
SELECT host, gpu_index, gpu_uuid, end_at AS gap_start, next_at AS gap_end, epoch(next_at - end_at) AS gap_s
FROM samples WHERE next_s > $max_gap_s
"""


def _rollup_params(gpu) -> dict:
    return {"max_gap_s": gpu.max_gap_s, "idle_util_max_pct": gpu.idle_util_max_pct,
            "idle_power_max_w": gpu.idle_power_max_w, "idle_min_s": gpu.idle_min_s}


def _refresh_gpu_rollups(con: duckdb.DuckDBPyConnection, new_samples: str | None) -> None:
    """Recompute gpu_minutes and gpu_gaps from gpu_samples where the samples in table
    `new_samples` can have changed them, or everywhere when it is None or the [gpu] settings
    differ from those the stored rollups were computed with.

    Per GPU, from `since` = the first new sample less max_gap_s + idle_min_s (to the minute):
    an earlier sample keeps its interval, energy and idle flag, since a new sample can only
    change the interval of a sample within max_gap_s before it and the idle stretch of one
    within idle_min_s of it. The context read starts at the last sample at least that margin
    before `since`, so that intervals, holes and stretches reaching into the window are whole.
    """
    from ingest import config

    params = _rollup_params(config.load().gpu)
    stored = con.execute("SELECT idle_util_max_pct, idle_power_max_w, idle_min_s, max_gap_s, rollups "
                         "FROM gpu_rollup_settings").fetchone()
    current = (params["idle_util_max_pct"], params["idle_power_max_w"], params["idle_min_s"], params["max_gap_s"])
    margin_s = params["max_gap_s"] + params["idle_min_s"] + 60
    if stored is None or tuple(stored[:4]) != current or new_samples is None:
        con.execute("CREATE OR REPLACE TEMP TABLE touched_gpus AS SELECT DISTINCT host, gpu_index, "
                    "'-infinity'::TIMESTAMPTZ AS since, NULL::TIMESTAMPTZ AS context_from FROM gpu_samples")
    else:
        con.execute(f"""
            CREATE OR REPLACE TEMP TABLE touched_gpus AS
            WITH first_new AS (
                SELECT host, gpu_index,
                       date_trunc('minute', min(sampled_at) - to_seconds($margin_s)) AS since
                FROM {new_samples} GROUP BY host, gpu_index
            )
            SELECT f.host, f.gpu_index, f.since,
                   (SELECT max(s.sampled_at) FROM gpu_samples s
                    WHERE s.host = f.host AND s.gpu_index = f.gpu_index
                      AND s.sampled_at <= f.since - to_seconds($margin_s)) AS context_from
            FROM first_new f""", {"margin_s": margin_s})
    for table, column in (("gpu_minutes", "minute"), ("gpu_gaps", "gap_end")):
        con.execute(f"DELETE FROM {table} USING touched_gpus t WHERE {table}.host = t.host "
                    f"AND {table}.gpu_index = t.gpu_index AND {table}.{column} >= t.since")
    source = ("(SELECT s.* FROM gpu_samples s JOIN touched_gpus t USING (host, gpu_index) "
              "WHERE t.context_from IS NULL OR s.sampled_at >= t.context_from)")
    for table, query, column in (("gpu_minutes", GPU_ROLLUP, "minute"), ("gpu_gaps", GPU_GAPS, "gap_end")):
        con.execute(f"INSERT INTO {table} BY NAME SELECT r.* FROM ({query.format(source=source)}) r "
                    f"JOIN touched_gpus t USING (host, gpu_index) WHERE r.{column} >= t.since", params)
    con.execute("DELETE FROM gpu_rollup_settings")
    con.execute("INSERT INTO gpu_rollup_settings VALUES (?, ?, ?, ?, ?, ?)",
                [*current, (stored[4] if stored else 0) + 1, datetime.now(timezone.utc)])


def rebuild_gpu_rollups(path: Path | None = None) -> int:
    """Recompute every GPU's rollups with the current [gpu] settings; returns the GPUs done."""
    with connect(path) as con:
        con.execute("BEGIN TRANSACTION")
        try:
            _refresh_gpu_rollups(con, new_samples=None)
            gpus = con.execute("SELECT count(*) FROM touched_gpus").fetchone()[0]
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
    return gpus


def trace_energy_kwh(samples: pa.Table, max_gap_s: float) -> float | None:
    """The energy (kWh) of one file's samples on their own, by the rollups' rule; None if unknown."""
    con = duckdb.connect()
    try:
        con.register("file_samples", samples.select(
            ["host", "gpu_index", "sampled_at", "gpu_uuid", "gpu_name", "power_w", "energy_mj",
             "gpu_util_pct", "mem_used_mib"]))
        params = {"max_gap_s": max_gap_s, "idle_util_max_pct": 0, "idle_power_max_w": None, "idle_min_s": 0}
        row = con.execute(SAMPLE_INTERVALS.format(source="file_samples")
                          + "SELECT sum(energy_j) FILTER (WHERE interval_s > 0) / 3.6e6 FROM samples",
                          params).fetchone()
    finally:
        con.close()
    return row[0]


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
