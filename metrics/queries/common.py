"""What every query module shares: the data version, the sidebar's choices, and the CTE
that filters runs (FILTERED_RUNS) which each runs query starts from."""
from __future__ import annotations

import pandas as pd

from ingest.engine import warehouse

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
    rollup computations (`mlcost rollup` loads nothing) and of unloads (which can lower the newest id);
    over a lake (load ids are content hashes, derived tables come in generations) also from the set of
    loads and when the rollups were computed."""
    return int(warehouse.query(
        "SELECT hash(coalesce(max(load_id), 0), count(*), bit_xor(load_id), "
        "(SELECT coalesce(max(rollups), 0) FROM gpu_rollup_settings), "
        "(SELECT max(computed_at) FROM gpu_rollup_settings), "
        "(SELECT count(*) FROM unloads)) % 9007199254740991 AS v FROM loads")["v"].iloc[0])


def filter_choices() -> dict:
    """The first and last day with data (runs, serving windows, GPU traces, bills), every day with data, and
    the projects and teams present, for the sidebar."""
    # one query (every page's sidebar reads it cold: a connection each would cost more than the query)
    found = warehouse.query("""
        WITH span AS (
            SELECT utc_day(min(first_at)) AS first_day, utc_day(max(last_at)) AS last_day FROM (
                SELECT min(started_at) AS first_at, max(started_at) AS last_at FROM runs
                UNION ALL SELECT min(window_start), max(window_start) FROM serving_windows
                UNION ALL SELECT min(minute), max(minute) FROM gpu_minutes
                UNION ALL SELECT min(charge_period_start), max(charge_period_start) FROM billing_lines)
        ), days AS (  -- the stored instants' UTC days, from the tables, not the views
            SELECT DISTINCT day FROM (
                SELECT DISTINCT utc_day(started_at) AS day FROM runs
                UNION SELECT DISTINCT utc_day(window_start) FROM serving_windows
                UNION SELECT DISTINCT utc_day(minute) FROM gpu_minutes
                UNION SELECT DISTINCT utc_day(charge_period_start) FROM billing_lines) WHERE day IS NOT NULL
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
