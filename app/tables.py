"""The one table helper of the pages: every column in words with its unit (present.format's column
catalogue), money with its currency, separators and a fixed number of decimals per column, dates as
dates, empty cells empty, internal keys left out."""
from __future__ import annotations

from decimal import Decimal

import numpy as np
import pandas as pd
import streamlit as st

from present.format import Column, column, is_missing, label, number_format


def table(frame: pd.DataFrame, first: tuple[str, ...] = (), labels: dict[str, str] | None = None,
          money: tuple[str, ...] | None = None, currency: str = "USD",
          formats: dict[str, str] | None = None, kinds: dict[str, str] | None = None,
          places: dict[str, int] | None = None, config: dict | None = None) -> dict:
    """Keyword arguments for st.dataframe: every column labelled as the catalogue says (or `labels`),
    money in `currency` (columns of kind money, or those named in `money`), key columns (`first`) in
    front, hidden (internal) columns left out. `kinds`/`places` override a column's kind/decimals;
    `formats` a printf format outright; `config` gives a column's st.column_config outright (a
    progress bar)."""
    labels, formats, kinds, places = labels or {}, formats or {}, kinds or {}, places or {}
    specs: dict[str, Column] = {}
    for name in frame.columns:
        spec = column(name, currency)
        if money is not None and name in money and spec.kind != "money":
            spec = column_as_money(spec, currency)
        if name in kinds:
            spec = Column(spec.label, kinds[name], spec.places, spec.currency)
            if kinds[name] == "money":
                spec = column_as_money(spec, currency)
        if name in places:
            spec = Column(spec.label, spec.kind, places[name], spec.currency)
        specs[name] = spec
    given, config = config or {}, {}
    for name, spec in specs.items():
        text = labels.get(name) or spec.label
        if spec.kind == "hidden":
            continue
        if name in given:
            config[name] = given[name]
            continue
        fmt = formats.get(name) or number_format(spec, currency)
        numeric = pd.api.types.is_numeric_dtype(frame[name]) or _numbers(frame[name])
        if spec.kind == "date":
            config[name] = st.column_config.DateColumn(text, format="YYYY-MM-DD")
        elif spec.kind == "month":
            config[name] = st.column_config.DateColumn(text, format="YYYY-MM")
        elif spec.kind == "datetime" and pd.api.types.is_datetime64_any_dtype(frame[name]):
            config[name] = st.column_config.DatetimeColumn(text, format="YYYY-MM-DD HH:mm")
        elif fmt and numeric and not pd.api.types.is_bool_dtype(frame[name]):
            config[name] = st.column_config.NumberColumn(text, format=fmt)
        elif pd.api.types.is_float_dtype(frame[name]):
            config[name] = st.column_config.NumberColumn(text, format="%,.2f")
        elif pd.api.types.is_integer_dtype(frame[name]):
            config[name] = st.column_config.NumberColumn(text, format="%,d")
        else:
            config[name] = st.column_config.Column(text)
    shown = [c for c in frame.columns if c in config]
    order = [c for c in first if c in shown] + [c for c in shown if c not in first]
    return {"column_config": config, "column_order": order}


def column_as_money(spec: Column, currency: str) -> Column:
    """`spec` as a money column in `currency` (its label says the currency)."""
    text = spec.label if f"({currency}" in spec.label or not currency else f"{spec.label} ({currency})"
    return Column(text, "money", spec.places, currency)


def shown(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` ready for st.dataframe: exact amounts (Decimal) as floats, so the column's number
    format applies (display only: figures are computed exactly before); missing text cells empty
    instead of 'None'; lists as text; column names given as values as their labels."""
    out = frame.copy()
    for name in out.columns:
        values = out[name]
        if column(name).kind == "field":  # column names as values ('cost_per_1k_success_usd'): their labels
            values = values.map(lambda v: label(v) if isinstance(v, str) else v)
        if _numbers(values):
            out[name] = pd.to_numeric(values, errors="coerce").astype(float)
        elif values.dtype == object:
            listed = values.map(lambda v: isinstance(v, (list, tuple, np.ndarray)))
            if listed.any():  # a list of names (run ids, flags) reads as one line of text
                values = values.where(~listed, values[listed].map(lambda v: ", ".join(map(str, v))))
            if values.map(lambda v: isinstance(v, str) or is_missing(v)).all():
                values = values.where(values.notna(), "")
            out[name] = values
    return out


def show(frame: pd.DataFrame, where=None, **options) -> None:
    """st.dataframe of `frame` (in `where`, a column or container; default the page) through table():
    words, units, formats; no index; as wide as the page; a missing value an empty cell (not 'None').
    `options` go to table()."""
    (where or st).dataframe(shown(frame), hide_index=True, width="stretch", placeholder="", **table(frame, **options))


def _numbers(values: pd.Series) -> bool:
    """An object column of numbers only (exact amounts as Decimal, or ints and floats mixed with None)."""
    if values.dtype != object:
        return False
    present = values.dropna()
    return len(present) > 0 and present.map(
        lambda v: isinstance(v, (int, float, Decimal)) and not isinstance(v, bool)).all()
