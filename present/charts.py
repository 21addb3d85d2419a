"""Pure chart builders, shared: the palette and colours every chart takes, the point limit,
axis and number helpers, and the hour-of-week heatmap (Serving and Idle GPUs). The charts of
each topic are in charts_runs, charts_serving, charts_idle, charts_money and charts_months:
DataFrames in, plotly figures out; no queries, no Streamlit."""
from __future__ import annotations

import zlib

import pandas as pd
import plotly.graph_objects as go

MAX_POINTS = 5000


DAY_MS = 86_400_000  # one day on a plotly date axis (ms)


# Colour-blind-safe qualitative colours: Okabe & Ito's set (without black and its pale yellow
# first), then Paul Tol's "muted" colours that differ from them. Every series of every chart takes
# its colour from here (or GREY/LIGHT_GREY for "the rest" and reference lines), so no neon next to
# neon and no two pale tints that read alike.
OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442")


TOL_MUTED = ("#332288", "#999933", "#882255", "#44AA99", "#CC6677")


PALETTE = OKABE_ITO[:6] + TOL_MUTED  # not Okabe-Ito's yellow: a line in it is hard to see on white


GREY, LIGHT_GREY = "#7F7F7F", "#BBBBBB"  # unallocated / not idle / reference lines: never a named series


SAFE_COLOURS = frozenset(PALETTE) | {GREY, LIGHT_GREY}


# The allocation's buckets: one colour each on every page (Costs, Idle GPUs, the retrospective).
BUCKET_COLOURS = {"training": OKABE_ITO[0], "serving": OKABE_ITO[2], "idle_gpu": OKABE_ITO[5], "shared": OKABE_ITO[3],
                  "unallocated": GREY}


def colour_of(name: object) -> str:
    """The preferred colour of a project, team, service or model version: a stable hash of its
    name into PALETTE. colour_map gives another when two names of one chart prefer the same."""
    digest = zlib.crc32(str(name).encode("utf-8"))
    return PALETTE[digest % len(PALETTE)]


def colour_map(names, known=()) -> dict[str, str]:
    """{name: colour} for every distinct name given (missing ones left out), no two alike while there
    are colours enough: names in sorted order take their preferred colour (colour_of), else the next
    free one in PALETTE. With `known` (every name of that kind, e.g. all projects loaded), colours are
    assigned over all of them, so a name keeps its colour on every chart whatever else it shows."""
    shown = [name for name in dict.fromkeys(pd.Series(list(names), dtype=object).dropna())]
    everyone = sorted({str(name) for name in [*known, *shown]})
    taken: dict[str, str] = {}
    used: set[str] = set()
    for name in everyone:
        start = PALETTE.index(colour_of(name))
        free = [PALETTE[(start + step) % len(PALETTE)] for step in range(len(PALETTE))]
        colour = next((c for c in free if c not in used), free[0])  # more names than colours: share
        taken[name] = colour
        used.add(colour)
        if len(used) == len(PALETTE):
            used = set()  # a second round: reuse, in the same order
    return {name: taken[str(name)] for name in shown}


def thousands(figure: go.Figure, *axes: str) -> go.Figure:
    """Amount axes with thousands separators ('5,000', not '5000' or '5k')."""
    for axis in axes:
        (figure.update_xaxes if axis == "x" else figure.update_yaxes)(tickformat=",")
    return figure


def floats(frame: pd.DataFrame, *columns: str) -> pd.DataFrame:
    """A copy with DECIMAL (object) columns as floats, for plotting."""
    return frame.assign(**{c: pd.to_numeric(frame[c], errors="coerce").astype(float) for c in columns})


WEEKDAY_LABELS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")  # ISO weekdays 1-7


def hour_of_week_grid(cells: pd.DataFrame, column: str) -> pd.DataFrame:
    """`column` of the cells (ISO weekday 1-7, hour 0-23) as a 7 x 24 grid: weekdays Monday first
    (rows), hours 0-23 (columns); a cell outside the data's span is NaN (a gap, not 0)."""
    data = cells.assign(**{column: pd.to_numeric(cells[column], errors="coerce").astype(float)})
    grid = data.pivot_table(index="weekday", columns="hour", values=column, aggfunc="sum", dropna=False)
    return grid.reindex(index=range(1, 8), columns=range(24))


def hour_of_week_heatmap(cells: pd.DataFrame, column: str, label: str, zone: str,
                         colorscale: str = "Blues", number: str = ",.1f") -> go.Figure:
    """A 7 x 24 heatmap of `column` (hours across, weekdays down, Monday on top) in `zone`; hover
    shows the value with `number` format and the hours of the span behind it."""
    grid = hour_of_week_grid(cells, column)
    span = hour_of_week_grid(cells, "span_h")
    figure = go.Figure(go.Heatmap(
        z=grid.values, x=[f"{h:02d}" for h in range(24)], y=list(WEEKDAY_LABELS), customdata=span.values,
        colorscale=colorscale, xgap=1, ygap=1, hoverongaps=False, colorbar=dict(title=label),
        hovertemplate="%{y} %{x}:00: %{z:" + number + "}<br>over %{customdata:,.2f} h of the span<extra></extra>"))
    figure.update_xaxes(type="category", title=f"Hour of the day ({zone})")
    figure.update_yaxes(type="category", autorange="reversed", title="")
    figure.update_layout(margin=dict(t=30, b=10), height=320, plot_bgcolor="#d9d9d9")
    return figure
