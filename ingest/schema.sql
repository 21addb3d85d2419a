-- The warehouse schema. Idempotent: run on every first connection of a process.
-- Units are in column names; every time is TIMESTAMPTZ in UTC; money is DECIMAL.
-- docs/schema.md explains each table and column.

CREATE SEQUENCE IF NOT EXISTS load_ids START 1;

-- The sha256 of the schema.sql last applied to this file (one row): a process whose schema.sql
-- has that digest leaves the file as it is instead of running this script again.
CREATE TABLE IF NOT EXISTS schema_stamp (
    sha256      VARCHAR NOT NULL,
    applied_at  TIMESTAMPTZ NOT NULL
);

CREATE TABLE IF NOT EXISTS loads (
    load_id        BIGINT PRIMARY KEY DEFAULT nextval('load_ids'),
    path           VARCHAR NOT NULL,
    sha256         VARCHAR NOT NULL,
    kind           VARCHAR NOT NULL,
    rows_loaded    BIGINT NOT NULL,
    rows_rejected  BIGINT NOT NULL,
    loaded_at      TIMESTAMPTZ NOT NULL,
    options        VARCHAR,
    UNIQUE (sha256, kind)
);
-- Warehouses made before the ledger kept the options a file was read with (NULL: none given).
ALTER TABLE loads ADD COLUMN IF NOT EXISTS options VARCHAR;

-- Loads removed with `mlcost unload` (or the Data page), and how many rows went with each.
CREATE TABLE IF NOT EXISTS unloads (
    load_id       BIGINT NOT NULL,
    path          VARCHAR NOT NULL,
    sha256        VARCHAR NOT NULL,
    kind          VARCHAR NOT NULL,
    options       VARCHAR,
    rows_removed  BIGINT NOT NULL,
    unloaded_at   TIMESTAMPTZ NOT NULL,
    reason        VARCHAR NOT NULL
);

CREATE TABLE IF NOT EXISTS rejects (
    load_id  BIGINT NOT NULL,
    path     VARCHAR NOT NULL,
    line     BIGINT NOT NULL,
    reason   VARCHAR NOT NULL,
    raw      VARCHAR
);

-- How far each importer's source has been read (ingest/importers/ledger.py), so the next
-- import asks only for what changed since; `watermark` is the source's own measure (epoch ms).
CREATE TABLE IF NOT EXISTS import_watermarks (
    source      VARCHAR PRIMARY KEY,
    kind        VARCHAR NOT NULL,
    watermark   VARCHAR NOT NULL,
    updated_at  TIMESTAMPTZ NOT NULL
);

-- runs.run_id, run_evals (run_id, seq) and serving_windows.window_key are unique without an index, as
-- billing_lines.line_key below: the merge deletes the stored rows of every key a load brings
-- (ingest/engine/wh_merge.py REPLACE_BY) and staging keeps one row per key. An ART primary-key index
-- re-checked that at ~1 s CPU per million rows inserted. A warehouse made with the keys is rebuilt
-- without them when it is first opened for writing (ingest/engine/wh_migrate.py).
CREATE TABLE IF NOT EXISTS runs (
    run_id                       VARCHAR NOT NULL,
    project                      VARCHAR,
    team                         VARCHAR,
    owner                        VARCHAR,
    model                        VARCHAR,
    status                       VARCHAR,
    region                       VARCHAR,
    host                         VARCHAR,
    instance_type                VARCHAR,
    gpu_type                     VARCHAR,
    gpu_count                    INTEGER,
    gpu_uuids                    VARCHAR[],
    gpu_indices                  INTEGER[],
    started_at                   TIMESTAMPTZ,
    ended_at                     TIMESTAMPTZ,
    duration_s                   DOUBLE,
    price_per_hour_usd           DECIMAL(38, 12),
    cost_usd                     DECIMAL(38, 12),
    cost_source                  VARCHAR,
    cost_given_usd               DECIMAL(38, 12),
    flags                        VARCHAR[],
    throughput_examples_per_s    DOUBLE,
    examples                     BIGINT,
    examples_source              VARCHAR,
    val_metric                   DOUBLE,
    val_metric_name              VARCHAR,
    metric_goal                  VARCHAR,
    target_metric                DOUBLE,
    energy_kwh                   DOUBLE,
    emissions_kg                 DOUBLE,
    tags                         MAP(VARCHAR, VARCHAR),
    source_kind                  VARCHAR NOT NULL,
    load_id                      BIGINT NOT NULL,
    source_line                  BIGINT NOT NULL
);

CREATE TABLE IF NOT EXISTS run_evals (
    run_id     VARCHAR NOT NULL,
    seq        INTEGER NOT NULL,
    step       BIGINT,
    elapsed_s  DOUBLE,
    value      DOUBLE NOT NULL
);

-- The UTC calendar day of an instant, in integer arithmetic: `(ts AT TIME ZONE 'UTC')::DATE` goes
-- through ICU and costs ~0.15 s per million rows, this ~0.02 s (pages group millions of rows by day).
CREATE OR REPLACE MACRO utc_day(ts) AS DATE '1970-01-01' + CAST(floor(epoch_us(ts) / 86400000000) AS INTEGER);

-- Derived per-run figures; pages and tests read this view, never recompute it.
CREATE OR REPLACE VIEW run_costs AS
SELECT
    r.*,
    r.duration_s / 3600.0                                   AS duration_h,
    CASE WHEN r.examples > 0
         THEN CAST(r.cost_usd / r.examples * 1000 AS DECIMAL(38, 12)) END
                                                            AS cost_per_1k_examples_usd,
    CASE WHEN r.duration_s > 0 AND r.gpu_count > 0
         THEN r.duration_s / 3600.0 * r.gpu_count END       AS gpu_hours
FROM runs r;

-- Serving metric windows (ingest/formats/serving.py). A window loaded again replaces the earlier one:
-- window_key = service|model_version|host|window_start (warehouse.REPLACE_BY).
CREATE TABLE IF NOT EXISTS serving_windows (
    window_key          VARCHAR NOT NULL,
    window_start        TIMESTAMPTZ NOT NULL,
    window_end          TIMESTAMPTZ NOT NULL,
    window_s            DOUBLE NOT NULL,
    service             VARCHAR NOT NULL,
    model_version       VARCHAR NOT NULL,
    requests_total      BIGINT NOT NULL,
    requests_success    BIGINT NOT NULL,
    requests_error      BIGINT,
    latency_ms_p50      DOUBLE,
    latency_ms_p95      DOUBLE,
    latency_ms_p99      DOUBLE,
    throughput_rps      DOUBLE,
    avg_gpu_util_pct    DOUBLE,
    avg_cpu_util_pct    DOUBLE,
    cost_usd            DECIMAL(38, 12),
    cost_source         VARCHAR,
    price_per_hour_usd  DECIMAL(38, 12),
    energy_kwh          DOUBLE,
    energy_source       VARCHAR,
    instance_type       VARCHAR,
    gpu_type            VARCHAR,
    gpu_count           INTEGER,
    replicas            INTEGER,
    host                VARCHAR,
    gpu_uuids           VARCHAR[],
    source_kind         VARCHAR NOT NULL,
    load_id             BIGINT NOT NULL,
    source_line         BIGINT NOT NULL
);
-- Tokens of LLM servers (vLLM), added after the first release: ADD COLUMN keeps older warehouses.
ALTER TABLE serving_windows ADD COLUMN IF NOT EXISTS prompt_tokens BIGINT;
ALTER TABLE serving_windows ADD COLUMN IF NOT EXISTS output_tokens BIGINT;

-- Per-window serving figures. A group's figure is a ratio of sums (metrics/queries.py
-- SERVING_FIGURES): cost over success_priced, energy over success_metered, so a window without
-- a cost or an energy drops out of numerator and denominator alike instead of counting as free.
CREATE OR REPLACE VIEW serving_costs AS
SELECT
    w.*,
    utc_day(w.window_start)                                     AS day,
    w.window_s / 3600.0                                         AS window_h,
    w.energy_kwh * 1000                                         AS energy_wh,
    CASE WHEN w.cost_usd IS NOT NULL THEN w.requests_success END   AS success_priced,
    CASE WHEN w.cost_usd IS NOT NULL THEN w.requests_total END     AS requests_priced,
    CASE WHEN w.energy_kwh IS NOT NULL THEN w.requests_success END AS success_metered,
    CASE WHEN w.energy_kwh IS NOT NULL THEN w.requests_total END   AS requests_metered,
    CASE WHEN w.requests_error IS NOT NULL THEN w.requests_total END AS requests_error_counted,
    CASE WHEN w.requests_success > 0
         THEN CAST(w.cost_usd / w.requests_success * 1000 AS DECIMAL(38, 12)) END
                                                                AS cost_per_1k_success_usd,
    CASE WHEN w.requests_total > 0
         THEN CAST(w.cost_usd / w.requests_total * 1000 AS DECIMAL(38, 12)) END
                                                                AS cost_per_1k_requests_usd,
    CASE WHEN w.requests_success > 0 THEN w.energy_kwh * 1e6 / w.requests_success END
                                                                AS energy_wh_per_1k_success,
    CASE WHEN w.requests_total > 0 THEN w.energy_kwh * 1e6 / w.requests_total END
                                                                AS energy_wh_per_1k_requests,
    CASE WHEN w.requests_total > 0 THEN w.requests_error / w.requests_total END
                                                                AS error_rate
FROM serving_windows w;

-- GPU power traces (ingest/formats/gpu/gpu_collector.py, nvidia_smi.py, dcgm.py): one row per GPU per
-- sample. A sample loaded again (same host, gpu_index and sampled_at) replaces the stored one
-- (warehouse.REPLACE_BY). Pages never read this table; they read the rollups below, which
-- every trace load updates from the samples it changes (ingest/derived/gpu_rollups.py).
CREATE TABLE IF NOT EXISTS gpu_samples (
    host           VARCHAR NOT NULL,
    gpu_index      INTEGER NOT NULL,
    sampled_at     TIMESTAMPTZ NOT NULL,
    gpu_uuid       VARCHAR,
    gpu_name       VARCHAR,
    power_w        DOUBLE,
    energy_mj      BIGINT,
    gpu_util_pct   DOUBLE,
    mem_used_mib   DOUBLE,
    pod            VARCHAR,
    namespace      VARCHAR,
    source_kind    VARCHAR NOT NULL,
    load_id        BIGINT NOT NULL,
    source_line    BIGINT NOT NULL
);

-- Per GPU per UTC minute: what the samples say about that minute (gpu_rollups.MINUTES_OF).
CREATE TABLE IF NOT EXISTS gpu_minutes (
    host                VARCHAR NOT NULL,
    gpu_index           INTEGER NOT NULL,
    minute              TIMESTAMPTZ NOT NULL,
    gpu_uuid            VARCHAR,
    gpu_name            VARCHAR,
    coverage_s          DOUBLE NOT NULL,
    energy_s            DOUBLE NOT NULL,
    energy_kwh          DOUBLE,
    idle_s              DOUBLE NOT NULL,
    idle_energy_kwh     DOUBLE,
    busy_s              DOUBLE NOT NULL,
    power_w_mean        DOUBLE,
    power_w_max         DOUBLE,
    util_pct_mean       DOUBLE,
    util_pct_max        DOUBLE,
    util_pct_busy_mean  DOUBLE,
    mem_used_mib_max    DOUBLE
);

-- Coverage holes: samples of one GPU further apart than [gpu] max_gap_s.
CREATE TABLE IF NOT EXISTS gpu_gaps (
    host        VARCHAR NOT NULL,
    gpu_index   INTEGER NOT NULL,
    gpu_uuid    VARCHAR,
    gap_start   TIMESTAMPTZ NOT NULL,
    gap_end     TIMESTAMPTZ NOT NULL,
    gap_s       DOUBLE NOT NULL
);

-- The [gpu] settings the stored rollups were computed with (one row).
CREATE TABLE IF NOT EXISTS gpu_rollup_settings (
    idle_util_max_pct  DOUBLE NOT NULL,
    idle_power_max_w   DOUBLE,
    idle_min_s         DOUBLE NOT NULL,
    max_gap_s          DOUBLE NOT NULL,
    rollups            BIGINT NOT NULL,
    computed_at        TIMESTAMPTZ NOT NULL
);

-- Trace loads whose per-run GPU time, GPU days, run energy and allocation are not stored yet (a
-- load of many files stores them once, after its last file): ingest/derived/pending.py. Empty
-- when no load is under way.
CREATE TABLE IF NOT EXISTS derived_pending_gpus (
    host       VARCHAR NOT NULL,
    gpu_index  INTEGER NOT NULL,
    since      TIMESTAMPTZ NOT NULL     -- its minutes were rewritten from here on
);

-- Per GPU of derived_pending_gpus and uuid: the first and last minute its stored minutes showed
-- before the first of those loads.
CREATE TABLE IF NOT EXISTS derived_pending_traced (
    host          VARCHAR NOT NULL,
    gpu_index     INTEGER NOT NULL,
    gpu_uuid      VARCHAR,
    first_minute  TIMESTAMPTZ NOT NULL,
    last_minute   TIMESTAMPTZ NOT NULL
);

-- Whether run r held the traced GPU g (host, gpu_index, gpu_uuid): by uuid where both sides
-- know it, else by host and index (a run that names no GPUs holds none this way). Also read by
-- ingest/derived/derived.py to find the runs a newly traced or vanished GPU concerns.
CREATE OR REPLACE MACRO run_holds_gpu(r_host, r_gpu_indices, r_gpu_uuids, g_host, g_gpu_index, g_gpu_uuid) AS
    (g_gpu_uuid IS NOT NULL AND list_contains(r_gpu_uuids, g_gpu_uuid))
    OR (r_host = g_host AND list_contains(r_gpu_indices, g_gpu_index)
        AND (g_gpu_uuid IS NULL OR len(coalesce(r_gpu_uuids, [])) = 0));

-- The hosts of a run imported from a tracker or Slurm that names its hosts but not its GPUs
-- (Slurm's NodeList, expanded into the tag `nodes`; a tracker's `host`); NULL for other runs.
CREATE OR REPLACE MACRO run_hosts_only(source_kind, host, tags, gpu_uuids, gpu_indices, gpu_count) AS
    CASE WHEN source_kind IN ('mlflow', 'wandb', 'slurm')
              AND len(coalesce(gpu_uuids, [])) = 0 AND len(coalesce(gpu_indices, [])) = 0
              AND (gpu_count IS NULL OR gpu_count > 0) AND (source_kind <> 'slurm' OR gpu_count > 0)
         THEN list_distinct(CASE WHEN source_kind = 'slurm' THEN string_split(tags['nodes'], ',') ELSE [host] END)
    END;

-- Each run of the table named `run_table` (rows of runs) among the traced GPUs, with the share of
-- each it held (`weight`): the GPUs it names (run_holds_gpu), each whole (weight 1). A run with
-- hosts only (run_hosts_only) holds a share of every traced GPU of each host traced while it ran
-- (hosts traced only at other times would add minutes with nothing in them): its GPUs per host
-- (gpu_count / hosts) over the host's traced GPUs, at most 1; the whole host when it gives no GPU
-- count. An estimate: which GPUs it had is unknown, so it takes its share of each. run_gpus is
-- every run's.
CREATE OR REPLACE MACRO run_gpus_of(run_table) AS TABLE
WITH traced AS (SELECT DISTINCT host, gpu_index, gpu_uuid FROM gpu_minutes),
host_gpus AS (SELECT host, gpu_index, count(*) OVER (PARTITION BY host) AS gpus
              FROM (SELECT DISTINCT host, gpu_index FROM traced)),
host_spans AS (SELECT host, min(minute) AS first_minute, max(minute) + INTERVAL 1 MINUTE AS traced_until
               FROM gpu_minutes GROUP BY host),
named AS (
    SELECT DISTINCT r.run_id, g.host, g.gpu_index
    FROM query_table(run_table) r JOIN traced g
      ON run_holds_gpu(r.host, r.gpu_indices, r.gpu_uuids, g.host, g.gpu_index, g.gpu_uuid)
), unnamed AS (
    SELECT run_id, gpu_count, started_at, ended_at, unnest(hosts) AS host, len(hosts) AS host_count
    FROM (SELECT run_id, gpu_count, started_at, ended_at,
                 run_hosts_only(source_kind, host, tags, gpu_uuids, gpu_indices, gpu_count) AS hosts
          FROM query_table(run_table))
    WHERE len(hosts) > 0
)
SELECT run_id, host, gpu_index, 1.0 AS weight FROM named
UNION ALL
SELECT u.run_id, g.host, g.gpu_index,
       CASE WHEN u.gpu_count IS NULL THEN 1.0 ELSE least(1.0, u.gpu_count / u.host_count / g.gpus) END
FROM unnamed u JOIN host_gpus g USING (host) JOIN host_spans h USING (host)
WHERE u.started_at < h.traced_until AND u.ended_at > h.first_minute;  -- hosts traced while it ran

CREATE OR REPLACE VIEW run_gpus AS SELECT * FROM run_gpus_of('runs');

-- Every minute each run held each of its traced GPUs (run_s: the seconds of that minute inside
-- [started_at, ended_at) x the share of the GPU it held, run_gpus_of.weight) and each run's
-- measured GPU energy, defined in ingest/derived/run_minutes.py and stored after every load of
-- runs or GPU samples (and `mlcost rollup`) by ingest/derived/derived.py: pages read them many
-- times, a load writes them once.
CREATE TABLE IF NOT EXISTS run_gpu_time (
    run_id     VARCHAR NOT NULL,
    host       VARCHAR NOT NULL,
    gpu_index  INTEGER NOT NULL,
    minute     TIMESTAMPTZ NOT NULL,
    run_s      DOUBLE NOT NULL
);

CREATE TABLE IF NOT EXISTS run_gpu_energy (
    run_id                         VARCHAR NOT NULL,  -- one row per run
    gpus_traced                    BIGINT NOT NULL,
    gpu_energy_kwh                 DOUBLE,
    gpu_energy_s                   DOUBLE,
    gpu_energy_coverage_pct        DOUBLE,
    gpu_energy_wh_per_1k_examples  DOUBLE
);

-- Per GPU and minute that runs held it: the seconds they held it, added over the runs (stored
-- with run_gpu_time; runs sharing a minute split its energy by these).
CREATE TABLE IF NOT EXISTS gpu_minutes_allocated (
    host       VARCHAR NOT NULL,
    gpu_index  INTEGER NOT NULL,
    minute     TIMESTAMPTZ NOT NULL,
    held_s     DOUBLE NOT NULL
);

-- Retired: run-minutes and run energy were also stated here as macros and live views; a warehouse
-- from before keeps no second definition of them.
DROP VIEW IF EXISTS run_energy_live;
DROP VIEW IF EXISTS run_gpu_minutes_live;
DROP MACRO TABLE IF EXISTS run_energy_of;
DROP MACRO TABLE IF EXISTS run_gpu_days_of;
DROP MACRO TABLE IF EXISTS run_gpu_minutes_of;

-- The names pages and tests read.
CREATE OR REPLACE VIEW run_gpu_minutes AS SELECT * FROM run_gpu_time;
CREATE OR REPLACE VIEW run_energy AS SELECT * FROM run_gpu_energy;

-- Per run, traced GPU and UTC day: the GPU-seconds the run held with a measured utilization
-- (Σ coverage_s x run_s / 60 over the minutes whose util_pct_mean is known) and those seconds
-- weighted by the minute's utilization; the GPU's last known name and the minute it was seen.
-- The right-size candidates read this instead of joining every run minute to gpu_minutes, so
-- their cost follows runs x GPUs x days, not minutes. Stored with run_gpu_time by
-- ingest/derived/derived.py.
CREATE TABLE IF NOT EXISTS run_gpu_days (
    run_id       VARCHAR,
    host         VARCHAR,
    gpu_index    INTEGER,
    day          DATE,
    gpu_name     VARCHAR,
    gpu_name_at  TIMESTAMPTZ,
    run_gpu_s    DOUBLE,
    util_pct_s   DOUBLE
);

-- The idle seconds of one GPU-minute that no run held: its idle seconds, never more than the
-- seconds of the minute runs did not hold (`held_s`: the runs' seconds in it, NULL for none). The
-- one rule for "idle, not held by any run": the allocation's idle_gpu bucket, gpu_days, the Idle
-- GPUs page and metrics/idle.py all read it.
CREATE OR REPLACE MACRO idle_not_held_s(idle_s, held_s) AS
    least(idle_s, greatest(0, 60 - least(60, coalesce(held_s, 0))));

-- Per traced GPU and UTC day, what the idle figures add up from its minutes: the seconds
-- observed, idle (unallocated: the idle seconds no run held, idle_not_held_s; allocated: the rest,
-- idle while a run held the GPU), busy, with a busy utilization, energy (a minute's idle energy
-- split between the two in proportion to its seconds); the GPU's last known uuid and name and the
-- minute each was seen.
-- Pages sum days instead of joining millions of minutes to gpu_minutes_allocated. Stored by
-- ingest/derived/derived.py with gpu_minutes_allocated (macro over a table of gpu_minutes rows);
-- created filled in a warehouse from before it.
CREATE OR REPLACE MACRO gpu_days_of(minute_table) AS TABLE
SELECT m.host, m.gpu_index, utc_day(m.minute)                                        AS day,
       arg_max(m.gpu_uuid, m.minute)                                                AS gpu_uuid,
       max(m.minute) FILTER (WHERE m.gpu_uuid IS NOT NULL)                          AS gpu_uuid_at,
       arg_max(m.gpu_name, m.minute)                                                AS gpu_name,
       max(m.minute) FILTER (WHERE m.gpu_name IS NOT NULL)                          AS gpu_name_at,
       sum(m.coverage_s)                                                            AS coverage_s,
       sum(m.idle_s)                                                                AS idle_s,
       coalesce(sum(m.idle_s - idle_not_held_s(m.idle_s, a.held_s)), 0)             AS allocated_idle_s,
       coalesce(sum(idle_not_held_s(m.idle_s, a.held_s)), 0)                        AS unallocated_idle_s,
       sum(m.busy_s)                                                                AS busy_s,
       sum(m.busy_s) FILTER (WHERE m.util_pct_busy_mean IS NOT NULL)                AS busy_util_s,
       sum(m.util_pct_busy_mean * m.busy_s)                                         AS util_busy_pct_s,
       sum(m.energy_kwh)                                                            AS energy_kwh,
       sum(m.idle_energy_kwh)                                                       AS idle_energy_kwh,
       sum(m.idle_energy_kwh * (1 - idle_not_held_s(m.idle_s, a.held_s) / nullif(m.idle_s, 0)))
                                                                                    AS allocated_idle_energy_kwh,
       sum(m.idle_energy_kwh * idle_not_held_s(m.idle_s, a.held_s) / nullif(m.idle_s, 0))
                                                                                    AS unallocated_idle_energy_kwh
FROM query_table(minute_table) m LEFT JOIN gpu_minutes_allocated a USING (host, gpu_index, minute)
GROUP BY m.host, m.gpu_index, utc_day(m.minute);

CREATE TABLE IF NOT EXISTS gpu_days AS
SELECT CAST(host AS VARCHAR) AS host, CAST(gpu_index AS INTEGER) AS gpu_index, CAST(day AS DATE) AS day,
       CAST(gpu_uuid AS VARCHAR) AS gpu_uuid, CAST(gpu_uuid_at AS TIMESTAMPTZ) AS gpu_uuid_at,
       CAST(gpu_name AS VARCHAR) AS gpu_name, CAST(gpu_name_at AS TIMESTAMPTZ) AS gpu_name_at,
       CAST(coverage_s AS DOUBLE) AS coverage_s, CAST(idle_s AS DOUBLE) AS idle_s,
       CAST(allocated_idle_s AS DOUBLE) AS allocated_idle_s, CAST(unallocated_idle_s AS DOUBLE) AS unallocated_idle_s,
       CAST(busy_s AS DOUBLE) AS busy_s, CAST(busy_util_s AS DOUBLE) AS busy_util_s,
       CAST(util_busy_pct_s AS DOUBLE) AS util_busy_pct_s, CAST(energy_kwh AS DOUBLE) AS energy_kwh,
       CAST(idle_energy_kwh AS DOUBLE) AS idle_energy_kwh,
       CAST(allocated_idle_energy_kwh AS DOUBLE) AS allocated_idle_energy_kwh,
       CAST(unallocated_idle_energy_kwh AS DOUBLE) AS unallocated_idle_energy_kwh
FROM gpu_days_of('gpu_minutes');

-- gpu_minutes with whether a run held the GPU in that minute (idle there is "allocated but idle").
CREATE OR REPLACE VIEW gpu_minute_use AS
SELECT m.*, a.minute IS NOT NULL AS allocated, a.held_s
FROM gpu_minutes m
LEFT JOIN gpu_minutes_allocated a USING (host, gpu_index, minute);

-- Cloud bill lines (ingest/formats/billing/billing_focus.py, billing_aws.py, billing_gcp.py, billing_azure.py)
-- in FinOps FOCUS terms, snake_case. A line loaded again replaces the stored one: line_key is
-- the provider's own line id where the bill has one, else a hash of the line's content
-- (ingest/formats/billing/billing.py). Amounts are in billing_currency and are never added across currencies.
-- line_key is unique without an index: the merge deletes the stored rows of every key a load
-- brings (ingest/engine/wh_merge.py REPLACE_BY) and staging keeps one row per key; an ART
-- primary-key index cost ~1.6 s CPU per million lines inserted.
CREATE TABLE IF NOT EXISTS billing_lines (
    line_key              VARCHAR NOT NULL,
    provider              VARCHAR NOT NULL,
    billing_account_id    VARCHAR,
    sub_account_id        VARCHAR,
    sub_account_name      VARCHAR,
    billed_cost           DECIMAL(38, 12) NOT NULL,
    effective_cost        DECIMAL(38, 12),
    list_cost             DECIMAL(38, 12),
    billing_currency      VARCHAR NOT NULL,
    charge_period_start   TIMESTAMPTZ NOT NULL,
    charge_period_end     TIMESTAMPTZ,
    billing_period_start  TIMESTAMPTZ,
    billing_period_end    TIMESTAMPTZ,
    charge_category       VARCHAR NOT NULL,
    charge_category_raw   VARCHAR,
    charge_description    VARCHAR,
    service_name          VARCHAR,
    sku_id                VARCHAR,
    resource_id           VARCHAR,
    resource_name         VARCHAR,
    instance_type         VARCHAR,
    region_id             VARCHAR,
    consumed_quantity     DOUBLE,
    consumed_unit         VARCHAR,
    pricing_category      VARCHAR,
    pricing_category_raw  VARCHAR,
    tags                  MAP(VARCHAR, VARCHAR),
    source_line_id        VARCHAR,
    source_file           VARCHAR NOT NULL,
    source_format         VARCHAR NOT NULL,
    source_kind           VARCHAR NOT NULL,
    load_id               BIGINT NOT NULL,
    source_line           BIGINT NOT NULL
);

-- Bill lines with the figures pages group by: the UTC day and month of the charge, the invoice
-- month, and the
-- instance family (p4d of p4d.24xlarge, nc of standard_nc6s_v3, a2 of a2-highgpu-1g) that
-- metrics/queries.py matches against the configured GPU families.
CREATE OR REPLACE VIEW billing_costs AS
SELECT
    b.*,
    utc_day(b.charge_period_start)                                         AS day,
    date_trunc('month', utc_day(b.charge_period_start))::DATE              AS month,
    date_trunc('month', utc_day(coalesce(b.billing_period_start, b.charge_period_start)))::DATE
                                                                           AS billing_month,
    CASE WHEN b.instance_type ILIKE 'standard\_%' ESCAPE '\' OR b.instance_type ILIKE 'basic\_%' ESCAPE '\'
         THEN regexp_extract(lower(b.instance_type), '^[a-z]+_([a-z]+)', 1)
         ELSE nullif(regexp_extract(lower(b.instance_type), '^([a-z]+[0-9]*[a-z]*)', 1), '') END
                                                                           AS instance_family
FROM billing_lines b;

-- Sums per billing currency of the lines whose charge starts in [start_at, end_at) (NULL: no
-- bound), one row each; amounts are never added across currencies. Sums keep the lines' own
-- DECIMAL(38, 12): exact to the digit stored, and ingest bounds every amount below 10^15, so
-- 10^11 lines fit (a rescale to DECIMAL(38, 10) rounded digits 11-12 and cost ~0.7 s per million
-- lines per sum). `billed_cost_abs` (sum of |billed_cost|) orders currencies by their weight.
CREATE OR REPLACE MACRO billing_currency_totals_of(start_at, end_at) AS TABLE
SELECT
    billing_currency,
    count(*)                                                                       AS lines,
    sum(billed_cost)                                                               AS billed_cost,
    sum(effective_cost)                                                            AS effective_cost,
    sum(list_cost)                                                                 AS list_cost,
    coalesce(sum(billed_cost) FILTER (WHERE charge_category = 'usage'), 0)         AS usage_cost,
    coalesce(sum(billed_cost) FILTER (WHERE charge_category = 'purchase'), 0)      AS purchase_cost,
    coalesce(sum(billed_cost) FILTER (WHERE charge_category = 'tax'), 0)           AS tax_cost,
    coalesce(sum(billed_cost) FILTER (WHERE charge_category = 'credit'), 0)        AS credit_cost,
    coalesce(sum(billed_cost) FILTER (WHERE charge_category = 'adjustment'), 0)    AS adjustment_cost,
    count(DISTINCT provider)                                                       AS providers,
    sum(abs(billed_cost))                                                          AS billed_cost_abs,
    min(charge_period_start)                                                       AS charge_period_min,
    max(coalesce(charge_period_end, charge_period_start))                          AS charge_period_max
FROM billing_lines
WHERE (start_at IS NULL OR charge_period_start >= start_at) AND (end_at IS NULL OR charge_period_start < end_at)
GROUP BY billing_currency;

-- The whole bill's sums per billing currency.
CREATE OR REPLACE VIEW billing_currency_totals AS
SELECT * EXCLUDE (providers, billed_cost_abs) FROM billing_currency_totals_of(NULL, NULL);

-- Usage lines attributed to runs (macros: views with parameters, given by metrics/queries.py from
-- [reconciliation] in the settings). A line whose tag `run_tag` names a run belongs to it
-- (matched_by 'tag'); else a line whose resource_id is a run's tags['resource_id'] and whose
-- charge period overlaps the run (widened by slack_s seconds on each side) belongs to the run
-- it overlaps longest ('resource'). Credits, taxes, purchases and adjustments belong to no run.
-- billing_run_lines_of reads the lines of the table named `line_table` (rows of billing_lines:
-- ingest/derived/derived.py passes the lines a load changed to store just theirs again).
-- usage_lines is not materialised (read twice, it would be by default): the two joins scan the lines
-- for their own columns (a 1M-line bill in a load's transaction: 0.34 -> 0.22 CPU s, no spill).
CREATE OR REPLACE MACRO billing_run_lines_of(line_table, run_tag, slack_s) AS TABLE
WITH usage_lines AS NOT MATERIALIZED (
    SELECT * FROM query_table(line_table) WHERE charge_category = 'usage'
), by_tag AS (
    SELECT u.line_key, r.run_id, 'tag' AS matched_by
    FROM usage_lines u JOIN runs r ON u.tags[run_tag] = r.run_id
), by_resource AS (
    SELECT u.line_key,
           arg_max(r.run_id, epoch(least(coalesce(u.charge_period_end, u.charge_period_start), r.ended_at)
                                   - greatest(u.charge_period_start, r.started_at))) AS run_id,
           'resource' AS matched_by
    FROM usage_lines u JOIN runs r
      ON u.resource_id = r.tags['resource_id']
     AND u.charge_period_start < r.ended_at + to_seconds(CAST(slack_s AS BIGINT))
     AND coalesce(u.charge_period_end, u.charge_period_start) > r.started_at - to_seconds(CAST(slack_s AS BIGINT))
    WHERE u.line_key NOT IN (SELECT line_key FROM by_tag)
    GROUP BY u.line_key
)
SELECT * FROM by_tag
UNION ALL
SELECT * FROM by_resource;

CREATE OR REPLACE MACRO billing_run_lines_live(run_tag, slack_s) AS TABLE
SELECT * FROM billing_run_lines_of('billing_lines', run_tag, slack_s);

-- billing_run_lines_live for the [reconciliation] settings, stored after every load of runs or
-- bill lines by ingest/derived/derived.py (pages read it many times, a load writes it once).
CREATE TABLE IF NOT EXISTS billing_line_runs (
    line_key    VARCHAR NOT NULL,  -- one row per line: its tag names one run, else the run it overlaps longest
    run_id      VARCHAR NOT NULL,
    matched_by  VARCHAR NOT NULL
);

-- The run tag and slack (seconds) billing_line_runs was computed with (one row).
CREATE TABLE IF NOT EXISTS billing_match_settings (
    run_id_tag     VARCHAR NOT NULL,
    match_slack_s  DOUBLE NOT NULL,
    computed_at    TIMESTAMPTZ NOT NULL
);

-- stored := true reads billing_line_runs: only when billing_match_settings holds these settings
-- (metrics/queries.py asks first). A constant flag, so that the other branch is never computed.
CREATE OR REPLACE MACRO billing_run_lines(run_tag, slack_s, stored := false) AS TABLE
SELECT line_key, run_id, matched_by FROM billing_line_runs WHERE stored
UNION ALL
SELECT * FROM billing_run_lines_live(run_tag, slack_s) WHERE NOT stored;

-- Per run and billing currency: the estimated cost (runs.cost_usd, USD) next to the billed
-- cost of its lines (billing_run_lines). The gap (billed - estimated, and as % of the
-- estimate) is computed only for lines billed in USD; other currencies are not converted.
CREATE OR REPLACE MACRO run_billing(run_tag, slack_s, stored := false) AS TABLE
WITH billed AS (
    SELECT m.run_id, b.billing_currency,
           sum(CAST(b.billed_cost AS DECIMAL(38, 12)))                                   AS billed_cost,
           sum(CAST(b.effective_cost AS DECIMAL(38, 12)))                                AS effective_cost,
           count(*)                                             AS lines,
           count(*) FILTER (WHERE m.matched_by = 'resource')    AS lines_by_resource,
           min(b.charge_period_start)                           AS billed_from,
           max(coalesce(b.charge_period_end, b.charge_period_start)) AS billed_to
    FROM billing_run_lines(run_tag, slack_s, stored := stored) m JOIN billing_lines b USING (line_key)
    GROUP BY m.run_id, b.billing_currency
)
SELECT r.run_id, r.project, r.team, r.status, r.started_at, r.ended_at, r.instance_type,
       r.cost_usd AS estimated_cost_usd, b.billing_currency, b.billed_cost, b.effective_cost,
       b.lines, b.lines_by_resource, b.billed_from, b.billed_to,
       CASE WHEN b.billing_currency = 'USD' THEN b.billed_cost - r.cost_usd END AS gap_usd,
       CASE WHEN b.billing_currency = 'USD' AND r.cost_usd > 0
            THEN CAST((b.billed_cost - r.cost_usd) * 100 / r.cost_usd AS DOUBLE) END AS gap_pct
FROM billed b JOIN runs r USING (run_id);

-- Which bill lines are GPU spend, by the bill's own fields (metrics/queries.py, metrics/allocation.py):
-- the instance family (AWS product/instanceType, Azure VM size, GCP machine type) is one of
-- `families`; or an Azure virtual machine line names an N-series size in its product name; or the
-- line's description names one of `words` as a whole word (GCP bills attached GPUs as their own
-- SKU, "Nvidia Tesla T4 GPU running in Americas"). Never a substring of an id: SKU ids are random
-- letters ("F9GPUA3E29X6GJVE" is a t2.micro). NULL: not GPU spend; else the rule that said so.
CREATE OR REPLACE MACRO gpu_line_rule(family, service, description, families, words) AS
CASE WHEN list_contains(families, family) THEN 'instance family ' || family
     WHEN lower(coalesce(service, '')) LIKE 'virtual machines%'
          AND regexp_matches(lower(coalesce(description, '')), '\bn[cdv][a-z0-9_]*\s+(v[0-9]+\s+)?series\b')
         THEN 'Azure N-series virtual machine'
     -- one pattern for every word (a regex per word and line cost ~200x as much on a big bill)
     WHEN len(words) > 0
          AND regexp_matches(lower(coalesce(description, '')),
                             '\b(' || array_to_string(list_transform(words, lambda w: regexp_escape(w)), '|') || ')\b')
         THEN 'description names a GPU'
END;

-- The allocation of the bill (docs/allocation.md): every line whose charge period starts in
-- [alloc_start, alloc_end) and that has an effective cost is cut into pieces, each with a bucket
-- (training, serving, idle_gpu, shared, unallocated), the rule that put it there and a weight;
-- a line's pieces share its effective cost in proportion to their weights, rounded so that they
-- add up to the line exactly (cumulative rounding: the last piece takes the remainder; a line of
-- one piece, nearly every line, skips the rounding and takes its cost whole). First rule that
-- applies wins:
--   1. a usage line of a run (billing_run_lines: run tag, else resource id + time overlap): training;
--   2. a usage line of a traced GPU node (resource_name or resource_id is a host with traces in
--      the period; its GPUs are the ones traced in the period):
--      the node's GPU capacity over the charge period (GPUs x seconds) is split into each run's
--      GPU-seconds on it (training), the idle GPU-seconds no run held (idle_gpu) and the rest
--      (busy without a run, untraced time: unallocated);
--   3. a usage line tagged `service_tag`: serving, split between the service's model versions
--      by the cost (else the seconds) of their windows overlapping the charge period;
--   4. other usage: compute (an instance type or a GPU line) is unallocated, the rest (storage,
--      network, other services) shared; a line whose run tag names a run not loaded is unallocated;
--   5. taxes, credits, purchases and adjustments: shared, as themselves.
-- stored := true reads each line's run from billing_line_runs (as billing_run_lines): only when
-- billing_match_settings holds run_tag and slack_s (metrics/allocation.py asks first).
-- bill_allocation_pieces is that with two more columns: the line's provider and line_split (the line
-- is cut into more than one piece); bill_allocation (below) is it without them.
CREATE OR REPLACE MACRO bill_allocation_pieces(alloc_start, alloc_end, run_tag, slack_s, service_tag, families, words,
                                               stored := false) AS TABLE
-- `lines` is not materialised: each reader scans the warehouse's compressed lines again for just the
-- columns it uses (a 1M-line bill: 273 MB materialised, read back 4 times and spilled next to a load's
-- staging, 2.7 -> 1.4 CPU s; 1.6 -> 1.2 unspilled). Only other_pieces and piece_lines read gpu_rule,
-- and they take disjoint lines.
WITH lines AS NOT MATERIALIZED (
    SELECT l.*, epoch(l.charge_period_end - l.charge_period_start) AS line_s,
           -- once per line: its regular expressions cost more than the rest of the allocation
           gpu_line_rule(l.instance_family, l.service_name, l.charge_description, families, words) AS gpu_rule
    FROM billing_costs l
    WHERE l.charge_period_start >= alloc_start AND l.charge_period_start < alloc_end
      AND l.effective_cost IS NOT NULL
), run_lines AS MATERIALIZED (
    SELECT m.line_key, m.run_id, m.matched_by
    FROM billing_run_lines(run_tag, slack_s, stored := stored) m SEMI JOIN lines l USING (line_key)
), hosts AS MATERIALIZED (   -- GPU nodes: the hosts traced in the period, with their GPUs
    SELECT host, count(DISTINCT gpu_index) AS gpus FROM gpu_minutes
    WHERE minute >= alloc_start AND minute < alloc_end GROUP BY host
), usage_lines AS (
    SELECT line_key, resource_name, resource_id, charge_period_start, charge_period_end, line_s FROM lines
    WHERE charge_category = 'usage' AND line_s > 0
), named_hosts AS (   -- equality joins (an OR join would compare every line with every host), with the line's columns
    SELECT l.*, h.host, h.gpus, 1 AS preference FROM usage_lines l JOIN hosts h ON h.host = l.resource_name
    UNION ALL
    SELECT l.*, h.host, h.gpus, 2 FROM usage_lines l JOIN hosts h ON h.host = l.resource_id
), node_lines AS MATERIALIZED (   -- (not joined back to lines: a join with every line cost more than the rule)
    SELECT n.line_key, n.host, n.gpus, n.charge_period_start AS line_start, n.charge_period_end AS line_end,
           n.gpus * n.line_s AS capacity_s
    FROM named_hosts n
    WHERE n.line_key NOT IN (SELECT line_key FROM run_lines)
    QUALIFY row_number() OVER (PARTITION BY n.line_key ORDER BY n.preference, n.host) = 1
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
    SELECT nm.line_key, sum(idle_not_held_s(m.idle_s, h.held_s)) AS weight
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
), other_pieces AS (   -- one piece per line, never split, on no node: the output row is made from the line itself
    SELECT l.line_key,
           CASE WHEN l.charge_category <> 'usage' THEN 'shared'
                WHEN l.tags[run_tag] IS NOT NULL THEN 'unallocated'
                WHEN l.instance_type IS NOT NULL
                     OR l.gpu_rule IS NOT NULL
                    THEN 'unallocated'
                ELSE 'shared' END AS bucket,
           CASE WHEN l.charge_category <> 'usage' THEN l.charge_category
                WHEN l.tags[run_tag] IS NOT NULL THEN 'run tag names a run that is not loaded'
                WHEN l.instance_type IS NOT NULL
                     OR l.gpu_rule IS NOT NULL
                    THEN 'compute matching no run, node or service'
                ELSE 'shared service' END AS rule,
           l.billing_currency, l.effective_cost, l.charge_period_start, l.charge_period_end, l.charge_category,
           l.service_name, l.resource_id, l.resource_name, l.instance_type, l.tags, l.gpu_rule, l.provider
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
), piece_lines AS MATERIALIZED (   -- the lines of those pieces (few): joined with them, not every line
    -- (IN ... OR IN keeps each lookup's hash table on the few keys; a SEMI JOIN was planned on every line)
    SELECT l.* FROM lines l
    WHERE l.line_key IN (SELECT line_key FROM run_lines) OR l.line_key IN (SELECT line_key FROM node_lines)
       OR l.line_key IN (SELECT line_key FROM serving_lines)
), split_lines AS MATERIALIZED (   -- lines cut into more than one piece: the only ones to round
    SELECT line_key FROM pieces GROUP BY line_key HAVING count(*) > 1
), ordered AS (   -- window functions over the split lines only (almost every line is one piece)
    SELECT p.*, l.effective_cost,
           sum(p.weight) OVER (PARTITION BY p.line_key ORDER BY p.bucket, p.rule, p.run_id, p.model_version
                               ROWS UNBOUNDED PRECEDING) AS weight_to_here,
           sum(p.weight) OVER (PARTITION BY p.line_key) AS line_weight,
           row_number() OVER (PARTITION BY p.line_key ORDER BY p.bucket, p.rule, p.run_id, p.model_version) AS piece,
           count(*) OVER (PARTITION BY p.line_key) AS pieces
    FROM pieces p JOIN split_lines s USING (line_key) JOIN piece_lines l USING (line_key)
), cumulative AS (
    SELECT *, CASE WHEN piece = pieces OR line_weight = 0 THEN effective_cost
                   ELSE CAST(effective_cost * CAST(weight_to_here / line_weight AS DECIMAL(18, 15)) AS DECIMAL(38, 12))
              END AS cost_to_here
    FROM ordered
), allocated AS (   -- a split line's pieces with their share; a one-piece line's piece takes the line whole
    SELECT line_key, bucket, rule, run_id, model_version, weight, true AS split,
           cost_to_here - coalesce(lag(cost_to_here) OVER (PARTITION BY line_key ORDER BY piece), 0) AS piece_cost
    FROM cumulative
    UNION ALL
    SELECT line_key, bucket, rule, run_id, model_version, weight, false, NULL
    FROM pieces p ANTI JOIN split_lines s USING (line_key)
)
SELECT a.line_key, l.billing_currency, a.bucket, a.rule, a.run_id, n.host, l.tags[service_tag] AS service,
       a.model_version,
       CASE WHEN a.split THEN a.piece_cost ELSE l.effective_cost END AS effective_cost,
       CASE WHEN n.line_key IS NOT NULL THEN a.weight / 3600.0 END AS gpu_hours,
       l.effective_cost AS line_effective_cost, l.charge_period_start, l.charge_period_end,
       l.charge_category, l.service_name, l.resource_id, l.resource_name, l.instance_type, l.tags,
       l.gpu_rule, l.provider, a.split AS line_split
FROM allocated a JOIN piece_lines l USING (line_key) LEFT JOIN node_lines n USING (line_key)
UNION ALL   -- nearly every line: not joined back to `lines` (a join of every line cost ~1/3 of the allocation)
SELECT o.line_key, o.billing_currency, o.bucket, o.rule, NULL, NULL, o.tags[service_tag], NULL, o.effective_cost, NULL,
       o.effective_cost, o.charge_period_start, o.charge_period_end, o.charge_category, o.service_name, o.resource_id,
       o.resource_name, o.instance_type, o.tags, o.gpu_rule, o.provider, false
FROM other_pieces o;

CREATE OR REPLACE MACRO bill_allocation(alloc_start, alloc_end, run_tag, slack_s, service_tag, families, words,
                                        stored := false) AS TABLE
SELECT * EXCLUDE (provider, line_split)
FROM bill_allocation_pieces(alloc_start, alloc_end, run_tag, slack_s, service_tag, families, words, stored := stored);

-- The allocation's pieces of [alloc_start, alloc_end) added up per UTC day of the charge and
-- line group: everything the pages split by (bucket, rule, run, node, service and model version,
-- the line's tags, provider, category, service name, instance type) and per currency, with
-- `lines` (bill lines in the group). A line cut into more than one piece, and every GPU node's
-- line (metrics/idle.py prices a node's idle by its own line), keeps its line_key (one row per
-- piece, lines = 1), so that `sum(lines) FILTER (WHERE line_key IS NULL) +
-- count(DISTINCT line_key)` counts any set of rows' lines exactly; other rows have none. Sums
-- of the pieces' DECIMAL effective cost are exact, so any figure summed from these rows equals
-- the one summed from the pieces.
CREATE OR REPLACE MACRO bill_allocation_days_of(alloc_start, alloc_end, run_tag, slack_s, service_tag, families, words,
                                                stored := false) AS TABLE
SELECT utc_day(charge_period_start) AS day, billing_currency, bucket, rule, run_id, host, service, model_version,
       tags, provider, charge_category, service_name, instance_type,
       CASE WHEN line_split OR host IS NOT NULL THEN line_key END AS line_key,
       sum(effective_cost) AS effective_cost, sum(gpu_hours) AS gpu_hours, count(*) AS lines
FROM bill_allocation_pieces(alloc_start, alloc_end, run_tag, slack_s, service_tag, families, words, stored := stored)
GROUP BY ALL;

-- bill_allocation_days_of each calendar month with bill lines (month = its first day), for the
-- settings in bill_allocation_settings, stored after every load or unload of bill lines, runs,
-- serving windows or GPU samples by ingest/derived/derived.py (the months whose inputs changed).
CREATE TABLE IF NOT EXISTS bill_allocation_days (
    month             DATE NOT NULL,
    day               DATE NOT NULL,
    billing_currency  VARCHAR NOT NULL,
    bucket            VARCHAR NOT NULL,
    rule              VARCHAR NOT NULL,
    run_id            VARCHAR,
    host              VARCHAR,
    service           VARCHAR,
    model_version     VARCHAR,
    tags              MAP(VARCHAR, VARCHAR),
    provider          VARCHAR,
    charge_category   VARCHAR,
    service_name      VARCHAR,
    instance_type     VARCHAR,
    line_key          VARCHAR,
    effective_cost    DECIMAL(38, 12),
    gpu_hours         DOUBLE,
    lines             BIGINT NOT NULL
);

-- The allocation settings bill_allocation_days was computed with (one row; none: not stored).
CREATE TABLE IF NOT EXISTS bill_allocation_settings (
    run_id_tag     VARCHAR NOT NULL,
    match_slack_s  DOUBLE NOT NULL,
    service_tag    VARCHAR NOT NULL,
    gpu_families   VARCHAR[] NOT NULL,
    gpu_words      VARCHAR[] NOT NULL,
    computed_at    TIMESTAMPTZ NOT NULL
);

-- What pages read: the stored days of the month starting at alloc_start when stored_days (only
-- when [alloc_start, alloc_end) is that calendar month and bill_allocation_settings holds these
-- settings: metrics/allocation.py asks first), else bill_allocation_days_of computed now. A
-- constant flag, so that the other branch is never computed.
CREATE OR REPLACE MACRO bill_allocation_days(alloc_start, alloc_end, run_tag, slack_s, service_tag, families, words,
                                             stored := false, stored_days := false) AS TABLE
SELECT * EXCLUDE (month) FROM bill_allocation_days WHERE stored_days AND month = utc_day(alloc_start)
UNION ALL
SELECT * FROM bill_allocation_days_of(alloc_start, alloc_end, run_tag, slack_s, service_tag, families, words,
                                      stored := stored)
WHERE NOT stored_days;

-- Alerts (outputs/alerts.py): one row per rule, subject, threshold and period that fired. A row is
-- written once (OK -> alarm), resolved when its condition no longer holds, and never fires again
-- in its period; delivery goes pending -> delivered (or snoozed), and a failed post stays pending
-- for the next check.
CREATE TABLE IF NOT EXISTS alerts (
    alert_key      VARCHAR PRIMARY KEY,
    rule           VARCHAR NOT NULL,
    subject        VARCHAR NOT NULL,
    threshold      VARCHAR NOT NULL,
    period_start   DATE NOT NULL,
    channel        VARCHAR,
    status         VARCHAR NOT NULL,
    delivery       VARCHAR NOT NULL,
    title          VARCHAR NOT NULL,
    message        VARCHAR NOT NULL,
    fired_at       TIMESTAMPTZ NOT NULL,
    resolved_at    TIMESTAMPTZ,
    delivered_at   TIMESTAMPTZ,
    attempts       INTEGER NOT NULL,
    last_error     VARCHAR
);

-- Every post to Slack, alert or test message (alert_key NULL), and what Slack answered.
CREATE TABLE IF NOT EXISTS alert_deliveries (
    attempted_at  TIMESTAMPTZ NOT NULL,
    alert_key     VARCHAR,
    channel       VARCHAR,
    ok            BOOLEAN NOT NULL,
    http_status   INTEGER,
    error         VARCHAR
);

-- Snoozed alert subjects: alerts of this rule and subject are not posted until `until`.
CREATE TABLE IF NOT EXISTS alert_snoozes (
    rule        VARCHAR NOT NULL,
    subject     VARCHAR NOT NULL,
    until       TIMESTAMPTZ NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (rule, subject)
);

-- The decisions log of the monthly efficiency retrospective: notes and decisions written on the
-- Retrospective page (ingest/engine/warehouse.py add_decision), shown in its report. Not a load: rows
-- are only ever added.
CREATE SEQUENCE IF NOT EXISTS decision_ids START 1;

CREATE TABLE IF NOT EXISTS decisions (
    decision_id  BIGINT PRIMARY KEY DEFAULT nextval('decision_ids'),
    month        DATE NOT NULL,
    kind         VARCHAR NOT NULL CHECK (kind IN ('decision', 'note')),
    text         VARCHAR NOT NULL,
    author       VARCHAR,
    written_at   TIMESTAMPTZ NOT NULL
);
