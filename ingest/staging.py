"""One file's private staging database and the file itself as a stream.

A load has two steps. Parse: the file is read, typed and checked into a private in-memory
DuckDB shaped like the warehouse (the same tables, `load_id` left NULL), under a memory limit
so it spills to disk instead of growing. Merge: the staged rows go into the warehouse in one
short transaction (ingest/warehouse.py), so the warehouse is locked for the merge alone.

A columnar parser module exposes, besides KIND, TABLES, sniff() and totals():

    def stage(src: Source, con: duckdb.DuckDBPyConnection, ctx: ParseContext) -> Staged

It reads `src` with DuckDB's or Arrow's own readers (`src.path` with `src.compression`, or
`src.open_text()` in batches), inserts its good rows into the staging tables named like the
warehouse's (every row with its `source_line`), and every bad line into `rejects`
(path, line, reason, raw) with its 1-based line number. Nothing whole-file is held in Python.
"""
from __future__ import annotations

import gzip
import io
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import IO

import duckdb

# Staging memory: DuckDB spills beyond this instead of growing (per load, in this process).
MEMORY_LIMIT = os.environ.get("MLCOST_STAGE_MEMORY", "512MB")
GZIP_MAGIC, ZSTD_MAGIC = b"\x1f\x8b", b"\x28\xb5\x2f\xfd"


@dataclass(frozen=True)
class Source:
    """A file to load: where it is, the name shown to the user, and how it is compressed."""

    path: Path
    name: str
    compression: str | None = None  # "gzip" | "zstd" | None, from the file's first bytes

    @classmethod
    def of(cls, path: Path, name: str | None = None) -> "Source":
        with open(path, "rb") as handle:
            magic = handle.read(4)
        compression = ("gzip" if magic[:2] == GZIP_MAGIC else "zstd" if magic == ZSTD_MAGIC else None)
        return cls(path, name or str(path), compression)

    @property
    def duckdb_compression(self) -> str:
        """The `compression` argument for DuckDB's readers."""
        return self.compression or "none"

    def open_binary(self) -> IO[bytes]:
        """The decompressed bytes as a stream (never the whole file in memory)."""
        if self.compression == "gzip":
            return gzip.open(self.path, "rb")
        if self.compression == "zstd":
            import zstandard

            return zstandard.ZstdDecompressor().stream_reader(open(self.path, "rb"), closefd=True)
        return open(self.path, "rb")

    def open_text(self) -> IO[str]:
        """The decompressed text as a stream: UTF-8 (a BOM dropped), newlines kept as written."""
        return io.TextIOWrapper(self.open_binary(), encoding="utf-8-sig", newline="")


@dataclass
class Staged:
    """What a columnar parser reports of one file: records accepted (a repeat counts twice,
    though only the later row loads) and the kind's figures for the --json summary."""

    accepted: int = 0
    totals: dict = field(default_factory=dict)


def open_stage() -> duckdb.DuckDBPyConnection:
    """A private in-memory database with the warehouse's tables (columns and types, without
    keys or NOT NULL: a repeated key is settled at the merge), in UTC, under MEMORY_LIMIT."""
    con = duckdb.connect(":memory:", config={"memory_limit": MEMORY_LIMIT})
    con.execute("SET TimeZone = 'UTC'")
    con.execute("ATTACH ':memory:' AS shape")
    con.execute("USE shape")
    con.execute(resources.files("ingest").joinpath("schema.sql").read_text())
    con.execute("USE memory")
    tables = con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = 'shape'").fetchall()
    for (table,) in tables:
        con.execute(f"CREATE TABLE {table} AS SELECT * FROM shape.{table} LIMIT 0")
    con.execute("DETACH shape")
    return con
