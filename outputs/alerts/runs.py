"""Run guardrails: a training run over its cost ceiling, wall-clock hours or GPU-hours."""
from __future__ import annotations

from datetime import date

import pandas as pd

from metrics import budgets, queries
from metrics.filters import Filters
from outputs.alerts.common import Alert
from ingest.settings.sections import Config


def guardrail_alerts(settings: Config, as_of: date) -> list[Alert]:
    """Training runs that started in the guardrail lookback ending at the as-of day and are over a
    run guardrail ([alerts] run_max_cost_usd, run_max_hours, run_max_gpu_hours; per project
    [alerts.run_limits.PROJECT]): one alert per run, naming it, its owner and its figures."""
    rules = settings.alerts
    if not any(limits.max_cost_usd or limits.max_hours or limits.max_gpu_hours
               for limits in (rules.run_limits, *rules.project_run_limits.values())):
        return []
    through = budgets.as_of_day(as_of)
    if through is None:
        return []
    window = budgets.window(through, rules.guardrail_lookback_days, data_days=())
    own = tuple((project, float(limits.max_cost_usd), limits.max_hours, limits.max_gpu_hours)
                for project, limits in sorted(rules.project_run_limits.items()))
    over = queries.runs_over_limits(Filters(start=window.first, end=window.last), float(rules.run_limits.max_cost_usd),
                                    rules.run_limits.max_hours, rules.run_limits.max_gpu_hours, own)
    out = []
    for run in over.itertuples():
        figures, which = [], []
        if run.over_cost:
            figures.append(f"it cost ${run.cost_usd:,.2f}, over the ${run.max_cost_usd:,.2f} ceiling per run"
                           + ("" if run.cost_source == "given" else f" (estimated: {run.cost_source})"))
            which.append("cost")
        if run.over_hours:
            figures.append(f"it ran {run.duration_h:,.1f} wall-clock hours, over the {run.max_hours:g} h maximum")
            which.append("hours")
        if run.over_gpu_hours:
            figures.append(f"it used {run.gpu_hours:,.1f} GPU-hours, over the {run.max_gpu_hours:g} GPU-hours per run")
            which.append("gpu_hours")
        started = pd.Timestamp(run.started_at).tz_convert("UTC").to_pydatetime()
        owner = run.owner if isinstance(run.owner, str) else "no owner logged"
        project = run.project if isinstance(run.project, str) else "(no project)"
        text = (f"Run {run.run_id} of project {project} (owner {owner}, started {started:%Y-%m-%d %H:%M} UTC"
                + (", still running" if run.status == "running" else "") + "): " + "; ".join(figures)
                + ". A single run this large should be rare and intentional: check that it was meant, and stop or "
                  "resize it if not (Training runs page).")
        out.append(Alert("run_guardrail", run.run_id, "+".join(which), started.date(), rules.channel,
                         f"Run {run.run_id} ({owner}) over its guardrail: {', '.join(which).replace('_', ' ')}", text))
    return out


