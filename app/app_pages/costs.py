"""Costs: a month's bill allocated to training runs, serving model versions, idle GPUs, shared
costs and what is unallocated, split by team, project, namespace or any tag, with drill-down."""
import pandas as pd
import streamlit as st

from app import cache, settings as settings_page
from metrics import allocation, idle
from app.tables import show
from present import charts_money
from present.format import money

st.title("Costs")
months = cache.allocated(allocation.bill_months)
if not months:
    st.info("No bill yet: the costs here come from your cloud bill. Load a FOCUS, AWS CUR, GCP or Azure "
            "export with `mlcost ingest bill.csv.gz` or on the **Data** page.")
    st.stop()
settings = settings_page.load_or_stop()
rules = allocation.Rules.of(settings)

month = st.selectbox("Month (UTC)", months, format_func=lambda m: f"{m:%B %Y}", key="costs_month")
start, end = allocation.month_span(month)
st.caption("Every dollar of the bill's effective cost (amortized: commitments included; credits and taxes as "
           "themselves) lands in exactly one bucket, by the first rule that applies; a bill line belongs to the "
           "month its charge period starts in. The sidebar filters do not apply here. The same figures: "
           f"`mlcost allocation --month {month:%Y-%m}`.")
found = cache.allocated(allocation.totals, start, end, rules)
found = found[found["lines"] > 0]
if found.empty:
    st.info("No bill line of this month has an effective cost.")
    st.stop()
currencies = found["billing_currency"].tolist()
currency = st.selectbox("Currency", currencies, key="costs_currency") if len(currencies) > 1 else currencies[0]

key = st.selectbox("Split by", cache.allocated(allocation.key_choices, start, end), key="costs_key",
                   help="team and project: a run's own, else the bill line's tag; namespace and pod: DCGM "
                        "labels of the node, else a tag; any other key: the run's tag, else the line's tag.")
table = cache.allocated(allocation.figures, start, end, key, rules)
result = allocation.summarize(start, end, key, found, table)["currencies"][currency]
billed = result["billed"]

st.metric(f"Billed in {month:%B %Y} ({currency}, effective cost)", money(billed, currency))
if result["lines_without_effective_cost"]:
    st.warning(f"{result['lines_without_effective_cost']:,} bill lines have no effective cost (the export "
               "lacks the columns it needs) and are left out.")
columns = st.columns(len(allocation.BUCKETS))
for column, bucket in zip(columns, allocation.BUCKETS):
    amount = result["buckets"][bucket]
    column.metric(allocation.BUCKET_LABELS[bucket].split(" (")[0], money(amount, currency))
    column.caption(f"{amount / billed * 100:.1f} % of the bill" if billed else "")
gpu_prices = tuple(settings.prices.gpu_usd_per_hour.items())
idle_found = cache.derived("idle_cost", (start, end, rules, gpu_prices),
                           lambda: idle.idle_cost(start, end, rules, gpu_prices))
if currency in idle_found.billed:  # metrics/idle.py: the bucket is the part no run held
    parts = idle_found.billed[currency]
    st.markdown(f"**{idle.parts_text(parts)}** (in Training runs); {idle.hours_text(parts)}.",
                help="Idle GPU time a run held is charged to that run, so the Idle GPUs bucket counts only the "
                     "idle time no run held; the Idle GPUs page and the Retrospective show both parts.")
st.caption("**Unallocated** is what no rule could place: compute matching no run, node or service, bill lines "
           "naming a run that is not loaded, and node hours that were neither a run's nor idle.")

st.subheader(f"By {key}")
keyed = table[(table["split"] == "key") & (table["billing_currency"] == currency)]
st.plotly_chart(charts_money.allocation_by_key(keyed, currency, key, allocation.BUCKET_LABELS), width="stretch")
pivot = keyed.pivot_table(index="key_value", columns="bucket", values="effective_cost", aggfunc="sum",
                          fill_value=0).reindex(columns=list(allocation.BUCKETS), fill_value=0).astype(float)
pivot.insert(0, "total", pivot.sum(axis=1))
pivot = pivot.sort_values("total", ascending=False).rename_axis(key).rename_axis(None, axis=1).reset_index()
show(pivot, currency=currency, labels={key: key[:1].upper() + key[1:]},
     kinds={c: "money" for c in pivot.columns[1:]})

st.subheader("GPU nodes")
nodes = allocation.nodes(table)
nodes = nodes[nodes["billing_currency"] == currency]
st.caption("A node's cost per GPU-hour is its own bill lines' effective cost over its GPU-hours (GPUs x hours "
           "billed); idle cost is that rate x idle GPU-hours: those no run held (the Idle GPUs bucket) and those a "
           "run held while idle (charged to the run), so it never exceeds the node's bill. Nodes without a bill "
           "line are priced from the catalog and marked estimated; they are not in the totals above.")
node_parts = idle_found.nodes[(idle_found.nodes["price_source"] == "bill")
                              & (idle_found.nodes["billing_currency"] == currency)].set_index("host")


def part(hosts: pd.Series, column: str) -> list:
    """One idle part (metrics/idle.py) per billed node."""
    return [float(node_parts.at[h, column]) if h in node_parts.index else None for h in hosts]


node_table = pd.DataFrame({
    "node": nodes["host"], "price source": "bill", "billed": nodes["billed"].astype(float),
    "per GPU-hour": nodes["rate_per_gpu_hour"].astype(float), "GPU-hours": nodes["gpu_hours"],
    "idle GPU-hours, no run": nodes["idle_gpu_hours"], "idle cost, no run": nodes["idle_gpu"].astype(float),
    "idle GPU-hours, held by runs": part(nodes["host"], "held_gpu_hours"),
    "idle cost, held by runs": part(nodes["host"], "held_cost"),
    "training": nodes["training"].astype(float), "unallocated": nodes["unallocated"].astype(float)})
unbilled = idle_found.nodes[idle_found.nodes["price_source"] != "bill"]
if not unbilled.empty:
    node_table = pd.concat([node_table, pd.DataFrame({
        "node": unbilled["host"], "price source": "catalog (estimated, USD)",
        "idle GPU-hours, no run": unbilled["unallocated_gpu_hours"].astype(float),
        "idle cost, no run": pd.to_numeric(unbilled["unallocated_cost"], errors="coerce"),
        "idle GPU-hours, held by runs": unbilled["held_gpu_hours"].astype(float),
        "idle cost, held by runs": pd.to_numeric(unbilled["held_cost"], errors="coerce")})], ignore_index=True)
if node_table.empty:
    st.caption("No traced GPU node in this month.")
else:
    hours = ("GPU-hours", "idle GPU-hours, no run", "idle GPU-hours, held by runs")
    show(node_table, currency=currency,
         labels={"node": "Node", "price source": "Price source", "idle GPU-hours, no run": "Idle GPU-hours, no run",
                 "idle cost, no run": "Idle cost, no run", "idle GPU-hours, held by runs": "Idle GPU-hours, held by runs",
                 "idle cost, held by runs": "Idle cost, held by runs"},
         kinds={"billed": "money", "per GPU-hour": "money", "idle cost, no run": "money",
                "idle cost, held by runs": "money", "training": "money", "unallocated": "money",
                **{name: "number" for name in hours}},
         places={name: 1 for name in hours})

st.subheader("Drill down")
view = st.segmented_control("Show", ["Rules", "Runs", "Model versions", "Bill lines"], default="Rules",
                            key="costs_drill") or "Rules"
if view == "Runs":
    runs = cache.allocated(allocation.runs, start, end, rules)
    runs = runs[runs["billing_currency"] == currency]
    st.caption("Each run's share of the bill (its tagged lines, its instance by resource id and time, its "
               "GPU-hours on a node) next to its own estimate; `cost source` says where the estimate comes from "
               "(given, derived = duration x logged price, catalog = estimated from the price catalog).")
    show(runs[["run_id", "project", "team", "allocated_cost", "estimated_cost_usd", "cost_source", "rules",
               "node_gpu_hours"]], currency=currency, labels={"estimated_cost_usd": "Own estimate (USD)"})
elif view == "Model versions":
    versions = cache.allocated(allocation.versions, start, end, rules)
    versions = versions[versions["billing_currency"] == currency]
    st.caption(f"Lines tagged `{rules.service_tag}` split between the service's model versions by the cost of "
               "their serving windows in the line's charge period.")
    show(versions[["service", "model_version", "allocated_cost", "lines", "rules"]], currency=currency)
elif view == "Bill lines":
    bucket = st.selectbox("Bucket", allocation.BUCKETS, format_func=allocation.BUCKET_LABELS.get,
                          index=allocation.BUCKETS.index("unallocated"), key="costs_bucket")
    pieces = cache.allocated(allocation.lines, start, end, rules, bucket)
    pieces = pieces[pieces["billing_currency"] == currency]
    st.caption("The largest 500 pieces: a bill line split between runs, idle and the rest shows once per part.")
    show(pieces[["charge_period_start", "effective_cost", "rule", "allocated_to", "service_name", "resource_id",
                 "instance_type", "line_effective_cost", "charge_category", "gpu_rule"]], currency=currency,
         labels={"effective_cost": f"Amount ({currency})"})
else:
    by_rule = table[(table["split"] == "bucket") & (table["billing_currency"] == currency)]
    show(pd.DataFrame({"bucket": by_rule["bucket"].map(allocation.BUCKET_LABELS), "rule": by_rule["rule"],
                       "effective_cost": by_rule["effective_cost"], "lines": by_rule["lines"]}),
         currency=currency, labels={"effective_cost": f"Amount ({currency})"})
