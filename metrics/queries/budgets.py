"""Budgets: bill and estimate days, daily spend per budget (billed or estimated), and each
budget's top runs, services and projects."""
from __future__ import annotations

import re
from datetime import date

import pandas as pd

from ingest.engine import warehouse
# defined once, in the SQL Spark runs too (docs/spark.md)
from ingest.derived.sql import BUDGET_DAILY_BILLED, budget_row_scope  # noqa: F401

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


def bill_complete_through() -> pd.DataFrame:
    """One row, `last_day`: the bill's last complete UTC day (its last day with lines, or the day
    before when no line's charge period reaches that day's end); NULL when there is no bill."""
    return warehouse.query_exact("""
        SELECT CASE WHEN max(charge_period_end) >= CAST(max(day) + 1 AS TIMESTAMPTZ)
                    THEN max(day) ELSE max(day) - 1 END AS last_day
        FROM billing_costs
    """)


# Days with data: a bill line's charge starts, a priced run starts, a serving window starts, or
# a GPU trace has samples (gpu_days, the stored per-day rollup).
DATA_DAYS = """
    SELECT day FROM billing_costs WHERE day >= $start AND day < $end
    UNION SELECT utc_day(started_at) FROM runs
          WHERE cost_usd IS NOT NULL AND utc_day(started_at) >= $start AND utc_day(started_at) < $end
    UNION SELECT day FROM serving_costs WHERE day >= $start AND day < $end
    UNION SELECT day FROM gpu_days WHERE day >= $start AND day < $end
"""


def data_days(start, end) -> list:
    """The UTC days in [start, end) with any data (bill, runs, serving windows, GPU traces), sorted."""
    found = warehouse.query_exact(f"SELECT DISTINCT day FROM ({DATA_DAYS}) ORDER BY day",
                                  {"start": start, "end": end})
    return list(found["day"])


def last_data_day(before) -> pd.DataFrame:
    """One row, `last_day`: the newest UTC day before `before` with any data (NULL when none)."""
    return warehouse.query_exact(f"SELECT max(day) AS last_day FROM ({DATA_DAYS})",
                                 {"start": date(1970, 1, 1), "end": before})


def estimate_days() -> pd.DataFrame:
    """One row: the first and last UTC day with a priced run start or serving window."""
    return warehouse.query_exact("""
        SELECT min(day) AS first_day, max(day) AS last_day FROM (
            SELECT utc_day(started_at) AS day FROM runs WHERE cost_usd IS NOT NULL
            UNION ALL SELECT day FROM serving_costs WHERE cost_usd IS NOT NULL)
    """)


# The budgets one query reads, one row each (budget_no = its place in the list handed in, or the
# number given): the scope's fields and the [start_day, end_day) it reads. A CTE named `wanted`
# (BUDGET_ROWS starts a query with it; metrics/budget_drivers.py adds it after the allocation's CTEs);
# budget_row_scope() and BUDGET_ROW_RUNS test a row against its row w.
WANTED = """
wanted AS (
    SELECT unnest($budget_no::INTEGER[]) AS budget_no, unnest($scope::VARCHAR[]) AS scope,
           unnest($value::VARCHAR[]) AS value, unnest($tag_key::VARCHAR[]) AS tag_key,
           unnest($tag_value::VARCHAR[]) AS tag_value, unnest($currency::VARCHAR[]) AS currency,
           unnest($start_day::DATE[]) AS start_day, unnest($end_day::DATE[]) AS end_day
)
"""
BUDGET_ROWS = "WITH " + WANTED


BUDGET_ROW_BILLED = budget_row_scope("c.tags", "c.provider")
BUDGET_ROW_RUNS = """
    CASE w.scope WHEN 'all' THEN true
                 WHEN 'project' THEN e.project = w.value
                 WHEN 'team' THEN e.team = w.value
                 WHEN 'tag' THEN e.tags[w.tag_key] = w.tag_value
                 WHEN 'bucket' THEN w.value = 'training'
                 ELSE false END
"""
# Serving windows carry no project, team or tags: they count for budgets on everything, on the
# serving bucket, and on their service or model version.
BUDGET_ROW_SERVING = """
    CASE w.scope WHEN 'all' THEN true
                 WHEN 'bucket' THEN w.value = 'serving'
                 WHEN 'service' THEN e.service = w.value
                 WHEN 'model' THEN e.model_version = w.value
                 ELSE false END
"""


def budget_rows(spans: list[tuple], tags: tuple[str, str] = ("", ""), numbers: list[int] | None = None) -> dict:
    """The parameters of WANTED for `spans` ((budget, start, end) each; budget_no = `numbers`, else
    the place in `spans`) and `tags` ((project tag, team tag))."""
    return {"budget_no": list(range(len(spans))) if numbers is None else list(numbers),
            "scope": [b.scope for b, _, _ in spans],
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
    return warehouse.query_exact(BUDGET_ROWS + BUDGET_DAILY_BILLED + " ORDER BY w.budget_no, c.day",
                                 budget_rows(spans, tags))


def budget_daily_estimated(spans: list[tuple]) -> pd.DataFrame:
    """Per budget of `spans` ((budget, start, end) each; `budget_no` = its place there) and UTC
    day in [start, end): the scope's estimated cost in USD (`spend`, Decimal): runs by start
    day (their logged, price-derived or catalog-priced cost), plus serving windows for a budget on
    everything, the serving bucket, a service or a model version (windows carry no project)."""
    if not spans:
        return pd.DataFrame(columns=["budget_no", "day", "spend", "other_currency_lines"])
    params = budget_rows(spans)
    del params["project_tag"], params["team_tag"]
    return warehouse.query_exact(BUDGET_ROWS + f"""
        , estimates AS (
            SELECT utc_day(started_at) AS day, cost_usd, project, team, tags, false AS serving,
                   NULL AS service, NULL AS model_version
            FROM runs WHERE cost_usd IS NOT NULL
            UNION ALL
            SELECT day, cost_usd, NULL, NULL, NULL, true, service, model_version
            FROM serving_costs WHERE cost_usd IS NOT NULL
        )
        SELECT w.budget_no, e.day, sum(CAST(e.cost_usd AS DECIMAL(38, 10))) AS spend, 0 AS other_currency_lines
        FROM wanted w JOIN estimates e ON e.day >= w.start_day AND e.day < w.end_day
        WHERE CASE WHEN e.serving THEN coalesce({BUDGET_ROW_SERVING}, false)
                   ELSE coalesce({BUDGET_ROW_RUNS}, false) END
        GROUP BY w.budget_no, e.day ORDER BY w.budget_no, e.day
    """, params)


def budget_top_runs(budget, start, end, limit: int = 5) -> pd.DataFrame:
    """The scope's costliest runs started in [start, end) (estimated cost, USD, exact)."""
    return _budget_query(f"""
        SELECT run_id, project, team, instance_type, started_at, cost_usd
        FROM runs
        WHERE utc_day(started_at) >= $start AND utc_day(started_at) < $end
          AND cost_usd IS NOT NULL AND coalesce({BUDGET_SCOPE_RUNS}, false)
        ORDER BY cost_usd DESC, run_id LIMIT $limit
    """, budget, ("", ""), start, end, limit=limit)


def budget_top_services(budget, tags: tuple[str, str], billed: bool, start, end, limit: int = 5) -> pd.DataFrame:
    """The scope's costliest services in [start, end): billed lines by their `service` tag
    (budget currency), else serving windows' estimated cost (USD, budgets on everything only)."""
    if billed:
        return _budget_query(f"""
            SELECT tags['service'] AS service, sum(billed_cost) AS cost
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
            SELECT coalesce(tags[$project_tag], '(untagged)') AS project, sum(billed_cost) AS cost
            FROM billing_costs
            WHERE day >= $start AND day < $end AND billing_currency = $currency
              AND coalesce({BUDGET_SCOPE_BILLED}, false)
            GROUP BY 1 ORDER BY cost DESC, project LIMIT $limit
        """, budget, tags, start, end, limit=limit)
    return _budget_query(f"""
        SELECT coalesce(project, '(no project)') AS project, sum(CAST(cost_usd AS DECIMAL(38, 10))) AS cost FROM runs
        WHERE utc_day(started_at) >= $start AND utc_day(started_at) < $end
          AND cost_usd IS NOT NULL AND coalesce({BUDGET_SCOPE_RUNS}, false)
        GROUP BY 1 ORDER BY cost DESC, project LIMIT $limit
    """, budget, ("", ""), start, end, limit=limit)
