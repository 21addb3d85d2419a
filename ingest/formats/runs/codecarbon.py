"""CodeCarbon emissions.csv, every schema generation, as runs with measured energy and emissions.

CodeCarbon writes one row per tracked run when it stops: `timestamp` is the stop time
(local time without offset: read in --tz), `duration` is seconds, `energy_consumed` kWh
and `emissions` kg CO2e. The oldest schema has no run_id; rows without one get a stable
id derived from project, timestamp and duration as written, so re-loading never duplicates them.

The format is the definition below; ingest/engine reads it (batch_sql: the SQL pass, reader: the
lines SQL cannot read, such as quoted fields, other number spellings, rows without run_id and runs
the price catalog prices). What it says besides the fields: the run starts at the stop time -
duration (Hours), a known GPU model is priced from the catalog x gpu_count x hours (HourlyCost),
cloud_region is the region of a run on_cloud (Prefer), TAG_COLUMNS are kept as tags (Tags), and a
run rewritten later in the file keeps its last row (Key). docs/formats/codecarbon.md describes it.
"""
from __future__ import annotations

from functools import partial

from ingest.engine import batch_sql, reader
from ingest.engine.definition import (COUNT, MONEY, NUMBER, TEXT, TEXT_MAP, TIME, Default, Definition, Detect, Field,
                                      HashedId, Key, Required)
from ingest.engine.run_rules import HourlyCost, Hours, Prefer, Tags
from ingest.formats.runs.run_summary import MAX_GPUS, MAX_RUN_HOURS, RUN_TOTALS

KIND = "codecarbon"
LOCAL_TIME = True  # writes local times without a zone: loader warns when no --tz was given
TABLES = ("runs", "run_evals")
REQUIRED = ("timestamp", "project_name", "duration", "emissions", "energy_consumed")
TAG_COLUMNS = ("experiment_id", "country_iso_code", "country_name", "cpu_model", "os",
               "tracking_mode", "codecarbon_version", "pue", "on_cloud", "cloud_provider")


def _incomplete(column: str) -> tuple:
    """The column read as text first, so an empty one names the reason before any value is typed
    (a later Field of the same column decides how SQL spells it: the typed one must come after)."""
    return (Field(f"{column}_written", TEXT, names=(column,), stored=False),
            Required(f"{column}_written", f"{column} is empty: CodeCarbon wrote an incomplete row"))


CODECARBON = Definition(
    kind=KIND,
    table="runs",
    detect=Detect(all_of=("timestamp", "project_name", "energy_consumed"), any_of=("timestamp",)),
    header_requires=("timestamp_written", "project", "duration_written", "emissions_written", "energy_consumed_written"),
    header_reason="not a CodeCarbon header",
    steps=(  # in order: the first that fails names the reason
        *_incomplete("timestamp"), *_incomplete("energy_consumed"), *_incomplete("emissions"), *_incomplete("duration"),
        Field("duration_hours", NUMBER, names=("duration",), unit="s read as h", divide_by=3600,
              limit=MAX_RUN_HOURS * 3600, stored=False),
        Field("ended_at", TIME, names=("timestamp",)),  # the stop time (local time: --tz)
        Field("started_at", TIME, names=("started_at",)),  # CodeCarbon never writes it: from the end - duration
        Hours("started_at", "ended_at", "duration_hours", seconds="duration_s", tolerance=0.01, differs=""),
        Field("gpu_count", COUNT, unit="GPUs", maximum=MAX_GPUS),
        Field("gpu_type", TEXT, names=("gpu_model",)),
        Field("price_per_hour_usd", MONEY, names=("price_per_hour_usd",), unit="USD/h"),
        Field("cost_given_usd", MONEY, names=("cost_given_usd",), unit="USD"),
        HourlyCost("cost_usd", source="cost_source", given="cost_given_usd", price="price_per_hour_usd",
                   hours="duration_hours", per=(("gpu", "gpu_type", "gpu_count", ()),),
                   differs="", open="", unpriced=""),  # the catalog's GPU price x gpu_count x hours, else no cost
        Field("energy_kwh", NUMBER, names=("energy_consumed",), unit="kWh"),
        Field("emissions_kg", NUMBER, names=("emissions",), unit="kg CO2e"),
        Field("val_metric_name", TEXT, names=("val_metric_name",)),
        Default("val_metric_name", "val_metric"),
        Field("metric_goal", TEXT, names=("metric_goal",)),
        Default("metric_goal", "max"),
        Field("run_id", TEXT),
        Field("project", TEXT, names=("project_name",)),
        Field("region", TEXT, names=("region", "country_name")),
        Field("cloud_region", TEXT, stored=False),
        Field("on_cloud", TEXT, stored=False),
        Prefer("region", of="cloud_region", when="on_cloud", equals="Y"),
        *(Field(f"tag_{name}", TEXT, names=(name,), stored=False) for name in TAG_COLUMNS),
        Field("tags", TEXT_MAP, names=("tags",)),
        Tags("tags", tuple((name, f"tag_{name}") for name in TAG_COLUMNS)),
        # the oldest schema has no run_id: the id the old reader derived (the values as written)
        HashedId("run_id", ("project", "timestamp_written", "duration_written"), prefix="codecarbon-", raw=True,
                 stand_ins=("unknown",)),
    ),
    key=Key("run_id", ("run_id",)),
    csv_only=True,
    empty_reason="not a CodeCarbon header: missing " + ", ".join(REQUIRED),
    flags="flags",
    totals=RUN_TOTALS,
)


def sniff(name: str, head: str) -> bool:
    """A CSV whose header carries CodeCarbon's own column names."""
    header = head.lstrip("\ufeff").split("\n", 1)[0]
    return all(column in header for column in ("timestamp", "project_name", "energy_consumed"))


parse = partial(reader.parse, CODECARBON)     # (lines, ctx, prices=None) -> Parsed, line by line
totals = partial(reader.totals, CODECARBON)   # (parsed) -> the --json figures
stage = partial(batch_sql.stage, CODECARBON)  # (src, con, ctx, early=None) -> Staged: the SQL pass
read_early = partial(batch_sql.read_early, CODECARBON)  # (src, head) -> its first batch read on a thread, or None
