"""Connections to the warehouse file: where it is, locking between processes, sessions, the schema.

Imported through ingest/engine/warehouse.py (the one entry point). Every connection is short-lived (open,
work, close), so the dashboard never holds the file and `mlcost ingest` can write while it is
open. A lock held by another process is waited for with backoff; if it persists, WarehouseBusy
says so in one sentence.

Reads open the file read-only. DuckDB refuses a read-only and a read-write connection to one file
open at the same time in one process, so connections of the two kinds take turns here (any number
of one kind at once). The schema is put in place by the first read-write open of a file in this
process; a reader that comes first does that once too (a missing or older file is created or
migrated), then reads read-only. A file whose schema_stamp holds the digest of this schema.sql
is left as it is (a process's first open stays cheap).

Sessions: within `session()` a thread's reads share one read-only connection (a page render
runs dozens of queries; opening costs 20-60 ms, 0.1-0.6 s under load). It is closed when the
session ends, when it has been idle SESSION_IDLE_S, and as soon as a writer waits for the file:
a loader (which posts a marker file next to the warehouse while it waits) or a write in this
process. Readers that open a connection give way to a waiting writer, so a loader waits at most
for the reads already running.
"""
from __future__ import annotations

import functools
import glob
import hashlib
import os
import re
import threading
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import duckdb

from ingest.derived import derived
from ingest.engine import wh_migrate

DEFAULT_DB = "mlcost.duckdb"
LOCK_WAIT_S = float(os.environ.get("MLCOST_LOCK_WAIT_S", "30"))
SESSION_IDLE_S = 0.1  # a session's connection idle this long is closed (pages compute between queries)
READER_BACKOFF_S = 0.25  # a page notices the end of a merge at most this late (it was 1 s)
WRITER_BACKOFF_S = 0.2  # a waiting writer tries this often at most (readers wait for it meanwhile)
WAITING_SUFFIX = ".writer-waiting."  # + pid: a writer of that process waits for the file's lock
READER_POLL_S = 0.02

_schema_ready: set[str] = set()
_schema_lock = threading.Lock()
T = TypeVar("T")


class WarehouseBusy(RuntimeError):
    """Another process kept the warehouse file locked for longer than we were willing to wait."""


class LakeReadOnly(WarehouseBusy):
    """A write the warehouse refuses because it reads a lake (loads go through `mlcost load --lake`).
    A WarehouseBusy, so that every place that says why the warehouse cannot take a write says this."""


def refuse_in_lake(action: str) -> None:
    """Raise LakeReadOnly when the warehouse is a lake: `action` ('load files') cannot be done here."""
    url = lake_url()
    if url:
        raise LakeReadOnly(f"The warehouse is the lake {url}, which the dashboard and `mlcost ingest` only read: "
                           f"to {action}, use `mlcost load --lake` (and `mlcost derive --lake`) instead.")


def db_path() -> Path:
    """The warehouse file: $MLCOST_DB, else ./mlcost.duckdb (within private(), that one)."""
    if _private.path is not None:
        return _private.path
    return Path(os.environ.get("MLCOST_DB") or DEFAULT_DB).expanduser()


class _Private(threading.local):
    path: Path | None = None


_private = _Private()


@contextmanager
def private(path: Path) -> Iterator[None]:
    """Within it, this thread's warehouse is the file `path` and no lake (`mlcost load --lake`
    validates each file into a private warehouse first)."""
    before, _private.path = _private.path, path
    try:
        yield
    finally:
        _private.path = before


def lake_url() -> str | None:
    """The lake the warehouse's tables are read from ([warehouse] lake or $MLCOST_LAKE), or None
    for the embedded file; None within private()."""
    if _private.path is not None:
        return None
    from ingest.lake import settings

    return settings.lake_url()


def _lake_views(con: duckdb.DuckDBPyConnection) -> None:
    """With a lake, the warehouse's tables become temp views over its committed files (ingest/lake/views.py)."""
    url = lake_url()
    if url:
        from ingest.lake import views

        views.attach(con, url)


class _Turns:
    """Connections of one kind (read-only or read-write) open at a time in this process: DuckDB
    refuses a second configuration of an open file. `writers_waiting` tells sessions to let go."""

    def __init__(self) -> None:
        self.condition = threading.Condition()
        self.kind: bool | None = None  # read_only of the connections open now
        self.open = 0
        self.writers_waiting = 0

    def acquire(self, read_only: bool) -> None:
        with self.condition:
            if not read_only:
                self.writers_waiting += 1
            try:
                self.condition.wait_for(lambda: self.open == 0 or self.kind == read_only)
            finally:
                if not read_only:
                    self.writers_waiting -= 1
            self.kind, self.open = read_only, self.open + 1

    def release(self) -> None:
        with self.condition:
            self.open -= 1
            self.condition.notify_all()

    @contextmanager
    def take(self, read_only: bool) -> Iterator[None]:
        self.acquire(read_only)
        try:
            yield
        finally:
            self.release()


_turns = _Turns()
# per thread: rw = read-write connections open (a read inside one uses it), ro = read-only ones,
# session = the thread's _Session
_held = threading.local()


def _open(path: Path, read_only: bool = False, deadline: float | None = None) -> duckdb.DuckDBPyConnection:
    return _retry_on_lock(path, lambda: duckdb.connect(str(path), read_only=read_only), writer=not read_only,
                          deadline=deadline)


def _retry_on_lock(path: Path, action: Callable[[], T], writer: bool = False, deadline: float | None = None) -> T:
    """action(), retried with backoff while another process holds the file's lock (or, for the
    merge's ATTACH, a connection of this process has the file open), until `deadline`
    (time.monotonic(); default LOCK_WAIT_S from now). A writer posts a marker file while it
    waits, so that readers give way to it."""
    deadline = deadline if deadline is not None else time.monotonic() + LOCK_WAIT_S
    delay_s = 0.05
    marker = None
    try:
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
                if writer and marker is None:
                    marker = _post_marker(path)
                time.sleep(delay_s)
                delay_s = min(delay_s * 2, WRITER_BACKOFF_S if marker else READER_BACKOFF_S)
    finally:
        if marker is not None:
            marker.unlink(missing_ok=True)


def _post_marker(path: Path) -> Path | None:
    """The marker file saying this process waits to write `path` (None if it cannot be written)."""
    marker = path.with_name(path.name + WAITING_SUFFIX + str(os.getpid()))
    try:
        marker.touch()
    except OSError:  # a read-only folder: readers just do not give way
        return None
    return marker


def writer_waiting(path: Path) -> bool:
    """Whether a writer waits for the file: a write in this process, or a live process's marker
    (one left by a process that died, or older than a writer ever waits, is ignored)."""
    if _turns.writers_waiting:
        return True
    for name in glob.glob(glob.escape(str(path)) + WAITING_SUFFIX + "*"):
        pid = name.rsplit(".", 1)[-1]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
            fresh = time.time() - os.stat(name).st_mtime < LOCK_WAIT_S + 5
        except ProcessLookupError:
            continue
        except OSError:  # PermissionError: alive, someone else's; the marker gone meanwhile
            fresh = os.path.exists(name)
        if fresh:
            return True
    return False


def _give_way(path: Path) -> float:
    """Before opening a read connection, and before taking its turn: wait (at most LOCK_WAIT_S)
    while a writer waits for the file, unless this thread already holds a connection (the writer
    waits for that one too). Returns the deadline for the open that follows: the wait counts
    against LOCK_WAIT_S, so a page says "busy" no later than before."""
    deadline = time.monotonic() + LOCK_WAIT_S
    if getattr(_held, "ro", 0) or getattr(_held, "rw", 0):
        return deadline
    while writer_waiting(path) and time.monotonic() < deadline:
        time.sleep(READER_POLL_S)
    return deadline


@contextmanager
def connect(path: Path | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """A short-lived read-write connection with the schema in place; closed on exit."""
    path = path or db_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    session = getattr(_held, "session", None)
    if session is not None:  # this thread's own idle read connection would keep it waiting
        session.close_idle()
    with _turns.take(read_only=False):
        con = _open(path)
        _held.rw = getattr(_held, "rw", 0) + 1
        try:
            _settings(con)
            key = str(path.resolve())
            if key not in _schema_ready:
                with _schema_lock:
                    if key not in _schema_ready:
                        _put_schema(con)
                        _schema_ready.add(key)
            _lake_views(con)
            yield con
        finally:
            _held.rw -= 1
            con.close()


def _settings(con: duckdb.DuckDBPyConnection) -> None:
    # Dates and .df() timestamps must not depend on the machine's zone.
    con.execute("SET TimeZone = 'UTC'")
    # DuckDB's own bar would draw over `mlcost ingest`'s progress bars
    con.execute("SET enable_progress_bar = false")


def ensure_schema(path: Path) -> None:
    """Create or migrate the file's schema, once per process."""
    if not path.exists() or str(path.resolve()) not in _schema_ready:
        with connect(path):
            pass


@contextmanager
def read(path: Path | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-only connection (the schema put in place first if this process has not yet): the
    session's within session(), else a short-lived one closed on exit."""
    path = path or db_path()
    if getattr(_held, "rw", 0):  # inside a write on this thread: a second configuration would fail
        with connect(path) as con:
            yield con
        return
    ensure_schema(path)
    session = getattr(_held, "session", None)
    if session is not None and not session.in_use and session.path == path:
        with session.use() as con:
            yield con
        return
    deadline = _give_way(path)
    with _turns.take(read_only=True):
        con = _open(path, read_only=True, deadline=deadline)
        _held.ro = getattr(_held, "ro", 0) + 1
        try:
            _settings(con)
            _lake_views(con)
            yield con
        finally:
            _held.ro -= 1
            con.close()


class _Session:
    """One thread's reused read-only connection to one file, closed by a helper thread when idle
    or when a writer waits."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.con: duckdb.DuckDBPyConnection | None = None
        self.in_use = False  # read by its own thread only
        self.used_at = 0.0
        self.lock = threading.Lock()  # held while a read uses the connection
        self.stop = threading.Event()
        self.closer: threading.Thread | None = None

    @contextmanager
    def use(self) -> Iterator[duckdb.DuckDBPyConnection]:
        with self.lock:
            self.in_use = True
            try:
                if self.con is not None and writer_waiting(self.path):
                    self._close()
                if self.con is None:
                    self._open()
                _held.ro = getattr(_held, "ro", 0) + 1
                try:
                    yield self.con
                except BaseException:  # a query cut short (a rerun, an error): never reuse its connection
                    self._close()
                    raise
                finally:
                    _held.ro -= 1
            finally:
                self.in_use = False
                self.used_at = time.monotonic()

    def _open(self) -> None:
        deadline = _give_way(self.path)
        _turns.acquire(read_only=True)
        try:
            con = _open(self.path, read_only=True, deadline=deadline)
            _settings(con)
            _lake_views(con)
        except BaseException:
            _turns.release()
            raise
        self.con = con
        if self.closer is None:
            self.closer = threading.Thread(target=self._close_when_idle, name="mlcost-read-session", daemon=True)
            self.closer.start()

    def _close(self) -> None:
        """Close the connection (self.lock held)."""
        if self.con is not None:
            con, self.con = self.con, None
            try:
                con.close()
            finally:
                _turns.release()

    def close_idle(self) -> None:
        """Close the connection unless a read uses it."""
        if not self.in_use:
            with self.lock:
                self._close()

    def _close_when_idle(self) -> None:
        while not self.stop.wait(SESSION_IDLE_S / 2):
            if self.lock.acquire(blocking=False):
                try:
                    if self.con is not None and (time.monotonic() - self.used_at >= SESSION_IDLE_S
                                                 or writer_waiting(self.path)):
                        self._close()
                finally:
                    self.lock.release()

    def end(self) -> None:
        self.stop.set()
        if self.closer is not None:
            self.closer.join()
        with self.lock:
            self._close()


@contextmanager
def session(path: Path | None = None) -> Iterator[None]:
    """Within it, this thread's reads of the file share one read-only connection (see the module
    docstring for when it is closed); for a page render or a report. Nested, the outer one holds."""
    if getattr(_held, "session", None) is not None:
        yield
        return
    current = _Session(path or db_path())
    _held.session = current
    try:
        yield
    finally:
        _held.session = None
        current.end()


@contextmanager
def attached(stage: duckdb.DuckDBPyConnection, path: Path, held: list[float] | None = None,
             read_only: bool = False) -> Iterator[None]:
    """The warehouse file attached to a staging connection as `wh` (waiting out another
    process's lock like connect()), detached on exit; the seconds it was attached are appended
    to `held`. Read-only, other processes' readers (pages) are not kept waiting."""
    literal = "'" + str(path).replace("'", "''") + "'"  # ATTACH takes no bound parameters
    mode = " (READ_ONLY)" if read_only else ""
    deadline = None
    if read_only:
        deadline = _give_way(path)
    else:
        session = getattr(_held, "session", None)
        if session is not None:
            session.close_idle()
    with _turns.take(read_only=read_only):  # this process's other kind of connection waits meanwhile
        _retry_on_lock(path, lambda: stage.execute(f"ATTACH {literal} AS wh{mode}"), writer=not read_only,
                       deadline=deadline)
        attached_at = time.monotonic()
        try:
            yield
        finally:
            stage.execute("DETACH wh")
            if held is not None:
                held.append(time.monotonic() - attached_at)


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
        "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database()").fetchall()}
    # One transaction, one commit: schema.sql's ~100 statements each committed on their own
    # (an fsync each) cost a new warehouse 0.05-0.25 s wall, in one 0.04 s.
    with transaction(con):
        if wh_migrate.keyed(con):  # tables made with keys schema.sql no longer declares: rebuilt, rows kept
            aside = wh_migrate.set_aside(con)
            con.execute(text)
            wh_migrate.move_back(con, aside)
        else:
            con.execute(text)
        # a warehouse from before these were stored
        # a warehouse from before run_gpu_energy, or whose stored GPU days and run energy an older
        # schema.sql computed (its rules may differ): store them again. A new warehouse (no table
        # before schema.sql) has nothing to store.
        if stored_before and ("run_gpu_energy" not in stored_before or _has_rows(con, "gpu_minutes")
                              or _has_rows(con, "runs")):
            derived.refresh_run_energy(con)
        if "billing_line_runs" not in stored_before and _has_rows(con, "billing_lines"):
            derived.refresh_billing_runs(con)
        if _has_rows(con, "billing_lines"):  # a new schema.sql may allocate otherwise: store it again
            derived.refresh_allocation(con)
        con.execute("DELETE FROM schema_stamp")
        con.execute("INSERT INTO schema_stamp VALUES (?, ?)", [digest, datetime.now(timezone.utc)])


def _has_rows(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    return con.execute(f"SELECT EXISTS (SELECT 1 FROM {table})").fetchone()[0]


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """BEGIN ... COMMIT, rolled back on any error."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
