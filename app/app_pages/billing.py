"""Billing: cloud spend over time by provider, service, account or tag; charges by category
(credits and taxes as such); GPU instance spend; the top resources. Amounts in their currency."""
import streamlit as st

from app import cache, settings as settings_page
from metrics import queries
from present import charts_money
from app.tables import show
from present.format import md, money

st.title("Billing")
picked = st.session_state["filters"]
totals = cache.fetch(queries.billing_totals, picked)

if totals.empty:
    st.info("No bill lines in this selection. Load a FOCUS, AWS CUR, GCP or Azure export with "
            "`mlcost ingest bill.csv.gz`, pull one from S3 with `mlcost fetch s3://bucket/prefix`, or "
            "upload it on the **Data** page — or widen the date range in the sidebar.")
    st.stop()
gpu_rule = settings_page.load_or_stop().billing

st.caption("The sidebar's date range selects lines by the start of their charge period (UTC); the "
           "project and team filters are for training runs. Amounts are never added across currencies.")
currencies = totals["billing_currency"].tolist()
currency = st.selectbox("Currency", currencies, key="billing_currency") if len(currencies) > 1 else currencies[0]
row = totals.set_index("billing_currency").loc[currency]

left, middle, right, last = st.columns(4)
left.metric(f"Billed ({md(currency)})", money(row["billed_cost"], currency))
left.caption(f"{int(row['lines']):,} bill lines, {int(row['providers'])} provider(s)")
middle.metric("Effective cost", money(row["effective_cost"], currency),
              help="After commitment discounts, amortized (FOCUS EffectiveCost).")
right.metric("Credits", money(row["credit_cost"], currency), help="Credits and refunds, negative.")
last.metric("Taxes", money(row["tax_cost"], currency))

st.subheader("Spend over time")
dimension = st.selectbox("Split by", list(queries.BILLING_DIMENSIONS), index=1, key="billing_split")
tag_key = None
if dimension == "Tag":
    keys = cache.fetch(queries.billing_tag_keys, picked)
    if keys.empty:
        st.caption("No bill line in this selection carries tags.")
        st.stop()
    tag_key = st.selectbox("Tag", keys["tag_key"], key="billing_tag")
over_time = cache.fetch(queries.billing_spend_over_time, picked, currency, dimension, tag_key)
st.plotly_chart(cache.chart("billing_over_time", (picked, currency, dimension, tag_key),
                            lambda: charts_money.billing_over_time(over_time, currency, tag_key or dimension)),
                width="stretch")

st.subheader("Charges by category")
st.caption("Usage, purchases (fees, commitments), taxes, credits and adjustments per invoice month, "
           "each as billed: credits and corrections count below zero.")
categories = cache.fetch(queries.billing_by_category, picked, currency)
st.plotly_chart(cache.chart("billing_by_category", (picked, currency),
                            lambda: charts_money.billing_by_category(categories, currency)), width="stretch")
by_category = categories.pivot_table(index="month", columns="charge_category", values="billed_cost",
                                     aggfunc="sum", fill_value=0)
by_category.index = by_category.index.map(lambda month: str(month)[:7])  # 2026-08, not a midnight timestamp
show(by_category.rename_axis("month").rename_axis(None, axis=1).reset_index(), currency=currency,
     labels={"month": "Invoice month"}, kinds={c: "money" for c in by_category.columns} | {"month": "text"})

st.subheader("GPU instance spend")
gpu = cache.fetch(queries.billing_gpu_spend, picked, currency, gpu_rule.gpu_instance_families,
                  gpu_rule.gpu_sku_words)
st.caption(f"Usage lines of GPU instance families ({', '.join(gpu_rule.gpu_instance_families)}), Azure "
           f"N-series virtual machines, or whose description names the word(s) "
           f"{', '.join(repr(w) for w in gpu_rule.gpu_sku_words)} (`[billing]` in mlcost.toml); never "
           "a word inside a SKU or resource id.")
if gpu.empty:
    st.caption("No GPU spend in this selection.")
else:
    share = float(gpu["billed_cost"].sum()) / float(row["usage_cost"]) * 100 if row["usage_cost"] else None
    st.metric("GPU instance spend", money(gpu["billed_cost"].sum(), currency),
              help=None if share is None else f"{share:.1f} % of usage")
    st.plotly_chart(cache.chart("billing_gpu_spend", (picked, currency, gpu_rule),
                                lambda: charts_money.billing_gpu_spend(gpu, currency)), width="stretch")

st.subheader("Top resources")
resources = cache.fetch(queries.billing_top_resources, picked, currency)
show(resources, first=("resource_id", "billed_cost", "effective_cost"), currency=currency)

if len(currencies) > 1:
    st.subheader("Every currency")
    show(totals, currency="")  # one row per currency: each row's amounts are in its own
