"""What the monthly retrospective (metrics/retrospective.py) is made of: the months it compares,
its Figures, Sections and Recommendations, the month's Context every section reads, and the small
readers of a query's frame (money, sums, the first value) the sections and rules share."""
from __future__ import annotations

import calendar
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, timedelta
from decimal import Decimal

import pandas as pd

from metrics import allocation, idle, periods, queries
from metrics.filters import Filters
from ingest.settings import config


BILL_CHANGE_LABEL = "Charges for the month"  # the figure whose change is the bill's change
MONTH_PATTERN = re.compile(r"^(\d{4})-(\d{2})$")
Number = Decimal | float | int | None


# --- months ------------------------------------------------------------------------------

def parse_month(text: str) -> date:
    """The first day of the month `YYYY-MM`; ValueError with one sentence otherwise."""
    found = MONTH_PATTERN.match(text.strip())
    if not found or not 1 <= int(found.group(2)) <= 12:
        raise ValueError(f"{text!r} is not a month: write it as YYYY-MM, e.g. 2026-10")
    return date(int(found.group(1)), int(found.group(2)), 1)


def month_filters(month: date) -> Filters:
    """The date range of the whole UTC month of `month` (every project and team)."""
    first = month.replace(day=1)
    return Filters(start=first, end=first.replace(day=calendar.monthrange(first.year, first.month)[1]))


previous_month = periods.previous_month


def months_with_data(choices: dict) -> list[date]:
    """First days of the months between the first and last day of data (queries.filter_choices), newest first."""
    if choices["first_day"] is None:
        return []
    month, last = as_day(choices["first_day"]).replace(day=1), as_day(choices["last_day"]).replace(day=1)
    months = []
    while month <= last:
        months.append(month)
        month = (month + timedelta(days=32)).replace(day=1)
    return months[::-1]


def as_day(value: object) -> date:
    """A date from a query's date value (a pandas Timestamp or a date)."""
    return pd.Timestamp(value).date()


# --- what a report is made of ---------------------------------------------------------------

@dataclass(frozen=True)
class Figure:
    """One figure of the month next to the previous month's, in `unit` (a currency code, kWh, ...);
    `page` names the dashboard page showing the same figure."""

    label: str
    unit: str
    current: Number
    previous: Number
    page: str

    @property
    def change_pct(self) -> float | None:
        """(current / previous - 1) x 100; None without both or when previous is 0."""
        if is_missing(self.current) or is_missing(self.previous) or float(self.previous) == 0:
            return None
        return (float(self.current) / float(self.previous) - 1) * 100

    @property
    def tiny_base(self) -> bool:
        """The previous figure is too small for a percentage to mean much (0, negative, or under
        TINY_BASE_SHARE of the current one): the change is shown as an absolute difference."""
        if is_missing(self.current) or is_missing(self.previous):
            return False
        now, before = abs(float(self.current)), float(self.previous)
        return before <= 0 and now > 0 or before * (1 / TINY_BASE_SHARE) < now

    @property
    def change(self) -> Number:
        """current - previous, in the figure's unit."""
        if is_missing(self.current) or is_missing(self.previous):
            return None
        if isinstance(self.current, Decimal) or isinstance(self.previous, Decimal):
            return Decimal(str(self.current)) - Decimal(str(self.previous))
        return float(self.current) - float(self.previous)


TINY_BASE_SHARE = 0.1  # a previous figure under 10 % of the current one (a change over +900 %) is a tiny base


@dataclass
class Section:
    """A part of the report: figures (this month and the previous), a table whose columns'
    units are in `units`, a chart (plotly figure), and notes (sentences)."""

    key: str
    title: str
    figures: list[Figure] = field(default_factory=list)
    table: pd.DataFrame | None = None
    units: dict[str, str] = field(default_factory=dict)
    chart: object | None = None
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Recommendation:
    """One rule's finding: `text` quotes `evidence`, the number that justifies it."""

    rule: str
    text: str
    evidence: str
    value: float


@dataclass
class Retrospective:
    month: date
    previous: date
    data_through: date | None  # the last day with data when the month is partial, else None
    comparison: str  # how the month is compared with the previous one, in words
    sections: list[Section]
    recommendations: list[Recommendation]
    decisions: pd.DataFrame
    window: periods.Comparison | None = None  # the days compared (metrics/periods.py)

    def section(self, key: str) -> Section | None:
        return next((s for s in self.sections if s.key == key), None)

    def figure(self, label: str) -> Figure:
        return next(f for s in self.sections for f in s.figures if f.label == label)


class Context:
    """The month, the month before, the settings; each query result fetched once."""

    def __init__(self, month: date, settings: config.Config, through: date | None = None) -> None:
        # the comparison window (metrics/periods.py): whole months, or the same days of the month before
        self.window = periods.comparison_days(month, through)
        self.month, self.previous = self.window.month, self.window.previous_month
        self.current_range = Filters(start=self.month, end=month_filters(self.month).end)
        self.previous_range = Filters(start=self.window.previous_first, end=self.window.previous_last)
        self.settings = settings
        # the last day with data, when the month is partial
        self.data_through: date | None = self.window.current_last if self.window.partial else None
        self.sections: dict[str, Section] = {}  # the sections built so far, by key
        self._results: dict[tuple, object] = {}

    @property
    def comparison(self) -> str:
        """How the month is compared, in words (said once, at the top of every surface)."""
        return self.window.text

    def fetch(self, query: Callable, *args: object) -> object:
        key = (query.__name__, *args)
        if key not in self._results:
            self._results[key] = query(*args)
        return self._results[key]

    def remember(self, key: tuple, build: Callable[[], object]) -> object:
        """build() once per `key` (for what depends on more than a query's arguments)."""
        if key not in self._results:
            self._results[key] = build()
        return self._results[key]

    def both(self, query: Callable, *args: object) -> tuple:
        """query(current month, *args), query(previous month, *args)."""
        return self.fetch(query, self.current_range, *args), self.fetch(query, self.previous_range, *args)

    # the arguments the pages pass, from the settings

    def gpu_prices(self) -> tuple[tuple[str, str], ...]:
        models = self.fetch(queries.gpu_models)
        return tuple((name, str(self.settings.prices.gpu(name))) for name in models["gpu_name"]
                     if self.settings.prices.gpu(name) is not None)

    def energy_factors(self) -> tuple:
        """The [energy] factors; every overview_totals fetch passes them (counts and costs do not
        depend on them), so one query serves the energy, spend, projects and coverage sections."""
        return self.settings.energy.query_factors()

    def reconciliation_args(self) -> tuple[str, float]:
        rule = self.settings.reconciliation
        return rule.run_id_tag, rule.match_slack_minutes * 60

    def idle(self, filters: Filters) -> idle.Idle:
        """metrics/idle.py's idle GPUs of the days of `filters` (first and last day included)."""
        return self.remember(("idle", filters), lambda: idle.idle_cost(
            filters.start, filters.end + timedelta(days=1), allocation.Rules.of(self.settings),
            tuple(self.settings.prices.gpu_usd_per_hour.items())))


# --- helpers ----------------------------------------------------------------------------

def is_missing(value: object) -> bool:
    return value is None or (not isinstance(value, Decimal) and pd.isna(value))


def money(value: object) -> Decimal | None:
    """An amount from a query result as an exact Decimal (None when unknown)."""
    return None if is_missing(value) else Decimal(str(value))


def sum_money(values: pd.Series) -> Decimal | None:
    known = [money(v) for v in values if not is_missing(v)]
    return sum(known, Decimal(0)) if known else None


def sum_of(values: pd.Series) -> float | None:
    known = values.dropna()
    return float(known.sum()) if len(known) else None


def first_value(frame: pd.DataFrame, column: str) -> object:
    return None if frame.empty else frame[column].iloc[0]

