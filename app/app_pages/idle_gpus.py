"""Idle GPUs: idle GPU-hours, kWh and dollars from the GPU traces, who held them, right-size candidates, holes."""
import pandas as pd
import streamlit as st

from datetime import timedelta

from app import cache, settings as settings_page, settings_forms
from app.hour_of_week import zone_picker
from metrics import allocation, hour_of_week, idle, queries
from present import charts, charts_idle
from app.tables import show
from present.format import md, money

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

# Idle cost and its two parts: metrics/idle.py, the figures of the Costs page, the Retrospective and the report.
start, end = picked.start, picked.end + timedelta(days=1)
rules, gpu_prices = allocation.Rules.of(settings), tuple(settings.prices.gpu_usd_per_hour.items())
found = cache.derived("idle_cost", (start, end, rules, gpu_prices), lambda: idle.idle_cost(start, end, rules, gpu_prices))
observed_h = gpus["observed_h"].sum()
unpriced = sorted(set(gpus.loc[gpus["usd_per_gpu_hour"].isna(), "gpu_name"].fillna("unnamed GPU")))
# The headline is one currency's: USD (bill lines in USD and the catalog's estimate), else the bill's currency.
billed = found.billed.get("USD") or next(iter(found.billed.values()), None)
headline = [p.shown() for p in (billed, found.estimated) if p is not None and p.currency == (billed or found.estimated).currency]
currency = (billed or found.estimated).currency if headline else "USD"
idle_h = sum(s.gpu_hours for s in headline)
held_h = sum(s.held_gpu_hours for s in headline)
left, middle, right, last = st.columns(4)
left.metric("Idle GPU-hours", f"{idle_h:,.1f}")
left.caption(f"{100 * idle_h / observed_h:.1f} % of {observed_h:,.1f} observed GPU-hours")
middle.metric("Idle energy", f"{gpus['idle_kwh'].sum():,.1f} kWh")
right.metric("Idle cost", money(sum(s.cost for s in headline), currency) if headline else "—",
             help="Idle GPU-hours x the node's cost per GPU-hour from its own bill lines whose charge period "
                  "starts in the date range (a line's effective cost over its GPU-hours, commitments included, as "
                  "the Costs page allocates it), so idle never costs more than the node; a host without bill lines "
                  "at the catalog's GPU-hour price ([prices.gpu_usd_per_hour]), an estimate.")
if headline:
    right.caption(f"= {money(sum(s.unallocated_cost for s in headline), currency)} not held by any run + "
                  f"{money(sum(s.held_cost for s in headline), currency)} held by runs while idle")
last.metric("Held by runs while idle", f"{held_h:,.1f} GPU-h")
last.caption("a run held the GPU but left it idle: the Costs page charges it to the run")
for parts in found.billed.values():  # the bill's figures: the Costs page's Idle GPUs bucket is the first part
    st.markdown(f"**{idle.parts_text(parts)}**; {idle.hours_text(parts)}"
                + (f" ({parts.currency} bill lines)." if len(found.billed) > 1 else "."))
if found.estimated:
    catalog = settings.prices.source_of("gpu_usd_per_hour", None)
    st.caption(idle.estimated_text(found) + (f" Catalog: {md(catalog)}." if catalog else ""))
if unpriced:
    st.caption(f"Not priced: {', '.join(md(name) for name in unpriced)}")

st.subheader("Idle hours per GPU and day")
by_day = cache.fetch(queries.idle_by_day, picked)
st.plotly_chart(cache.chart("idle_heatmap", (picked,), lambda: charts_idle.idle_heatmap(by_day)), width="stretch")
_, _, period, left_out = charts_idle.idle_heatmap_grid(by_day)
if period != "day" or left_out:  # a chart carries at most charts.MAX_POINTS cells
    st.caption((f"Idle hours per {period}: days x GPUs would exceed {charts.MAX_POINTS:,} cells. " if period != "day"
                else "") + (f"{left_out:,} GPUs that idled least are left out; the table below lists every GPU."
                            if left_out else ""))

st.subheader("Held by runs while idle, or not held by any run")
st.caption("Held: a training run named this GPU (by uuid or host and index) for that minute.")
st.plotly_chart(cache.chart("idle_split", (picked, prices), lambda: charts_idle.idle_split(gpus)), width="stretch")
if len(gpus) > charts_idle.IDLE_SPLIT_MAX_GPUS:
    st.caption(f"The chart shows the {charts_idle.IDLE_SPLIT_MAX_GPUS:,} GPUs with the most idle hours of {len(gpus):,}.")

st.subheader("Utilization")
bin_pct = 5
st.plotly_chart(cache.chart("utilization_histogram", (picked, bin_pct, float(rule["idle_util_max_pct"])),
                            lambda: charts_idle.utilization_histogram(cache.fetch(queries.utilization_histogram, picked,
                                                                             bin_pct),
                                                                 bin_pct, rule["idle_util_max_pct"])), width="stretch")

st.subheader("By hour of the day and weekday")
zone = zone_picker(settings.dashboard.time_zone, "idle_gpus")
cells = cache.fetch(queries.gpu_hour_of_week, picked, zone)
st.markdown(md(hour_of_week.low_use_sentence(cells, settings.dashboard.low_util_pct, zone)))
st.caption("Every traced GPU. Utilization: the mean of the observed time in the cell; capacity: GPUs present, "
           "the GPU-hours traced in the cell over the hours of the data's span that fall in it. "
           "`[dashboard] low_util_pct` sets what counts as low utilization.")
hour_left, hour_right = st.columns(2)
hour_left.plotly_chart(cache.chart("gpu_hour_util", (picked, zone), lambda: charts.hour_of_week_heatmap(
    cells, "util_pct", "Utilization (%)", zone, "Blues", ",.1f")), width="stretch")
hour_right.plotly_chart(cache.chart("gpu_hour_present", (picked, zone), lambda: charts.hour_of_week_heatmap(
    cells, "gpus_present", "GPUs present", zone, "Greens", ",.1f")), width="stretch")

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
