"""A bill file read into `billing_lines` rows by Python, line by line: CSV, JSON lines and Parquet
into records keyed by normalised column names (bill_family.Record), the header the rows are read
under (a ragged tail, a column a [billing] setting gives), each record built into rows by its
family, every row keyed, and the file's totals. The columnar path (bill_stage.py) reads most
files in SQL and hands this module the lines SQL cannot read; it reads the header the same way.

Line keys (`line_key`, warehouse.REPLACE_BY): a line the source identifies (AWS
`identity/LineItemId` + `identity/TimeInterval`, FOCUS `x_LineItemId` or `Id`) is
`<provider>|id|<that id>`, so a re-delivered line replaces the stored one even when its amount
was restated. A line without an id (GCP, Azure) is `<provider>|sha256:<hash>#<n>`: the hash of
the normalised row (every stored column but the file, line and load), `n` counting identical
rows earlier in the same file, so the same bill loaded again, from another file, a .gz or a
Parquet copy, replaces itself instead of adding up twice, while two genuinely identical lines
of one file both stay. A restated line without an id (new amount) is a new line.

What a family is and the columns of a row are in bill_family.py; the readers of one value
(amounts, times, tags) in bill_values.py.
"""
from __future__ import annotations

import csv
import hashlib
import io
import itertools
import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from ingest.engine.contract import BadValue, Lines, ParseContext, Parsed, Reject
from ingest.engine.definition import opens_with
from ingest.formats.billing.bill_family import NOT_CONTENT, TABLE, Family, Record


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
    reader = json_records if opens_with(first, "{") else csv_records
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
    digest = content_digest({k: v for k, v in row.items() if k not in NOT_CONTENT})
    count = seen[digest]
    seen[digest] += 1
    return f"{provider}|sha256:{digest}#{count}"


def content_digest(content: dict) -> str:
    """The hash of a row's content in a line key: sha256 of its sorted JSON, the first 32 hex digits."""
    text = json.dumps(content, sort_keys=True, default=_plain_json)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


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


def _raw(piece: list[tuple[int, str]]) -> str:
    return "\n".join(text for _, text in piece)[:500]
