"""Idle GPUs: idle GPU-hours, kWh and dollars from the GPU traces, who held them, right-size candidates, holes."""
import pandas as pd
import streamlit as st

from app import cache, settings as settings_page, settings_forms
from metrics import queries
from present import charts
from app.tables import show
from present.format import md, usd

st.title("Idle GPUs")
picked = st.session_state["filters"]
stored = cache.fetch(queries.gpu_rollup_rule)
if stored.empty:
    st.info("No GPU traces yet. Load some with `mlcost ingest gpu_traces/` (files of `mlcost collect`, "
            "nvidia-smi or DCGM) or upload them on the **Data** page.")
    st.stop()
settings = settings_page.load_or_stop()

rule = stored.iloc[0]
power_max_w = None if pd.isna(rule["idle_power_max_w"]) else float(rule["idle_power_max_w"])
power = "" if power_max_w is None else f" and power ≤ {power_max_w:g} W"
st.caption(f"**Idle** = utilization ≤ {rule['idle_util_max_pct']:g} %{power} for at least "
           f"{rule['idle_min_s'] / 60:g} minutes in a row; shorter dips count as busy. Samples more than "
           f"{rule['max_gap_s']:g} s apart leave a coverage hole. `[gpu]` in mlcost.toml sets these. "
           "The date range selects minutes (UTC); project and team filters do not apply to GPUs.")
now = (settings.gpu.idle_util_max_pct, settings.gpu.idle_power_max_w, settings.gpu.idle_min_s, settings.gpu.max_gap_s)
if now != (rule["idle_util_max_pct"], power_max_w, rule["idle_min_s"], rule["max_gap_s"]):
    st.warning("mlcost.toml's `[gpu]` settings changed since these figures were computed: run `mlcost rollup`.")
settings_forms.idle_rule_form(settings.gpu)

models = cache.fetch(queries.gpu_models)
prices = tuple((name, str(settings.prices.gpu(name))) for name in models["gpu_name"]
               if settings.prices.gpu(name) is not None)
gpus = cache.fetch(queries.idle_by_gpu, picked, prices)
if gpus.empty or gpus["observed_h"].sum() == 0:
    st.info("No GPU samples in this date range: widen it in the sidebar.")
    st.stop()

idle_h, observed_h = gpus["idle_h"].sum(), gpus["observed_h"].sum()
allocated_h = gpus["allocated_idle_h"].sum()
unpriced = sorted(set(gpus.loc[gpus["usd_per_gpu_hour"].isna(), "gpu_name"].fillna("unnamed GPU")))
left, middle, right, last = st.columns(4)
left.metric("Idle GPU-hours", f"{idle_h:,.1f}")
left.caption(f"{100 * idle_h / observed_h:.1f} % of {observed_h:,.1f} observed GPU-hours")
middle.metric("Idle energy", f"{gpus['idle_kwh'].sum():,.1f} kWh")
estimated = sorted(set(gpus.loc[gpus["price_source"] == "catalog (estimated)", "host"]))
right.metric("Idle cost", usd(gpus["idle_usd"].sum() if gpus["idle_usd"].notna().any() else None),
             help="Idle GPU-hours x the node's cost per GPU-hour from its own bill lines in the date range "
                  "(effective cost over GPUs x hours billed, commitments included), so idle never costs more "
                  "than the node; a node without bill lines at the catalog's GPU-hour price "
                  "([prices.gpu_usd_per_hour]), an estimate.")
if estimated:
    right.caption(f"Estimated at catalog prices (no bill lines in the range): {', '.join(estimated)}")
if unpriced:
    right.caption(f"Not priced: {', '.join(md(name) for name in unpriced)}")
last.metric("Allocated but idle", f"{allocated_h:,.1f} GPU-h")
last.caption(f"a run held the GPU; {gpus['unallocated_idle_h'].sum():,.1f} GPU-h idle unallocated")

st.subheader("Idle hours per GPU and day")
by_day = cache.fetch(queries.idle_by_day, picked)
st.plotly_chart(cache.chart("idle_heatmap", (picked,), lambda: charts.idle_heatmap(by_day)), width="stretch")
_, _, period, left_out = charts.idle_heatmap_grid(by_day)
if period != "day" or left_out:  # a chart carries at most charts.MAX_POINTS cells
    st.caption((f"Idle hours per {period}: days x GPUs would exceed {charts.MAX_POINTS:,} cells. " if period != "day"
                else "") + (f"{left_out:,} GPUs that idled least are left out; the table below lists every GPU."
                            if left_out else ""))

st.subheader("Allocated but idle, or unallocated")
st.caption("Allocated: a training run named this GPU (by uuid or host and index) for that minute.")
st.plotly_chart(cache.chart("idle_split", (picked, prices), lambda: charts.idle_split(gpus)), width="stretch")
if len(gpus) > charts.IDLE_SPLIT_MAX_GPUS:
    st.caption(f"The chart shows the {charts.IDLE_SPLIT_MAX_GPUS:,} GPUs with the most idle hours of {len(gpus):,}.")

st.subheader("Utilization")
bin_pct = 5
st.plotly_chart(cache.chart("utilization_histogram", (picked, bin_pct, float(rule["idle_util_max_pct"])),
                            lambda: charts.utilization_histogram(cache.fetch(queries.utilization_histogram, picked,
                                                                             bin_pct),
                                                                 bin_pct, rule["idle_util_max_pct"])), width="stretch")

threshold = settings.gpu.right_size_util_pct
st.subheader("Right-size candidates")
candidates = cache.fetch(queries.right_size_candidates, picked, threshold)
st.caption(f"GPUs whose runs of a project average under {threshold:g} % utilization while they hold the GPU "
           "(`right_size_util_pct`): those jobs would likely fit a smaller, cheaper GPU.")
if candidates.empty:
    st.success("None in this date range.")
else:
    show(candidates)

st.subheader("Coverage holes")
holes = cache.fetch(queries.coverage_holes, picked)
if holes.empty:
    st.success("No holes: every GPU was sampled throughout.")
else:
    st.caption("No samples for longer than the maximum gap: these times count as neither idle nor busy.")
    show(holes)

st.subheader("Every GPU")
show(gpus, first=("host", "gpu_index", "idle_usd"))
