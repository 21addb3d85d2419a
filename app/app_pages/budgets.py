"""Budget burn: each budget's spend to date against its amount, the forecast, and what drives it."""
from datetime import datetime, timedelta, timezone

import pandas as pd
import streamlit as st

from app import cache, settings as settings_page, settings_forms
from metrics import allocation, budget_drivers, budgets, queries
from app.tables import show
from present import charts_money
from present.format import md, money

st.title("Budgets")
settings = settings_page.load_or_stop()
settings_forms.budget_form(settings)
if not settings.budgets:
    st.info("No budgets yet. Add one above, or in `mlcost.toml` (or the file `$MLCOST_CONFIG` names), e.g.:")
    st.code('[[budgets]]\nname = "vision"\nscope = "project:vision"   # all | project:X | team:X | '
            'tag:KEY=VALUE | provider:X | bucket:B | model:V | service:S\nperiod = "month"            # or quarter\namount = 10000\n'
            'currency = "USD"\nactual_thresholds_pct = [50, 80, 100]\nforecast_thresholds_pct = [100]\n'
            'owner = "alice"', language="toml")
    st.stop()

today = datetime.now(timezone.utc).date()
default_day = budgets.as_of_day(budgets.default_as_of(today)) or today - timedelta(days=1)
picked = st.date_input("As of (the last day counted: the last day with data up to this day)", value=default_day,
                       key="budget_as_of")
check_day = picked + timedelta(days=1)  # a check made the day after counts through `picked`
burns = cache.budget_burns(check_day, settings)
through = next((b.through for b in burns if b.through is not None), None)
bill_through = next((b.bill_through for b in burns), None)
st.caption(  # dates and fixed words only: nothing untrusted to escape
    (f"**As of {through:%Y-%m-%d}** (the last day with data; every figure and window on this page and in the "
     "alerts ends on it). " if through else "No data yet. ")
    + (f"Billed through {bill_through:%Y-%m-%d} (the bill's last complete day); estimated after it. "
       if bill_through else "No bill yet: spend is estimated. ")
    + "A budget on a team, project, model, service or bucket counts its **allocated** cost, the showback figure "
      "of the Costs page; on everything, a provider or a tag, the **billed** cost of its bill lines. "
      "The sidebar filters do not apply here: each budget has its own scope and period. Days are UTC.")


def period_text(burn: budgets.Burn) -> str:
    """'Nov 2026' or 'Q4 2026'."""
    start = burn.period_start
    return f"{start:%b %Y}" if burn.budget.period == "month" else f"Q{(start.month - 1) // 3 + 1} {start.year}"


def breach_text(burn: budgets.Burn) -> str:
    if burn.days_to_breach == 0:
        return f"reached {burn.breach_day:%b %d}"
    if burn.breach_in_period:
        return f"in {burn.days_to_breach} days ({burn.breach_day:%b %d})"
    return "not this period"


show(pd.DataFrame([{  # amounts as text: each budget has its own currency
    "budget": b.budget.name, "scope": b.budget.scope_label, "period": period_text(b),
    "amount": money(b.budget.amount, b.budget.currency), "spent": money(b.spent, b.budget.currency),
    "counts": b.basis + (" + estimated" if b.estimated else ""),
    "billed_part": money(b.billed, b.budget.currency),
    "of_which_tagged": money(b.tagged, b.budget.currency) if b.tagged is not None else "",
    "estimated_part": money(b.estimated, b.budget.currency),
    "used_pct": round(b.used_pct, 1), "forecast": money(b.forecast, b.budget.currency),
    "forecast_pct": round(b.forecast_pct, 1), "breach": breach_text(b),
} for b in burns]), currency="",
     labels={"counts": "Counts", "billed_part": "Billed part", "of_which_tagged": "Of which tagged",
             "estimated_part": "Estimated part"},
     config={"used_pct": st.column_config.ProgressColumn("Used (%)", min_value=0, max_value=100, format="%.1f %%")})

names = [b.budget.name for b in burns]
burn = burns[names.index(st.selectbox("Budget", names, key="budget_name"))]
budget, currency = burn.budget, burn.budget.currency
counted = f"as of {burn.through:%Y-%m-%d}" if burn.through else "no data yet"
left, middle, right, last = st.columns(4)
left.metric(f"Spent this {budget.period}", money(burn.spent, currency))
left.caption(md(f"{burn.used_pct:.1f} % of {money(budget.amount, currency)}, {counted}: {burn.parts_text(money)}"))
middle.metric("Forecast to period end", money(burn.forecast, currency))
middle.caption(f"band {money(burn.forecast_low, currency)} to {money(burn.forecast_high, currency)}; "
               f"{burn.forecast_pct:.0f} % of the budget")
right.metric("Days until breach", "reached" if burn.days_to_breach == 0 else
             str(burn.days_to_breach) if burn.breach_in_period else "none this period")
right.caption(breach_text(burn) + (f", counted from {burn.through + timedelta(days=1):%Y-%m-%d}"
                                   if burn.through and burn.days_to_breach else ""))
last.metric("Burn rate, last 7 days", f"{money(burn.rate_per_day, currency)}/day",
            delta=f"{money(burn.rate_per_day - burn.allowed_per_day, currency)}/day vs allowed",
            delta_color="inverse")
last.caption(f"mean per day with data, {burn.rate_window.text() if burn.rate_window else 'no data'}; "
             f"allowed {money(burn.allowed_per_day, currency)}/day")
st.info(md(burn.source_note))
if burn.other_currency_lines:
    st.warning(f"{burn.other_currency_lines:,} bill lines in this scope are in other currencies than "
               f"{currency}: they are not counted (currencies are never converted).")
st.plotly_chart(cache.chart("budget_burn", (check_day, repr(settings), budget.name),
                            lambda: charts_money.budget_burn(burn.daily, budgets.projection(burn), budgets.pace(burn),
                                                       float(budget.amount), currency)), width="stretch")
st.caption(f"Forecast: spent + the mean spend per day with data of the last 7 days × the {burn.days_left} days "
           "left. Band: the same with the 10th and 90th percentile day with data of the last 28 days.")

if burn.rate_window is not None:
    st.subheader("Top 3 most expensive runs, last 7 days")
    st.caption(f"{burn.rate_window.text()}: the budget spent "
               f"{money(budgets.spent_in(burn, burn.rate_window), currency)} (the figure the alert states). "
               "Allocated: the run's pieces of the bill; estimated: the run's own estimate after the bill's last day.")
    top = cache.derived("budget_top_runs", (check_day, repr(settings), budget.name),
                        lambda: budgets.top_runs([burn], settings, 3)[id(burn)])
    show(top, currency=currency, labels={"run_id": "Run", "source": "Counted as", "cost": f"Cost ({currency})"})

st.subheader("What drives it")
billed_days = (burn.bill_through is not None and burn.through is not None
               and burn.bill_through >= burn.period_start)
if billed_days:
    start, end = burn.period_start, min(burn.bill_through, burn.through) + timedelta(days=1)
    st.caption(f"Billed days: {start:%Y-%m-%d} to {end - timedelta(days=1):%Y-%m-%d}.")
    drivers = cache.derived("budget_drivers", (repr(settings), budget.name, start, end),
                            lambda: budget_drivers.drivers(budget, allocation.Rules.of(settings), start, end))
    explained = (f"The allocation of the bill (as on the Costs page) splits this budget's "
                 f"{money(drivers.total, currency)} of effective cost")
    if burn.basis == "allocated":
        st.caption(md(explained + ": the billed part of the spend above. Each table adds up to it."))
    else:
        st.caption(md(explained + f" over the same bill lines; the budget counts their billed cost, "
                      f"{money(burn.billed, currency)}. The two differ by what the bill amortizes (commitments' "
                      "upfront fees and unused shares, discounts); each table adds up to the effective cost."))
    buckets_col, projects_col = st.columns(2)
    buckets_col.caption("By bucket")
    show(drivers.buckets[["label", "cost"]], buckets_col, currency=currency)
    projects_col.caption(md(f"By project (the run's, else the bill line's {settings.reconciliation.project_tag} "
                            "tag; (no project) when neither names one)"))
    show(drivers.projects, projects_col, currency=currency)
    st.caption("What it went to: runs, model versions, idle GPU nodes, shared services and charges, "
               "unallocated compute; costliest first")
    show(drivers.items, currency=currency)
est_start = (burn.period_start if not billed_days else burn.bill_through + timedelta(days=1))
if burn.through is not None and est_start <= burn.through:
    start, end = est_start, burn.through + timedelta(days=1)
    st.caption(f"Estimated days: {start:%Y-%m-%d} to {burn.through:%Y-%m-%d}. Costliest runs started then "
               "(estimated cost)")
    show(cache.fetch(queries.budget_top_runs, budget, start, end)[
        ["run_id", "project", "team", "instance_type", "started_at", "cost_usd"]],
        labels={"cost_usd": "Estimated cost (USD)"})
    services_col, projects_col = st.columns(2)
    services_col.caption("Services (estimated)")
    show(cache.fetch(queries.budget_top_services, budget, (settings.reconciliation.project_tag,
         settings.reconciliation.team_tag), False, start, end), services_col, currency="USD",
         labels={"cost": "Estimated cost (USD)"})
    projects_col.caption("Projects (estimated)")
    show(cache.fetch(queries.budget_top_projects, budget, (settings.reconciliation.project_tag,
         settings.reconciliation.team_tag), False, start, end), projects_col, currency="USD",
         labels={"cost": "Estimated cost (USD)"})

st.subheader("Alert thresholds")
st.write(f"Alerts at {', '.join(f'{p:g} %' for p in budget.actual_thresholds_pct) or 'no'} of the budget spent "
         f"and {', '.join(f'{p:g} %' for p in budget.forecast_thresholds_pct) or 'no'} forecast; Slack channel "
         f"**{budget.channel or 'default'}**; owner **{budget.owner or 'not set'}**. `mlcost alerts check` sends "
         "them (see the **Alerts** page).")
