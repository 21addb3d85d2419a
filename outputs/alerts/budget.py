"""Budget alerts: thresholds of spend and forecast, and burn spikes, in the seed's wording ("Project A
spent $X in the last 7 days (budget $Y). Top 3 most expensive runs: ...")."""
from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal

import pandas as pd

from metrics import budgets
from outputs.alerts.common import Alert, _money, _sentence
from ingest.settings.sections import Config

TOP_RUNS = budgets.TOP_RUNS


def budget_rule_alerts(settings: Config, as_of: date) -> list[Alert]:
    """Every budget's threshold and spike alerts as of `as_of` (top runs read only for budgets that alert)."""
    burns = budgets.burns(settings.budgets, settings, as_of)
    crossed = [burn for burn in burns if _crossed(burn, settings)]
    runs = budgets.top_runs(crossed, settings, TOP_RUNS)
    out: list[Alert] = []
    for burn in burns:
        out.extend(budget_alerts(burn, settings, runs.get(id(burn))))
    return out


def _crossed(burn: budgets.Burn, settings: Config) -> bool:
    """Whether any threshold or the spike rule of the budget holds."""
    budget = burn.budget
    return (any(burn.used_pct >= pct for pct in budget.actual_thresholds_pct) or burn_spike(burn, settings) is not None
            or any(burn.days_left > 0 and burn.forecast_pct >= pct for pct in budget.forecast_thresholds_pct))


def budget_alerts(burn: budgets.Burn, settings: Config, top_runs: pd.DataFrame | None = None) -> list[Alert]:
    """Threshold and spike alerts of one budget's period (`top_runs`: its budgets.top_runs when
    already read for it)."""
    budget, out = burn.budget, []
    spike = burn_spike(burn, settings)
    if not _crossed(burn, settings):
        return out
    summary = _budget_summary(burn, settings, top_runs)  # queries for the top runs: only when an alert will carry it
    for pct in budget.actual_thresholds_pct:
        if burn.used_pct >= pct:
            out.append(_budget_alert(burn, "budget_actual", pct,
                                     f"{budget.name}: {burn.used_pct:.0f} % of the budget spent (threshold {pct:g} %)", summary))
    for pct in budget.forecast_thresholds_pct:
        if burn.days_left > 0 and burn.forecast_pct >= pct:
            out.append(_budget_alert(burn, "budget_forecast", pct,
                                     f"{budget.name}: forecast {burn.forecast_pct:.0f} % of the budget (threshold {pct:g} %)",
                                     summary))
    if spike is not None:
        day, spend, baseline, with_data = spike
        title = f"{budget.name}: spend spiked to {spend / baseline:.1f}x its daily mean"
        text = (f"{_sentence(budget.scope_label)} spent {_money(spend, budget.currency)} on {day:%a %Y-%m-%d}, "
                f"{spend / baseline:.1f}x its mean of {_money(baseline, budget.currency)} per day with data over the "
                f"{settings.alerts.burn_spike_baseline_days} days before ({with_data} with data). " + summary)
        out.append(_budget_alert(burn, "burn_spike", settings.alerts.burn_spike_factor, title, text))
    return out


def burn_spike(burn: budgets.Burn, settings: Config) -> tuple[date, Decimal, Decimal, int] | None:
    """(day, its spend, baseline mean per day with data, days with data in the baseline) when the
    as-of day is a spike, else None. The baseline is the burn_spike_baseline_days before it."""
    if burn.through is None or burn.through < burn.period_start:
        return None
    days = settings.alerts.burn_spike_baseline_days
    history = budgets.daily_spend(burn, burn.through - timedelta(days=days), burn.through + timedelta(days=1))
    if len(history) < days + 1 or days == 0 or not history["has_data"].iloc[-1]:
        return None
    before = history.iloc[:-1]
    counted = [spend for spend, has in zip(before["spend"], before["has_data"]) if has]
    if not counted:
        return None
    spend = history["spend"].iloc[-1]
    baseline = sum(counted, Decimal(0)) / len(counted)
    if baseline > 0 and spend > baseline * Decimal(str(settings.alerts.burn_spike_factor)):
        return burn.through, spend, baseline, len(counted)
    return None


def _budget_summary(burn: budgets.Burn, settings: Config, top_runs: pd.DataFrame | None = None) -> str:
    """The seed's budget alert with this burn's figures: 'Project vision spent $X in the last 7 days
    (2026-11-19 to 2026-11-25, 7 days, 4 with data; budget $3,000.00/month). Top 3 most expensive
    runs: ...', then the period's spend in its parts, the forecast and the owner."""
    budget, currency = burn.budget, burn.budget.currency
    if burn.through is None or burn.rate_window is None:
        return f"No spend data for {budget.scope_label} yet."
    window = burn.rate_window
    who = "All spend came to" if budget.scope == "all" else f"{_sentence(budget.scope_label)} spent"
    text = (f"{who} {_money(budgets.spent_in(burn, window), currency)} in the last {window.days} days "
            f"({window.text()}; budget {_money(budget.amount, currency)}/{budget.period}).")
    runs = top_runs if top_runs is not None else budgets.top_runs([burn], settings, TOP_RUNS)[id(burn)]
    if runs.empty:
        text += " No run has cost in this window."
    else:
        text += f" Top {len(runs)} most expensive runs: " + ", ".join(
            f"{r.run_id} {_money(r.cost, currency)}" + ("" if r.source == "allocated" else f" ({r.source})")
            for r in runs.itertuples()) + "."
    text += (f" This {budget.period} as of {burn.through:%Y-%m-%d}: {_money(burn.spent, currency)}, "
             f"{burn.used_pct:.0f} % of the budget ({burn.parts_text(_money)}); forecast "
             f"{_money(burn.forecast, currency)} by {burn.period_end - timedelta(days=1):%Y-%m-%d}, burning "
             f"{_money(burn.rate_per_day, currency)} per day with data against "
             f"{_money(burn.allowed_per_day, currency)}/day allowed.")
    if burn.breach_day is not None and burn.breach_in_period and burn.days_to_breach:
        text += f" At this rate it runs out on {burn.breach_day:%Y-%m-%d}."
    if budget.owner:
        text += f" Owner: {budget.owner}."
    return text


def _budget_alert(burn: budgets.Burn, rule: str, level: float, title: str, text: str) -> Alert:
    threshold = f"{level:g}x" if rule == "burn_spike" else f"{level:g}%"
    reason = {"budget_actual": f"Spend passed {threshold} of the budget. ",
              "budget_forecast": f"The forecast passed {threshold} of the budget. "}.get(rule, "")
    return Alert(rule, burn.budget.name, threshold, burn.period_start, burn.budget.channel, title,
                 reason + text, level)


