"""Every query the dashboard runs: bound parameters only, results as DataFrames.

Filtering is one CTE (FILTERED_RUNS) that each runs query starts from; derived per-run
figures come from the warehouse view `run_costs`, so pages and tests see one definition.
"""
from __future__ import annotations

import pandas as pd

from app.filters import Filters
from ingest import warehouse

FILTERED_RUNS = """
WITH filtered_runs AS (
    SELECT * FROM run_costs
    WHERE started_at >= $start AND started_at < $end
      AND (len($projects::VARCHAR[]) = 0 OR list_contains($projects::VARCHAR[], project))
      AND (len($teams::VARCHAR[]) = 0 OR list_contains($teams::VARCHAR[], team))
)
"""


def data_version() -> int:
    """The newest load_id (0 when empty): it changes whenever any data changes."""
    return int(warehouse.query("SELECT coalesce(max(load_id), 0) AS v FROM loads")["v"].iloc[0])


def filter_choices() -> dict:
    """The first and last day of runs and serving windows, and the projects and teams present, for the sidebar."""
    span = warehouse.query(
        "SELECT min(first_day) AS first_day, max(last_day) AS last_day FROM ("
        " SELECT min(started_at)::DATE AS first_day, max(started_at)::DATE AS last_day FROM runs"
        " UNION ALL SELECT min(day), max(day) FROM serving_costs)"
    ).iloc[0]
    projects = warehouse.query("SELECT DISTINCT project FROM runs WHERE project IS NOT NULL ORDER BY 1")
    teams = warehouse.query("SELECT DISTINCT team FROM runs WHERE team IS NOT NULL ORDER BY 1")
    return {
        "first_day": None if pd.isna(span["first_day"]) else span["first_day"],
        "last_day": None if pd.isna(span["last_day"]) else span["last_day"],
        "projects": projects["project"].tolist(),
        "teams": teams["team"].tolist(),
    }


def overview_totals(filters: Filters) -> pd.DataFrame:
    """One row: run count, estimated cost (USD), energy (kWh), emissions (kg), GPU-hours, and how many runs carry each."""
    return warehouse.query(FILTERED_RUNS + """
        SELECT count(*)                       AS runs,
               sum(cost_usd)                  AS cost_usd,
               count(cost_usd)                AS runs_with_cost,
               sum(energy_kwh)                AS energy_kwh,
               count(energy_kwh)              AS runs_with_energy,
               sum(emissions_kg)              AS emissions_kg,
               count(emissions_kg)            AS runs_with_emissions,
               sum(gpu_hours)                 AS gpu_hours
        FROM filtered_runs
    """, filters.params())


def spend_by_month(filters: Filters) -> pd.DataFrame:
    """Per month (UTC) and project: estimated cost (USD), energy (kWh) and run count."""
    return warehouse.query(FILTERED_RUNS + """
        SELECT date_trunc('month', started_at AT TIME ZONE 'UTC')::DATE AS month,
               coalesce(project, '(no project)') AS project,
               sum(cost_usd)    AS cost_usd,
               sum(energy_kwh)  AS energy_kwh,
               count(*)         AS runs
        FROM filtered_runs
        GROUP BY ALL
        ORDER BY month, project
    """, filters.params())


def top_runs(filters: Filters, limit: int = 5) -> pd.DataFrame:
    """The most expensive runs in the filter, costliest first."""
    return warehouse.query(FILTERED_RUNS + """
        SELECT run_id, project, team, started_at, duration_h, instance_type, cost_usd,
               val_metric_name, val_metric
        FROM filtered_runs WHERE cost_usd IS NOT NULL
        ORDER BY cost_usd DESC, run_id LIMIT $limit
    """, {**filters.params(), "limit": limit})


def metric_names(filters: Filters) -> pd.DataFrame:
    """Validation metric names with how many runs report each, commonest first."""
    return warehouse.query(FILTERED_RUNS + """
        SELECT val_metric_name, count(*) AS runs, mode(metric_goal) AS goal
        FROM filtered_runs WHERE val_metric IS NOT NULL
        GROUP BY 1 ORDER BY runs DESC, 1
    """, filters.params())


def training_runs(filters: Filters, metric: str | None, target: float | None) -> pd.DataFrame:
    """Every run in the filter with its derived figures, Pareto standing and cost-to-target.

    Pareto standing is per project, among completed runs (or runs without a status)
    reporting `metric` with a cost: failed, preempted and running runs are not ranked, as
    their metric is a partial one. A ranked run is on the frontier when no cheaper (or
    equally cheap, earlier-listed) run of its project scored as well; otherwise
    `dominated_by` names the cheapest frontier run that did.
    Cost-to-target (USD) is cost × the share of the run's duration spent before its eval
    history first reached the target: `target` for runs of `metric`, else the run's own
    target_metric.
    """
    return warehouse.query(FILTERED_RUNS + """
        , scored AS (
            SELECT run_id, project, cost_usd,
                   CASE WHEN metric_goal = 'min' THEN -val_metric ELSE val_metric END AS score
            FROM filtered_runs
            WHERE val_metric_name = $metric AND val_metric IS NOT NULL AND cost_usd IS NOT NULL
              AND coalesce(status, 'completed') = 'completed'
        ), ranked AS (
            SELECT *, max(score) OVER (
                       PARTITION BY project ORDER BY cost_usd, score DESC, run_id
                       ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS best_cheaper_score
            FROM scored
        ), standing AS (
            SELECT run_id, project, cost_usd, score,
                   best_cheaper_score IS NULL OR score > best_cheaper_score AS on_frontier
            FROM ranked
        ), dominance AS (
            SELECT d.run_id,
                   (SELECT arg_min(f.run_id, f.cost_usd) FROM standing f
                    WHERE f.on_frontier AND f.project IS NOT DISTINCT FROM d.project
                      AND f.score >= d.score AND f.cost_usd <= d.cost_usd AND f.run_id <> d.run_id
                   ) AS dominated_by
            FROM standing d WHERE NOT d.on_frontier
        ), targeted AS (
            SELECT *, coalesce(CASE WHEN val_metric_name = $metric THEN $target END, target_metric)
                      AS goal_value
            FROM filtered_runs
        ), reached AS (
            SELECT r.run_id, min(e.elapsed_s) AS time_to_target_s
            FROM targeted r JOIN run_evals e USING (run_id)
            WHERE e.elapsed_s IS NOT NULL AND r.goal_value IS NOT NULL
              AND CASE WHEN r.metric_goal = 'min' THEN e.value <= r.goal_value
                       ELSE e.value >= r.goal_value END
            GROUP BY r.run_id
        )
        SELECT r.run_id, r.project, r.team, r.owner, r.model, r.status, r.started_at, r.ended_at,
               r.duration_h, r.instance_type, r.gpu_type, r.gpu_count, r.gpu_hours,
               r.price_per_hour_usd, r.cost_usd, r.cost_source,
               r.val_metric_name, r.val_metric, r.metric_goal,
               s.on_frontier, dm.dominated_by,
               r.examples, r.examples_source, r.cost_per_1k_examples_usd,
               r.goal_value AS target_metric,
               t.time_to_target_s / 3600.0 AS time_to_target_h,
               CASE WHEN t.time_to_target_s IS NOT NULL AND r.duration_s > 0
                    THEN CAST(round(r.cost_usd * least(t.time_to_target_s / r.duration_s, 1.0), 6)
                              AS DECIMAL(38, 6)) END AS cost_to_target_usd,
               r.energy_kwh, r.emissions_kg, r.source_kind, r.flags
        FROM targeted r
        LEFT JOIN standing s USING (run_id)
        LEFT JOIN dominance dm USING (run_id)
        LEFT JOIN reached t USING (run_id)
        ORDER BY r.started_at DESC, r.run_id
    """, {**filters.params(), "metric": metric, "target": target})


def loads() -> pd.DataFrame:
    """The load ledger, newest first."""
    return warehouse.query(
        "SELECT load_id, loaded_at, path, kind, rows_loaded, rows_rejected, sha256 "
        "FROM loads ORDER BY load_id DESC"
    )


def rejects(limit: int = 1000) -> pd.DataFrame:
    """The most recent rejected lines with file, line and reason."""
    return warehouse.query(
        "SELECT r.load_id, l.loaded_at, r.path, r.line, r.reason, r.raw "
        "FROM rejects r JOIN loads l USING (load_id) "
        "ORDER BY r.load_id DESC, r.line LIMIT ?", [limit]
    )


# --- Serving efficiency ------------------------------------------------------------------
# Windows come from the view `serving_costs`, limited to the sidebar's date range by
# window_start (projects and teams do not apply to services). A group's figures are ratios of
# sums, written once in SERVING_FIGURES, so per-version, over-time and regression figures agree.

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
    CAST(sum(cost_usd) * 1000 / nullif(sum(success_priced), 0) AS DECIMAL(38, 12))
                                                          AS cost_per_1k_success_usd,
    CAST(sum(cost_usd) * 1000 / nullif(sum(requests_priced), 0) AS DECIMAL(38, 12))
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
               mode(instance_type) AS instance_type, max(replicas) AS replicas,""" + SERVING_FIGURES + """
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
