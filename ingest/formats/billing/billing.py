"""What the four cloud-bill parsers share: reading CSV, Parquet and JSON lines into records keyed
by normalised column names, strict readers for amounts, times and tags, line keys, totals.

Each family module (billing_focus, billing_aws, billing_gcp, billing_azure, billing_aws_dbr)
supplies a `Family`: how it normalises a header name, which columns it needs, and `build(record)`
turning one source record into `billing_lines` rows (FOCUS names in snake_case, see
docs/schema.md). Every family is written as a definition (bill_definition.py) and gets its
Family, `build` included, from it.

Line keys (`line_key`, warehouse.REPLACE_BY): a line the source identifies (AWS
`identity/LineItemId` + `identity/TimeInterval`, FOCUS `x_LineItemId` or `Id`) is
`<provider>|id|<that id>`, so a re-delivered line replaces the stored one even when its amount
was restated. A line without an id (GCP, Azure) is `<provider>|sha256:<hash>#<n>`: the hash of
the normalised row (every stored column but the file, line and load), `n` counting identical
rows earlier in the same file, so the same bill loaded again, from another file, a .gz or a
Parquet copy, replaces itself instead of adding up twice, while two genuinely identical lines
of one file both stay. A restated line without an id (new amount) is a new line.

Bills are UTC by definition (FOCUS, CUR, the GCP and Azure exports): --tz does not apply.
"""
from __future__ import annotations

import ast
import csv
import hashlib
import io
import itertools
import json
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

from ingest.engine import values
from ingest.engine.contract import BadValue, Lines, ParseContext, Parsed, Reject

TABLE = "billing_lines"
UTC = timezone.utc
CATEGORIES = ("usage", "purchase", "tax", "credit", "adjustment")
# An instance type named in a description: p4d.24xlarge, g5.xlarge, m5.metal, a2-highgpu-1g.
_INSTANCE_TYPE = re.compile(
    r"\b([a-z][a-z0-9]*\d[a-z0-9]*\.(?:\d*x?large|medium|small|micro|nano|metal(?:-\d+xl)?))\b"
    r"|\b((?:a2|a3|g2)-(?:high|mega|ultra|standard)[a-z]*-\d+g?)\b", re.IGNORECASE)
_US_DATE = re.compile(
    r"^(\d{1,2})/(\d{1,2})/(\d{4}|\d{2})(?:[ T](\d{1,2}):(\d{2})(?::(\d{2}))?\s*([AaPp][Mm])?)?$")
# Columns of the row that identify its content (for hashed keys): everything but where it came from.
_NOT_CONTENT = {"line_key", "source_file", "source_line", "source_format", "source_kind"}


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

    # The parser contract (ingest/engine/contract.py): each bill module exposes these of its FAMILY.

    def sniff(self, name: str, head: str) -> bool:
        return sniff_text(self, head)

    def sniff_bytes(self, name: str, data: bytes) -> bool:
        return sniff_parquet(self, data)

    def parse(self, lines: Lines, ctx: ParseContext) -> Parsed:
        return parse_text(lines, ctx, self)

    def parse_bytes(self, data: bytes, ctx: ParseContext) -> Parsed:
        return parse_parquet(data, ctx, self)


# --- reading ---------------------------------------------------------------------------------

def header_names(head: str) -> list[str]:
    """The first CSV record of a text (its header), names stripped; [] when there is none."""
    text = head.lstrip("\ufeff")
    try:
        first = next(csv.reader(io.StringIO(text)), [])
    except csv.Error:
        return []
    return [name.strip() for name in first]


def sniff_text(family: Family, head: str) -> bool:
    """A CSV header with the family's columns, or JSON lines whose first object has them."""
    text = head.lstrip("\ufeff").lstrip()
    if text.startswith("{"):
        try:
            first = json.loads(text.split("\n", 1)[0])
        except json.JSONDecodeError:
            return False
        return isinstance(first, dict) and family.accepts(flatten(first))
    return family.accepts(header_names(text))


def sniff_parquet(family: Family, data: bytes) -> bool:
    """A Parquet file whose columns are the family's."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        names = pq.ParquetFile(io.BytesIO(data)).schema_arrow.names
    except (pa.ArrowException, OSError, ValueError):  # not readable as Parquet: not ours
        return False
    return family.accepts(names)


def csv_records(lines: Lines, family: Family, parsed: Parsed) -> Iterator[Record]:
    """Records of a CSV text with a header; bad rows go to parsed.rejects.

    One csv.reader runs over the whole text, so a quoted field may span lines; a record's line
    is the physical line it starts on. A row whose field count differs from the header's (or,
    when every row lacks the header's trailing columns, from the other rows': read_header) is
    rejected, never shifted into other columns. Blank lines are skipped.
    """
    rows = _csv_rows(lines, parsed)
    first = next(rows, None)
    if first is None:
        return
    line, fields, raw = first
    names = [name.strip().lstrip("\ufeff") for name in fields]
    missing = family.missing({family.normalize(n) for n in names})
    if missing:  # no line can be read under that header: each is refused, none lost
        unusable = f"the {family.label} header lacks {', '.join(missing)}"
        parsed.rejects.append(Reject(line, unusable, raw))
        for number, _, text in rows:
            parsed.rejects.append(Reject(number, f"not read: {unusable} (line {line})", text))
        return
    sample = list(itertools.islice(rows, SAMPLE_ROWS))
    header = read_header(family, names, [len(f) for _, f, _ in sample])
    parsed.warnings.extend(header.warnings)
    labels = {**_labels(header.columns, header.names), **header.labels}
    for number, fields, text in itertools.chain(sample, rows):
        if len(fields) != header.width:
            parsed.rejects.append(Reject(number, header.reason(len(fields)), text))
            continue
        record: dict[str, object] = {}
        for name, value in zip(header.columns, fields):
            if name not in record:  # two headers meaning one column: the first wins
                record[name] = None if value.strip() in family.nulls else value
        record.update(header.constants)
        yield Record(number, record, text, labels)


def _csv_rows(lines: Lines, parsed: Parsed) -> Iterator[tuple[int, list[str], str]]:
    """(line it starts on, fields, raw text) of each non-blank CSV record; unreadable ones go to
    parsed.rejects and the reader starts afresh at the next line."""
    consumed: list[tuple[int, str]] = []

    def feed() -> Iterator[str]:
        for number, text in lines:
            consumed.append((number, text))
            yield text + "\n"

    reader = csv.reader(feed())
    while True:
        start = len(consumed)
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            line = consumed[start][0] if start < len(consumed) else (consumed[-1][0] if consumed else 1)
            parsed.rejects.append(Reject(line, f"unreadable CSV: {error}", _raw(consumed[start:])))
            if start >= len(consumed):  # nothing more was read: the text has ended
                return
            del consumed[:]  # the reader starts afresh at the next line: the rest still loads
            continue
        piece = consumed[start:]
        line = piece[0][0] if piece else 0
        del consumed[:]  # keep memory flat on big bills
        if not fields or (len(fields) == 1 and not fields[0].strip()):
            continue  # a blank line
        yield line, fields, _raw(piece)


def json_records(lines: Lines, family: Family, parsed: Parsed) -> Iterator[Record]:
    """Records of newline-delimited JSON (nested objects flattened to dotted names)."""
    for line, text in lines:
        if not text.strip():
            continue
        try:
            document = json.loads(text, parse_float=Decimal)
        except json.JSONDecodeError as error:
            parsed.rejects.append(Reject(line, f"not valid JSON: {error.msg} at column {error.colno}", text))
            continue
        if not isinstance(document, dict):
            parsed.rejects.append(Reject(line, f"expected a JSON object, got {type(document).__name__}", text))
            continue
        flat = flatten(document)
        columns = [family.normalize(name) for name in flat]
        record: dict[str, object] = {}
        for name, value in zip(columns, flat.values()):
            record.setdefault(name, value)
        yield Record(line, record, text, _labels(columns, list(flat)))


def parquet_records(data: bytes, family: Family, parsed: Parsed) -> Iterator[Record]:
    """Records of a Parquet file; a record's `line` is its 1-based row number."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(io.BytesIO(data))
    except (pa.ArrowException, OSError, ValueError) as error:  # a damaged file
        parsed.rejects.append(Reject(0, f"unreadable Parquet file: {error}"))
        return
    columns = [family.normalize(name) for name in table.column_names]
    missing = family.missing(set(columns))
    if missing:
        parsed.rejects.append(Reject(0, f"the {family.label} file lacks {', '.join(missing)}"))
        return
    header = read_header(family, table.column_names)
    parsed.warnings.extend(header.warnings)
    labels = {**_labels(columns, table.column_names), **header.labels}
    number = 0
    for batch in table.to_batches(max_chunksize=10_000):
        for values_of_row in batch.to_pylist():
            number += 1
            record: dict[str, object] = {}
            for name, value in zip(columns, values_of_row.values()):
                record.setdefault(name, value)
            record.update(header.constants)
            yield Record(number, record, "", labels)


def _labels(columns: list[str], names: list[str]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for column, name in zip(columns, names):
        labels.setdefault(column, name)
    return labels


# Data rows after the header whose field counts decide whether the rows lack trailing columns.
SAMPLE_ROWS = 200


@dataclass
class Header:
    """How a bill's rows are read under its header (both readers, billing.py and bill_stage.py):
    the names the fields go under (a ragged tail cut off), the values a setting gives every line,
    and the warnings for the summary."""

    names: list[str]  # as the file spells them, the first `width` of the header
    columns: list[str]  # normalised
    header_width: int  # names in the header
    constants: dict[str, str] = field(default_factory=dict)  # normalised name -> every line's value
    labels: dict[str, str] = field(default_factory=dict)  # normalised name -> as a reason names it
    warnings: list[str] = field(default_factory=list)

    @property
    def width(self) -> int:
        """The fields a row must have."""
        return len(self.names)

    def reason(self, fields: int) -> str:
        """Why a row with this many fields is refused."""
        if self.width != self.header_width:
            return f"has {fields} fields, the other rows have {self.width} (the header has {self.header_width})"
        return f"has {fields} fields, the header has {self.header_width}"


def read_header(family: Family, names: list[str], widths: list[int] | None = None,
                settings: Mapping[str, str | None] | None = None) -> Header:
    """The header as the rows are read under it. `widths`: field counts of the first data rows
    (CSV). When most of them have the same count W below the header's, none has the header's
    count, and the header's names past W are none the money needs, the rows lack those trailing
    columns: they are read under the first W names (the rest empty) and a warning says which; a
    row of another count stays a reject (Header.reason). A file with rows of the header's count
    among its first rows is read as before: those rows load, the others are refused.
    A per-file column the header lacks (Family.per_file) is given by its setting, with a warning;
    without the setting the file is refused once (BadValue). The required columns are not checked
    here (each reader refuses a header that lacks them)."""
    names = list(names)
    columns = [family.normalize(n) for n in names]
    warnings: list[str] = []
    width = _common_width(widths or [])
    if width is not None and 0 < width < len(names) and len(names) not in (widths or []):
        tail = columns[width:]
        if not set(tail) & family.protected():
            cut = names[width:]
            warnings.append(
                f"the header names {len(names)} columns but every row has {width} fields: the trailing "
                f"column{'s' if len(cut) > 1 else ''} {', '.join(cut)} {'are' if len(cut) > 1 else 'is'} "
                f"absent from the rows and read as empty")
            header = Header(names[:width], columns[:width], len(names), warnings=warnings)
        else:
            header = Header(names, columns, len(names), warnings=warnings)
    else:
        header = Header(names, columns, len(names), warnings=warnings)
    if family.missing(set(header.columns)):
        return header
    absent = [value for value in family.per_file if not set(header.columns) & set(value.names)]
    given = (settings if settings is not None else billing_settings()) if absent else {}
    unset = [value for value in absent if not given.get(value.setting)]
    if unset:
        raise BadValue(f"the {family.label} file has no {' and no '.join(v.what + ' column' for v in unset)}; "
                       f"set {' and '.join(f'[billing] {v.setting}' for v in unset)} in mlcost.toml "
                       f"to the {' and '.join(v.what for v in unset)} of such files to load it")
    for value in absent:
        header.constants[value.names[0]] = given[value.setting]
        header.labels[value.names[0]] = f"[billing] {value.setting}"
        header.warnings.append(f"the file has no {value.what} column: every line was read as "
                               f"{given[value.setting]}, from the [billing] {value.setting} setting")
    return header


def _common_width(widths: list[int]) -> int | None:
    """The field count most of these rows have (more than half), else None."""
    if not widths:
        return None
    width, count = Counter(widths).most_common(1)[0]
    return width if count * 2 > len(widths) else None


def billing_settings() -> dict[str, str | None]:
    """The [billing] settings a bill's reading depends on (mlcost.toml; ingest/settings/config.py)."""
    from ingest.settings import config

    billing = config.load().billing
    return {"default_currency": billing.default_currency, "default_provider": billing.default_provider}


def flatten(document: dict, prefix: str = "") -> dict[str, object]:
    """Nested objects as dotted names ({"service": {"id": 1}} -> {"service.id": 1}); lists stay."""
    flat: dict[str, object] = {}
    for name, value in document.items():
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{prefix}{name}."))
        else:
            flat[f"{prefix}{name}"] = value
    return flat


# --- parsing ---------------------------------------------------------------------------------

def parse_text(lines: Lines, ctx: ParseContext, family: Family) -> Parsed:
    """Parse a CSV or JSON-lines bill (the first non-blank character decides)."""
    parsed = Parsed()
    buffered = list(lines)
    first = next((text for _, text in buffered if text.strip()), "")
    reader = json_records if first.lstrip("\ufeff").lstrip().startswith("{") else csv_records
    return _collect(reader(buffered, family, parsed), ctx, family, parsed)


def parse_parquet(data: bytes, ctx: ParseContext, family: Family) -> Parsed:
    """Parse a Parquet bill."""
    parsed = Parsed()
    return _collect(parquet_records(data, family, parsed), ctx, family, parsed)


def _collect(records: Iterable[Record], ctx: ParseContext, family: Family, parsed: Parsed) -> Parsed:
    latest: dict[str, dict] = {}
    seen: Counter = Counter()  # identical rows so far, for hashed keys
    for row_number, record in enumerate(records, start=1):
        line = record.line or row_number
        columns = set(record.fields)
        try:
            rows = family.build(record, columns)
        except BadValue as error:
            parsed.rejects.append(Reject(line, str(error), record.raw))
            continue
        for row in rows:
            row.update(source_file=ctx.source, source_line=line, source_kind=family.kind)
            row["line_key"] = _line_key(row, seen)
            latest.pop(row["line_key"], None)  # a line seen again in the file: the later one wins
            latest[row["line_key"]] = row
        parsed.accepted += 1
    parsed.tables[TABLE] = list(latest.values())
    return parsed


def _line_key(row: dict, seen: Counter) -> str:
    provider = row["provider"]
    if row.get("line_key"):
        return f"{provider}|id|{row['line_key']}"
    content = {k: v for k, v in row.items() if k not in _NOT_CONTENT}
    text = json.dumps(content, sort_keys=True, default=_plain_json)
    digest = hashlib.sha256(text.encode()).hexdigest()[:32]
    count = seen[digest]
    seen[digest] += 1
    return f"{provider}|sha256:{digest}#{count}"


def _plain_json(value: object) -> object:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    return str(value)


def totals(parsed: Parsed) -> dict:
    """Lines, billed and effective cost per currency (decimal text, never summed across
    currencies) and the span of charge periods (ISO-8601 UTC)."""
    rows = parsed.tables.get(TABLE, [])
    billed: dict[str, Decimal] = defaultdict(Decimal)
    effective: dict[str, Decimal] = defaultdict(Decimal)
    for row in rows:
        billed[row["billing_currency"]] += row["billed_cost"]
        if row["effective_cost"] is not None:
            effective[row["billing_currency"]] += row["effective_cost"]
    starts = [r["charge_period_start"] for r in rows]
    ends = [r["charge_period_end"] or r["charge_period_start"] for r in rows]
    return {
        "lines": len(rows),
        "billed_cost_total": {c: plain(v) for c, v in sorted(billed.items())},
        "effective_cost_total": {c: plain(v) for c, v in sorted(effective.items())},
        "charge_period_min": min(starts).isoformat() if starts else None,
        "charge_period_max": max(ends).isoformat() if ends else None,
    }


def plain(amount: Decimal) -> str:
    """An amount as plain decimal text without trailing zeros or exponent: '12.5', '0.000005'."""
    text = format(amount.normalize(), "f")
    return "0" if text in ("-0", "") else text


# --- field readers ---------------------------------------------------------------------------

def amount(record: Record, *names: str) -> Decimal | None:
    """An exact amount from the first present column (DECIMAL(38, 12)); BadValue if unreadable."""
    return values.money(record.get(*names), record.name(*names))


def required_amount(record: Record, *names: str) -> Decimal:
    found = amount(record, *names)
    if found is None:
        raise BadValue(f"no {record.name(*names)}")
    return found


def quantity(record: Record, *names: str) -> float | None:
    value = record.get(*names)
    if isinstance(value, Decimal):
        value = str(value)
    return values.number(value, record.name(*names))


def text(record: Record, *names: str) -> str | None:
    value = record.get(*names)
    if value is None or isinstance(value, str):  # get() leaves out blank text
        return None if value is None else value.strip()
    if isinstance(value, (dict, list, tuple)):
        raise BadValue(f"{record.name(*names)} must be text, got {type(value).__name__}")
    return values.text(value, record.name(*names))


def required_text(record: Record, *names: str) -> str:
    found = text(record, *names)
    if found is None:
        raise BadValue(f"no {record.name(*names)}")
    return found


def moment(record: Record, *names: str) -> datetime | None:
    """A UTC time from ISO-8601 (naive is UTC), `2020-11-09 23:00:00 UTC`, M/D/Y (US order,
    two-digit years are 20YY) with an optional time, a date, or a Parquet timestamp."""
    value = record.get(*names)
    if value is None:
        return None
    name = record.name(*names)
    if isinstance(value, datetime):
        result = value if value.tzinfo else value.replace(tzinfo=UTC)
        return result.astimezone(UTC)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=UTC)
    if isinstance(value, str):
        raw = value.strip()
        if raw.upper().endswith(" UTC"):
            raw = raw[:-4].rstrip()
        us = _US_DATE.match(raw)
        if us:
            return _us_time(us, value, name)
        value = raw
    return values.timestamp(value, name, UTC)


def required_moment(record: Record, *names: str) -> datetime:
    found = moment(record, *names)
    if found is None:
        raise BadValue(f"no {record.name(*names)}")
    return found


def _us_time(match: re.Match, value: str, name: str) -> datetime:
    month, day, year, hour, minute, second, half = match.groups()
    year_number = int(year) + (2000 if len(year) == 2 else 0)
    hour_number = int(hour or 0)
    if half:
        if not 1 <= hour_number <= 12:
            raise BadValue(f"{name} {value!r} is not a time")
        hour_number = hour_number % 12 + (12 if half.lower() == "pm" else 0)
    try:
        result = datetime(year_number, int(month), int(day), hour_number, int(minute or 0),
                          int(second or 0), tzinfo=UTC)
    except ValueError:
        raise BadValue(f"{name} {value!r} is not a date (read as month/day/year)") from None
    if not values.EARLIEST <= result < values.LATEST:
        raise BadValue(f"{name} {value!r} is outside 1990-2099")
    return result


def next_day(start: datetime) -> datetime:
    return start + timedelta(days=1)


def month_span(month: str, name: str) -> tuple[datetime, datetime]:
    """The first instants of a YYYYMM (or YYYY-MM) month and of the next one, UTC."""
    match = re.fullmatch(r"(\d{4})-?(\d{2})", month.strip())
    if not match or not 1 <= int(match[2]) <= 12:
        raise BadValue(f"{name} {month!r} is not a month (YYYYMM)")
    year, number = int(match[1]), int(match[2])
    start = datetime(year, number, 1, tzinfo=UTC)
    end = datetime(year + number // 12, number % 12 + 1, 1, tzinfo=UTC)
    return start, end


def structured(value: object, name: str) -> object:
    """JSON text, or a Python literal (GCP's exports write `[{'key': 'a', 'value': None}]`), as
    Python values; a value that already is a list, dict or tuple passes through."""
    if not isinstance(value, str):
        return value
    raw = value.strip()
    if not raw:
        return None
    try:
        return json.loads(raw, parse_float=Decimal)
    except json.JSONDecodeError:
        pass
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise BadValue(f"{name} is neither JSON nor a Python literal: {raw[:80]!r}") from None


def tags(value: object, name: str) -> dict[str, str | None]:
    """Tags as name -> text from a JSON object (braces optional: Azure writes `"a": "b","c": "d"`),
    a list of {key, value} (GCP labels), a list of pairs (a Parquet map) or a dict. Names are kept
    as written (FOCUS samples carry both "org" and " org"); values become text, null stays null."""
    if values.is_absent(value):
        return {}
    if isinstance(value, str):
        raw = value.strip()
        if raw.startswith('"'):
            raw = "{" + raw + "}"
        parsed = structured(raw, name)
    else:
        parsed = value
    pairs: list[tuple[object, object]]
    if isinstance(parsed, dict):
        pairs = list(parsed.items())
    elif isinstance(parsed, (list, tuple)):
        pairs = []
        for item in parsed:
            if isinstance(item, dict) and "key" in item:
                pairs.append((item["key"], item.get("value")))
            elif isinstance(item, (list, tuple)) and len(item) == 2:
                pairs.append((item[0], item[1]))
            else:
                raise BadValue(f"{name} must be name: value pairs, got {item!r}")
    elif parsed is None:
        return {}
    else:
        raise BadValue(f"{name} must be an object of name: value, got {value!r}")
    result: dict[str, str | None] = {}
    for key, item in pairs:
        if key is None or (isinstance(key, str) and key == ""):
            raise BadValue(f"{name} has a tag without a name")
        result[str(key)] = None if item is None else (
            item if isinstance(item, str) else json.dumps(item, default=str) if isinstance(item, (dict, list))
            else str(item).lower() if isinstance(item, bool) else str(item))
    return result


def tag_pairs(found: dict[str, str | None]) -> list[tuple[str, str | None]] | None:
    """Tags as the MAP(VARCHAR, VARCHAR) column takes them (sorted pairs), None when there are none."""
    return sorted(found.items()) or None


def instance_type_in(*texts: str | None) -> str | None:
    """An instance or machine type named in free text (p4d.24xlarge, a2-highgpu-1g), lower case."""
    for piece in texts:
        if piece:
            match = _INSTANCE_TYPE.search(piece)
            if match:
                return (match[1] or match[2]).lower()
    return None


def category(raw: str | None, mapping: dict[str, str], name: str) -> str:
    """The normalised charge category of a raw value; BadValue for one the mapping does not know."""
    if raw is None:
        raise BadValue(f"no {name}")
    found = mapping.get(re.sub(r"[^a-z0-9]", "", raw.lower()))
    if found is None:
        raise BadValue(f"{name} {raw!r} is not a charge category mlcost knows "
                       f"({', '.join(sorted(set(mapping.values())))})")
    return found


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


def _raw(piece: list[tuple[int, str]]) -> str:
    return "\n".join(text for _, text in piece)[:500]


def pricing(raw: str | None, mapping: dict[str, str]) -> str | None:
    """on-demand, spot or commitment for a raw pricing value, None when it says none of these."""
    if raw is None:
        return None
    return mapping.get(re.sub(r"[^a-z0-9]", "", raw.lower()))
