"""The monthly efficiency retrospective: a month against the one before, and rule-based
recommendations, each quoting the number behind it. No Streamlit here: the Retrospective page
and `mlcost report` both build on `build()`, and outputs/report.py renders what it returns.

Every figure comes from the query functions the other pages call (metrics/queries/), with the
month as the date range, so a figure here is the figure that page shows for that month.
The report is an ordered tuple of sections (SECTIONS, metrics/retro_sections.py); each builder
takes the month's Context (metrics/retro_report.py: what a report is made of) and returns a
Section (figures, a table, a chart, notes) or None when there is nothing to say; then the rules
(RULES, metrics/retro_advice.py) make the recommendations.
"""
from __future__ import annotations

from datetime import date

from metrics import queries
from metrics.filters import Filters  # noqa: F401 (callers read retrospective.Filters)
from metrics.periods import previous_month  # noqa: F401 (callers read retrospective.previous_month)
from ingest.settings import config
from metrics.retro_advice import RULES
from metrics.retro_report import (Context, Figure, Recommendation, Retrospective, Section, as_day, is_missing,  # noqa: F401
                                  month_filters, months_with_data, parse_month)  # (what callers import from here)
from metrics.retro_sections import SECTIONS, run_points  # noqa: F401


def latest_month() -> date | None:
    """The latest month with any data (runs, serving windows, GPU minutes, bills), or None."""
    months = months_with_data(queries.filter_choices())
    return months[0] if months else None


def build(month: date, settings: config.Config | None = None) -> Retrospective:
    """The retrospective of `month` (any day of it) against the month before."""
    last_day = queries.filter_choices()["last_day"]
    ctx = Context(month, settings or config.load(), None if last_day is None else as_day(last_day))
    for builder in SECTIONS:
        section = builder(ctx)
        if section is not None:
            ctx.sections[section.key] = section
    recommendations = [r for rule in RULES for r in rule(ctx)]
    return Retrospective(ctx.month, ctx.previous, ctx.data_through, ctx.comparison, list(ctx.sections.values()),
                         recommendations, queries.decisions(ctx.month), ctx.window)

