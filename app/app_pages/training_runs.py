"""Training runs: cost (or measured energy, emissions) against validation metric, the Pareto frontier,
cost-to-target, the run table with measured GPU energy."""
import streamlit as st

from app import cache, settings as settings_page
from metrics import queries
from present import charts
from app.tables import show
from present.format import md, plural, usd

# x axis of the scatter: label -> (column, axis title)
AXES = {"Cost": ("cost_usd", "Cost (USD)"),
        "GPU energy": ("gpu_energy_kwh", "Measured GPU energy (kWh)"),
        "Emissions": ("gpu_emissions_kg", "GPU emissions (kg CO₂e)")}

TABLE_ROWS = 1000  # runs listed in the page's table; the CSV has every run

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
target = None if metrics.empty else target
factors = settings_page.energy_or_defaults().query_factors()
runs = cache.training_runs(picked, metric, target, factors)

if runs.empty:
    st.info("No training runs in this selection. Run `mlcost ingest PATH` or use the **Data** page.")
    st.stop()

def scatter(x: str, x_label: str) -> dict:
    """The scatter of `metric` against `x` and the counts its captions quote (built once per data
    version and choice: the runs are up to 100k rows)."""
    of_metric = runs[runs["val_metric_name"] == metric]
    ranked = of_metric.dropna(subset=["on_frontier"])
    return {"frontier": int((ranked["on_frontier"] == True).sum()),  # noqa: E712
            "dominated": int((ranked["on_frontier"] == False).sum()),  # noqa: E712
            "unranked": int(of_metric["status"].isin(["failed", "preempted", "running"]).sum()),
            "ranked": len(ranked), "traced": int(ranked[x].notna().sum()),
            "plotted": len(ranked.dropna(subset=["cost_usd", "val_metric", x])),
            "drawn": len(charts.cost_vs_metric_rows(ranked, x)),
            "figure": charts.cost_vs_metric(ranked, metric, goal, x, x_label,
                                            known=cache.fetch(queries.filter_choices)["projects"])}


def cheapest_to_target() -> tuple[int, object]:
    """How many runs reached the target, and the cheapest of them (a row) or None."""
    reached = runs.dropna(subset=["cost_to_target_usd"])
    return len(reached), None if reached.empty else reached.loc[reached["cost_to_target_usd"].astype(float).idxmin()]


if metric is not None:
    axis = st.segmented_control("x axis", list(AXES), default="Cost", key="runs_x_axis") or "Cost"
    x, x_label = AXES[axis]
    facts = cache.derived("runs_scatter", (picked, metric, target, factors, x), lambda: scatter(x, x_label))
    st.subheader(f"{axis} vs {md(metric)}")
    st.caption(f"{plural(facts['frontier'], 'run')} on the Pareto frontier (cheapest for their level of {md(metric)}, "
               f"per project); {facts['dominated']:,} dominated: another run of the project scored as well for less. "
               f"{plural(facts['unranked'], 'failed, preempted or running run')} not ranked: their metric is partial.")
    if x != "cost_usd":
        st.caption(f"Measured from GPU traces (emissions: x PUE x the grid's g CO₂e/kWh of the run's region, "
                   f"`[energy]` in mlcost.toml); {plural(facts['traced'], 'ranked run')} of "
                   f"{facts['ranked']} have traces. Symbols keep the cost frontier.")
    st.plotly_chart(facts["figure"], width="stretch")
    if facts["drawn"] < facts["plotted"]:  # the chart keeps the frontier and the cheapest dominated runs
        st.caption(f"The chart shows {facts['drawn']:,} of these {facts['plotted']:,} runs (at most "
                   f"{charts.MAX_POINTS:,} points): the frontier runs first, then the cheapest dominated ones. "
                   "The CSV below has them all.")
    reached, cheapest = cache.derived("runs_target", (picked, metric, target, factors), cheapest_to_target)
    if cheapest is not None:
        st.caption(f"{plural(reached, 'run')} reached the target; cheapest to get there: "
                   f"**{md(cheapest['run_id'])}** at {usd(cheapest['cost_to_target_usd'])} "
                   f"after {cheapest['time_to_target_h']:.2f} h.")

st.subheader("All runs")
if len(runs) > TABLE_ROWS:  # a browser table of 100k rows costs seconds to send and to draw
    st.caption(f"The table shows the {TABLE_ROWS:,} newest of {len(runs):,} runs; narrow the sidebar's filters "
               "to see others, or download the CSV of them all.")
shown = runs.head(TABLE_ROWS)
show(shown, first=("run_id", "run_name", "project", "cost_usd", "cost_source", "energy_kwh", "val_metric",
                   "val_metric_name", "status", "started_at"))
st.download_button(f"Download CSV ({len(runs):,} runs)", cache.training_runs_csv(picked, metric, target, factors),
                   file_name="training_runs.csv", mime="text/csv", icon=":material/download:")
