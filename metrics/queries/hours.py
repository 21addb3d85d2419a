"""Hour of the day x day of the week (at most 7 x 24 cells per measure), in UTC or any IANA zone:
GPU utilization and capacity from the per-minute rollups, serving requests and cost per 1k
requests from the serving windows.

How an instant gets its cell: its UTC instant is converted to the zone's wall clock by DuckDB
(`timezone(zone, instant)`, the IANA rules), so a summer hour of America/New_York is UTC-4 and a
winter hour UTC-5, never a fixed offset. On the day clocks go forward the skipped local hour gets
no time; on the day they go back the repeated hour gets both. Work is done per UTC quarter hour
first (every zone's offset is a whole number of quarter hours, so a quarter hour lies inside one
local hour), then the at most 96 quarters a day are converted, never each row.

`span_h` of a cell is how many hours of the data's span (its first to its last quarter hour with
data, in the sidebar's date range of UTC days) fall in that cell: four Mondays in the span give a
Monday cell 4 h. Means per hour divide by it, so a weekday that occurs five times in the span does
not look busier than one that occurs four times.
"""
from __future__ import annotations

import pandas as pd

from ingest.engine import warehouse
from metrics.filters import Filters

QUARTER_S = 900

# The cells of the span: every quarter hour from the first to the last with data, on the zone's clock.
_SPAN_CELLS = """
, span AS (SELECT min(q) AS first_q, max(q) AS last_q FROM quarters)
, every_quarter AS (SELECT unnest(range(first_q, last_q + 1)) AS q FROM span WHERE first_q IS NOT NULL)
, local AS (
    SELECT q, timezone($zone, to_timestamp(q * 900)) AS at FROM every_quarter
)
"""


def _range(filters: Filters, zone: str) -> dict:
    params = filters.params()
    return {"start": params["start"], "end": params["end"], "zone": zone}


def gpu_hour_of_week(filters: Filters, zone: str = "UTC") -> pd.DataFrame:
    """Per ISO weekday (1 = Monday ... 7 = Sunday) and hour (0-23) of `zone` (an IANA name), from
    gpu_minutes in the date range (every GPU): `span_h` (see the module), `observed_gpu_h` (GPU-hours
    with samples), `gpus_present` (mean GPUs traced = observed_gpu_h / span_h: the capacity),
    `util_pct` (mean utilization of the observed time, %, each minute's mean weighted by its
    coverage), `idle_gpu_h` (idle GPU-hours) and `idle_share_pct` (idle / observed, %).

    A per-minute rollup lies inside one local hour (minutes start on UTC minutes), so no minute is split.
    """
    return warehouse.query("""
        WITH quarters AS (
            SELECT CAST(floor(epoch(minute) / 900) AS BIGINT) AS q,
                   sum(coverage_s) AS coverage_s, sum(idle_s) AS idle_s,
                   sum(util_pct_mean * coverage_s) AS util_pct_s,
                   sum(coverage_s) FILTER (WHERE util_pct_mean IS NOT NULL) AS util_s
            FROM gpu_minutes WHERE minute >= $start AND minute < $end
            GROUP BY 1
        )""" + _SPAN_CELLS + """
        SELECT isodow(l.at) AS weekday, hour(l.at) AS hour,
               count(*) * 0.25 AS span_h,
               coalesce(sum(g.coverage_s), 0) / 3600 AS observed_gpu_h,
               coalesce(sum(g.coverage_s), 0) / 3600 / (count(*) * 0.25) AS gpus_present,
               sum(g.util_pct_s) / nullif(sum(g.util_s), 0) AS util_pct,
               coalesce(sum(g.idle_s), 0) / 3600 AS idle_gpu_h,
               100 * sum(g.idle_s) / nullif(sum(g.coverage_s), 0) AS idle_share_pct
        FROM local l LEFT JOIN quarters g USING (q)
        GROUP BY 1, 2 ORDER BY 1, 2
    """, _range(filters, zone))


def serving_hour_of_week(filters: Filters, zone: str = "UTC") -> pd.DataFrame:
    """Per ISO weekday (1 = Monday ... 7 = Sunday) and hour (0-23) of `zone`, from the serving
    windows that start in the date range (every service): `span_h` (see the module), requests
    (`requests_total`, `requests_success`, and `requests_per_h` = requests_total / span_h), the
    windows' cost (`cost_usd`, USD) and cost per 1,000 requests as the Serving page defines it
    (SERVING_FIGURES: cost over the successful requests of the windows that have a cost,
    `cost_per_1k_success_usd`; over all their requests, `cost_per_1k_requests_usd`).

    A window that spans more than one hour is split across the hours it covers in proportion to
    the time it spends in each (requests and cost alike: traffic is taken as even within a
    window). The split is made on UTC quarter hours; a cost share (the piece's fraction of the
    window) is rounded to 1e-9, so the pieces add up to the window's cost within 1e-9 of it per
    piece (exactly for windows on quarter-hour boundaries); requests become fractional. A window
    without an end after its start is left out.
    """
    return warehouse.query("""
        WITH windows AS (
            SELECT epoch(window_start) AS start_s, epoch(window_end) AS end_s, requests_total, requests_success,
                   success_priced, requests_priced, cost_usd
            FROM serving_costs
            WHERE window_start >= $start AND window_start < $end AND window_end > window_start
        ), pieces AS (
            SELECT *, unnest(range(CAST(floor(start_s / 900) AS BIGINT), CAST(ceil(end_s / 900) AS BIGINT))) AS q
            FROM windows
        ), shared AS (
            SELECT q, (least(end_s, (q + 1) * 900.0) - greatest(start_s, q * 900.0)) / (end_s - start_s) AS share,
                   requests_total, requests_success, success_priced, requests_priced, cost_usd
            FROM pieces
        ), quarters AS (
            SELECT q,
                   sum(requests_total * share) AS requests_total,
                   sum(requests_success * share) AS requests_success,
                   sum(success_priced * share) AS success_priced,
                   sum(requests_priced * share) AS requests_priced,
                   sum(CAST(cost_usd * CAST(share AS DECIMAL(18, 9)) AS DECIMAL(38, 12))) AS cost_usd,
                   count(cost_usd) AS pieces_with_cost
            FROM shared GROUP BY q
        )""" + _SPAN_CELLS + """
        SELECT isodow(l.at) AS weekday, hour(l.at) AS hour,
               count(*) * 0.25 AS span_h,
               CAST(coalesce(sum(s.requests_total), 0) AS DOUBLE) AS requests_total,
               CAST(coalesce(sum(s.requests_success), 0) AS DOUBLE) AS requests_success,
               CAST(coalesce(sum(s.requests_total), 0) AS DOUBLE) / (count(*) * 0.25) AS requests_per_h,
               CASE WHEN sum(s.pieces_with_cost) > 0 THEN sum(s.cost_usd) END AS cost_usd,
               CAST(sum(s.cost_usd) / nullif(sum(s.success_priced), 0) * 1000 AS DOUBLE) AS cost_per_1k_success_usd,
               CAST(sum(s.cost_usd) / nullif(sum(s.requests_priced), 0) * 1000 AS DOUBLE) AS cost_per_1k_requests_usd
        FROM local l LEFT JOIN quarters s USING (q)
        GROUP BY 1, 2 ORDER BY 1, 2
    """, _range(filters, zone))
