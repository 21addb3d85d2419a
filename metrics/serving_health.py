"""Two serving figures over the last hours of data, the alerts' and any page's (issue 22; seed 000):

- **cost per 1,000 requests, last 24 h against the 24 h before** (`cost_per_1k_24h`): per service,
  cost per 1k requests (USD; the cost of its windows that have one x 1000 / their requests, as
  everywhere: metrics/queries/serving.py SERVING_FIGURES) over the as-of day (UTC, the last day
  with data: metrics/budgets.as_of_day) against the day before, their ratio, and the model
  versions whose first window lies inside the last 24 hours;
- **idle services** (`idle_services`): services whose every window of the last `hours` hours
  (ending with the as-of day) served fewer than `max_qps` requests per second, reported through
  the whole span, and cost money meanwhile.
Windows belong to a span by their start.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone

import pandas as pd

from metrics import queries

DAY = timedelta(hours=24)
COVERAGE = 0.9  # an idle span must have windows for at least this share of its seconds


@dataclass(frozen=True)
class Span:
    """[start, end) in UTC, `hours` long."""

    start: datetime
    end: datetime

    @property
    def hours(self) -> float:
        return (self.end - self.start) / timedelta(hours=1)

    def text(self) -> str:
        """'2026-11-21 00:00 to 2026-11-22 00:00 UTC'."""
        return f"{self.start:%Y-%m-%d %H:%M} to {self.end:%Y-%m-%d %H:%M} UTC"


def ending_with(last_day: date, hours: float) -> Span:
    """The `hours` hours that end with the UTC day `last_day` (at the next midnight)."""
    end = datetime.combine(last_day + timedelta(days=1), time(), tzinfo=timezone.utc)
    return Span(end - timedelta(hours=hours), end)


def cost_per_1k_24h(last_day: date) -> tuple[Span, Span, pd.DataFrame]:
    """(the last 24 h, the 24 h before, per service: requests_before/_after, cost_before_usd/_after_usd
    and cost_per_1k_before_usd/_after_usd (USD, Decimal), ratio (after / before, NaN when the day
    before has no cost per 1k), new_versions and new_versions_started_at (versions whose first
    window starts in the last 24 h, UTC))."""
    last = ending_with(last_day, 24)
    before = Span(last.start - DAY, last.start)
    return last, before, queries.serving_span_change(before.start, last.start, last.end)


def cost_per_1k_jumps(last_day: date, min_ratio: float, min_requests: int) -> tuple[Span, Span, pd.DataFrame]:
    """cost_per_1k_24h's services whose ratio is at least `min_ratio` with at least `min_requests`
    requests in each of the two 24 hours (a quiet day's fixed cost on few requests is no jump),
    steepest first; no rows when `min_ratio` is 0 (the rule is off)."""
    last, before, found = cost_per_1k_24h(last_day)
    if min_ratio <= 0 or found.empty:
        return last, before, found.iloc[0:0]
    ratio = pd.to_numeric(found["ratio"], errors="coerce")
    enough = (pd.to_numeric(found["requests_before"], errors="coerce").fillna(0) >= min_requests) & (
        pd.to_numeric(found["requests_after"], errors="coerce").fillna(0) >= min_requests)
    jumped = found[enough & (ratio >= min_ratio)]
    return last, before, jumped.assign(ratio=ratio[jumped.index]).sort_values(["ratio", "service"],
                                                                              ascending=[False, True])


def idle_services(last_day: date, hours: float, max_qps: float) -> tuple[Span, pd.DataFrame]:
    """(the `hours` hours ending with `last_day`, per idle service: versions, requests_total,
    throughput_rps (mean requests per second of window time), max_window_rps (the busiest window's),
    cost_usd (USD, Decimal), first_window, last_window). Idle: every window of the span served
    fewer than `max_qps` requests per second, the windows cover at least 90 % of the span, the
    first starts within its first hour and the last ends within its last, and they cost more than
    0. No rows when `hours` is 0 (the rule is off)."""
    span = ending_with(last_day, hours)
    found = queries.serving_quiet_services(span.start, span.end, max_qps) if hours > 0 else pd.DataFrame()
    if found.empty:
        return span, found
    hour = timedelta(hours=1)
    first = pd.to_datetime(found["first_window"], utc=True)
    last = pd.to_datetime(found["last_window"], utc=True)
    covered = pd.to_numeric(found["window_s"]) >= COVERAGE * hours * 3600
    costs = found["cost_usd"].map(lambda cost: cost is not None and not pd.isna(cost) and cost > 0)
    keep = covered & (first < pd.Timestamp(span.start + hour)) & (last > pd.Timestamp(span.end - hour)) & costs
    return span, found[keep].sort_values("service")
