"""Small display formatters shared by the pages."""
from __future__ import annotations

import re
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


# Markdown characters that could make untrusted text into a link, an image, HTML, emphasis, code,
# a table cell, a heading or strikethrough; Streamlit adds $math$ and :directives:/:emoji:.
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>|~&])")  # [ ] alone already break links and images
_ST_SPECIAL = re.compile(r"([$:])")
# CSV cells a spreadsheet would run as a formula (OWASP "CSV injection").
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def md_inline(text: object) -> str:
    """`text` (a name, tag, version, error from outside) safe inside a line of plain Markdown (a
    report, a table cell): the same characters on one line, never markup, a link or an image."""
    return _MD_SPECIAL.sub(r"\\\1", " ".join(str(text).split()))


def md(text: object) -> str:
    """`text` safe anywhere in a Streamlit Markdown string (st.markdown, captions, alerts, labels):
    md_inline, plus Streamlit's $ and :, plus a leading list marker."""
    escaped = _ST_SPECIAL.sub(r"\\\1", md_inline(text))
    escaped = re.sub(r"^(\d+)([.)])", r"\1\\\2", escaped)  # "1\. item"
    return re.sub(r"^([-+=#])", r"\\\1", escaped)


def csv_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of `frame` for a CSV download: text cells starting with = + - @, tab or CR get a
    leading ' so a spreadsheet shows them as text, never runs them as a formula."""
    out = frame.copy()
    for column in out.columns:
        if out[column].dtype == object or pd.api.types.is_string_dtype(out[column]):
            text = out[column]
            risky = text.map(lambda v: isinstance(v, str) and v.startswith(_FORMULA_START))
            if risky.any():
                out[column] = text.where(~risky, "'" + text.astype(str))
    return out


def csv_bytes(frame: pd.DataFrame) -> bytes:
    """`frame` as UTF-8 CSV for st.download_button, formula cells neutralised (csv_safe)."""
    # CRLF rows (RFC 4180) also make the writer quote a cell holding a lone CR
    return csv_safe(frame).to_csv(index=False, lineterminator="\r\n").encode()


# Unit suffixes of column names (STYLE: names carry units) and how a table header says them.
UNITS = (("_usd_per_gpu_hour", "USD per GPU-hour"), ("_usd_per_hour", "USD per hour"), ("_usd", "USD"),
         ("_kwh", "kWh"), ("_wh", "Wh"), ("_pct", "%"), ("_kg", "kg"), ("_gpu_h", "GPU-h"), ("_h", "h"),
         ("_s", "s"), ("_w", "W"), ("_mib", "MiB"), ("_at", "UTC"))
WORDS = {"id": "ID", "gpu": "GPU", "gpus": "GPUs", "1k": "1k", "p50": "p50", "p95": "p95", "p99": "p99",
         "sku": "SKU", "uuid": "UUID", "util": "utilization", "kwh": "kWh", "usd": "USD", "cpu": "CPU"}


def label(column: str) -> str:
    """A table header from a column name: 'cost_usd' -> 'Cost (USD)', 'gpu_energy_kwh' -> 'GPU energy (kWh)'."""
    name, unit = column, None
    for suffix, said in UNITS:
        if column.endswith(suffix) and len(column) > len(suffix):
            name, unit = column[: -len(suffix)], said
            break
    words = [WORDS.get(word, word) for word in name.split("_") if word]
    text = " ".join(words)
    text = text[:1].upper() + text[1:]
    return f"{text} ({unit})" if unit else text


def money_format(currency: str, places: int = 2) -> str:
    """A printf format for st.column_config.NumberColumn: '$%,.2f' for USD, '%,.2f EUR' otherwise."""
    return f"${'%'},.{places}f" if currency == "USD" else f"%,.{places}f {currency}"
