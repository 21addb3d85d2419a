"""Which catalog list a run's estimated price came from (the settings' [prices.source] and
[prices.as_of]), for the runs priced from the catalog."""
from __future__ import annotations

import pandas as pd

from ingest.settings.sections import Prices

CATALOG_SOURCES = ("catalog", "gpu_traces_catalog")


def price_source(runs: pd.DataFrame, prices: Prices) -> pd.Series:
    """Per training_runs row: 'source, as of date' of the catalog price it used (cost_source
    catalog: the GPU-hour table for a run that names its GPUs, else the instance table when it
    lists the instance type, else the GPU-hour table, as the run definition's HourlyCost.per
    (ingest/formats/runs/run_summary.py) chooses;
    gpu_traces_catalog: the GPU-hour table), else None. Looked up once per distinct hardware."""
    keys = ["cost_source", "instance_type", "gpu_type", "names_gpus"]
    priced = runs.loc[runs["cost_source"].isin(CATALOG_SOURCES), keys].astype(object)
    if priced.empty:
        return pd.Series([None] * len(runs), index=runs.index, dtype=object)
    distinct = priced.drop_duplicates()

    def one(row) -> str | None:
        gpu = None if pd.isna(row.gpu_type) else row.gpu_type
        instance = None if pd.isna(row.instance_type) else row.instance_type
        by_gpu = prices.gpu(gpu) is not None
        if row.cost_source == "gpu_traces_catalog" or (bool(row.names_gpus) and by_gpu) \
                or prices.instance(instance) is None:
            return prices.source_of("gpu_usd_per_hour", gpu)
        return prices.source_of("instance_usd_per_hour", instance)

    distinct = distinct.assign(price_source=[one(row) for row in distinct.itertuples()])
    found = priced.merge(distinct, on=keys, how="left").set_axis(priced.index)["price_source"]
    result = pd.Series([None] * len(runs), index=runs.index, dtype=object)
    result.loc[found.index] = found.to_numpy()
    return result
