"""The dashboard's caching: query results keyed by the data version, so new loads show at once."""
from __future__ import annotations

from datetime import date
from typing import Callable

import pandas as pd
import streamlit as st

from app import alerts, allocation, budgets, queries, retrospective
from ingest import config

RESULT_TTL_S = 600
VERSION_TTL_S = 2


@st.cache_data(ttl=VERSION_TTL_S, show_spinner=False)
def _data_version() -> int:
    return queries.data_version()


@st.cache_data(ttl=RESULT_TTL_S, max_entries=256, show_spinner=False)
def _cached(name: str, version: int, args: tuple) -> object:
    return getattr(queries, name)(*args)


def fetch(query: Callable[..., pd.DataFrame], *args: object) -> pd.DataFrame:
    """query(*args) from the cache, recomputed whenever the warehouse has a newer load."""
    return _cached(query.__name__, _data_version(), args)


def forget() -> None:
    """Drop every cached result (after this process loaded something)."""
    st.cache_data.clear()


@st.cache_data(ttl=RESULT_TTL_S, max_entries=16, show_spinner="Assembling the month…")
def _retrospective(month: date, version: int, settings: str) -> retrospective.Retrospective:
    return retrospective.build(month, config.load())


def month_retrospective(month: date, settings: config.Config) -> retrospective.Retrospective:
    """retrospective.build(month) from the cache, recomputed on a newer load or other settings;
    its decisions log is read fresh (entries are written on the page, not loaded)."""
    retro = _retrospective(month, _data_version(), repr(settings))
    retro.decisions = queries.decisions(month)
    return retro


@st.cache_data(ttl=RESULT_TTL_S, max_entries=16, show_spinner=False)
def _burns(as_of: date, version: int, settings: str) -> list[budgets.Burn]:
    loaded = config.load()
    return [budgets.burn(budget, loaded, as_of) for budget in loaded.budgets]


def budget_burns(as_of: date, settings: config.Config) -> list[budgets.Burn]:
    """Every configured budget's burn as of `as_of`, recomputed on a newer load or other settings."""
    return _burns(as_of, _data_version(), repr(settings))


@st.cache_data(ttl=RESULT_TTL_S, max_entries=16, show_spinner="Evaluating the alert rules…")
def _alert_conditions(as_of: date, version: int, settings: str) -> list[alerts.Alert]:
    return alerts.evaluate(config.load(), as_of)


def alert_conditions(as_of: date, settings: config.Config) -> list[alerts.Alert]:
    """alerts.evaluate(as_of): the alerts whose condition holds, recomputed on a newer load or other settings."""
    return _alert_conditions(as_of, _data_version(), repr(settings))


@st.cache_data(ttl=RESULT_TTL_S, max_entries=64, show_spinner="Allocating the bill…")
def _allocation(name: str, version: int, args: tuple) -> object:
    return getattr(allocation, name)(*args)


def allocated(function: Callable[..., object], *args: object) -> object:
    """app/allocation.function(*args) from the cache, recomputed whenever the warehouse has a newer load."""
    return _allocation(function.__name__, _data_version(), args)
