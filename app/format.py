"""Small display formatters shared by the pages."""
from __future__ import annotations

from decimal import Decimal

import pandas as pd


def usd(amount: Decimal | float | None) -> str:
    """'$1,234.56', or '—' when there is no amount."""
    if amount is None or pd.isna(amount):
        return "—"
    return f"${Decimal(str(amount)):,.2f}"


def count_of(part: int, whole: int, what: str) -> str:
    """'12 of 40 runs priced'."""
    return f"{int(part):,} of {int(whole):,} runs {what}"


def plural(count: int, noun: str) -> str:
    """'1 run', '3 runs'."""
    return f"{int(count):,} {noun}{'' if int(count) == 1 else 's'}"


def money(amount: Decimal | float | None, currency: str) -> str:
    """'1,234.56 EUR' ('$1,234.56' for USD), or '—' when there is no amount."""
    if amount is None or pd.isna(amount):
        return "—"
    value = Decimal(str(amount))
    if currency == "USD":
        return f"{'-' if value < 0 else ''}${abs(value):,.2f}"
    return f"{value:,.2f} {currency}"


def kg_co2e(kg: float) -> str:
    """'0.500 kg CO₂e', '45.3 kg CO₂e', '367 kg CO₂e', '12.3 t CO₂e': short enough for a metric."""
    if kg >= 10_000:
        return f"{kg / 1000:,.1f} t CO₂e"
    return f"{kg:,.{3 if kg < 10 else 1 if kg < 100 else 0}f} kg CO₂e"
