"""Training runs: overview totals, spend by month, the runs table and its Pareto standing.

Every query starts from FILTERED_RUNS; derived per-run figures come from the warehouse view
`run_costs`, so pages and tests see one definition.
"""
from __future__ import annotations

import pandas as pd

from metrics.filters import Filters
from metrics.queries.common import FILTERED_RUNS
from ingest.engine import warehouse

# Each run's energy (kWh) and emissions (kg CO2e), one definition for every runs query: its own
# energy_kwh (summary, CodeCarbon, average power x duration), else its measured GPU energy (view
# run_energy); its own emissions_kg, else that energy x PUE x grid g CO2e/kWh / 1000 with the
# factors of its region ($regions/$pues/$grids, matched case-insensitively) or the defaults
# ($pue, $grid) -- the rule run_energy_figures (metrics/queries/gpus.py) applies to traced runs.
RUN_ENERGY = """
    , factors AS (
        SELECT unnest($regions::VARCHAR[]) AS region, unnest($pues::DOUBLE[]) AS pue,
               unnest($grids::DOUBLE[]) AS gco2_per_kwh
    ), run_energy_all AS (
        SELECT r.run_id, coalesce(r.energy_kwh, e.gpu_energy_kwh) AS run_energy_kwh,
               CASE WHEN r.energy_kwh IS NOT NULL THEN 'logged'
                    WHEN e.gpu_energy_kwh IS NOT NULL THEN 'gpu traces' END AS energy_source,
               coalesce(r.emissions_kg, coalesce(r.energy_kwh, e.gpu_energy_kwh)
                        * coalesce(f.pue, $pue) * coalesce(f.gco2_per_kwh, $grid) / 1000) AS run_emissions_kg
        FROM filtered_runs r LEFT JOIN run_energy e USING (run_id)
        LEFT JOIN factors f ON f.region = lower(trim(r.region))
    )
"""


def _factor_params(regions: tuple[tuple[str, float, float], ...], pue: float, grid_gco2_per_kwh: float) -> dict:
    """RUN_ENERGY's parameters from (region, PUE, g CO2e/kWh) triples and the defaults."""
    return {"regions": [r.strip().lower() for r, _, _ in regions], "pues": [p for _, p, _ in regions],
            "grids": [g for _, _, g in regions], "pue": pue, "grid": grid_gco2_per_kwh}


def overview_totals(filters: Filters, regions: tuple[tuple[str, float, float], ...] = (),
                    pue: float = 1.0, grid_gco2_per_kwh: float = 0.0) -> pd.DataFrame:
    """One row: run count, estimated cost (USD), energy (kWh), emissions (kg), GPU-hours, and how many runs carry each.

    A run's energy and emissions are RUN_ENERGY's (its own energy_kwh, else its measured GPU energy;
    its own emissions_kg, else that energy x PUE x grid g/kWh / 1000 with the factors of `regions`).
    `runs_energy_from_traces` counts the runs whose energy is measured."""
    return warehouse.query(FILTERED_RUNS + RUN_ENERGY + """
        , per_run AS (
            SELECT r.cost_usd, r.gpu_hours, e.run_energy_kwh AS energy_kwh,
                   e.energy_source = 'gpu traces' AS energy_from_traces, e.run_emissions_kg AS emissions_kg
            FROM filtered_runs r LEFT JOIN run_energy_all e USING (run_id)
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
    """, {**filters.params(), **_factor_params(regions, pue, grid_gco2_per_kwh)})


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
        SELECT val_metric_name, count(*) AS runs, mode() WITHIN GROUP (ORDER BY metric_goal) AS goal
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


# The figures of each run besides its cost (training_runs() and run_figures() state them).
RUN_FIGURES = """
    , targeted AS (
        SELECT *, coalesce(CASE WHEN val_metric_name = $metric THEN $target END, target_metric) AS goal_value,
               TRY_CAST(tags['throughput_tokens_per_s'] AS DOUBLE) AS throughput_tokens_per_s,
               TRY_CAST(tags['batch_size'] AS DOUBLE) AS batch_size,
               TRY_CAST(tags['epochs'] AS DOUBLE) AS epochs,
               coalesce(tags['config'], instance_type) AS config
        FROM filtered_runs
    ), with_evals AS (
        SELECT DISTINCT run_id FROM run_evals WHERE run_id IN (SELECT run_id FROM filtered_runs)
    ), reached AS (
        SELECT r.run_id, min(e.elapsed_s) AS time_to_target_s
        FROM targeted r JOIN run_evals e USING (run_id)
        WHERE e.elapsed_s IS NOT NULL AND r.goal_value IS NOT NULL
          AND CASE WHEN r.metric_goal = 'min' THEN e.value <= r.goal_value
                   ELSE e.value >= r.goal_value END
        GROUP BY r.run_id
    ), to_target AS (  -- the share of the run's cost and energy spent before it reached the target
        SELECT r.run_id,
               CASE WHEN t.time_to_target_s IS NOT NULL AND r.duration_s > 0
                        THEN least(t.time_to_target_s / r.duration_s, 1.0)
                    WHEN w.run_id IS NULL AND r.goal_value IS NOT NULL AND r.val_metric IS NOT NULL
                         AND CASE WHEN r.metric_goal = 'min' THEN r.val_metric <= r.goal_value
                                  ELSE r.val_metric >= r.goal_value END
                        THEN 1.0 END AS share_to_target,
               CASE WHEN t.time_to_target_s IS NOT NULL AND r.duration_s > 0 THEN 'eval history'
                    WHEN w.run_id IS NULL AND r.goal_value IS NOT NULL AND r.val_metric IS NOT NULL
                         AND CASE WHEN r.metric_goal = 'min' THEN r.val_metric <= r.goal_value
                                  ELSE r.val_metric >= r.goal_value END
                        THEN 'upper bound' END AS to_target_basis
        FROM targeted r LEFT JOIN reached t USING (run_id) LEFT JOIN with_evals w USING (run_id)
    ), keyed AS (  -- retries: a config's runs between two of its completed runs belong to the later one
        SELECT run_id, status,
               coalesce(project, chr(0)) || chr(1) || coalesce(model, chr(0)) || chr(1) || coalesce(config, chr(0))
                   AS retry_key,
               coalesce(sum(CASE WHEN status = 'completed' THEN 1 ELSE 0 END) OVER (
                   PARTITION BY project, model, config ORDER BY started_at, run_id
                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS completed_before
        FROM targeted
    ), attempts AS (
        SELECT retry_key, completed_before,
               count(*) FILTER (WHERE status = 'failed') AS failed_before,
               count(*) FILTER (WHERE status = 'preempted') AS preempted_before
        FROM keyed GROUP BY ALL
    ), retries AS (
        SELECT k.run_id, coalesce(a.failed_before, 0) AS failed_before, coalesce(a.preempted_before, 0) AS preempted_before
        FROM keyed k LEFT JOIN attempts a USING (retry_key, completed_before)
        WHERE k.status = 'completed'
    )
"""


def training_runs(filters: Filters, metric: str | None, target: float | None,
                  regions: tuple[tuple[str, float, float], ...] = (), pue: float = 1.0,
                  grid_gco2_per_kwh: float = 0.0) -> pd.DataFrame:
    """Every run in the filter with its derived figures, Pareto standing and cost-to-target.

    Pareto standing is per project, among completed runs (or runs without a status)
    reporting `metric` with a cost: failed, preempted and running runs are not ranked, as
    their metric is a partial one. A ranked run is on the frontier when no cheaper (or
    equally cheap, earlier-listed) run of its project scored as well; otherwise
    `dominated_by` names the cheapest frontier run that did.

    The target is `target` for runs of `metric`, else the run's own target_metric.
    Cost-to-target (USD) and energy-to-target (kWh) are the run's cost and energy x the share
    of its duration spent before its eval history first reached the target
    (to_target_basis 'eval history'); a run without eval history whose final val_metric meets
    the target counts its whole cost and energy (to_target_basis 'upper bound').
    Per run besides (docs/metrics.md): throughput_examples_per_s, throughput_tokens_per_s,
    usd_per_hour (cost / wall-clock hours), cost_efficiency_examples_per_usd (examples/s x 3600
    / usd_per_hour), run_energy_kwh with energy_source and run_emissions_kg (RUN_ENERGY),
    cost_per_1k_examples_usd, energy_per_1k_examples_wh, batch_size, epochs,
    cost_per_epoch_usd, and for completed runs failed_before / preempted_before: the runs of
    the same project, model and config (tag `config`, else instance_type) that failed or were
    preempted after the config's previous completed run and before this one.
    """
    return warehouse.query(FILTERED_RUNS + STANDING + RUN_ENERGY + RUN_FIGURES + """
        SELECT r.run_id, r.tags['run_name'] AS run_name, r.project, r.team, r.owner, r.model, r.status,
               r.started_at, r.ended_at,
               r.duration_h, r.instance_type, r.gpu_type, r.gpu_count, r.gpu_hours, r.config,
               r.price_per_hour_usd, r.cost_usd, r.cost_source,
               coalesce(len(r.gpu_uuids), 0) > 0 OR coalesce(len(r.gpu_indices), 0) > 0 AS names_gpus,
               r.val_metric_name, r.val_metric, r.metric_goal,
               s.on_frontier, dm.dominated_by,
               r.examples, r.examples_source, r.cost_per_1k_examples_usd,
               r.throughput_examples_per_s, r.throughput_tokens_per_s,
               CASE WHEN r.duration_s > 0 THEN CAST(round(r.cost_usd / r.duration_h, 6) AS DECIMAL(38, 6)) END
                   AS usd_per_hour,
               CASE WHEN r.duration_s > 0 AND r.cost_usd > 0
                    THEN r.throughput_examples_per_s * 3600 / CAST(r.cost_usd / r.duration_h AS DOUBLE) END
                   AS cost_efficiency_examples_per_usd,
               r.goal_value AS target_metric,
               CASE WHEN tt.to_target_basis = 'eval history' THEN t.time_to_target_s / 3600.0
                    WHEN tt.to_target_basis = 'upper bound' THEN r.duration_h END AS time_to_target_h,
               CAST(round(r.cost_usd * tt.share_to_target, 6) AS DECIMAL(38, 6)) AS cost_to_target_usd,
               e.run_energy_kwh * tt.share_to_target AS energy_to_target_kwh,
               tt.to_target_basis,
               r.energy_kwh, r.emissions_kg,
               e.run_energy_kwh, e.energy_source, e.run_emissions_kg,
               CASE WHEN r.examples > 0 THEN e.run_energy_kwh * 1000 / r.examples * 1000 END
                   AS energy_per_1k_examples_wh,
               r.batch_size, r.epochs,
               CASE WHEN r.epochs > 0 THEN CAST(round(r.cost_usd / CAST(r.epochs AS DECIMAL(38, 12)), 6)
                                                AS DECIMAL(38, 6)) END AS cost_per_epoch_usd,
               rt.failed_before, rt.preempted_before,
               r.source_kind, r.flags
        FROM targeted r
        LEFT JOIN standing s USING (run_id)
        LEFT JOIN dominance dm USING (run_id)
        LEFT JOIN reached t USING (run_id)
        LEFT JOIN to_target tt USING (run_id)
        LEFT JOIN run_energy_all e USING (run_id)
        LEFT JOIN retries rt USING (run_id)
        ORDER BY r.started_at DESC, r.run_id
    """, {**filters.params(), "metric": metric, "target": target, "all_metrics": False,
          **_factor_params(regions, pue, grid_gco2_per_kwh)})


GROUPINGS = {"project": "project", "team": "team", "model": "model", "instance type": "instance_type",
             "GPU type": "gpu_type", "config": "config"}


def cost_per_successful_run(filters: Filters, by: str = "project") -> pd.DataFrame:
    """Per group (`by`: a GROUPINGS key): runs, completed runs, failed and preempted runs, the cost
    (USD) of all runs and of the failed and preempted ones, and cost_per_successful_run_usd = all
    runs' cost / completed runs (NULL without a completed run): what one success costs once the
    failures before it are charged to it. Costliest group first."""
    column = GROUPINGS[by]
    return warehouse.query(FILTERED_RUNS + f"""
        , grouped AS (
            SELECT coalesce({column if column != "config" else "coalesce(tags['config'], instance_type)"},
                            '(none)') AS group_name, status,
                   CAST(cost_usd AS DECIMAL(38, 10)) AS cost_usd  -- sums of run costs: 28 integer digits
            FROM filtered_runs
        )
        SELECT group_name, count(*) AS runs,
               count(*) FILTER (WHERE status = 'completed') AS completed_runs,
               count(*) FILTER (WHERE status = 'failed') AS failed_runs,
               count(*) FILTER (WHERE status = 'preempted') AS preempted_runs,
               sum(cost_usd) AS cost_usd,
               coalesce(sum(cost_usd) FILTER (WHERE status IN ('failed', 'preempted')), 0) AS failed_or_preempted_cost_usd,
               CAST(round(sum(cost_usd) / nullif(count(*) FILTER (WHERE status = 'completed'), 0), 6)
                    AS DECIMAL(38, 6)) AS cost_per_successful_run_usd
        FROM grouped GROUP BY group_name
        ORDER BY cost_usd DESC NULLS LAST, group_name
    """, filters.params())


def run_tags(filters: Filters) -> pd.DataFrame:
    """Every (run_id, tag_key, tag_value) of the runs in the filter, for picking runs by a tag."""
    return warehouse.query(FILTERED_RUNS + """
        SELECT run_id, unnest(map_keys(tags)) AS tag_key, unnest(map_values(tags)) AS tag_value
        FROM filtered_runs WHERE tags IS NOT NULL AND cardinality(tags) > 0
        ORDER BY tag_key, tag_value, run_id
    """, filters.params())


def hardware_throughput(filters: Filters, by: str = "GPU type") -> pd.DataFrame:
    """Per project and hardware (`by`: "GPU type" or "instance type"; throughput is comparable
    within a project only) over the runs that log a throughput and a cost: runs, mean throughput_examples_per_s and throughput_tokens_per_s (runs that log
    it), and cost_efficiency_examples_per_usd = examples processed / dollars over those runs
    (sum of throughput x duration / sum of cost), highest first."""
    column = GROUPINGS[by]
    return warehouse.query(FILTERED_RUNS + f"""
        SELECT coalesce(project, '(no project)') AS project, coalesce({column}, '(unknown)') AS hardware,
               count(*) AS runs,
               avg(throughput_examples_per_s) AS throughput_examples_per_s,
               avg(TRY_CAST(tags['throughput_tokens_per_s'] AS DOUBLE)) AS throughput_tokens_per_s,
               sum(throughput_examples_per_s * duration_s) / sum(CAST(cost_usd AS DOUBLE))
                   AS cost_efficiency_examples_per_usd
        FROM filtered_runs
        WHERE throughput_examples_per_s IS NOT NULL AND cost_usd > 0 AND duration_s > 0
        GROUP BY 1, 2 ORDER BY project, cost_efficiency_examples_per_usd DESC, hardware
    """, filters.params())


def pareto_standing(filters: Filters) -> pd.DataFrame:
    """Every ranked run of the filter, whatever its metric: run_id, project, val_metric_name,
    on_frontier, dominated_by, cost_usd (USD), val_metric, metric_goal and started_at, as
    training_runs() ranks them for that metric (one query for every metric instead of one per
    metric); commonest metric first, newest run first."""
    return warehouse.query(FILTERED_RUNS + STANDING + """
        , counts AS (SELECT val_metric_name, count(*) AS runs FROM filtered_runs
                     WHERE val_metric IS NOT NULL GROUP BY 1)
        SELECT s.run_id, s.project, s.val_metric_name, s.on_frontier, d.dominated_by, s.cost_usd,
               r.val_metric, r.metric_goal, r.started_at
        FROM standing s LEFT JOIN dominance d USING (run_id) JOIN counts c USING (val_metric_name)
        JOIN filtered_runs r USING (run_id)
        ORDER BY c.runs DESC, s.val_metric_name, r.started_at DESC, s.run_id
    """, {**filters.params(), "metric": None, "all_metrics": True})
