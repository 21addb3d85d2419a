-- The warehouse schema. Idempotent: run on every first connection of a process.
-- Units are in column names; every time is TIMESTAMPTZ in UTC; money is DECIMAL.
-- docs/schema.md explains each table and column.

CREATE SEQUENCE IF NOT EXISTS load_ids START 1;

CREATE TABLE IF NOT EXISTS loads (
    load_id        BIGINT PRIMARY KEY DEFAULT nextval('load_ids'),
    path           VARCHAR NOT NULL,
    sha256         VARCHAR NOT NULL,
    kind           VARCHAR NOT NULL,
    rows_loaded    BIGINT NOT NULL,
    rows_rejected  BIGINT NOT NULL,
    loaded_at      TIMESTAMPTZ NOT NULL,
    UNIQUE (sha256, kind)
);

CREATE TABLE IF NOT EXISTS rejects (
    load_id  BIGINT NOT NULL,
    path     VARCHAR NOT NULL,
    line     BIGINT NOT NULL,
    reason   VARCHAR NOT NULL,
    raw      VARCHAR
);

CREATE TABLE IF NOT EXISTS runs (
    run_id                       VARCHAR PRIMARY KEY,
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
    value      DOUBLE NOT NULL,
    PRIMARY KEY (run_id, seq)
);

-- Derived per-run figures; pages and tests read this view, never recompute it.
CREATE OR REPLACE VIEW run_costs AS
SELECT
    r.*,
    r.duration_s / 3600.0                                   AS duration_h,
    CASE WHEN r.examples > 0
         THEN CAST(r.cost_usd * 1000 / r.examples AS DECIMAL(38, 12)) END
                                                            AS cost_per_1k_examples_usd,
    CASE WHEN r.duration_s > 0 AND r.gpu_count > 0
         THEN r.duration_s / 3600.0 * r.gpu_count END       AS gpu_hours
FROM runs r;

-- Serving metric windows (ingest/serving.py). A window loaded again replaces the earlier one:
-- window_key = service|model_version|host|window_start (warehouse.REPLACE_BY).
CREATE TABLE IF NOT EXISTS serving_windows (
    window_key          VARCHAR PRIMARY KEY,
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

-- Per-window serving figures. A group's figure is a ratio of sums (app/queries.py
-- SERVING_FIGURES): cost over success_priced, energy over success_metered, so a window without
-- a cost or an energy drops out of numerator and denominator alike instead of counting as free.
CREATE OR REPLACE VIEW serving_costs AS
SELECT
    w.*,
    (w.window_start AT TIME ZONE 'UTC')::DATE                  AS day,
    w.window_s / 3600.0                                         AS window_h,
    w.energy_kwh * 1000                                         AS energy_wh,
    CASE WHEN w.cost_usd IS NOT NULL THEN w.requests_success END   AS success_priced,
    CASE WHEN w.cost_usd IS NOT NULL THEN w.requests_total END     AS requests_priced,
    CASE WHEN w.energy_kwh IS NOT NULL THEN w.requests_success END AS success_metered,
    CASE WHEN w.energy_kwh IS NOT NULL THEN w.requests_total END   AS requests_metered,
    CASE WHEN w.requests_error IS NOT NULL THEN w.requests_total END AS requests_error_counted,
    CASE WHEN w.requests_success > 0
         THEN CAST(w.cost_usd * 1000 / w.requests_success AS DECIMAL(38, 12)) END
                                                                AS cost_per_1k_success_usd,
    CASE WHEN w.requests_total > 0
         THEN CAST(w.cost_usd * 1000 / w.requests_total AS DECIMAL(38, 12)) END
                                                                AS cost_per_1k_requests_usd,
    CASE WHEN w.requests_success > 0 THEN w.energy_kwh * 1e6 / w.requests_success END
                                                                AS energy_wh_per_1k_success,
    CASE WHEN w.requests_total > 0 THEN w.energy_kwh * 1e6 / w.requests_total END
                                                                AS energy_wh_per_1k_requests,
    CASE WHEN w.requests_total > 0 THEN w.requests_error / w.requests_total END
                                                                AS error_rate
FROM serving_windows w;
