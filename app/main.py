"""The dashboard entrypoint: page navigation and the shared sidebar filters."""
from __future__ import annotations

import streamlit as st

from app import cache, filters, queries
from ingest import warehouse

st.set_page_config(page_title="mlcost", page_icon=":material/savings:", layout="wide")

PAGES = [
    st.Page("app_pages/overview.py", title="Overview", icon=":material/dashboard:", default=True),
    st.Page("app_pages/costs.py", title="Costs", icon=":material/pie_chart:"),
    st.Page("app_pages/training_runs.py", title="Training runs", icon=":material/model_training:"),
    st.Page("app_pages/serving.py", title="Serving", icon=":material/dns:"),
    st.Page("app_pages/idle_gpus.py", title="Idle GPUs", icon=":material/memory:"),
    st.Page("app_pages/billing.py", title="Billing", icon=":material/receipt_long:"),
    st.Page("app_pages/reconciliation.py", title="Reconciliation", icon=":material/compare_arrows:"),
    st.Page("app_pages/budgets.py", title="Budgets", icon=":material/account_balance_wallet:"),
    st.Page("app_pages/alerts.py", title="Alerts", icon=":material/notifications:"),
    st.Page("app_pages/retrospective.py", title="Retrospective", icon=":material/event_note:"),
    st.Page("app_pages/data.py", title="Data", icon=":material/upload_file:"),
]

page = st.navigation(PAGES)
try:
    st.session_state["filters"] = filters.sidebar(cache.fetch(queries.filter_choices))
except warehouse.WarehouseBusy as busy:
    st.error(str(busy))
    st.stop()
st.sidebar.caption(f"Warehouse: `{warehouse.db_path()}`")
page.run()
