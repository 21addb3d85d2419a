"""The settings as pages use them: a settings file that cannot be used stops the page with one message."""
from __future__ import annotations

import streamlit as st

from ingest.settings import config


def load_or_stop() -> config.Config:
    """config.load(), or an error naming the file and key and the end of this page's run."""
    try:
        return config.load()
    except config.ConfigError as error:
        st.error(f"The settings file cannot be used: {error}")
        st.stop()


def energy_or_defaults() -> config.Energy:
    """The [energy] settings, or the shipped defaults with a warning when the file cannot be used
    (emissions are a side figure: the page goes on)."""
    try:
        return config.load().energy
    except config.ConfigError as error:
        st.warning(f"The settings file cannot be used ({error}); emissions use the shipped defaults.")
        return config.Energy()
