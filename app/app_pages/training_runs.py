"""Training runs: cost (or measured energy, emissions) against validation metric, the Pareto frontier,
cost-to-target, the run table with measured GPU energy."""
import streamlit as st

from app import cache, settings as settings_page
from ingest.settings import config
from metrics import comparison, queries
from present import charts, charts_runs
from app.tables import show
from present.format import md, plural, usd

# x axis of the scatter: label -> (column, axis title)
AXES = {"Cost": ("cost_usd", "Cost (USD)"),
        "GPU energy": ("gpu_energy_kwh", "Measured GPU energy (kWh)"),
        "Emissions": ("gpu_emissions_kg", "GPU emissions (kg CO₂e)")}

# headers whose unit the column name's suffix cannot say (present.format.label)
LABELS = {"throughput_examples_per_s": "Throughput (examples/s)", "throughput_tokens_per_s": "Throughput (tokens/s)",
          "cost_efficiency_examples_per_usd": "Cost efficiency (examples per USD)",
          "usd_per_hour": "Cost per hour (USD/h)", "run_energy_kwh": "Energy, logged or traced (kWh)",
          "run_emissions_kg": "Emissions, from that energy (kg CO₂e)", "energy_per_1k_examples_wh": "Energy per 1,000 examples (Wh)",
          "cost_per_1k_examples_usd": "Cost per 1,000 examples (USD)", "to_target_basis": "To target from",
          "failed_before": "Failed before (runs)", "preempted_before": "Preempted before (runs)",
          "batch_size": "Batch size (examples)", "epochs": "Epochs", "price_source": "Catalog price source"}
MONEY = ("price_per_hour_usd", "cost_usd", "cost_per_1k_examples_usd", "usd_per_hour", "cost_to_target_usd",
         "cost_per_epoch_usd")
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
try:  # the catalog's sources and the comparison's thresholds; the shipped defaults when the file is unusable
    settings = config.load()
except config.ConfigError:
    settings = None
runs = cache.training_runs(picked, metric, target, factors, settings and settings.prices)

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
            "drawn": len(charts_runs.cost_vs_metric_rows(ranked, x)),
            "figure": charts_runs.cost_vs_metric(ranked, metric, goal, x, x_label,
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
                   f"**{md(cheapest['run_id'])}** at {usd(cheapest['cost_to_target_usd'])}"
                   + (" (an upper bound: its whole cost, as it logs only a final metric that meets the target)"
                      if cheapest["to_target_basis"] == "upper bound" else "")
                   + f" after {cheapest['time_to_target_h']:.2f} h.")

st.subheader("Throughput and cost efficiency by hardware")
hardware_by = st.segmented_control("Hardware", ["GPU type", "instance type"], default="GPU type",
                                   key="runs_hardware") or "GPU type"
hardware = cache.fetch(queries.hardware_throughput, picked, hardware_by)
if hardware.empty:
    st.caption("No run logs a throughput (throughput_examples_per_sec) with a cost.")
else:
    st.caption("Cost efficiency = throughput / (USD per hour) = examples per dollar (examples processed / cost "
               "over the hardware's runs). Throughput is comparable within a project only: each bar is one "
               "project on one hardware; log scale.")
    left, right = st.columns(2)
    left.plotly_chart(charts_runs.by_hardware(hardware, "throughput_examples_per_s", "Throughput (examples/s)",
                                         hardware_by), width="stretch")
    right.plotly_chart(charts_runs.by_hardware(hardware, "cost_efficiency_examples_per_usd",
                                          "Cost efficiency (examples per USD)", hardware_by), width="stretch")
    with st.expander("Table (with tokens/s where runs log it)"):
        show(hardware, money=(), labels=LABELS)

if runs["batch_size"].notna().any():
    st.subheader("Batch size")
    st.caption("Each completed run's batch size (from its `batch_size` field) against its throughput and its "
               "cost per 1,000 examples; log scales.")
    done = runs[runs["status"].fillna("completed") == "completed"]
    left, right = st.columns(2)
    left.plotly_chart(charts_runs.batch_size_scatter(done, "throughput_examples_per_s", "Throughput (examples/s)"),
                      width="stretch")
    right.plotly_chart(charts_runs.batch_size_scatter(done, "cost_per_1k_examples_usd", "Cost per 1,000 examples (USD)"),
                       width="stretch")

st.subheader("Cost per successful run")
st.caption("All runs' cost of a group / its completed runs: the cost of failed and preempted runs is charged "
           "to the runs that succeeded. Per run, the table below counts the failed and preempted runs of "
           "the same project, model and config (tag `config`, else instance type) since the config's "
           "previous completed run.")
success_by = st.selectbox("Group by", list(queries.GROUPINGS), key="runs_success_by")
success = cache.fetch(queries.cost_per_successful_run, picked, success_by)
show(success)

st.subheader("Compare two runs or groups")
rule = settings.comparison if settings else config.Comparison()
st.caption(f"Speedup = baseline wall-clock / candidate wall-clock; ratios = candidate / baseline. A candidate "
           f"that spends ≥ {rule.more_energy_pct:g} % more energy (or ≥ {rule.more_cost_pct:g} % more cost) "
           f"for ≤ {rule.better_metric_pct:g} % better metric is flagged (`[comparison]` in mlcost.toml).")
compare_by = st.selectbox("Compare", ["run", "tag", *comparison.GROUP_BY], key="compare_by")
if compare_by == "tag":
    tags = cache.fetch(queries.run_tags, picked)
    keys = sorted(tags["tag_key"].unique().tolist())
    tag_key = st.selectbox("Tag", keys, key="compare_tag") if keys else None
    of_key = tags[tags["tag_key"] == tag_key]
    choices = sorted(of_key["tag_value"].unique().tolist())

    def pick(value: str):
        return runs[runs["run_id"].isin(of_key.loc[of_key["tag_value"] == value, "run_id"])]
else:
    column = "run_id" if compare_by == "run" else comparison.GROUP_BY[compare_by]
    # runs: the table's newest TABLE_ROWS (a list of 100k options would cost seconds to send)
    choices = sorted((runs.head(TABLE_ROWS) if column == "run_id" else runs)[column].dropna().unique().tolist(), key=str)

    def pick(value: str):
        return runs[runs[column] == value]
if len(choices) < 2:
    st.caption(f"Fewer than two values of {compare_by} in this selection.")
else:
    left, right = st.columns(2)
    base_value = left.selectbox("Baseline", choices, index=0, key="compare_baseline")
    cand_value = right.selectbox("Candidate", choices, index=1, key="compare_candidate")
    result = comparison.compare(pick(base_value), pick(cand_value), rule)
    if result.flagged:
        st.warning(md(result.reason), icon=":material/flag:")
    elif result.reason:
        st.caption(md(result.reason))
    st.dataframe(comparison.table(result), hide_index=True, width="stretch",
                 column_config={"figure": "Figure", "baseline": "Baseline", "candidate": "Candidate",
                                "candidate vs baseline": "Candidate vs baseline"})

st.subheader("All runs")
if len(runs) > TABLE_ROWS:  # a browser table of 100k rows costs seconds to send and to draw
    st.caption(f"The table shows the {TABLE_ROWS:,} newest of {len(runs):,} runs; narrow the sidebar's filters "
               "to see others, or download the CSV of them all.")
shown = runs.head(TABLE_ROWS)
show(shown, first=("run_id", "run_name", "project", "cost_usd", "cost_source", "price_source", "run_energy_kwh",
                   "energy_source", "val_metric", "val_metric_name", "status", "throughput_examples_per_s",
                   "throughput_tokens_per_s", "cost_efficiency_examples_per_usd", "cost_per_1k_examples_usd",
                   "energy_per_1k_examples_wh", "cost_to_target_usd", "energy_to_target_kwh", "to_target_basis",
                   "run_emissions_kg", "cost_per_epoch_usd", "failed_before", "preempted_before", "started_at"),
     labels=LABELS, money=MONEY)
st.download_button(f"Download CSV ({len(runs):,} runs)",
                   cache.training_runs_csv(picked, metric, target, factors, settings and settings.prices),
                   file_name="training_runs.csv", mime="text/csv", icon=":material/download:")
