"""Every query the dashboard runs: bound parameters only, results as DataFrames.

Filtering is one CTE (FILTERED_RUNS) that each runs query starts from; derived per-run
figures come from the warehouse view `run_costs`, so pages and tests see one definition.
"""
from __future__ import annotations

import re
from datetime import date

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
    """A number that changes whenever any data changes: from the newest load_id, the count of GPU
    rollup computations (`mlcost rollup` loads nothing) and of unloads (which can lower the newest id)."""
    return int(warehouse.query(
        "SELECT hash(coalesce(max(load_id), 0), (SELECT coalesce(max(rollups), 0) FROM gpu_rollup_settings), "
        "(SELECT count(*) FROM unloads)) % 9007199254740991 AS v FROM loads")["v"].iloc[0])


def filter_choices() -> dict:
    """The first and last day with data (runs, serving windows, GPU traces, bills), every day with data, and
    the projects and teams present, for the sidebar."""
    # one query (every page's sidebar reads it cold: a connection each would cost more than the query)
    found = warehouse.query("""
        WITH span AS (
            SELECT min(first_at)::DATE AS first_day, max(last_at)::DATE AS last_day FROM (
                SELECT min(started_at) AS first_at, max(started_at) AS last_at FROM runs
                UNION ALL SELECT min(window_start), max(window_start) FROM serving_windows
                UNION ALL SELECT min(minute), max(minute) FROM gpu_minutes
                UNION ALL SELECT min(charge_period_start), max(charge_period_start) FROM billing_lines)
        ), days AS (  -- the stored instants' UTC days (the connection's zone is UTC), from the tables, not the views
            SELECT DISTINCT day FROM (
                SELECT DISTINCT started_at::DATE AS day FROM runs
                UNION SELECT DISTINCT window_start::DATE FROM serving_windows
                UNION SELECT DISTINCT minute::DATE FROM gpu_minutes
                UNION SELECT DISTINCT charge_period_start::DATE FROM billing_lines) WHERE day IS NOT NULL
        )
        SELECT s.first_day, s.last_day,
               (SELECT coalesce(list(day ORDER BY day), []) FROM days) AS days,
               (SELECT coalesce(list(DISTINCT project ORDER BY project), []) FROM runs WHERE project IS NOT NULL)
                   AS projects,
               (SELECT coalesce(list(DISTINCT team ORDER BY team), []) FROM runs WHERE team IS NOT NULL) AS teams
        FROM span s
    """).iloc[0]
    # dates, not pandas Timestamps: the sidebar's date_input hands back dates, and filters that
    # differ only in that type would miss every cached result on the first rerun
    return {
        "first_day": None if pd.isna(found["first_day"]) else pd.Timestamp(found["first_day"]).date(),
        "last_day": None if pd.isna(found["last_day"]) else pd.Timestamp(found["last_day"]).date(),
        "days": [pd.Timestamp(day).date() for day in found["days"]],
        "projects": list(found["projects"]),
        "teams": list(found["teams"]),
    }


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


def loads() -> pd.DataFrame:
    """The load ledger, newest first, with the options each file was read with and how many of
    its rows are still in the warehouse (later loads replace rows with the same key)."""
    return warehouse.query("""
        WITH current AS (
            SELECT load_id, count(*) AS n FROM runs GROUP BY load_id
            UNION ALL SELECT load_id, count(*) FROM serving_windows GROUP BY load_id
            UNION ALL SELECT load_id, count(*) FROM gpu_samples GROUP BY load_id
            UNION ALL SELECT load_id, count(*) FROM billing_lines GROUP BY load_id
        )
        SELECT l.load_id, l.loaded_at, l.path, l.kind, coalesce(l.options, '') AS options,
               l.rows_loaded, l.rows_rejected,
               coalesce((SELECT sum(n) FROM current c WHERE c.load_id = l.load_id), 0)::BIGINT AS rows_current,
               l.sha256
        FROM loads l ORDER BY l.load_id DESC
    """)


IMPORT_KINDS = ("prometheus", "mlflow", "wandb", "slurm", "serving-metrics")


def import_sources() -> pd.DataFrame:
    """Each import source (`mlcost import ...`, or files of an import kind) with its last import
    that brought data (UTC), how many rows it brought, and how far it has been read (MLflow)."""
    return warehouse.query(
        r"""
        WITH imported AS (
            SELECT CASE WHEN kind IN ('prometheus', 'mlflow') OR regexp_matches(path, '^(wandb|slurm) ')
                        THEN regexp_extract(path, '^(\S+ \S+)', 1) ELSE kind || ' files' END AS source,
                   kind, load_id, loaded_at, rows_loaded, rows_rejected
            FROM loads WHERE kind IN (SELECT unnest(?))
        )
        SELECT i.source, i.kind, max(i.loaded_at) AS last_import, count(*) AS imports,
               arg_max(i.rows_loaded, i.load_id) AS last_rows_loaded,
               arg_max(i.rows_rejected, i.load_id) AS last_rows_rejected,
               sum(i.rows_loaded) AS rows_loaded_total,
               CASE WHEN w.kind = 'mlflow' THEN make_timestamp(CAST(w.watermark AS BIGINT) * 1000) END
                   AS read_up_to
        FROM imported i LEFT JOIN import_watermarks w USING (source)
        GROUP BY i.source, i.kind, w.kind, w.watermark
        ORDER BY last_import DESC
        """, [list(IMPORT_KINDS)])


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
    sum(CAST(cost_usd AS DECIMAL(38, 10)))                                         AS cost_usd,
    sum(energy_kwh)                                       AS energy_kwh,
    CAST(sum(CAST(cost_usd AS DECIMAL(38, 10))) / nullif(sum(success_priced), 0) * 1000 AS DECIMAL(38, 12))
                                                          AS cost_per_1k_success_usd,
    CAST(sum(CAST(cost_usd AS DECIMAL(38, 10))) / nullif(sum(requests_priced), 0) * 1000 AS DECIMAL(38, 12))
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
# sum(CAST(cost_usd AS DECIMAL(38, 10))) x 1000 / the successful requests of windows that have a cost; energy per 1k
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


# --- GPU traces: idle GPUs and measured energy per run --------------------------------------
#
# Pages read the per-minute rollups (gpu_minutes and the views gpu_minute_use, run_energy in
# ingest/schema.sql), never gpu_samples. The sidebar's date range selects minutes by their
# start (UTC); the project and team filters apply to runs only.

def _minute_range(filters: Filters) -> dict:
    params = filters.params()
    return {"start": params["start"], "end": params["end"]}


def gpu_rollup_rule() -> pd.DataFrame:
    """The [gpu] settings the stored rollups were computed with (no row before any trace load)."""
    return warehouse.query("SELECT * FROM gpu_rollup_settings")


def gpu_models() -> pd.DataFrame:
    """Every GPU model (NVML name) in the traces with how many GPUs of it, for pricing."""
    return warehouse.query("SELECT gpu_name, count(DISTINCT (host, gpu_index)) AS gpus FROM gpu_minutes "
                           "WHERE gpu_name IS NOT NULL GROUP BY 1 ORDER BY 1")


def idle_by_gpu(filters: Filters, prices: tuple[tuple[str, str], ...] = ()) -> pd.DataFrame:
    """Per traced GPU in the date range: observed, idle and busy hours, idle kWh, the idle split
    into allocated (a run held the GPU) and unallocated, the mean utilization while busy (%), and
    idle dollars at the GPU's node's cost per GPU-hour from its own USD bill lines in the range
    (`price_source` 'bill'), else at `prices` ((gpu_name, USD per GPU-hour) pairs, 'catalog
    (estimated)'); NULL for an unpriced model."""
    return warehouse.query("""
        WITH used AS (
            SELECT * FROM gpu_minute_use WHERE minute >= $start AND minute < $end
        ), per_gpu AS (
            SELECT host, gpu_index, arg_max(gpu_uuid, minute) AS gpu_uuid, arg_max(gpu_name, minute) AS gpu_name,
                   sum(coverage_s) / 3600                                        AS observed_h,
                   sum(idle_s) / 3600                                            AS idle_h,
                   coalesce(sum(idle_s) FILTER (WHERE allocated), 0) / 3600      AS allocated_idle_h,
                   coalesce(sum(idle_s) FILTER (WHERE NOT allocated), 0) / 3600  AS unallocated_idle_h,
                   sum(busy_s) / 3600                                            AS busy_h,
                   sum(energy_kwh)                                               AS energy_kwh,
                   sum(idle_energy_kwh)                                          AS idle_kwh,
                   sum(idle_energy_kwh) FILTER (WHERE allocated)                 AS allocated_idle_kwh,
                   sum(idle_energy_kwh) FILTER (WHERE NOT allocated)             AS unallocated_idle_kwh,
                   sum(util_pct_busy_mean * busy_s)
                       / nullif(sum(busy_s) FILTER (WHERE util_pct_busy_mean IS NOT NULL), 0)
                                                                                 AS busy_util_pct
            FROM used GROUP BY host, gpu_index
        ), catalog AS (
            SELECT unnest($names::VARCHAR[]) AS gpu_name,
                   unnest($prices::VARCHAR[])::DECIMAL(38, 12) AS usd_per_gpu_hour
        ), node_rates AS (  -- as the allocation (docs/allocation.md): the node's USD bill over its GPU-hours
            SELECT n.host, CAST(sum(l.effective_cost)
                                / sum(epoch(l.charge_period_end - l.charge_period_start) / 3600.0 * n.gpus)
                                AS DECIMAL(38, 12)) AS usd_per_gpu_hour
            FROM billing_lines l
            JOIN (SELECT host, count(*) AS gpus FROM per_gpu GROUP BY host) n
              ON n.host = l.resource_name OR n.host = l.resource_id
            WHERE l.charge_category = 'usage' AND l.billing_currency = 'USD' AND l.effective_cost IS NOT NULL
              AND l.charge_period_end > l.charge_period_start
              AND l.charge_period_start >= $start AND l.charge_period_start < $end
            GROUP BY n.host
        ), priced AS (
            SELECT g.*, coalesce(r.usd_per_gpu_hour, c.usd_per_gpu_hour) AS usd_per_gpu_hour,
                   CASE WHEN r.host IS NOT NULL THEN 'bill'
                        WHEN c.usd_per_gpu_hour IS NOT NULL THEN 'catalog (estimated)' END AS price_source
            FROM per_gpu g LEFT JOIN node_rates r USING (host) LEFT JOIN catalog c USING (gpu_name)
        )
        SELECT *,
               CAST(idle_h AS DECIMAL(38, 6)) * usd_per_gpu_hour             AS idle_usd,
               CAST(allocated_idle_h AS DECIMAL(38, 6)) * usd_per_gpu_hour   AS allocated_idle_usd,
               CAST(unallocated_idle_h AS DECIMAL(38, 6)) * usd_per_gpu_hour AS unallocated_idle_usd
        FROM priced
        ORDER BY host, gpu_index
    """, {**_minute_range(filters), "names": [name for name, _ in prices],
          "prices": [price for _, price in prices]})


def idle_by_day(filters: Filters) -> pd.DataFrame:
    """Per GPU (`host GPU i`) and UTC day: idle and observed hours, for the heatmap."""
    return warehouse.query("""
        SELECT host || ' GPU ' || gpu_index AS gpu, host, gpu_index,
               (minute AT TIME ZONE 'UTC')::DATE AS day,
               sum(idle_s) / 3600 AS idle_h, sum(coverage_s) / 3600 AS observed_h
        FROM gpu_minutes WHERE minute >= $start AND minute < $end
        GROUP BY ALL ORDER BY host, gpu_index, day
    """, _minute_range(filters))


def utilization_histogram(filters: Filters, bin_pct: int = 5) -> pd.DataFrame:
    """GPU-hours by utilization, in bins of `bin_pct` % (each minute at its mean utilization)."""
    return warehouse.query("""
        SELECT least(floor(util_pct_mean / $bin) * $bin, 100 - $bin) AS util_from_pct,
               sum(coverage_s) / 3600 AS gpu_hours
        FROM gpu_minutes
        WHERE minute >= $start AND minute < $end AND util_pct_mean IS NOT NULL
        GROUP BY 1 ORDER BY 1
    """, {**_minute_range(filters), "bin": bin_pct})


def right_size_candidates(filters: Filters, util_below_pct: float) -> pd.DataFrame:
    """Per GPU and project, the runs of that project on that GPU whose mean utilization while they
    held it (%, time-weighted) is under `util_below_pct`: their jobs would likely fit a smaller GPU."""
    return warehouse.query("""
        SELECT rm.host, rm.gpu_index, arg_max(m.gpu_name, m.minute) AS gpu_name, r.project,
               count(DISTINCT r.run_id) AS runs, list(DISTINCT r.run_id ORDER BY r.run_id) AS run_ids,
               sum(m.coverage_s * rm.run_s / 60) / 3600 AS run_gpu_h,
               sum(m.util_pct_mean * m.coverage_s * rm.run_s / 60)
                   / sum(m.coverage_s * rm.run_s / 60) AS mean_util_pct
        FROM run_gpu_minutes rm
        JOIN gpu_minutes m USING (host, gpu_index, minute)
        JOIN runs r USING (run_id)
        WHERE m.minute >= $start AND m.minute < $end AND m.util_pct_mean IS NOT NULL
          AND rm.minute >= $start AND rm.minute < $end  -- the same range on both sides, to prune both scans
        GROUP BY rm.host, rm.gpu_index, r.project
        HAVING sum(m.util_pct_mean * m.coverage_s * rm.run_s / 60) / sum(m.coverage_s * rm.run_s / 60) < $below
        ORDER BY mean_util_pct
    """, {**_minute_range(filters), "below": util_below_pct})


def coverage_holes(filters: Filters) -> pd.DataFrame:
    """Every coverage hole (gpu_gaps) overlapping the date range, oldest first, with its length in hours."""
    return warehouse.query("""
        SELECT host, gpu_index, gpu_uuid, gap_start, gap_end, gap_s / 3600 AS gap_h
        FROM gpu_gaps WHERE gap_end > $start AND gap_start < $end
        ORDER BY gap_start, host, gpu_index
    """, _minute_range(filters))


def run_energy_figures(filters: Filters, regions: tuple[tuple[str, float, float], ...] = (),
                       pue: float = 1.0, grid_gco2_per_kwh: float = 0.0) -> pd.DataFrame:
    """Measured GPU energy per run of the filter (view run_energy) with emissions in kg CO2e:
    kWh x PUE x grid g/kWh / 1000, the factors from `regions` ((region, PUE, g CO2e per kWh),
    matched case-insensitively) or else the defaults. Runs without traces are absent."""
    return warehouse.query(FILTERED_RUNS + """
        , factors AS (
            SELECT unnest($regions::VARCHAR[]) AS region, unnest($pues::DOUBLE[]) AS pue,
                   unnest($grids::DOUBLE[]) AS gco2_per_kwh
        )
        SELECT r.run_id, e.gpus_traced, e.gpu_energy_kwh, e.gpu_energy_coverage_pct,
               e.gpu_energy_wh_per_1k_examples,
               e.gpu_energy_kwh * coalesce(f.pue, $pue) * coalesce(f.gco2_per_kwh, $grid) / 1000
                   AS gpu_emissions_kg
        FROM filtered_runs r JOIN run_energy e USING (run_id)
        LEFT JOIN factors f ON f.region = lower(trim(r.region))
        ORDER BY r.run_id
    """, {**filters.params(), "regions": [r.strip().lower() for r, _, _ in regions],
          "pues": [p for _, p, _ in regions], "grids": [g for _, _, g in regions],
          "pue": pue, "grid": grid_gco2_per_kwh})



# --- Billing and reconciliation ---------------------------------------------------------------
#
# Bill lines come from the view `billing_costs`, limited to the sidebar's date range by
# charge_period_start (UTC); the project and team filters are runs' and do not apply to bills.
# Every amount is grouped by (or filtered to one) billing_currency: nothing adds two currencies.
# Lines are attributed to runs by the macros billing_run_lines and run_billing (ingest/schema.sql).

BILL_LINES = """
WITH lines AS (
    SELECT * FROM billing_costs WHERE charge_period_start >= $start AND charge_period_start < $end
)
"""

# What spend over time can be split by: a fixed SQL expression per choice (never widget text).
BILLING_DIMENSIONS = {
    "Provider": "provider",
    "Service": "coalesce(service_name, '(no service)')",
    "Account": "coalesce(sub_account_name, sub_account_id, '(no account)')",
    "Charge category": "charge_category",
    "Tag": "coalesce(tags[$tag_key], '(untagged)')",
}


def _charge_range(filters: Filters) -> dict:
    params = filters.params()
    return {"start": params["start"], "end": params["end"]}


def billing_totals(filters: Filters) -> pd.DataFrame:
    """Per billing currency (largest billed first): lines, billed, effective and list cost, billed
    cost per charge category (credits negative), and the span of charges."""
    return warehouse.query(BILL_LINES + """
        SELECT billing_currency,
               count(*)                                                   AS lines,
               sum(CAST(billed_cost AS DECIMAL(38, 10)))                                           AS billed_cost,
               sum(CAST(effective_cost AS DECIMAL(38, 10)))                                        AS effective_cost,
               sum(CAST(list_cost AS DECIMAL(38, 10)))                                             AS list_cost,
               coalesce(sum(CAST(billed_cost AS DECIMAL(38, 10))) FILTER (WHERE charge_category = 'usage'), 0)      AS usage_cost,
               coalesce(sum(CAST(billed_cost AS DECIMAL(38, 10))) FILTER (WHERE charge_category = 'purchase'), 0)   AS purchase_cost,
               coalesce(sum(CAST(billed_cost AS DECIMAL(38, 10))) FILTER (WHERE charge_category = 'tax'), 0)        AS tax_cost,
               coalesce(sum(CAST(billed_cost AS DECIMAL(38, 10))) FILTER (WHERE charge_category = 'credit'), 0)     AS credit_cost,
               coalesce(sum(CAST(billed_cost AS DECIMAL(38, 10))) FILTER (WHERE charge_category = 'adjustment'), 0) AS adjustment_cost,
               count(DISTINCT provider)                                   AS providers,
               min(charge_period_start)                                   AS first_charge,
               max(coalesce(charge_period_end, charge_period_start))      AS last_charge
        FROM lines GROUP BY billing_currency ORDER BY sum(CAST(abs(billed_cost) AS DECIMAL(38, 10))) DESC, billing_currency
    """, _charge_range(filters))


def billing_tag_keys(filters: Filters) -> pd.DataFrame:
    """Tag names on the bill lines in range, with how many lines carry each, commonest first."""
    return warehouse.query(BILL_LINES + """
        SELECT tag_key, count(*) AS lines
        FROM (SELECT unnest(map_keys(tags)) AS tag_key FROM lines WHERE tags IS NOT NULL)
        GROUP BY tag_key ORDER BY lines DESC, tag_key
    """, _charge_range(filters))


def billing_spend_over_time(filters: Filters, currency: str, dimension: str, tag_key: str | None = None,
                            top: int = 10, max_points: int = 2000) -> pd.DataFrame:
    """Billed cost in `currency` per period and group of `dimension` (a BILLING_DIMENSIONS key):
    the `top` groups by spend, the rest as '(other)'. Periods are UTC days, or weeks or months
    when days x groups would exceed max_points; `bucket` says which."""
    group = BILLING_DIMENSIONS[dimension]
    return warehouse.query(BILL_LINES + f"""
        , grouped AS (
            SELECT day, billed_cost, {group} AS grp FROM lines WHERE billing_currency = $currency
        ), ranked AS (
            SELECT grp, row_number() OVER (ORDER BY sum(CAST(abs(billed_cost) AS DECIMAL(38, 10))) DESC, grp) AS rank
            FROM grouped GROUP BY grp
        ), span AS (
            SELECT CASE WHEN count(DISTINCT day) * least(count(DISTINCT grp), $top + 1) <= $max_points THEN 'day'
                        WHEN count(DISTINCT day) / 7 * least(count(DISTINCT grp), $top + 1) <= $max_points THEN 'week'
                        ELSE 'month' END AS bucket
            FROM grouped
        )
        SELECT date_trunc(bucket, g.day)::DATE AS period, bucket,
               CASE WHEN r.rank <= $top THEN g.grp ELSE '(other)' END AS "group",
               sum(CAST(g.billed_cost AS DECIMAL(38, 10))) AS billed_cost
        FROM grouped g JOIN ranked r USING (grp), span
        GROUP BY ALL ORDER BY period, "group"
    """, {**_charge_range(filters), "currency": currency, "top": top, "max_points": max_points,
          **({"tag_key": tag_key or ""} if "$tag_key" in group else {})})


def billing_by_category(filters: Filters, currency: str) -> pd.DataFrame:
    """Billed cost in `currency` per invoice month (`month`: billing_month, UTC) and charge
    category (credits and adjustments keep their sign), with the line count."""
    return warehouse.query(BILL_LINES + """
        SELECT billing_month AS month, charge_category, sum(CAST(billed_cost AS DECIMAL(38, 10))) AS billed_cost, count(*) AS lines
        FROM lines WHERE billing_currency = $currency
        GROUP BY ALL ORDER BY month, charge_category
    """, {**_charge_range(filters), "currency": currency})


def billing_top_resources(filters: Filters, currency: str, limit: int = 20) -> pd.DataFrame:
    """The resources with the largest billed cost in `currency`, with their effective cost,
    service, instance type, lines and span."""
    return warehouse.query(BILL_LINES + """
        SELECT resource_id, any_value(resource_name) AS resource_name, any_value(provider) AS provider,
               mode(service_name) AS service_name, mode(instance_type) AS instance_type,
               sum(CAST(billed_cost AS DECIMAL(38, 10))) AS billed_cost, sum(CAST(effective_cost AS DECIMAL(38, 10))) AS effective_cost, count(*) AS lines,
               min(charge_period_start) AS first_charge, max(coalesce(charge_period_end, charge_period_start)) AS last_charge
        FROM lines WHERE billing_currency = $currency AND resource_id IS NOT NULL
        GROUP BY resource_id ORDER BY billed_cost DESC, resource_id LIMIT $limit
    """, {**_charge_range(filters), "currency": currency, "limit": limit})


GPU_LINES = """
, gpu_lines AS (
    SELECT * FROM lines
    WHERE billing_currency = $currency AND charge_category = 'usage'
      -- what gpu_line_rule needs to say yes, tested first: its word rule builds a regular
      -- expression per line, so only lines holding one of the words as text reach it
      AND (list_contains($families::VARCHAR[], instance_family)
           OR lower(coalesce(service_name, '')) LIKE 'virtual machines%'
           OR len(list_filter($words::VARCHAR[], lambda w: contains(lower(coalesce(charge_description, '')), w))) > 0)
      AND gpu_line_rule(instance_family, service_name, charge_description,
                        $families::VARCHAR[], $words::VARCHAR[]) IS NOT NULL
)
"""


def billing_gpu_spend(filters: Filters, currency: str, families: tuple[str, ...],
                      words: tuple[str, ...]) -> pd.DataFrame:
    """GPU usage lines in `currency` (schema.sql gpu_line_rule: instance family in `families`, an
    Azure N-series VM, or a whole word of `words` in the description) per UTC month, instance type and pricing category: billed cost, lines,
    instance-hours (consumed quantity of lines measured in hours)."""
    return warehouse.query(BILL_LINES + GPU_LINES + """
        SELECT month, coalesce(instance_type, '(' || coalesce(charge_description, 'GPU') || ')') AS instance_type,
               coalesce(pricing_category, '(none)') AS pricing_category,
               sum(CAST(billed_cost AS DECIMAL(38, 10))) AS billed_cost, count(*) AS lines,
               sum(consumed_quantity) FILTER (WHERE lower(consumed_unit) IN ('hours', 'hrs', 'hour')) AS instance_hours
        FROM gpu_lines GROUP BY ALL ORDER BY month, billed_cost DESC
    """, {**_charge_range(filters), "currency": currency, "families": list(families), "words": list(words)})


def _matches_stored(run_tag: str, slack_s: float) -> bool:
    """Whether billing_line_runs holds the matches of these settings (else they are computed)."""
    return bool(warehouse.query(
        "SELECT count(*) AS n FROM billing_match_settings WHERE run_id_tag = ? AND match_slack_s = ?",
        [run_tag, float(slack_s)])["n"].iloc[0])


def reconciliation_runs(filters: Filters, run_tag: str, slack_s: float, gap_pct: float) -> pd.DataFrame:
    """Per run in the filter with bill lines, and per billing currency: estimated cost (USD) next
    to billed cost (run_billing), the gap, `large_gap` when |gap_pct| exceeds `gap_pct`, and
    `untagged` when some of its lines were matched by resource id only. Largest |gap| first."""
    return warehouse.query(FILTERED_RUNS + """
        SELECT b.*, abs(b.gap_pct) > $gap_pct AS large_gap, b.lines_by_resource > 0 AS untagged
        FROM run_billing($run_tag, $slack_s, stored := $stored) b SEMI JOIN filtered_runs USING (run_id)
        ORDER BY abs(b.gap_usd) DESC NULLS LAST, b.run_id, b.billing_currency
    """, {**filters.params(), "run_tag": run_tag, "slack_s": slack_s, "gap_pct": gap_pct,
          "stored": _matches_stored(run_tag, slack_s)})


def reconciliation_totals(filters: Filters, run_tag: str, slack_s: float) -> pd.DataFrame:
    """Per billing currency, of the usage lines in the date range: billed cost matched to a run
    (any run) and not matched, with line counts."""
    return warehouse.query(BILL_LINES + """
        , matched AS (SELECT line_key FROM billing_run_lines($run_tag, $slack_s, stored := $stored))
        SELECT l.billing_currency,
               coalesce(sum(CAST(l.billed_cost AS DECIMAL(38, 10))) FILTER (WHERE m.line_key IS NOT NULL), 0) AS matched_cost,
               count(m.line_key)                                                     AS matched_lines,
               coalesce(sum(CAST(l.billed_cost AS DECIMAL(38, 10))) FILTER (WHERE m.line_key IS NULL), 0)     AS unmatched_cost,
               count(*) FILTER (WHERE m.line_key IS NULL)                            AS unmatched_lines
        FROM lines l LEFT JOIN matched m USING (line_key)  -- a line belongs to one run at most
        WHERE l.charge_category = 'usage'
        GROUP BY l.billing_currency ORDER BY sum(CAST(abs(l.billed_cost) AS DECIMAL(38, 10))) DESC
    """, {**_charge_range(filters), "run_tag": run_tag, "slack_s": slack_s,
          "stored": _matches_stored(run_tag, slack_s)})


def unmatched_spend(filters: Filters, run_tag: str, project_tag: str, slack_s: float) -> pd.DataFrame:
    """Usage lines in the date range matched to no run, per currency, project tag value and
    service: billed cost, lines, and the lines whose run tag names a run that is not loaded."""
    return warehouse.query(BILL_LINES + """
        , matched AS (SELECT line_key FROM billing_run_lines($run_tag, $slack_s, stored := $stored))
        SELECT billing_currency, coalesce(tags[$project_tag], '(no ' || $project_tag || ' tag)') AS project,
               coalesce(service_name, '(no service)') AS service_name,
               sum(CAST(billed_cost AS DECIMAL(38, 10))) AS billed_cost, count(*) AS lines,
               count(*) FILTER (WHERE tags[$run_tag] IS NOT NULL) AS lines_naming_unknown_runs,
               count(*) FILTER (WHERE tags IS NULL OR cardinality(tags) = 0) AS untagged_lines
        FROM lines
        WHERE charge_category = 'usage' AND line_key NOT IN (SELECT line_key FROM matched)
        GROUP BY ALL ORDER BY billing_currency, billed_cost DESC
    """, {**_charge_range(filters), "run_tag": run_tag, "project_tag": project_tag, "slack_s": slack_s,
          "stored": _matches_stored(run_tag, slack_s)})


# --- Budgets -----------------------------------------------------------------------------------
#
# A budget's spend is billed cost (bill lines in the budget's currency, by UTC day of
# charge_period_start) when the bill has lines in the period, else estimated cost (runs by
# the UTC day they started, serving windows by the day they started; USD). The scope picks
# lines by tag (project and team tags as [reconciliation] names them, or any KEY=VALUE) or by
# provider, and runs by their project, team or tags. Money comes back exact (Decimal).

BUDGET_SCOPE_BILLED = """
    CASE $scope WHEN 'all' THEN true
                WHEN 'project' THEN tags[$project_tag] = $value
                WHEN 'team' THEN tags[$team_tag] = $value
                WHEN 'tag' THEN tags[$tag_key] = $tag_value
                WHEN 'provider' THEN lower(provider) = lower($value) END
"""
BUDGET_SCOPE_RUNS = """
    CASE $scope WHEN 'all' THEN true
                WHEN 'project' THEN project = $value
                WHEN 'team' THEN team = $value
                WHEN 'tag' THEN tags[$tag_key] = $tag_value
                ELSE false END
"""


def _budget_query(sql: str, budget, tags: tuple[str, str], start, end, **more) -> pd.DataFrame:
    """Run a budget query (exact money) with the parameters of the BUDGET_SCOPE_* fragments
    that it uses; `tags` is (project tag, team tag)."""
    params = {**_budget_params(budget, tags, start, end), **more}
    return warehouse.query_exact(sql, {name: value for name, value in params.items()
                                       if re.search(rf"\${name}\b", sql)})


def _budget_params(budget, tags: tuple[str, str], start, end) -> dict:
    return {"scope": budget.scope, "value": budget.scope_value or "", "tag_key": budget.tag_key or "",
            "tag_value": budget.tag_value or "", "project_tag": tags[0], "team_tag": tags[1],
            "currency": budget.currency, "start": start, "end": end}


def bill_days() -> pd.DataFrame:
    """One row: the first and last UTC day with bill lines (NULL when there is no bill)."""
    return warehouse.query_exact("SELECT min(day) AS first_day, max(day) AS last_day FROM billing_costs")


def estimate_days() -> pd.DataFrame:
    """One row: the first and last UTC day with a priced run start or serving window."""
    return warehouse.query_exact("""
        SELECT min(day) AS first_day, max(day) AS last_day FROM (
            SELECT (started_at AT TIME ZONE 'UTC')::DATE AS day FROM runs WHERE cost_usd IS NOT NULL
            UNION ALL SELECT day FROM serving_costs WHERE cost_usd IS NOT NULL)
    """)


# The budgets one query reads, one row each (budget_no = its place in the list handed in): the
# scope's fields and the [start_day, end_day) it reads. BUDGET_ROW_* fragments test a row against w.
BUDGET_ROWS = """
WITH wanted AS (
    SELECT unnest($budget_no::INTEGER[]) AS budget_no, unnest($scope::VARCHAR[]) AS scope,
           unnest($value::VARCHAR[]) AS value, unnest($tag_key::VARCHAR[]) AS tag_key,
           unnest($tag_value::VARCHAR[]) AS tag_value, unnest($currency::VARCHAR[]) AS currency,
           unnest($start_day::DATE[]) AS start_day, unnest($end_day::DATE[]) AS end_day
)
"""
BUDGET_ROW_BILLED = """
    CASE w.scope WHEN 'all' THEN true
                 WHEN 'project' THEN c.tags[$project_tag] = w.value
                 WHEN 'team' THEN c.tags[$team_tag] = w.value
                 WHEN 'tag' THEN c.tags[w.tag_key] = w.tag_value
                 WHEN 'provider' THEN lower(c.provider) = lower(w.value) END
"""
BUDGET_ROW_RUNS = """
    CASE w.scope WHEN 'all' THEN true
                 WHEN 'project' THEN e.project = w.value
                 WHEN 'team' THEN e.team = w.value
                 WHEN 'tag' THEN e.tags[w.tag_key] = w.tag_value
                 ELSE false END
"""


def _budget_rows(spans: list[tuple], tags: tuple[str, str] = ("", "")) -> dict:
    """The parameters of BUDGET_ROWS for `spans` ((budget, start, end) each) and `tags`
    ((project tag, team tag))."""
    return {"budget_no": list(range(len(spans))), "scope": [b.scope for b, _, _ in spans],
            "value": [b.scope_value or "" for b, _, _ in spans], "tag_key": [b.tag_key or "" for b, _, _ in spans],
            "tag_value": [b.tag_value or "" for b, _, _ in spans], "currency": [b.currency for b, _, _ in spans],
            "start_day": [start for _, start, _ in spans], "end_day": [end for _, _, end in spans],
            "project_tag": tags[0], "team_tag": tags[1]}


def budget_daily_billed(spans: list[tuple], tags: tuple[str, str]) -> pd.DataFrame:
    """Per budget of `spans` ((budget, start, end) each; `budget_no` = its place there) and UTC
    day in [start, end): the scope's billed cost in the budget's currency (`spend`, Decimal,
    credits and taxes included) and its lines in other currencies (not counted). One query for
    all: a page showing every budget reads the bill once."""
    if not spans:
        return pd.DataFrame(columns=["budget_no", "day", "spend", "other_currency_lines"])
    return warehouse.query_exact(BUDGET_ROWS + f"""
        SELECT w.budget_no, c.day,
               coalesce(sum(CAST(c.billed_cost AS DECIMAL(38, 10))) FILTER (WHERE c.billing_currency = w.currency), 0)
                   AS spend,
               count(*) FILTER (WHERE c.billing_currency <> w.currency) AS other_currency_lines
        FROM wanted w JOIN billing_costs c ON c.day >= w.start_day AND c.day < w.end_day
        WHERE coalesce({BUDGET_ROW_BILLED}, false)
        GROUP BY w.budget_no, c.day ORDER BY w.budget_no, c.day
    """, _budget_rows(spans, tags))


def budget_daily_estimated(spans: list[tuple]) -> pd.DataFrame:
    """Per budget of `spans` ((budget, start, end) each; `budget_no` = its place there) and UTC
    day in [start, end): the scope's estimated cost in USD (`spend`, Decimal): runs by start
    day, plus serving windows for a budget on everything (windows carry no project)."""
    if not spans:
        return pd.DataFrame(columns=["budget_no", "day", "spend", "other_currency_lines"])
    params = _budget_rows(spans)
    del params["project_tag"], params["team_tag"]
    return warehouse.query_exact(BUDGET_ROWS + f"""
        , estimates AS (
            SELECT (started_at AT TIME ZONE 'UTC')::DATE AS day, cost_usd, project, team, tags, false AS serving
            FROM runs WHERE cost_usd IS NOT NULL
            UNION ALL
            SELECT day, cost_usd, NULL, NULL, NULL, true FROM serving_costs WHERE cost_usd IS NOT NULL
        )
        SELECT w.budget_no, e.day, sum(CAST(e.cost_usd AS DECIMAL(38, 10))) AS spend, 0 AS other_currency_lines
        FROM wanted w JOIN estimates e ON e.day >= w.start_day AND e.day < w.end_day
        WHERE CASE WHEN e.serving THEN w.scope = 'all' ELSE coalesce({BUDGET_ROW_RUNS}, false) END
        GROUP BY w.budget_no, e.day ORDER BY w.budget_no, e.day
    """, params)


def budget_top_runs(budget, start, end, limit: int = 5) -> pd.DataFrame:
    """The scope's costliest runs started in [start, end) (estimated cost, USD, exact)."""
    return _budget_query(f"""
        SELECT run_id, project, team, instance_type, started_at, cost_usd
        FROM runs
        WHERE (started_at AT TIME ZONE 'UTC')::DATE >= $start AND (started_at AT TIME ZONE 'UTC')::DATE < $end
          AND cost_usd IS NOT NULL AND coalesce({BUDGET_SCOPE_RUNS}, false)
        ORDER BY cost_usd DESC, run_id LIMIT $limit
    """, budget, ("", ""), start, end, limit=limit)


def budget_top_services(budget, tags: tuple[str, str], billed: bool, start, end, limit: int = 5) -> pd.DataFrame:
    """The scope's costliest services in [start, end): billed lines by their `service` tag
    (budget currency), else serving windows' estimated cost (USD, budgets on everything only)."""
    if billed:
        return _budget_query(f"""
            SELECT tags['service'] AS service, sum(CAST(billed_cost AS DECIMAL(38, 10))) AS cost
            FROM billing_costs
            WHERE day >= $start AND day < $end AND billing_currency = $currency
              AND tags['service'] IS NOT NULL AND coalesce({BUDGET_SCOPE_BILLED}, false)
            GROUP BY 1 ORDER BY cost DESC, service LIMIT $limit
        """, budget, tags, start, end, limit=limit)
    return _budget_query("""
        SELECT service, sum(CAST(cost_usd AS DECIMAL(38, 10))) AS cost FROM serving_costs
        WHERE day >= $start AND day < $end AND cost_usd IS NOT NULL AND $scope = 'all'
        GROUP BY 1 ORDER BY cost DESC, service LIMIT $limit
    """, budget, tags, start, end, limit=limit)


def budget_top_projects(budget, tags: tuple[str, str], billed: bool, start, end, limit: int = 5) -> pd.DataFrame:
    """The scope's spend per project in [start, end): billed lines by their project tag
    ('(untagged)' without one; budget currency), else runs' estimated cost by project (USD)."""
    if billed:
        return _budget_query(f"""
            SELECT coalesce(tags[$project_tag], '(untagged)') AS project, sum(CAST(billed_cost AS DECIMAL(38, 10))) AS cost
            FROM billing_costs
            WHERE day >= $start AND day < $end AND billing_currency = $currency
              AND coalesce({BUDGET_SCOPE_BILLED}, false)
            GROUP BY 1 ORDER BY cost DESC, project LIMIT $limit
        """, budget, tags, start, end, limit=limit)
    return _budget_query(f"""
        SELECT coalesce(project, '(no project)') AS project, sum(CAST(cost_usd AS DECIMAL(38, 10))) AS cost FROM runs
        WHERE (started_at AT TIME ZONE 'UTC')::DATE >= $start AND (started_at AT TIME ZONE 'UTC')::DATE < $end
          AND cost_usd IS NOT NULL AND coalesce({BUDGET_SCOPE_RUNS}, false)
        GROUP BY 1 ORDER BY cost DESC, project LIMIT $limit
    """, budget, ("", ""), start, end, limit=limit)


# --- The monthly retrospective (app/retrospective.py builds on the queries above) ------------

def serving_by_service(filters: Filters) -> pd.DataFrame:
    """Per service: its model versions and the SERVING_FIGURES of its windows in the date range."""
    return warehouse.query(SERVING_WINDOWS + """
        SELECT service, string_agg(DISTINCT model_version, ', ' ORDER BY model_version) AS versions,"""
                           + SERVING_FIGURES + """
        FROM windows GROUP BY service ORDER BY service
    """, _window_range(filters))


def decisions(month: date) -> pd.DataFrame:
    """The decisions log of `month` (the month of that date), oldest first."""
    return warehouse.query(
        "SELECT decision_id, month, kind, text, author, written_at FROM decisions "
        "WHERE month = date_trunc('month', ?::DATE)::DATE ORDER BY written_at, decision_id", [month])
