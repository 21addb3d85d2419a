"""The month at a glance: the headline figures of the month to date, composed from their one
definition each, for the Overview page (and any CLI or report that wants the same answer).

Nothing is computed here that another module of metrics/ already defines:
- billed so far, the split by bucket, the split by team or project, idle GPU cost and hours:
  allocation.summary() over the month's days to date (the Costs page and `mlcost allocation`);
- the forecast to the month's end: budgets.burns() of a budget on everything in the currency
  (the Budgets page's forecast rule: spend so far + the burn rate x the days left);
- budgets at risk: budgets.burns() of the configured budgets, those spent or forecast past their
  amount within their period (Burn.breach_in_period);
- what changed: the same allocation over the same days of the previous month (1 to the day the
  bill runs through, or the whole previous month when it is shorter).

Days are UTC days; a bill line belongs to the day its charge period starts (allocation.py).
Money is Decimal per billing currency, never added across currencies.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal

import pandas as pd

from ingest.settings import config
from metrics import allocation, budgets, queries
from present.format import money

TOP = 3  # keys listed on the landing page
KEYS = ("team", "project")  # what the top list can rank


@dataclass(frozen=True)
class Change:
    """One figure of the month to date next to the same days of the previous month (Decimal,
    in the currency); `previous` is None when the previous month has no bill line on those days."""

    label: str
    current: Decimal
    previous: Decimal | None

    @property
    def change(self) -> Decimal | None:
        return None if self.previous is None else self.current - self.previous

    @property
    def change_pct(self) -> float | None:
        """(current / previous - 1) x 100; None without a previous figure or when it is 0 or negative."""
        if self.previous is None or self.previous <= 0:
            return None
        return float((self.current / self.previous - 1) * 100)


@dataclass(frozen=True)
class CurrencyMonth:
    """The month to date in one billing currency."""

    currency: str
    billed: Decimal                  # effective cost of the bill lines of the days counted
    lines_without_effective_cost: int
    buckets: dict[str, Decimal]      # allocation bucket -> amount (every bucket, 0 when empty)
    top: list[tuple[str, Decimal]]   # the TOP keys (teams or projects) by allocated cost, largest first
    without_key: Decimal             # allocated to no team (or project): '(no team)'
    idle_gpu_hours: float            # idle GPU-hours of the billed GPU nodes (the idle bucket's hours)
    idle_nodes: list[tuple[str, Decimal, float]]  # (node, idle cost, idle GPU-hours), costliest first
    forecast: budgets.Burn           # a budget on everything in this currency: spent, forecast, rate
    changes: list[Change]            # billed, then each bucket, against the same days last month


@dataclass(frozen=True)
class Month:
    """The headline figures of `month` to date, as of `as_of` (data counted up to the day before)."""

    month: date                      # first day
    as_of: date
    through: date | None             # the last day counted (the bill's last day, at most as_of - 1)
    previous_start: date             # the same days of the previous month: [previous_start, previous_end)
    previous_end: date
    key: str                         # what `top` ranks: team or project
    currencies: dict[str, CurrencyMonth]
    at_risk: list[budgets.Burn]      # configured budgets spent or forecast past their amount this period
    budgets: int                     # how many budgets are configured

    @property
    def figures_day(self) -> date | None:
        """The day the figures end on, as every page and alert says it (budgets.as_of_day)."""
        return budgets.as_of_day(self.as_of)

    @property
    def days(self) -> int:
        """The days counted this month (1 to through), 0 without a bill line in the month."""
        return 0 if self.through is None else (self.through - self.month).days + 1


def as_of_day(today: date) -> date:
    """The day the landing page is as of: the Budgets page's default (budgets.default_as_of)."""
    return budgets.default_as_of(today)


def through_day(month: date, as_of: date) -> date | None:
    """The last day of `month` the bill covers, at most the day before `as_of`; None when no bill
    line of the month starts before `as_of`."""
    last = queries.bill_days()["last_day"].iloc[0]
    if last is None or pd.isna(last):
        return None
    start, end = allocation.month_span(month)
    through = min(pd.Timestamp(last).date(), as_of - timedelta(days=1), end - timedelta(days=1))
    return through if through >= start else None


def same_days_before(month: date, through: date | None) -> tuple[date, date]:
    """[start, end) of the previous month's days 1 to through's day (the whole previous month when
    it is shorter); the whole previous month when nothing of `month` is counted yet."""
    start = (month - timedelta(days=1)).replace(day=1)
    whole_end = month
    if through is None:
        return start, whole_end
    return start, min(whole_end, start + timedelta(days=through.day))


def everything_budget(currency: str) -> config.Budget:
    """A budget on everything this month in `currency`, only for its forecast (its amount is not read)."""
    return config.Budget(name=f"everything ({currency})", scope="all", scope_value=None, period="month",
                         amount=Decimal(1), currency=currency, actual_thresholds_pct=(), forecast_thresholds_pct=())


def build(as_of: date, settings: config.Config, key: str = "team") -> Month:
    """The month holding the day before `as_of`, to date: see the module docstring for each figure."""
    if key not in KEYS:
        raise ValueError(f"key must be one of {', '.join(KEYS)}, not {key!r}")
    month = (as_of - timedelta(days=1)).replace(day=1)
    through = through_day(month, as_of)
    previous_start, previous_end = same_days_before(month, through)
    configured = budgets.burns(list(settings.budgets), settings, as_of) if settings.budgets else []
    at_risk = sorted((b for b in configured if b.breach_in_period), key=lambda b: -b.forecast_pct)
    if through is None:
        return Month(month, as_of, None, previous_start, previous_end, key, {}, at_risk, len(configured))
    rules = allocation.Rules.of(settings)
    now = allocation.summary(month, through + timedelta(days=1), key, rules)["currencies"]
    before = allocation.summary(previous_start, previous_end, key, rules)["currencies"]
    forecasts = budgets.burns([everything_budget(currency) for currency in now], settings, as_of)
    currencies = {currency: _currency_month(currency, figures, before.get(currency), forecast, key)
                  for (currency, figures), forecast in zip(now.items(), forecasts)}
    return Month(month, as_of, through, previous_start, previous_end, key, currencies, at_risk, len(configured))


def _currency_month(currency: str, now: dict, before: dict | None, forecast: budgets.Burn, key: str) -> CurrencyMonth:
    """One currency's CurrencyMonth from allocation.summary()'s figures of both periods."""
    unkeyed = f"(no {key})"
    keyed = sorted(((value, amount) for value, amount in now["by_key"].items() if value != unkeyed),
                   key=lambda item: (-item[1], item[0]))
    nodes = sorted(((host, node["idle_gpu"], float(node["idle_gpu_hours"] or 0)) for host, node in now["nodes"].items()),
                   key=lambda item: (-item[1], item[0]))
    changes = [Change("Billed (effective cost)", now["billed"], None if before is None else before["billed"])]
    changes += [Change(allocation.BUCKET_LABELS[bucket], now["buckets"][bucket],
                       None if before is None else before["buckets"][bucket]) for bucket in allocation.BUCKETS]
    return CurrencyMonth(
        currency=currency, billed=now["billed"], lines_without_effective_cost=now["lines_without_effective_cost"],
        buckets=dict(now["buckets"]), top=keyed[:TOP], without_key=now["by_key"].get(unkeyed, Decimal(0)),
        idle_gpu_hours=round(sum(hours for _, _, hours in nodes), 6),
        idle_nodes=[node for node in nodes if node[1] or node[2]],
        forecast=forecast, changes=changes)


def summary_lines(found: Month) -> list[str]:
    """The month's headline in plain sentences, one per currency and one for the budgets at risk
    (for the CLI; the Overview page shows the same figures)."""
    if not found.currencies:
        lines = [f"{found.month:%B %Y}: no bill line yet"]
    else:
        days = f"{found.month:%b} 1-{found.through.day}"
        before = f"{found.previous_start:%b} 1-{(found.previous_end - found.previous_start).days}"
        lines = []
        for currency, figures in found.currencies.items():
            billed = figures.changes[0]
            change = (f" ({'+' if billed.change >= 0 else '-'}{money(abs(billed.change), currency)} on {before})"
                      if billed.change is not None else "")
            lines.append(f"{found.month:%B %Y} to date ({days}): billed {money(figures.billed, currency)}{change}, "
                         f"forecast {money(figures.forecast.forecast, currency)} for the month, idle GPUs "
                         f"{money(figures.buckets['idle_gpu'], currency)} ({figures.idle_gpu_hours:,.1f} GPU-hours)")
    if found.budgets:
        names = ", ".join(b.budget.name for b in found.at_risk) or "none"
        lines.append(f"budgets at risk: {len(found.at_risk)} of {found.budgets} ({names})")
    return lines
