"""Serving efficiency: per service and model version, over time, and version regressions."""
from __future__ import annotations

import pandas as pd

from metrics.filters import Filters
from ingest.engine import warehouse

# Windows come from the view `serving_costs`, limited to the sidebar's date range by
# window_start (projects and teams do not apply to services). A group's figures are ratios of
# sums, written once in SERVING_FIGURES, so per-version, over-time and regression figures agree.
# Money sums keep the windows' DECIMAL(38, 12): ingest bounds a window's cost below 10^15, so
# 10^11 windows fit; a rescale to DECIMAL(38, 10) per window cost ~1 us, 0.5 s a query at 500k.

SERVING_WINDOWS = """
WITH windows AS (
    SELECT * FROM serving_costs WHERE window_start >= $start AND window_start < $end
)
"""

SERVING_FIGURES = """
    count(*)                                              AS windows,
    count(cost_usd)                                       AS windows_with_cost,
    count(energy_kwh)                                     AS windows_with_energy,
    sum(requests_total)::BIGINT                           AS requests_total,
    sum(requests_success)::BIGINT                         AS requests_success,
    sum(requests_error)::BIGINT                           AS requests_error,
    sum(cost_usd)                                         AS cost_usd,
    sum(energy_kwh)                                       AS energy_kwh,
    CAST(sum(cost_usd) / nullif(sum(success_priced), 0) * 1000 AS DECIMAL(38, 12))
                                                          AS cost_per_1k_success_usd,
    CAST(sum(cost_usd) / nullif(sum(requests_priced), 0) * 1000 AS DECIMAL(38, 12))
                                                          AS cost_per_1k_requests_usd,
    sum(energy_kwh) * 1e6 / nullif(sum(success_metered), 0)  AS energy_wh_per_1k_success,
    sum(energy_kwh) * 1e6 / nullif(sum(requests_metered), 0) AS energy_wh_per_1k_requests,
    sum(requests_error) / nullif(sum(requests_error_counted), 0) AS error_rate,
    sum(latency_ms_p50 * requests_total)
        / nullif(sum(requests_total) FILTER (WHERE latency_ms_p50 IS NOT NULL), 0) AS latency_ms_p50,
    sum(latency_ms_p95 * requests_total)
        / nullif(sum(requests_total) FILTER (WHERE latency_ms_p95 IS NOT NULL), 0) AS latency_ms_p95,
    sum(requests_total) / nullif(sum(window_s), 0)        AS throughput_rps,
    sum(avg_gpu_util_pct * window_s)
        / nullif(sum(window_s) FILTER (WHERE avg_gpu_util_pct IS NOT NULL), 0) AS avg_gpu_util_pct,
    sum(avg_cpu_util_pct * window_s)
        / nullif(sum(window_s) FILTER (WHERE avg_cpu_util_pct IS NOT NULL), 0) AS avg_cpu_util_pct
"""
# Where SERVING_FIGURES is not self-evident: cost per 1k successful requests (USD) is
# sum(cost_usd) x 1000 / the successful requests of windows that have a cost; energy per 1k
# (Wh) likewise over windows with an energy; latency p50/p95 are request-weighted means of the
# windows' percentiles (percentiles of windows cannot be combined exactly); throughput is
# requests per second of window time (per host when a service reports from several hosts);
# utilization is the time-weighted mean of the windows' averages.

SERVING_CHANGES = SERVING_WINDOWS + """
, versions AS (
    SELECT service, model_version, min(window_start) AS started_at,""" + SERVING_FIGURES + """
    FROM windows GROUP BY service, model_version
), eligible AS (
    SELECT * FROM versions WHERE requests_success >= $min_requests
), paired AS (
    SELECT service, model_version AS to_version, started_at,
           lag(model_version) OVER w AS from_version,
           lag(requests_success) OVER w AS from_requests_success,
           requests_success AS to_requests_success,
           lag(CAST(cost_per_1k_success_usd AS DOUBLE)) OVER w AS cost_before,
           CAST(cost_per_1k_success_usd AS DOUBLE) AS cost_after,
           lag(energy_wh_per_1k_success) OVER w AS energy_before,
           energy_wh_per_1k_success AS energy_after
    FROM eligible
    WINDOW w AS (PARTITION BY service ORDER BY started_at, model_version)
), compared AS (
    SELECT *, 'cost_per_1k_success_usd' AS metric, cost_before AS before, cost_after AS after FROM paired
    UNION ALL
    SELECT *, 'energy_wh_per_1k_success' AS metric, energy_before, energy_after FROM paired
)
SELECT service, metric, from_version, to_version, started_at,
       (started_at AT TIME ZONE 'UTC')::DATE AS start_date,
       before, after, (after / before - 1) * 100 AS change_pct,
       (after / before - 1) * 100 > $regression_pct AS is_regression,
       from_requests_success, to_requests_success
FROM compared
WHERE from_version IS NOT NULL AND before > 0 AND after IS NOT NULL
"""


def _window_range(filters: Filters) -> dict:
    """The date range of `filters` as bound parameters (the only filter serving windows take)."""
    params = filters.params()
    return {"start": params["start"], "end": params["end"]}


def serving_totals(filters: Filters) -> pd.DataFrame:
    """One row: services, versions, the SERVING_FIGURES of every window in the date range."""
    return warehouse.query(SERVING_WINDOWS + """
        SELECT count(DISTINCT service) AS services,
               count(DISTINCT (service, model_version)) AS versions,""" + SERVING_FIGURES + """
        FROM windows
    """, _window_range(filters))


def serving_by_version(filters: Filters) -> pd.DataFrame:
    """Per service and model version (in order of first window): its span, instance type and SERVING_FIGURES."""
    return warehouse.query(SERVING_WINDOWS + """
        SELECT service, model_version,
               min(window_start) AS first_window, max(window_end) AS last_window,
               mode() WITHIN GROUP (ORDER BY instance_type) AS instance_type, max(replicas) AS replicas,""" + SERVING_FIGURES + """
        FROM windows
        GROUP BY service, model_version
        ORDER BY service, first_window, model_version
    """, _window_range(filters))


def serving_over_time(filters: Filters, max_points: int = 5000) -> pd.DataFrame:
    """Per service and UTC day (week or month when days would exceed max_points): SERVING_FIGURES.

    `bucket` names the period used and `versions` lists the model versions seen in it.
    """
    return warehouse.query(SERVING_WINDOWS + """
        , span AS (
            SELECT CASE WHEN count(DISTINCT (service, day)) <= $max_points THEN 'day'
                        WHEN count(DISTINCT (service, day)) / 7 <= $max_points THEN 'week'
                        ELSE 'month' END AS bucket
            FROM windows
        )
        SELECT service, date_trunc(bucket, day)::DATE AS day, bucket,
               string_agg(DISTINCT model_version, ', ' ORDER BY model_version) AS versions,""" + SERVING_FIGURES + """
        FROM windows, span
        GROUP BY service, date_trunc(bucket, day), bucket
        ORDER BY service, day
    """, {**_window_range(filters), "max_points": max_points})


def serving_version_changes(filters: Filters, regression_pct: float, min_requests: int) -> pd.DataFrame:
    """Each model version against the previous one of its service, for cost (USD) and energy (Wh) per 1k successful requests.

    Versions are ordered by their first window; only versions with at least `min_requests`
    successful requests in the date range take part (a smaller one is skipped and the next is
    compared with the one before it). `change_pct` is (after / before - 1) x 100;
    `is_regression` when it exceeds `regression_pct`. `started_at` is the new version's first
    window. The alerting issue reads this through serving_regressions.
    """
    return warehouse.query(SERVING_CHANGES + " ORDER BY service, started_at, metric", {
        **_window_range(filters), "regression_pct": regression_pct, "min_requests": min_requests})


def serving_regressions(filters: Filters, regression_pct: float, min_requests: int) -> pd.DataFrame:
    """The version changes that are regressions (see serving_version_changes), worst first.

    For an alert over all data with the configured thresholds:
    `serving_regressions(Filters(), s.regression_pct, s.min_requests)` with `s = config.load().serving`.
    """
    return warehouse.query(
        "SELECT * FROM (" + SERVING_CHANGES + ") WHERE is_regression ORDER BY change_pct DESC, service",
        {**_window_range(filters), "regression_pct": regression_pct, "min_requests": min_requests})


def serving_by_service(filters: Filters) -> pd.DataFrame:
    """Per service: its model versions and the SERVING_FIGURES of its windows in the date range."""
    return warehouse.query(SERVING_WINDOWS + """
        SELECT service, string_agg(DISTINCT model_version, ', ' ORDER BY model_version) AS versions,"""
                           + SERVING_FIGURES + """
        FROM windows GROUP BY service ORDER BY service
    """, _window_range(filters))


# Two consecutive spans of one service's windows (by window_start): [start, middle) and
# [middle, end). The cost per 1k requests of each is SERVING_FIGURES' (cost of the windows with
# a cost x 1000 / their requests); new versions are those whose first window of all (not only
# of the span) lies in [middle, end).
SERVING_SPAN_CHANGE = SERVING_WINDOWS + """
, spans AS (
    SELECT service, window_start >= $middle AS is_last,""" + SERVING_FIGURES + """
    FROM windows GROUP BY service, window_start >= $middle
), firsts AS (
    SELECT service, model_version, min(window_start) AS started_at
    FROM serving_costs WHERE window_start < $end GROUP BY service, model_version
), started AS (
    SELECT service, list(model_version ORDER BY started_at, model_version) AS new_versions,
           list(started_at ORDER BY started_at, model_version) AS new_versions_started_at
    FROM firsts WHERE started_at >= $middle GROUP BY service
)
SELECT service,
       b.requests_total AS requests_before, a.requests_total AS requests_after,
       b.cost_usd AS cost_before_usd, a.cost_usd AS cost_after_usd,
       b.cost_per_1k_requests_usd AS cost_per_1k_before_usd, a.cost_per_1k_requests_usd AS cost_per_1k_after_usd,
       CAST(a.cost_per_1k_requests_usd AS DOUBLE) / nullif(CAST(b.cost_per_1k_requests_usd AS DOUBLE), 0) AS ratio,
       coalesce(s.new_versions, []) AS new_versions,
       coalesce(s.new_versions_started_at, []) AS new_versions_started_at
FROM (SELECT * FROM spans WHERE is_last) a
FULL JOIN (SELECT * FROM spans WHERE NOT is_last) b USING (service)
LEFT JOIN started s USING (service)
ORDER BY service
"""


def serving_span_change(start, middle, end) -> pd.DataFrame:
    """Per service: requests, cost (USD, Decimal) and cost per 1k requests (USD, Decimal) of its windows
    starting in [start, middle) (`_before`) and [middle, end) (`_after`), `ratio` after / before
    (NaN without a before figure), and the model versions whose first window lies in [middle, end)
    with those first windows' starts (UTC). Bounds are UTC instants."""
    return warehouse.query_exact(SERVING_SPAN_CHANGE, {"start": start, "middle": middle, "end": end})


def serving_quiet_services(start, end, max_qps: float) -> pd.DataFrame:
    """Per service with windows starting in [start, end) (UTC instants): requests, mean requests per
    second (SERVING_FIGURES' throughput_rps), the busiest window's requests per second, cost (USD,
    Decimal), the first window's start, the last window's end and the seconds of window time;
    only services whose every window served fewer than `max_qps` requests per second."""
    return warehouse.query_exact(SERVING_WINDOWS + """
        SELECT service, string_agg(DISTINCT model_version, ', ' ORDER BY model_version) AS versions,
               min(window_start) AS first_window, max(window_end) AS last_window,
               sum(window_s) AS window_s, max(requests_total / window_s) AS max_window_rps,""" + SERVING_FIGURES + """
        FROM windows GROUP BY service
        HAVING max(requests_total / window_s) < $max_qps
        ORDER BY service
    """, {"start": start, "end": end, "max_qps": max_qps})
