"""Readers of one value of a bill record (bill_family.Record), each raising BadValue with the reason a
user sees: exact amounts (Decimal), quantities, text, UTC times (ISO-8601, US dates, Parquet
timestamps), months, tags, charge and pricing categories, and instance types named in descriptions.
The definitions' per-record reader (bill_build.py) is built from these.
"""
from __future__ import annotations

import ast
import json
import re
from datetime import date, datetime, timedelta
from decimal import Decimal

from ingest.engine import values
from ingest.engine.contract import BadValue
from ingest.formats.billing.bill_family import UTC, Record

# An instance type named in a description: p4d.24xlarge, g5.xlarge, m5.metal, a2-highgpu-1g.
_INSTANCE_TYPE = re.compile(
    r"\b([a-z][a-z0-9]*\d[a-z0-9]*\.(?:\d*x?large|medium|small|micro|nano|metal(?:-\d+xl)?))\b"
    r"|\b((?:a2|a3|g2)-(?:high|mega|ultra|standard)[a-z]*-\d+g?)\b", re.IGNORECASE)
_US_DATE = re.compile(
    r"^(\d{1,2})/(\d{1,2})/(\d{4}|\d{2})(?:[ T](\d{1,2}):(\d{2})(?::(\d{2}))?\s*([AaPp][Mm])?)?$")


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


def pricing(raw: str | None, mapping: dict[str, str]) -> str | None:
    """on-demand, spot or commitment for a raw pricing value, None when it says none of these."""
    if raw is None:
        return None
    return mapping.get(re.sub(r"[^a-z0-9]", "", raw.lower()))
