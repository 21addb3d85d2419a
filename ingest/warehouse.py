"""The one module that knows DuckDB: where the file is, its schema, connections, loads.

Every connection is short-lived (open, work, close), so the dashboard never holds the file
and `mlcost ingest` can write while it is open. A lock held by another process is waited
for with backoff; if it persists, WarehouseBusy says so in one sentence.

Reads (query, query_exact) open the file read-only. DuckDB refuses a read-only and a read-write
connection to one file open at the same time in one process, so connections of the two kinds
take turns here (any number of one kind at once). The schema is put in place by the first
read-write open of a file in this process; a reader that comes first does that once too (a
missing or older file is created or migrated), then reads read-only. A file whose schema_stamp
holds the digest of this schema.sql is left as it is (a process's first open stays cheap).
"""
from __future__ import annotations

import functools
import hashlib
import os
import re
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator

import duckdb

from ingest import derived, gpu_rollups, staging
from ingest.contract import Parsed

if TYPE_CHECKING:  # pandas is imported by the reads that return frames, not by `mlcost ingest`
    import pandas as pd

DEFAULT_DB = "mlcost.duckdb"
LOCK_WAIT_S = float(os.environ.get("MLCOST_LOCK_WAIT_S", "30"))

# Rows that arrive again replace the older ones sharing these columns (latest load wins); a
# repeat within one file keeps its last line (staging.UNIQUE_BY).
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
    lock_s: float = field(default=0.0, compare=False)  # seconds the merge held the warehouse locked


def db_path() -> Path:
    """The warehouse file: $MLCOST_DB, else ./mlcost.duckdb."""
    return Path(os.environ.get("MLCOST_DB") or DEFAULT_DB).expanduser()


class _Turns:
    """Connections of one kind (read-only or read-write) open at a time in this process: DuckDB
    refuses a second configuration of an open file."""

    def __init__(self) -> None:
        self.condition = threading.Condition()
        self.kind: bool | None = None  # read_only of the connections open now
        self.open = 0

    @contextmanager
    def take(self, read_only: bool) -> Iterator[None]:
        with self.condition:
            self.condition.wait_for(lambda: self.open == 0 or self.kind == read_only)
            self.kind, self.open = read_only, self.open + 1
        try:
            yield
        finally:
            with self.condition:
                self.open -= 1
                self.condition.notify_all()


_turns = _Turns()
_held = threading.local()  # read-write connections this thread has open (a read inside one uses it)


def _open(path: Path, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    return _retry_on_lock(path, lambda: duckdb.connect(str(path), read_only=read_only))


def _retry_on_lock(path: Path, action):
    """action(), retried with backoff while another process holds the file's lock (or, for the
    merge's ATTACH, a connection of this process has the file open)."""
    deadline = time.monotonic() + LOCK_WAIT_S
    delay_s = 0.05
    while True:
        try:
            return action()
        except (duckdb.IOException, duckdb.ResourceInUseException) as error:
            if "lock" not in str(error).lower() and "already attached" not in str(error):
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
    with _turns.take(read_only=False):
        con = _open(path)
        _held.rw = getattr(_held, "rw", 0) + 1
        try:
            # Dates and .df() timestamps must not depend on the machine's zone.
            con.execute("SET TimeZone = 'UTC'")
            # DuckDB's own bar would draw over `mlcost ingest`'s progress bars
            con.execute("SET enable_progress_bar = false")
            key = str(path.resolve())
            if key not in _schema_ready:
                with _schema_lock:
                    if key not in _schema_ready:
                        _put_schema(con)
                        _schema_ready.add(key)
            yield con
        finally:
            _held.rw -= 1
            con.close()


@functools.cache
def _schema() -> tuple[str, str]:
    """schema.sql's text and its sha256 (hex)."""
    text = resources.files("ingest").joinpath("schema.sql").read_text()
    return text, hashlib.sha256(text.encode()).hexdigest()


def _put_schema(con: duckdb.DuckDBPyConnection) -> None:
    """Create or migrate the schema, unless schema_stamp says this schema.sql already is."""
    text, digest = _schema()
    stamped = con.execute("SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "
                          "AND schema_name = 'main' AND table_name = 'schema_stamp'").fetchone()[0]
    if stamped and con.execute("SELECT sha256 FROM schema_stamp").fetchall() == [(digest,)]:
        return
    stored_before = {row[0] for row in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE table_name IN ('run_gpu_energy', 'billing_line_runs')"
    ).fetchall()}
    con.execute(text)
    with _transaction(con):
        # a warehouse from before these were stored
        if "run_gpu_energy" not in stored_before:
            derived.refresh_run_energy(con)
        if "billing_line_runs" not in stored_before and _has_rows(con, "billing_lines"):
            derived.refresh_billing_runs(con)
        con.execute("DELETE FROM schema_stamp")
        con.execute("INSERT INTO schema_stamp VALUES (?, ?)", [digest, datetime.now(timezone.utc)])


@contextmanager
def read(path: Path | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """A short-lived read-only connection (the schema put in place first if this process has
    not yet); closed on exit."""
    path = path or db_path()
    if getattr(_held, "rw", 0):  # inside a write on this thread: a second configuration would fail
        with connect(path) as con:
            yield con
        return
    if not path.exists() or str(path.resolve()) not in _schema_ready:
        with connect(path):  # create or migrate the file once per process
            pass
    with _turns.take(read_only=True):
        con = _open(path, read_only=True)
        try:
            con.execute("SET TimeZone = 'UTC'")
            con.execute("SET enable_progress_bar = false")
            yield con
        finally:
            con.close()


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


def find_load(sha256: str, kind: str, path: Path | None = None, options: str | None = None) -> int | None:
    """The load_id of an earlier load of this exact content as this kind, if any; with `options`
    (load_options() text), only one read with the same options."""
    with read(path) as con:
        row = con.execute(
            "SELECT load_id FROM loads WHERE sha256 = ? AND kind = ? "
            "AND (CAST(? AS VARCHAR) IS NULL OR coalesce(options, '') = ?)",
            [sha256, kind, options, options or ""],
        ).fetchone()
    return row[0] if row else None


# --- Managing loads: the options a file was read with, replacing and removing loads -----------

def load_options(tz_name: str | None = None, host: str | None = None, at: datetime | None = None,
                 started_at: datetime | None = None, scrape_interval_s: float | None = None) -> str:
    """The options that change how a file is read, as canonical text for the ledger ('' for none):
    'tz=Europe/Paris host=gpu-node-1 at=2025-11-20T10:00:00+00:00'."""
    given = {"tz": None if tz_name in (None, "", "UTC") else tz_name, "host": host or None,
             "at": at.astimezone(timezone.utc).isoformat() if at else None,
             "started_at": started_at.astimezone(timezone.utc).isoformat() if started_at else None,
             "scrape_interval_s": None if scrape_interval_s is None else f"{scrape_interval_s:g}"}
    return " ".join(f"{key}={value}" for key, value in given.items() if value is not None)


def loads_of_content(sha256: str, path: Path | None = None) -> list[int]:
    """Every load of this exact content (any kind, any options), oldest first."""
    with read(path) as con:
        rows = con.execute("SELECT load_id FROM loads WHERE sha256 = ? ORDER BY load_id", [sha256]).fetchall()
    return [row[0] for row in rows]


def unload(load_id: int, reason: str = "unloaded", path: Path | None = None) -> dict[str, int] | None:
    """Remove one load, every row it brought and its rejects, in one transaction; returns the rows
    removed per table, or None when there is no such load.

    Latest wins: a row this load had replaced (an older version of a run, a bill line) is not
    brought back, it was gone when this load came. When samples go, the GPU rollups are recomputed
    from the samples that stay; per-run energy and bill lines' runs are stored again."""
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
            # the runs and bill lines that go: what is stored of them and for them is redone
            con.execute("CREATE OR REPLACE TEMP TABLE changed_runs AS SELECT run_id FROM runs WHERE load_id = ?",
                        [load_id])
            con.execute("CREATE OR REPLACE TEMP TABLE changed_lines AS SELECT line_key FROM billing_lines "
                        "WHERE load_id = ?", [load_id])
            for table in _tables_with_load_id(con):
                removed[table] = con.execute(f"DELETE FROM {table} WHERE load_id = ?", [load_id]).fetchone()[0]
            samples_gone = con.execute("SELECT count(*) FROM removed_samples").fetchone()[0] > 0
            if samples_gone:
                from ingest import config

                db = '"' + con.execute("SELECT current_database()").fetchone()[0].replace('"', '""') + '"'
                # the rollups of the GPUs whose samples went, and what depends on them
                if gpu_rollups.unloaded(con, db, config.load().gpu, gpu_rollups.stored_settings(con, db)):
                    derived.update_run_energy(con, runs=True, gpus=True)
                else:  # other [gpu] settings: every GPU's minutes were computed again
                    derived.refresh_run_energy(con)
            elif removed.get("runs"):
                derived.update_run_energy(con, runs=True, gpus=False)
            if removed.get("runs") or removed.get("billing_lines"):
                derived.update_billing_runs(con, runs=bool(removed.get("runs")),
                                            lines=bool(removed.get("billing_lines")))
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
    """Record one parsed file in the ledger and load its rows and rejects (see merge)."""
    stage = staging.open_stage()
    try:
        staging.insert_parsed(stage, parsed, source)
        return merge(stage, source, sha256, kind, parsed.accepted, path)
    finally:
        stage.close()


def merge(stage: duckdb.DuckDBPyConnection, source: str, sha256: str, kind: str, accepted: int,
          path: Path | None = None, options: str | None = None) -> LoadResult:
    """Merge a file's staging database (ingest/staging.py) into the warehouse in one transaction:
    the ledger row (with `options`, load_options() text), its rows with their load_id, its
    rejects, the GPU rollups and the derived tables (ingest/derived.py) it changes.

    A file already in the ledger (same sha256 and kind) is a no-op. Rows of a table in
    REPLACE_BY replace stored rows with the same key; within the file a repeated key keeps its
    last line. Everything that can be done without the warehouse (keeping the last of a key,
    the GPU rollups, from the samples near the new ones read beforehand with the warehouse
    attached read-only) is done first, so the warehouse is locked for the writes alone;
    `lock_s` says for how long.
    """
    from ingest import config

    path = path or db_path()
    _ensure_schema(path)
    tables = {name: with_id for name, with_id in _merged_tables(stage).items() if staging.count(stage, name)}
    for name in tables:
        if name in staging.UNIQUE_BY:
            staging.keep_last(stage, name)
    replaced = _replaced_keys(stage, tables)
    gpu = config.load().gpu if "gpu_samples" in tables else None
    new_runs, new_lines = "runs" in tables, "billing_lines" in tables
    if new_runs:
        stage.execute("CREATE OR REPLACE TEMP TABLE changed_runs AS SELECT run_id FROM replaced_run_id")
    if new_lines:
        stage.execute("CREATE OR REPLACE TEMP TABLE changed_lines AS SELECT line_key FROM replaced_line_key")
    snapshot = None
    if gpu is not None:
        gpu_rollups.touched(stage, gpu)
        if not _has_temp(stage, "file_intervals"):
            gpu_rollups.intervals(stage, "gpu_samples", "file_intervals", gpu)
        with _attached(stage, path, read_only=True):  # pages read meanwhile
            snapshot = _gpu_snapshot(stage)
            with_context = gpu_rollups.context(stage, "wh", gpu) > 0
            derived.note_traced(stage, "wh")
        gpu_rollups.derive(stage, gpu, with_context)
    rejected = staging.count(stage, "rejects")
    held: list[float] = []
    with _attached(stage, path, held):
        stage.execute("BEGIN TRANSACTION")
        try:
            earlier = next(iter(stage.execute("SELECT load_id FROM wh.loads WHERE sha256 = ? AND kind = ?",
                                              [sha256, kind]).fetchall()), None)
            if earlier:
                stage.execute("ROLLBACK")
                return LoadResult(earlier[0], 0, 0, already_loaded=True)
            if gpu is not None and _gpu_snapshot(stage) != snapshot:  # another load came in between
                gpu_rollups.derive(stage, gpu, gpu_rollups.context(stage, "wh", gpu) > 0)
                derived.note_traced(stage, "wh")
                snapshot = _gpu_snapshot(stage)
            load_id = stage.execute(
                "INSERT INTO wh.loads (path, sha256, kind, rows_loaded, rows_rejected, loaded_at, options) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING load_id",
                [source, sha256, kind, accepted, rejected, datetime.now(timezone.utc), options],
            ).fetchall()[0][0]
            for name, column in replaced:
                stage.execute(f"DELETE FROM wh.{name} WHERE {column} IN (SELECT {column} FROM replaced_{column})")
            if "gpu_samples" in tables and snapshot[4]:  # only stored samples in the new ones' span can go
                stage.execute("DELETE FROM wh.gpu_samples AS s USING gpu_samples AS n WHERE s.host = n.host "
                              "AND s.gpu_index = n.gpu_index AND s.sampled_at = n.sampled_at")
            for name, with_id in tables.items():
                stage.execute(f"INSERT INTO wh.{name} BY NAME SELECT * REPLACE (CAST(? AS BIGINT) AS load_id) "
                              f"FROM {name}" if with_id else f"INSERT INTO wh.{name} BY NAME SELECT * FROM {name}",
                              [load_id] if with_id else [])
            stage.execute("INSERT INTO wh.rejects SELECT ?, path, line, reason, left(raw, 500) FROM rejects "
                          "ORDER BY line", [load_id])
            rebuilt = False
            if gpu is not None:
                _, _, stored, had_samples, _ = snapshot
                rebuilt = (stored is None and had_samples) or (stored is not None
                                                               and tuple(stored[:4]) != gpu_rollups.settings(gpu))
                if rebuilt:
                    gpu_rollups.rebuild(stage, "wh", gpu, stored)  # settings changed: every GPU again
                else:
                    gpu_rollups.replace(stage, "wh", gpu, stored)
            stage.execute("USE wh")  # the derived tables and the views they come from are the warehouse's
            try:
                if rebuilt:
                    derived.refresh_run_energy(stage)
                elif new_runs or gpu is not None:
                    derived.update_run_energy(stage, runs=new_runs, gpus=gpu is not None)
                if new_runs or new_lines:
                    derived.update_billing_runs(stage, runs=new_runs, lines=new_lines)
            except BaseException:  # an aborted transaction takes no USE: roll back first, so the
                _roll_back(stage)    # error raised is this one, not the detach's
                stage.execute("USE memory")
                raise
            stage.execute("USE memory")
            stage.execute("COMMIT")
        except BaseException:
            _roll_back(stage)
            raise
    return LoadResult(load_id, accepted, rejected, already_loaded=False, lock_s=held[0])


def _roll_back(stage: duckdb.DuckDBPyConnection) -> None:
    """Roll the merge's transaction back, if one is still open."""
    try:
        stage.execute("ROLLBACK")
    except duckdb.TransactionException:  # already rolled back
        pass


def _merged_tables(stage: duckdb.DuckDBPyConnection) -> dict[str, bool]:
    """The staging tables that hold a load's rows (ledger and rejects aside): name -> whether
    its rows carry their load_id."""
    rows = stage.execute("SELECT table_name, bool_or(column_name = 'load_id') FROM duckdb_columns() "
                         "WHERE database_name = 'memory' AND table_name NOT IN ('loads', 'rejects') "
                         "GROUP BY table_name ORDER BY table_name").fetchall()
    return {name: with_id for name, with_id in rows if with_id or name in REPLACE_BY}


def _replaced_keys(stage: duckdb.DuckDBPyConnection, tables: dict[str, bool]) -> list[tuple[str, str]]:
    """(table, key column) whose stored rows go where the load carries the key: every key that any
    staged table carries in that column (temp table replaced_<column>), so that a run replaced
    without eval points loses its old ones too."""
    by_column: dict[str, list[str]] = {}
    for name in tables:
        column = REPLACE_BY.get(name)
        if isinstance(column, str):
            by_column.setdefault(column, []).append(name)
    replaced = []
    for column, carriers in by_column.items():
        union = " UNION ".join(f"SELECT {column} FROM {name}" for name in carriers)
        stage.execute(f"CREATE OR REPLACE TEMP TABLE replaced_{column} AS {union}")
        replaced += [(name, column) for name, key in REPLACE_BY.items() if key == column]
    return replaced


def _gpu_snapshot(stage: duckdb.DuckDBPyConnection) -> tuple:
    """What the precomputed rollups assumed of the warehouse: its last load and how many loads
    it holds (a load or an unload in between changes one), the stored settings, whether it held
    samples and whether any of the touched GPUs' lie in the new samples' span."""
    last, loads = stage.execute("SELECT max(load_id), count(*) FROM wh.loads").fetchall()[0]
    has_samples = stage.execute("SELECT EXISTS (SELECT 1 FROM wh.gpu_samples)").fetchall()[0][0]
    overlaps = stage.execute("SELECT EXISTS (SELECT 1 FROM wh.gpu_samples s JOIN touched_gpus t USING (host, gpu_index) "
                             "WHERE s.sampled_at BETWEEN t.first_at AND t.last_at)").fetchall()[0][0]
    return last, loads, gpu_rollups.stored_settings(stage, "wh"), has_samples, overlaps


def _has_temp(stage: duckdb.DuckDBPyConnection, name: str) -> bool:
    return bool(stage.execute("SELECT count(*) FROM duckdb_tables() WHERE temporary AND table_name = ?",
                              [name]).fetchall()[0][0])


@contextmanager
def _attached(stage: duckdb.DuckDBPyConnection, path: Path, held: list[float] | None = None,
              read_only: bool = False) -> Iterator[None]:
    """The warehouse file attached to a staging connection as `wh` (waiting out another
    process's lock like connect()), detached on exit; the seconds it was attached are appended
    to `held`. Read-only, other processes' readers (pages) are not kept waiting."""
    literal = "'" + str(path).replace("'", "''") + "'"  # ATTACH takes no bound parameters
    mode = " (READ_ONLY)" if read_only else ""
    with _turns.take(read_only=read_only):  # this process's other kind of connection waits meanwhile
        _retry_on_lock(path, lambda: stage.execute(f"ATTACH {literal} AS wh{mode}"))
        attached_at = time.monotonic()
        try:
            yield
        finally:
            stage.execute("DETACH wh")
            if held is not None:
                held.append(time.monotonic() - attached_at)


def _ensure_schema(path: Path) -> None:
    if str(path.resolve()) not in _schema_ready:
        with connect(path):
            pass


def rebuild_gpu_rollups(path: Path | None = None) -> int:
    """Recompute every GPU's rollups with the current [gpu] settings; returns the GPUs done."""
    from ingest import config

    gpu = config.load().gpu
    with connect(path) as con:
        db = '"' + con.execute("SELECT current_database()").fetchone()[0].replace('"', '""') + '"'
        con.execute("BEGIN TRANSACTION")
        try:
            gpus = gpu_rollups.rebuild(con, db, gpu, gpu_rollups.stored_settings(con, db))
            derived.refresh_run_energy(con)
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
    return gpus


def _has_rows(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    return con.execute(f"SELECT EXISTS (SELECT 1 FROM {table})").fetchone()[0]


@contextmanager
def _transaction(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    con.execute("BEGIN TRANSACTION")
    try:
        yield
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


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
