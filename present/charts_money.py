"""Charts of money: estimated spend by month, billed cost by period, category and instance type, a
budget's burn, the allocation by team or project. Pure: DataFrames in, plotly figures out."""
from __future__ import annotations

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go

from present.charts import BUCKET_COLOURS, GREY, MAX_POINTS, OKABE_ITO, colour_map, floats, thousands


def spend_by_month(frame: pd.DataFrame, known=()) -> go.Figure:
    """Stacked monthly estimated cost (USD) by project (`known`: every project, for colour_map)."""
    data = frame.assign(cost_usd=frame["cost_usd"].astype(float),
                        month=pd.to_datetime(frame["month"]).dt.strftime("%Y-%m"))
    figure = px.bar(data, x="month", y="cost_usd", color="project",
                    color_discrete_map=colour_map(data["project"], known),
                    labels={"cost_usd": "Estimated cost (USD)", "month": "Month (UTC)"})
    figure.update_xaxes(type="category")
    figure.update_layout(legend_title_text="Project", margin=dict(t=30, b=10))
    thousands(figure, "y")
    return figure


def billing_over_time(frame: pd.DataFrame, currency: str, split_by: str) -> go.Figure:
    """Stacked billed cost per period and group (credits below zero), in `currency`."""
    data = floats(frame, "billed_cost").head(MAX_POINTS)
    figure = px.bar(data, x="period", y="billed_cost", color="group",
                    color_discrete_map=colour_map(data["group"]),
                    labels={"billed_cost": f"Billed ({currency})", "period": f"{data['bucket'].iloc[0].title()} (UTC)",
                            "group": split_by})
    figure.update_layout(barmode="relative", margin=dict(t=30, b=10), legend_title_text=split_by)
    thousands(figure, "y")
    return figure


CATEGORY_COLOURS = {"usage": OKABE_ITO[0], "purchase": OKABE_ITO[3], "tax": OKABE_ITO[1], "credit": OKABE_ITO[2],
                    "adjustment": OKABE_ITO[5]}


def billing_by_category(frame: pd.DataFrame, currency: str) -> go.Figure:
    """Billed cost per invoice month and charge category; credits and negative adjustments below zero."""
    data = floats(frame, "billed_cost").assign(month=pd.to_datetime(frame["month"]).dt.strftime("%Y-%m"))
    figure = px.bar(data, x="month", y="billed_cost", color="charge_category",
                    color_discrete_map=CATEGORY_COLOURS,
                    category_orders={"charge_category": list(CATEGORY_COLOURS)},
                    labels={"billed_cost": f"Billed ({currency})", "month": "Invoice month",
                            "charge_category": "Charge category"})
    figure.update_xaxes(type="category")
    figure.update_layout(barmode="relative", margin=dict(t=30, b=10))
    thousands(figure, "y")
    return figure


def billing_gpu_spend(frame: pd.DataFrame, currency: str) -> go.Figure:
    """GPU instance spend per month, stacked by instance type."""
    data = floats(frame, "billed_cost").assign(month=pd.to_datetime(frame["month"]).dt.strftime("%Y-%m"))
    figure = px.bar(data, x="month", y="billed_cost", color="instance_type",
                    color_discrete_map=colour_map(data["instance_type"]),
                    hover_data={"pricing_category": True, "lines": True},
                    labels={"billed_cost": f"Billed ({currency})", "month": "Month (UTC)",
                            "instance_type": "Instance type"})
    figure.update_xaxes(type="category")
    figure.update_layout(margin=dict(t=30, b=10))
    thousands(figure, "y")
    return figure


def budget_burn(daily: pd.DataFrame, projection: pd.DataFrame, pace: pd.DataFrame, amount: float,
                currency: str) -> go.Figure:
    """Cumulative spend to date against the budget line and an even pace, with the forecast to
    period end and its band (one point per day: a quarter is at most 92)."""
    figure = go.Figure()
    band = "rgba(213, 94, 0, 0.15)"  # the forecast's colour (OKABE_ITO[5]), faint: one series with its band
    figure.add_trace(go.Scatter(x=projection["day"], y=projection["high"], mode="lines",
                                line=dict(width=0, color=band), legendgroup="forecast",
                                showlegend=False, hoverinfo="skip"))
    figure.add_trace(go.Scatter(x=projection["day"], y=projection["low"], mode="lines",
                                line=dict(width=0, color=band), legendgroup="forecast",
                                fill="tonexty", fillcolor=band, name="Forecast band (P10-P90 day)"))
    figure.add_trace(go.Scatter(x=projection["day"], y=projection["forecast"], mode="lines", legendgroup="forecast",
                                line=dict(dash="dash", color=OKABE_ITO[5]), name="Forecast (last 7 days' rate)"))
    figure.add_trace(go.Scatter(x=pace["day"], y=pace["allowed"], mode="lines",
                                line=dict(dash="dot", color=GREY), name="Even pace"))
    figure.add_trace(go.Scatter(x=daily["day"], y=daily["cumulative"].astype(float), mode="lines+markers",
                                line=dict(color=OKABE_ITO[0]), marker=dict(size=4), name="Spent"))
    figure.add_hline(y=amount, line=dict(color=OKABE_ITO[2], width=2),
                     annotation_text=f"Budget {amount:,.0f} {currency}", annotation_position="top left")
    figure.update_layout(margin=dict(t=30, b=10), yaxis_title=f"Cumulative spend ({currency})",
                         xaxis_title="Day (UTC)", legend=dict(orientation="h", y=-0.2))
    thousands(figure, "y")
    return figure


def allocation_by_key(frame: pd.DataFrame, currency: str, key: str, labels: dict[str, str]) -> go.Figure:
    """Horizontal bars: effective cost in `currency` per value of `key`, stacked by bucket
    (fixed colours per bucket; `labels` names them)."""
    data = frame.assign(effective_cost=frame["effective_cost"].astype(float),
                        bucket_label=frame["bucket"].map(labels))
    order = data.groupby("key_value")["effective_cost"].sum().sort_values().index.tolist()
    figure = px.bar(data, y="key_value", x="effective_cost", color="bucket_label", orientation="h",
                    category_orders={"key_value": order[::-1], "bucket_label": [labels[b] for b in BUCKET_COLOURS]},
                    color_discrete_map={labels[b]: c for b, c in BUCKET_COLOURS.items()},
                    labels={"effective_cost": f"Effective cost ({currency})", "key_value": key})
    figure.update_layout(legend_title_text="Bucket", margin=dict(t=30, b=10))
    thousands(figure, "x")
    return figure
