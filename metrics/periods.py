"""The comparison window of a month against the month before, defined once.

A whole month is compared with the whole previous month. A partial month (data through some day
of it) is compared with the same days of the previous month: 1 to that day, or the whole previous
month when it is shorter. Every month-over-month figure (the retrospective, its recommendations,
the report, the budget outcomes) takes its two ranges from comparison_days().
"""
from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import date, timedelta


def month_last_day(month: date) -> date:
    """The last day of the month of `month`."""
    return month.replace(day=calendar.monthrange(month.year, month.month)[1])


def previous_month(month: date) -> date:
    """The first day of the month before `month`."""
    return (month.replace(day=1) - timedelta(days=1)).replace(day=1)


@dataclass(frozen=True)
class Comparison:
    """Two ranges of days, first and last day included (UTC): `current` of the month, `previous` of
    the month before, the same days of the month when the month is partial."""

    month: date
    previous_month: date
    current_first: date
    current_last: date
    previous_first: date
    previous_last: date
    partial: bool  # the month's data ends before its last day

    @property
    def days(self) -> tuple[int, int]:
        """The number of days each range covers (current, previous)."""
        return ((self.current_last - self.current_first).days + 1, (self.previous_last - self.previous_first).days + 1)

    def label(self, which: str) -> str:
        """A column header: '2026-11', or for a partial month '2026-11 (1-21)'."""
        first, last = ((self.current_first, self.current_last) if which == "current"
                       else (self.previous_first, self.previous_last))
        return f"{first:%Y-%m}" if not self.partial else f"{first:%Y-%m} ({first.day}-{last.day})"

    @property
    def text(self) -> str:
        """How the two ranges compare, in one sentence."""
        if not self.partial:
            return f"Whole months: {self.month:%B %Y} against {self.previous_month:%B %Y}."
        return (f"{self.month:%B %Y} is partial (data through {self.current_last:%b %d}): every figure is compared "
                f"with the same days of {self.previous_month:%B %Y} ({self.previous_first:%b %d} to "
                f"{self.previous_last:%b %d}): {self.days[0]} days against {self.days[1]}.")


def comparison_days(month: date, through: date | None = None) -> Comparison:
    """The comparison window of `month` (any day of it) with data through `through`: the month is
    partial when `through` falls inside it before its last day; else whole months."""
    first, last = month.replace(day=1), month_last_day(month)
    before = previous_month(first)
    if through is None or not first <= through < last:
        return Comparison(first, before, first, last, before, month_last_day(before), False)
    return Comparison(first, before, first, through, before,
                      min(month_last_day(before), before + timedelta(days=through.day - 1)), True)
