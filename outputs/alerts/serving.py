"""Serving alerts: a model version's regression against the previous version, a service's cost per
1,000 requests jumping within 24 hours, and a service left running with near-zero traffic."""
from __future__ import annotations

from datetime import date, timedelta

import pandas as pd

from metrics import budgets, queries, serving_health
from metrics.filters import Filters
from outputs.alerts.common import Alert
from present.format import money
from ingest.settings.sections import Config


def regression_alerts(settings: Config, as_of: date) -> list[Alert]:
    """Model versions that regressed (Serving page rule) and started within the lookback."""
    rule = settings.serving
    found = queries.serving_regressions(Filters(), rule.regression_pct, rule.min_requests)
    since = as_of - timedelta(days=settings.alerts.regression_lookback_days)
    out = []
    for row in found.itertuples():
        started = pd.Timestamp(row.start_date).date()
        if not since <= started < as_of:
            continue
        is_cost = "cost" in row.metric
        before, after = (money(row.before, "USD", 4), money(row.after, "USD", 4)) if is_cost else (
            f"{row.before:,.2f} Wh", f"{row.after:,.2f} Wh")
        what = "costs" if is_cost else "uses"
        text = (f"Service {row.service} {row.to_version} {what} {row.change_pct:.0f} % more per 1k successful "
                f"requests than {row.from_version}: {after} against {before} ({row.metric}), since "
                f"{started:%Y-%m-%d}, over {int(row.to_requests_success):,} successful requests. "
                f"Compare the two versions on the Serving page; roll back or resize if the change was not intended.")
        out.append(Alert("serving_regression", f"{row.service} {row.to_version}", row.metric, started,
                         settings.alerts.channel,
                         f"{row.service} {row.to_version}: {'cost' if is_cost else 'energy'} per 1k requests "
                         f"{row.change_pct:.0f} % worse than {row.from_version}", text))
    return out




def cost_per_1k_alerts(settings: Config, as_of: date) -> list[Alert]:
    """Services whose cost per 1,000 requests over the last 24 hours of data (the as-of day, UTC) is at
    least [serving] cost_per_1k_jump_ratio times the 24 hours before, with at least
    cost_per_1k_min_requests requests in each (metrics/serving_health.py), in the seed's words:
    "Service B cost per 1,000 requests increased 2x in the last 24 hours; new model version: ...".
    Fires once per service and as-of day."""
    rule = settings.serving
    through = budgets.as_of_day(as_of)
    if through is None or rule.cost_per_1k_jump_ratio <= 0:
        return []
    last, before, jumps = serving_health.cost_per_1k_jumps(through, rule.cost_per_1k_jump_ratio,
                                                           rule.cost_per_1k_min_requests)
    out = []
    for row in jumps.itertuples():
        started = [f"{version} (first window {pd.Timestamp(at).tz_convert('UTC'):%Y-%m-%d %H:%M} UTC)"
                   for version, at in zip(row.new_versions, row.new_versions_started_at)]
        versions = ("new model version: " + ", ".join(started) if started
                    else "new model version: none started in these 24 hours")
        text = (f"Service {row.service} cost per 1,000 requests increased {row.ratio:.1f}× in the last 24 hours; "
                f"{versions}. {money(row.cost_per_1k_after_usd, 'USD', 4)} per 1k requests over {last.text()} "
                f"({int(row.requests_after):,} requests, {money(row.cost_after_usd, 'USD')}) against "
                f"{money(row.cost_per_1k_before_usd, 'USD', 4)} over the 24 hours before "
                f"({int(row.requests_before):,} requests, {money(row.cost_before_usd, 'USD')}); threshold "
                f"{rule.cost_per_1k_jump_ratio:g}×. Did the new version or a scale-up raise the cost? Decide whether "
                "the quality gain is worth it (Serving page).")
        out.append(Alert("cost_per_1k_jump", row.service, f"{rule.cost_per_1k_jump_ratio:g}x", through,
                         settings.alerts.channel,
                         f"{row.service}: cost per 1k requests {row.ratio:.1f}× in the last 24 hours", text))
    return out


def idle_service_alerts(settings: Config, as_of: date) -> list[Alert]:
    """Services whose every window of the last [serving] idle_window_hours (ending with the as-of day)
    served fewer than idle_qps requests per second while costing money (metrics/serving_health.py);
    the seed: "if QPS stays near zero for a long window, scale down or shut down instances". Fires
    once per service and month."""
    rule = settings.serving
    through = budgets.as_of_day(as_of)
    if through is None or rule.idle_window_hours <= 0 or rule.idle_qps <= 0:
        return []
    span, idle = serving_health.idle_services(through, rule.idle_window_hours, rule.idle_qps)
    out = []
    for row in idle.itertuples():
        text = (f"Service {row.service} ({row.versions}) served {int(row.requests_total):,} requests in the last "
                f"{span.hours:g} hours ({span.text()}): {row.throughput_rps:.4f} requests per second, never more "
                f"than {row.max_window_rps:.4f} in a window (idle below {rule.idle_qps:g}), while its windows cost "
                f"{money(row.cost_usd, 'USD')}. QPS stayed near zero for a long window: scale down or shut down "
                "its instances (Serving page).")
        out.append(Alert("idle_service", row.service, f"{rule.idle_qps:g} qps/{rule.idle_window_hours}h",
                         date(through.year, through.month, 1), settings.alerts.channel,
                         f"{row.service}: near-zero traffic for {span.hours:g} hours, "
                         f"{money(row.cost_usd, 'USD')} spent", text))
    return out
