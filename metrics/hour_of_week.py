"""The hour-of-day x weekday view (metrics/queries/hours.py computes its cells in SQL): the zones
one may pick, and the hours when GPU utilization is low while capacity is high (seed 000: "times
of day when utilization is low but capacity is high"). No Streamlit here."""
from __future__ import annotations

from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

import pandas as pd

WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")  # ISO 1-7


@lru_cache(maxsize=1)
def zones() -> tuple[str, ...]:
    """Every IANA zone name this machine knows (zoneinfo), UTC first, then sorted; not 'localtime'
    (the machine's own zone file, which DuckDB does not know by that name)."""
    return ("UTC", *sorted(available_timezones() - {"UTC", "localtime"}))


def check_zone(name: object) -> str:
    """`name` when it is an IANA zone name (e.g. 'Europe/Berlin'), else ValueError in one sentence."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError("a time zone is an IANA name such as 'UTC' or 'America/New_York'")
    try:
        if name.strip() == "localtime":
            raise ValueError
        ZoneInfo(name.strip())
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"{name!r} is not an IANA time zone name (e.g. 'UTC', 'America/New_York')") from None
    return name.strip()


def low_use_high_capacity(cells: pd.DataFrame, low_util_pct: float) -> pd.DataFrame:
    """The cells of queries.gpu_hour_of_week whose mean utilization is under `low_util_pct` (%)
    while capacity (gpus_present, mean GPUs traced) is at or above its mean over every cell with
    GPUs: the hours where GPUs stand by in numbers. Sorted by weekday and hour."""
    present = cells[cells["gpus_present"] > 0]
    if present.empty:
        return present
    usual = float(present["observed_gpu_h"].sum() / present["span_h"].sum())  # mean GPUs over the whole span
    low = present[(present["util_pct"] < low_util_pct) & (present["gpus_present"] >= usual - 1e-9)]
    return low.sort_values(["weekday", "hour"])


def hour_ranges(cells: pd.DataFrame) -> list[tuple[int, int, int]]:
    """(ISO weekday, first hour, last hour) runs of consecutive hours of `cells` (weekday, hour)."""
    runs: list[tuple[int, int, int]] = []
    for weekday, hour in zip(cells["weekday"].astype(int), cells["hour"].astype(int)):
        if runs and runs[-1][0] == weekday and runs[-1][2] == hour - 1:
            runs[-1] = (weekday, runs[-1][1], hour)
        else:
            runs.append((weekday, hour, hour))
    return runs


def low_use_sentence(cells: pd.DataFrame, low_util_pct: float, zone: str) -> str:
    """One sentence naming the hours (in `zone`) when utilization is under `low_util_pct` while
    capacity is at or above its mean (low_use_high_capacity), or saying there are none."""
    present = cells[cells["gpus_present"] > 0]
    if present.empty:
        return "No GPU was traced in this date range."
    low = low_use_high_capacity(cells, low_util_pct)
    usual = float(present["observed_gpu_h"].sum() / present["span_h"].sum())
    if low.empty:
        return (f"No hour of the week has mean utilization under {low_util_pct:g} % while {usual:,.1f} GPUs or "
                f"more (the mean) are present ({zone}).")
    by_day: dict[int, list[str]] = {}
    for weekday, first, last in hour_ranges(low):
        by_day.setdefault(weekday, []).append(f"{first:02d}:00–{last + 1:02d}:00")
    named = "; ".join(f"{WEEKDAYS[day - 1]} {', '.join(spans)}" for day, spans in by_day.items())
    idle_h = float(low["idle_gpu_h"].sum())
    return (f"Utilization is under {low_util_pct:g} % while at least the mean {usual:,.1f} GPUs are present "
            f"({zone}): {named}. Those {len(low)} hours of the week held {idle_h:,.0f} idle GPU-hours in this "
            "date range: a time to scale nodes down or to schedule batch jobs.")
