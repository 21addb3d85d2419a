"""Display formatters shared by every surface (pages, report, Slack, CLI): money, counts, labels, Markdown.

The column catalogue (COLUMNS, column()) is the one place that says how a column of the product is
shown: its label in words with its unit, and its kind (money, count, ratio, date, ...). Streamlit
tables (app/tables.py), the report's Markdown/HTML tables, Slack messages and the CLI's text tables
all read it, so a column reads the same everywhere.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import date, datetime
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation, localcontext

import pandas as pd


def usd(amount: Decimal | float | None, places: int = 2) -> str:
    """'$1,234.56' ('-$12.00' below zero), or '—' when there is no amount."""
    return money(amount, "USD", places)


def count_of(part: int, whole: int, what: str) -> str:
    """'12 of 40 runs priced'."""
    return f"{int(part):,} of {int(whole):,} runs {what}"


def plural(count: int, noun: str) -> str:
    """'1 run', '3 runs'."""
    return f"{int(count):,} {noun}{'' if int(count) == 1 else 's'}"


def money(amount: Decimal | float | None, currency: str, places: int = 2) -> str:
    """'1,234.56 EUR' ('$1,234.56', '-$12.00' for USD), rounded half-up to `places` decimals, or '—'
    when there is no amount."""
    value = rounded(amount, places)
    if value is None:
        return "—"
    if currency == "USD":
        return f"{'-' if value < 0 else ''}${abs(value):,.{places}f}"
    return f"{value:,.{places}f} {currency}".strip()


def rounded(amount: object, places: int = 2) -> Decimal | None:
    """`amount` as a Decimal rounded half-up to `places` decimals (money: cents), None when missing."""
    if is_missing(amount):
        return None
    try:
        value = Decimal(str(amount))
    except InvalidOperation:
        return None
    if not value.is_finite():
        return None
    with localcontext() as context:  # a huge sum (DECIMAL(38,12) totals) has more digits than the default 28
        context.prec = max(context.prec, value.adjusted() + places + 2)
        return value.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)


BILL_PLACES = 12  # the decimals a bill's amounts are stored with (DECIMAL(38,12) in the warehouse)


def exact(amount: object, places: int = BILL_PLACES) -> str | None:
    """An exact amount as a decimal string for JSON: rounded half-up to at most `places` decimals (the
    bill's precision; DECIMAL(38,12) in the warehouse), trailing zeros dropped, no exponent ('12.5',
    '0.000123', '1000'); None when missing."""
    value = rounded(amount, places)
    if value is None:
        return None
    with localcontext() as context:  # normalize() rounds to the context's precision: not a digit lost
        context.prec = max(context.prec, len(value.as_tuple().digits) + 2)
        text = f"{value.normalize():f}"
    return "0" if text in ("-0", "") else text


def count(value: object) -> str:
    """'618,171,801', or '' when missing."""
    return "" if is_missing(value) else f"{int(value):,}"


def is_missing(value: object) -> bool:
    """None, NaN, NaT or pd.NA."""
    if value is None:
        return True
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


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


_CODE = re.compile(r"`([^`\n]+)`")


def md_code(text: object, escape=None) -> str:
    """A sentence the program wrote, which may name a setting or command in `backticks`, as Markdown:
    each `span` stays code (shown as code, never markup), the rest escaped by `escape` (md, or
    md_inline for a report): no literal backtick on screen."""
    escape = escape or md

    def keep_spaces(part: str) -> str:  # escape() also folds whitespace: keep the spaces around code
        inner = part.strip()
        return part[: len(part) - len(part.lstrip())] + escape(inner) + part[len(part.rstrip()):] if inner else part

    parts = _CODE.split(str(text))  # text, code, text, code, ...
    return "".join(keep_spaces(part) if i % 2 == 0 else f"`{part}`" for i, part in enumerate(parts))


def html_code(text: object) -> str:
    """The same sentence as HTML: escaped, each `span` as <code>span</code>."""
    import html

    parts = _CODE.split(str(text))
    return "".join(html.escape(part) if i % 2 == 0 else f"<code>{html.escape(part)}</code>"
                   for i, part in enumerate(parts))


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


# --- the column catalogue -------------------------------------------------------------------

@dataclass(frozen=True)
class Column:
    """How a column is shown: its label in words (with its unit), its kind and decimals.

    kind: money (amount in the column's or the table's currency), count (an integer), number
    (`places` decimals), metric (a model's score: 4 decimals, so 0.131 and 0.125 differ), percent
    (a value in %), ratio (a share 0-1, shown in %), date, datetime (UTC), text, field (its values
    are column names: each shown as its label), hidden (an internal key, not shown). currency: fixed currency of a money column (USD for *_usd), None: the table's."""

    label: str
    kind: str = "text"
    places: int = 2
    currency: str | None = None


def _c(label_: str, kind: str = "text", places: int = 2, currency: str | None = None) -> Column:
    return Column(label_, kind, places, currency)


# The product's column names (warehouse, metrics and page frames) and how each is shown. A column
# not listed here is labelled from its name (label_of) and its kind inferred from its suffix.
COLUMNS: dict[str, Column] = {
    # runs
    "run_id": _c("Run ID"), "run_name": _c("Run name"), "run_ids": _c("Run IDs"), "project": _c("Project"),
    "team": _c("Team"), "owner": _c("Owner"), "model": _c("Model"), "status": _c("Status"),
    "started_at": _c("Started (UTC)", "datetime"), "ended_at": _c("Ended (UTC)", "datetime"),
    "duration_h": _c("Duration (h)", "number", 2), "instance_type": _c("Instance type"),
    "gpu_type": _c("GPU type"), "gpu_count": _c("GPUs", "count"), "gpu_hours": _c("GPU-hours", "number", 1),
    "price_per_hour_usd": _c("Price per hour", "money", 2, "USD"), "cost_usd": _c("Cost", "money", 2, "USD"),
    "cost_source": _c("Cost source"), "val_metric_name": _c("Metric"), "val_metric": _c("Metric value", "metric", 4),
    "metric_goal": _c("Goal"), "on_frontier": _c("On Pareto frontier"), "dominated_by": _c("Dominated by"),
    "examples": _c("Examples", "count"), "examples_source": _c("Examples from"),
    "cost_per_1k_examples_usd": _c("Cost per 1k examples", "money", 4, "USD"),
    "target_metric": _c("Target metric", "metric", 4), "time_to_target_h": _c("Time to target (h)", "number", 2),
    "cost_to_target_usd": _c("Cost to target", "money", 2, "USD"), "energy_kwh": _c("Energy (kWh)", "number", 2),
    "emissions_kg": _c("Emissions (kg CO₂e)", "number", 2), "source_kind": _c("Source"), "flags": _c("Flags"),
    "gpus_traced": _c("GPUs traced", "count"), "gpu_energy_kwh": _c("GPU energy (kWh)", "number", 2),
    "gpu_energy_coverage_pct": _c("GPU energy coverage (%)", "percent", 1),
    "gpu_energy_wh_per_1k_examples": _c("GPU energy per 1k examples (Wh)", "number", 2),
    "gpu_emissions_kg": _c("GPU emissions (kg CO₂e)", "number", 2), "pareto_standing": _c("Pareto standing"),
    "runs": _c("Runs", "count"), "runs_previous": _c("Runs, previous month", "count"),
    "max_cost_usd": _c("Cost ceiling per run", "money", 2, "USD"), "max_hours": _c("Max wall-clock (h)", "number", 1),
    "max_gpu_hours": _c("Max GPU-hours per run", "number", 1), "over": _c("Over"),
    "cost_usd_previous": _c("Cost, previous month", "money", 2, "USD"),
    # serving
    "service": _c("Service"), "model_version": _c("Model version"), "versions": _c("Model versions"),
    "first_window": _c("First window (UTC)", "datetime"), "last_window": _c("Last window (UTC)", "datetime"),
    "replicas": _c("Replicas", "count"), "windows": _c("Windows", "count"),
    "windows_with_cost": _c("Windows with cost", "count"), "windows_with_energy": _c("Windows with energy", "count"),
    "requests_total": _c("Requests", "count"), "requests_success": _c("Successful requests", "count"),
    "requests_error": _c("Failed requests", "count"),
    "cost_per_1k_success_usd": _c("Cost per 1k successful requests", "money", 4, "USD"),
    "cost_per_1k_success_usd_previous": _c("Cost per 1k successful, previous month", "money", 4, "USD"),
    "cost_per_1k_requests_usd": _c("Cost per 1k requests", "money", 4, "USD"),
    "energy_wh_per_1k_success": _c("Energy per 1k successful requests (Wh)", "number", 2),
    "energy_wh_per_1k_requests": _c("Energy per 1k requests (Wh)", "number", 2),
    "error_rate": _c("Failed share (%)", "ratio", 2), "latency_ms_p50": _c("Latency p50 (ms)", "number", 1),
    "latency_ms_p95": _c("Latency p95 (ms)", "number", 1), "latency_ms_p99": _c("Latency p99 (ms)", "number", 1),
    "throughput_rps": _c("Throughput (requests/s)", "number", 2),
    "avg_gpu_util_pct": _c("Mean GPU utilization (%)", "percent", 1),
    "avg_cpu_util_pct": _c("Mean CPU utilization (%)", "percent", 1),
    "metric": _c("Figure", "field"), "from_version": _c("From version"), "to_version": _c("To version"),
    "start_date": _c("Started (UTC)", "date"), "before": _c("Before", "number", 4), "after": _c("After", "number", 4),
    "change_pct": _c("Change (%)", "percent", 1), "is_regression": _c("Regression"),
    "from_requests_success": _c("Successful requests, from version", "count"),
    "to_requests_success": _c("Successful requests, to version", "count"),
    # GPUs
    "host": _c("Node"), "gpu": _c("GPU"), "gpu_index": _c("GPU index", "count"), "gpu_uuid": _c("GPU UUID"),
    "gpu_name": _c("GPU model"), "observed_h": _c("Observed (GPU-h)", "number", 1),
    "idle_h": _c("Idle (GPU-h)", "number", 1), "allocated_idle_h": _c("Idle, held by a run (GPU-h)", "number", 1),
    "unallocated_idle_h": _c("Idle, unallocated (GPU-h)", "number", 1), "busy_h": _c("Busy (GPU-h)", "number", 1),
    "idle_kwh": _c("Idle energy (kWh)", "number", 2), "allocated_idle_kwh": _c("Idle energy, held (kWh)", "number", 2),
    "unallocated_idle_kwh": _c("Idle energy, unallocated (kWh)", "number", 2),
    "busy_util_pct": _c("Utilization when busy (%)", "percent", 1),
    "usd_per_gpu_hour": _c("Price per GPU-hour", "money", 2, "USD"), "price_source": _c("Price source"),
    "idle_usd": _c("Idle cost", "money", 2, "USD"), "allocated_idle_usd": _c("Idle cost, held by runs", "money", 2, "USD"),
    "unallocated_idle_usd": _c("Idle cost, unallocated", "money", 2, "USD"),
    "run_gpu_h": _c("Held by runs (GPU-h)", "number", 1), "mean_util_pct": _c("Mean utilization (%)", "percent", 1),
    "gap_start": _c("Gap from (UTC)", "datetime"), "gap_end": _c("Gap to (UTC)", "datetime"),
    "gap_h": _c("Gap (h)", "number", 2),
    # bills, allocation, reconciliation
    "billing_currency": _c("Currency"), "provider": _c("Provider"), "service_name": _c("Cloud service"),
    "resource_id": _c("Resource"), "resource_name": _c("Resource name"), "billed_cost": _c("Billed", "money"),
    "effective_cost": _c("Effective cost", "money"), "list_cost": _c("List cost", "money"),
    "lines": _c("Bill lines", "count"), "first_charge": _c("First charge (UTC)", "datetime"),
    "last_charge": _c("Last charge (UTC)", "datetime"), "charge_category": _c("Charge category"),
    "charge_period_start": _c("Charge from (UTC)", "datetime"), "billed_from": _c("Billed from (UTC)", "datetime"),
    "billed_to": _c("Billed to (UTC)", "datetime"), "estimated_cost_usd": _c("Estimated cost", "money", 2, "USD"),
    "gap_usd": _c("Gap", "money", 2, "USD"), "gap_pct": _c("Gap (%)", "percent", 1), "large_gap": _c("Large gap"),
    "untagged": _c("Found by resource only"), "lines_by_resource": _c("Lines found by resource", "count"),
    "lines_naming_unknown_runs": _c("Lines naming a run not loaded", "count"),
    "untagged_lines": _c("Untagged lines", "count"), "allocated_cost": _c("Allocated", "money"),
    "line_effective_cost": _c("Whole line", "money"), "allocated_to": _c("Allocated to"), "rule": _c("Rule"),
    "rules": _c("Rules"), "gpu_rule": _c("GPU found by"), "node_gpu_hours": _c("Node GPU-hours", "number", 1),
    "bucket": _c("Bucket"), "key_value": _c("Value"), "total": _c("Total", "money"),
    "training": _c("Training runs", "money"), "serving": _c("Serving", "money"), "idle_gpu": _c("Idle GPUs", "money"),
    "shared": _c("Shared", "money"), "unallocated": _c("Unallocated", "money"),
    "usage": _c("Usage", "money"), "purchase": _c("Purchases", "money"), "tax": _c("Taxes", "money"),
    "credit": _c("Credits", "money"), "adjustment": _c("Adjustments", "money"),
    "unmatched_cost": _c("Matched no run", "money"), "matched_cost": _c("Matched a run", "money"),
    "month": _c("Month", "month"), "day": _c("Day (UTC)", "date"), "period": _c("Period"),
    # budgets
    "budget": _c("Budget"), "scope": _c("Scope"), "amount": _c("Amount", "money"), "spent": _c("Spent", "money"),
    "forecast": _c("Forecast", "money"), "used_pct": _c("Used (%)", "percent", 1),
    "forecast_pct": _c("Forecast (%)", "percent", 1), "breach": _c("Breach"), "source": _c("Source"),
    "outcome": _c("Outcome"), "cost": _c("Cost", "money"), "item": _c("What"), "label": _c("Bucket"),
    # alerts
    "fired_at": _c("Fired (UTC)", "datetime"), "title": _c("Alert"), "delivery": _c("Delivery"),
    "channel": _c("Channel"), "attempts": _c("Attempts", "count"), "delivered_at": _c("Delivered (UTC)", "datetime"),
    "resolved_at": _c("Resolved (UTC)", "datetime"), "last_error": _c("Last error"), "subject": _c("Subject"),
    "threshold": _c("Threshold"), "period_start": _c("Period from", "date"), "until": _c("Until (UTC)", "datetime"),
    "snoozed_until": _c("Snoozed until (UTC)", "datetime"), "created_at": _c("Created (UTC)", "datetime"),
    "posted_at": _c("Posted (UTC)", "datetime"), "ok": _c("Posted"), "http_status": _c("HTTP status", "id"),
    "error": _c("Error"), "key": _c("Key", "hidden"), "alert_key": _c("Alert key", "hidden"),
    # loads and decisions
    "load_id": _c("Load", "id"), "loaded_at": _c("Loaded (UTC)", "datetime"), "path": _c("File"), "kind": _c("Kind"),
    "options": _c("Options"), "rows_loaded": _c("Rows loaded", "count"), "rows_rejected": _c("Rows rejected", "count"),
    "rows_current": _c("Rows in use", "count"), "sha256": _c("SHA-256"), "line": _c("Line", "count"),
    "reason": _c("Reason"), "written_at": _c("Written (UTC)", "datetime"), "author": _c("Author"), "text": _c("Text"),
}

# Unit suffixes of column names (STYLE: names carry units), how a header says them, and the kind
# they imply for a column the catalogue does not list.
UNITS = (("_usd_per_gpu_hour", "USD per GPU-hour"), ("_usd_per_hour", "USD per hour"), ("_usd", "USD"),
         ("_kwh", "kWh"), ("_wh", "Wh"), ("_pct", "%"), ("_kg", "kg"), ("_gpu_h", "GPU-h"), ("_h", "h"),
         ("_s", "s"), ("_w", "W"), ("_mib", "MiB"), ("_ms", "ms"), ("_at", "UTC"))
WORDS = {"id": "ID", "ids": "IDs", "gpu": "GPU", "gpus": "GPUs", "1k": "1k", "p50": "p50", "p95": "p95",
         "p99": "p99", "sku": "SKU", "uuid": "UUID", "util": "utilization", "kwh": "kWh", "usd": "USD",
         "cpu": "CPU", "wh": "Wh", "avg": "mean", "rps": "requests/s", "pct": "%"}
_KIND_OF_UNIT = {"USD": "money", "USD per GPU-hour": "money", "USD per hour": "money", "%": "percent",
                 "UTC": "datetime", "kWh": "number", "Wh": "number", "kg": "number", "GPU-h": "number",
                 "h": "number", "s": "number", "W": "number", "MiB": "number", "ms": "number"}


def label_of(name: str) -> str:
    """A header from a column name the catalogue does not list: 'gpu_energy_kwh' -> 'GPU energy (kWh)',
    'cost_usd_previous' -> 'Cost, previous (USD)'."""
    name = str(name)
    base, after = name, ""
    if name.endswith("_previous"):
        base, after = name[: -len("_previous")], ", previous"
    unit = None
    for suffix, said in UNITS:
        if base.endswith(suffix) and len(base) > len(suffix):
            base, unit = base[: -len(suffix)], said
            break
    words = [WORDS.get(word, word) for word in re.split(r"[_\s]+", base) if word]
    text = " ".join(words) + after
    text = text[:1].upper() + text[1:]
    return f"{text} ({unit})" if unit else text


def column(name: object, currency: str | None = None) -> Column:
    """How column `name` is shown: the catalogue's entry, else its label and kind from its name.
    A money column's label says its currency: 'Cost (USD)', 'Billed (EUR)'; `currency` is the
    table's, for money columns without a fixed one."""
    key = str(name)
    found = COLUMNS.get(key)
    if found is None:
        unit = next((said for suffix, said in UNITS if key.endswith(suffix) and len(key) > len(suffix)), None)
        kind = _KIND_OF_UNIT.get(unit or "", "text")
        found = Column(label_of(key), kind, 2 if kind == "money" and "per_1k" not in key else 4 if kind == "money"
                       else 1 if kind == "percent" else 2, "USD" if kind == "money" else None)
        if kind == "money":  # the unit goes with the currency below
            found = replace(found, label=re.sub(r" \((USD[^)]*)\)$", "", found.label))
    if found.kind == "money":
        money_in = found.currency or currency
        if money_in and f"({money_in}" not in found.label:
            found = replace(found, label=f"{found.label} ({money_in})", currency=money_in)
    return found


def label(name: object, currency: str | None = None) -> str:
    """A table header in words with its unit: 'cost_usd' -> 'Cost (USD)', 'gpu_energy_kwh' -> 'GPU energy (kWh)'."""
    return column(name, currency).label


# Streamlit's currency presets write a negative amount as finance does ('-$800.00', not '$-800.00'),
# always with cents; printf formats for other currencies and other decimals.
CURRENCY_PRESETS = {"USD": "dollar", "EUR": "euro"}


def money_format(currency: str, places: int = 2) -> str:
    """A format for st.column_config.NumberColumn: 'dollar' ('-$1,234.56') for USD in cents, '$%,.4f'
    for USD to 4 decimals, '%,.2f GBP' for another currency."""
    if places == 2 and currency in CURRENCY_PRESETS:
        return CURRENCY_PRESETS[currency]
    return f"${'%'},.{places}f" if currency == "USD" else f"%,.{places}f {currency}".rstrip()


def number_format(spec: Column, currency: str | None = None) -> str | None:
    """The printf format of a numeric column of kind spec.kind (None: not a number column)."""
    if spec.kind == "money":
        return money_format(spec.currency or currency or "", spec.places)
    if spec.kind == "count":
        return "%,d"
    if spec.kind == "id":
        return "%d"
    if spec.kind in ("number", "metric"):
        return f"%,.{spec.places}f"
    if spec.kind == "percent":
        return f"%,.{spec.places}f %%"
    if spec.kind == "ratio":
        return "percent"
    return None


# A figure's unit (metrics/retrospective.Figure.unit) as the column kind that writes it, and the
# unit written after the number.
_UNIT_COLUMNS = {"USD": (Column("", "money", 2, "USD"), ""), "USD/1k": (Column("", "money", 4, "USD"), ""),
                 "count": (Column("", "count"), ""), "runs": (Column("", "count"), ""),
                 "requests": (Column("", "count"), ""), "date": (Column("", "date"), ""),
                 "decimal": (Column("", "number", 4), ""), "%": (Column("", "percent", 1), "")}
_UNITS_AFTER = ("kWh", "kg CO2e", "GPU-h", "Wh")


def unit_column(unit: str) -> tuple[Column | None, str]:
    """(the column kind writing a figure in `unit`, the text after it); (None, '') for a unit
    without one. A three-letter upper-case unit is a currency code."""
    if unit in _UNIT_COLUMNS:
        return _UNIT_COLUMNS[unit]
    if len(unit) == 3 and unit.isalpha() and unit.isupper():
        return Column("", "money", 2, unit), ""
    if unit in _UNITS_AFTER:
        return Column("", "number", 1), f" {unit}"
    return None, ""


def cell(value: object, spec: Column, currency: str | None = None) -> str:
    """One value as text for a report, Slack or CLI table: money rounded to the column's decimals with
    its currency and separators, counts with separators, dates as dates, '' when missing."""
    if is_missing(value):
        return ""
    if isinstance(value, str):  # already text (an amount written in its own currency, a name)
        return label(value) if spec.kind == "field" else value
    kind = spec.kind
    try:
        if kind == "money":
            return money(value, spec.currency or currency or "", spec.places)
        if kind == "count":
            return f"{int(value):,}"
        if kind == "id":
            return str(int(value)) if isinstance(value, (int, float)) else str(value)
        if kind in ("number", "metric"):
            return f"{float(value):,.{spec.places}f}"
        if kind == "percent":
            return f"{float(value):,.{spec.places}f} %"
        if kind == "ratio":
            return f"{float(value) * 100:,.{spec.places}f} %"
        if kind == "date":
            return f"{pd.Timestamp(value):%Y-%m-%d}"
        if kind == "month":
            return f"{pd.Timestamp(value):%Y-%m}"
        if kind == "datetime":
            stamp = pd.Timestamp(value)
            return f"{stamp:%Y-%m-%d}" if (stamp.hour, stamp.minute, stamp.second) == (0, 0, 0) \
                else f"{stamp:%Y-%m-%d %H:%M}"
    except (TypeError, ValueError, InvalidOperation):
        return str(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (datetime, date, pd.Timestamp)):
        return f"{pd.Timestamp(value):%Y-%m-%d %H:%M}"
    return str(value)


def text_table(frame: pd.DataFrame, currency: str | None = None,
               labels: dict[str, str] | None = None) -> tuple[list[str], list[list[str]]]:
    """`frame` as a header and rows of text (report, Slack, CLI), each column as the catalogue says
    (hidden columns left out). `labels` overrides a column's label."""
    labels = labels or {}
    specs = {name: column(name, currency) for name in frame.columns}
    shown = [name for name in frame.columns if specs[name].kind != "hidden"]
    header = [labels.get(name) or specs[name].label for name in shown]
    rows = [[cell(value, specs[name], currency) for name, value in zip(shown, row)]
            for row in frame[shown].itertuples(index=False)]
    return header, rows


def plain_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A fixed-width text table (CLI): numbers right-aligned, text left-aligned."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    numeric = [bool(rows) and all(_looks_numeric(r[i]) for r in rows if r[i]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if n else c.ljust(w) for c, w, n in zip(cells, widths, numeric)).rstrip()

    return [line(header), line(["-" * w for w in widths])] + [line(r) for r in rows]


def _looks_numeric(text: str) -> bool:
    return bool(re.fullmatch(r"[-+]?\$?[\d,]+(\.\d+)?( ?%| [A-Z]{3})?", text))
