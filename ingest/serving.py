"""Serving metric windows: one record per service, model version, host and time window.

JSONL (one object per line) or CSV with a header. A window has a start and either an end or a
length (`window_seconds`). Where `cost_usd` is missing it is derived from the price catalog
(ingest/settings/config.py): instance price x replicas x window hours, or GPU price x GPUs x hours, and
`cost_source` says `derived`; with neither price known the cost stays NULL. `energy_kwh` is
kept as given and NULL when absent, never 0. A window seen again (same service, version, host
and start) replaces the earlier one, in the same file or a later one.
"""
from __future__ import annotations

import csv
import json
from datetime import datetime, timedelta
from decimal import Decimal, localcontext

from ingest.engine import values
from ingest.engine.contract import BadValue, Lines, ParseContext, Parsed, Reject
from ingest.settings import config

KIND = "serving"
TABLES = ("serving_windows",)

# Accepted spellings of a field, the warehouse column's own name first.
NAMES = {
    "window_start": ("window_start", "start_time"),
    "window_end": ("window_end", "end_time"),
    "window_s": ("window_s", "window_seconds"),
    "avg_gpu_util_pct": ("avg_gpu_util_pct", "avg_gpu_util"),
    "avg_cpu_util_pct": ("avg_cpu_util_pct", "avg_cpu_util"),
    "cost_usd": ("cost_usd", "estimated_cost_usd"),
}
MEASURES = ("latency_ms_p50", "latency_ms_p95", "latency_ms_p99", "throughput_rps")  # numbers >= 0
LENGTH_TOLERANCE_S = 1.0  # a given window_seconds within 1 s of end - start agrees
INTEGER_MAX = 2**31 - 1
CENT = Decimal("0.01")
SECONDS_PER_HOUR = Decimal(3600)


def sniff(name: str, head: str) -> bool:
    """JSON lines or a CSV header that name requests_total and a window start or a service."""
    text = head.lstrip("\ufeff").lstrip()
    if text.startswith("{"):
        return '"requests_total"' in head and any(f'"{f}"' in head for f in ("window_start", "service"))
    columns = {c.strip().strip('"') for c in text.split("\n", 1)[0].split(",")}
    return "requests_total" in columns and bool(columns & {"window_start", "service"})


def parse(lines: Lines, ctx: ParseContext, prices: config.Prices | None = None) -> Parsed:
    """Windows in file order (a repeated window keeps its last record); prices default to the catalog."""
    prices = prices if prices is not None else config.load().prices
    parsed, latest = Parsed(), {}
    for line, record, raw in _records(lines, parsed):
        try:
            row = build_window(record, line, ctx, prices)
        except BadValue as error:
            parsed.rejects.append(Reject(line, str(error), raw))
            continue
        latest.pop(row["window_key"], None)
        latest[row["window_key"]] = row
        parsed.accepted += 1
    parsed.tables["serving_windows"] = list(latest.values())
    return parsed


def stage(src, con, ctx: ParseContext):
    """Stage the file's windows and rejects (ingest/serving_columnar.py)."""
    from ingest import serving_columnar

    return serving_columnar.stage(src, con, ctx)


def totals(parsed: Parsed) -> dict:
    """Window count, requests, cost (USD, decimal text) and energy totals, with how many windows carry them."""
    rows = parsed.tables.get("serving_windows", [])
    costs = [r["cost_usd"] for r in rows if r["cost_usd"] is not None]
    energies = [r["energy_kwh"] for r in rows if r["energy_kwh"] is not None]
    return {
        "windows": len(rows),
        "requests_total": sum(r["requests_total"] for r in rows),
        "cost_usd_total": str(sum(costs, Decimal(0)).quantize(CENT)) if costs else None,
        "windows_cost_derived": sum(r["cost_source"] == "derived" for r in rows),
        "windows_without_cost": len(rows) - len(costs),
        "energy_kwh_total": round(sum(energies), 9) if energies else None,
        "windows_with_energy": len(energies),
    }


def build_window(record: dict, line: int, ctx: ParseContext, prices: config.Prices) -> dict:
    """The `serving_windows` row for one record; raises BadValue with the reason."""
    if not isinstance(record, dict):
        raise BadValue(f"expected a JSON object, got {type(record).__name__}")
    start, end, seconds = _span(record, ctx)
    service = values.text(record.get("service"), "service")
    version = values.text(record.get("model_version"), "model_version")
    if service is None:
        raise BadValue("no service")
    if version is None:
        raise BadValue("no model_version")
    total = _count(record, "requests_total", values.BIGINT_MAX)
    success = _count(record, "requests_success", values.BIGINT_MAX)
    error = _count(record, "requests_error", values.BIGINT_MAX)
    if total is None:
        raise BadValue("no requests_total")
    if success is None:
        raise BadValue("no requests_success (cost per successful request needs it)")
    if success + (error or 0) > total:
        raise BadValue(f"requests_success {success} + requests_error {error or 0} is more than "
                       f"requests_total {total}")

    host = values.text(record.get("host"), "host")
    instance_type = values.text(record.get("instance_type"), "instance_type")
    gpu_type = values.text(record.get("gpu_type"), "gpu_type")
    replicas = _count(record, "replicas", INTEGER_MAX)
    uuids = _text_list(record.get("gpu_uuids"), "gpu_uuids")
    gpu_count = _count(record, "gpu_count", INTEGER_MAX)
    if gpu_count is None and uuids:
        gpu_count = len(uuids)
    cost = values.money(_get(record, "cost_usd"), _name(record, "cost_usd"))
    if cost is not None and cost < 0:
        raise BadValue(f"{_name(record, 'cost_usd')} is negative ({cost.normalize()})")
    fleet_price = None
    if cost is None:
        fleet_price = _fleet_price(prices, instance_type, replicas, gpu_type, gpu_count)
        if fleet_price is not None:
            fleet_price = values.fit_money(fleet_price, "catalog price x replicas")
            with localcontext(prec=60):
                cost = values.fit_money(fleet_price * Decimal(repr(seconds)) / SECONDS_PER_HOUR,
                                        "catalog price x replicas x hours")
    energy = _number(record, "energy_kwh")

    return {
        "window_key": "|".join((service, version, host or "", start.isoformat())),
        "window_start": start,
        "window_end": end,
        "window_s": seconds,
        "service": service,
        "model_version": version,
        "requests_total": total,
        "requests_success": success,
        "requests_error": error,
        **{name: _number(record, name) for name in MEASURES},
        "prompt_tokens": _count(record, "prompt_tokens", values.BIGINT_MAX),
        "output_tokens": _count(record, "output_tokens", values.BIGINT_MAX),
        "avg_gpu_util_pct": _percent(record, "avg_gpu_util_pct"),
        "avg_cpu_util_pct": _percent(record, "avg_cpu_util_pct"),
        "cost_usd": cost,
        "cost_source": None if cost is None else "derived" if fleet_price is not None else "given",
        "price_per_hour_usd": fleet_price,
        "energy_kwh": energy,
        "energy_source": None if energy is None else "given",
        "instance_type": instance_type,
        "gpu_type": gpu_type,
        "gpu_count": gpu_count,
        "replicas": replicas,
        "host": host,
        "gpu_uuids": uuids,
        "source_kind": KIND,
        "source_line": line,
    }


def _records(lines: Lines, parsed: Parsed):
    """(line, record, raw text) for JSONL or CSV; unreadable lines go straight to parsed.rejects.

    The first non-blank line decides: text with a comma that is not a JSON object is a CSV
    header; anything else means JSON lines (so a JSONL file with a broken first line loses
    that line, not the file).
    """
    header: list[str] | None = None
    first = True
    for line, text in lines:
        if not text.strip():
            continue
        opening, first = first, False
        if opening and is_csv_header(text):
            header = csv_header(text)
            reason = header_problem(header)
            if reason:
                parsed.rejects.append(Reject(line, reason, text))
                return
            continue
        if header is not None:
            record = _csv_record(line, text, header, parsed)
            if record is not None:
                yield line, record, text
            continue
        record = _json_record(line, text, parsed)
        if record is not None:
            yield line, record, text


def is_csv_header(text: str) -> bool:
    """Whether a file's first non-blank line is a CSV header (a comma, and not a JSON object)."""
    return "," in text and not text.lstrip("\ufeff").lstrip().startswith("{")


def csv_header(text: str) -> list[str]:
    """The header line's column names, stripped."""
    return [c.strip() for c in next(csv.reader([text.lstrip("\ufeff")]))]


def header_problem(header: list[str]) -> str | None:
    """Why a CSV header cannot be a serving file's, or None when it can."""
    missing = [n for n in ("requests_total", "requests_success", "service", "model_version") if n not in header]
    if not any(n in header for n in NAMES["window_start"]):
        missing.insert(0, "window_start")
    return f"not a serving-window header: missing {', '.join(missing)}" if missing else None


def _csv_record(line: int, text: str, header: list[str], parsed: Parsed) -> dict | None:
    """One CSV line's fields by header name; None (and a reject) when it cannot be split to the header."""
    try:
        fields = next(csv.reader([text]))
    except csv.Error as error:
        parsed.rejects.append(Reject(line, f"unreadable CSV: {error}", text[:500]))
        return None
    if len(fields) != len(header):
        parsed.rejects.append(Reject(line, f"has {len(fields)} fields, the header has {len(header)}", text))
        return None
    return dict(zip(header, fields))


def parse_csv_lines(header: list[str], lines: Lines, ctx: ParseContext, prices: config.Prices) -> Parsed:
    """Windows from CSV data lines under `header`: what serving_columnar leaves to Python."""
    return _windows_of(lines, lambda line, text, parsed: _csv_record(line, text, header, parsed), ctx, prices)


def _json_record(line: int, text: str, parsed: Parsed) -> object | None:
    """One JSON line's value; None (and a reject) when it is not JSON."""
    try:
        return json.loads(text, parse_float=Decimal)
    except json.JSONDecodeError as error:
        parsed.rejects.append(Reject(line, f"not valid JSON: {error.msg} at column {error.colno}", text))
    except RecursionError:
        parsed.rejects.append(Reject(line, "JSON nested too deeply to read", text[:500]))
        return None


def parse_json_lines(lines: Lines, ctx: ParseContext, prices: config.Prices) -> Parsed:
    """Windows from JSON lines only (no CSV header): what serving_columnar leaves to Python."""
    return _windows_of(lines, _json_record, ctx, prices)


def _windows_of(lines: Lines, read, ctx: ParseContext, prices: config.Prices) -> Parsed:
    """Windows from the lines `read(line, text, parsed)` makes records of (None: it rejected the line)."""
    parsed = Parsed()
    for line, text in lines:
        if not text.strip():
            continue
        record = read(line, text, parsed)
        if record is None:
            continue
        try:
            parsed.rows("serving_windows").append(build_window(record, line, ctx, prices))
            parsed.accepted += 1
        except BadValue as error:
            parsed.rejects.append(Reject(line, str(error), text))
    return parsed


def _span(record: dict, ctx: ParseContext) -> tuple[datetime, datetime, float]:
    """Start and end (UTC) and length in seconds, from start + end or start + window_seconds."""
    start = values.timestamp(_get(record, "window_start"), _name(record, "window_start"), ctx.tz)
    end = values.timestamp(_get(record, "window_end"), _name(record, "window_end"), ctx.tz)
    length = values.number(_get(record, "window_s"), _name(record, "window_s"))
    if start is None:
        raise BadValue("no window_start")
    if length is not None and length <= 0:
        raise BadValue(f"{_name(record, 'window_s')} must be more than 0, got {length:g}")
    if end is not None:
        if end < start:
            raise BadValue(f"window_end {end.isoformat()} is before window_start {start.isoformat()}")
        if end == start:
            raise BadValue(f"window_end equals window_start ({start.isoformat()}): the window has no length")
        span = (end - start).total_seconds()
        if length is not None and abs(length - span) > LENGTH_TOLERANCE_S:
            raise BadValue(f"{_name(record, 'window_s')} {length:g} disagrees with "
                           f"window_end - window_start ({span:g} s)")
        return start, end, span
    if length is None:
        raise BadValue("no window_end or window_seconds")
    try:
        return start, start + timedelta(seconds=length), length
    except OverflowError:
        raise BadValue(f"{_name(record, 'window_s')} {length:g} is too long") from None


def _fleet_price(prices: config.Prices, instance_type: str | None, replicas: int | None,
                 gpu_type: str | None, gpu_count: int | None) -> Decimal | None:
    """USD per hour of the whole window's deployment from the catalog, if it can be known."""
    per_instance = prices.instance(instance_type)
    if per_instance is not None and replicas is not None:
        return per_instance * replicas
    per_gpu = prices.gpu(gpu_type)
    if per_gpu is not None and gpu_count is not None:
        return per_gpu * gpu_count
    return None


def _get(record: dict, column: str) -> object:
    """The first present spelling of a field (see NAMES)."""
    for name in NAMES.get(column, (column,)):
        if not values.is_absent(record.get(name)):
            return record[name]
    return None


def _name(record: dict, column: str) -> str:
    """The spelling the record used, for reasons a user recognises."""
    return next((n for n in NAMES.get(column, (column,)) if not values.is_absent(record.get(n))), column)


def _count(record: dict, name: str, largest: int) -> int | None:
    value = values.integer(record.get(name), name, largest)
    if value is not None and value < 0:
        raise BadValue(f"{name} is negative ({value})")
    return value


def _number(record: dict, column: str) -> float | None:
    name = _name(record, column)
    value = values.number(_get(record, column), name)
    if value is not None and value < 0:
        raise BadValue(f"{name} is negative ({value:g})")
    return value


def _percent(record: dict, column: str) -> float | None:
    name = _name(record, column)
    value = values.number(_get(record, column), name)
    if value is not None and not 0 <= value <= 100:
        raise BadValue(f"{name} {value:g} is not a percentage from 0 to 100")
    return value


def _text_list(value: object, name: str) -> list[str] | None:
    """A list, or text separated by commas or semicolons (CSV)."""
    if values.is_absent(value):
        return None
    items = value.replace(";", ",").split(",") if isinstance(value, str) else value
    if not isinstance(items, list):
        raise BadValue(f"{name} must be a list")
    return [values.text(item, name) for item in items if not values.is_absent(item)] or None
