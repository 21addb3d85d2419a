"""Build a fleet-size warehouse straight with DuckDB SQL, to time the dashboard's pages on.

    python bench/fleet_warehouse.py OUT.duckdb [--scale 1.0] [--days 30]

At scale 1: 64 traced GPUs (16 hosts x 4) sampled every 60 s for `days` days, 100k runs (3 % of
them on the traced GPUs, the rest cloud runs), 500k serving windows, 1M FOCUS bill lines (some
tagged with a run, 1 % hours of the traced nodes), all in the rows and columns ingest stores,
with a ledger entry per kind.
The GPU rollups (gpu_minutes, gpu_gaps) are computed by the warehouse's own code. Deterministic:
every value comes from hash() of the row number, no clock and no random state.
"""
from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ingest.derived import derived, gpu_rollups  # noqa: E402
from ingest.engine import warehouse
from ingest.settings import config

START = datetime(2026, 10, 1, tzinfo=timezone.utc)
HOSTS, GPUS_PER_HOST = 16, 4
SAMPLE_S = 60

# u(i, 'salt'): a uniform number in [0, 1) from the row number, the same on every run.
U = "((hash({i}, '{salt}') % 1000003) / 1000003.0)"


def u(i: str, salt: str) -> str:
    return U.format(i=i, salt=salt)


def build(path: Path, scale: float = 1.0, days: int = 30) -> dict[str, int]:
    """Write the fleet warehouse at `path` (replaced); returns the rows per table."""
    path.unlink(missing_ok=True)
    runs_n, windows_n, lines_n = int(100_000 * scale), int(500_000 * scale), int(1_000_000 * scale)
    gpus = max(int(HOSTS * GPUS_PER_HOST * min(scale, 1.0)), 4)
    span_s = days * 86_400
    params = {"start": START, "span_s": span_s}
    with warehouse.connect(path) as con:
        con.execute("BEGIN TRANSACTION")
        loads = {}
        for kind, rows in (("runs", runs_n), ("serving", windows_n), ("billing_focus", lines_n),
                           ("gpu-collector", gpus * span_s // SAMPLE_S)):
            loads[kind] = con.execute(
                "INSERT INTO loads (path, sha256, kind, rows_loaded, rows_rejected, loaded_at) "
                "VALUES (?, ?, ?, ?, 0, ?) RETURNING load_id",
                [f"fleet/{kind}", f"fleet-{kind}-{scale}-{days}", kind, rows, START + timedelta(days=days)],
            ).fetchone()[0]
        # Traced GPUs: gpu-node-HH, index 0-3, a uuid each.
        con.execute(f"""
            CREATE TEMP TABLE fleet_gpus AS
            SELECT g, printf('gpu-node-%02d', g // {GPUS_PER_HOST} + 1) AS host, g % {GPUS_PER_HOST} AS gpu_index,
                   'GPU-' || substr(md5('fleet-gpu-' || g), 1, 8) || '-' || substr(md5('fleet-gpu-' || g), 9, 4)
                   || '-' || substr(md5('fleet-gpu-' || g), 13, 4) || '-' || substr(md5('fleet-gpu-' || g), 17, 4)
                   || '-' || substr(md5('fleet-gpu-' || g), 21, 12) AS gpu_uuid
            FROM range({gpus}) t(g)""")
        # Runs: 3 % on the traced GPUs (a node run holds 1-4 GPUs of one host for 1-8 h, laid
        # out per GPU slot one after another), the rest cloud runs without traced GPUs.
        node_runs = max(runs_n * 3 // 100, 1)
        con.execute(f"""
            CREATE TEMP TABLE fleet_runs AS
            WITH base AS (
                SELECT i, i < {node_runs} AS on_node,
                       ['vision', 'speech', 'llm-finetune', 'search-ranking', 'recsys', 'forecast',
                        'ocr', 'translation', 'tts', 'embeddings', 'safety', 'agents'][i % 12 + 1] AS project,
                       1 + floor({u('i', 'gpus')} * 4)::INTEGER AS gpu_count,
                       3600 + floor({u('i', 'dur')} * 7 * 3600)::BIGINT AS duration_s,
                       {u('i', 'metric')} AS m
                FROM range({runs_n}) t(i)
            ), placed AS (
                SELECT *, (i % {gpus // GPUS_PER_HOST}) AS host_no,
                       CASE WHEN on_node
                            THEN (i // {gpus // GPUS_PER_HOST}) * ($span_s // ({node_runs} // {gpus // GPUS_PER_HOST} + 1))
                            ELSE floor({u('i', 'start')} * ($span_s - duration_s))::BIGINT END AS offset_s
                FROM base
            )
            SELECT p.*, $start::TIMESTAMPTZ + to_seconds(p.offset_s) AS started_at,
                   $start::TIMESTAMPTZ + to_seconds(p.offset_s + p.duration_s) AS ended_at
            FROM placed p""", params)
        con.execute(f"""
            INSERT INTO runs
            SELECT printf('fleet-%06d', i) AS run_id, project,
                   ['genai', 'perception', 'relevance', 'platform'][i % 4 + 1] AS team,
                   ['ana', 'bo', 'chen', 'dev', 'emma', 'femi', 'gita', 'hugo'][i % 8 + 1] AS owner,
                   project || '-model-' || (i % 5) AS model,
                   CASE WHEN {u('i', 'status')} < 0.07 THEN 'failed'
                        WHEN {u('i', 'status')} < 0.10 THEN 'preempted' ELSE 'completed' END AS status,
                   'us-east-1' AS region,
                   CASE WHEN on_node THEN printf('gpu-node-%02d', host_no + 1) ELSE printf('cloud-%05d', i) END AS host,
                   CASE WHEN on_node THEN 'node-pool' ELSE ['p4d.24xlarge', 'g5.12xlarge', 'g6.xlarge', 'p5.48xlarge'][i % 4 + 1] END
                       AS instance_type,
                   'NVIDIA A100-SXM4-40GB' AS gpu_type, gpu_count,
                   CASE WHEN on_node THEN (SELECT list(g.gpu_uuid ORDER BY g.gpu_index) FROM fleet_gpus g
                                           WHERE g.host = printf('gpu-node-%02d', host_no + 1)
                                             AND g.gpu_index < gpu_count) END AS gpu_uuids,
                   CASE WHEN on_node THEN range(gpu_count)::INTEGER[] END AS gpu_indices,
                   started_at, ended_at, duration_s::DOUBLE,
                   CAST(1.5 * gpu_count AS DECIMAL(38, 12)) AS price_per_hour_usd,
                   CAST(round(1.5 * gpu_count * duration_s / 3600.0, 6) AS DECIMAL(38, 12)) AS cost_usd,
                   'derived' AS cost_source, NULL AS cost_given_usd, NULL AS flags,
                   10 + m * 100 AS throughput_examples_per_s,
                   round((10 + m * 100) * duration_s)::BIGINT AS examples, 'derived' AS examples_source,
                   CASE WHEN i % 3 = 0 THEN 0.5 + m * 0.45 ELSE 2.5 - m * 1.5 END AS val_metric,
                   CASE WHEN i % 3 = 0 THEN 'accuracy' ELSE 'eval_loss' END AS val_metric_name,
                   CASE WHEN i % 3 = 0 THEN 'max' ELSE 'min' END AS metric_goal,
                   NULL AS target_metric, NULL AS energy_kwh, NULL AS emissions_kg,
                   MAP {{'resource_id': printf('i-%012d', i), 'git_commit': substr(md5(i::VARCHAR), 1, 7)}} AS tags,
                   'runs' AS source_kind, {loads['runs']} AS load_id, i + 1 AS source_line
            FROM fleet_runs""")
        # Eval history for a fifth of the runs: 8 points.
        con.execute(f"""
            INSERT INTO run_evals
            SELECT printf('fleet-%06d', i), k, k * 1000, duration_s * (k + 1) / 8.0,
                   CASE WHEN i % 3 = 0 THEN (0.5 + m * 0.45) * (0.6 + 0.05 * k) ELSE (2.5 - m * 1.5) * (1.4 - 0.05 * k) END
            FROM fleet_runs, range(8) k(k) WHERE i % 5 = 0""")
        # Serving: 10 services x 3 versions (each a third of the span) x hosts, 10-minute windows.
        con.execute(f"""
            INSERT INTO serving_windows (window_key, window_start, window_end, window_s, service, model_version,
                requests_total, requests_success, requests_error, latency_ms_p50, latency_ms_p95, latency_ms_p99,
                throughput_rps, avg_gpu_util_pct, avg_cpu_util_pct, cost_usd, cost_source, price_per_hour_usd,
                energy_kwh, energy_source, instance_type, gpu_type, gpu_count, replicas, host, gpu_uuids,
                source_kind, load_id, source_line)
            WITH w AS (
                SELECT i, i % 10 AS svc, (i // 10) % 12 AS host_no,
                       $start::TIMESTAMPTZ + to_seconds((i // 120) * 600 % $span_s) AS window_start,
                       {u('i', 'req')} AS r
                FROM range({windows_n}) t(i)
            )
            SELECT service || '|' || model_version || '|' || host || '|' || strftime(window_start, '%Y-%m-%dT%H:%M:%S+00:00'),
                   window_start, window_start + INTERVAL 10 MINUTE, 600, service, model_version,
                   total, total - err, err, 40 + r * 800, 100 + r * 2000, 150 + r * 3000, total / 600.0,
                   20 + r * 60, 10 + r * 40,
                   CAST(round(0.2 + r, 6) AS DECIMAL(38, 12)), 'given', NULL,
                   CASE WHEN svc < 8 THEN 0.01 + r * 0.1 END, CASE WHEN svc < 8 THEN 'given' END,
                   'g5.12xlarge', 'NVIDIA A10G', 4, 1, host, NULL, 'serving', {loads['serving']}, i + 1
            FROM (SELECT *, printf('svc-%02d', svc) AS service,
                         printf('v%d', least(floor(epoch(window_start - $start::TIMESTAMPTZ) * 3 / $span_s), 2)::INTEGER + 1)
                             AS model_version,
                         printf('serve-%02d', host_no) AS host,
                         (1000 + r * 50000)::BIGINT AS total, (r * 30)::BIGINT AS err FROM w)
            QUALIFY row_number() OVER (PARTITION BY service, model_version, host, window_start ORDER BY i DESC) = 1""",
                    params)
        # Bill lines: usage of runs (tagged with the run for two in three runs, the rest by
        # resource id), one in a hundred an hour of a traced GPU node (named by resource id and
        # name: split between the runs on it, its idle GPUs and the rest), a few taxes and credits.
        con.execute(f"""
            INSERT INTO billing_lines
            WITH b AS (
                SELECT i, {u('i', 'cost')} AS c, i % {runs_n} AS run_no,
                       $start::TIMESTAMPTZ + to_seconds(floor({u('i', 'when')} * ($span_s // 3600))::BIGINT * 3600) AS charge_at
                FROM range({lines_n}) t(i)
            )
            SELECT printf('li-%08d', i), 'AWS', '318846120001', printf('3188461205%02d', i % 40),
                   printf('ml-account-%02d', i % 40),
                   CAST(round(CASE cat WHEN 'credit' THEN -c * 5 ELSE c * 20 END, 6) AS DECIMAL(38, 12)),
                   CAST(round(CASE cat WHEN 'credit' THEN -c * 5 ELSE c * 18 END, 6) AS DECIMAL(38, 12)),
                   CAST(round(CASE cat WHEN 'credit' THEN -c * 5 ELSE c * 22 END, 6) AS DECIMAL(38, 12)),
                   'USD', charge_at, charge_at + INTERVAL 1 HOUR, date_trunc('month', charge_at),
                   date_trunc('month', charge_at) + INTERVAL 1 MONTH,
                   cat, upper(cat[1]) || cat[2:], descr, service, printf('SKU%05d', i % 997),
                   coalesce(node, printf('i-%012d', run_no)), coalesce(node, printf('i-%012d', run_no)),
                   instance_type, 'us-east-1',
                   1.0, 'Hours', 'Standard', 'Standard',
                   CASE WHEN i % 3 = 0 OR node IS NOT NULL THEN MAP {{'project': project, 'team': team}}
                        ELSE MAP {{'project': project, 'team': team, 'run_id': printf('fleet-%06d', run_no)}} END,
                   printf('li-%08d', i), 'fleet/billing_focus', 'focus', 'billing_focus', {loads['billing_focus']}, i + 2
            FROM (SELECT *, CASE WHEN i % 500 = 7 THEN 'tax' WHEN i % 500 = 9 THEN 'credit' ELSE 'usage' END AS cat,
                         ['p4d.24xlarge', 'g5.12xlarge', 'g6.xlarge', 'p5.48xlarge'][run_no % 4 + 1] AS instance_type,
                         'Amazon Elastic Compute Cloud' AS service, 'GPU instance hour' AS descr,
                         CASE WHEN i % 100 = 3 THEN printf('gpu-node-%02d', i // 100 % {gpus // GPUS_PER_HOST} + 1) END
                             AS node,
                         ['vision', 'speech', 'llm-finetune', 'search-ranking', 'recsys', 'forecast',
                          'ocr', 'translation', 'tts', 'embeddings', 'safety', 'agents'][run_no % 12 + 1] AS project,
                         ['genai', 'perception', 'relevance', 'platform'][run_no % 4 + 1] AS team
                  FROM b)""", params)
        # GPU samples every SAMPLE_S: busy (util 60-100 %) while a run holds the GPU, else idle
        # (util 0-3 %), with a 2-hour collector hole on the first GPU.
        con.execute(f"""
            CREATE TEMP TABLE fleet_held AS
            SELECT g.host, g.gpu_index, r.started_at, r.ended_at
            FROM fleet_runs r JOIN fleet_gpus g
              ON r.on_node AND g.host = printf('gpu-node-%02d', r.host_no + 1) AND g.gpu_index < r.gpu_count""")
        con.execute(f"""
            INSERT INTO gpu_samples
            WITH s AS (
                SELECT g.host, g.gpu_index, g.gpu_uuid, k,
                       $start::TIMESTAMPTZ + to_seconds(k * {SAMPLE_S}) AS sampled_at
                FROM fleet_gpus g, range($span_s // {SAMPLE_S}) t(k)
                WHERE NOT (g.g = 0 AND k * {SAMPLE_S} BETWEEN 86400 AND 86400 + 7200)
            ), flagged AS (
                SELECT s.*, EXISTS (SELECT 1 FROM fleet_held h WHERE h.host = s.host AND h.gpu_index = s.gpu_index
                                    AND s.sampled_at >= h.started_at AND s.sampled_at < h.ended_at) AS busy,
                       {u('k * 131 + s.gpu_index', 'util')} AS v
                FROM s
            )
            SELECT host, gpu_index, sampled_at, gpu_uuid, 'NVIDIA A100-SXM4-40GB',
                   CASE WHEN busy THEN 250 + v * 150 ELSE 55 + v * 10 END, NULL,
                   CASE WHEN busy THEN 60 + v * 40 ELSE v * 3 END, CASE WHEN busy THEN 30000 ELSE 500 END,
                   NULL, NULL, 'gpu-collector', {loads['gpu-collector']}, row_number() OVER () + 1
            FROM flagged""", params)
        db = '"' + con.execute("SELECT current_database()").fetchone()[0].replace('"', '""') + '"'
        gpu_rollups.rebuild(con, db, config.load().gpu, gpu_rollups.stored_settings(con, db))
        derived.refresh_run_energy(con)  # the tables pages read, as a load stores them
        derived.refresh_billing_runs(con)
        derived.refresh_allocation(con)
        con.execute("COMMIT")
        counts = {table: con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                  for table in ("runs", "run_evals", "serving_windows", "billing_lines", "gpu_samples",
                                "gpu_minutes", "gpu_gaps")}
        con.execute("CHECKPOINT")
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--scale", type=float, default=1.0, help="1 = 100k runs, 500k windows, 1M bill lines")
    parser.add_argument("--days", type=int, default=30, help="days of GPU samples and data (default 30)")
    args = parser.parse_args()
    began = time.perf_counter()
    counts = build(args.out, args.scale, args.days)
    print(f"{args.out}: {counts} in {time.perf_counter() - began:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
