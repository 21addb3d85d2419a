"""Budget burn: what a budget's scope spent in its period, how fast, and where that leads.

Days are UTC days. One day, the **as-of day**, ends every figure on every page and alert:
the last day with data (bill, runs, serving windows or GPU traces) before the day of the check
(`as_of_day`). Spend is counted from the period's start through it:
- **billed** through the bill's last complete day (`bill_through`): a budget on a team, project,
  model, service or bucket counts its **allocated** cost (the allocation's effective cost, the
  showback figure of the Costs page; for a team or project, "of which tagged" is the part whose
  bill lines carry the tag themselves); a budget on everything, a provider or a tag counts the
  billed cost of its bill lines;
- **estimated** after that day, through the as-of day: runs at their estimated cost (logged,
  from their price, or catalog-priced GPU time) by the day they start, serving windows at
  their cost by the day they start (USD only). When the bill arrives it replaces the estimate
  for the days it covers.
A window (`Window`) is the days ending at the as-of day; it counts only days with data and
says how many it has:
- burn rate: the mean spend per day with data of the 7-day window;
- forecast to period end: spent + burn rate x the days left after the as-of day; its band uses
  the 10th and 90th percentile spend of the days with data of the 28-day window instead;
- days to breach: whole days at the burn rate until the spend reaches the amount, counted
  from the day after the as-of day (0 when already reached, None when the rate is 0).
Money stays Decimal; a budget only counts spend in its own currency.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal

import pandas as pd

from metrics import allocation, budget_drivers, queries
from ingest.settings.sections import Budget, Config

RATE_DAYS = 7
BAND_DAYS = 28
BAND_PERCENTILES = (10, 90)
CENT = Decimal("0.01")
TOP_RUNS = 3  # the runs a budget alert names (the seed's "Top 3 most expensive runs")
# Scopes that count the allocation's effective cost on billed days (the Costs page's showback).
ALLOCATED_SCOPES = ("team", "project", "model", "service", "bucket")
TAGGED_SCOPES = ("team", "project")


def as_of_day(check_day: date) -> date | None:
    """The as-of day of a check made on `check_day`: the last UTC day with any data before it
    (None when there is none). Every page, report and alert ends its figures on this day."""
    found = queries.last_data_day(check_day)["last_day"].iloc[0]
    return None if found is None or pd.isna(found) else found


def bill_through() -> date | None:
    """The bill's last complete UTC day (None without a bill): billed cost counts through it,
    estimates after it."""
    found = queries.bill_complete_through()["last_day"].iloc[0]
    return None if found is None or pd.isna(found) else found


@dataclass(frozen=True)
class Window:
    """The `days` days ending at `last` (included), of which `with_data` have data."""

    first: date
    last: date
    days: int
    with_data: int
    data_days: tuple[date, ...]

    def text(self) -> str:
        """'2026-11-15 to 2026-11-21, 7 days, 7 with data'."""
        return f"{self.first:%Y-%m-%d} to {self.last:%Y-%m-%d}, {self.days} days, {self.with_data} with data"


def window(last: date, days: int, data_days: list[date] | tuple[date, ...] | None = None) -> Window:
    """The `days`-day window ending at `last` (the as-of day) and its days with data (read when
    `data_days` is not handed in)."""
    first = last - timedelta(days=days - 1)
    found = queries.data_days(first, last + timedelta(days=1)) if data_days is None else data_days
    inside = tuple(day for day in found if first <= day <= last)
    return Window(first, last, days, len(inside), inside)


@dataclass(frozen=True)
class Burn:
    """One budget's period as of a day; every amount is in budget.currency."""

    budget: Budget
    period_start: date
    period_end: date          # exclusive
    through: date | None      # the as-of day: the last day counted; None when there is no data at all
    source: str               # "billed", "billed + estimated" or "estimated"
    source_note: str
    daily: pd.DataFrame       # day, billed, estimated, spend, cumulative (Decimal): period start .. through
    recent: pd.DataFrame      # day, spend, has_data: every day read up to through, for rates and spikes
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
    billed: Decimal = Decimal(0)      # the part of `spent` on billed days (allocated or billed cost)
    estimated: Decimal = Decimal(0)   # the part of `spent` after bill_through (estimates, USD)
    tagged: Decimal | None = None     # of `billed`, the part whose bill lines carry the tag (team/project)
    bill_through: date | None = None  # the bill's last complete day
    basis: str = "billed"             # what billed days count: "allocated" or "billed"
    rate_window: Window | None = None  # the 7 days ending at `through`
    billed_runs: pd.DataFrame | None = None  # run_id, cost: the costliest runs of rate_window's billed days

    @property
    def used_pct(self) -> float:
        return float(self.spent * 100 / self.budget.amount)

    @property
    def forecast_pct(self) -> float:
        return float(self.forecast * 100 / self.budget.amount)

    @property
    def breach_in_period(self) -> bool:
        return self.breach_day is not None and self.breach_day < self.period_end

    def parts_text(self, money) -> str:
        """'allocated $1,962.07 through 2026-11-21, of which tagged $1,659.19, + estimated $5,000.00
        after it', with `money(amount, currency)` formatting the amounts."""
        currency = self.budget.currency
        if self.bill_through is None or self.bill_through < self.period_start:
            return f"estimated {money(self.estimated, currency)} (no bill covers this period yet)"
        last_billed = min(self.bill_through, self.through) if self.through else self.bill_through
        text = f"{self.basis} {money(self.billed, currency)} through {last_billed:%Y-%m-%d}"
        if self.tagged is not None:
            text += f", of which tagged {money(self.tagged, currency)},"
        if self.through is not None and self.through > self.bill_through:
            text += (" + nothing estimated after it (estimates carry no provider)" if self.budget.scope == "provider"
                     else f" + estimated {money(self.estimated, currency)} after it")
        return text.rstrip(",")


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
    """The budget's period holding the as-of day of a check on `as_of` (as_of_day(as_of))."""
    return burns([budget], settings, as_of)[0]


@dataclass(frozen=True)
class _Plan:
    """What one budget's burn reads: its period and the days it reads."""

    budget: Budget
    period_start: date
    period_end: date
    window_start: date


_NO_DAYS = pd.DataFrame(columns=["day", "spend", "tagged", "other_currency_lines"])


def burns(budgets: list[Budget], settings: Config, as_of: date) -> list[Burn]:
    """burn() of each budget, in order, for a check made on `as_of`: every figure ends at the
    as-of day. The bill, its allocation and the estimates are read once for all budgets."""
    through = as_of_day(as_of)
    last = through if through is not None else as_of - timedelta(days=1)
    billed_to = bill_through()
    spike_days = settings.alerts.burn_spike_baseline_days
    plans = []
    for budget in budgets:
        period_start, period_end = period_bounds(last, budget.period)
        window_start = min(period_start, last - timedelta(days=max(BAND_DAYS, spike_days + 1) - 1))
        plans.append(_Plan(budget, period_start, period_end, window_start))
    end = last + timedelta(days=1)
    # billed days: [window start, the bill's last complete day]; estimated days: after it
    bill_end = min(billed_to + timedelta(days=1), end) if billed_to is not None else None
    est_start = lambda plan: plan.window_start if bill_end is None else max(plan.window_start, bill_end)  # noqa: E731
    rules = allocation.Rules.of(settings)
    tags = (settings.reconciliation.project_tag, settings.reconciliation.team_tag)
    on_bill = [p for p in plans if bill_end is not None and p.window_start < bill_end]
    allocated = [p for p in on_bill if p.budget.scope in ALLOCATED_SCOPES]
    lines = [p for p in on_bill if p.budget.scope not in ALLOCATED_SCOPES]
    # the runs of each budget's 7-day window on billed days, from the same allocation pass
    rate_first = last - timedelta(days=RATE_DAYS - 1)
    with_runs = [p for p in plans if through is not None and bill_end is not None and rate_first < bill_end]
    daily_frames, run_frames = (budget_drivers.daily_and_top_runs(
        [(p.budget, p.window_start, bill_end) for p in allocated],
        [(p.budget, rate_first, bill_end) for p in with_runs], rules, TOP_RUNS)
        if allocated or with_runs else ([], []))
    allocated_frames = dict(zip(map(id, allocated), daily_frames))
    billed_runs = dict(zip(map(id, with_runs), run_frames))
    line_frames = _split(queries.budget_daily_billed([(p.budget, p.window_start, bill_end) for p in lines], tags),
                         lines)
    estimating = [p for p in plans if p.budget.currency == "USD" and est_start(p) < end]
    estimated_frames = _split(queries.budget_daily_estimated([(p.budget, est_start(p), end) for p in estimating]),
                              estimating)
    data_days = set(queries.data_days(min((p.window_start for p in plans), default=end), end))
    found = []
    for plan in plans:
        budget = plan.budget
        basis = "allocated" if budget.scope in ALLOCATED_SCOPES else "billed"
        billed = allocated_frames.get(id(plan), line_frames.get(id(plan), _NO_DAYS))
        estimated = estimated_frames.get(id(plan), _NO_DAYS)
        note = _note(budget, basis, billed_to, through)
        found.append(_burn(plan, through, billed_to, billed, estimated, data_days, basis, note,
                           billed_runs.get(id(plan))))
    return found


def _note(budget: Budget, basis: str, billed_to: date | None, through: date | None) -> str:
    """What the budget's spend counts, in words."""
    if basis == "allocated":
        what = (f"Allocated cost: the allocation of the bill's effective cost to {budget.scope_label} "
                "(the showback figure of the Costs page: " +
                ("the run's own " + budget.scope + ", else the bill line's tag; \"of which tagged\" is the part "
                 "whose bill lines carry the tag" if budget.scope in TAGGED_SCOPES else "its pieces") + ")")
    else:
        what = f"Billed cost of the bill lines of {budget.scope_label} (credits, taxes and fees included)"
    text = "" if billed_to is None else (
        f"{what} in {budget.currency}, through {billed_to:%Y-%m-%d} (the bill's last complete day).")
    if through is not None and (billed_to is None or through > billed_to):
        since = "no bill yet" if billed_to is None else "after the bill"
        text += (f" Estimated cost ({since}), through "
                 f"{through:%Y-%m-%d}, in USD: runs by the day they start, at their logged, price-derived or "
                 "catalog-priced cost"
                 + (", and serving windows" if budget.scope in ("all", "bucket", "service", "model") else "")
                 + "; the bill replaces it when it arrives.")
        if budget.currency != "USD":
            text += f" Estimates are in USD and this budget is in {budget.currency}: they are not counted."
        elif budget.scope == "provider":
            text += " Estimates carry no provider: none is counted."
    return text.strip() or "No data yet."


def _split(frame: pd.DataFrame, plans: list[_Plan]) -> dict[int, pd.DataFrame]:
    """A batched budget query's rows per plan (by id), without the budget_no column."""
    groups = {no: rows.drop(columns="budget_no") for no, rows in frame.groupby("budget_no", sort=False)}
    return {id(plan): groups.get(no, _NO_DAYS) for no, plan in enumerate(plans)}


def _by_day(frame: pd.DataFrame, column: str) -> dict:
    if column not in frame.columns:
        return {}
    return {day: Decimal(value) for day, value in zip(frame["day"], frame[column])}


def _burn(plan: _Plan, through: date | None, billed_to: date | None, billed_frame: pd.DataFrame,
          estimated_frame: pd.DataFrame, data_days: set, basis: str, note: str,
          billed_runs: pd.DataFrame | None) -> Burn:
    """One budget's Burn from its daily billed and estimated spend."""
    budget, period_start, period_end = plan.budget, plan.period_start, plan.period_end
    billed_by_day, estimated_by_day = _by_day(billed_frame, "spend"), _by_day(estimated_frame, "spend")
    tagged_by_day = _by_day(billed_frame, "tagged")
    counted_end = (through + timedelta(days=1)) if through is not None and through >= period_start else period_start
    days = [period_start + timedelta(days=i) for i in range(max((counted_end - period_start).days, 0))]
    billed = [billed_by_day.get(day, Decimal(0)) for day in days]
    estimated = [estimated_by_day.get(day, Decimal(0)) for day in days]
    daily = pd.DataFrame({"day": days, "billed": billed, "estimated": estimated,
                          "spend": [b + e for b, e in zip(billed, estimated)]}, dtype=object)
    daily["cumulative"] = _cumulative(daily["spend"])
    recent_end = through + timedelta(days=1) if through is not None else counted_end
    recent_days = [plan.window_start + timedelta(days=i) for i in range(max((recent_end - plan.window_start).days, 0))]
    recent = pd.DataFrame({"day": recent_days,
                           "spend": [billed_by_day.get(d, Decimal(0)) + estimated_by_day.get(d, Decimal(0))
                                     for d in recent_days],
                           "has_data": [d in data_days for d in recent_days]}, dtype=object)
    spent = sum(daily["spend"], Decimal(0))
    rate_window = window(through, RATE_DAYS, sorted(data_days)) if through is not None else None
    rate = _mean_with_data(recent, RATE_DAYS)
    band = [v for v, has in zip(recent["spend"].iloc[-BAND_DAYS:], recent["has_data"].iloc[-BAND_DAYS:]) if has]
    low, high = (_percentile(band, p) for p in BAND_PERCENTILES)
    days_left = (period_end - counted_end).days
    days_in_period = (period_end - period_start).days
    breach_day, days_to_breach = _breach(budget.amount, daily, spent, rate, counted_end)
    tagged = (sum((v for d, v in tagged_by_day.items() if period_start <= d < counted_end), Decimal(0))
              if budget.scope in TAGGED_SCOPES else None)
    other = (sum(int(n) for d, n in zip(billed_frame["day"], billed_frame["other_currency_lines"])
                 if period_start <= d < counted_end) if "other_currency_lines" in billed_frame.columns else 0)
    source = ("estimated" if billed_to is None or billed_to < period_start
              else "billed + estimated" if through is not None and through > billed_to else "billed")
    return Burn(
        budget=budget, period_start=period_start, period_end=period_end, through=through,
        source=source, source_note=note, daily=daily, recent=recent,
        spent=spent, rate_per_day=rate, allowed_per_day=budget.amount / days_in_period,
        forecast=spent + rate * days_left, forecast_low=spent + low * days_left,
        forecast_high=spent + high * days_left, days_left=days_left,
        days_to_breach=days_to_breach, breach_day=breach_day, other_currency_lines=other,
        billed=sum(billed, Decimal(0)), estimated=sum(estimated, Decimal(0)), tagged=tagged,
        bill_through=billed_to, basis=basis, rate_window=rate_window,
        billed_runs=billed_runs if billed_runs is not None else pd.DataFrame(columns=["run_id", "cost"]),
    )


def _mean_with_data(recent: pd.DataFrame, days: int) -> Decimal:
    """The mean spend per day with data of the last `days` days of `recent` (0 without any)."""
    tail = recent.iloc[-days:]
    counted = [spend for spend, has in zip(tail["spend"], tail["has_data"]) if has]
    return sum(counted, Decimal(0)) / len(counted) if counted else Decimal(0)


def daily_spend(burn_: Burn, start: date, end: date) -> pd.DataFrame:
    """The burn's daily spend in [start, end), from the days it read (`recent` holds them all)."""
    rows = burn_.recent
    return rows[(rows["day"] >= start) & (rows["day"] < end)].reset_index(drop=True)


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


def spent_in(burn_: Burn, window_: Window) -> Decimal:
    """The burn's spend (billed + estimated) over the window's days."""
    return sum(daily_spend(burn_, window_.first, window_.last + timedelta(days=1))["spend"], Decimal(0))


def top_runs(burns_: list[Burn], settings: Config, top: int = TOP_RUNS) -> dict[int, pd.DataFrame]:
    """Per burn (by id) with an as-of day: its costliest runs over its 7-day window (rate_window),
    costliest first: run_id, cost (Decimal, the budget's currency), source ("allocated" on billed
    days: the run's pieces of the bill, read with the burn; "estimated" after the bill's last day:
    the run's estimate, by the day it started; a run in both adds the two). At most TOP_RUNS."""
    out = {}
    for b in burns_:
        if b.through is None or b.rate_window is None:
            continue
        rows: dict[str, list] = {}
        billed = b.billed_runs if b.billed_runs is not None else pd.DataFrame(columns=["run_id", "cost"])
        for run_id, cost in zip(billed["run_id"], billed["cost"]):
            rows[run_id] = [run_id, Decimal(cost), "allocated"]
        est_first = b.rate_window.first if b.bill_through is None else max(b.rate_window.first,
                                                                             b.bill_through + timedelta(days=1))
        if b.budget.currency == "USD" and est_first <= b.through:
            found = queries.budget_top_runs(b.budget, est_first, b.through + timedelta(days=1), top)
            for run_id, cost in zip(found["run_id"], found["cost_usd"]):
                if run_id in rows:
                    rows[run_id][1] += Decimal(cost)
                    rows[run_id][2] = "allocated + estimated"
                else:
                    rows[run_id] = [run_id, Decimal(cost), "estimated"]
        ordered = sorted(rows.values(), key=lambda item: (-item[1], item[0]))[:min(top, TOP_RUNS)]
        out[id(b)] = pd.DataFrame(ordered, columns=["run_id", "cost", "source"], dtype=object)
    return out
