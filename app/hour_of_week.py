"""The hour-of-day x weekday view's zone picker, shared by the Serving and Idle GPUs pages."""
from __future__ import annotations

import streamlit as st

from metrics import hour_of_week

ZONE_KEY = "hour_of_week_zone"  # one choice for both pages


def zone_picker(default: str) -> str:
    """A selectbox of every IANA zone, opening on `default` ([dashboard] time_zone); the zone picked."""
    zones = hour_of_week.zones()
    if st.session_state.get(ZONE_KEY) not in zones:
        st.session_state[ZONE_KEY] = default if default in zones else "UTC"
    return st.selectbox("Time zone", zones, key=ZONE_KEY,
                        help="Hours and weekdays on this zone's clock, daylight saving time included "
                             "(`[dashboard] time_zone` in mlcost.toml sets the one it opens on).")
