"""Pure chart builders: DataFrames in, plotly figures out; no queries, no Streamlit."""
from __future__ import annotations

import zlib

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
from plotly.subplots import make_subplots

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


def _thousands(figure: go.Figure, *axes: str) -> go.Figure:
    """Amount axes with thousands separators ('5,000', not '5000' or '5k')."""
    for axis in axes:
        (figure.update_xaxes if axis == "x" else figure.update_yaxes)(tickformat=",")
    return figure


def spend_by_month(frame: pd.DataFrame, known=()) -> go.Figure:
    """Stacked monthly estimated cost (USD) by project (`known`: every project, for colour_map)."""
    data = frame.assign(cost_usd=frame["cost_usd"].astype(float),
                        month=pd.to_datetime(frame["month"]).dt.strftime("%Y-%m"))
    figure = px.bar(data, x="month", y="cost_usd", color="project",
                    color_discrete_map=colour_map(data["project"], known),
                    labels={"cost_usd": "Estimated cost (USD)", "month": "Month (UTC)"})
    figure.update_xaxes(type="category")
    figure.update_layout(legend_title_text="Project", margin=dict(t=30, b=10))
    _thousands(figure, "y")
    return figure


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


# --- Serving ------------------------------------------------------------------------------

def service_colours(services: list[str]) -> dict[str, str]:
    """A colour per service (colour_map over the services given: every serving chart gets them all)."""
    return colour_map(services)


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
    data = _floats(versions, column, "latency_ms_p50", "latency_ms_p95").dropna(subset=[column])
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


# --- GPU traces -------------------------------------------------------------------------------

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



# --- Billing and reconciliation -----------------------------------------------------------------

def billing_over_time(frame: pd.DataFrame, currency: str, split_by: str) -> go.Figure:
    """Stacked billed cost per period and group (credits below zero), in `currency`."""
    data = _floats(frame, "billed_cost").head(MAX_POINTS)
    figure = px.bar(data, x="period", y="billed_cost", color="group",
                    color_discrete_map=colour_map(data["group"]),
                    labels={"billed_cost": f"Billed ({currency})", "period": f"{data['bucket'].iloc[0].title()} (UTC)",
                            "group": split_by})
    figure.update_layout(barmode="relative", margin=dict(t=30, b=10), legend_title_text=split_by)
    _thousands(figure, "y")
    return figure


CATEGORY_COLOURS = {"usage": OKABE_ITO[0], "purchase": OKABE_ITO[3], "tax": OKABE_ITO[1], "credit": OKABE_ITO[2],
                    "adjustment": OKABE_ITO[5]}


def billing_by_category(frame: pd.DataFrame, currency: str) -> go.Figure:
    """Billed cost per invoice month and charge category; credits and negative adjustments below zero."""
    data = _floats(frame, "billed_cost").assign(month=pd.to_datetime(frame["month"]).dt.strftime("%Y-%m"))
    figure = px.bar(data, x="month", y="billed_cost", color="charge_category",
                    color_discrete_map=CATEGORY_COLOURS,
                    category_orders={"charge_category": list(CATEGORY_COLOURS)},
                    labels={"billed_cost": f"Billed ({currency})", "month": "Invoice month",
                            "charge_category": "Charge category"})
    figure.update_xaxes(type="category")
    figure.update_layout(barmode="relative", margin=dict(t=30, b=10))
    _thousands(figure, "y")
    return figure


def billing_gpu_spend(frame: pd.DataFrame, currency: str) -> go.Figure:
    """GPU instance spend per month, stacked by instance type."""
    data = _floats(frame, "billed_cost").assign(month=pd.to_datetime(frame["month"]).dt.strftime("%Y-%m"))
    figure = px.bar(data, x="month", y="billed_cost", color="instance_type",
                    color_discrete_map=colour_map(data["instance_type"]),
                    hover_data={"pricing_category": True, "lines": True},
                    labels={"billed_cost": f"Billed ({currency})", "month": "Month (UTC)",
                            "instance_type": "Instance type"})
    figure.update_xaxes(type="category")
    figure.update_layout(margin=dict(t=30, b=10))
    _thousands(figure, "y")
    return figure


ESTIMATED_VS_BILLED_MAX_RUNS = MAX_POINTS - 2  # and the 2 points of the line where they agree


def estimated_vs_billed(runs: pd.DataFrame, known=()) -> go.Figure:
    """Billed against estimated cost (USD), one point per run (the first ESTIMATED_VS_BILLED_MAX_RUNS
    in the order given), with the line where they agree (`known`: every project, for colour_map)."""
    data = _floats(runs, "estimated_cost_usd", "billed_cost").dropna(subset=["estimated_cost_usd", "billed_cost"])
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
    _thousands(figure, "x", "y")
    return figure


# --- Budgets ------------------------------------------------------------------------------

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
    _thousands(figure, "y")
    return figure


# --- The monthly retrospective ------------------------------------------------------------

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
    _thousands(figure, "y")
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
    _thousands(figure, "y")
    return figure


def idle_by_gpu_month(gpus: pd.DataFrame) -> go.Figure:
    """Bars: idle and busy-or-other observed GPU-hours per GPU in the month."""
    data = gpus.assign(idle_h=gpus["idle_h"].astype(float),
                       other_h=(gpus["observed_h"] - gpus["idle_h"]).astype(float))
    figure = go.Figure([go.Bar(x=data["gpu"], y=data["idle_h"], name="idle", marker_color=BUCKET_COLOURS["idle_gpu"]),
                        go.Bar(x=data["gpu"], y=data["other_h"], name="not idle", marker_color=LIGHT_GREY)])
    figure.update_layout(barmode="stack", yaxis_title="GPU-hours", margin=dict(t=30, b=10))
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
    _thousands(figure, "x")
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


# --- Hour of day x weekday ------------------------------------------------------------------

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


# --- Retrospective: the seed's two graphs ---------------------------------------------------

COST_VS_METRIC_MAX_PANELS = 6  # one panel per metric; more would be too small to read


def month_runs_vs_metric_rows(points: pd.DataFrame) -> pd.DataFrame:
    """The runs month_runs_vs_metric draws: those of the COST_VS_METRIC_MAX_PANELS commonest
    metrics (in the order given), at most MAX_POINTS of them."""
    names = list(dict.fromkeys(points["val_metric_name"]))[:COST_VS_METRIC_MAX_PANELS]
    return points[points["val_metric_name"].isin(names)].head(MAX_POINTS)


def month_runs_vs_metric(points: pd.DataFrame, known=()) -> go.Figure:
    """Cost per run (USD, x) against its validation metric (y), one point per run, one panel per
    metric with its own scale; filled: on its project's Pareto frontier, open: dominated."""
    data = _floats(month_runs_vs_metric_rows(points), "cost_usd", "val_metric")
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
    _thousands(figure, "x")
    return figure
