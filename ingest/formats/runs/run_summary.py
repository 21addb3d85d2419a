"""Training-run summaries as one definition read by the generic engine (ingest/engine): JSON lines
(one run per line), or a file that is one JSON value (an array of runs, or run_meta.json: one run
over many lines).

The engine's SQL pass (batch_sql.py) loads the plain lines; the generic reader (reader.py) reads
the rest with the same definition and names the reason a line is refused. What the definition
says, besides the fields: the run's span in hours (Hours: start from end - duration_hours, a
duration_hours that disagrees with the timestamps is a flag), the cost (HourlyCost: given, price x
hours to the micro-dollar, or the catalog's price, cost_source given / derived / catalog; a run
without a cost is flagged with why), examples and energy from rates (FromRate), the seed's
spellings and measures and fields outside the vocabulary kept as tags (Extras), the run_id of a
run that gives none hashed from its values as written (HashedId), eval points (Items).
docs/formats/runs.md describes the format.
"""
from __future__ import annotations

from functools import partial

from ingest.engine import batch_sql, reader
from ingest.engine.definition import (COUNT, COUNT_LIST, MONEY, NUMBER, TEXT, TEXT_LIST, TEXT_MAP, TIME, CountOf, Default, Definition, Detect, Field,
                                      HashedId, Items, Key, OneOf, Required, Since, Total)
from ingest.engine.run_rules import Extras, FromRate, HourlyCost, Hours
from ingest.engine.values import BIGINT_MAX

KIND = "runs"
TABLES = ("runs", "run_evals")
MAX_GPUS = 1_000_000
STATUSES = (("completed", "completed"), ("failed", "failed"), ("preempted", "preempted"), ("running", "running"),
            ("success", "completed"), ("succeeded", "completed"), ("finished", "completed"),
            ("error", "failed"), ("crashed", "failed"))
MIN_GOAL_WORDS = ("loss", "error", "wer", "cer", "perplexity", "mae", "mse", "rmse", "latency")  # a smaller value is better
MAX_RUN_HOURS = 10 * 366 * 24  # a run of more than ten years is a unit mistake (1e12 s)
# Fields the seed documents name that have no column yet: read as numbers in their unit and kept as
# tags under the name that says the unit (a run's tags are shown and exported with the run).
MEASURES = (("tokens_per_sec", "throughput_tokens_per_s"), ("gpu_utilization_percent", "gpu_util_pct"),
            ("avg_gpu_util", "gpu_util_pct"), ("avg_cpu_util", "cpu_util_pct"), ("avg_mem_util", "mem_util_pct"),
            ("average_power_watts", "average_power_w"), ("batch_size", "batch_size"), ("epochs", "epochs"),
            ("num_epochs", "epochs"),
            # figures the seed derives, kept as logged (the product derives its own from the run)
            ("cost_per_1k_examples", "logged_cost_per_1k_examples_usd"),
            ("energy_kwh_per_1k_examples", "logged_energy_kwh_per_1k_examples"))
GOALS = (("max", "max"), ("maximize", "max"), ("higher", "max"), ("min", "min"), ("minimize", "min"), ("lower", "min"))

# What a load of runs reports, whatever the file (CodeCarbon's too): runs, their cost and energy.
RUN_TOTALS = (
    Total("runs", "rows"),
    Total("cost_usd_total", "money", "cost_usd"),
    Total("runs_with_cost", "present", "cost_usd"),
    Total("energy_kwh_total", "float", "energy_kwh"),
    Total("runs_with_energy", "present", "energy_kwh"),
)

RUNS = Definition(
    kind=KIND,
    table="runs",
    detect=Detect(all_of=(), any_of=("run_id", "start_time", "price_per_hour_usd", "estimated_cost_usd", "val_metric")),
    header_requires=("run_id", "started_at"),  # a CSV of runs: not a format of its own (the reader refuses it)
    header_reason="not a run-summary header",
    steps=(  # in the order the old reader checked them: the first that fails names the reason
        Extras("tags", measures=MEASURES, agree=("price_per_hour_usd", "val_metric"),
               warning="fields not recognised, kept as the runs' tags: {names}"),
        Field("started_at", TIME, names=("start_time",)),
        Field("ended_at", TIME, names=("end_time",)),
        Field("duration_hours", NUMBER, unit="h", limit=MAX_RUN_HOURS, stored=False),
        Hours("started_at", "ended_at", "duration_hours", seconds="duration_s", tolerance=0.01,
              differs="duration_hours {hours:g} differs from end_time - start_time ({measured:.4g} h); used the timestamps"),
        Required("started_at", "no start_time (and no end_time with duration_hours to derive it)"),
        Field("price_per_hour_usd", MONEY, names=("price_per_hour_usd", "price_per_hour"), unit="USD/h"),
        Field("cost_given_usd", MONEY, names=("estimated_cost_usd",), unit="USD"),
        Field("gpu_uuids", TEXT_LIST, names=("gpu_uuids", "gpu_uuid"), keep_empty=True),
        Field("gpu_indices", COUNT_LIST, names=("gpu_indices", "gpu_index"), maximum=MAX_GPUS, keep_empty=True),
        Field("gpu_count", COUNT, unit="GPUs", maximum=MAX_GPUS),
        CountOf("gpu_count", items="gpu_uuids"),
        CountOf("gpu_count", items="gpu_indices"),
        Field("instance_type", TEXT),
        Field("gpu_type", TEXT),
        HourlyCost("cost_usd", source="cost_source", given="cost_given_usd", price="price_per_hour_usd", hours="duration_hours",
                   # a run that names its GPUs (a share of a node) pays the GPU price x its GPUs; else its instance's
                   per=(("gpu", "gpu_type", "gpu_count", ("gpu_uuids", "gpu_indices")), ("instance", "instance_type", "", ()),
                        ("gpu", "gpu_type", "gpu_count", ())),
                   differs="estimated_cost_usd {given} differs from duration x price = {expected}",
                   open="no cost: the run has no end_time or duration_hours yet",
                   unpriced="no cost: neither estimated_cost_usd nor price_per_hour_usd is given, and the price catalog "
                            "has no price for {names}",
                   named=("instance_type", "gpu_type"), unnamed="a run that names no instance_type or gpu_type",
                   too_large="duration x price", catalog_too_large="catalog price x duration"),
        Field("energy_kwh", NUMBER, unit="kWh"),
        FromRate("energy_kwh", rate="average_power_w", hours="duration_hours", divide=1000,  # W x h / 1000
                 flag="energy_kwh derived: average_power_watts {rate:g} W x {hours:.4g} h"),
        Field("throughput_examples_per_s", NUMBER, names=("throughput_examples_per_sec",), unit="examples/s"),
        Field("examples", COUNT, unit="examples"),
        FromRate("examples", rate="throughput_examples_per_s", hours="duration_hours", multiply=3600, whole=True,
                 source="examples_source",
                 too_large="throughput_examples_per_sec {rate:g} x {hours:g} h is more examples than the warehouse "
                           f"holds (at most {BIGINT_MAX:,})"),
        Field("val_metric_name", TEXT),
        Default("val_metric_name", "val_metric"),
        Field("run_id", TEXT),
        Field("project", TEXT),
        Field("team", TEXT),
        Field("owner", TEXT),
        Field("model", TEXT),
        Field("status", TEXT),
        OneOf("status", STATUSES, "status {value!r} is not one of completed, failed, preempted, running"),
        Field("region", TEXT),
        Field("host", TEXT),
        HashedId("run_id", ("project", "host", "instance_type", "started_at"), stand_ins=("unknown",), raw=True),
        Field("val_metric", NUMBER, names=("val_metric", "best_val_metric"), minimum=None),
        Field("metric_goal", TEXT, names=("goal",)),
        OneOf("metric_goal", GOALS, "goal {value!r} must be max or min"),
        Default("metric_goal", "max", of="val_metric_name", words=MIN_GOAL_WORDS, then="min"),
        Field("target_metric", NUMBER, minimum=None),
        Field("emissions_kg", NUMBER, unit="kg CO2e"),
        Field("tags", TEXT_MAP),
        Items("eval_history", "run_evals", parent="run_id", seq="seq",
              not_list="eval_history must be a list of {elapsed_s or time, step, value} objects",
              steps=(Field("value", NUMBER, minimum=None),
                     Required("value", "{item} has no value"),
                     Field("elapsed_s", NUMBER, unit="s"),
                     Field("time", TIME, stored=False),
                     Since("elapsed_s", "time", "started_at", "{item} is before the run started"),
                     Field("step", COUNT, minimum=None))),
    ),
    key=Key("run_id", ("run_id",)),
    list_separators=(",",),
    flags="flags",
    whole_document=True,
    totals=RUN_TOTALS,
)


def sniff(name: str, head: str) -> bool:
    """A JSON text that names a run-summary field."""
    return head.lstrip().startswith(("{", "[")) and any(f'"{key}"' in head for key in RUNS.detect.any_of)


parse = partial(reader.parse, RUNS)     # (lines, ctx, prices=None) -> Parsed, line by line
totals = partial(reader.totals, RUNS)   # (parsed) -> the --json figures
stage = partial(batch_sql.stage, RUNS)  # (src, con, ctx, early=None) -> Staged: the SQL pass
read_early = partial(batch_sql.read_early, RUNS)  # (src, head) -> its first batch read on a thread, or None
