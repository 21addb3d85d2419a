"""The retrospective's month-over-month comparisons: figures, services and projects in the previous
month and this one. Pure: DataFrames in, plotly figures out."""
from __future__ import annotations

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go

from present.charts import OKABE_ITO, thousands


def month_colours(previous: str, current: str) -> dict[str, str]:
    """The previous month light (sky blue), this month dark (blue): one pair on every comparison."""
    return {previous: OKABE_ITO[4], current: OKABE_ITO[0]}


def month_comparison(figures: list, current: str, previous: str, unit: str) -> go.Figure:
    """Grouped bars: each figure (retrospective.Figure, all in `unit`) in the previous and this month."""
    rows = [{"figure": f.label, "month": label, "value": float(value)}
            for f in figures for label, value in ((previous, f.previous), (current, f.current))
            if value is not None and not pd.isna(value)]
    data = pd.DataFrame(rows, columns=["figure", "month", "value"])
    figure = px.bar(data, x="figure", y="value", color="month", barmode="group",
                    category_orders={"month": [previous, current]}, color_discrete_map=month_colours(previous, current),
                    labels={"value": unit, "figure": "", "month": "Month (UTC)"})
    figure.update_layout(margin=dict(t=30, b=10))
    thousands(figure, "y")
    return figure


def _two_months(frame: pd.DataFrame, key: str, column: str, current: str, previous: str) -> pd.DataFrame:
    """`frame`'s `column` (this month) and `column`_previous as rows of (key, month, value), for
    bars of the two months side by side; missing values left out."""
    return pd.concat([
        pd.DataFrame({key: frame[key], "month": previous, "value": frame[f"{column}_previous"].astype(float)}),
        pd.DataFrame({key: frame[key], "month": current, "value": frame[column].astype(float)}),
    ]).dropna(subset=["value"])


def service_cost_month(services: pd.DataFrame, current: str, previous: str) -> go.Figure:
    """Cost per 1k successful requests (USD) per service, previous and this month: one panel per
    service with its own scale (services differ by 100x)."""
    data = _two_months(services, "service", "cost_per_1k_success_usd", current, previous)
    figure = px.bar(data, x="month", y="value", color="month", facet_col="service",
                    category_orders={"month": [previous, current]}, color_discrete_map=month_colours(previous, current),
                    labels={"value": "USD per 1k successful requests", "month": "Month (UTC)"})
    figure.update_yaxes(matches=None, showticklabels=True)
    figure.update_xaxes(type="category", title_text="")
    figure.for_each_annotation(lambda a: a.update(text=a.text.split("=", 1)[-1]))
    figure.update_layout(margin=dict(t=40, b=10), showlegend=False)
    return figure


def project_spend_month(projects: pd.DataFrame, current: str, previous: str) -> go.Figure:
    """Grouped bars: estimated training cost (USD) per project, previous and this month."""
    data = _two_months(projects, "project", "cost_usd", current, previous)
    figure = px.bar(data, x="project", y="value", color="month", barmode="group",
                    category_orders={"month": [previous, current]}, color_discrete_map=month_colours(previous, current),
                    labels={"value": "Estimated training cost (USD)", "project": "Project", "month": "Month (UTC)"})
    figure.update_layout(margin=dict(t=30, b=10))
    thousands(figure, "y")
    return figure
