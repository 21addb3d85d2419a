"""What a reader picked (date range, projects, teams) and the default date range; no Streamlit."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone


@dataclass(frozen=True)
class Filters:
    """What the user picked; empty project/team tuples mean all of them."""

    start: date | None = None
    end: date | None = None
    projects: tuple[str, ...] = ()
    teams: tuple[str, ...] = ()

    def params(self) -> dict:
        """Bound parameters for queries.FILTERED_RUNS: UTC instants, end exclusive."""
        return {
            "start": _utc(self.start) if self.start else datetime(1970, 1, 1, tzinfo=timezone.utc),
            "end": _utc(self.end + timedelta(days=1)) if self.end else datetime(9999, 1, 1, tzinfo=timezone.utc),
            "projects": list(self.projects),
            "teams": list(self.teams),
        }


STRAY_GAP_DAYS = 30     # data this far from the rest ...
STRAY_SHARE = 0.10      # ... and on fewer than this share of the days with data is left out of the default range


def bulk_span(days: list[date]) -> tuple[date, date] | None:
    """The default date range: the days with data, without stray ones at either end (data separated
    from the rest by more than STRAY_GAP_DAYS days without data, on under STRAY_SHARE of the days
    with data, such as one old file); None without data."""
    days = sorted(set(days))
    if not days:
        return None
    first, last = 0, len(days) - 1
    limit = STRAY_SHARE * len(days)
    for i in range(1, len(days)):  # the last big gap with few days before it
        if (days[i] - days[i - 1]).days > STRAY_GAP_DAYS and i < limit:
            first = i
    for i in range(len(days) - 1, 0, -1):  # the first big gap with few days after it
        if (days[i] - days[i - 1]).days > STRAY_GAP_DAYS and len(days) - i < limit and i > first:
            last = i - 1
    return days[first], days[last]


def _utc(day: date) -> datetime:
    return datetime.combine(day, time(), tzinfo=timezone.utc)
