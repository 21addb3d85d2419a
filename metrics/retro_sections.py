"""The retrospective's sections, in order (SECTIONS): each a function of the month's Context
returning a Section (figures, a table, a chart, notes) or None when there is nothing to say. Every
figure comes from the query functions the other pages call, with the month as the date range."""
from __future__ import annotations

from collections.abc import Callable
from datetime import date, timedelta
from decimal import Decimal

import pandas as pd

from metrics import budgets, idle, queries
from present import charts, charts_idle, charts_months, charts_runs, charts_serving
from metrics.filters import Filters
from ingest.settings import config
from metrics.retro_report import BILL_CHANGE_LABEL, Context, Figure, Section, first_value, money, sum_money, sum_of


def invoice_month_billed(ctx: Context, currency: str, month: date) -> Decimal | None:
    """Billed cost in `currency` of the invoice month `month`: the Billing page's charges by
    category (over all dates) for that month, credits and corrections included."""
    lines = ctx.fetch(queries.billing_by_category, Filters(), currency)
    of_month = lines[pd.to_datetime(lines["month"]).dt.date == month]
    return sum_money(of_month["billed_cost"])


def _spend(ctx: Context) -> Section:
    section = Section("spend", "Spend")
    all_currencies = ctx.fetch(queries.billing_totals, Filters())
    now, before = ctx.both(queries.billing_totals)
    for currency in all_currencies["billing_currency"]:
        # The bill's change is the charges of the compared days (bill_change()); an invoice month is
        # not split by day, so a partial one has nothing like it to compare with.
        section.figures.append(Figure(
            f"Billed, invoice month ({currency})", currency, invoice_month_billed(ctx, currency, ctx.month),
            None if ctx.data_through else invoice_month_billed(ctx, currency, ctx.previous),
            "Billing (charges by category)"))
        charged = [first_value(t[t["billing_currency"] == currency], "billed_cost") for t in (now, before)]
        section.figures.append(Figure(
            f"{BILL_CHANGE_LABEL} ({currency})", currency, money(charged[0]), money(charged[1]),
            "Billing (this month as date range)"))
    training = [money(first_value(t, "cost_usd")) for t in ctx.both(queries.overview_totals, *ctx.energy_factors())]
    serving = [money(first_value(t, "cost_usd")) for t in ctx.both(queries.serving_totals)]
    section.figures += [
        Figure("Estimated training cost (USD)", "USD", training[0], training[1], "Overview"),
        Figure("Estimated serving cost (USD)", "USD", serving[0], serving[1], "Serving"),
    ]
    section.notes.append("Invoice month: the cloud bill of the month, credits, taxes and corrections included "
                         "(a correction billed this month for an earlier one counts here)"
                         + ("; it is not split by day, so a partial one is not compared. " if ctx.data_through
                            else ". ")
                         + f"{BILL_CHANGE_LABEL}: lines whose charge period starts in the compared days; its change "
                         "is the bill's change. Amounts are never added across currencies; estimated costs are USD.")
    section.chart = charts_months.month_comparison(
        [f for f in section.figures if f.unit == "USD"], ctx.window.label('current'), ctx.window.label('previous'), "USD")
    return section


def _energy(ctx: Context) -> Section:
    section = Section("energy", "Energy and emissions")
    measured = ctx.both(queries.run_energy_figures, *ctx.energy_factors())
    gpus = ctx.both(queries.idle_by_gpu, ctx.gpu_prices())
    serving = ctx.both(queries.serving_totals)
    reported = ctx.both(queries.overview_totals, *ctx.energy_factors())
    section.figures += [
        Figure("Measured GPU energy of training runs (kWh)", "kWh",
               *[sum_of(m["gpu_energy_kwh"]) for m in measured], "Training runs"),
        Figure("Emissions of training runs (kg CO2e)", "kg CO2e",
               *[sum_of(m["gpu_emissions_kg"]) for m in measured], "Training runs"),
        Figure("Energy of every traced GPU (kWh)", "kWh", *[sum_of(g["energy_kwh"]) for g in gpus], "Idle GPUs"),
        Figure("Serving energy (kWh)", "kWh", *[first_value(s, "energy_kwh") for s in serving], "Serving"),
    ]
    # Runs that report their own energy (run summaries, CodeCarbon): the Overview's figures, which
    # take a run's own energy where it has one and its measured GPU energy otherwise.
    if any(int(first_value(r, "runs_with_energy") or 0) > int(first_value(r, "runs_energy_from_traces") or 0)
           for r in reported):
        section.figures += [
            Figure("Energy of runs, reported or measured (kWh)", "kWh",
                   *[first_value(r, "energy_kwh") for r in reported], "Overview"),
            Figure("Emissions of runs, reported or measured (kg CO2e)", "kg CO2e",
                   *[first_value(r, "emissions_kg") for r in reported], "Overview")]
    section.notes.append("Training-run energy is measured from GPU traces, emissions = kWh x PUE x the grid's "
                         "g CO2e/kWh of the run's region (`[energy]`); serving energy is what the services report.")
    return section


def weekend_idle(ctx: Context, filters: Filters) -> tuple[float, Decimal | None]:
    """Idle GPU-hours on Saturdays and Sundays (UTC) in `filters`, and their dollars at the GPU-hour
    prices of the Idle GPUs page (None when no idle GPU of those days is priced)."""
    days = ctx.fetch(queries.idle_by_day, filters)
    prices = ctx.fetch(queries.idle_by_gpu, filters, ctx.gpu_prices())
    if days.empty:
        return 0.0, None
    weekend = days[pd.to_datetime(days["day"]).dt.day_of_week >= 5]
    price_of = {(r.host, r.gpu_index): money(r.usd_per_gpu_hour) for r in prices.itertuples()}
    dollars = [Decimal(str(round(float(r.idle_h), 6))) * price_of[(r.host, r.gpu_index)]
               for r in weekend.itertuples() if price_of.get((r.host, r.gpu_index)) is not None]
    return float(weekend["idle_h"].sum()), (sum(dollars, Decimal(0)) if dollars else None)


def _idle_parts(found: idle.Idle, currency: str) -> idle.Shown | None:
    parts = found.billed.get(currency)
    return None if parts is None else parts.shown()


def _idle(ctx: Context) -> Section | None:
    now, before = ctx.both(queries.idle_by_gpu, ctx.gpu_prices())
    if now.empty and before.empty:
        return None
    weekend = [weekend_idle(ctx, f) for f in (ctx.current_range, ctx.previous_range)]
    found = [ctx.idle(f) for f in (ctx.current_range, ctx.previous_range)]
    section = Section("idle", "Idle GPUs")
    # metrics/idle.py: all idle = not held by any run (the Costs page's Idle GPUs bucket) + held by runs;
    # laid out so that each total sits before its two parts (the page shows them four to a row)
    hours, costs = [], []
    currencies = sorted({c for f in found for c in f.billed})
    for currency in currencies:
        shown = [_idle_parts(f, currency) for f in found]
        of = f", {currency} nodes" if len(currencies) > 1 else ""

        def part(name: str) -> list:
            return [None if s is None else getattr(s, name) for s in shown]
        hours += [
            Figure(f"Idle GPU-hours{of}", "GPU-h", *part("gpu_hours"), "Idle GPUs"),
            Figure(f"Not held by any run (GPU-h{of})", "GPU-h", *part("unallocated_gpu_hours"),
                   "Costs (GPU nodes)"),
            Figure(f"Held by runs while idle (GPU-h{of})", "GPU-h", *part("held_gpu_hours"), "Idle GPUs"),
        ]
        costs += [
            Figure(f"Idle cost ({currency})", currency, *part("cost"), "Idle GPUs"),
            Figure(f"Not held by any run ({currency})", currency, *part("unallocated_cost"),
                   "Costs (Idle GPUs bucket)"),
            Figure(f"Held by runs while idle ({currency})", currency, *part("held_cost"), "Idle GPUs"),
        ]
    section.figures += [
        *hours, Figure("Observed GPU-hours", "GPU-h", *[sum_of(g["observed_h"]) for g in (now, before)], "Idle GPUs"),
        *costs, Figure("Idle energy (kWh)", "kWh", *[sum_of(g["idle_kwh"]) for g in (now, before)], "Idle GPUs"),
    ]
    for currency in currencies:
        if found[0].billed.get(currency) is not None:
            section.notes.append(f"{idle.parts_text(found[0].billed[currency])}; "
                                 f"{idle.hours_text(found[0].billed[currency])}. Held by runs: the allocation "
                                 "charges that time to the runs (Training runs), not to the Idle GPUs bucket.")
    if any(f.estimated for f in found):  # hosts without bill lines: catalog prices, an estimate
        estimated = [f.estimated.shown() if f.estimated else None for f in found]
        section.figures.append(Figure("Idle GPU-hours, hosts without bill lines", "GPU-h",
                                      *[e and e.gpu_hours for e in estimated], "Idle GPUs"))
        section.figures.append(Figure("Idle cost, hosts without bill lines (USD, estimated)", "USD",
                                      *[e and e.cost for e in estimated], "Idle GPUs"))
        if found[0].estimated:
            section.notes.append(idle.estimated_text(found[0]))
    section.figures += [
        Figure("Idle GPU-hours on weekends", "GPU-h", weekend[0][0], weekend[1][0], "Idle GPUs (heatmap)"),
        Figure("Idle cost on weekends (USD)", "USD", weekend[0][1], weekend[1][1], "Idle GPUs (heatmap)"),
    ]
    if not now.empty:
        table = now.assign(gpu=now["host"] + " GPU " + now["gpu_index"].astype(str))
        # price_source: 'bill' (the node's own cost per GPU-hour) or 'catalog (estimated)'
        section.table = table[["gpu", "gpu_name", "observed_h", "idle_h", "idle_usd", "price_source",
                               "busy_util_pct"]]
        section.units = {"observed_h": "GPU-h", "idle_h": "GPU-h", "idle_usd": "USD", "busy_util_pct": "%"}
        section.chart = charts_idle.idle_by_gpu_month(section.table)
    return section


def _serving(ctx: Context) -> Section | None:
    now, before = ctx.both(queries.serving_by_service)
    if now.empty and before.empty:
        return None
    section = Section("serving", "Serving: cost per 1k requests by service")
    totals = ctx.both(queries.serving_totals)
    section.figures += [
        Figure("Requests", "requests", *[first_value(t, "requests_total") for t in totals], "Serving"),
        Figure("Cost per 1k successful requests, all services (USD)", "USD/1k",
               *[first_value(t, "cost_per_1k_success_usd") for t in totals], "Serving"),
    ]
    merged = now.merge(before, on="service", how="outer", suffixes=("", "_previous"))
    merged["change_pct"] = (merged["cost_per_1k_success_usd"].astype(float)
                            / merged["cost_per_1k_success_usd_previous"].astype(float) - 1) * 100
    section.table = merged[["service", "versions", "requests_success", "cost_usd",
                            "cost_per_1k_success_usd_previous", "cost_per_1k_success_usd", "change_pct",
                            "energy_wh_per_1k_success"]]
    section.units = {"requests_success": "count", "cost_usd": "USD", "cost_per_1k_success_usd_previous": "USD/1k",
                     "cost_per_1k_success_usd": "USD/1k", "change_pct": "%", "energy_wh_per_1k_success": "Wh"}
    section.chart = charts_months.service_cost_month(merged, ctx.window.label('current'), ctx.window.label('previous'))
    return section


def version_changes(ctx: Context) -> pd.DataFrame:
    """The Serving page's version changes (cost and energy per 1k successful requests) over the
    month's windows, of the versions that started in the month."""
    rule = ctx.settings.serving
    changes = ctx.fetch(queries.serving_version_changes, ctx.current_range, rule.regression_pct, rule.min_requests)
    return changes[pd.to_datetime(changes["start_date"]).dt.date >= ctx.month] if not changes.empty else changes


def _versions(ctx: Context) -> Section | None:
    changes = version_changes(ctx)
    if changes.empty:
        return None
    rule = ctx.settings.serving
    section = Section("versions", "Model versions that changed cost per 1k")
    section.table = changes[["service", "metric", "from_version", "to_version", "start_date",
                             "before", "after", "change_pct", "is_regression"]]
    section.units = {"start_date": "date", "before": "decimal", "after": "decimal", "change_pct": "%"}
    section.notes.append(f"Per 1k successful requests, over this month's windows; a change over "
                         f"{rule.regression_pct:g} % worse is a regression (`[serving]`).")
    return section


def _projects(ctx: Context) -> Section | None:
    now, before = ctx.both(queries.spend_by_month)
    if now.empty and before.empty:
        return None
    section = Section("projects", "Training: runs and spend per project")
    totals = ctx.both(queries.overview_totals, *ctx.energy_factors())
    section.figures.append(Figure("Training runs", "runs", *[first_value(t, "runs") for t in totals], "Overview"))
    merged = (now[["project", "runs", "cost_usd"]]
              .merge(before[["project", "runs", "cost_usd"]], on="project", how="outer", suffixes=("", "_previous"))
              .sort_values("project"))
    section.table = merged[["project", "runs_previous", "runs", "cost_usd_previous", "cost_usd"]]
    section.units = {"runs_previous": "count", "runs": "count", "cost_usd_previous": "USD", "cost_usd": "USD"}
    section.chart = charts_months.project_spend_month(merged, ctx.window.label('current'), ctx.window.label('previous'))
    return section


def run_standing(ctx: Context) -> pd.DataFrame:
    """Every ranked run of the month (Training runs page, the month as date range, each metric):
    run_id, on_frontier, dominated_by, cost_usd and the dominating run's cost."""
    ranked = ctx.fetch(queries.pareto_standing, ctx.current_range)
    if ranked.empty:
        return pd.DataFrame(columns=["run_id", "project", "val_metric_name", "on_frontier", "dominated_by",
                                     "cost_usd", "dominating_cost_usd"])
    cost_of = ranked.set_index("run_id")["cost_usd"]
    return ranked.assign(dominating_cost_usd=ranked["dominated_by"].map(cost_of))


def _top_runs(ctx: Context) -> Section | None:
    top = ctx.fetch(queries.top_runs, ctx.current_range, 5)
    if top.empty:
        return None
    standing = run_standing(ctx).set_index("run_id")
    rows = []
    for run in top.itertuples():
        if run.run_id not in standing.index:
            where = "not ranked (failed, preempted, running or no metric)"
        elif bool(standing.at[run.run_id, "on_frontier"]):
            where = "on the frontier"
        else:
            other = standing.at[run.run_id, "dominated_by"]
            ratio = float(run.cost_usd) / float(standing.at[run.run_id, "dominating_cost_usd"])
            where = f"dominated by {other} ({ratio:.1f}x cheaper)"
        rows.append({"run_id": run.run_id, "project": run.project, "instance_type": run.instance_type,
                     "cost_usd": run.cost_usd, "val_metric_name": run.val_metric_name,
                     "val_metric": run.val_metric, "pareto_standing": where})
    section = Section("top_runs", "The five most expensive runs")
    section.table = pd.DataFrame(rows)
    section.units = {"cost_usd": "USD", "val_metric": "decimal"}
    section.notes.append("Pareto standing among the month's completed runs of the same project and metric "
                         "(the Training runs page with this month as date range).")
    return section


def _coverage(ctx: Context) -> Section:
    section = Section("coverage", "Data coverage")
    notes = section.notes
    if ctx.data_through is not None:
        notes.append(f"Data runs through {ctx.data_through.isoformat()}.")
    holes = ctx.fetch(queries.coverage_holes, ctx.current_range)
    if not holes.empty:
        notes.append(f"{len(holes)} GPU trace coverage holes ({holes['gap_h'].sum():,.1f} GPU-hours without samples; "
                     "Idle GPUs page): that time counts as neither idle nor busy.")
    overview = ctx.fetch(queries.overview_totals, ctx.current_range, *ctx.energy_factors())
    runs, priced = int(first_value(overview, "runs") or 0), int(first_value(overview, "runs_with_cost") or 0)
    if runs > priced:
        notes.append(f"{runs - priced} of {runs} runs have no cost (no price or estimated_cost_usd).")
    serving = ctx.fetch(queries.serving_totals, ctx.current_range)
    windows = int(first_value(serving, "windows") or 0)
    for column, what in (("windows_with_cost", "cost"), ("windows_with_energy", "energy")):
        missing = windows - int(first_value(serving, column) or 0)
        if missing:
            notes.append(f"{missing:,} of {windows:,} serving windows have no {what}.")
    run_tag, slack_s = ctx.reconciliation_args()
    for row in ctx.fetch(queries.reconciliation_totals, ctx.current_range, run_tag, slack_s).itertuples():
        if row.unmatched_lines:
            notes.append(f"{row.unmatched_lines:,} usage bill lines ({money_text(row.unmatched_cost, row.billing_currency)}) "
                         "match no run (nodes, serving, storage, or missing tags; Reconciliation page).")
    unmatched = ctx.fetch(queries.unmatched_spend, ctx.current_range, run_tag,
                          ctx.settings.reconciliation.project_tag, slack_s)
    unknown = int(unmatched["lines_naming_unknown_runs"].sum()) if not unmatched.empty else 0
    if unknown:
        notes.append(f"{unknown:,} bill lines name a run that is not loaded.")
    rejected = int(ctx.fetch(queries.loads)["rows_rejected"].sum())
    notes.append(f"{rejected:,} lines were rejected across all loads so far (Data page)." if rejected
                 else "No line was rejected in any load so far.")
    return section


# The seed's two graphs (seed 000, "Monitoring, budgeting, and guardrails": a monthly retrospective
# with "cost per run vs val_metric" and "cost per 1,000 requests per model version"), and the
# month's guardrail breaches.

FRONTIER_TABLE_MAX_ROWS = 50


def run_points(ctx: Context) -> pd.DataFrame:
    """One row per ranked run that started in the month (completed, with a cost and a validation
    metric; the Training runs page's ranking, queries.pareto_standing): run_id, project,
    val_metric_name, metric_goal, val_metric, cost_usd (USD), on_frontier, dominated_by."""
    return ctx.fetch(queries.pareto_standing, ctx.current_range)


def _runs_vs_metric(ctx: Context) -> Section | None:
    points = run_points(ctx)
    if points.empty:
        return None
    section = Section("runs_vs_metric", "Cost per run against the validation metric")
    drawn = charts_runs.month_runs_vs_metric_rows(points)
    section.chart = charts_runs.month_runs_vs_metric(points)
    frontier = points[points["on_frontier"].astype(bool)]
    section.table = frontier[["run_id", "project", "val_metric_name", "val_metric", "cost_usd"]].head(
        FRONTIER_TABLE_MAX_ROWS)
    section.units = {"val_metric": "decimal", "cost_usd": "USD"}
    section.notes.append(f"One point per completed run of the month with a cost and a validation metric "
                         f"({len(points):,} runs, {points['val_metric_name'].nunique()} metrics); the table lists "
                         f"the runs on their project's Pareto frontier ({len(frontier):,}"
                         + (f", the first {FRONTIER_TABLE_MAX_ROWS}" if len(frontier) > FRONTIER_TABLE_MAX_ROWS else "")
                         + "). Failed, preempted and running runs are left out: their metric is a partial one.")
    if len(drawn) < len(points):
        section.notes.append(f"The chart draws {len(drawn):,} of the {len(points):,} runs (at most "
                             f"{charts.MAX_POINTS:,} points, {charts_runs.COST_VS_METRIC_MAX_PANELS} metrics).")
    return section


def version_costs(ctx: Context) -> pd.DataFrame:
    """Per service and model version with windows in the month: the Serving page's figures
    (queries.serving_by_version with the month as date range), cost per 1k successful requests in USD."""
    return ctx.fetch(queries.serving_by_version, ctx.current_range)


def _version_costs(ctx: Context) -> Section | None:
    versions = version_costs(ctx)
    if versions.empty:
        return None
    section = Section("version_costs", "Cost per 1k requests per model version")
    section.table = versions[["service", "model_version", "requests_success", "cost_usd", "cost_per_1k_success_usd"]]
    section.units = {"requests_success": "count", "cost_usd": "USD", "cost_per_1k_success_usd": "USD/1k"}
    section.chart = charts_serving.serving_by_version(versions, "cost_per_1k_success_usd", "USD per 1k successful requests")
    section.notes.append("Per model version, over the month's windows: the windows' cost over their successful "
                         "requests x 1,000 (windows without a cost left out of both), as the Serving page shows it.")
    return section


Limits = tuple[float, float, float, tuple[tuple[str, float, float, float], ...]]


def guardrail_limits(settings: config.Config) -> Limits:
    """The run guardrails of [alerts] as queries.runs_over_limits takes them (the arguments the
    run_guardrail alert passes): global cost (USD), wall-clock hours, GPU-hours, and per project."""
    rules = settings.alerts
    own = tuple((project, float(limits.max_cost_usd), limits.max_hours, limits.max_gpu_hours)
                for project, limits in sorted(rules.project_run_limits.items()))
    return float(rules.run_limits.max_cost_usd), rules.run_limits.max_hours, rules.run_limits.max_gpu_hours, own


def guardrails_set(settings: config.Config) -> bool:
    """Whether any run guardrail (global or per project) is set."""
    rules = settings.alerts
    return any(limits.max_cost_usd or limits.max_hours or limits.max_gpu_hours
               for limits in (rules.run_limits, *rules.project_run_limits.values()))


def guardrail_breaches(ctx: Context) -> pd.DataFrame:
    """The runs that started in the month and are over a run guardrail: the query the run_guardrail
    alert asks (queries.runs_over_limits) with the same limits, so list and alert agree. Costliest
    first; `over` names the limits crossed ('cost', 'hours', 'GPU-hours')."""
    found = ctx.fetch(queries.runs_over_limits, ctx.current_range, *guardrail_limits(ctx.settings))
    if found.empty:
        return found.assign(over=pd.Series(dtype=object))
    over = [", ".join(name for name, crossed in (("cost", c), ("hours", h), ("GPU-hours", g)) if crossed is True)
            for c, h, g in zip(found["over_cost"], found["over_hours"], found["over_gpu_hours"])]
    limits = {column: found[column].where(found[column].astype(float) > 0)  # 0 is no limit: shown blank
              for column in ("max_cost_usd", "max_hours", "max_gpu_hours")}
    return found.assign(over=over, **limits)


def _guardrails(ctx: Context) -> Section:
    section = Section("guardrails", "Guardrail breaches")
    if not guardrails_set(ctx.settings):
        section.notes.append("No run guardrail is set: `[alerts] run_max_cost_usd`, `run_max_hours`, "
                             "`run_max_gpu_hours` (and per project `[alerts.run_limits.PROJECT]`) in mlcost.toml.")
        return section
    breaches = guardrail_breaches(ctx)
    count = len(breaches)
    section.figures.append(Figure("Runs over a guardrail", "runs", count,
                                  len(ctx.fetch(queries.runs_over_limits, ctx.previous_range,
                                                *guardrail_limits(ctx.settings))), "Alerts (run_guardrail)"))
    if count:
        section.table = breaches[["run_id", "project", "owner", "started_at", "over", "cost_usd", "max_cost_usd",
                                  "duration_h", "max_hours", "gpu_hours", "max_gpu_hours"]]
        section.units = {"started_at": "datetime", "cost_usd": "USD", "max_cost_usd": "USD", "duration_h": "decimal",
                         "max_hours": "decimal", "gpu_hours": "decimal", "max_gpu_hours": "decimal"}
    section.notes.append(("No run that started this month was over a guardrail. " if not count else "")
                         + "A run is over when its cost, wall-clock hours or GPU-hours exceed its project's limit "
                         "(`[alerts.run_limits.PROJECT]`), else the global one (`[alerts]`; 0 is no limit): the "
                         "runs the run_guardrail alert names; a blank limit is not set.")
    return section


def budget_burns(ctx: Context, last_day: date) -> list:
    """Each configured budget's burn (metrics/budgets.py) counted to `last_day` (included): what the
    Budgets page shows with the day after it as its as-of."""
    as_of = last_day + timedelta(days=1)
    return ctx.remember(("budget_burns", as_of),
                        lambda: budgets.burns(ctx.settings.budgets, ctx.settings, as_of))


def _budget_outcome(burn) -> str:
    """'over by $1,234.00', 'within (82 % used)', or for a period still running its forecast."""
    budget, over = burn.budget, burn.spent - burn.budget.amount
    if over > 0:
        return f"over by {money_text(over, budget.currency)} ({burn.used_pct:.0f} % used)"
    if burn.days_left > 0:
        return (f"{burn.used_pct:.0f} % used with {burn.days_left} days left; forecast "
                f"{money_text(burn.forecast, budget.currency)} ({burn.forecast_pct:.0f} %)")
    return f"within ({burn.used_pct:.0f} % used)"


def _budgets(ctx: Context) -> Section | None:
    """Each budget's spend in its period to the end of the month, against the month before."""
    if not ctx.settings.budgets:
        return None
    # the current month to its end (spend stops at the last day with data; the forecast runs to the end),
    # the previous month to the last compared day: the same days (metrics/periods.py)
    current = budget_burns(ctx, ctx.current_range.end)
    previous = budget_burns(ctx, ctx.window.previous_last)
    section = Section("budgets", "Budget outcomes")
    rows = []
    for now, before in zip(current, previous):
        budget = now.budget
        same_period = before.period_start == now.period_start  # a quarter's months: no change to show
        label = f"Budget {budget.name}: {'quarter' if budget.period == 'quarter' else 'month'} to date ({budget.currency})"
        section.figures.append(Figure(label, budget.currency, now.spent,
                                      None if same_period or budget.period == "quarter" else before.spent, "Budgets"))
        rows.append({"budget": budget.name, "scope": budget.scope_label,
                     "period": f"{budget.period} from {now.period_start:%Y-%m-%d}",
                     "amount": money_text(budget.amount, budget.currency),
                     "spent": money_text(now.spent, budget.currency), "used_pct": now.used_pct,
                     "outcome": _budget_outcome(now), "source": now.source})
    section.table = pd.DataFrame(rows)
    section.units = {"used_pct": "%"}
    section.notes.append(f"Spend of each budget's period to the last compared day ({ctx.window.label('previous')} "
                         f"against {ctx.window.label('current')}; Budgets page, as of the day after it): billed "
                         "cost where the bill covers the period, else estimated.")
    return section


def money_text(amount: object, currency: str) -> str:
    value = money(amount)
    if value is None:
        return "—"
    return f"${value:,.2f}" if currency == "USD" else f"{value:,.2f} {currency}"


def month_label(month: date) -> str:
    return month.strftime("%Y-%m")


# The report's sections, in order. A section is a function of the Context returning a Section or None.
SECTIONS: tuple[Callable[[Context], Section | None], ...] = (
    _spend, _energy, _idle, _serving, _version_costs, _versions, _projects, _top_runs, _runs_vs_metric, _guardrails,
    _budgets, _coverage,
)

