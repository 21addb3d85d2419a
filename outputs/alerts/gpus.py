"""The idle-GPU waste alert: idle GPU-hours of the last 7 days that cost more than a weekly threshold."""
from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal

from metrics import allocation, budgets, idle, queries
from metrics.filters import Filters
from outputs.alerts.common import Alert
from ingest.settings.sections import Config

IDLE_DAYS = 7


def idle_alerts(settings: Config, as_of: date) -> list[Alert]:
    """Idle GPU-hours of the 7 days ending at the as-of day that cost more than the weekly threshold."""
    threshold = settings.alerts.idle_waste_usd_per_week
    through = budgets.as_of_day(as_of)
    if threshold <= 0 or through is None or queries.gpu_rollup_rule().empty:
        return []
    window = budgets.window(through, IDLE_DAYS)
    start, last = window.first, window.last
    models = queries.gpu_models()
    prices = tuple((name, str(settings.prices.gpu(name))) for name in models["gpu_name"]
                   if settings.prices.gpu(name) is not None)
    gpus = queries.idle_by_gpu(Filters(start=start, end=last), prices)
    priced = gpus[gpus["idle_usd"].notna()]
    if priced.empty:
        return []
    # the idle cost (metrics/idle.py): billed nodes' both parts (USD), plus hosts without bill lines at catalog prices
    found = idle.idle_cost(start, last + timedelta(days=1), allocation.Rules.of(settings),
                           tuple(settings.prices.gpu_usd_per_hour.items()))
    parts = found.billed.get("USD")
    cost = sum((p.shown().cost for p in (parts, found.estimated) if p is not None), Decimal(0))
    if cost <= threshold:
        return []
    worst = priced.sort_values("idle_usd", ascending=False).head(3)
    named = ", ".join(f"{r.host} GPU {r.gpu_index} ({r.gpu_name}) {r.idle_h:,.1f} h ${r.idle_usd:,.2f}"
                      for r in worst.itertuples())
    idle_h = priced["idle_h"].sum()
    text = (f"{len(priced)} GPUs were idle {idle_h:,.1f} GPU-hours in the last {window.days} days "
            f"({window.text()}), costing ${cost:,.2f} (threshold ${threshold:,.2f}/week): "
            + "; ".join(t for t in ((idle.parts_text(parts) if parts else None), idle.estimated_text(found)) if t)
            + f". Most idle: {named}. Release or share these GPUs, or shrink the pool (Idle GPUs page).")
    return [Alert("idle_waste", "GPUs", f"${threshold:g}/week", date(last.year, last.month, 1),
                  settings.alerts.channel, f"Idle GPUs cost ${cost:,.2f} in the last {window.days} days", text)]


