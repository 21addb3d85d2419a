"""The hour-of-day x weekday view's zone picker, shared by the Serving and Idle GPUs pages."""
from __future__ import annotations

import streamlit as st

from metrics import hour_of_week

CHOSEN_KEY = "hour_of_week_zone"  # the zone picked on either page, kept across pages


def _remember(widget: str) -> None:
    st.session_state[CHOSEN_KEY] = st.session_state[widget]


def zone_picker(default: str, page: str) -> str:
    """A selectbox of every IANA zone, opening on the zone last picked on either page, else on
    `default` ([dashboard] time_zone); the zone picked. Each page has its own widget (`page`):
    Streamlit drops a widget's state when a page without it runs, so the choice is kept apart."""
    zones = hour_of_week.zones()
    chosen = st.session_state.get(CHOSEN_KEY)
    if chosen not in zones:
        chosen = st.session_state[CHOSEN_KEY] = default if default in zones else "UTC"
    widget = f"{CHOSEN_KEY}_{page}"
    if st.session_state.get(widget) != chosen:  # new, or picked on the other page since
        st.session_state[widget] = chosen
    return st.selectbox("Time zone", zones, key=widget, on_change=_remember, args=(widget,),
                        help="Hours and weekdays on this zone's clock, daylight saving time included "
                             "(`[dashboard] time_zone` in mlcost.toml sets the one it opens on).")
