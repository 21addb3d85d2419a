"""Serving: cost and energy per 1k requests by model version, over time, and the versions that made it worse."""
from datetime import datetime, timezone

import pandas as pd
import streamlit as st

from app import cache, settings as settings_page
from app.hour_of_week import zone_picker
from metrics import budgets, queries, serving_health
from present import charts, charts_serving
from app.tables import show
from present.format import md, usd

st.title("Serving")
picked = st.session_state["filters"]
totals = cache.fetch(queries.serving_totals, picked).iloc[0]

if totals["windows"] == 0:
    st.info("No serving windows in this selection. Load some with `mlcost ingest serving.jsonl` or "
            "upload them on the **Data** page — or widen the date range in the sidebar.")
    st.stop()
rule = settings_page.load_or_stop().serving

st.caption("The sidebar's date range selects windows by their start (UTC); the project and team "
           "filters are for training runs and do not apply to services.")
per_total = st.toggle("Per request, failed ones included", key="serving_per_total",
                      help="Off: per 1k successful requests, the figure regressions are judged on.")
unit = "requests" if per_total else "successful requests"
cost_column = "cost_per_1k_requests_usd" if per_total else "cost_per_1k_success_usd"
energy_column = "energy_wh_per_1k_requests" if per_total else "energy_wh_per_1k_success"
cost_label, energy_label = f"USD per 1k {unit}", f"Wh per 1k {unit}"  # short enough not to be cut off
windows = int(totals["windows"])

left, middle, right, last = st.columns(4)
left.metric("Requests", f"{int(totals['requests_total']):,}")
left.caption(f"{int(totals['services'])} services, {int(totals['versions'])} model versions")
middle.metric("Serving cost", usd(totals["cost_usd"]))
middle.caption(f"{int(totals['windows_with_cost']):,} of {windows:,} windows priced")
right.metric(cost_label, "—" if pd.isna(totals[cost_column]) else f"${float(totals[cost_column]):,.4f}")
last.metric(energy_label, "—" if pd.isna(totals[energy_column]) else f"{totals[energy_column]:,.2f} Wh")
last.caption(f"{int(totals['windows_with_energy']):,} of {windows:,} windows with energy")
if totals["windows_with_cost"] < windows:
    st.warning(f"{windows - int(totals['windows_with_cost']):,} of {windows:,} windows have no cost: no "
               "cost_usd, and no price for their instance type (or GPU) in the catalog, so the cost figures "
               "leave them out. Prices go in mlcost.toml `[prices.instance_usd_per_hour]` and apply to "
               "files loaded after.")

st.subheader("The last 24 hours of data against the 24 hours before")
through = budgets.as_of_day(datetime.now(timezone.utc).date())
if through is None:
    st.caption("No data before today.")
else:
    last, before, change = cache.derived("serving_24h", (through,), lambda: serving_health.cost_per_1k_24h(through))
    st.caption(f"Per service, every window (the sidebar's filters do not apply): {last.text()} against "
               f"{before.text()}, the figure the `cost_per_1k_jump` alert compares (it fires at "
               f"{rule.cost_per_1k_jump_ratio:g}× with at least {rule.cost_per_1k_min_requests:,} requests on "
               "both days).")
    if change.empty:
        st.info("No serving windows in these 48 hours.")
    else:
        jumps = cache.derived("serving_24h_jumps", (through, rule.cost_per_1k_jump_ratio, rule.cost_per_1k_min_requests),
                              lambda: serving_health.cost_per_1k_jumps(through, rule.cost_per_1k_jump_ratio,
                                                                       rule.cost_per_1k_min_requests)[2])
        if not jumps.empty:
            st.warning(f"Over the alert's threshold: {', '.join(md(s) for s in sorted(jumps['service']))}.")
        show(change.drop(columns=["new_versions_started_at"]),
             labels={"requests_before": "Requests, 24 h before", "requests_after": "Requests, last 24 h",
                     "cost_before_usd": "Cost, 24 h before (USD)", "cost_after_usd": "Cost, last 24 h (USD)",
                     "cost_per_1k_before_usd": "Per 1k requests, 24 h before (USD)",
                     "cost_per_1k_after_usd": "Per 1k requests, last 24 h (USD)",
                     "ratio": "Last 24 h / before (×)", "new_versions": "Versions new in the last 24 h"},
             kinds={"requests_before": "count", "requests_after": "count", "ratio": "number"},
             first=("service", "ratio", "new_versions"))

versions = cache.fetch(queries.serving_by_version, picked)
over_time = cache.fetch(queries.serving_over_time, picked)
st.subheader(f"Cost per 1k {unit} by model version")
st.plotly_chart(cache.chart("serving_by_version", (picked, cost_column),
                            lambda: charts_serving.serving_by_version(versions, cost_column, cost_label)), width="stretch")
st.caption(f"Over time, per UTC {over_time['bucket'].iloc[0]}; a dashed line marks a new model version.")
st.plotly_chart(cache.chart("serving_trend", (picked, cost_column),
                            lambda: charts_serving.serving_trend(over_time, cost_column, cost_label, versions)), width="stretch")

st.subheader(f"Energy per 1k {unit}")
unmetered = sorted(versions.loc[versions["windows_with_energy"] == 0, "service"].unique())
if unmetered:
    st.caption(f"No energy_kwh in the windows of {', '.join(md(s) for s in unmetered)}: their energy is unknown, not zero.")
if totals["windows_with_energy"] > 0:
    st.plotly_chart(cache.chart("serving_by_version", (picked, energy_column),
                                lambda: charts_serving.serving_by_version(versions, energy_column, energy_label)),
                    width="stretch")

st.subheader("By hour of the day and weekday")
settings = settings_page.load_or_stop()
zone = zone_picker(settings.dashboard.time_zone, "serving")
cells = cache.fetch(queries.serving_hour_of_week, picked, zone)
st.caption(f"Every service, on the clock of {md(zone)}. Requests per hour: a cell's requests over the hours of the "
           "data's span that fall in it; cost per 1k: a cell's cost over its requests. A window spanning more than "
           "one hour is split across its hours in proportion to the time it spends in each.")
hour_left, hour_right = st.columns(2)
hour_left.plotly_chart(cache.chart("serving_hour_requests", (picked, zone), lambda: charts.hour_of_week_heatmap(
    cells, "requests_per_h", "Requests per hour", zone, "Blues", ",.0f")), width="stretch")
hour_right.plotly_chart(cache.chart("serving_hour_cost", (picked, zone, cost_column),
                                    lambda: charts.hour_of_week_heatmap(cells, cost_column, cost_label, zone,
                                                                        "Oranges", "$,.4f")), width="stretch")

st.subheader("Latency against cost")
st.caption("One point per model version and percentile: the request-weighted mean of its windows' p50 and p95.")
st.plotly_chart(cache.chart("latency_vs_cost", (picked, cost_column),
                            lambda: charts_serving.latency_vs_cost(versions, cost_column, cost_label)), width="stretch")

st.subheader("Error rate, throughput and utilization")
for tab, (column, label) in zip(st.tabs(["Error rate", "Throughput", "GPU utilization", "CPU utilization"]), [
        ("error_rate", "Failed share of requests"), ("throughput_rps", "Requests per second"),
        ("avg_gpu_util_pct", "Mean GPU utilization (%)"), ("avg_cpu_util_pct", "Mean CPU utilization (%)")]):
    tab.plotly_chart(cache.chart("serving_trend", (picked, column),
                                 lambda: charts_serving.serving_trend(over_time, column, label, versions)), width="stretch")

st.subheader("Regressions")
st.caption(f"A model version whose cost or energy per 1k successful requests is more than "
           f"{rule.regression_pct:g} % worse than the previous version of its service, among versions "
           f"with at least {rule.min_requests:,} successful requests (`[serving]` in mlcost.toml).")
regressions = cache.fetch(queries.serving_regressions, picked, rule.regression_pct, rule.min_requests)
if regressions.empty:
    st.success("No regressions in this selection.")
else:
    show(regressions[["service", "metric", "from_version", "to_version", "start_date", "change_pct", "before",
                      "after", "to_requests_success"]],
         labels={"change_pct": "Worse by (%)", "before": "Before (per 1k successful)",
                 "after": "After (per 1k successful)"})

st.subheader("Every model version")
show(versions, first=("service", "model_version", "cost_usd"))
