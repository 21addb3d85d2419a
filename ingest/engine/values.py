"""Strict readers for single field values: text, numbers, money, timestamps.

Each returns None only for a value that is genuinely absent (missing key, null, empty
text) and raises BadValue, with a reason fit to show a user, for anything it cannot read.
Timestamps come back timezone-aware in UTC.
"""
from __future__ import annotations

import math
import re
from datetime import datetime, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError
from decimal import Context, Decimal, InvalidOperation

from ingest.engine.contract import BadValue

EARLIEST = datetime(1990, 1, 1, tzinfo=timezone.utc)
LATEST = datetime(2100, 1, 1, tzinfo=timezone.utc)
# The one spelling of a number mlcost reads, for Python (NUMBER_RE) and SQL (regexp_full_match
# with NUMBER_TEXT): ASCII digits only, an optional sign, point and exponent, no blanks, no
# underscores; float() and Decimal() alone accept '١٢٣', '1_000', ' 12 ' and 'nan'.
NUMBER_TEXT = r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]{1,4})?"
WHOLE_TEXT = r"[+-]?[0-9]{1,19}"
NUMBER_RE = re.compile(NUMBER_TEXT)
_WHOLE = re.compile(WHOLE_TEXT)
# No measured figure (watts, seconds, requests per second, kWh, kg) comes near 10^15; a bound
# keeps any sum over accepted rows finite (1e308 + 1e308 is inf in a DOUBLE).
NUMBER_LIMIT = 1e15
_SLASH_DATE = re.compile(r"^(\d{4})/(\d{2})/(\d{2})")
BIGINT_MAX = 2**63 - 1
# Money is stored as DECIMAL(38, 12): 12 decimal places (finer digits are float noise such as
# 23.520000000000003) and at most 26 digits before the point.
MONEY_PLACES = Decimal("1e-12")
# An amount is under 10^15 (a quadrillion): a DECIMAL(38, 12) SUM then holds 10^11 of them
# (6e25 fit one row but two overflowed every query that added them).
MONEY_LIMIT = Decimal("1e15")
_MONEY_CONTEXT = Context(prec=60)


def is_absent(value: object) -> bool:
    return value is None or (isinstance(value, str) and value.strip() == "")


def text(value: object, name: str) -> str | None:
    """The value as stripped text; numbers are accepted and written out."""
    if is_absent(value):
        return None
    if isinstance(value, (dict, list)):
        raise BadValue(f"{name} must be text, got {type(value).__name__}")
    return str(value).strip()


def is_number_text(value: str) -> bool:
    """Whether text is a number as mlcost reads one (NUMBER_TEXT)."""
    return NUMBER_RE.fullmatch(value) is not None


def number(value: object, name: str, maximum: float = NUMBER_LIMIT) -> float | None:
    """A finite float of at most `maximum` in size from a JSON number or numeric text (NUMBER_TEXT)."""
    if is_absent(value):
        return None
    if isinstance(value, bool) or isinstance(value, (dict, list)) or (isinstance(value, str) and not is_number_text(value)):
        raise BadValue(f"{name} must be a number, got {value!r}")
    try:
        result = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise BadValue(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(result):
        raise BadValue(f"{name} must be a finite number, got {value!r}")
    if abs(result) > maximum:
        raise BadValue(f"{name} {value!r} is too large (at most {maximum:g})")
    return result


def integer(value: object, name: str, maximum: int = BIGINT_MAX) -> int | None:
    """An int up to `maximum` in size; integral floats such as 1.0 are accepted, 1.5 is not."""
    if isinstance(value, str) and _WHOLE.fullmatch(value):
        value = int(value)  # exact beyond 2**53, where float would round
    if isinstance(value, int) and not isinstance(value, bool):
        if abs(value) > maximum:
            raise BadValue(f"{name} {value!r} is too large (at most {maximum:,})")
        return value
    result = number(value, name, maximum=float(maximum))
    if result is None:
        return None
    if not result.is_integer():
        raise BadValue(f"{name} must be a whole number, got {value!r}")
    if abs(result) > maximum:
        raise BadValue(f"{name} {value!r} is too large (at most {maximum:,})")
    return int(result)


def money(value: object, name: str) -> Decimal | None:
    """An exact Decimal from a JSON number (parsed as Decimal) or numeric text."""
    if is_absent(value):
        return None
    if isinstance(value, bool) or isinstance(value, (dict, list)):
        raise BadValue(f"{name} must be an amount, got {value!r}")
    if isinstance(value, str) and not is_number_text(value):
        raise BadValue(f"{name} must be an amount, got {value!r}")
    try:
        result = Decimal(str(value))
    except InvalidOperation:
        raise BadValue(f"{name} must be an amount, got {value!r}") from None
    if not result.is_finite():
        raise BadValue(f"{name} must be a finite amount, got {value!r}")
    return fit_money(result, name)


def fit_money(amount: Decimal, name: str) -> Decimal:
    """The amount rounded to the warehouse's 12 decimal places; BadValue when it cannot fit."""
    if abs(amount) >= MONEY_LIMIT:
        raise BadValue(f"{name} {amount} is too large (under 10^15)")
    return amount.quantize(MONEY_PLACES, context=_MONEY_CONTEXT)


def timestamp(value: object, name: str, tz: tzinfo) -> datetime | None:
    """A UTC datetime from ISO-8601 text (naive text is read in `tz`) or epoch seconds."""
    if is_absent(value):
        return None
    if isinstance(value, bool):
        raise BadValue(f"{name} must be a timestamp, got {value!r}")
    if isinstance(value, (int, float, Decimal)) or _is_numeric_text(value):
        # a timestamp is text, stripped like ISO text is; its digits are still ASCII only
        seconds = float(value.strip() if isinstance(value, str) else value)  # type: ignore[arg-type]
        if not math.isfinite(seconds):
            raise BadValue(f"{name} {value!r} is not a time")
        if seconds > 1e11:
            raise BadValue(f"{name} {value!r} looks like milliseconds; epoch values must be seconds")
        try:
            result = datetime.fromtimestamp(seconds, tz=timezone.utc)
        except (OverflowError, OSError, ValueError):
            raise BadValue(f"{name} {value!r} is not a valid epoch time") from None
    elif isinstance(value, str):
        raw = _SLASH_DATE.sub(r"\1-\2-\3", value.strip())
        if raw.endswith(("Z", "z")):
            raw = raw[:-1] + "+00:00"
        try:
            result = datetime.fromisoformat(raw)
        except ValueError:
            raise BadValue(f"{name} {value!r} is not an ISO-8601 timestamp or epoch seconds") from None
        if result.tzinfo is None:
            result = result.replace(tzinfo=tz)
        try:
            result = result.astimezone(timezone.utc)
        except OverflowError:  # 9999-12-31T23:00:00-05:00 is past year 9999 in UTC
            raise BadValue(f"{name} {value!r} is outside 1990-2099") from None
    else:
        raise BadValue(f"{name} must be a timestamp, got {value!r}")
    if not EARLIEST <= result < LATEST:
        raise BadValue(f"{name} {value!r} is outside 1990-2099")
    return result


def _is_numeric_text(value: object) -> bool:
    if not isinstance(value, str):
        return False
    return is_number_text(value.strip())


def zone(name: str) -> tzinfo | None:
    """The time zone an IANA name (or UTC) names, or None when there is no such zone."""
    if name.strip().upper() == "UTC":
        return timezone.utc
    try:
        return ZoneInfo(name.strip())
    except (ZoneInfoNotFoundError, ValueError):
        return None
