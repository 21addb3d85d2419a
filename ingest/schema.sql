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
