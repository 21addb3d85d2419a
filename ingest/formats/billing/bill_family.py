"""What a bill format family is, and the row it gives: the `billing_lines` columns (FOCUS names in
snake_case, see docs/schema.md), one source line as the readers hand it on (`Record`), a column a
setting may stand in for (`FileValue`), and a family's header rules and row builder (`Family`).

The lowest module of the bill formats: it imports nothing else of them. Bills are UTC by definition
(FOCUS, CUR, the GCP and Azure exports): --tz does not apply.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timezone

from ingest.engine import values

TABLE = "billing_lines"
UTC = timezone.utc
CATEGORIES = ("usage", "purchase", "tax", "credit", "adjustment")

# The billing_lines columns a parser fills (the warehouse adds load_id), in table order.
LINE_COLUMNS = (
    "line_key", "provider", "billing_account_id", "sub_account_id", "sub_account_name",
    "billed_cost", "effective_cost", "list_cost", "billing_currency",
    "charge_period_start", "charge_period_end", "billing_period_start", "billing_period_end",
    "charge_category", "charge_category_raw", "charge_description", "service_name", "sku_id",
    "resource_id", "resource_name", "instance_type", "region_id", "consumed_quantity",
    "consumed_unit", "pricing_category", "pricing_category_raw", "tags", "source_line_id",
    "source_file", "source_format", "source_kind", "source_line",
)
# Columns of a row that say where it came from, not what it is: left out of a hashed line key.
NOT_CONTENT = frozenset({"line_key", "source_file", "source_line", "source_format", "source_kind"})



@dataclass(frozen=True)
class Record:
    """One source line or row: its 1-based line (row number for Parquet), values by normalised
    column name (text from CSV, Python values from JSON and Parquet), and its raw text."""

    line: int
    fields: dict[str, object]
    raw: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)  # normalised -> as the file names it

    def get(self, *names: str) -> object:
        """The first present value among these column names (None when all are absent)."""
        for name in names:
            value = self.fields.get(name)
            if not values.is_absent(value):
                return value
        return None

    def name(self, *names: str) -> str:
        """The first of these columns the record has a value in, else the first the file has,
        as the file spells it (for reasons a user recognises)."""
        if len(names) == 1:
            return self.labels.get(names[0], names[0])
        found = next((n for n in names if not values.is_absent(self.fields.get(n))), None)
        found = found or next((n for n in names if n in self.labels), names[0])
        return self.labels.get(found, found)


@dataclass(frozen=True)
class FileValue:
    """A column some exports leave out altogether (the currency of a one-currency account): where
    the header has none of `names`, the `[billing] <setting>` of mlcost.toml gives every line's
    value, and without that setting the file is refused once, naming it."""

    names: tuple[str, ...]  # normalised names, any one of which is the column
    setting: str  # the key under [billing]
    what: str  # what it is, for messages: "currency"


@dataclass(frozen=True)
class Family:
    """One bill format family: header normalisation, required columns, the row builder."""

    kind: str
    normalize: Callable[[str], str]
    required: tuple[tuple[str, ...], ...]  # each: acceptable normalised names, one needed
    build: Callable[[Record, set[str]], list[dict]]
    nulls: frozenset[str] = frozenset()  # field texts that mean null (FOCUS writes NULL)
    label: str = "bill"
    per_file: tuple[FileValue, ...] = ()  # columns a file may lack, given by a setting instead
    money: tuple[str, ...] = ()  # other columns the amounts are read from (never filled as empty)

    def missing(self, columns: set[str]) -> list[str]:
        """The required columns this header lacks, by their first accepted name."""
        return [names[0] for names in self.required if not columns.intersection(names)]

    def protected(self) -> set[str]:
        """Columns the money depends on: a file's rows may never be read with them left empty."""
        return {n for names in self.required for n in names} | {
            n for value in self.per_file for n in value.names} | set(self.money)

    def accepts(self, names: Iterable[str]) -> bool:
        """Does a header with these (raw) names carry every required column?"""
        return not self.missing({self.normalize(n) for n in names})


def normalized(name: str) -> str:
    """BilledCost, billed_cost and "Billed Cost" all become billedcost."""
    return re.sub(r"[^a-z0-9]", "", name.lower())
