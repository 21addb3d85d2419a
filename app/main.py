"""The dashboard entrypoint: page navigation and the shared sidebar filters."""
from __future__ import annotations

import streamlit as st

from app import access, cache, filters
from metrics import queries
from present.format import md
from ingest.engine import warehouse

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

RETRY_S = 5


def busy(error: warehouse.WarehouseBusy) -> None:
    """The 'warehouse busy, retrying' state: what holds the file, and a full rerun every RETRY_S."""
    st.warning(f"**Warehouse busy, retrying** every {RETRY_S} s: {md(error)}", icon=":material/hourglass_top:")
    st.session_state["busy_ticks"] = 0

    @st.fragment(run_every=RETRY_S)
    def retry() -> None:
        st.session_state["busy_ticks"] += 1
        if st.session_state["busy_ticks"] > 1:  # not the first run, drawn with the page
            st.rerun(scope="app")

    retry()


access.require_login()
access.warn_if_exposed()
page = st.navigation(PAGES)
try:
    # one read connection for the render's queries, let go when idle or when a loader waits
    with warehouse.session():
        st.session_state["filters"] = filters.sidebar(cache.fetch(queries.filter_choices))
        lake = warehouse.lake_url()
        st.sidebar.caption((f"Warehouse: the lake `{lake}` (local state in `{warehouse.db_path()}`)" if lake
                            else f"Warehouse: `{warehouse.db_path()}`")
                           + (" (read-only)" if access.read_only() else ""))
        page.run()
except warehouse.WarehouseBusy as error:  # an ingest held the file longer than the lock wait
    busy(error)
