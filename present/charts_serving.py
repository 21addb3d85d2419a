"""Charts of serving: a figure per model version, its trend over time with version starts, latency
against cost. Pure: DataFrames in, plotly figures out."""
from __future__ import annotations

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from present.charts import DAY_MS, GREY, LIGHT_GREY, MAX_POINTS, colour_map, floats


def service_colours(services: list[str]) -> dict[str, str]:
    """A colour per service (colour_map over the services given: every serving chart gets them all)."""
    return colour_map(services)


def serving_by_version(versions: pd.DataFrame, column: str, label: str) -> go.Figure:
    """`column` per model version (in rollout order), one panel per service with its own scale."""
    data = floats(versions, column).dropna(subset=[column]).head(MAX_POINTS)
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
    data = floats(over_time, column).head(MAX_POINTS)
    services = list(dict.fromkeys(data["service"]))
    starts = version_starts(versions) if versions is not None else pd.DataFrame(columns=["service"])
    colours = service_colours(services)
    # The panels' axes and titles from make_subplots, then the whole figure validated once from
    # a dict: adding traces and updating a dozen axes one call at a time re-validates the
    # layout on every call (3-4x the time; the page draws five of these).
    rows = max(len(services), 1)
    layout = make_subplots(rows=rows, cols=1, shared_xaxes=True, subplot_titles=services,
                           vertical_spacing=0.25 / rows).to_dict()["layout"]
    traces, shapes, notes = [], [], []
    for row, service in enumerate(services, start=1):
        mine = data[data["service"] == service]
        axis = "" if row == 1 else str(row)
        traces.append(dict(
            type="scatter", x=mine["day"], y=mine[column], mode="lines+markers" if len(mine) <= 200 else "lines",
            name=service, line=dict(color=colours[service]), marker=dict(size=4),
            customdata=mine[["versions"]], showlegend=False, xaxis=f"x{axis}", yaxis=f"y{axis}",
            hovertemplate="%{x|%Y-%m-%d}: %{y:.4g}<br>versions %{customdata[0]}<extra>" + service + "</extra>",
        ))
        for change in starts[starts["service"] == service].itertuples():
            shapes.append(dict(type="line", x0=change.first_window, x1=change.first_window, y0=0, y1=1,
                               xref=f"x{axis}", yref=f"y{axis} domain", line=dict(dash="dash", width=1, color=GREY)))
            notes.append(dict(x=change.first_window, y=1, xref=f"x{axis}", yref=f"y{axis} domain",
                              text=change.model_version, showarrow=False, xanchor="left", yanchor="top",
                              font=dict(size=11)))
    for name in [key for key in layout if key.startswith("yaxis")]:
        layout[name] = {**layout[name], "title": {"text": ""}, "rangemode": "tozero",
                        **({"tickformat": ".1%"} if column == "error_rate" else {})}
    if services:
        bottom = "xaxis" if len(services) == 1 else f"xaxis{len(services)}"
        layout[bottom] = {**layout[bottom], "title": {"text": "Day (UTC)"}}
    days = pd.to_datetime(data["day"]).drop_duplicates()
    if len(days) == 1:  # plotly would zoom to milliseconds around a lone day and tick them
        lone_day = dict(range=[days.iloc[0] - pd.Timedelta(days=1), days.iloc[0] + pd.Timedelta(days=1)],
                        dtick=DAY_MS, tickformat="%b %d, %Y")
        for name in [key for key in layout if key.startswith("xaxis")]:
            layout[name] = {**layout[name], **lone_day}
    layout.update(shapes=shapes, annotations=[*layout.get("annotations", []), *notes],
                  height=150 * len(services) + 110, margin=dict(t=40, b=10),
                  title=dict(text=label, font=dict(size=14)))
    return go.Figure(dict(data=traces, layout=layout))


def version_starts(versions: pd.DataFrame) -> pd.DataFrame:
    """The versions that replaced an earlier one of their service: service, model_version, first_window."""
    ordered = versions.sort_values(["service", "first_window", "model_version"])
    later = ordered.groupby("service").cumcount() > 0
    return ordered.loc[later, ["service", "model_version", "first_window"]]


def latency_vs_cost(versions: pd.DataFrame, column: str, label: str) -> go.Figure:
    """Latency p50 and p95 (ms) against `column`, one point per version and percentile, joined per
    version (4 points each: the MAX_POINTS // 4 versions with the most successful requests)."""
    data = floats(versions, column, "latency_ms_p50", "latency_ms_p95").dropna(subset=[column])
    if len(data) > MAX_POINTS // 4:
        data = data.loc[data["requests_success"].nlargest(MAX_POINTS // 4).index].sort_index()
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
                                    mode="lines", line=dict(width=1, color=LIGHT_GREY),
                                    hoverinfo="skip", showlegend=False))
    figure.update_layout(margin=dict(t=30, b=10))
    return figure
