"""`mlcost load --lake`: each file validated by the embedded pipeline, then written to the lake.

Per file: the loader (ingest/pipeline/loader.py: detection, strict parsing, rejects with line numbers)
loads it into a private, fresh DuckDB file; that load's rows go to Parquet files under
tables/ named after the lake load id, and the ledger entry _ledger/<load_id>.json is written
last, in one atomic step. Until it exists nothing of the load is visible (readers read only the
files ledger entries list), so a process killed in between leaves orphans, never a partial load;
vacuum() removes orphans older than ORPHAN_AGE_S. Processes on any number of machines may load
disjoint files at once: they write different file names and different ledger entries.
"""
from __future__ import annotations

import hashlib
import os
import socket
import tempfile
import time
from datetime import datetime, timezone, tzinfo
from pathlib import Path
from typing import Callable, Iterator

import duckdb

from ingest.lake import layout
from ingest.lake.store import Lake, open_lake

ORPHAN_AGE_S = 3600.0  # an uncommitted file this old belongs to a load that died
FORMAT = 1  # the ledger entry's format; docs/lake.md
HASH_CHUNK_BYTES = 1 << 20


def load_files(url: str, paths: list[Path], kind: str | None = None, tz: tzinfo = timezone.utc,
               host: str | None = None, at: datetime | None = None, started_at: datetime | None = None,
               scrape_interval_s: float | None = None, after_commit: Callable[[int], None] | None = None,
               ) -> Iterator:
    """Load each file into the lake at `url`; yields each file's loader.FileSummary.
    `after_commit(load_id)` (tests) runs between the data files and the ledger entry."""
    from ingest.engine import warehouse
    from ingest.pipeline import loader

    lake = open_lake(url)
    vacuum(lake)  # what an earlier process killed mid-load left behind
    options = warehouse.load_options(getattr(tz, "key", None) or str(tz), host, at, started_at, scrape_interval_s)
    for path in paths:
        yield load_file(lake, path, kind, tz, host, at, started_at, scrape_interval_s, options, after_commit,
                        loader)


def load_file(lake: Lake, path: Path, kind, tz, host, at, started_at, scrape_interval_s, options: str,
              after_commit, loader, display_name: str | None = None):
    """One file (see load_files); its FileSummary. `display_name` (default: the path) is the name
    its ledger entry and rejects carry: mlcost-spark's tasks read a local copy of an s3:// object."""
    from ingest.engine import wh_connection

    name = display_name or str(path)
    try:
        sha256 = _sha256(path)
    except OSError as error:
        return loader.FileSummary(name, kind, error=f"{name}: cannot read ({error.strerror or error})")
    entries = lake.entries(fresh=True)
    earlier = [entry for entry in entries.values() if entry.record.get("sha256") == sha256]
    same = [entry for entry in earlier if entry.record.get("options", "") == options
            and (kind is None or entry.record.get("kind") == kind)]
    if same:
        return loader.FileSummary(name, same[0].record.get("kind"), status="already_loaded")
    with tempfile.TemporaryDirectory(prefix="mlcost-lake-") as scratch:
        private = Path(scratch) / "private.duckdb"
        with wh_connection.private(private):
            summary = loader.ingest_file(path, kind, tz, display_name=name, host=host, at=at,
                                         started_at=started_at, scrape_interval_s=scrape_interval_s)
        if summary.status not in ("loaded", "rejected"):
            return summary
        con = duckdb.connect(str(private), read_only=True)
        try:
            con.execute("SET TimeZone = 'UTC'")
            private_id, source, kind_read, options_read, loaded, rejected, loaded_at = con.execute(
                "SELECT load_id, path, kind, coalesce(options, ''), rows_loaded, rows_rejected, loaded_at "
                "FROM loads").fetchall()[0]
            load = layout.load_id(sha256, kind_read, options_read)
            if lake.exists(layout.ledger_entry(load)):  # another process committed it meanwhile
                summary.status, summary.rows_loaded, summary.rows_rejected = "already_loaded", 0, 0
                return summary
            files, rows = _write_tables(con, lake, load, private_id, Path(scratch))
        finally:
            con.close()
    if after_commit is not None:
        after_commit(load)
    supersedes = sorted({entry.load_id for entry in earlier if entry.load_id != load})
    lake.put_json(layout.ledger_entry(load), {
        "format": FORMAT, "load_id": str(load), "path": source, "sha256": sha256, "kind": kind_read,
        "options": options_read, "rows_loaded": loaded, "rows_rejected": rejected,
        "loaded_at": loaded_at.astimezone(timezone.utc).isoformat(),
        "committed_at": datetime.now(timezone.utc).isoformat(timespec="microseconds"),
        "supersedes": [str(old) for old in supersedes], "files": files, "rows": rows,
        "writer": f"{socket.gethostname()}:{os.getpid()}",
    })
    summary.replaced = supersedes
    summary.merge_s = None
    return summary


def _write_tables(con: duckdb.DuckDBPyConnection, lake: Lake, load: int, private_id: int,
                  scratch: Path) -> tuple[dict[str, list[str]], dict[str, int]]:
    """The private load's rows of each lake table as Parquet files in the lake (one per UTC month
    of a partitioned table), their load_id the lake's; (files per table, rows per table)."""
    files: dict[str, list[str]] = {}
    rows: dict[str, int] = {}
    for table, column in layout.LOADED.items():
        select = (f"SELECT *, CAST({load} AS BIGINT) AS load_id FROM {table}" if table == "run_evals"
                  else f"SELECT * REPLACE (CAST({load} AS BIGINT) AS load_id) FROM {table} "
                       f"WHERE load_id = {int(private_id)}")
        count = con.execute(f"SELECT count(*) FROM ({select})").fetchone()[0]
        if not count:
            continue
        rows[table] = count
        months = ([None] if column is None else [month for (month,) in con.execute(
            f"SELECT DISTINCT strftime({column}, '%Y-%m') FROM ({select}) ORDER BY 1").fetchall()])
        for n, month in enumerate(months):
            part = select if month is None else (
                f"SELECT * FROM ({select}) WHERE strftime({column}, '%Y-%m') = '{month}'")
            local = scratch / f"{table}-{n}.parquet"
            con.execute(f"COPY ({part}) TO '{local}' (FORMAT parquet, COMPRESSION zstd)")
            relative = layout.data_file(table, load, n, month)
            lake.put_file(local, relative)
            files.setdefault(table, []).append(relative)
    return files, rows


def vacuum(lake: Lake, older_than_s: float = ORPHAN_AGE_S) -> list[str]:
    """Remove the files no reader reads, once older than `older_than_s`: data files of loads
    with no ledger entry (a process died before committing) or superseded by another load, and
    derived generations other than the current one. Returns the paths removed (relative)."""
    entries = lake.entries(fresh=True)
    superseded = {old for entry in entries.values() for old in entry.supersedes}
    current = (lake.read_json(layout.CURRENT) or {}).get("generation")
    cutoff = time.time() - older_than_s
    removed = []
    for relative, modified in lake.listing(layout.TABLES):
        load = layout.load_of(relative)
        if modified < cutoff and (load is None or load not in entries or load in superseded):
            lake.remove(relative)
            removed.append(relative)
    for relative, modified in lake.listing(layout.DERIVED_DIR):
        parts = relative.split("/")  # derived/<table>/generation=<generation>/<file>
        if len(parts) > 3 and parts[2] != f"generation={current}" and modified < cutoff:
            lake.remove(relative)
            removed.append(relative)
    return removed


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as source:
        while chunk := source.read(HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()
