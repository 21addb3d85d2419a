"""A file format as data: how it is detected, its fields, the rules a record must meet (each with
the reason it gives), and what is derived from it.

A `Definition` is read by two engines that apply the same rules: ingest/engine/batch_sql.py types
and checks a batch of lines in one SQL pass, and ingest/engine/reader.py reads one line at a time
the lines SQL cannot read (quoted CSV, lines that are not JSON, spellings only Python reads) and
names the exact reason a line is refused. A format module (ingest/formats/*.py) holds one
Definition and binds the engine's functions to it; it has no parsing code of its own.

The rules (`Definition.steps`) apply in order and the first that fails names the reason:

- `Field`: read a value (first spelling present) as its type; a value that cannot be read, or is
  outside the field's bounds, refuses the record ("requests_total is negative (-1)").
- `Required`, `SumAtMost`: checks between read values.
- `Span`: a time window from its start and its end or its length in seconds.
- `CountOf`, `CatalogCost`: values derived when the record does not give them.
- `OneOf`: a text read through a table of spellings (synonyms, any case) to the value it stands for.
- `Default`: a text's value when the record gives none (it may hang on the words of another text).
- `HashedId`: an identity made from other values when the record gives none.
- `Items`: a list of objects read into a second table, one row per item, each item read by its
  own Fields (and `Required`, `Since`), the reason naming the item ("eval_history[2].value ...").
- `Within`: a read value between two bounds, with the format's own reason ("gpu_util_pct 140.0 is
  outside 0 to 100").
- `FromOption`, `FromFileName`: a value the load gives (an option such as --host, overriding the
  file) or the file's name gives ("gpu-node-1_2026-08.csv" -> "gpu-node-1") when the record has none.
- `Extras`: keys no Field reads, kept as tags (a record's own measures as numbers in their unit).
- `Hours`: a run's span in hours from start and end, or either and a number of hours.
- `HourlyCost`: an amount given, or a price per hour x the span's hours, or the catalog's price x hours.
- `FromRate`: a value derived from a rate x the span's hours (examples from examples per second).
- `Tags`: named columns kept as tags, as written; `Prefer`: another value under a condition
  (CodeCarbon's cloud_region when on_cloud is 'Y').
  (Extras to Prefer, the rules of a run's span, cost and tags, are defined in run_rules.py.)

A Definition with `prometheus` (PromText, in file_rules.py) reads Prometheus text instead of JSON or CSV: each
sample line `NAME{label="v",...} VALUE [TIMESTAMP_MS]` of one of its metrics is a record of its
labels by name, its value under the metric's name and its timestamp (seconds) under
PromText.time, which Fields read as any record (DCGM: the label `gpu` as gpu_index, the metric
DCGM_FI_DEV_POWER_USAGE as power_w). The SQL pass and the reader (prometheus_client's parser)
of ingest/engine/prom_text.py read the lines; ingest/engine/prom_records.py then makes one row
per Key of the lines (each line filling its metric's column, a metric repeated for a key
refused with PromText.repeated) and applies the Within rules to the whole row, refused at its
first line. `FromOption(when_absent=True)` gives a value only where the record has none (--at),
and `Required(refuses_file=True)` refuses the whole file (a scrape without times or --at).

A CSV may write units and absent markers in its text (nvidia-smi): with `Definition.units_in_text`
a header name's bracketed unit is dropped (`power.draw [W]` is power.draw, any case) and so is a
Field's unit after its value (` 62.39 W`, `45 %`); a value matching `Definition.absent` (nvidia-smi's
`[N/A]`, `[Not Supported]`, `N/A`) is absent, whatever its Field. `Definition.header_any` refuses a
header naming none of some columns. Rules about the file as a whole are in file_rules.py:
`Headerless` (a first line that is already a record, its columns told by shape and by the Fields'
units: csv_layout.py) and `IndexByOrder` (a value given by the file's order when the records do not
give it, applied once in SQL after every line is staged: file_steps.py).

Some rules note something on a loaded row rather than refusing it (a duration that disagrees
with the timestamps, why a run has no cost): the notes go to the Definition's `flags` column.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath

from ingest.engine import values
from ingest.engine.file_rules import Headerless, IndexByOrder, PromText
from ingest.engine.run_rules import Extras, FromRate, HourlyCost, Hours, Prefer, Tags

# Field types. Each reads as ingest/engine/values.py reads it and fails with that module's reasons.
TEXT = "text"            # stripped text; a number is written out as text
COUNT = "count"          # a whole number (1.0 is read, 1.5 is not), at most Field.maximum
NUMBER = "number"        # a finite float of at most 10^15 in size
PERCENT = "percent"      # a number from 0 to 100
TIME = "time"            # ISO-8601 (naive text in the zone of --tz) or epoch seconds: a UTC instant
MONEY = "money"          # an exact Decimal (12 places), under 10^15
TEXT_LIST = "text_list"  # a JSON list of text, or text separated by commas or semicolons (CSV)
TEXT_MAP = "text_map"    # a JSON object of name: single value, as a MAP of text sorted by name (null as '')
COUNT_LIST = "count_list"  # a JSON list of whole numbers (each at most Field.maximum in size), one number, or text lists
TYPES = (TEXT, COUNT, NUMBER, PERCENT, TIME, MONEY, TEXT_LIST, TEXT_MAP, COUNT_LIST)
# Each type's SQL type: the column a Field of it fills; and what a SQL reader first takes its value as
# (a time and an amount as their text: each is checked by its spelling before it is cast).
SQL_TYPE = {TEXT: "VARCHAR", COUNT: "BIGINT", NUMBER: "DOUBLE", PERCENT: "DOUBLE", TIME: "TIMESTAMPTZ",
            MONEY: "DECIMAL(38, 12)", TEXT_LIST: "VARCHAR[]", TEXT_MAP: "MAP(VARCHAR, VARCHAR)", COUNT_LIST: "BIGINT[]"}
READ_SQL_TYPE = {**SQL_TYPE, TIME: "VARCHAR", MONEY: "VARCHAR"}
INTEGER_MAX = 2**31 - 1


@dataclass(frozen=True)
class Field:
    """One warehouse column read from a record: its accepted spellings (the column's own name
    first unless `names` says otherwise; the first the record gives a value is read), type, unit
    (documentation; dropped after a CSV value under Definition.units_in_text) and bounds. `minimum`: a
    count, number or amount below it is refused as negative (None: no lower bound)."""

    column: str
    type: str
    names: tuple[str, ...] = ()
    unit: str = ""
    minimum: float | None = 0
    maximum: int = values.BIGINT_MAX  # counts only (and each item of a count list, either sign)
    keep_empty: bool = False  # lists: a list given empty (or of absent items only) is kept as [] rather than absent
    limit: float = values.NUMBER_LIMIT  # numbers only: at most this in size ("duration_hours 1e6 is too large")
    stored: bool = True  # False: read for the rules (duration_hours), not a column of the table
    divide_by: float = 1  # numbers only: the value as written (bounds checked on it) / this (3600: seconds read as hours)

    @property
    def spellings(self) -> tuple[str, ...]:
        return self.names or (self.column,)


@dataclass(frozen=True)
class Required:
    """The record must give `column` (read by a Field before this rule)."""

    column: str
    reason: str
    refuses_file: bool = False  # True: the file as a whole cannot be read (contract.FileRefused), not the record


@dataclass(frozen=True)
class SumAtMost:
    """The sum of `parts` (an absent part counts 0) is at most `whole`; `reason` is a template
    over the columns' values ("{requests_success} + ...")."""

    parts: tuple[str, ...]
    whole: str
    reason: str


@dataclass(frozen=True)
class Span:
    """A window from `start` and either `end` or `length` (seconds, more than 0); with both, they
    agree within `tolerance_s`. The row's `end` is the end given or start + length, its `length`
    the seconds between them. Start is required ("no window_start")."""

    start: str
    end: str
    length: str
    tolerance_s: float
    missing: str  # the reason when neither end nor length is given ("no window_end or window_seconds")


@dataclass(frozen=True)
class CountOf:
    """Where `column` is absent, the number of items of the list `items` (when there are any);
    several CountOf of one column: the first list with items."""

    column: str
    items: str


@dataclass(frozen=True)
class CatalogCost:
    """Where `column` (money) is absent: the price catalog's USD per hour of `per` ((catalog,
    name column, multiplier column): the first whose price and multiplier are known) x the span's
    hours. `price` keeps the hourly price used and `source` says 'given' or 'derived'."""

    column: str
    source: str
    price: str
    per: tuple[tuple[str, str, str], ...]  # catalog is "instance" or "gpu" (config.Prices)
    too_large: str = "catalog price"  # names the amount in the reason when it is 10^15 USD or more


@dataclass(frozen=True)
class Given:
    """`column` says 'given' when `of` has a value (NULL otherwise)."""

    column: str
    of: str


@dataclass(frozen=True)
class Key:
    """The row's identity: its `parts` joined with '|' (an absent part as '', a time in ISO-8601
    UTC); a record whose key repeats replaces the earlier one."""

    column: str
    parts: tuple[str, ...]
    stored: bool = True  # False: the parts are the identity (staging.UNIQUE_BY), no column of the table


@dataclass(frozen=True)
class Total:
    """One figure of the load summary (--json) over the loaded rows: `how` is "rows" (how many),
    "sum" (of a whole-number column), "money" (exact sum as text to the cent; None when no row has
    one), "float" (sum rounded to 9 places; None when none), "present" / "absent" (rows with /
    without `column`), or "equals" (rows whose `column` is `value`)."""

    name: str
    how: str
    column: str = ""
    value: str = ""


@dataclass(frozen=True)
class Detect:
    """A file is of this format when its head names every key of `all_of` and one of `any_of`
    (as JSON keys, or as CSV header columns)."""

    all_of: tuple[str, ...]
    any_of: tuple[str, ...]


@dataclass(frozen=True)
class OneOf:
    """The text `column` is one of `spellings` (lower-cased spelling -> the value it stands for:
    synonyms map to one value); another text is refused with `reason`, a template over `{value!r}`
    (the text as read)."""

    column: str
    spellings: tuple[tuple[str, str], ...]
    reason: str

    @property
    def mapping(self) -> dict[str, str]:
        return dict(self.spellings)


@dataclass(frozen=True)
class Default:
    """Where `column` (text) is absent: `then` when one of `words` is a word of the text `of`
    (lower-cased, split at anything but a-z and 0-9), else `value`."""

    column: str
    value: str
    of: str = ""
    words: tuple[str, ...] = ()
    then: str = ""


@dataclass(frozen=True)
class HashedId:
    """Where `column` is absent (or one of `stand_ins`, such as 'unknown'): `prefix` + the first
    `length` hex digits of the SHA-256 of `parts` joined with '|' (an absent part as '', a time in
    ISO-8601 UTC), so the same record gets the same id in every load. Parts are text, counts or times.
    `raw`: a part other than a time is the record's value as written (Python's str(): null as
    'None', a missing key as ''), as ids were made before the definition existed."""

    column: str
    parts: tuple[str, ...]
    prefix: str = "auto-"
    length: int = 12
    stand_ins: tuple[str, ...] = ()
    raw: bool = False


@dataclass(frozen=True)
class Since:
    """Inside `Items`: where `column` is absent, the seconds from the record's `start` (a TIME
    column of the record) to the item's `time`; a negative result is refused with `reason` (a
    template over `{item}`, the item's name: "eval_history[2]")."""

    column: str
    time: str
    start: str
    reason: str


@dataclass(frozen=True)
class Items:
    """The list of objects `field` of a record, one row each in `table`: the row carries the
    record's `parent` column (its key) and the item's place from 0 in `seq`, and the values its
    `steps` read. `not_list` is the reason when `field` is no list; an item that is no object is
    refused as "<field>[i] must be an object"; a step's reason names the item ("<field>[i].<name>
    ..."; Required's reason is a template over `{item}`). A record replaced by a later one with the
    same key takes its items with it."""

    field: str
    table: str
    parent: str
    seq: str
    steps: tuple  # Field | Required | Since
    not_list: str

    @property
    def fields(self) -> tuple["Field", ...]:
        return tuple(step for step in self.steps if isinstance(step, Field))


@dataclass(frozen=True)
class Within:
    """The value of `column` (read by a Field before this rule), when given, is from `low` to
    `high`; else `reason`, a template over {name} (the spelling read), {value!r}, {low:g}, {high:g}."""

    column: str
    low: float
    high: float
    reason: str = "{name} {value!r} is outside {low:g} to {high:g}"


@dataclass(frozen=True)
class FromOption:
    """`column` is the load's option `option` (a ParseContext attribute, e.g. "host" for --host)
    whenever it is given, whatever the record says."""

    column: str
    option: str
    when_absent: bool = False  # True: only where the record gives no value (--at for a sample without a time)


@dataclass(frozen=True)
class FromFileName:
    """Where `column` is absent: the file's name (no folder, `suffixes` dropped from its end) up to
    the first `before` ("gpu-node-1_2026-08.csv.gz" -> "gpu-node-1"); the whole name when that part
    is empty."""

    column: str
    before: str = "_"
    suffixes: tuple[str, ...] = ()

    def of(self, source: str) -> str:
        """The value the file `source` (a path or name) gives."""
        name = PurePath(source).name
        while name.lower().endswith(self.suffixes):
            name = name[: name.rfind(".")]
        return name.split(self.before, 1)[0] or name


Step = Field | Required | SumAtMost | Span | CountOf | CatalogCost | OneOf | Default | HashedId | Items
Step = Step | Within | FromOption | FromFileName  # bounds with a format's own reason; values a load or file name gives
Step = Step | Extras | Hours | HourlyCost | FromRate  # the rules of a run's span, cost and tags
Step = Step | Tags | Prefer  # named columns kept as tags; a value preferred under a condition


@dataclass(frozen=True)
class Definition:
    """One format: JSON lines (one object a line) or CSV with a header, into one table."""

    kind: str
    table: str
    detect: Detect
    header_requires: tuple[str, ...]  # columns a CSV header must name (any spelling; the reason names the first)
    header_reason: str                # "not a serving-window header": the header's reject starts so (or a template over {missing})
    steps: tuple[Step, ...]
    key: Key
    given: tuple[Given, ...] = ()
    totals: tuple[Total, ...] = ()
    list_separators: tuple[str, ...] = (",", ";")  # a TEXT_LIST written as text (CSV)
    # CSV only: the first non-blank line is the header whatever it holds (never JSON lines)
    csv_only: bool = False
    # a CSV line (unquoted or not) with another number of fields than the header: a template
    width_reason: str = "has {got} fields, the header has {expected}"
    csv_trim: bool = False   # a CSV value is read with the blanks around it removed (str.strip())
    empty_reason: str = ""   # a file without a non-blank line is refused with this (at line 0)
    flags: str = ""  # the column of a row's notes (Hours, HourlyCost, FromRate); "" when none
    whole_document: bool = False  # a file may be one JSON value: an array of records, or one record over many lines
    prometheus: PromText | None = None  # Prometheus text, one record per Key from many lines (prom_text.py)
    units_in_text: bool = False  # CSV: units in header names (`[W]`) and after values (Field.unit) are dropped
    absent: str = ""  # CSV: a value this regex matches whole (stripped) is absent
    header_any: tuple[tuple[str, ...], str] = ()  # CSV: (columns, reason): the header names one of them
    headerless: Headerless | None = None  # CSV: a first line of this shape is a record (file_rules.py)
    identity: IndexByOrder | None = None  # a value given by the file's order, once it is read (file_steps.py)

    @property
    def fields(self) -> tuple[Field, ...]:
        return tuple(step for step in self.steps if isinstance(step, Field))

    def field(self, column: str) -> Field:
        return next(f for f in self.fields if f.column == column)

    def rules(self, kind: type) -> tuple:
        return tuple(step for step in self.steps if isinstance(step, kind))

    @property
    def stored(self) -> tuple[Field, ...]:
        """The Fields that are columns of the table."""
        return tuple(f for f in self.fields if f.stored)

    @property
    def span(self) -> Span:
        [span] = self.rules(Span)
        return span

    @property
    def items(self) -> tuple[Items, ...]:
        return self.rules(Items)

    @property
    def tables(self) -> tuple[str, ...]:
        """The tables a load fills: the record's, then each Items' table."""
        return (self.table, *(items.table for items in self.items))


def sniff(definition: Definition, head: str) -> bool:
    """JSON lines naming the detection keys, or a CSV header naming them; Prometheus text naming a metric."""
    if definition.prometheus is not None:
        return any(metric in head for metric in definition.prometheus.metrics)
    text = head.lstrip("\ufeff").lstrip()
    detect = definition.detect
    if text.startswith("{") and not definition.csv_only:
        return all(f'"{k}"' in head for k in detect.all_of) and any(f'"{k}"' in head for k in detect.any_of)
    columns = {c.strip().strip('"') for c in text.split("\n", 1)[0].split(",")}
    return set(detect.all_of) <= columns and bool(columns & set(detect.any_of))


def opens_with(text: str, mark: str) -> bool:
    """Whether `text` (a line, or the head of a file) begins with `mark` past a BOM and blanks:
    "{" a JSON object, "[" a JSON array."""
    return text.lstrip("\ufeff").lstrip().startswith(mark)


def is_csv_header(text: str) -> bool:
    """Whether a file's first non-blank line is a CSV header (a comma, and not a JSON object)."""
    return "," in text and not opens_with(text, "{")


def csv_header(text: str) -> list[str]:
    """The header line's column names, stripped (of quotes a blank kept from the CSV reader too, as sniff())."""
    import csv

    try:
        return [c.strip().strip('"') for c in next(csv.reader([text.lstrip("\ufeff")]))]
    except csv.Error:  # e.g. a carriage return inside an unquoted name: the names between commas
        return [c.strip().strip('"') for c in text.lstrip("\ufeff").split(",")]


def header_problem(definition: Definition, header: list[str]) -> str | None:
    """Why a CSV header cannot be this format's, or None when it can."""
    missing = [_spellings(definition, column)[0] for column in definition.header_requires
               if not any(name in header for name in _spellings(definition, column))]
    if missing and "{missing}" in definition.header_reason:  # a template: the names go where it says
        return definition.header_reason.replace("{missing}", ", ".join(missing))
    return f"{definition.header_reason}: missing {', '.join(missing)}" if missing else None


def _spellings(definition: Definition, column: str) -> tuple[str, ...]:
    found = [f for f in definition.fields if f.column == column]
    return found[0].spellings if found else (column,)
