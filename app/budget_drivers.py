"""What a budget's spend is made of, from the allocation of the bill (schema.sql `bill_allocation`).

A budget's scope picks allocation pieces: by the bill line's tag or provider (all, project, team,
tag, provider: the same lines its billed spend counts) or by the piece itself (bucket, model,
service). Money is the allocation's effective cost in the budget's currency, exact (Decimal),
by the UTC day the line's charge period starts. Each calendar month is allocated on its own,
as the Costs page and `mlcost allocation --month` do, so a month's figures are the same here.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from decimal import Decimal

import pandas as pd

from app import allocation
from ingest.config import Budget

TOP_ITEMS = 10

# A piece in the budget's scope; p is a bill_allocation row, b its bill line.
SCOPE = """
    CASE $scope WHEN 'all' THEN true
                WHEN 'project' THEN p.tags[$project_tag] = $value
                WHEN 'team' THEN p.tags[$team_tag] = $value
                WHEN 'tag' THEN p.tags[$tag_key] = $tag_value
                WHEN 'provider' THEN lower(b.provider) = lower($value)
                WHEN 'bucket' THEN p.bucket = $value
                WHEN 'model' THEN p.model_version = $value
                WHEN 'service' THEN p.service = $value END
"""

SCOPED = allocation.PIECES + f"""
, scoped AS (
    SELECT p.*, (p.charge_period_start AT TIME ZONE 'UTC')::DATE AS day, r.project AS run_project
    FROM pieces p JOIN billing_lines b USING (line_key) LEFT JOIN runs r ON r.run_id = p.run_id
    WHERE coalesce({SCOPE}, false)
      AND (p.charge_period_start AT TIME ZONE 'UTC')::DATE >= $from_day
      AND (p.charge_period_start AT TIME ZONE 'UTC')::DATE < $to_day
)
"""

# What a piece went to, named so that untagged and unallocated spend reads as what it is.
ITEM = """
    CASE bucket WHEN 'training' THEN 'run ' || run_id
                WHEN 'serving' THEN 'model ' || coalesce(service, '(no service)') || ' '
                                    || coalesce(model_version, '(no serving windows)')
                WHEN 'idle_gpu' THEN 'idle GPUs of ' || host
                WHEN 'unallocated' THEN 'unallocated: ' || coalesce('node ' || host, service_name
                                        || coalesce(' ' || instance_type, ''), '(no service)')
                ELSE CASE WHEN charge_category = 'usage' THEN coalesce(service_name, '(no service)')
                          ELSE charge_category || coalesce(' (' || service_name || ')', '') END END
"""


def _months(start: date, end: date) -> list[tuple[date, date]]:
    """The calendar months that [start, end) touches, each as its [first day, next first day)."""
    spans, first = [], start.replace(day=1)
    while first < end:
        spans.append(allocation.month_span(first))
        first = spans[-1][1]
    return spans


def _per_month(sql: str, budget: Budget, rules: allocation.Rules, start: date, end: date) -> pd.DataFrame:
    """`sql` over each month's allocation, restricted to the pieces of [start, end) in the scope."""
    frames = []
    for month_start, month_end in _months(start, end):
        frames.append(allocation._query(
            SCOPED + sql, month_start, month_end, rules,
            scope=budget.scope, value=budget.scope_value or "", tag_key=budget.tag_key or "",
            tag_value=budget.tag_value or "", project_tag=rules.project_tag, team_tag=rules.team_tag,
            currency=budget.currency, from_day=max(start, month_start), to_day=min(end, month_end)))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def daily(budget: Budget, rules: allocation.Rules, start: date, end: date) -> pd.DataFrame:
    """Per UTC day in [start, end) with pieces in the scope: `spend` (the allocation's effective
    cost in the budget's currency, Decimal) and `other_currency_lines` (lines not counted)."""
    found = _per_month("""
        SELECT day, coalesce(sum(effective_cost) FILTER (WHERE billing_currency = $currency), 0) AS spend,
               count(DISTINCT line_key) FILTER (WHERE billing_currency <> $currency) AS other_currency_lines
        FROM scoped GROUP BY day ORDER BY day
    """, budget, rules, start, end)
    return found if not found.empty else pd.DataFrame(columns=["day", "spend", "other_currency_lines"])


@dataclass(frozen=True)
class Drivers:
    """A budget's effective cost in [start, end) and what it is made of; each table adds up to `total`."""

    total: Decimal
    buckets: pd.DataFrame   # bucket, label, cost: every bucket, zeros included
    items: pd.DataFrame     # bucket, item, rule, cost: the costliest, then one row for the rest
    projects: pd.DataFrame  # project, cost: the costliest, '(no project)' named, then the rest


def drivers(budget: Budget, rules: allocation.Rules, start: date, end: date, top: int = TOP_ITEMS) -> Drivers:
    """The scope's pieces of [start, end) by bucket, by what they went to and by project
    (the run's own project, else the line's project tag, else '(no project)')."""
    found = _per_month(f"""
        SELECT bucket, {ITEM} AS item, rule, coalesce(run_project, tags[$project_tag], '(no project)') AS project,
               sum(effective_cost) AS cost
        FROM scoped WHERE billing_currency = $currency
        GROUP BY ALL
    """, budget, rules, start, end)
    if found.empty:
        found = pd.DataFrame(columns=["bucket", "item", "rule", "project", "cost"])
    total = _sum(found["cost"])
    buckets = pd.DataFrame({"bucket": list(allocation.BUCKETS),
                            "label": [allocation.BUCKET_LABELS[b] for b in allocation.BUCKETS],
                            "cost": [_sum(found.loc[found["bucket"] == b, "cost"]) for b in allocation.BUCKETS]})
    items = _top(found, ["bucket", "item", "rule"], top, {"bucket": "", "rule": ""}, "item")
    projects = _top(found, ["project"], top, {}, "project")
    return Drivers(total=total, buckets=buckets, items=items, projects=projects)


def _sum(values: pd.Series) -> Decimal:
    return sum(values, Decimal(0))


def _top(found: pd.DataFrame, by: list[str], top: int, blanks: dict, name: str) -> pd.DataFrame:
    """Sums of `cost` by `by`, costliest first; past `top`, one row 'everything else (N more)'."""
    grouped = (found.groupby(by, sort=False, dropna=False)["cost"].agg(_sum).reset_index()
               if not found.empty else pd.DataFrame(columns=[*by, "cost"]))
    grouped["order"] = grouped["cost"].map(abs)
    grouped = grouped.sort_values(["order", *by], ascending=[False, *[True] * len(by)]).drop(columns="order")
    if len(grouped) <= top:
        return grouped.reset_index(drop=True)
    rest = grouped.iloc[top:]
    return pd.concat([grouped.iloc[:top], pd.DataFrame([{
        **blanks, name: f"everything else ({len(rest):,} more)", "cost": _sum(rest["cost"])}])], ignore_index=True)
