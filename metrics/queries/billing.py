"""Bills and reconciliation: totals per currency, spend over time, GPU spend, and bill lines
matched to runs."""
from __future__ import annotations

import pandas as pd

from metrics.filters import Filters
from metrics.queries.common import FILTERED_RUNS
from ingest.engine import warehouse

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
    return warehouse.query("""
        SELECT billing_currency, lines, billed_cost, effective_cost, list_cost, usage_cost, purchase_cost,
               tax_cost, credit_cost, adjustment_cost, providers,
               charge_period_min AS first_charge, charge_period_max AS last_charge
        FROM billing_currency_totals_of($start, $end) ORDER BY billed_cost_abs DESC, billing_currency
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
            SELECT grp, row_number() OVER (ORDER BY sum(abs(billed_cost)) DESC, grp) AS rank
            FROM grouped GROUP BY grp
        ), span AS (
            SELECT CASE WHEN count(DISTINCT day) * least(count(DISTINCT grp), $top + 1) <= $max_points THEN 'day'
                        WHEN count(DISTINCT day) / 7 * least(count(DISTINCT grp), $top + 1) <= $max_points THEN 'week'
                        ELSE 'month' END AS bucket
            FROM grouped
        )
        SELECT date_trunc(bucket, g.day)::DATE AS period, bucket,
               CASE WHEN r.rank <= $top THEN g.grp ELSE '(other)' END AS "group",
               sum(g.billed_cost) AS billed_cost
        FROM grouped g JOIN ranked r USING (grp), span
        GROUP BY ALL ORDER BY period, "group"
    """, {**_charge_range(filters), "currency": currency, "top": top, "max_points": max_points,
          **({"tag_key": tag_key or ""} if "$tag_key" in group else {})})


def billing_by_category(filters: Filters, currency: str) -> pd.DataFrame:
    """Billed cost in `currency` per invoice month (`month`: billing_month, UTC) and charge
    category (credits and adjustments keep their sign), with the line count."""
    return warehouse.query(BILL_LINES + """
        SELECT billing_month AS month, charge_category, sum(billed_cost) AS billed_cost, count(*) AS lines
        FROM lines WHERE billing_currency = $currency
        GROUP BY ALL ORDER BY month, charge_category
    """, {**_charge_range(filters), "currency": currency})


def billing_top_resources(filters: Filters, currency: str, limit: int = 20) -> pd.DataFrame:
    """The resources with the largest billed cost in `currency`, with their effective cost,
    lines and span. The name is the latest line's; provider, service and instance type list every
    one the resource was billed under, in alphabetical order (an S3 bucket is billed under storage
    and data transfer alike), so the table is the same whichever order the lines are read in."""
    return warehouse.query(BILL_LINES + """
        SELECT resource_id,
               arg_max(resource_name, (charge_period_start, resource_name)) AS resource_name,
               string_agg(DISTINCT provider, ', ' ORDER BY provider) AS provider,
               string_agg(DISTINCT service_name, ', ' ORDER BY service_name) AS service_name,
               string_agg(DISTINCT instance_type, ', ' ORDER BY instance_type) AS instance_type,
               sum(billed_cost) AS billed_cost, sum(effective_cost) AS effective_cost, count(*) AS lines,
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
               sum(billed_cost) AS billed_cost, count(*) AS lines,
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
               coalesce(sum(l.billed_cost) FILTER (WHERE m.line_key IS NOT NULL), 0) AS matched_cost,
               count(m.line_key)                                                     AS matched_lines,
               coalesce(sum(l.billed_cost) FILTER (WHERE m.line_key IS NULL), 0)     AS unmatched_cost,
               count(*) FILTER (WHERE m.line_key IS NULL)                            AS unmatched_lines
        FROM lines l LEFT JOIN matched m USING (line_key)  -- a line belongs to one run at most
        WHERE l.charge_category = 'usage'
        GROUP BY l.billing_currency ORDER BY sum(abs(l.billed_cost)) DESC
    """, {**_charge_range(filters), "run_tag": run_tag, "slack_s": slack_s,
          "stored": _matches_stored(run_tag, slack_s)})


def unmatched_spend(filters: Filters, run_tag: str, project_tag: str, slack_s: float) -> pd.DataFrame:
    """Usage lines in the date range matched to no run, per currency, project tag value and
    service: billed cost, lines, and the lines whose run tag names a run that is not loaded."""
    return warehouse.query(BILL_LINES + """
        , matched AS (SELECT line_key FROM billing_run_lines($run_tag, $slack_s, stored := $stored))
        SELECT billing_currency, coalesce(tags[$project_tag], '(no ' || $project_tag || ' tag)') AS project,
               coalesce(service_name, '(no service)') AS service_name,
               sum(billed_cost) AS billed_cost, count(*) AS lines,
               count(*) FILTER (WHERE tags[$run_tag] IS NOT NULL) AS lines_naming_unknown_runs,
               count(*) FILTER (WHERE tags IS NULL OR cardinality(tags) = 0) AS untagged_lines
        FROM lines
        WHERE charge_category = 'usage' AND line_key NOT IN (SELECT line_key FROM matched)
        GROUP BY ALL ORDER BY billing_currency, billed_cost DESC
    """, {**_charge_range(filters), "run_tag": run_tag, "project_tag": project_tag, "slack_s": slack_s,
          "stored": _matches_stored(run_tag, slack_s)})
