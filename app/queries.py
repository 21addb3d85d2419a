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
    """The first and last run day and the projects and teams present, for the sidebar."""
    span = warehouse.query(
        "SELECT min(started_at)::DATE AS first_day, max(started_at)::DATE AS last_day FROM runs"
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
