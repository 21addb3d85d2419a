"""The last fallback for an imported run's cost: the GPU-hours its hosts' traces show it held
(view run_gpus, stored per minute in run_gpu_time) x the price catalog's GPU-hour price of the GPU
model the traces name. `cost_source` `gpu_traces_catalog`: an estimate, labelled as one, never a
billed figure (the bill's share of a traced node is the allocation's, metrics/allocation.py).

It is derived in the warehouse, not at import: derived.refresh_run_energy/update_run_energy call refresh() after
every load of runs or GPU samples (and `mlcost rollup`, and an unload), so traces loaded after the
run price it, and unloading them takes the estimate away again. Only runs imported from a
tracker or Slurm (KINDS) that carry no other cost are priced so, once they have ended.
"""
from __future__ import annotations

import duckdb

from ingest.settings import config

SOURCE = "gpu_traces_catalog"
KINDS = ["mlflow", "wandb", "slurm"]
PRICED_FLAG = "cost estimated from its hosts' GPU traces"
UNPRICED_FLAG = "no cost from GPU traces: the catalog has no GPU-hour price for"
NO_COST_FLAG = "no cost: no cost, price or catalog price for it, and no priced GPU traces of its hosts over its run"


def refresh(con: duckdb.DuckDBPyConnection) -> int:
    """Price every ended imported run without a cost from its traced GPU-hours, inside the
    caller's transaction (the earlier such estimates are taken back first); returns the runs priced.
    Settings that cannot be read price nothing."""
    if not con.execute("SELECT EXISTS (SELECT 1 FROM runs WHERE list_contains(?, source_kind))",
                       [KINDS]).fetchone()[0]:
        return 0  # no imported runs: nothing priced from traces, nothing to take back
    con.execute("""
        UPDATE runs SET cost_usd = NULL, price_per_hour_usd = NULL, cost_source = NULL,
               flags = list_concat(list_filter(coalesce(flags, []), lambda f: NOT starts_with(f, $priced)),
                                   [$no_cost])
        WHERE cost_source = $source
    """, {"priced": PRICED_FLAG, "no_cost": NO_COST_FLAG, "source": SOURCE})
    con.execute("""
        UPDATE runs SET flags = list_filter(flags, lambda f: NOT starts_with(f, $unpriced))
        WHERE len(list_filter(flags, lambda f: starts_with(f, $unpriced))) > 0
    """, {"unpriced": UNPRICED_FLAG})
    try:
        prices = config.load().prices
    except config.ConfigError:
        return 0
    # GPU-hours per run and GPU model: the run's (share-weighted) seconds in the traced minutes
    con.execute("""
        CREATE OR REPLACE TEMP TABLE traced_gpu_hours AS
        SELECT t.run_id, m.gpu_name, sum(t.run_s) / 3600.0 AS gpu_hours,
               string_agg(DISTINCT t.host, ', ' ORDER BY t.host) AS hosts
        FROM run_gpu_time t JOIN gpu_minutes m USING (host, gpu_index, minute)
        JOIN runs r USING (run_id)
        WHERE r.cost_usd IS NULL AND r.cost_source IS NULL AND r.ended_at IS NOT NULL
          AND list_contains($kinds, r.source_kind)
        GROUP BY ALL HAVING sum(t.run_s) > 0
    """, {"kinds": KINDS})
    names = [name for (name,) in con.execute(
        "SELECT DISTINCT gpu_name FROM traced_gpu_hours WHERE gpu_name IS NOT NULL").fetchall()]
    catalog = {name: prices.gpu(name) for name in names}
    known = [name for name, price in catalog.items() if price is not None]
    con.execute("""
        CREATE OR REPLACE TEMP TABLE traced_costs AS
        WITH priced AS (
            SELECT h.*, CAST(p.price AS DECIMAL(38, 12)) AS price, p.price AS price_text
            FROM traced_gpu_hours h
            LEFT JOIN (SELECT unnest($names::VARCHAR[]) AS gpu_name, unnest($prices::VARCHAR[]) AS price) p
              USING (gpu_name)
        )
        SELECT run_id, bool_and(price IS NOT NULL) AS priced,
               sum(round(CAST(gpu_hours AS DECIMAL(38, 12)) * price, 6)) AS cost_usd,
               string_agg(printf('%.4f GPU-hours of %s on %s x %s USD per GPU-hour', gpu_hours,
                                 coalesce(gpu_name, '(unnamed GPU)'), hosts, price_text), '; '
                          ORDER BY gpu_name) AS detail,
               string_agg(DISTINCT coalesce(gpu_name, '(unnamed GPU)'), ', ') FILTER (WHERE price IS NULL)
                   AS unpriced
        FROM priced GROUP BY run_id
    """, {"names": known, "prices": [str(catalog[name]) for name in known]})
    priced = con.execute("""
        UPDATE runs SET cost_usd = c.cost_usd, cost_source = $source,
               flags = list_concat(list_filter(coalesce(runs.flags, []), lambda f: NOT starts_with(f, 'no cost')),
                                   [$priced_flag || ' (an estimate from the price catalog, not billed): ' || c.detail])
        FROM traced_costs c WHERE runs.run_id = c.run_id AND c.priced
    """, {"source": SOURCE, "priced_flag": PRICED_FLAG}).fetchone()[0]
    con.execute("""
        UPDATE runs SET flags = list_concat(coalesce(runs.flags, []), [$unpriced_flag || ' ' || c.unpriced])
        FROM traced_costs c WHERE runs.run_id = c.run_id AND NOT c.priced
    """, {"unpriced_flag": UNPRICED_FLAG})
    con.execute("DROP TABLE traced_gpu_hours")
    con.execute("DROP TABLE traced_costs")
    return priced
