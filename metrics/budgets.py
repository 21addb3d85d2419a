"""Budget burn: what a budget's scope spent in its period, how fast, and where that leads.

Days are UTC days. Spend is counted up to `through` (the last day with data, at most the
day before `as_of`): a bill that lags a day or two does not read as a day of zero spend.
- burn rate: the mean daily spend of the 7 days ending at `through`;
- forecast to period end: spent + burn rate x the days left after `through`; its band uses
  the 10th and 90th percentile daily spend of the 28 days ending at `through` instead;
- days to breach: whole days at the burn rate until the spend reaches the amount, counted
  from the day after `through` (0 when already reached, None when the rate is 0).
Money stays Decimal; a budget only counts spend in its own currency. A budget on a bucket or
key of the allocation (bucket:, model:, service:) counts the allocation's effective cost
(metrics/budget_drivers.py); the others count the bill's billed cost.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal

import pandas as pd

from metrics import allocation, budget_drivers, queries
from ingest.config import Budget, Config

RATE_DAYS = 7
BAND_DAYS = 28
BAND_PERCENTILES = (10, 90)
CENT = Decimal("0.01")


@dataclass(frozen=True)
class Burn:
    """One budget's period as of a day; every amount is in budget.currency."""

    budget: Budget
    period_start: date
    period_end: date          # exclusive
    through: date | None      # the last day counted; None when there is no data at all
    source: str               # "billed" or "estimated"
    source_note: str
    daily: pd.DataFrame       # day, spend (Decimal), cumulative (Decimal): period start .. through
    recent: pd.DataFrame      # day, spend: every day read up to through (zeros filled), for rates and spikes
    spent: Decimal
    rate_per_day: Decimal
    allowed_per_day: Decimal
    forecast: Decimal
    forecast_low: Decimal
    forecast_high: Decimal
    days_left: int
    days_to_breach: int | None
    breach_day: date | None   # the day the spend reached (or is forecast to reach) the amount
    other_currency_lines: int  # bill lines of the scope and counted days in other currencies

    @property
    def used_pct(self) -> float:
        return float(self.spent * 100 / self.budget.amount)

    @property
    def forecast_pct(self) -> float:
        return float(self.forecast * 100 / self.budget.amount)

    @property
    def breach_in_period(self) -> bool:
        return self.breach_day is not None and self.breach_day < self.period_end


def period_bounds(day: date, period: str) -> tuple[date, date]:
    """The [start, end) of the month or quarter that holds `day`."""
    first_month = day.month if period == "month" else 3 * ((day.month - 1) // 3) + 1
    start = date(day.year, first_month, 1)
    months = 1 if period == "month" else 3
    end_month = first_month + months
    end = date(day.year + (end_month - 1) // 12, (end_month - 1) % 12 + 1, 1)
    return start, end


def default_as_of(today: date) -> date:
    """Today, unless every source's data ends before today's month: then the day after it ends
    (a demo or an archive still shows its last period)."""
    last = [frame["last_day"].iloc[0] for frame in (queries.bill_days(), queries.estimate_days())]
    last = [day for day in last if day is not None and not pd.isna(day)]
    if not last:
        return today
    newest = max(last)
    return newest + timedelta(days=1) if newest < date(today.year, today.month, 1) else today


def burn(budget: Budget, settings: Config, as_of: date) -> Burn:
    """The budget's period holding the day before `as_of`, counted through that day at most."""
    return burns([budget], settings, as_of)[0]


@dataclass(frozen=True)
class _Plan:
    """What one budget's burn reads: its period, the days it reads and from which source."""

    budget: Budget
    period_start: date
    period_end: date
    window_start: date
    source: str  # "allocation", "billed", "none" (on the allocation, no bill) or "estimated"


def burns(budgets: list[Budget], settings: Config, as_of: date) -> list[Burn]:
    """burn() of each budget, in order; the bill (or the estimates) is read once for all of
    them, not once per budget."""
    billed_days = queries.bill_days().iloc[0]
    tags = (settings.reconciliation.project_tag, settings.reconciliation.team_tag)
    plans = []
    for budget in budgets:
        period_start, period_end = period_bounds(as_of - timedelta(days=1), budget.period)
        billed = (billed_days["first_day"] is not None and billed_days["first_day"] < period_end
                  and billed_days["last_day"] >= period_start)
        source = ("allocation" if budget.on_allocation else "billed") if billed else (
            "none" if budget.on_allocation else "estimated")
        window_start = min(period_start, as_of - timedelta(days=BAND_DAYS + settings.alerts.burn_spike_baseline_days))
        plans.append(_Plan(budget, period_start, period_end, window_start, source))
    billed_plans = [p for p in plans if p.source == "billed"]
    estimated_plans = [p for p in plans if p.source == "estimated" and p.budget.currency == "USD"]
    billed_frames = _split(queries.budget_daily_billed(
        [(p.budget, p.window_start, as_of) for p in billed_plans], tags), billed_plans)
    estimated_frames = _split(queries.budget_daily_estimated(
        [(p.budget, p.window_start, as_of) for p in estimated_plans]), estimated_plans)
    estimate_last = (queries.estimate_days()["last_day"].iloc[0]
                     if any(p.source == "estimated" for p in plans) else None)
    found = []
    for plan in plans:
        budget = plan.budget
        if plan.source == "allocation":
            last_day = billed_days["last_day"]
            frame = budget_drivers.daily(budget, allocation.Rules.of(settings), plan.window_start, as_of)
            note = (f"Effective cost from the allocation of the bill: the pieces of {budget.scope_label} in "
                    f"{budget.currency} (amortized: commitments' shares included), by the day their charge period "
                    f"starts; the bill runs to {last_day:%Y-%m-%d}.")
        elif plan.source == "billed":
            last_day = billed_days["last_day"]
            frame = billed_frames[id(plan)]
            note = (f"Billed cost: bill lines in {budget.currency} for {budget.scope_label}, "
                    f"credits, taxes and fees included; the bill runs to {last_day:%Y-%m-%d}.")
        elif plan.source == "none":
            last_day = None
            frame = _NO_DAYS
            note = (f"No bill covers this period: a budget on the allocation ({budget.scope_label}) "
                    "counts only the bill's effective cost, so nothing is counted yet.")
        else:
            last_day = estimate_last
            frame = estimated_frames.get(id(plan), _NO_DAYS)
            note = ("Estimated cost: no bill covers this period, so runs (by start day) "
                    + ("and serving windows " if budget.scope == "all" else "")
                    + "are counted at their estimated cost in USD.")
            if budget.currency != "USD":
                note += f" Estimates are in USD and this budget is in {budget.currency}: nothing is counted."
        found.append(_burn(plan, as_of, last_day, frame, note))
    return found


_NO_DAYS = pd.DataFrame(columns=["day", "spend", "other_currency_lines"])


def _split(frame: pd.DataFrame, plans: list[_Plan]) -> dict[int, pd.DataFrame]:
    """A batched budget query's rows per plan (by id), without the budget_no column."""
    groups = {no: rows.drop(columns="budget_no") for no, rows in frame.groupby("budget_no", sort=False)}
    return {id(plan): groups.get(no, _NO_DAYS) for no, plan in enumerate(plans)}


def _burn(plan: _Plan, as_of: date, last_day: object, frame: pd.DataFrame, note: str) -> Burn:
    """One budget's Burn from its daily spend (`frame`: day, spend, other_currency_lines)."""
    budget, period_start, period_end = plan.budget, plan.period_start, plan.period_end
    through = None if last_day is None or pd.isna(last_day) else min(last_day, as_of - timedelta(days=1))
    spend_by_day = {row.day: Decimal(row.spend) for row in frame.itertuples()}
    counted_end = (through + timedelta(days=1)) if through is not None and through >= period_start else period_start
    daily = _days(spend_by_day, period_start, counted_end)
    daily["cumulative"] = _cumulative(daily["spend"])
    recent_end = through + timedelta(days=1) if through is not None else as_of
    recent = _days(spend_by_day, plan.window_start, recent_end)
    spent = sum(daily["spend"], Decimal(0))
    rate = sum(recent["spend"].iloc[-RATE_DAYS:], Decimal(0)) / RATE_DAYS
    low, high = (_percentile(list(recent["spend"].iloc[-BAND_DAYS:]), p) for p in BAND_PERCENTILES)
    days_left = (period_end - counted_end).days
    days_in_period = (period_end - period_start).days
    breach_day, days_to_breach = _breach(budget.amount, daily, spent, rate, counted_end)
    return Burn(
        budget=budget, period_start=period_start, period_end=period_end, through=through,
        source="estimated" if plan.source in ("estimated", "none") else "billed", source_note=note,
        daily=daily, recent=recent,
        spent=spent, rate_per_day=rate, allowed_per_day=budget.amount / days_in_period,
        forecast=spent + rate * days_left, forecast_low=spent + low * days_left,
        forecast_high=spent + high * days_left, days_left=days_left,
        days_to_breach=days_to_breach, breach_day=breach_day,
        other_currency_lines=int(sum(row.other_currency_lines for row in frame.itertuples()
                                     if period_start <= row.day < counted_end)),
    )


def daily_spend(burn_: Burn, start: date, end: date) -> pd.DataFrame:
    """The burn's daily spend in [start, end), from the days it read (`recent` holds them all)."""
    rows = burn_.recent
    return rows[(rows["day"] >= start) & (rows["day"] < end)].reset_index(drop=True)


def _days(spend_by_day: dict, start: date, end: date) -> pd.DataFrame:
    """Every day in [start, end) with its spend (0 on a day without any)."""
    days = [start + timedelta(days=i) for i in range(max((end - start).days, 0))]
    return pd.DataFrame({"day": days, "spend": [spend_by_day.get(day, Decimal(0)) for day in days]},
                        dtype=object)


def _cumulative(spend: pd.Series) -> list[Decimal]:
    total, out = Decimal(0), []
    for amount in spend:
        total += amount
        out.append(total)
    return out


def _percentile(values: list[Decimal], pct: int) -> Decimal:
    """Nearest-rank percentile (the smallest value with at least pct % of values at or below it)."""
    if not values:
        return Decimal(0)
    ordered = sorted(values)
    return ordered[max(math.ceil(pct / 100 * len(ordered)) - 1, 0)]


def _breach(amount: Decimal, daily: pd.DataFrame, spent: Decimal, rate: Decimal,
            next_day: date) -> tuple[date | None, int | None]:
    """(the day spend reached the amount, 0) when it has; else (forecast day, whole days to it)
    at `rate` from `next_day` on; (None, None) when the rate is 0."""
    if spent >= amount:
        reached = daily.loc[daily["cumulative"] >= amount, "day"]
        return reached.iloc[0], 0
    if rate <= 0:
        return None, None
    days = math.ceil((amount - spent) / rate)
    return next_day + timedelta(days=days - 1), days


def projection(burn_: Burn) -> pd.DataFrame:
    """Per day from the last counted day to the period's last day: the cumulative spend forecast
    at the burn rate and the band's low and high (float, for charts), and the allowed pace
    (amount spread evenly over the period)."""
    last = burn_.period_end - timedelta(days=1)
    start = burn_.period_start - timedelta(days=1) if burn_.daily.empty else burn_.daily["day"].iloc[-1]
    low_rate = (burn_.forecast_low - burn_.spent) / burn_.days_left if burn_.days_left else Decimal(0)
    high_rate = (burn_.forecast_high - burn_.spent) / burn_.days_left if burn_.days_left else Decimal(0)
    days = [start + timedelta(days=i) for i in range((last - start).days + 1)]
    steps = [(day - start).days for day in days]
    return pd.DataFrame({
        "day": days,
        "forecast": [float(burn_.spent + burn_.rate_per_day * n) for n in steps],
        "low": [float(burn_.spent + low_rate * n) for n in steps],
        "high": [float(burn_.spent + high_rate * n) for n in steps],
    })


def pace(burn_: Burn) -> pd.DataFrame:
    """Per day of the period: the cumulative spend allowed at an even pace (float, for charts)."""
    total = (burn_.period_end - burn_.period_start).days
    days = [burn_.period_start + timedelta(days=i) for i in range(total)]
    return pd.DataFrame({"day": days, "allowed": [float(burn_.allowed_per_day * (i + 1)) for i in range(total)]})
