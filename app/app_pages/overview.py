"""Overview: the month to date — billed, forecast, split, top teams, budgets at risk, idle waste and
what changed — each figure from metrics/month.py, then what the filtered training runs cost."""
from datetime import datetime, timezone

import pandas as pd
import streamlit as st

from app import cache, settings as settings_page
from app.tables import show
from metrics import month as month_figures, queries
from present import charts_money
from present.format import count_of, kg_co2e, md, money, money_format, usd

st.title("Overview")


def pct(part, whole) -> str:
    return f"{part / whole * 100:.1f} %" if whole else ""


def change_text(change: month_figures.Change, currency: str) -> str | None:
    """'+$921.06 (+3.5 %)' for st.metric's delta, None without a previous figure."""
    if change.change is None:
        return None
    sign = "+" if change.change >= 0 else "-"
    share = f" ({change.change_pct:+.1f} %)" if change.change_pct is not None else ""
    return f"{sign}{money(abs(change.change), currency)}{share}"


def month_section() -> None:
    """The month to date (metrics/month.py); the sidebar filters do not apply to it."""
    settings = settings_page.load_or_stop()
    as_of = month_figures.as_of_day(datetime.now(timezone.utc).date())
    key = st.session_state.get("overview_key") or "team"  # the control is drawn by the top list, below
    now = cache.derived("month", (as_of, key, repr(settings)), lambda: month_figures.build(as_of, settings, key))
    st.subheader(f"{now.month:%B %Y} to date")
    if not now.currencies:
        st.info(f"No bill line of {now.month:%B %Y} yet: the month's billed cost, its split and its forecast "
                "show here once a bill is loaded (`mlcost ingest bill.csv.gz` or the **Data** page).")
        at_risk(now)
        return
    currencies = list(now.currencies)
    currency = (st.selectbox("Currency", currencies, key="overview_currency") if len(currencies) > 1
                else currencies[0])
    figures = now.currencies[currency]
    days = f"{now.month:%b} 1–{now.through.day}" if now.days > 1 else f"{now.month:%b} 1"
    before = (f"{now.previous_start:%b} 1–{(now.previous_end - now.previous_start).days}")
    shown_day = now.figures_day or now.through
    st.caption(f"Bill lines whose charge period starts {days} (the bill runs through {now.through:%b %d}; as of "
               f"{shown_day:%b %d}, as on the Budgets page), compared with the same days of last month "
               f"({before}). Effective cost: commitments amortized, credits and taxes as themselves. "
               "The sidebar filters do not apply to this part.")

    billed, forecast = st.columns(2, border=True)  # two by two: amounts with cents fit their cards
    idle, risk = st.columns(2, border=True)
    billed.metric(f"Billed so far ({currency})", money(figures.billed, currency),
                  delta=change_text(figures.changes[0], currency), delta_color="inverse",
                  help=f"Change against {before}.")
    if figures.changes[0].previous is not None:
        billed.caption(f"{money(figures.changes[0].previous, currency)} on {before}")
    billed.page_link("app_pages/costs.py", label="Costs", icon=":material/pie_chart:")
    burn = figures.forecast
    forecast.metric(f"Forecast for {now.month:%B}", money(burn.forecast, currency),
                    help="Spend so far + the mean daily spend of the last 7 days x the days left: the Budgets "
                         "page's forecast, for everything in this currency.")
    forecast.caption(f"{money(burn.rate_per_day, currency)}/day for the {burn.days_left} days left; "
                     f"{money(burn.forecast_low, currency)} to {money(burn.forecast_high, currency)}")
    forecast.page_link("app_pages/budgets.py", label="Budgets", icon=":material/account_balance_wallet:")
    idle_cost = figures.buckets["idle_gpu"]
    idle.metric("Idle GPUs not held by any run (largest waste)", money(idle_cost, currency),
                help="The bill's Idle GPUs bucket: GPU-hours on billed nodes that no run held, at each node's "
                     "own cost per GPU-hour (the Costs page's figure). Idle time a run held is charged to that "
                     "run; the Idle GPUs page shows both parts.")
    idle.caption(f"{figures.idle_gpu_hours:,.1f} idle GPU-hours, {pct(idle_cost, figures.billed)} of the bill"
                 + (f"; most on {md(figures.idle_nodes[0][0])} ({money(figures.idle_nodes[0][1], currency)})"
                    if figures.idle_nodes else ""))
    idle.page_link("app_pages/idle_gpus.py", label="Idle GPUs", icon=":material/memory:")
    risk.metric("Budgets at risk", f"{len(now.at_risk)}",
                help="Budgets spent, or forecast to be spent, past their amount within their period.")
    risk.caption(", ".join(md(b.budget.name) for b in now.at_risk) or "none")
    risk.page_link("app_pages/budgets.py", label="Budgets", icon=":material/account_balance_wallet:")

    st.markdown(f"**Where the money went, and what changed since {before}**")
    changes = figures.changes[1:] + figures.changes[:1]  # the buckets, then the bill they add up to
    st.dataframe(pd.DataFrame({
        "figure": [c.label for c in changes],
        "this month": [float(c.current) for c in changes],
        "share": [pct(c.current, figures.billed) for c in changes],
        "last month": [None if c.previous is None else float(c.previous) for c in changes],
        "change": [None if c.change is None else float(c.change) for c in changes],
        "change %": [c.change_pct for c in changes]}), hide_index=True, width="stretch",
        column_config={"figure": st.column_config.TextColumn("Bucket", width="large"),
                       "this month": st.column_config.NumberColumn(f"{days} ({currency})",
                                                                   format=money_format(currency)),
                       "share": st.column_config.TextColumn("Share of the bill"),
                       "last month": st.column_config.NumberColumn(f"{before} ({currency})",
                                                                   format=money_format(currency)),
                       "change": st.column_config.NumberColumn(f"Change ({currency})", format=money_format(currency)),
                       "change %": st.column_config.NumberColumn("Change (%)", format="%+.1f %%")})
    st.caption("Every dollar of the bill lands in one bucket, by the first rule that applies; the buckets add "
               "up to the bill.")
    left, right = st.columns(2)
    left.page_link("app_pages/costs.py", label="The split by rule, run, model version and bill line: Costs",
                   icon=":material/pie_chart:")
    right.page_link("app_pages/retrospective.py", label="The month against the last: Retrospective",
                    icon=":material/event_note:")

    left, right = st.columns([2, 3])
    with left:
        st.markdown(f"**Top {len(figures.top)} {key}s by allocated cost**")
        st.segmented_control("Rank", month_figures.KEYS, default="team", key="overview_key",
                             label_visibility="collapsed")
        st.dataframe(pd.DataFrame({key: [value for value, _ in figures.top],
                                   "allocated": [float(amount) for _, amount in figures.top],
                                   "share": [pct(amount, figures.billed) for _, amount in figures.top]}),
                     hide_index=True, width="stretch",
                     column_config={key: st.column_config.TextColumn(key[:1].upper() + key[1:]),
                                    "allocated": st.column_config.NumberColumn(
                         f"Allocated ({currency})", format=money_format(currency)),
                         "share": st.column_config.TextColumn("Share of the bill")})
        st.caption(f"Showback: each {key}'s runs, model versions and tagged lines. "
                   f"{money(figures.without_key, currency)} is on no {key} (shared, idle and untagged costs).")
        st.page_link("app_pages/costs.py", label=f"Every {key}: Costs", icon=":material/pie_chart:")
    with right:
        at_risk(now)


def at_risk(now: month_figures.Month) -> None:
    """The budgets spent or forecast past their amount, worst first."""
    st.markdown("**Budgets at risk**")
    if not now.budgets:
        st.caption("No budgets yet: add one on the Budgets page or in `mlcost.toml`.")
    elif not now.at_risk:
        st.caption(f"None of the {now.budgets} budgets is spent or forecast past its amount this period.")
    else:
        st.dataframe(pd.DataFrame([{
            "budget": b.budget.name,
            "spent": money(b.spent, b.budget.currency), "amount": money(b.budget.amount, b.budget.currency),
            "used %": round(b.used_pct, 1), "forecast %": round(b.forecast_pct, 1),
            "breach": f"reached {b.breach_day:%b %d}" if b.days_to_breach == 0 else f"{b.breach_day:%b %d} at this rate",
            "owner": b.budget.owner or ""} for b in now.at_risk]), hide_index=True, width="stretch",
            column_config={"budget": "Budget", "spent": "Spent", "amount": "Budget amount", "breach": "Breach",
                           "owner": "Owner",
                           "used %": st.column_config.NumberColumn("Used (%)", format="%.1f %%"),
                           "forecast %": st.column_config.NumberColumn("Forecast (%)", format="%.1f %%")})
    st.page_link("app_pages/budgets.py", label="Every budget, its drivers and its forecast: Budgets",
                 icon=":material/account_balance_wallet:")


month_section()
st.divider()

st.subheader("Training runs")
picked = st.session_state["filters"]
factors = settings_page.energy_or_defaults().query_factors()
totals = cache.fetch(queries.overview_totals, picked, *factors).iloc[0]

if totals["runs"] == 0:
    st.info("No training runs in this selection. Load some with `mlcost ingest PATH` or upload "
            "run logs on the **Data** page — or widen the filters in the sidebar.")
    st.stop()

st.caption("Estimated from the run logs (hours x price, or the run's own cost), over the sidebar's date range, "
           "projects and teams.")
runs = int(totals["runs"])
left, middle, right, last = st.columns(4)
left.metric("Training runs", f"{runs:,}")
left.page_link("app_pages/training_runs.py", label="Training runs", icon=":material/model_training:")
middle.metric("Estimated training cost", usd(totals["cost_usd"]),
              help="Sum of each run's estimated cost (given, or hours × price per hour).")
middle.caption(count_of(totals["runs_with_cost"], runs, "priced"))
right.metric("Measured energy", "—" if totals["runs_with_energy"] == 0 else f"{totals['energy_kwh']:,.2f} kWh")
from_traces = int(totals["runs_energy_from_traces"])
right.caption(count_of(totals["runs_with_energy"], runs, "measured")
              + (f" ({from_traces:,} from GPU traces)" if from_traces else ""))
last.metric("Emissions", "—" if totals["runs_with_emissions"] == 0 else kg_co2e(totals["emissions_kg"]),
            help="A run's own emissions, else its measured GPU energy × PUE × the grid's g CO₂e/kWh "
                 "of its region (`[energy]` in mlcost.toml).")
last.caption(count_of(totals["runs_with_emissions"], runs, "measured")
             + (f" ({from_traces:,} from GPU traces)" if from_traces else ""))

st.markdown("**Estimated cost by month**")
by_month = cache.fetch(queries.spend_by_month, picked)
if by_month["cost_usd"].notna().any():
    st.plotly_chart(cache.chart("spend_by_month", (picked,), lambda: charts_money.spend_by_month(
        by_month, known=cache.fetch(queries.filter_choices)["projects"])), width="stretch")
else:
    st.caption("None of these runs has a price or a cost yet, so there is no spend to chart.")

st.markdown("**Most expensive runs**")
top = cache.fetch(queries.top_runs, picked)
show(top, first=("run_id", "project", "cost_usd"))
