"""What a budget's spend is made of, from the allocation of the bill (schema.sql `bill_allocation`).

A budget's scope picks allocation pieces: a team or project budget takes the pieces the Costs
page's showback by team or project gives it (the run's own team or project, else the bill line's
tag: allocation.KEYED); all, tag and provider take the lines their billed spend counts; bucket,
model and service take the pieces by the piece itself. `tagged` is the part of a team or project
budget's pieces whose bill line carries the tag itself ("of which tagged"). Money is the allocation's effective cost in the budget's currency, exact (Decimal),
by the UTC day the line's charge period starts. Each calendar month is allocated on its own,
as the Costs page and `mlcost allocation --month` do, so a month's figures are the same here.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from decimal import Decimal

import pandas as pd

from metrics import allocation, queries
from ingest.settings.sections import Budget

TOP_ITEMS = 10

# The budgets read at once (queries.WANTED, one row each; budget_no = its place in the list
# handed in) with the [start_day, end_day) of the month each reads; a piece is in a budget's scope
# when SCOPE holds (p is a bill_allocation_days row: pieces summed by day and line group, with the
# line's tags and provider; w the budget): a team or project budget's allocation (a run's own team
# or project first, else the line's tag), else the lines its billed spend counts
# (queries.budget_row_scope), or pieces by bucket, model or service.
SCOPE = f"""
    CASE WHEN w.scope = 'team' THEN coalesce(r.team, p.tags[$team_tag]) = w.value
         WHEN w.scope = 'project' THEN coalesce(r.project, p.tags[$project_tag]) = w.value
         ELSE {queries.budget_row_scope("p.tags", "p.provider", piece="p")} END
"""
# The piece's bill line itself carries the budget's team or project tag.
TAGGED = """
    CASE w.scope WHEN 'team' THEN coalesce(p.tags[$team_tag] = w.value, false)
                 WHEN 'project' THEN coalesce(p.tags[$project_tag] = w.value, false)
                 ELSE false END
"""

SCOPED = allocation.PIECES + ", " + queries.WANTED + f"""
, scoped AS (
    SELECT w.budget_no, w.currency AS budget_currency, p.*, r.project AS run_project, {TAGGED} AS line_tagged
    FROM pieces p LEFT JOIN runs r ON r.run_id = p.run_id
    JOIN wanted w ON coalesce({SCOPE}, false) AND p.day >= w.start_day AND p.day < w.end_day
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


def _per_month(sql: str, spans: list[tuple[Budget, date, date]], rules: allocation.Rules) -> pd.DataFrame:
    """`sql` over each month's allocation (computed once for every budget of `spans`: (budget,
    start, end) each), restricted to the pieces of each budget's [start, end) in its scope;
    `budget_no` is the budget's place in `spans`."""
    frames = []
    first = min((start for _, start, _ in spans), default=None)
    last = max((end for _, _, end in spans), default=None)
    for month_start, month_end in _months(first, last) if spans else ():
        wanted = [(no, budget, max(start, month_start), min(end, month_end))
                  for no, (budget, start, end) in enumerate(spans) if start < month_end and end > month_start]
        if not wanted:
            continue
        frames.append(allocation._query(
            SCOPED + sql, month_start, month_end, rules,
            **queries.budget_rows([(budget, start, end) for _, budget, start, end in wanted],
                                  (rules.project_tag, rules.team_tag), numbers=[no for no, *_ in wanted])))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


DAILY_COLUMNS = ["day", "spend", "tagged", "other_currency_lines"]


def daily(budget: Budget, rules: allocation.Rules, start: date, end: date) -> pd.DataFrame:
    """Per UTC day in [start, end) with pieces in the scope: `spend` (the allocation's effective
    cost in the budget's currency, Decimal), `tagged` (the part whose bill line carries the team
    or project tag) and `other_currency_lines` (lines not counted)."""
    return daily_of([(budget, start, end)], rules)[0]


def daily_of(spans: list[tuple[Budget, date, date]], rules: allocation.Rules) -> list[pd.DataFrame]:
    """daily() of each (budget, start, end) of `spans`, in order, from one allocation per month."""
    return daily_and_top_runs(spans, [], rules)[0]


def daily_and_top_runs(day_spans: list[tuple[Budget, date, date]], run_spans: list[tuple[Budget, date, date]],
                       rules: allocation.Rules, top: int = 3) -> tuple[list[pd.DataFrame], list[pd.DataFrame]]:
    """(daily() of each of `day_spans`, the costliest `top` runs of each of `run_spans`: run_id and
    cost, the allocation's effective cost of the run's training pieces in the budget's currency),
    in order, from one allocation per month for both (the allocation is the costly part)."""
    spans = [*day_spans, *run_spans]
    found = _per_month(f"""
        , pieces_of AS (
            SELECT budget_no, day, line_key, lines, line_tagged, effective_cost,
                   billing_currency = budget_currency AS counted,
                   CASE WHEN bucket = 'training' AND billing_currency = budget_currency THEN run_id END AS run_key
            FROM scoped
        ), sums AS (
            SELECT budget_no, GROUPING(day) AS by_run, day, run_key,
                   coalesce(sum(effective_cost) FILTER (WHERE counted), 0) AS spend,
                   coalesce(sum(effective_cost) FILTER (WHERE counted AND line_tagged), 0) AS tagged,
                   coalesce(sum(lines) FILTER (WHERE NOT counted AND line_key IS NULL), 0)
                       + count(DISTINCT line_key) FILTER (WHERE NOT counted) AS other_currency_lines
            FROM pieces_of GROUP BY GROUPING SETS ((budget_no, day), (budget_no, run_key))
        )
        SELECT * FROM sums WHERE by_run = 0 OR run_key IS NOT NULL
        QUALIFY by_run = 0 OR row_number() OVER (PARTITION BY budget_no, by_run ORDER BY spend DESC, run_key)
                              <= {int(top)}
        ORDER BY budget_no, by_run, day
    """, spans, rules)
    days = found[found["by_run"] == 0] if not found.empty else found
    runs = found[found["by_run"] == 1] if not found.empty else found
    day_groups = dict(tuple(days.groupby("budget_no", sort=False))) if not days.empty else {}
    run_groups = dict(tuple(runs.groupby("budget_no", sort=False))) if not runs.empty else {}
    daily_frames = [day_groups[no][DAILY_COLUMNS].reset_index(drop=True) if no in day_groups
                    else pd.DataFrame(columns=DAILY_COLUMNS) for no in range(len(day_spans))]
    run_frames = []
    for no in range(len(day_spans), len(spans)):
        sums: dict[str, Decimal] = {}  # a run in two months: its pieces of both added up
        if no in run_groups:
            for run_id, cost in zip(run_groups[no]["run_key"], run_groups[no]["spend"]):
                sums[run_id] = sums.get(run_id, Decimal(0)) + cost
        ordered = sorted(sums.items(), key=lambda item: (-item[1], item[0]))[:top]
        run_frames.append(pd.DataFrame(ordered, columns=["run_id", "cost"], dtype=object))
    return daily_frames, run_frames


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
    return drivers_of([(budget, start, end)], rules, top)[0]


def drivers_of(spans: list[tuple[Budget, date, date]], rules: allocation.Rules, top: int = TOP_ITEMS) -> list[Drivers]:
    """drivers() of each (budget, start, end) of `spans`, in order, from one allocation of each
    month for all of them (the allocation is the costly part: alerts need every budget's)."""
    found = _per_month(f"""
        SELECT budget_no, bucket, {ITEM} AS item, rule,
               coalesce(run_project, tags[$project_tag], '(no project)') AS project, sum(effective_cost) AS cost
        FROM scoped WHERE billing_currency = budget_currency
        GROUP BY ALL
    """, spans, rules)
    columns = ["bucket", "item", "rule", "project", "cost"]
    groups = dict(tuple(found.groupby("budget_no", sort=False))) if not found.empty else {}
    return [_drivers(groups[no][columns] if no in groups else pd.DataFrame(columns=columns), top)
            for no in range(len(spans))]


def _drivers(found: pd.DataFrame, top: int) -> Drivers:
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
    sums: dict[tuple, Decimal] = {}
    for key, cost in zip(zip(*(found[column] for column in by)), found["cost"]):
        sums[key] = sums.get(key, Decimal(0)) + cost
    grouped = pd.DataFrame([(*key, cost) for key, cost in sums.items()], columns=[*by, "cost"], dtype=object)
    grouped["order"] = grouped["cost"].map(abs)
    grouped = grouped.sort_values(["order", *by], ascending=[False, *[True] * len(by)]).drop(columns="order")
    if len(grouped) <= top:
        return grouped.reset_index(drop=True)
    rest = grouped.iloc[top:]
    return pd.concat([grouped.iloc[:top], pd.DataFrame([{
        **blanks, name: f"everything else ({len(rest):,} more)", "cost": _sum(rest["cost"])}])], ignore_index=True)
