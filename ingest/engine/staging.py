"""One file's private staging database and the file itself as a stream.

A load has two steps. Parse: the file is read, typed and checked into a private in-memory
DuckDB shaped like the warehouse (the same tables, `load_id` left NULL), under a memory limit
so it spills to disk instead of growing. Merge: the staged rows go into the warehouse in one
short transaction (ingest/engine/warehouse.py), so the warehouse is locked for the merge alone.

A columnar parser module exposes, besides KIND, TABLES, sniff() and totals():

    def stage(src: Source, con: duckdb.DuckDBPyConnection, ctx: ParseContext) -> Staged

It reads `src` with DuckDB's or Arrow's own readers (`src.path` with `src.compression`, or
`src.open_text()` in batches), inserts its good rows into the staging tables named like the
warehouse's (every row with its `source_line`), and every bad line into `rejects`
(path, line, reason, raw) with its 1-based line number. Nothing whole-file is held in Python.
A module may also expose `read_early(src, head) -> batches | None` (batch_sql.read_early): the
loader calls it once the kind is known and hands what it returns to stage() as a fourth argument.
"""
from __future__ import annotations

import gzip
import io
import os
import re
import sys
import tempfile
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import IO, TYPE_CHECKING, Callable, Iterator

import duckdb

if TYPE_CHECKING:  # Arrow is imported by the functions that build tables: commands that
    import pyarrow as pa  # only merge or read (loads, unload, the dashboard) start without it

from ingest.engine.contract import Parsed
from ingest.settings import limits

# Staging memory: DuckDB spills beyond this instead of growing (per load, in this process).
MEMORY_LIMIT = os.environ.get("MLCOST_STAGE_MEMORY", "512MB")
GZIP_MAGIC, ZSTD_MAGIC = b"\x1f\x8b", b"\x28\xb5\x2f\xfd"


@dataclass(frozen=True)
class Source:
    """A file to load: where it is, the name shown to the user, and how it is compressed."""

    path: Path
    name: str
    compression: str | None = None  # "gzip" | "zstd" | None, from the file's first bytes
    # progress(bytes of the file read, lines read), called by line_batches as it goes
    progress: Callable[[int, int], None] | None = field(default=None, compare=False)

    @classmethod
    def of(cls, path: Path, name: str | None = None,
           progress: Callable[[int, int], None] | None = None) -> "Source":
        with open(path, "rb") as handle:
            magic = handle.read(4)
        compression = ("gzip" if magic[:2] == GZIP_MAGIC else "zstd" if magic == ZSTD_MAGIC else None)
        return cls(path, name or str(path), compression, progress)

    @property
    def duckdb_compression(self) -> str:
        """The `compression` argument for DuckDB's readers."""
        return self.compression or "none"

    def open_binary(self, raw: IO[bytes] | None = None) -> IO[bytes]:
        """The decompressed bytes as a stream (never the whole file in memory); from `raw`, the
        file opened by the caller (to follow its position), when given."""
        owned = raw is None  # a file opened here is closed with the stream
        raw = raw if raw is not None else open(self.path, "rb")
        if self.compression == "gzip":  # GzipFile leaves closing `raw` to the caller
            return limits.bounded(gzip.GzipFile(fileobj=raw, mode="rb"), self.name, raw.tell,
                                  raw=raw if owned else None)
        if self.compression == "zstd":
            import zstandard

            stream = zstandard.ZstdDecompressor().stream_reader(raw, closefd=owned)
            return limits.bounded(stream, self.name, raw.tell)
        return raw

    def open_text(self) -> IO[str]:
        """The decompressed text as a stream: UTF-8 (a BOM dropped), newlines kept as written."""
        return io.TextIOWrapper(self.open_binary(), encoding="utf-8-sig", newline="")


class NotText(Exception):
    """The file is not UTF-8 text; `byte` is where it stops being so (in the decompressed file)."""

    def __init__(self, byte: int) -> None:
        super().__init__(byte)
        self.byte = byte


LINE_BATCH_BYTES = 8 << 20
BATCH_CHUNK_ROWS = 8_192  # a batch in slices (no copy): DuckDB scans the slices of one batch on several threads
BOM = b"\xef\xbb\xbf"


def line_batches(src: Source) -> Iterator[pa.Table]:
    """The file's lines as Arrow tables of about LINE_BATCH_BYTES: `line` (1-based) and `raw`,
    the text split at \\n as written, without its line end (\\r too), a leading BOM dropped.
    Raises NotText where the bytes are not UTF-8. Reports src.progress after each batch."""
    import codecs

    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    number, offset, first = 1, 0, True
    max_line = limits.current().max_line_bytes
    skipping = 0  # bytes dropped so far of a line over max_line (never held whole)
    # The file is read into one buffer used again for every batch (the split below copies the
    # lines out of it): fresh 8 MB blocks per read, joined and cut, cost more in page faults
    # than the split itself (500k serving windows: 0.2-0.5 CPU s, 45k faults; 0.1 s, 5k faults).
    buf, held = bytearray(2 * LINE_BATCH_BYTES), 0  # buf[:held]: the start of a line not yet ended
    with open(src.path, "rb") as raw, src.open_binary(raw) as stream:
        while True:
            if held + LINE_BATCH_BYTES > len(buf):
                grown = bytearray(held + 2 * LINE_BATCH_BYTES)
                grown[:held] = buf[:held]
                buf = grown
            read = stream.readinto(memoryview(buf)[held:held + LINE_BATCH_BYTES])
            ended, end = not read, held + read
            if skipping:  # nothing held: the bytes read are all new
                cut = buf.find(b"\n", 0, end)
                if cut < 0 and not ended:
                    skipping += read
                    continue
                tail = bytes(buf[cut:end]) if cut >= 0 else b""
                size = skipping + read - len(tail)
                data = limits.too_long_marker(size).encode() + tail
                offset += size - len(data) + len(tail)
                skipping = 0
                if len(data) > len(buf):
                    buf = bytearray(len(data) + 2 * LINE_BATCH_BYTES)
                buf[:len(data)] = data
                end = len(data)
            start = 0  # the data is buf[start:end]
            if first and buf.startswith(BOM, 0, end):
                start, offset = 3, 3
            first = False
            if ended:
                cut = end  # the last line, whatever it ends with
                if cut == start:
                    break
            else:
                cut = buf.rfind(b"\n", start, end)
                if cut < 0:
                    if end - start > max_line:  # one line past the limit: drop it, keep its size
                        skipping, held = end - start, 0
                        continue
                    buf[:end - start] = buf[start:end]
                    held = end - start
                    continue
            length = cut - start
            # checked here: Arrow's own check of one long value is slow
            if length and np.frombuffer(buf, np.uint8, count=length, offset=start).max() >= 0x80:
                try:
                    codecs.utf_8_decode(memoryview(buf)[start:cut], "strict", True)
                except UnicodeDecodeError as error:
                    raise NotText(offset + error.start) from None
            # one string of the whole batch, on the buffer's bytes (pa.array of a list would
            # import pandas to ask whether it was handed a Series: ~1 s of every `mlcost ingest`)
            text = pa.Array.from_buffers(pa.string(), 1, [None, pa.py_buffer(np.array([0, length], np.int32)),
                                                          pa.py_buffer(memoryview(buf)[start:cut])])
            lines = pc.list_flatten(pc.split_pattern(text, "\n"))  # the lines in buffers of their own
            del text
            if buf.find(b"\r", start, cut) >= 0:
                lines = pc.utf8_rtrim(lines, "\r")
            # A line over the limit within the batch: its marker instead. Asked first without a
            # Python scalar (pyarrow turning one into Arrow imports pandas: ~1 s of every big file).
            if length > max_line and pc.max(pc.binary_length(lines)).as_py() > max_line:
                sizes = pc.binary_length(lines)
                long = pc.greater(sizes, arrow_scalar(max_line))
                if pc.any(long).as_py():
                    markers = pc.binary_join_element_wise(arrow_scalar(limits.too_long_marker(0)[:-1]),
                                                          pc.cast(sizes, pa.string()), arrow_scalar(""))
                    lines = pc.if_else(long, markers, lines)
            count = len(lines)
            numbers = pa.Array.from_buffers(pa.int64(), count, [None, pa.py_buffer(
                np.arange(number, number + count, dtype=np.int64))])
            table = pa.Table.from_arrays([numbers, lines], names=["line", "raw"])
            yield pa.Table.from_batches(table.to_batches(max_chunksize=BATCH_CHUNK_ROWS))
            number += count
            offset += length + 1
            if src.progress is not None:
                src.progress(raw.tell(), number - 1)
            if ended:
                break
            held = end - cut - 1  # the next batch starts with the rest of this read
            buf[:held] = buf[cut + 1:end]


def arrow_scalar(value: int | str) -> pa.Scalar:
    """An Arrow int64 or string scalar built from its bytes: pa.scalar() and compute functions
    handed a Python value import pandas to ask whether it is a Series (~0.5 s of a load)."""
    import struct

    import pyarrow as pa

    if isinstance(value, int):
        return pa.Array.from_buffers(pa.int64(), 1, [None, pa.py_buffer(struct.pack("<q", value))])[0]
    data = value.encode()
    return pa.Array.from_buffers(pa.string(), 1, [None, pa.py_buffer(struct.pack("<2i", 0, len(data))),
                                                  pa.py_buffer(data)])[0]


def lines(src: Source) -> Iterator[tuple[int, str]]:
    """(line number, text) of every line, streamed (for parsers that read line by line)."""
    for batch in line_batches(src):
        yield from zip(batch["line"].to_pylist(), batch["raw"].to_pylist())


@dataclass
class Staged:
    """What a columnar parser reports of one file: records accepted (a repeat counts twice,
    though only the later row loads) and the kind's figures for the --json summary."""

    accepted: int = 0
    totals: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # Parsed.warnings, shown in the file's summary


def open_stage(shaped: bool = True) -> duckdb.DuckDBPyConnection:
    """A private in-memory database with the warehouse's tables (columns and types, without
    keys or NOT NULL: a repeated key is settled at the merge), in UTC, under MEMORY_LIMIT.
    Not `shaped`: without those tables (work on the attached warehouse alone: ~15 ms less)."""
    # Rows carry their line numbers (source_line), so their order in a table does not matter.
    con = duckdb.connect(":memory:", config={"memory_limit": MEMORY_LIMIT, "preserve_insertion_order": False})
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET enable_progress_bar = false")  # the CLI draws its own
    con.execute("SET temp_directory = ?", [str(Path(tempfile.gettempdir()) / "mlcost-staging")])  # where it spills
    global _table_ddl
    if not shaped:
        return con
    if _table_ddl is None:  # the warehouse's tables, stripped of keys: worked out once per process
        con.execute("ATTACH ':memory:' AS shape")
        con.execute("USE shape")
        con.execute(resources.files("ingest").joinpath("schema.sql").read_text())
        con.execute("USE memory")
        tables = con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = 'shape'").fetchall()
        for (table,) in tables:
            con.execute(f"CREATE TABLE {table} AS SELECT * FROM shape.{table} LIMIT 0")
        con.execute("DETACH shape")
        _table_ddl = [sql for (sql,) in con.execute(
            "SELECT sql FROM duckdb_tables() WHERE database_name = 'memory' ORDER BY table_name").fetchall()]
    else:  # running schema.sql again (views, macros) costs ~80 ms a file
        for sql in _table_ddl:
            con.execute(sql)
    return con


_table_ddl: list[str] | None = None


# Rows unique by these columns: a key repeated within one file keeps its last line.
UNIQUE_BY: dict[str, tuple[str, ...]] = {
    "runs": ("run_id",), "serving_windows": ("window_key",), "billing_lines": ("line_key",),
    "gpu_samples": ("host", "gpu_index", "sampled_at"),
}
INSERT_BATCH_ROWS = 50_000


def _arrow_types() -> dict:
    """DuckDB type name -> Arrow type, for the staging tables' columns."""
    import pyarrow as pa

    return {
        "VARCHAR": pa.string(), "DOUBLE": pa.float64(), "BIGINT": pa.int64(), "INTEGER": pa.int32(),
        "BOOLEAN": pa.bool_(), "DATE": pa.date32(), "TIMESTAMP WITH TIME ZONE": pa.timestamp("us", tz="UTC"),
        "VARCHAR[]": pa.list_(pa.string()), "INTEGER[]": pa.list_(pa.int32()),
        "MAP(VARCHAR, VARCHAR)": pa.map_(pa.string(), pa.string()),
    }


def arrow_schema(con: duckdb.DuckDBPyConnection, table: str) -> pa.Schema:
    """A staging table's columns as an Arrow schema (DECIMAL stays decimal128: money stays exact)."""
    import pyarrow as pa

    types = _arrow_types()
    fields = []
    for name, type_name, *_ in con.execute(f"DESCRIBE {table}").fetchall():
        decimal = re.fullmatch(r"DECIMAL\((\d+),\s*(\d+)\)", type_name)
        fields.append(pa.field(name, pa.decimal128(int(decimal[1]), int(decimal[2])) if decimal
                               else types[type_name]))
    return pa.schema(fields)


def insert_parsed(con: duckdb.DuckDBPyConnection, parsed: Parsed, source: str) -> None:
    """Stage an old-style parser's Parsed: its rows (dicts or a pyarrow table) as Arrow batches
    into the tables of the same names, its rejects into `rejects` (raw cut to 500 characters)."""
    import pyarrow as pa

    for table, rows in parsed.tables.items():
        schema = arrow_schema(con, table)
        if isinstance(rows, pa.Table):
            count = rows.num_rows
            columns = [rows[f.name].cast(f.type) if f.name in rows.column_names else pa.nulls(count, f.type)
                       for f in schema]
            _insert_batches(con, table, pa.Table.from_arrays(columns, schema=schema))
            continue
        if len(rows) <= BOUND_ROWS and "pandas" not in sys.modules:
            _insert_bound(con, table, rows)
            continue
        for start in range(0, len(rows), INSERT_BATCH_ROWS):
            batch = rows[start:start + INSERT_BATCH_ROWS]
            _insert_batches(con, table, pa.Table.from_pylist(
                [{name: row.get(name) for name in schema.names} for row in batch], schema=schema))
    for start in range(0, len(parsed.rejects), INSERT_BATCH_ROWS):
        batch = parsed.rejects[start:start + INSERT_BATCH_ROWS]
        add_rejects(con, source, [(r.line, r.reason, r.raw) for r in batch])


# A few rows (the lines a columnar parse leaves to the reader, usually a handful) go in as bound
# lists: Arrow's from_pylist imports pandas (~0.3 CPU s, 0.5 s wall of a load that has one such
# line), binding costs ~1 us a value; past this many rows, or once pandas is loaded, Arrow.
BOUND_ROWS = 5_000


def _insert_bound(con: duckdb.DuckDBPyConnection, table: str, rows: list[dict]) -> None:
    """Rows (dicts by column) into a staging table as bound lists unnested side by side, each
    value as from_pylist would type it: money as its fixed-point text cast to the column's
    DECIMAL, times and dates as ISO text (an aware time keeps its instant), maps as keys and values."""
    if not rows:
        return
    inner, outer, params = [], [], {}
    for index, (name, type_name, *_) in enumerate(con.execute(f"DESCRIBE {table}").fetchall()):
        values = [row.get(name) for row in rows]
        column = f"c{index}"
        if type_name.startswith("DECIMAL"):
            params[column] = [None if v is None else format(v, "f") for v in values]
            inner.append(f"unnest(CAST(${column} AS VARCHAR[])) AS {column}")
            outer.append(f"CAST({column} AS {type_name})")
        elif type_name in ("TIMESTAMP WITH TIME ZONE", "DATE"):
            params[column] = [None if v is None else v.isoformat() for v in values]
            inner.append(f"unnest(CAST(${column} AS VARCHAR[])) AS {column}")
            outer.append(f"CAST({column} AS {type_name})")
        elif type_name.startswith("MAP("):
            params[column + "k"] = [None if v is None else list(v) for v in values]
            params[column + "v"] = [None if v is None else list(v.values()) for v in values]
            inner.append(f"unnest(CAST(${column}k AS VARCHAR[][])) AS {column}k, unnest(CAST(${column}v AS VARCHAR[][])) AS {column}v")
            outer.append(f"CASE WHEN {column}k IS NOT NULL THEN map({column}k, {column}v) END")
        else:
            if type_name == "DOUBLE":
                values = [None if v is None else float(v) for v in values]
            params[column] = values
            list_type = type_name[:-2] + "[][]" if type_name.endswith("[]") else type_name + "[]"
            inner.append(f"unnest(CAST(${column} AS {list_type})) AS {column}")
            outer.append(column)
    con.execute(f"INSERT INTO {table} SELECT {', '.join(outer)} FROM (SELECT {', '.join(inner)})", params)


def add_rejects(con: duckdb.DuckDBPyConnection, source: str, rejects: list[tuple[int, str, str]]) -> None:
    """Stage refused lines: (line, reason, raw text) each."""
    if not rejects:
        return
    lines, reasons, raws = zip(*rejects)
    # lists as bound parameters, unnested side by side: pa.array of a list would import pandas
    # (~0.5 s of a load's start)
    con.execute("INSERT INTO rejects SELECT NULL, ?, unnest(?::BIGINT[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[])",
                [source, list(lines), list(reasons), [(raw or "")[:500] for raw in raws]])


def _insert_batches(con: duckdb.DuckDBPyConnection, table: str, rows: pa.Table) -> None:
    import pyarrow as pa

    # Columns are in the staging table's order, so a positional insert is exact.
    for batch in rows.to_batches(INSERT_BATCH_ROWS):
        con.from_arrow(pa.Table.from_batches([batch], schema=rows.schema)).insert_into(table)


def keep_last(con: duckdb.DuckDBPyConnection, table: str, repeated: bool | None = None) -> None:
    """Within the staged `table`, a key (UNIQUE_BY) repeated keeps only its last line's row;
    `repeated` False: the caller knows no key repeats (nothing to look for, only recorded)."""
    key = ", ".join(UNIQUE_BY[table])
    done = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'kept_last' AND temporary").fetchall()[0][0]
    if not done:
        con.execute("CREATE TEMP TABLE kept_last (table_name VARCHAR)")
    elif con.execute("SELECT count(*) FROM kept_last WHERE table_name = ?", [table]).fetchall()[0][0]:
        return
    if repeated is None:
        repeated = con.execute(f"SELECT count(*) FROM (SELECT 1 FROM {table} GROUP BY {key} HAVING count(*) > 1)"
                               ).fetchall()[0][0] > 0
    if repeated:
        con.execute(f"CREATE OR REPLACE TABLE {table} AS SELECT * FROM {table} "
                    f"QUALIFY row_number() OVER (PARTITION BY {key} ORDER BY source_line DESC) = 1")
    con.execute("INSERT INTO kept_last VALUES (?)", [table])


def count(con: duckdb.DuckDBPyConnection, table: str) -> int:
    return con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]
