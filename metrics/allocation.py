"""The allocation of the bill (schema.sql `bill_allocation`): every dollar of effective cost in
one bucket, with the rule that put it there, and showback by team, project, namespace or a tag.

Pure functions over warehouse.query_exact: money comes back as Decimal, per billing currency,
never added across currencies. A period is [start, end) in UTC days; a bill line belongs to the
period its charge period starts in (docs/allocation.md).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal

import pandas as pd

from ingest.engine import warehouse
from ingest.settings import config

BUCKETS = config.ALLOCATION_BUCKETS
BUCKET_LABELS = {"training": "Training runs", "serving": "Serving (model versions)", "idle_gpu": "Idle GPUs",
                 "shared": "Shared (storage, network, support, tax, credits)", "unallocated": "Unallocated"}
# Keys with a meaning of their own; any other key is a tag (runs' tags, then the bill line's tags).
NAMED_KEYS = ("team", "project", "namespace", "pod")


@dataclass(frozen=True)
class Rules:
    """The settings the allocation follows (from [reconciliation] and [billing])."""

    run_tag: str = "run_id"
    slack_s: float = 3600.0
    service_tag: str = "service"
    team_tag: str = "team"
    project_tag: str = "project"
    families: tuple[str, ...] = ()
    words: tuple[str, ...] = ()

    @classmethod
    def of(cls, settings: config.Config) -> "Rules":
        """The rules of these settings."""
        rec, bill = settings.reconciliation, settings.billing
        return cls(run_tag=rec.run_id_tag, slack_s=rec.match_slack_minutes * 60, service_tag=rec.service_tag,
                   team_tag=rec.team_tag, project_tag=rec.project_tag,
                   families=bill.gpu_instance_families, words=bill.gpu_sku_words)


def month_span(month: date) -> tuple[date, date]:
    """The first day of `month` and the first day of the next month."""
    first = month.replace(day=1)
    return first, (first + timedelta(days=32)).replace(day=1)


def bill_months() -> list[date]:
    """The UTC months (first days) in which bill lines' charge periods start, newest first."""
    found = warehouse.query_exact("SELECT DISTINCT month FROM billing_costs ORDER BY month DESC")
    return list(found["month"])


def _params(start: date, end: date, rules: Rules) -> dict:
    return {"start": datetime.combine(start, time(), timezone.utc), "end": datetime.combine(end, time(), timezone.utc),
            "run_tag": rules.run_tag, "slack_s": rules.slack_s, "service_tag": rules.service_tag,
            "families": list(rules.families), "words": list(rules.words)}


# The allocation's pieces added up per UTC day and line group (schema.sql bill_allocation_days):
# the month stored at load when the period is a calendar month and the stored settings are these
# rules, else computed now; the same rows either way. A line's pieces are summed, never its
# fields: `lines` counts bill lines (LINES adds them up for any set of these rows).
PIECES = """
WITH pieces AS (
    SELECT * FROM bill_allocation_days($start, $end, $run_tag, $slack_s, $service_tag,
                                       $families::VARCHAR[], $words::VARCHAR[], stored := $stored,
                                       stored_days := $stored_days)
)
"""
LINES = "(coalesce(sum(lines) FILTER (WHERE line_key IS NULL), 0) + count(DISTINCT line_key))"

# One row per piece of each bill line, with the line's fields (schema.sql bill_allocation):
# computed now, for the drill-down to bill lines.
LINE_PIECES = """
WITH pieces AS (
    SELECT * FROM bill_allocation($start, $end, $run_tag, $slack_s, $service_tag,
                                  $families::VARCHAR[], $words::VARCHAR[], stored := $stored)
)
"""

# The key of a piece: a run's own project or team, else the bill line's tag; namespace and pod
# from the DCGM samples of a node piece's host in the period (the commonest; of two as common, the
# first in alphabetical order, so the key never depends on the order samples are read in), else a tag.
KEYED = PIECES + """
, dcgm AS (
    SELECT host, mode() WITHIN GROUP (ORDER BY namespace) AS namespace,
           mode() WITHIN GROUP (ORDER BY pod) AS pod FROM gpu_samples
    WHERE (namespace IS NOT NULL OR pod IS NOT NULL) AND sampled_at >= $start AND sampled_at < $end
    GROUP BY host
), keyed AS (
    SELECT p.*, r.project AS run_project, r.team AS run_team,
           coalesce(CASE $key WHEN 'team' THEN coalesce(r.team, p.tags[$team_tag])
                              WHEN 'project' THEN coalesce(r.project, p.tags[$project_tag])
                              WHEN 'namespace' THEN coalesce(r.tags['namespace'], d.namespace, p.tags['namespace'])
                              WHEN 'pod' THEN coalesce(r.tags['pod'], d.pod, p.tags['pod'])
                              ELSE coalesce(r.tags[$key], p.tags[$key]) END,
                    '(no ' || $key || ')') AS key_value
    FROM pieces p LEFT JOIN runs r ON r.run_id = p.run_id LEFT JOIN dcgm d ON d.host = p.host
)
"""


def matches_stored(rules: Rules) -> bool:
    """Whether billing_line_runs holds the lines' runs for these rules (else they are computed)."""
    found = warehouse.query_exact("SELECT count(*) AS n FROM billing_match_settings "
                                  "WHERE run_id_tag = $run_tag AND match_slack_s = $slack_s",
                                  {"run_tag": rules.run_tag, "slack_s": float(rules.slack_s)})
    return bool(found["n"].iloc[0])


def stored_days(start: date, end: date, rules: Rules) -> tuple[bool, bool]:
    """(whether billing_line_runs holds the lines' runs for these rules, whether
    bill_allocation_days holds the allocation of [start, end): a calendar month, these rules)."""
    month = month_span(start) == (start, end)
    found = warehouse.query_exact("""
        SELECT (SELECT count(*) FROM billing_match_settings
                WHERE run_id_tag = $run_tag AND match_slack_s = $slack_s) > 0 AS matches,
               $month AND (SELECT count(*) FROM bill_allocation_settings
                           WHERE run_id_tag = $run_tag AND match_slack_s = $slack_s AND service_tag = $service_tag
                             AND gpu_families = $families::VARCHAR[] AND gpu_words = $words::VARCHAR[]) > 0 AS days
    """, {"run_tag": rules.run_tag, "slack_s": float(rules.slack_s), "service_tag": rules.service_tag,
          "families": list(rules.families), "words": list(rules.words), "month": month})
    return bool(found["matches"].iloc[0]), bool(found["days"].iloc[0])


def _query(sql: str, start: date, end: date, rules: Rules, **more: object) -> pd.DataFrame:
    params = {**_params(start, end, rules), **more}
    if "$stored" in sql:  # what is stored when it is current for these rules: read, not computed
        params["stored"], params["stored_days"] = stored_days(start, end, rules)
    return warehouse.query_exact(sql, {name: value for name, value in params.items()
                                       if re.search(rf"\${name}\b", sql)})


def totals(start: date, end: date, rules: Rules) -> pd.DataFrame:
    """Per billing currency: `billed` (Σ effective cost of the period's lines), the lines, and
    `lines_without_effective_cost` (left out: the bill lacks what the figure needs)."""
    return warehouse.query_exact("""
        SELECT billing_currency, sum(effective_cost) AS billed, count(effective_cost) AS lines,
               count(*) - count(effective_cost) AS lines_without_effective_cost
        FROM billing_lines WHERE charge_period_start >= $start AND charge_period_start < $end
        GROUP BY billing_currency ORDER BY billing_currency
    """, {name: value for name, value in _params(start, end, rules).items() if name in ("start", "end")})


def figures(start: date, end: date, key: str, rules: Rules) -> pd.DataFrame:
    """The allocation's sums in one pass, per currency: `split` 'bucket' rows (bucket, rule),
    'key' rows (key_value of `key`, bucket) and 'node' rows (host, bucket): effective cost
    (Decimal), GPU-hours of node pieces and bill lines."""
    return _query(KEYED + """
        SELECT CASE WHEN GROUPING(rule) = 0 THEN 'bucket' WHEN GROUPING(key_value) = 0 THEN 'key'
                    ELSE 'node' END AS split,
               billing_currency, bucket, rule, key_value, host,
               sum(effective_cost) AS effective_cost, sum(gpu_hours) AS gpu_hours, """ + LINES + """ AS lines
        FROM keyed
        GROUP BY GROUPING SETS ((billing_currency, bucket, rule), (billing_currency, key_value, bucket),
                                (billing_currency, host, bucket))
        HAVING split <> 'node' OR host IS NOT NULL
        ORDER BY split, billing_currency, bucket, rule, key_value, host
    """, start, end, rules, key=key, team_tag=rules.team_tag, project_tag=rules.project_tag)


def key_choices(start: date, end: date) -> list[str]:
    """The keys one can split by: team, project, namespace, pod, then every tag key of the
    period's bill lines and of the runs."""
    found = warehouse.query("""
        SELECT DISTINCT k FROM (
            SELECT unnest(map_keys(tags)) AS k FROM billing_lines
            WHERE charge_period_start >= $start AND charge_period_start < $end AND tags IS NOT NULL
            UNION ALL SELECT unnest(map_keys(tags)) FROM runs WHERE tags IS NOT NULL)
        WHERE k IS NOT NULL ORDER BY k
    """, {"start": datetime.combine(start, time(), timezone.utc), "end": datetime.combine(end, time(), timezone.utc)})
    return [*NAMED_KEYS, *(k for k in found["k"] if k not in NAMED_KEYS)]


def nodes(table: pd.DataFrame) -> pd.DataFrame:
    """Per billed GPU node (a traced host whose bill lines name it) and currency, from figures():
    `billed` (effective cost of its lines), `gpu_hours` (GPUs x hours billed), `rate_per_gpu_hour`,
    `training`, `idle_gpu`, `unallocated` (Decimal), `idle_gpu_hours`, `rate_source` 'bill'."""
    rows = table[table["split"] == "node"]
    found = []
    for (host, currency), group in rows.groupby(["host", "billing_currency"], sort=True):
        amount = dict(zip(group["bucket"], group["effective_cost"]))
        hours = dict(zip(group["bucket"], group["gpu_hours"]))
        billed = sum(amount.values(), Decimal(0))
        gpu_hours = round(sum(float(h) for h in hours.values() if h is not None and not pd.isna(h)), 6)
        found.append({"host": host, "billing_currency": currency, "billed": billed, "gpu_hours": gpu_hours,
                      "rate_per_gpu_hour": (billed / Decimal(repr(gpu_hours))).quantize(Decimal("0.000001"))
                      if gpu_hours else None,
                      **{bucket: amount.get(bucket, Decimal(0)) for bucket in ("training", "idle_gpu", "unallocated")},
                      "idle_gpu_hours": round(float(hours.get("idle_gpu") or 0), 6), "rate_source": "bill"})
    return pd.DataFrame(found, columns=["host", "billing_currency", "billed", "gpu_hours", "rate_per_gpu_hour",
                                        "training", "idle_gpu", "unallocated", "idle_gpu_hours", "rate_source"])


def unbilled_nodes(start: date, end: date, billed_hosts: tuple[str, ...],
                   gpu_prices: tuple[tuple[str, Decimal], ...]) -> pd.DataFrame:
    """Traced hosts not in `billed_hosts` (no bill line in the period): idle GPU-hours (no run
    held the GPU) and their cost at the catalog's GPU price, `idle_usd_estimated` (Decimal, USD;
    NULL when the catalog lacks the GPU), `rate_source` 'catalog (estimated)'. Not in the bill's buckets."""
    days = {"start_day": start, "end_day": end}
    traced = warehouse.query("SELECT DISTINCT host FROM gpu_days WHERE day >= $start_day AND day < $end_day", days)
    hosts = sorted(set(traced["host"]) - set(billed_hosts))
    # from the stored GPU days (gpu_days: per GPU and UTC day, the idle seconds no run held): the
    # GPU-minutes summed per day, then over the days
    idle = warehouse.query("""
        SELECT host, arg_max(gpu_name, gpu_name_at) AS gpu_name, count(DISTINCT gpu_index) AS gpus,
               sum(unallocated_idle_s) / 3600.0 AS idle_gpu_hours
        FROM gpu_days WHERE day >= $start_day AND day < $end_day AND list_contains($hosts::VARCHAR[], host)
        GROUP BY host ORDER BY host
    """, {**days, "hosts": hosts}) if hosts else pd.DataFrame(columns=["host", "gpu_name", "gpus", "idle_gpu_hours"])
    # no idle second without a run: none (NULL) when every minute had a run, else 0 - the minutes say which
    unsure = [host for host, hours in zip(idle["host"], idle["idle_gpu_hours"]) if not hours]
    if unsure:
        span = {"start": datetime.combine(start, time(), timezone.utc),
                "end": datetime.combine(end, time(), timezone.utc)}
        exact = warehouse.query("""
            SELECT host, CASE WHEN bool_and(allocated) AND sum(idle_not_held_s(idle_s, held_s)) = 0 THEN NULL
                              ELSE sum(idle_not_held_s(idle_s, held_s)) / 3600.0 END AS idle_gpu_hours
            FROM gpu_minute_use WHERE minute >= $start AND minute < $end AND list_contains($hosts::VARCHAR[], host)
            GROUP BY host
        """, {**span, "hosts": unsure})
        idle["idle_gpu_hours"] = idle["host"].map(dict(zip(exact["host"], exact["idle_gpu_hours"]))).where(
            idle["host"].isin(unsure), idle["idle_gpu_hours"])
    prices = config.Prices(gpu_usd_per_hour=dict(gpu_prices))  # the catalog's [prices.gpu_usd_per_hour]
    rates = [prices.gpu(name) for name in idle["gpu_name"]]
    idle["catalog_usd_per_gpu_hour"] = rates
    idle["idle_usd_estimated"] = [
        None if rate is None or pd.isna(hours) else (rate * Decimal(repr(float(hours)))).quantize(Decimal("0.000001"))
        for rate, hours in zip(rates, idle["idle_gpu_hours"])]
    idle["rate_source"] = "catalog (estimated)"
    return idle


def runs(start: date, end: date, rules: Rules) -> pd.DataFrame:
    """Per run with allocated cost in the period and currency: project, team, the allocated
    effective cost (Decimal), its rules, GPU-hours on billed nodes, and the run's own estimate
    (`estimated_cost_usd`, `cost_source`: given, derived from its price, or catalog)."""
    return _query(PIECES + """
        SELECT p.run_id, r.project, r.team, p.billing_currency, sum(p.effective_cost) AS allocated_cost,
               string_agg(DISTINCT p.rule, '; ' ORDER BY p.rule) AS rules, sum(p.gpu_hours) AS node_gpu_hours,
               any_value(r.cost_usd) AS estimated_cost_usd, any_value(r.cost_source) AS cost_source,
               any_value(r.started_at) AS started_at
        FROM pieces p LEFT JOIN runs r USING (run_id)
        WHERE p.bucket = 'training'
        GROUP BY p.run_id, r.project, r.team, p.billing_currency
        ORDER BY allocated_cost DESC, p.run_id
    """, start, end, rules)


def versions(start: date, end: date, rules: Rules) -> pd.DataFrame:
    """Per service, model version and currency: allocated effective cost (Decimal), lines, rule."""
    return _query(PIECES + """
        SELECT service, coalesce(model_version, '(no windows)') AS model_version, billing_currency,
               sum(effective_cost) AS allocated_cost, """ + LINES + """ AS lines,
               string_agg(DISTINCT rule, '; ' ORDER BY rule) AS rules
        FROM pieces WHERE bucket = 'serving'
        GROUP BY ALL ORDER BY allocated_cost DESC, service, model_version
    """, start, end, rules)


def lines(start: date, end: date, rules: Rules, bucket: str | None = None, limit: int = 500) -> pd.DataFrame:
    """The period's allocation pieces (one per bill line and bucket, run or version), largest
    first: line, bucket, rule, what it went to, its amount and the whole line's (Decimal)."""
    return _query(LINE_PIECES + """
        SELECT line_key, charge_period_start, billing_currency, bucket, rule,
               coalesce(run_id, service || coalesce(' ' || model_version, ''), host) AS allocated_to,
               effective_cost, line_effective_cost, charge_category, service_name, resource_id,
               resource_name, instance_type, gpu_rule
        FROM pieces WHERE $bucket = '' OR bucket = $bucket
        ORDER BY abs(effective_cost) DESC, line_key LIMIT $limit
    """, start, end, rules, bucket=bucket or "", limit=limit)


def summary(start: date, end: date, key: str, rules: Rules) -> dict:
    """The allocation as plain data: per currency the billed total, every bucket (zero when
    empty) and the split by `key`, amounts as Decimal; the GPU nodes' figures under `nodes`."""
    return summarize(start, end, key, totals(start, end, rules), figures(start, end, key, rules))


def summarize(start: date, end: date, key: str, found: pd.DataFrame, table: pd.DataFrame) -> dict:
    """summary() from totals() and figures() already fetched."""
    billed_nodes = nodes(table)
    currencies: dict[str, dict] = {}
    for row in found.itertuples():
        currency = row.billing_currency
        if row.lines == 0:
            continue
        mine = table[table["billing_currency"] == currency]
        buckets, keys = mine[mine["split"] == "bucket"], mine[mine["split"] == "key"]
        currencies[currency] = {
            "billed": row.billed,
            "lines": int(row.lines),
            "lines_without_effective_cost": int(row.lines_without_effective_cost),
            "buckets": {bucket: sum(buckets.loc[buckets["bucket"] == bucket, "effective_cost"], Decimal(0))
                        for bucket in BUCKETS},
            "by_key": {value: sum(group["effective_cost"], Decimal(0))
                       for value, group in keys.groupby("key_value", sort=True)},
            "nodes": {node["host"]: {name: node[name] for name in
                                     ("billed", "idle_gpu", "training", "unallocated", "gpu_hours",
                                      "idle_gpu_hours", "rate_per_gpu_hour")}
                      for node in billed_nodes[billed_nodes["billing_currency"] == currency].to_dict("records")},
        }
    return {"from": start, "to": end - timedelta(days=1), "by": key, "currencies": currencies}
