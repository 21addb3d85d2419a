"""Charts of training runs: cost against the validation metric (with each project's frontier), by
hardware, by batch size, estimated against billed, and the retrospective's runs-vs-metric panels.
Pure: DataFrames in, plotly figures out."""
from __future__ import annotations

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go

from present.charts import GREY, MAX_POINTS, colour_map, floats, thousands


def cost_vs_metric(runs: pd.DataFrame, metric: str, goal: str,
                   x: str = "cost_usd", x_label: str = "Cost (USD)", known=()) -> go.Figure:
    """Cost (USD), or another column `x` such as measured energy, against the metric, one point
    per run; on the cost axis the (cost) frontier runs are joined by a line per project
    (`known`: every project, for colour_map)."""
    data = cost_vs_metric_rows(runs, x).copy()
    data["cost_usd"] = data["cost_usd"].astype(float)
    data[x] = data[x].astype(float)
    data["standing"] = data["on_frontier"].map({True: "Pareto frontier", False: "dominated"})
    colours = colour_map(data["project"], known)
    figure = px.scatter(
        data, x=x, y="val_metric", color="project", symbol="standing",
        color_discrete_map=colours,
        symbol_map={"Pareto frontier": "circle", "dominated": "circle-open"},
        hover_name="run_id",
        hover_data={"dominated_by": True, "instance_type": True, "cost_usd": ":.2f", "standing": False},
        labels={"cost_usd": "Cost (USD)", x: x_label,
                "val_metric": f"{metric} ({'higher' if goal == 'max' else 'lower'} is better)"},
    )
    for project, points in data[data["on_frontier"]].groupby("project") if x == "cost_usd" else ():
        line = points.sort_values("cost_usd")
        figure.add_trace(go.Scatter(x=line["cost_usd"], y=line["val_metric"], mode="lines", legendgroup=project,
                                    line=dict(width=1, dash="dot", color=colours.get(project)),
                                    name=f"{project} frontier",
                                    hoverinfo="skip", showlegend=False))
    figure.update_layout(margin=dict(t=30, b=10), legend_title_text="")
    return figure


def cost_vs_metric_rows(runs: pd.DataFrame, x: str = "cost_usd") -> pd.DataFrame:
    """The runs cost_vs_metric draws: frontier runs first, then the cheapest dominated ones, as
    many as keep the chart within MAX_POINTS (on the cost axis each frontier run is drawn twice,
    as a point and on its project's line)."""
    data = runs.dropna(subset=["cost_usd", "val_metric", x])
    data = data.assign(sort_cost=data["cost_usd"].astype(float)).sort_values(
        ["on_frontier", "sort_cost"], ascending=[False, True]).drop(columns="sort_cost")
    if x == "cost_usd":
        lines = int(data.head(MAX_POINTS)["on_frontier"].astype(bool).sum())
        return data.head(max(MAX_POINTS - lines, MAX_POINTS // 2))
    return data.head(MAX_POINTS)


ESTIMATED_VS_BILLED_MAX_RUNS = MAX_POINTS - 2  # and the 2 points of the line where they agree


def estimated_vs_billed(runs: pd.DataFrame, known=()) -> go.Figure:
    """Billed against estimated cost (USD), one point per run (the first ESTIMATED_VS_BILLED_MAX_RUNS
    in the order given), with the line where they agree (`known`: every project, for colour_map)."""
    data = floats(runs, "estimated_cost_usd", "billed_cost").dropna(subset=["estimated_cost_usd", "billed_cost"])
    data = data.assign(standing=data["large_gap"].map({True: "large gap", False: "close"}).fillna("close"))
    figure = px.scatter(data.head(ESTIMATED_VS_BILLED_MAX_RUNS), x="estimated_cost_usd", y="billed_cost", color="project",
                        color_discrete_map=colour_map(data["project"], known),
                        symbol="standing", symbol_map={"close": "circle", "large gap": "x"}, hover_name="run_id",
                        hover_data={"gap_pct": ":.1f", "instance_type": True, "untagged": True},
                        labels={"estimated_cost_usd": "Estimated cost (USD)", "billed_cost": "Billed cost (USD)"})
    top = float(max(data["estimated_cost_usd"].max(), data["billed_cost"].max(), 1)) if len(data) else 1.0
    figure.add_trace(go.Scatter(x=[0, top], y=[0, top], mode="lines", name="billed = estimated",
                                line=dict(dash="dot", color=GREY, width=1), hoverinfo="skip"))
    figure.update_layout(margin=dict(t=30, b=10), legend_title_text="")
    thousands(figure, "x", "y")
    return figure


def by_hardware(frame: pd.DataFrame, column: str, label: str, hardware_label: str) -> go.Figure:
    """Bars: `column` (titled `label`) per hardware, grouped by project (project colours; a log
    axis, as projects differ by orders of magnitude in examples/s)."""
    data = frame.assign(value=frame[column].astype(float)).dropna(subset=["value"])
    figure = px.bar(data, x="hardware", y="value", color="project", barmode="group", log_y=True,
                    color_discrete_map=colour_map(data["project"]), hover_data=["runs"],
                    labels={"value": label, "hardware": hardware_label, "project": "Project"})
    figure.update_layout(legend_title_text="Project", margin=dict(t=30, b=10))
    return figure


def batch_size_scatter(runs: pd.DataFrame, column: str, label: str) -> go.Figure:
    """Points: each run's `column` (titled `label`) against its batch size, project colours, log axes."""
    data = runs.assign(value=pd.to_numeric(runs[column].astype(float), errors="coerce"),
                       batch_size=runs["batch_size"].astype(float)).dropna(subset=["value", "batch_size"])
    data = data.head(MAX_POINTS)
    figure = px.scatter(data, x="batch_size", y="value", color="project", log_x=True, log_y=True,
                        color_discrete_map=colour_map(data["project"]), hover_data=["run_id"],
                        labels={"value": label, "batch_size": "Batch size (examples)", "project": "Project"})
    figure.update_layout(legend_title_text="Project", margin=dict(t=30, b=10))
    return figure


COST_VS_METRIC_MAX_PANELS = 6  # one panel per metric; more would be too small to read


def month_runs_vs_metric_rows(points: pd.DataFrame) -> pd.DataFrame:
    """The runs month_runs_vs_metric draws: those of the COST_VS_METRIC_MAX_PANELS commonest
    metrics (in the order given), at most MAX_POINTS of them."""
    names = list(dict.fromkeys(points["val_metric_name"]))[:COST_VS_METRIC_MAX_PANELS]
    return points[points["val_metric_name"].isin(names)].head(MAX_POINTS)


def month_runs_vs_metric(points: pd.DataFrame, known=()) -> go.Figure:
    """Cost per run (USD, x) against its validation metric (y), one point per run, one panel per
    metric with its own scale; filled: on its project's Pareto frontier, open: dominated."""
    data = floats(month_runs_vs_metric_rows(points), "cost_usd", "val_metric")
    data = data.assign(standing=data["on_frontier"].map({True: "Pareto frontier", False: "dominated"}),
                       metric=data["val_metric_name"] + data["metric_goal"].map(
                           {"max": " (higher is better)", "min": " (lower is better)"}).fillna(""))
    figure = px.scatter(data, x="cost_usd", y="val_metric", color="project", symbol="standing",
                        facet_row="metric", color_discrete_map=colour_map(data["project"], known),
                        symbol_map={"Pareto frontier": "circle", "dominated": "circle-open"},
                        hover_name="run_id", hover_data={"dominated_by": True, "cost_usd": ":,.2f", "metric": False},
                        labels={"cost_usd": "Cost per run (USD)", "val_metric": "", "project": "Project",
                                "standing": ""})
    figure.update_yaxes(matches=None, showticklabels=True)
    figure.for_each_annotation(lambda note: note.update(text=note.text.split("=", 1)[-1]))
    figure.update_layout(margin=dict(t=30, b=10), height=160 + 260 * max(data["metric"].nunique(), 1),
                         legend_title_text="")
    thousands(figure, "x")
    return figure
