"""Charts of GPU idleness: the idle heatmap per GPU and period, allocated vs unallocated idle hours,
the utilization histogram, idle hours per GPU in a month. Pure: DataFrames in, plotly figures out."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from present.charts import BUCKET_COLOURS, GREY, LIGHT_GREY, MAX_POINTS, OKABE_ITO


# period -> (pandas period code, date_range frequency of its starts, most idle hours a GPU can have in it)
HEATMAP_PERIODS = {"day": (None, "D", 24), "week": ("W", "W-MON", 24 * 7), "month": ("M", "MS", 24 * 31)}


def idle_heatmap_grid(by_day: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, str, int]:
    """Idle and observed hours per GPU (rows, by host and index) and period (columns, every
    period of the span, so one a GPU was not observed is a gap): per UTC day, or week (from
    Monday) or month when periods x GPUs would exceed MAX_POINTS cells; then the GPUs with the
    most idle hours that fit. Returns both grids, the period and how many GPUs were left out."""
    data = by_day.assign(day=pd.to_datetime(by_day["day"]))
    order = data.drop_duplicates("gpu").sort_values(["host", "gpu_index"])["gpu"]
    for period, (code, frequency, _) in HEATMAP_PERIODS.items():
        starts = data["day"].dt.to_period(code).dt.start_time if code else data["day"]
        span = pd.date_range(starts.min(), starts.max(), freq=frequency)
        if len(span) * len(order) <= MAX_POINTS or period == "month":
            break
    data = data.assign(period=starts)
    grids = [data.pivot_table(index="gpu", columns="period", values=column, aggfunc="sum").reindex(columns=span)
             for column in ("idle_h", "observed_h")]
    keep = max(MAX_POINTS // max(len(span), 1), 1)
    if len(order) > keep:  # the GPUs that idled most, in host and index order
        idlest = set(grids[0].sum(axis=1).nlargest(keep).index)
        order = [gpu for gpu in order if gpu in idlest]
    idle, observed = (grid.reindex(order) for grid in grids)
    return idle, observed, period, len(grids[0].index) - len(order)


def idle_heatmap(by_day: pd.DataFrame) -> go.Figure:
    """Idle hours per GPU (rows) and UTC day, week or month (columns; idle_heatmap_grid): a period
    a GPU was not observed is a gap (the grey background), never a cell of its own or its neighbour's."""
    grid, observed, period, _ = idle_heatmap_grid(by_day)
    x, when = grid.columns, "%{x|%Y-%m-%d}"
    if len(x) == 1:  # one period: on a date axis its cell would be a millisecond wide
        x, when = [x[0].strftime("%Y-%m-%d")], "%{x}"
    figure = go.Figure(go.Heatmap(
        z=grid.values, x=x, y=grid.index, customdata=observed.values, colorscale="Reds", zmin=0,
        zmax=HEATMAP_PERIODS[period][2], xgap=1, ygap=1, hoverongaps=False, colorbar=dict(title="Idle h"),
        hovertemplate="%{y}<br>" + when + ": %{z:.1f} h idle of %{customdata:.1f} h observed<extra>"
                      + period + "</extra>"))
    if len(x) == 1:
        figure.update_xaxes(type="category")
    figure.update_yaxes(autorange="reversed")
    figure.update_layout(margin=dict(t=30, b=10), height=120 + 28 * min(len(grid.index), 60),
                         xaxis_title=f"{period.title()} (UTC); grey: not observed", yaxis_title="",
                         plot_bgcolor="#d9d9d9")
    return figure


IDLE_SPLIT_MAX_GPUS = MAX_POINTS // 2  # two bars each


def idle_split(gpus: pd.DataFrame) -> go.Figure:
    """Idle GPU-hours per GPU, stacked: allocated but idle (a run held the GPU) and unallocated;
    the IDLE_SPLIT_MAX_GPUS GPUs with the most idle hours, in the order given."""
    if len(gpus) > IDLE_SPLIT_MAX_GPUS:
        gpus = gpus.loc[gpus["idle_h"].nlargest(IDLE_SPLIT_MAX_GPUS).index].sort_index()
    labels = gpus["host"] + " GPU " + gpus["gpu_index"].astype(str)
    figure = go.Figure([
        go.Bar(x=labels, y=gpus["allocated_idle_h"], name="allocated but idle", marker_color=BUCKET_COLOURS["idle_gpu"]),
        go.Bar(x=labels, y=gpus["unallocated_idle_h"], name="unallocated", marker_color=GREY),
    ])
    figure.update_layout(barmode="stack", margin=dict(t=30, b=10), yaxis_title="Idle GPU-hours",
                         legend=dict(orientation="h", y=1.1))
    return figure


def utilization_histogram(histogram: pd.DataFrame, bin_pct: int, idle_pct: float) -> go.Figure:
    """GPU-hours per utilization bin; the bins at or under the idle threshold in grey."""
    data = histogram.assign(label=histogram["util_from_pct"].map(lambda v: f"{v:g}-{v + bin_pct:g} %"))
    colours = [LIGHT_GREY if v + bin_pct <= max(idle_pct, bin_pct) else OKABE_ITO[0] for v in data["util_from_pct"]]
    figure = go.Figure(go.Bar(x=data["label"], y=data["gpu_hours"], marker_color=colours,
                              hovertemplate="%{x}: %{y:,.1f} GPU-hours<extra></extra>"))
    figure.update_xaxes(type="category", title="Mean utilization of the minute")
    figure.update_layout(margin=dict(t=30, b=10), yaxis_title="GPU-hours")
    return figure


def idle_by_gpu_month(gpus: pd.DataFrame) -> go.Figure:
    """Bars: idle and busy-or-other observed GPU-hours per GPU in the month."""
    data = gpus.assign(idle_h=gpus["idle_h"].astype(float),
                       other_h=(gpus["observed_h"] - gpus["idle_h"]).astype(float))
    figure = go.Figure([go.Bar(x=data["gpu"], y=data["idle_h"], name="idle", marker_color=BUCKET_COLOURS["idle_gpu"]),
                        go.Bar(x=data["gpu"], y=data["other_h"], name="not idle", marker_color=LIGHT_GREY)])
    figure.update_layout(barmode="stack", yaxis_title="GPU-hours", margin=dict(t=30, b=10))
    return figure
