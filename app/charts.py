"""Pure chart builders: DataFrames in, plotly figures out; no queries, no Streamlit."""
from __future__ import annotations

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
from plotly.subplots import make_subplots

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


# --- Serving ------------------------------------------------------------------------------

def service_colours(services: list[str]) -> dict[str, str]:
    """A fixed colour per service, in the order given, so every serving chart agrees."""
    palette = px.colors.qualitative.Plotly
    return {service: palette[i % len(palette)] for i, service in enumerate(services)}


def _floats(frame: pd.DataFrame, *columns: str) -> pd.DataFrame:
    """A copy with DECIMAL (object) columns as floats, for plotting."""
    return frame.assign(**{c: pd.to_numeric(frame[c], errors="coerce").astype(float) for c in columns})


def serving_by_version(versions: pd.DataFrame, column: str, label: str) -> go.Figure:
    """`column` per model version (in rollout order), one panel per service with its own scale."""
    data = _floats(versions, column).dropna(subset=[column]).head(MAX_POINTS)
    services = list(dict.fromkeys(data["service"]))
    figure = px.bar(data, x="model_version", y=column, color="service", facet_col="service",
                    facet_col_wrap=4, facet_col_spacing=0.07, facet_row_spacing=0.15, text=column,
                    category_orders={"service": services}, color_discrete_map=service_colours(services),
                    labels={column: label, "model_version": "Model version", "service": "Service"},
                    hover_data={"requests_success": ":,", "windows": True})
    figure.update_traces(texttemplate="%{y:.4g}", textposition="outside", cliponaxis=False)
    figure.update_yaxes(matches=None, showticklabels=True, rangemode="tozero")
    figure.update_xaxes(matches=None, type="category")
    figure.for_each_annotation(lambda note: note.update(text=note.text.split("=", 1)[-1]))
    figure.update_layout(margin=dict(t=40, b=10), showlegend=False)
    return figure


def serving_trend(over_time: pd.DataFrame, column: str, label: str,
                  versions: pd.DataFrame | None = None) -> go.Figure:
    """`column` over time, one panel per service with its own scale; with `versions`, a dashed
    line where a new model version of that service started."""
    data = _floats(over_time, column).head(MAX_POINTS)
    services = list(dict.fromkeys(data["service"]))
    starts = version_starts(versions) if versions is not None else pd.DataFrame(columns=["service"])
    colours = service_colours(services)
    figure = make_subplots(rows=max(len(services), 1), cols=1, shared_xaxes=True,
                           subplot_titles=services, vertical_spacing=0.25 / max(len(services), 1))
    for row, service in enumerate(services, start=1):
        mine = data[data["service"] == service]
        figure.add_trace(go.Scatter(
            x=mine["day"], y=mine[column], mode="lines+markers" if len(mine) <= 200 else "lines",
            name=service, line=dict(color=colours[service]), marker=dict(size=4),
            customdata=mine[["versions"]], showlegend=False,
            hovertemplate="%{x|%Y-%m-%d}: %{y:.4g}<br>versions %{customdata[0]}<extra>" + service + "</extra>",
        ), row=row, col=1)
        for change in starts[starts["service"] == service].itertuples():
            figure.add_vline(x=change.first_window.timestamp() * 1000, row=row, col=1,
                             line=dict(dash="dash", width=1, color="grey"))
            figure.add_annotation(x=change.first_window, y=1, yref=f"y{'' if row == 1 else row} domain",
                                  xref=f"x{'' if row == 1 else row}", text=change.model_version,
                                  showarrow=False, xanchor="left", yanchor="top", font=dict(size=11))
        figure.update_yaxes(title_text="", rangemode="tozero", row=row, col=1)
    if column == "error_rate":
        figure.update_yaxes(tickformat=".1%")
    figure.update_xaxes(title_text="Day (UTC)", row=len(services), col=1)
    figure.update_layout(height=150 * len(services) + 110, margin=dict(t=40, b=10),
                         title=dict(text=label, font=dict(size=14)))
    return figure


def version_starts(versions: pd.DataFrame) -> pd.DataFrame:
    """The versions that replaced an earlier one of their service: service, model_version, first_window."""
    ordered = versions.sort_values(["service", "first_window", "model_version"])
    later = ordered.groupby("service").cumcount() > 0
    return ordered.loc[later, ["service", "model_version", "first_window"]]


def latency_vs_cost(versions: pd.DataFrame, column: str, label: str) -> go.Figure:
    """Latency p50 and p95 (ms) against `column`, one point per version and percentile, joined per version."""
    data = _floats(versions, column, "latency_ms_p50", "latency_ms_p95").dropna(subset=[column])
    long = data.melt(id_vars=["service", "model_version", column],
                     value_vars=["latency_ms_p50", "latency_ms_p95"], var_name="percentile",
                     value_name="latency_ms").dropna(subset=["latency_ms"])
    long["percentile"] = long["percentile"].map({"latency_ms_p50": "p50", "latency_ms_p95": "p95"})
    colours = service_colours(list(dict.fromkeys(data["service"])))
    figure = px.scatter(long, x=column, y="latency_ms", color="service", symbol="percentile",
                        color_discrete_map=colours,
                        text="model_version", log_x=True, log_y=True,
                        symbol_map={"p50": "circle-open", "p95": "circle"},
                        labels={column: f"{label}, log scale", "latency_ms": "Latency (ms, log scale)",
                                "service": "Service", "percentile": "Percentile"})
    figure.update_traces(textposition="top center")
    for row in data.itertuples():
        figure.add_trace(go.Scatter(x=[getattr(row, column)] * 2, y=[row.latency_ms_p50, row.latency_ms_p95],
                                    mode="lines", line=dict(width=1, color="lightgrey"),
                                    hoverinfo="skip", showlegend=False))
    figure.update_layout(margin=dict(t=30, b=10))
    return figure
