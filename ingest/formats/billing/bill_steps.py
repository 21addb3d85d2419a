"""The steps a bill definition (ingest/formats/billing/bill_definition.py) is written in: each
names the `billing_lines` column it gives (docs/schema.md; a column named `_...` is a helper later
steps read, not stored) and how it is read; `of` names a column an earlier step gave. Every step
is read both as SQL over whole columns (bill_plan.py) and one record at a time (bill_build.py).
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal


@dataclass(frozen=True)
class Text:
    """Stripped text of the first of `names` with a value. `required`: True refuses a line
    without one as "no <column as the file names it>"; a text is the reason itself."""

    column: str
    names: tuple[str, ...]
    required: bool | str = False


@dataclass(frozen=True)
class Amount:
    """An exact amount (DECIMAL(38, 12), strict spelling, under 10^15); `required` as Text's.
    `when` (column, values): read (and checked) only on lines whose column is one of the values."""

    column: str
    names: tuple[str, ...]
    required: bool = False
    when: tuple[str, frozenset[str]] | None = None


@dataclass(frozen=True)
class Quantity:
    """A finite number (strict spelling)."""

    column: str
    names: tuple[str, ...]


@dataclass(frozen=True)
class Moment:
    """A UTC time: ISO-8601 (naive is UTC), `... UTC`, M/D/Y (US order), epoch seconds, a Parquet
    timestamp; within 1990-2099."""

    column: str
    names: tuple[str, ...]
    required: bool = False


@dataclass(frozen=True)
class Category:
    """The FOCUS charge category of column `of` by `table` (normalised raw value -> category);
    an absent value is `default` (None: refused), an unknown one refused, naming `label`."""

    column: str
    of: str
    table: Mapping[str, str]
    label: str
    default: str | None = None


@dataclass(frozen=True)
class Pricing:
    """on-demand / spot / commitment of column `of` by `table`; None when the table lacks it."""

    column: str
    of: str
    table: Mapping[str, str]


@dataclass(frozen=True)
class Tags:
    """Tags from one cell: a JSON object (braces optional), a list of {key, value}, a Parquet map.
    A tag without a name or a cell that is no such shape refuses the line, naming `label`."""

    column: str
    name: str
    label: str


@dataclass(frozen=True)
class TagColumns:
    """Tags from one column per tag: the columns `normalize` names `<prefix><key>` (empty cells
    are no tag)."""

    column: str
    prefix: str = "tag:"


@dataclass(frozen=True)
class InstanceType:
    """The first instance or machine type (p4d.24xlarge, a2-highgpu-1g) named in the texts of
    columns `of`, lower case."""

    column: str
    of: tuple[str, ...]


@dataclass(frozen=True)
class NextDay:
    """The time one day after column `of` (a day-long charge period)."""

    column: str
    of: str


@dataclass(frozen=True)
class JsonKey:
    """The first non-empty of `keys` in the JSON object of cell `name` (braces optional); a cell
    that is no such object is read as a Python literal or refuses the line, naming `label`."""

    column: str
    name: str
    label: str
    keys: tuple[str, ...]


@dataclass(frozen=True)
class LowerWhen:
    """Column `of` in lower case (None when blank) where column `when` (lower case) is `equals`
    (always, without `when`), else None."""

    column: str
    of: str
    when: str | None = None
    equals: str = ""


@dataclass(frozen=True)
class Letters:
    """The lower-case letters of column `of` ('' when absent): `SavingsPlan Covered-Usage` ->
    savingsplancoveredusage, a line type to compare."""

    column: str
    of: str


@dataclass(frozen=True)
class Case:
    """The value of the column `cases` names for the value of column `of`, else of `default`."""

    column: str
    of: str
    cases: Mapping[str, str]
    default: str


@dataclass(frozen=True)
class Difference:
    """Column `left` minus column `right`; None when either is."""

    column: str
    left: str
    right: str


@dataclass(frozen=True)
class SumOfPresent:
    """The sum of the columns `of` that have a value; None when none has."""

    column: str
    of: tuple[str, ...]


@dataclass(frozen=True)
class FirstOf:
    """The first of the columns `of` with a value."""

    column: str
    of: tuple[str, ...]


@dataclass(frozen=True)
class Joined:
    """Columns `of` joined with '|' (a later absent one as ''), where the first has a value."""

    column: str
    of: tuple[str, ...]


@dataclass(frozen=True)
class Contains:
    """`value` where column `of`, lower case and without `drop` characters, contains `needle`."""

    column: str
    of: str
    needle: str
    value: str
    drop: str = "-"


@dataclass(frozen=True)
class MapCell:
    """The name: value pairs of cell `name` (a JSON object or a Parquet map; {} when absent); a
    cell that is no such shape refuses the line, naming the column."""

    column: str
    name: str


@dataclass(frozen=True)
class MapValue:
    """The first of `keys` with a non-blank value in the pairs of column `of` (a MapCell), stripped."""

    column: str
    of: str
    keys: tuple[str, ...]


@dataclass(frozen=True)
class MonthSpan:
    """The first instants of the YYYYMM (or YYYY-MM) month in column `of` and of the next one, as
    columns `start` and `end`; another text refuses the line, naming `label`."""

    start: str
    end: str
    of: str
    label: str


@dataclass(frozen=True)
class Extract:
    """The first group of `pattern` found in column `of`."""

    column: str
    of: str
    pattern: str


@dataclass(frozen=True)
class CreditList:
    """One more line per entry of the list in cell `name` (JSON, or the Python repr GCP tools
    write): category credit, the entry's (negative) amount as billed and effective cost, its
    full name (else name, type, 'credit') as description, its type (else 'credit') as raw category.
    An entry without a readable amount refuses the line."""

    name: str


@dataclass(frozen=True)
class CreditColumns:
    """One more line per `credit<N> amount` column with a value (`credit<N>` its description,
    `credit<N> currency` a currency that must be column `currency`'s)."""

    currency: str


def credit_numbers(columns) -> list[int]:
    """The N of every `credit<N> amount` column among these (normalised) names, in order."""
    return sorted(int(c[6:-7]) for c in columns if re.fullmatch(r"credit[0-9]+ amount", c))


@dataclass(frozen=True)
class TagsFrom:
    """Tags from one column per tag (the columns whose normalised names start with one of
    `prefixes`, named without `strip`) and from MapCell-shaped cells `maps` ((name, prefixes its
    keys lose in turn, prefix its keys gain)); blank values are no tag, a later name wins."""

    column: str
    prefixes: tuple[str, ...]
    strip: str
    maps: tuple[tuple[str, tuple[str, ...], str], ...]


@dataclass(frozen=True)
class HeaderSays:
    """The value of the first `(column name, value)` whose column the header has, else `default`."""

    column: str
    cases: tuple[tuple[str, str], ...]
    default: str


@dataclass(frozen=True)
class Same:
    """The value of column `of`."""

    column: str
    of: str


@dataclass(frozen=True)
class Constant:
    """The same text (or amount) on every line."""

    column: str
    value: str | Decimal | None


@dataclass(frozen=True)
class Refuse:
    """Refuse a line whose column `of`, normalised (lower case, letters and digits), is one of
    `keys`; `reason` may name the value as {value} (written as Python's repr)."""

    of: str
    keys: frozenset[str]
    reason: str


Step = (Text | Amount | Quantity | Moment | Category | Pricing | Tags | TagColumns | InstanceType | NextDay | JsonKey
        | LowerWhen | HeaderSays | Same | Constant | Refuse | Letters | Case | Difference | SumOfPresent | FirstOf
        | Joined | Contains | MapCell | MapValue | TagsFrom | MonthSpan | Extract | CreditList | CreditColumns)
