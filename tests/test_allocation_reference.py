"""The allocation macro (schema.sql bill_allocation) gives, row for row, what its first version
gave, which cut every line with window functions whether it had one piece or many; and every
piece of a line adds up to the line exactly, against the bill files read here with csv/Decimal.
"""
from __future__ import annotations

import csv
import gzip
import io
import json
import shutil
from collections import defaultdict
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest

from metrics import allocation
from ingest import config, loader
from tests.conftest import SAMPLE_DIR

# The macro as it was before lines of one piece skipped the rounding: the independent reference.
REFERENCE_MACRO = r"""
CREATE OR REPLACE MACRO bill_allocation_reference(alloc_start, alloc_end, run_tag, slack_s, service_tag, families, words) AS TABLE
WITH lines AS MATERIALIZED (
    SELECT l.*, epoch(l.charge_period_end - l.charge_period_start) AS line_s
    FROM billing_costs l
    WHERE l.charge_period_start >= alloc_start AND l.charge_period_start < alloc_end
      AND l.effective_cost IS NOT NULL
), run_lines AS MATERIALIZED (
    SELECT m.line_key, m.run_id, m.matched_by
    FROM billing_run_lines(run_tag, slack_s) m SEMI JOIN lines l USING (line_key)
), hosts AS MATERIALIZED (   -- GPU nodes: the hosts traced in the period, with their GPUs
    SELECT host, count(DISTINCT gpu_index) AS gpus FROM gpu_minutes
    WHERE minute >= alloc_start AND minute < alloc_end GROUP BY host
), named_hosts AS (   -- equality joins (an OR join would compare every line with every host)
    SELECT l.line_key, h.host, h.gpus, 1 AS preference FROM lines l JOIN hosts h ON h.host = l.resource_name
    UNION ALL
    SELECT l.line_key, h.host, h.gpus, 2 FROM lines l JOIN hosts h ON h.host = l.resource_id
), node_lines AS MATERIALIZED (
    SELECT l.line_key, n.host, n.gpus, l.charge_period_start AS line_start, l.charge_period_end AS line_end,
           n.gpus * l.line_s AS capacity_s
    FROM lines l JOIN named_hosts n USING (line_key)
    WHERE l.charge_category = 'usage' AND l.line_s > 0
      AND l.line_key NOT IN (SELECT line_key FROM run_lines)
    QUALIFY row_number() OVER (PARTITION BY l.line_key ORDER BY n.preference, n.host) = 1
), node_line_minutes AS MATERIALIZED (   -- exploded to minutes, so traces join by equality
    SELECT line_key, host, unnest(generate_series(date_trunc('minute', line_start),
                                                  line_end - INTERVAL 1 MICROSECOND, INTERVAL 1 MINUTE)) AS minute
    FROM node_lines
), node_span AS (
    SELECT min(line_start) AS span_start, max(line_end) AS span_end FROM node_lines
), run_spans AS (   -- as view run_gpu_minutes, for the runs on billed nodes within the lines' span only
    SELECT g.run_id, g.host, g.gpu_index, g.weight, r.started_at, r.ended_at,
           unnest(generate_series(date_trunc('minute', greatest(r.started_at, s.span_start)),
                                  least(r.ended_at, s.span_end) - INTERVAL 1 MICROSECOND, INTERVAL 1 MINUTE)) AS minute
    FROM run_gpus g JOIN runs r USING (run_id), node_span s
    WHERE g.host IN (SELECT host FROM node_lines)
      AND r.ended_at > r.started_at AND r.ended_at > s.span_start AND r.started_at < s.span_end
), run_minutes AS MATERIALIZED (   -- each run's seconds in each GPU-minute of a billed node (x its share)
    SELECT run_id, host, gpu_index, minute,
           epoch(least(ended_at, minute + INTERVAL 1 MINUTE) - greatest(started_at, minute)) * weight AS run_s
    FROM run_spans
), held AS MATERIALIZED (   -- all runs' seconds in a GPU-minute (over 60 when runs share the GPU)
    SELECT host, gpu_index, minute, sum(run_s) AS held_s FROM run_minutes GROUP BY ALL
), node_runs AS (   -- runs sharing a GPU-minute split it by their seconds in it
    SELECT nm.line_key, r.run_id, sum(r.run_s * 60 / greatest(60, h.held_s)) AS weight
    FROM node_line_minutes nm JOIN run_minutes r USING (host, minute) JOIN held h USING (host, gpu_index, minute)
    GROUP BY ALL
), node_idle AS (   -- idle seconds of the GPU-minutes, never more than no run held (least() skips NULLs: coalesce first)
    SELECT nm.line_key, sum(least(m.idle_s, greatest(0, 60 - least(60, coalesce(h.held_s, 0))))) AS weight
    FROM node_line_minutes nm JOIN gpu_minutes m USING (host, minute)
    LEFT JOIN held h USING (host, gpu_index, minute)
    GROUP BY nm.line_key
), node_pieces AS (
    SELECT line_key, 'training' AS bucket, 'node GPU-hours share' AS rule, run_id, NULL AS model_version, weight
    FROM node_runs
    UNION ALL
    SELECT line_key, 'idle_gpu', 'idle GPU-hours x node rate', NULL, NULL, weight FROM node_idle WHERE weight > 0
    UNION ALL
    SELECT n.line_key, 'unallocated', 'node GPU-hours without a run or idle reading', NULL, NULL,
           greatest(0, n.capacity_s - coalesce(r.weight, 0) - coalesce(i.weight, 0))
    FROM node_lines n
    LEFT JOIN (SELECT line_key, sum(weight) AS weight FROM node_runs GROUP BY line_key) r USING (line_key)
    LEFT JOIN node_idle i USING (line_key)
), serving_lines AS MATERIALIZED (
    SELECT l.line_key, l.tags[service_tag] AS service, l.charge_period_start AS line_start,
           coalesce(l.charge_period_end, l.charge_period_start) AS line_end
    FROM lines l
    WHERE l.charge_category = 'usage' AND l.tags[service_tag] IS NOT NULL
      AND l.line_key NOT IN (SELECT line_key FROM run_lines)
      AND l.line_key NOT IN (SELECT line_key FROM node_lines)
), serving_versions AS (
    SELECT s.line_key, w.model_version,
           sum(w.cost_usd * epoch(least(s.line_end, w.window_end) - greatest(s.line_start, w.window_start))
               / w.window_s) AS cost_weight,
           sum(epoch(least(s.line_end, w.window_end) - greatest(s.line_start, w.window_start))) AS time_weight
    FROM serving_lines s JOIN serving_windows w
      ON w.service = s.service AND w.window_start < s.line_end AND w.window_end > s.line_start
    GROUP BY ALL
), serving_pieces AS (
    SELECT v.line_key, 'serving' AS bucket,
           CASE WHEN sum(v.cost_weight) OVER (PARTITION BY v.line_key) > 0
                THEN 'service tag, versions by window cost' ELSE 'service tag, versions by window time' END AS rule,
           NULL AS run_id, v.model_version,
           CASE WHEN sum(v.cost_weight) OVER (PARTITION BY v.line_key) > 0
                THEN coalesce(v.cost_weight, 0) ELSE v.time_weight END AS weight
    FROM serving_versions v
    UNION ALL
    SELECT s.line_key, 'serving', 'service tag, no serving windows in the charge period', NULL, NULL, 1
    FROM serving_lines s WHERE s.line_key NOT IN (SELECT line_key FROM serving_versions)
), other_pieces AS (
    SELECT l.line_key,
           CASE WHEN l.charge_category <> 'usage' THEN 'shared'
                WHEN l.tags[run_tag] IS NOT NULL THEN 'unallocated'
                WHEN l.instance_type IS NOT NULL
                     OR gpu_line_rule(l.instance_family, l.service_name, l.charge_description, families, words) IS NOT NULL
                    THEN 'unallocated'
                ELSE 'shared' END AS bucket,
           CASE WHEN l.charge_category <> 'usage' THEN l.charge_category
                WHEN l.tags[run_tag] IS NOT NULL THEN 'run tag names a run that is not loaded'
                WHEN l.instance_type IS NOT NULL
                     OR gpu_line_rule(l.instance_family, l.service_name, l.charge_description, families, words) IS NOT NULL
                    THEN 'compute matching no run, node or service'
                ELSE 'shared service' END AS rule,
           NULL AS run_id, NULL AS model_version, 1 AS weight
    FROM lines l
    WHERE l.line_key NOT IN (SELECT line_key FROM run_lines)
      AND l.line_key NOT IN (SELECT line_key FROM node_lines)
      AND l.line_key NOT IN (SELECT line_key FROM serving_lines)
), pieces AS MATERIALIZED (
    SELECT line_key, 'training' AS bucket,
           CASE matched_by WHEN 'tag' THEN 'run tag' ELSE 'resource id + time overlap' END AS rule,
           run_id, NULL AS model_version, 1.0 AS weight
    FROM run_lines
    UNION ALL SELECT line_key, bucket, rule, run_id, model_version, weight FROM node_pieces
    UNION ALL SELECT line_key, bucket, rule, run_id, model_version, weight FROM serving_pieces
    UNION ALL SELECT line_key, bucket, rule, run_id, model_version, weight FROM other_pieces
), ordered AS (
    SELECT p.*, l.effective_cost,
           sum(p.weight) OVER (PARTITION BY p.line_key ORDER BY p.bucket, p.rule, p.run_id, p.model_version
                               ROWS UNBOUNDED PRECEDING) AS weight_to_here,
           sum(p.weight) OVER (PARTITION BY p.line_key) AS line_weight,
           row_number() OVER (PARTITION BY p.line_key ORDER BY p.bucket, p.rule, p.run_id, p.model_version) AS piece,
           count(*) OVER (PARTITION BY p.line_key) AS pieces
    FROM pieces p JOIN lines l USING (line_key)
), cumulative AS (
    SELECT *, CASE WHEN piece = pieces OR line_weight = 0 THEN effective_cost
                   ELSE CAST(effective_cost * CAST(weight_to_here / line_weight AS DECIMAL(18, 15)) AS DECIMAL(38, 12))
              END AS cost_to_here
    FROM ordered
)
SELECT c.line_key, l.billing_currency, c.bucket, c.rule, c.run_id, n.host, l.tags[service_tag] AS service,
       c.model_version,
       c.cost_to_here - coalesce(lag(c.cost_to_here) OVER (PARTITION BY c.line_key ORDER BY c.piece), 0) AS effective_cost,
       CASE WHEN n.line_key IS NOT NULL THEN c.weight / 3600.0 END AS gpu_hours,
       l.effective_cost AS line_effective_cost, l.charge_period_start, l.charge_period_end,
       l.charge_category, l.service_name, l.resource_id, l.resource_name, l.instance_type, l.tags,
       gpu_line_rule(l.instance_family, l.service_name, l.charge_description, families, words) AS gpu_rule
FROM cumulative c JOIN lines l USING (line_key) LEFT JOIN node_lines n USING (line_key);
;
"""

ARGS = "$start, $end, $run_tag, $slack_s, $service_tag, $families::VARCHAR[], $words::VARCHAR[]"
# Rows in one result and not the other (a multiset difference, both ways).
DIFFERENCE = f"""
SELECT count(*) FROM (
    (SELECT * FROM bill_allocation_reference({ARGS}) EXCEPT ALL SELECT * FROM bill_allocation({ARGS}))
    UNION ALL
    (SELECT * FROM bill_allocation({ARGS}) EXCEPT ALL SELECT * FROM bill_allocation_reference({ARGS})))
"""


def params(start: datetime, end: datetime, rules: allocation.Rules) -> dict:
    return {"start": start, "end": end, "run_tag": rules.run_tag, "slack_s": rules.slack_s,
            "service_tag": rules.service_tag, "families": list(rules.families), "words": list(rules.words)}


def with_reference(db: Path, tmp_path: Path) -> duckdb.DuckDBPyConnection:
    """A connection to a copy of `db` that also holds the reference macro."""
    copy = tmp_path / "reference.duckdb"
    shutil.copyfile(db, copy)
    con = duckdb.connect(str(copy))
    con.execute(REFERENCE_MACRO)
    return con


# The macro reading the stored matches (billing_line_runs) against the reference computing them.
STORED_DIFFERENCE = DIFFERENCE.replace(f"bill_allocation({ARGS})", f"bill_allocation({ARGS}, stored := true)")


def check_against_reference(con: duckdb.DuckDBPyConnection, values: dict) -> dict:
    """Asserts both macros give the same rows, also from the stored matches when they hold these
    settings, and each line's pieces add up to it exactly; returns Σ piece cost per billing
    currency, the number of lines cut into several pieces and whether the stored matches were compared."""
    assert con.execute(DIFFERENCE, values).fetchone()[0] == 0
    stored = bool(con.execute("SELECT count(*) FROM billing_match_settings WHERE run_id_tag = $run_tag "
                              "AND match_slack_s = $slack_s", {k: values[k] for k in ("run_tag", "slack_s")}
                              ).fetchone()[0])
    if stored:
        assert con.execute(STORED_DIFFERENCE, values).fetchone()[0] == 0
    rows = con.execute(f"SELECT line_key, effective_cost, line_effective_cost, billing_currency "
                       f"FROM bill_allocation({ARGS})", values).fetchall()
    reference = con.execute(f"SELECT count(*) FROM bill_allocation_reference({ARGS})", values).fetchone()[0]
    assert len(rows) == reference
    per_line: dict[str, Decimal] = defaultdict(Decimal)
    pieces: dict[str, int] = defaultdict(int)
    line_cost, sums = {}, defaultdict(Decimal)
    for key, cost, line, currency in rows:
        per_line[key] += cost
        pieces[key] += 1
        line_cost[key] = line
        sums[currency] += cost
    assert per_line == line_cost  # every billed unit lands once: no line short or over by a digit
    return {"sums": dict(sums), "split_lines": sum(1 for n in pieces.values() if n > 1), "stored": stored}


def bill_sums(rows: list[dict]) -> dict[str, Decimal]:
    sums: dict[str, Decimal] = defaultdict(Decimal)
    for row in rows:
        if row["EffectiveCost"]:
            sums[row["BillingCurrency"]] += Decimal(row["EffectiveCost"])
    return dict(sums)


@pytest.mark.parametrize("month", [8, 9, 10, 11])
def test_the_sample_bill_is_cut_as_by_the_reference(demo_db, tmp_path, month):
    rules = allocation.Rules.of(config.load(SAMPLE_DIR / "mlcost.toml"))
    start = datetime(2026, month, 1, tzinfo=timezone.utc)
    end = datetime(2026, month + 1, 1, tzinfo=timezone.utc)
    with with_reference(demo_db, tmp_path) as con:
        found = check_against_reference(con, params(start, end, rules))
    assert found["split_lines"] > 0  # the GPU nodes' lines are shared between runs and idle time
    assert found["stored"]  # the demo's settings are the stored ones: both ways compared
    rows = []
    for path in sorted((SAMPLE_DIR / "billing").glob("*.csv.gz")):
        with gzip.open(path, "rt", newline="") as handle:
            rows += [r for r in csv.DictReader(handle) if r["ChargePeriodStart"].startswith(f"2026-{month:02d}")]
    assert found["sums"] == bill_sums(rows)


BILL = """BilledCost,EffectiveCost,BillingCurrency,ChargePeriodStart,ChargePeriodEnd,ChargeCategory,\
ProviderName,ServiceName,ResourceId,ResourceName,Tags,x_LineItemId
10,10,EUR,2026-01-05 10:00:00,2026-01-05 11:00:00,Usage,AWS,EC2,i-1,n1,{},li-1
7.01,7.01,USD,2026-01-05 10:00:00,2026-01-05 10:30:00,Usage,AWS,EC2,i-1,n1,{},li-2
0.000000000001,0.000000000001,USD,2026-01-05 10:30:00,2026-01-05 11:00:00,Usage,AWS,EC2,i-1,n1,{},li-3
5.55,5.55,USD,2026-01-05 10:00:00,2026-01-05 11:00:00,Usage,AWS,SageMaker,ep-1,,"{""service"": ""chat""}",li-4
3,3,USD,2026-01-05 10:00:00,2026-01-05 11:00:00,Usage,AWS,SageMaker,ep-2,,"{""service"": ""quiet""}",li-5
2.5,2.5,USD,2026-01-05 10:00:00,2026-01-05 11:00:00,Usage,AWS,EC2,i-9,,"{""run_id"": ""r1""}",li-6
1.5,1.5,USD,2026-01-05 10:00:00,2026-01-05 11:00:00,Tax,AWS,Tax,,,{},li-7
-0.4,-0.4,USD,2026-01-05 10:00:00,2026-01-05 11:00:00,Credit,AWS,EC2,,,{},li-8
"""


def test_lines_of_many_pieces_are_cut_as_by_the_reference(warehouse, tmp_path):
    """A node of 3 GPUs shared by two runs and idle time (thirds divide no cent), a line too small
    to split, a service with two model versions, a service without windows, a run, a tax, a credit."""
    trace = tmp_path / "n1_2026-01.csv"
    lines = ["timestamp,host,gpu_index,gpu_uuid,gpu_name,power_w,energy_mj,gpu_util_pct,mem_used_mib"]
    for minute in range(0, 60, 2):
        for gpu in range(3):
            util = 90 if gpu == 0 or (gpu == 1 and minute < 20) else 0
            lines.append(f"2026-01-05T10:{minute:02d}:00Z,n1,{gpu},GPU-{gpu},NVIDIA L4,50,,{util},0")
    trace.write_text("\n".join(lines) + "\n")
    run = {"project": "p", "team": "t", "price_per_hour_usd": 1, "host": "n1", "gpu_type": "NVIDIA L4"}
    runs = tmp_path / "runs.jsonl"
    runs.write_text("\n".join(json.dumps({**run, **more}) for more in (
        {"run_id": "r1", "start_time": "2026-01-05T10:00:00Z", "end_time": "2026-01-05T11:00:00Z", "gpu_indices": [0]},
        {"run_id": "r2", "start_time": "2026-01-05T10:00:00Z", "end_time": "2026-01-05T10:20:00Z", "gpu_indices": [1]},
    )) + "\n")
    window = {"service": "chat", "requests_total": 10, "requests_success": 10, "requests_error": 0,
              "latency_ms_p50": 1, "latency_ms_p95": 2, "latency_ms_p99": 3}
    serving = tmp_path / "serving.jsonl"
    serving.write_text("\n".join(json.dumps({**window, **more}) for more in (
        {"window_start": "2026-01-05T10:00:00Z", "window_end": "2026-01-05T11:00:00Z", "model_version": "v1",
         "cost_usd": 1},
        {"window_start": "2026-01-05T10:00:00Z", "window_end": "2026-01-05T11:00:00Z", "model_version": "v2",
         "cost_usd": 2},
    )) + "\n")
    bill = tmp_path / "bill.csv"
    bill.write_text(BILL)
    for _, summary in loader.ingest_paths([str(trace), str(runs), str(serving), str(bill)]):
        assert summary.ok and summary.rows_rejected == 0, summary
    rules = allocation.Rules(run_tag="run_id", slack_s=0, service_tag="service", team_tag="team",
                             project_tag="project", families=("p4d",), words=("gpu",))
    values = params(datetime(2026, 1, 1, tzinfo=timezone.utc), datetime(2026, 2, 1, tzinfo=timezone.utc), rules)
    with with_reference(warehouse, tmp_path) as con:
        found = check_against_reference(con, values)
        versions = con.execute(f"SELECT model_version FROM bill_allocation({ARGS}) WHERE line_key IN "
                               f"(SELECT line_key FROM billing_lines WHERE source_line_id = 'li-4')", values)
        assert sorted(v for (v,) in versions.fetchall()) == ["v1", "v2"]
    assert found["split_lines"] >= 3  # both node lines and the served line
    assert found["sums"] == bill_sums(list(csv.DictReader(io.StringIO(BILL))))


def test_the_gpu_word_rule_is_any_word_on_its_own(warehouse):
    """gpu_line_rule's word test (one pattern for all words) says what testing each word apart
    with Python's re says: a word counts only between word boundaries, regex characters are
    plain text, and no words match nothing."""
    import re

    from ingest import warehouse as store

    descriptions = ["2x NVIDIA A100 80GB", "a100x is not a GPU", "Tesla T4 (spot)", "t4g.medium burstable",
                    "gpu-hours", "GPUs", "c++ build box", "p4d.24xlarge", "", None, "h100 h100", "L4 l40s", "nogpu here", "xh100"]
    for words in (["a100", "t4", "gpu"], ["c++", "p4d.24xlarge"], ["l40s", "a100x"], [], ["h100"]):
        with store.connect() as con:
            got = [row[0] for row in con.execute(
                "SELECT gpu_line_rule(NULL, 'Compute', d, []::VARCHAR[], ?::VARCHAR[]) "
                "FROM unnest(?::VARCHAR[]) WITH ORDINALITY AS t(d, i) ORDER BY i", [words, descriptions]).fetchall()]
        expected = ["description names a GPU" if d is not None and any(
            re.search(r"\b" + re.escape(w) + r"\b", d.lower(), re.ASCII) for w in words) else None
            for d in descriptions]
        assert got == expected, words
