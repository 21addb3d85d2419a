"""st.dataframe arguments for a table: every column in words with its unit, money with its currency."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from present.format import label, money_format


def table(frame: pd.DataFrame, first: tuple[str, ...] = (), labels: dict[str, str] | None = None,
          money: tuple[str, ...] | None = None, currency: str = "USD",
          formats: dict[str, str] | None = None) -> dict:
    """Keyword arguments for st.dataframe: every column labelled in words with its unit, money with its
    currency (columns ending in _usd, or `money` in `currency`), key columns (`first`) in front."""
    labels, formats = labels or {}, formats or {}
    money = tuple(c for c in frame.columns if c.endswith("_usd") or c.endswith("_usd_per_hour")
                  or c.endswith("_usd_per_gpu_hour")) if money is None else money
    config = {}
    for column in frame.columns:
        text = labels.get(column) or label(column)
        if column in money:
            fmt = formats.get(column) or money_format("USD" if column.endswith(("_usd", "_hour")) else currency,
                                                      4 if "per_1k" in column else 2)
            config[column] = st.column_config.NumberColumn(text, format=fmt)
        elif column in formats:
            config[column] = st.column_config.NumberColumn(text, format=formats[column])
        elif pd.api.types.is_float_dtype(frame[column]):
            config[column] = st.column_config.NumberColumn(text, format="%,.2f")
        else:
            config[column] = st.column_config.Column(text)
    order = [c for c in first if c in frame.columns] + [c for c in frame.columns if c not in first]
    return {"column_config": config, "column_order": order}
