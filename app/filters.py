"""The sidebar filters every page shares: date range, projects, teams."""
from __future__ import annotations

from metrics.filters import STRAY_GAP_DAYS, Filters, bulk_span  # noqa: F401  (pages and tests import them from here)


def sidebar(choices: dict) -> Filters:
    """Draw the filters from `choices` (queries.filter_choices) and return what is picked."""
    import streamlit as st

    st.sidebar.header("Filters")
    first, last = choices["first_day"], choices["last_day"]
    start = end = None
    if first is not None:
        span = bulk_span(choices.get("days") or [first, last]) or (first, last)
        if span != (first, last):
            st.sidebar.caption(f"The data runs from {first:%Y-%m-%d} to {last:%Y-%m-%d}; the default range leaves out "
                               f"the few days more than {STRAY_GAP_DAYS} days away from the rest. Pick any range.")
        # A range left at the full span follows the data as new loads widen it.
        if st.session_state.get("date_range") in (None, st.session_state.get("data_span")):
            st.session_state["date_range"] = span
        st.session_state["data_span"] = span
        picked = st.sidebar.date_input("Date range (UTC)", key="date_range")
        if isinstance(picked, (tuple, list)) and len(picked) == 2:
            start, end = picked
        elif isinstance(picked, (tuple, list)) and len(picked) == 1:
            start = end = picked[0]
    projects = st.sidebar.multiselect("Project", choices["projects"], key="projects", placeholder="All projects")
    teams = st.sidebar.multiselect("Team", choices["teams"], key="teams", placeholder="All teams")
    return Filters(start, end, tuple(projects), tuple(teams))
