"""The dashboard's caching: query results keyed by the data version, so new loads show at once."""
from __future__ import annotations

import dataclasses
from datetime import date
from typing import Callable

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from metrics import allocation, budgets, price_sources, queries, retrospective
from outputs import alerts
from metrics.filters import Filters
from present.format import csv_bytes
from ingest.settings import config

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


@st.cache_resource(ttl=RESULT_TTL_S, max_entries=64, show_spinner=False)
def _derived(name: str, version: int, key: tuple, _build: Callable[[], object]) -> object:
    return _build()


def derived(name: str, key: tuple, build: Callable[[], object]) -> object:
    """build() from the cache: one value per `name` and `key` (every input it depends on besides
    the data) until the warehouse has a newer load; for what a page derives from cached results
    (figures, counts over 100k rows). Shared, never copied (st.cache_resource): never change it."""
    return _derived(name, _data_version(), key, build)


def chart(name: str, key: tuple, build: Callable[[], go.Figure]) -> go.Figure:
    """derived() for a figure: unpickling a plotly figure validates every property again, which
    costs as much as building it, so figures are shared; pages only draw them."""
    return derived(name, key, build)


@st.cache_resource(ttl=RESULT_TTL_S, max_entries=16, show_spinner=False)  # shared, as _shared
def _training_runs(version: int, filters: Filters, metric: str | None, target: float | None,
                   factors: tuple, catalog_key: str = "", _prices=None) -> pd.DataFrame:
    runs = queries.training_runs(filters, metric, target, *factors)
    if _prices is not None:
        runs = runs.assign(price_source=price_sources.price_source(runs, _prices))
    return runs.merge(queries.run_energy_figures(filters, *factors), on="run_id", how="left")


def catalog_key(prices) -> str:
    """A text that changes whenever the price catalog's names, sources or dates do (the cache key
    of the runs' price_source; the Prices object itself is not hashable)."""
    return repr((sorted(prices.instance_usd_per_hour), sorted(prices.gpu_usd_per_hour),
                 sorted(prices.source.items()), sorted(prices.as_of.items())))


def training_runs(filters: Filters, metric: str | None, target: float | None, factors: tuple,
                  prices=None) -> pd.DataFrame:
    """queries.training_runs with each run's measured GPU energy and emissions
    (queries.run_energy_figures with the energy `factors`) and, given the catalog `prices`, the
    price_source of runs priced from it; recomputed on a newer load; shared between reruns and
    sessions: never change it in place."""
    return _training_runs(_data_version(), filters, metric, target, factors,
                          "" if prices is None else catalog_key(prices), prices)


@st.cache_data(ttl=RESULT_TTL_S, max_entries=4, show_spinner="Writing the CSV…")
def _training_runs_csv(version: int, filters: Filters, metric: str | None, target: float | None,
                       factors: tuple, catalog: str = "", _prices=None) -> bytes:
    return csv_bytes(_training_runs(version, filters, metric, target, factors, catalog, _prices))


def training_runs_csv(filters: Filters, metric: str | None, target: float | None,
                      factors: tuple, prices=None) -> Callable[[], bytes]:
    """The CSV of every run training_runs() returns, as a callable for st.download_button: it is
    written when the button is pressed (once per data version), not on every rerun."""
    version = _data_version()
    key = "" if prices is None else catalog_key(prices)
    return lambda: _training_runs_csv(version, filters, metric, target, factors, key, prices)


# Shared, not copied (st.cache_resource): a 100k-row result costs ~0.5 s to unpickle on every
# rerun. For large results that pages only read: never change one in place.
@st.cache_resource(ttl=RESULT_TTL_S, max_entries=32, show_spinner=False)
def _shared(name: str, version: int, args: tuple) -> object:
    return getattr(queries, name)(*args)


def fetch_shared(query: Callable[..., pd.DataFrame], *args: object) -> pd.DataFrame:
    """Like fetch(), for large results the page only reads: the one cached frame, not a copy."""
    return _shared(query.__name__, _data_version(), args)


def forget() -> None:
    """Drop every cached result (after this process loaded something)."""
    st.cache_data.clear()
    st.cache_resource.clear()


# Shared, not copied (st.cache_resource): its sections hold plotly figures, which cost as much
# to unpickle as to build. Callers get a copy of the top level only, so never change a section.
@st.cache_resource(ttl=RESULT_TTL_S, max_entries=16, show_spinner="Assembling the month…")
def _retrospective(month: date, version: int, settings: str) -> retrospective.Retrospective:
    return retrospective.build(month, config.load())


def month_retrospective(month: date, settings: config.Config) -> retrospective.Retrospective:
    """retrospective.build(month) from the cache, recomputed on a newer load or other settings;
    its decisions log is read fresh (entries are written on the page, not loaded)."""
    retro = _retrospective(month, _data_version(), repr(settings))
    return dataclasses.replace(retro, decisions=queries.decisions(month))


@st.cache_data(ttl=RESULT_TTL_S, max_entries=16, show_spinner=False)
def _burns(as_of: date, version: int, settings: str) -> list[budgets.Burn]:
    loaded = config.load()
    return budgets.burns(loaded.budgets, loaded, as_of)


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
    """metrics/allocation.function(*args) from the cache, recomputed whenever the warehouse has a newer load."""
    return _allocation(function.__name__, _data_version(), args)
