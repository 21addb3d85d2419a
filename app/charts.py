"""Pure chart builders: DataFrames in, plotly figures out; no queries, no Streamlit."""
from __future__ import annotations

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go

MAX_POINTS = 5000


def spend_by_month(frame: pd.DataFrame) -> go.Figure:
    """Stacked monthly estimated cost (USD) by project."""
    data = frame.assign(cost_usd=frame["cost_usd"].astype(float),
                        month=pd.to_datetime(frame["month"]).dt.strftime("%Y-%m"))
    figure = px.bar(data, x="month", y="cost_usd", color="project",
                    labels={"cost_usd": "Estimated cost (USD)", "month": "Month (UTC)"})
    figure.update_xaxes(type="category")
    figure.update_layout(legend_title_text="Project", margin=dict(t=30, b=10))
    return figure


def cost_vs_metric(runs: pd.DataFrame, metric: str, goal: str) -> go.Figure:
    """Cost (USD) against the metric, one point per run, frontier runs joined by a line per project."""
    data = runs.dropna(subset=["cost_usd", "val_metric"]).copy()
    data["cost_usd"] = data["cost_usd"].astype(float)
    data["standing"] = data["on_frontier"].map({True: "Pareto frontier", False: "dominated"})
    data = data.sort_values(["on_frontier", "cost_usd"], ascending=[False, True]).head(MAX_POINTS)
    palette = px.colors.qualitative.Plotly
    colours = {p: palette[i % len(palette)] for i, p in enumerate(sorted(data["project"].dropna().unique()))}
    figure = px.scatter(
        data, x="cost_usd", y="val_metric", color="project", symbol="standing",
        color_discrete_map=colours,
        symbol_map={"Pareto frontier": "circle", "dominated": "circle-open"},
        hover_name="run_id",
        hover_data={"dominated_by": True, "instance_type": True, "cost_usd": ":.2f", "standing": False},
        labels={"cost_usd": "Cost (USD)", "val_metric": f"{metric} ({'higher' if goal == 'max' else 'lower'} is better)"},
    )
    for project, points in data[data["on_frontier"]].groupby("project"):
        line = points.sort_values("cost_usd")
        figure.add_trace(go.Scatter(x=line["cost_usd"], y=line["val_metric"], mode="lines",
                                    line=dict(width=1, dash="dot", color=colours.get(project)),
                                    name=f"{project} frontier",
                                    hoverinfo="skip", showlegend=False))
    figure.update_layout(margin=dict(t=30, b=10), legend_title_text="")
    return figure
