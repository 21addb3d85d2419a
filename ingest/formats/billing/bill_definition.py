"""A bill format as data, and the one engine that reads it in both languages.

A `Bill` says how a bill is detected (the columns its header needs), how its header names are
normalised, and, in `steps` (bill_steps.py), how each `billing_lines` column comes from the source
columns: which spellings, read as what (text, amount, quantity, UTC time, a charge category,
tags, ...), and the checks, in order, with the reason each gives. The first failing check is a
line's reason.

The engine turns that one definition into:
- `plan(fields)`: SQL over whole columns (bill_plan.py, with bill_sql.py's Builder and readers),
  which bill_stage.py runs in one pass; the lines SQL cannot read (a nested Parquet value, tags
  that are not plain JSON) are flagged for the reader below;
- `build(record)`: the same steps over one record (bill_build.py, with bill_values.py's readers),
  for those lines and for files DuckDB cannot read (JSON lines, a dialect it refuses);
- the parser contract (ingest/engine/contract.py) every bill offers the same way: `sniff`,
  `sniff_bytes`, `parse`, `parse_bytes`, `stage` and `totals`, which a format module binds with
  one line, `sniff, sniff_bytes, parse, parse_bytes, stage, totals = BILL.contract()`.
A format module (billing_focus.py, billing_aws.py, billing_gcp.py, billing_azure.py,
billing_aws_dbr.py) holds its `Bill` and no parsing code.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ingest.engine.contract import Lines, ParseContext, Parsed
from ingest.engine.staging import Source, Staged
from ingest.formats.billing import bill_stage, billing
from ingest.formats.billing.bill_build import column_of, read, reader
from ingest.formats.billing.bill_family import LINE_COLUMNS, Family, FileValue, Record
from ingest.formats.billing.bill_plan import plan
from ingest.formats.billing.bill_sql import Fields, Plan
from ingest.formats.billing.bill_steps import MonthSpan, Step


@dataclass(frozen=True)
class Bill:
    """One bill format (see the module docstring)."""

    kind: str  # the loader's name for it: billing_focus
    label: str  # how messages name it: FOCUS
    normalize: Callable[[str], str]  # a header name as the steps spell it
    detect: tuple[tuple[str, ...], ...]  # columns a header needs: each, one of these spellings
    steps: tuple[Step, ...]
    nulls: frozenset[str] = frozenset()  # cell texts that mean null
    per_file: tuple[FileValue, ...] = ()  # columns a file may lack, given by a [billing] setting
    money: tuple[str, ...] = ()  # other columns amounts are read from (never filled in as empty)
    # the format's own stager of JSON lines (bill_stage.stage's json_lines), else bill_stage reads them
    json_lines: Callable | None = field(default=None, repr=False, compare=False)
    family: Family = field(init=False, repr=False, compare=False)
    readers: tuple = field(init=False, repr=False, compare=False)  # (column, reader) of each step
    stored: tuple[str, ...] = field(init=False, repr=False, compare=False)  # the billing_lines columns given

    def __post_init__(self) -> None:
        readers = tuple((column_of(step), reader(step)) for step in self.steps)
        stored = tuple(c for step in self.steps for c in ((step.start, step.end) if isinstance(step, MonthSpan)
                                                          else (column_of(step),)) if not c.startswith("_"))
        unknown = set(stored) - set(LINE_COLUMNS)
        if unknown:  # a misspelt column fails at import, not on the first bill
            raise ValueError(f"{self.kind}: not billing_lines columns: {sorted(unknown)}")
        object.__setattr__(self, "readers", readers)
        object.__setattr__(self, "stored", stored)
        object.__setattr__(self, "family", Family(
            kind=self.kind, normalize=self.normalize, required=self.detect, build=self.build, nulls=self.nulls,
            label=self.label, per_file=self.per_file, money=self.money))

    def build(self, record: Record, columns: set[str] | None = None) -> list[dict]:
        """The billing_lines row of one record; BadValue with the first failing step's reason."""
        found = read(self.readers, record, set(record.fields) if columns is None else columns)
        row = dict.fromkeys(LINE_COLUMNS)
        for column in self.stored:
            row[column] = found[column]
        return [row, *({**row, **more} for more in found.get("_credits") or ())]

    def plan(self, fields: Fields) -> Plan:
        """The steps as SQL over the file's columns, checks in the steps' order."""
        return plan(self.steps, fields)

    # --- the parser contract (ingest/engine/contract.py), the same for every bill ----------------

    def sniff(self, name: str, head: str) -> bool:
        """A CSV header with the bill's columns, or JSON lines whose first object has them."""
        return billing.sniff_text(self.family, head)

    def sniff_bytes(self, name: str, data: bytes) -> bool:
        """A Parquet file whose columns are the bill's."""
        return billing.sniff_parquet(self.family, data)

    def parse(self, lines: Lines, ctx: ParseContext) -> Parsed:
        """A CSV or JSON-lines bill read line by line in Python (billing.py)."""
        return billing.parse_text(lines, ctx, self.family)

    def parse_bytes(self, data: bytes, ctx: ParseContext) -> Parsed:
        """A Parquet bill read row by row in Python (billing.py)."""
        return billing.parse_parquet(data, ctx, self.family)

    def stage(self, src: Source, con, ctx: ParseContext) -> Staged:
        """Stage a bill file (CSV, Parquet or JSON lines) into the staging tables (bill_stage.py)."""
        return bill_stage.stage(src, con, ctx, self.family, self.plan, json_lines=self.json_lines)

    def contract(self) -> tuple[Callable, Callable, Callable, Callable, Callable, Callable]:
        """What a format module exposes, in this order: sniff, sniff_bytes, parse, parse_bytes,
        stage, totals (billing.totals: lines and amounts per currency of a Parsed)."""
        return self.sniff, self.sniff_bytes, self.parse, self.parse_bytes, self.stage, billing.totals
