"""Training runs: overview totals, spend by month, the runs table and its Pareto standing.

Every query starts from FILTERED_RUNS; derived per-run figures come from the warehouse view
`run_costs`, so pages and tests see one definition.
"""
from __future__ import annotations

import pandas as pd

from metrics.filters import Filters
from metrics.queries.common import FILTERED_RUNS
from ingest import warehouse

def overview_totals(filters: Filters, regions: tuple[tuple[str, float, float], ...] = (),
                    pue: float = 1.0, grid_gco2_per_kwh: float = 0.0) -> pd.DataFrame:
    """One row: run count, estimated cost (USD), energy (kWh), emissions (kg), GPU-hours, and how many runs carry each.

    A run's energy is its own `energy_kwh` (summary, CodeCarbon), else its measured GPU energy
    (view run_energy); its emissions likewise, the GPU energy x PUE x grid g/kWh / 1000 with the
    factors of `regions` as in run_energy_figures. `runs_energy_from_traces` counts the latter."""
    return warehouse.query(FILTERED_RUNS + """
        , factors AS (
            SELECT unnest($regions::VARCHAR[]) AS region, unnest($pues::DOUBLE[]) AS pue,
                   unnest($grids::DOUBLE[]) AS gco2_per_kwh
        ), per_run AS (
            SELECT r.cost_usd, r.gpu_hours,
                   coalesce(r.energy_kwh, e.gpu_energy_kwh) AS energy_kwh,
                   r.energy_kwh IS NULL AND e.gpu_energy_kwh IS NOT NULL AS energy_from_traces,
                   coalesce(r.emissions_kg, CASE WHEN r.energy_kwh IS NULL THEN
                       e.gpu_energy_kwh * coalesce(f.pue, $pue) * coalesce(f.gco2_per_kwh, $grid) / 1000 END)
                       AS emissions_kg
            FROM filtered_runs r LEFT JOIN run_energy e USING (run_id)
            LEFT JOIN factors f ON f.region = lower(trim(r.region))
        )
        SELECT count(*)                       AS runs,
               sum(CAST(cost_usd AS DECIMAL(38, 10)))                  AS cost_usd,
               count(cost_usd)                AS runs_with_cost,
               sum(energy_kwh)                AS energy_kwh,
               count(energy_kwh)              AS runs_with_energy,
               count(*) FILTER (WHERE energy_from_traces) AS runs_energy_from_traces,
               sum(emissions_kg)              AS emissions_kg,
               count(emissions_kg)            AS runs_with_emissions,
               sum(gpu_hours)                 AS gpu_hours
        FROM per_run
    """, {**filters.params(), "regions": [r.strip().lower() for r, _, _ in regions],
          "pues": [p for _, p, _ in regions], "grids": [g for _, _, g in regions],
          "pue": pue, "grid": grid_gco2_per_kwh})


def spend_by_month(filters: Filters) -> pd.DataFrame:
    """Per month (UTC) and project: estimated cost (USD), energy (kWh) and run count."""
    return warehouse.query(FILTERED_RUNS + """
        SELECT date_trunc('month', started_at AT TIME ZONE 'UTC')::DATE AS month,
               coalesce(project, '(no project)') AS project,
               sum(CAST(cost_usd AS DECIMAL(38, 10)))    AS cost_usd,
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


def runs_over_limits(filters: Filters, max_cost_usd: float, max_hours: float, max_gpu_hours: float,
                     projects: tuple[tuple[str, float, float, float], ...] = ()) -> pd.DataFrame:
    """Runs in the filter over a guardrail (a limit of 0 is none): run, owner, cost (USD, Decimal),
    wall-clock hours and GPU-hours, each run's limits (its project's in `projects`: (project, max
    cost, hours, GPU-hours), else the global ones) and which it is over; costliest first."""
    return warehouse.query_exact(FILTERED_RUNS + """
        , limits AS (
            SELECT unnest($project_names::VARCHAR[]) AS project, unnest($project_costs::DOUBLE[]) AS max_cost_usd,
                   unnest($project_hours::DOUBLE[]) AS max_hours, unnest($project_gpu_hours::DOUBLE[]) AS max_gpu_hours
        ), judged AS (
            SELECT r.run_id, r.project, r.team, r.owner, r.status, r.started_at, r.cost_usd, r.cost_source,
                   r.duration_h, r.gpu_hours,
                   coalesce(l.max_cost_usd, $max_cost_usd) AS max_cost_usd,
                   coalesce(l.max_hours, $max_hours) AS max_hours,
                   coalesce(l.max_gpu_hours, $max_gpu_hours) AS max_gpu_hours
            FROM filtered_runs r LEFT JOIN limits l USING (project)
        )
        SELECT *, max_cost_usd > 0 AND cost_usd > max_cost_usd AS over_cost,
               max_hours > 0 AND duration_h > max_hours AS over_hours,
               max_gpu_hours > 0 AND gpu_hours > max_gpu_hours AS over_gpu_hours
        FROM judged
        WHERE coalesce(max_cost_usd > 0 AND cost_usd > max_cost_usd, false)
           OR coalesce(max_hours > 0 AND duration_h > max_hours, false)
           OR coalesce(max_gpu_hours > 0 AND gpu_hours > max_gpu_hours, false)
        ORDER BY cost_usd DESC NULLS LAST, run_id
    """, {**filters.params(), "max_cost_usd": max_cost_usd, "max_hours": max_hours, "max_gpu_hours": max_gpu_hours,
          "project_names": [p[0] for p in projects], "project_costs": [p[1] for p in projects],
          "project_hours": [p[2] for p in projects], "project_gpu_hours": [p[3] for p in projects]})


def metric_names(filters: Filters) -> pd.DataFrame:
    """Validation metric names with how many runs report each, commonest first."""
    return warehouse.query(FILTERED_RUNS + """
        SELECT val_metric_name, count(*) AS runs, mode(metric_goal) AS goal
        FROM filtered_runs WHERE val_metric IS NOT NULL
        GROUP BY 1 ORDER BY runs DESC, 1
    """, filters.params())


# Pareto standing per metric and project (training_runs() states the rule): the runs of $metric,
# or of every metric when $all_metrics.
STANDING = """
    , scored AS (
        SELECT run_id, project, val_metric_name, cost_usd,
               CASE WHEN metric_goal = 'min' THEN -val_metric ELSE val_metric END AS score
        FROM filtered_runs
        WHERE (val_metric_name = $metric OR $all_metrics) AND val_metric IS NOT NULL AND cost_usd IS NOT NULL
          AND coalesce(status, 'completed') = 'completed'
    ), ranked AS (
        SELECT *, max(score) OVER (
                   PARTITION BY val_metric_name, project ORDER BY cost_usd, score DESC, run_id
                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS best_cheaper_score
        FROM scored
    ), standing AS (
        SELECT run_id, project, val_metric_name, coalesce(project, chr(0)) AS project_key, cost_usd, score,
               best_cheaper_score IS NULL OR score > best_cheaper_score AS on_frontier
        FROM ranked
    ), dominance AS (
        -- A project's frontier gains score with every step up in cost, so the cheapest
        -- frontier run scoring at least as well as a dominated run is the one with the
        -- lowest such score (an as-of join), and it costs no more than the dominated run.
        SELECT d.run_id, f.run_id AS dominated_by
        FROM (SELECT * FROM standing WHERE NOT on_frontier) d
        ASOF LEFT JOIN (SELECT * FROM standing WHERE on_frontier) f
          ON d.val_metric_name = f.val_metric_name AND d.project_key = f.project_key AND f.score >= d.score
    )
"""


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
    return warehouse.query(FILTERED_RUNS + STANDING + """
        , targeted AS (
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
        SELECT r.run_id, r.tags['run_name'] AS run_name, r.project, r.team, r.owner, r.model, r.status,
               r.started_at, r.ended_at,
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
    """, {**filters.params(), "metric": metric, "target": target, "all_metrics": False})


def pareto_standing(filters: Filters) -> pd.DataFrame:
    """Every ranked run of the filter, whatever its metric: run_id, project, val_metric_name,
    on_frontier, dominated_by and cost_usd, as training_runs() ranks them for that metric (one
    query for every metric instead of one per metric); commonest metric first, newest run first."""
    return warehouse.query(FILTERED_RUNS + STANDING + """
        , counts AS (SELECT val_metric_name, count(*) AS runs FROM filtered_runs
                     WHERE val_metric IS NOT NULL GROUP BY 1)
        SELECT s.run_id, s.project, s.val_metric_name, s.on_frontier, d.dominated_by, s.cost_usd
        FROM standing s LEFT JOIN dominance d USING (run_id) JOIN counts c USING (val_metric_name)
        JOIN filtered_runs r USING (run_id)
        ORDER BY c.runs DESC, s.val_metric_name, r.started_at DESC, s.run_id
    """, {**filters.params(), "metric": None, "all_metrics": True})
