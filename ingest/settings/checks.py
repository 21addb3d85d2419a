"""One setting's value checked and read: a price (Decimal USD), a number, a whole number, a currency
code, a list of names, percentages, a channel, optional text. Each raises ConfigError naming the file
and the key, with the same message wherever the setting is.
"""
from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation


class ConfigError(ValueError):
    """A settings file mlcost cannot use; `file` and `key` say where."""

    def __init__(self, file: str, key: str | None, problem: str) -> None:
        self.file, self.key = file, key
        super().__init__(f"{file}: {key} {problem}" if key else f"{file}: {problem}")


def price(value: object, file: str, key: str) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ConfigError(file, key, f"must be a price in USD per hour, got {value!r}")
    try:
        price = Decimal(str(value).strip())
    except InvalidOperation:
        raise ConfigError(file, key, f"must be a price in USD per hour, got {value!r}") from None
    if not price.is_finite() or price < 0:
        raise ConfigError(file, key, f"must be a price of 0 or more USD per hour, got {value!r}")
    return price


def number(value: object, file: str, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ConfigError(file, key, f"must be a number of 0 or more, got {value!r}")
    return float(value)


def whole(value: object, file: str, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(file, key, f"must be a whole number of 0 or more, got {value!r}")
    return value



def currency(value: object, file: str, key: str) -> str | None:
    """An ISO 4217 code in upper case ('usd' -> 'USD'); '' is none."""
    if not isinstance(value, str) or (value.strip() and not re.fullmatch(r"[A-Za-z]{3}", value.strip())):
        raise ConfigError(file, key, f"must be a three-letter currency code such as \"USD\" (or \"\"), got {value!r}")
    return value.strip().upper() or None


def words(value: object, file: str, key: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ConfigError(file, key, f'must be a list of names, e.g. ["p4d", "g5"], got {value!r}')
    return tuple(dict.fromkeys(v.strip().lower() for v in value))


def percents(value: object, file: str, key: str) -> tuple[float, ...]:
    if not isinstance(value, list):
        raise ConfigError(file, key, f"must be a list of percentages such as [50, 80, 100], got {value!r}")
    percents = [number(v, file, key) for v in value]
    if any(p <= 0 for p in percents):
        raise ConfigError(file, key, f"must hold percentages above 0, got {value!r}")
    return tuple(sorted(set(percents)))


def channel(value: object, file: str, key: str) -> str | None:
    """A named Slack channel (its webhook comes from the environment or secrets), or None for the default."""
    if not isinstance(value, str):
        raise ConfigError(file, key, f"must be a channel name, got {value!r}")
    name = value.strip().lstrip("#")
    if name and not all(c.isalnum() or c in "-_" for c in name):
        raise ConfigError(file, key, f"must be a channel name of letters, digits, - and _, got {value!r}")
    return name or None


def optional_text(value: object, file: str, key: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigError(file, key, f"must be text, got {value!r}")
    return value.strip() or None
