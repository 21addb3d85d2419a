"""Reading a bill Parquet file with DuckDB's `read_parquet`: typed columns (times, maps) keep
their types, text is trimmed as in a CSV, each row numbered by its place in the file.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import duckdb

from ingest.engine.contract import Reject
from ingest.engine.staging import Source
from ingest.formats.billing import bill_frame, billing
from ingest.formats.billing.bill_frame import WHITESPACE
from ingest.formats.billing.bill_sql import ident, literal
from ingest.formats.billing.billing import Family


def read_parquet(src: Source, con: duckdb.DuckDBPyConnection, family: Family, spool: Path,
                  warnings: list[str]) -> bill_frame.Frame:
    path = str(src.path)
    if src.compression:  # DuckDB reads Parquet from a plain file: expand it into `spool`, streamed
        path = str(spool / "bill.parquet")
        with src.open_binary() as stream, open(path, "wb") as copy:
            shutil.copyfileobj(stream, copy, 1 << 20)
    try:
        described = con.execute(f"DESCRIBE SELECT * FROM read_parquet({literal(path)})").fetchall()
    except duckdb.Error as error:
        return bill_frame.Frame(None, set(), None, Reject(0, f"unreadable Parquet file: {error}"))
    names = [row[0] for row in described]
    kinds = {row[0]: row[1] for row in described}
    columns = [family.normalize(n) for n in names]
    missing = family.missing(set(columns))
    if missing:
        return bill_frame.Frame(None, set(columns), None, Reject(0, f"the {family.label} file lacks {', '.join(missing)}"))
    header = billing.read_header(family, names)
    warnings.extend(header.warnings)
    position = {}
    for index, column in enumerate(columns):
        position.setdefault(column, index)
    types = {}
    for column, index in position.items():
        kind = kinds[names[index]]
        types[column] = (kind if kind.startswith(("TIMESTAMP", "DATE", "MAP(", "STRUCT", "LIST"))
                         or kind.endswith("[]") else "VARCHAR")
    fields = bill_frame.fields_of(position, columns, names, header)
    fields.types.update(types)

    def load(con: duckdb.DuckDBPyConnection, used: set[str], convert) -> None:
        select = bill_frame.constants(header, used)
        for column in (c for c in position if c in used):
            name, alias = ident(names[position[column]]), f"c{position[column]}"
            if types[column] == "VARCHAR":  # trimmed only with whitespace at an edge (as _cleaned)
                value = f"CAST({name} AS VARCHAR)"
                text = f"trim({value}, {literal(WHITESPACE)})"
                select.append(f"CASE WHEN {value} = '' THEN NULL WHEN NOT (ord({value}) <= 32 OR ord({value}[-1]) <= 32) "
                              f"THEN {value} WHEN {text} = '' THEN NULL ELSE {text} END AS {alias}")
            else:
                select.append(f"{name} AS {alias}")
        source = (f"(SELECT file_row_number + 1 AS _line, file_row_number + 1 AS _end, "
                  f"{', '.join(select) or '1 AS _none'} FROM read_parquet({literal(path)}, file_row_number=true))")
        con.execute(f"CREATE TEMP TABLE bill_converted AS {convert(source, '_line, _end, ')}")
        con.execute("CREATE TEMP VIEW bill_lines AS SELECT * FROM bill_converted")

    return bill_frame.Frame(fields, set(columns) | set(header.constants), load, text=False)
