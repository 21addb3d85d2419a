"""GPU traces: idle GPUs, utilization, right-size candidates, coverage holes and measured
energy per run."""
from __future__ import annotations

import pandas as pd

from metrics.filters import Filters
from metrics.queries.common import FILTERED_RUNS
from ingest.engine import warehouse

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
        WITH per_gpu AS (  -- from gpu_days: the sidebar's range is whole UTC days
            SELECT host, gpu_index, arg_max(gpu_uuid, gpu_uuid_at) AS gpu_uuid, arg_max(gpu_name, gpu_name_at) AS gpu_name,
                   sum(coverage_s) / 3600                                        AS observed_h,
                   sum(idle_s) / 3600                                            AS idle_h,
                   sum(allocated_idle_s) / 3600                                  AS allocated_idle_h,
                   sum(unallocated_idle_s) / 3600                                AS unallocated_idle_h,
                   sum(busy_s) / 3600                                            AS busy_h,
                   sum(energy_kwh)                                               AS energy_kwh,
                   sum(idle_energy_kwh)                                          AS idle_kwh,
                   sum(allocated_idle_energy_kwh)                                AS allocated_idle_kwh,
                   sum(unallocated_idle_energy_kwh)                              AS unallocated_idle_kwh,
                   sum(util_busy_pct_s) / nullif(sum(busy_util_s), 0)            AS busy_util_pct
            FROM gpu_days WHERE day >= utc_day($start) AND day < utc_day($end)
            GROUP BY host, gpu_index
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
        SELECT host || ' GPU ' || gpu_index AS gpu, host, gpu_index, day,
               idle_s / 3600 AS idle_h, coverage_s / 3600 AS observed_h
        FROM gpu_days WHERE day >= utc_day($start) AND day < utc_day($end)
        ORDER BY host, gpu_index, day
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
    held it (%, time-weighted) is under `util_below_pct`: their jobs would likely fit a smaller GPU.
    From run_gpu_days (per run, GPU and UTC day; the sidebar's range is whole UTC days)."""
    return warehouse.query("""
        SELECT d.host, d.gpu_index, arg_max(d.gpu_name, d.gpu_name_at) AS gpu_name, r.project,
               count(DISTINCT r.run_id) AS runs, list(DISTINCT r.run_id ORDER BY r.run_id) AS run_ids,
               sum(d.run_gpu_s) / 3600 AS run_gpu_h,
               sum(d.util_pct_s) / sum(d.run_gpu_s) AS mean_util_pct
        FROM run_gpu_days d JOIN runs r USING (run_id)
        WHERE d.day >= utc_day($start) AND d.day < utc_day($end)
        GROUP BY d.host, d.gpu_index, r.project
        HAVING sum(d.util_pct_s) / sum(d.run_gpu_s) < $below
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
