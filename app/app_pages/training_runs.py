"""Training runs: cost (or measured energy, emissions) against validation metric, the Pareto frontier,
cost-to-target, the run table with measured GPU energy."""
import streamlit as st

from app import cache, charts, queries, settings as settings_page
from app.format import plural, usd, table

# x axis of the scatter: label -> (column, axis title)
AXES = {"Cost": ("cost_usd", "Cost (USD)"),
        "GPU energy": ("gpu_energy_kwh", "Measured GPU energy (kWh)"),
        "Emissions": ("gpu_emissions_kg", "GPU emissions (kg CO₂e)")}

st.title("Training runs")
picked = st.session_state["filters"]
metrics = cache.fetch(queries.metric_names, picked)

if metrics.empty:
    st.info("No runs with a validation metric in this selection. Load run summaries with "
            "`mlcost ingest runs.jsonl` or upload them on the **Data** page; CodeCarbon logs "
            "carry energy but no metric, so they appear in the table below only.")
    metric, goal = None, "max"
else:
    left, right = st.columns([2, 1])
    metric = left.selectbox("Validation metric", metrics["val_metric_name"], key="metric",
                            format_func=lambda m: f"{m} ({int(metrics.set_index('val_metric_name').at[m, 'runs'])} runs)")
    goal = metrics.set_index("val_metric_name").at[metric, "goal"]
    target = right.number_input(f"Target {metric} for cost-to-target", value=None, format="%.4f",
                                key=f"target_{metric}",
                                help="Empty: use each run's own target_metric, if it has one.")
runs = cache.fetch(queries.training_runs, picked, metric, None if metrics.empty else target)

if runs.empty:
    st.info("No training runs in this selection. Run `mlcost ingest PATH` or use the **Data** page.")
    st.stop()

factors = settings_page.energy_or_defaults().query_factors()
measured = cache.fetch(queries.run_energy_figures, picked, *factors)
runs = runs.merge(measured, on="run_id", how="left")

if metric is not None:
    of_metric = runs[runs["val_metric_name"] == metric]
    ranked = of_metric.dropna(subset=["on_frontier"])
    frontier, dominated = ranked[ranked["on_frontier"] == True], ranked[ranked["on_frontier"] == False]  # noqa: E712
    unranked = of_metric[of_metric["status"].isin(["failed", "preempted", "running"])]
    axis = st.segmented_control("x axis", list(AXES), default="Cost", key="runs_x_axis") or "Cost"
    x, x_label = AXES[axis]
    st.subheader(f"{axis} vs {metric}")
    st.caption(f"{plural(len(frontier), 'run')} on the Pareto frontier (cheapest for their level of {metric}, "
               f"per project); {len(dominated):,} dominated: another run of the project scored as well for less. "
               f"{plural(len(unranked), 'failed, preempted or running run')} not ranked: their metric is partial.")
    if x != "cost_usd":
        st.caption(f"Measured from GPU traces (emissions: x PUE x the grid's g CO₂e/kWh of the run's region, "
                   f"`[energy]` in mlcost.toml); {plural(ranked[x].notna().sum(), 'ranked run')} of "
                   f"{len(ranked)} have traces. Symbols keep the cost frontier.")
    st.plotly_chart(charts.cost_vs_metric(ranked, metric, goal, x, x_label), width="stretch")
    plotted = len(ranked.dropna(subset=["cost_usd", "val_metric", x]))
    if plotted > charts.MAX_POINTS:  # the chart keeps the frontier and the cheapest dominated runs
        st.caption(f"The chart shows {charts.MAX_POINTS:,} of these {plotted:,} runs: every frontier run and "
                   "the cheapest dominated ones. The table below lists them all.")
    reached = runs.dropna(subset=["cost_to_target_usd"])
    if not reached.empty:
        cheapest = reached.loc[reached["cost_to_target_usd"].astype(float).idxmin()]
        st.caption(f"{plural(len(reached), 'run')} reached the target; cheapest to get there: "
                   f"**{cheapest['run_id']}** at {usd(cheapest['cost_to_target_usd'])} "
                   f"after {cheapest['time_to_target_h']:.2f} h.")

st.subheader("All runs")
st.dataframe(runs, hide_index=True, width="stretch", **table(
    runs, first=("run_id", "project", "cost_usd", "val_metric", "val_metric_name", "status", "started_at")))
st.download_button("Download CSV", runs.to_csv(index=False).encode(), file_name="training_runs.csv",
                   mime="text/csv", icon=":material/download:")
