"""CodeCarbon emissions.csv, every schema generation, as runs with measured energy and emissions.

CodeCarbon writes one row per tracked run when it stops: `timestamp` is the stop time
(local time without offset: read in --tz), `duration` is seconds, `energy_consumed` kWh
and `emissions` kg CO2e. The oldest schema has no run_id; rows without one get a stable
id derived from project, timestamp and duration, so re-loading never duplicates them.
"""
from __future__ import annotations

import csv
import hashlib

from ingest import config, values
from ingest.contract import BadValue, Lines, ParseContext, Parsed, Reject
from ingest.run_record import build_run, collect, run_totals, to_parsed

KIND = "codecarbon"
LOCAL_TIME = True  # writes local times without a zone: loader warns when no --tz was given
TABLES = ("runs", "run_evals")
REQUIRED = ("timestamp", "project_name", "duration", "emissions", "energy_consumed")
TAG_COLUMNS = ("experiment_id", "country_iso_code", "country_name", "cpu_model", "os",
               "tracking_mode", "codecarbon_version", "pue", "on_cloud", "cloud_provider")


def sniff(name: str, head: str) -> bool:
    """A CSV whose header carries CodeCarbon's own column names."""
    header = head.lstrip("\ufeff").split("\n", 1)[0]
    return all(column in header for column in ("timestamp", "project_name", "energy_consumed"))


def parse(lines: Lines, ctx: ParseContext) -> Parsed:
    parsed, latest = Parsed(), {}
    prices = config.load().prices  # runs without a price are priced from the catalog
    rows = iter(lines)
    header_line, header_text = next(rows, (0, ""))
    header = next(csv.reader([header_text.lstrip("\ufeff")]), [])
    missing = [column for column in REQUIRED if column not in header]
    if missing:
        parsed.rejects.append(Reject(header_line, f"not a CodeCarbon header: missing {', '.join(missing)}", header_text))
        return parsed
    for line, text in rows:
        if not text.strip():
            continue
        try:
            fields = next(csv.reader([text]))
        except csv.Error as error:
            parsed.rejects.append(Reject(line, f"unreadable CSV: {error}", text[:500]))
            continue
        try:
            if len(fields) != len(header):
                raise BadValue(f"has {len(fields)} fields, the header has {len(header)}")
            collect(latest, *build_run(_as_run_record(dict(zip(header, fields)), ctx), line, ctx, KIND, prices))
            parsed.accepted += 1
        except BadValue as error:
            parsed.rejects.append(Reject(line, str(error), text))
    return to_parsed(latest, parsed)


totals = run_totals


def _as_run_record(row: dict[str, str], ctx: ParseContext) -> dict:
    """The CodeCarbon row in the run-summary vocabulary."""
    for column in ("timestamp", "energy_consumed", "emissions", "duration"):
        if values.is_absent(row.get(column)):
            raise BadValue(f"{column} is empty: CodeCarbon wrote an incomplete row")
    duration_s = values.number(row["duration"], "duration")
    ended = values.timestamp(row["timestamp"], "timestamp", ctx.tz)
    on_cloud = (row.get("on_cloud") or "").strip().upper() == "Y"
    run_id = row.get("run_id") or _derived_id(row)
    return {
        "run_id": run_id,
        "project": row["project_name"],
        "end_time": ended.isoformat(),
        "duration_hours": duration_s / 3600,
        "energy_kwh": values.number(row["energy_consumed"], "energy_consumed"),
        "emissions_kg": values.number(row["emissions"], "emissions"),
        "region": (row.get("cloud_region") if on_cloud else None) or row.get("region") or row.get("country_name"),
        "gpu_type": row.get("gpu_model"),
        "gpu_count": row.get("gpu_count"),
        "tags": {column: row[column] for column in TAG_COLUMNS if not values.is_absent(row.get(column))},
    }


def _derived_id(row: dict[str, str]) -> str:
    identity = "|".join(row.get(column, "") for column in ("project_name", "timestamp", "duration"))
    return "codecarbon-" + hashlib.sha256(identity.encode()).hexdigest()[:12]
