"""A run as experiment trackers keep it (MLflow, W&B), mapped to the run-summary vocabulary that
ingest/formats/runs/run_record.py validates, so tracked runs are checked and derived like run files.

Cost: a logged `cost_usd` / `estimated_cost_usd` (param, tag or metric) is the run's cost; else a
logged `price_per_hour_usd` x duration; else the price catalog's list price of the instance type
(or GPU type x GPU count) x duration, labelled `catalog` (an estimate); else unknown, flagged.
Energy: a logged `energy_kwh`, CodeCarbon's `energy_consumed` (kWh) or Zeus's energy in joules;
emissions: `emissions_kg` or CodeCarbon's `emissions` (kg).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal

from ingest.engine.contract import BadValue, ParseContext, Parsed, Reject
from ingest.formats.runs.run_record import build_run, collect, to_parsed
from ingest.settings import config

STATUSES = {"FINISHED": "completed", "FAILED": "failed", "KILLED": "failed", "RUNNING": "running",
            "SCHEDULED": "running", "finished": "completed", "failed": "failed", "crashed": "failed",
            "killed": "failed", "running": "running", "preempted": "preempted", "preempting": "preempted"}
COST_KEYS = ("cost_usd", "estimated_cost_usd")
PRICE_KEYS = ("price_per_hour_usd",)
ENERGY_KWH_KEYS = ("energy_kwh", "energy_consumed", "codecarbon.energy_consumed", "codecarbon/energy_consumed")
ENERGY_J_KEYS = ("zeus_energy_j", "zeus.energy_j", "zeus/energy_j", "energy_j")
EMISSIONS_KEYS = ("emissions_kg", "emissions", "codecarbon.emissions", "codecarbon/emissions")
FIELD_KEYS = {  # run-summary field -> keys looked up in tags, then params
    "project": ("project",), "team": ("team",), "owner": ("owner", "mlflow.user", "user"),
    "model": ("model", "model_name"), "region": ("region",), "host": ("host", "hostname"),
    "instance_type": ("instance_type",), "gpu_type": ("gpu_type",), "gpu_count": ("gpu_count", "num_gpus"),
    "examples": ("examples",), "target_metric": ("target_metric",), "goal": ("mlcost.goal", "goal"),
    # which GPUs: joins the run to its host's GPU traces (measured energy, idle time)
    "gpu_uuids": ("gpu_uuids",), "gpu_indices": ("gpu_indices", "CUDA_VISIBLE_DEVICES", "cuda_visible_devices"),
}
VAL_METRIC_TAG = "mlcost.val_metric"
VAL_PATTERN = re.compile(r"^(val|valid|validation|eval|test)([_/.\-]|$)", re.IGNORECASE)


@dataclass
class TrackedRun:
    """One run as a tracker holds it; times are epoch milliseconds, history (step, time ms, value)."""

    run_id: str
    name: str | None
    experiment: str | None
    status: str | None
    start_ms: int | None
    end_ms: int | None
    params: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)  # latest value of each
    val_metric: str | None = None
    history: list[tuple[int | None, int | None, float]] = field(default_factory=list)
    gpu_type: str | None = None
    gpu_count: int | None = None
    runtime_s: float | None = None
    gpu_uuids: list[str] | None = None
    problem: str | None = None  # what made the run unreadable at its source (a broken metric line)


def val_metric_name(run: TrackedRun) -> str | None:
    """The validation metric: the tag mlcost.val_metric, else the param val_metric_name, else the
    first logged metric named val*/valid*/eval*/test* (alphabetically)."""
    named = run.tags.get(VAL_METRIC_TAG) or run.params.get("val_metric_name")
    if named:
        return named
    return next((key for key in sorted(run.metrics) if VAL_PATTERN.match(key)), None)


def to_record(run: TrackedRun, prices: config.Prices) -> tuple[dict, str | None]:
    """The run-summary record of a tracked run, and where its cost comes from if from the catalog."""
    def lookup(keys: tuple[str, ...], metrics: bool = False) -> object:
        for key in keys:
            for source in (run.tags, run.params, run.metrics if metrics else {}):
                if key in source and str(source[key]).strip() != "":
                    return source[key]
        return None

    record: dict = {name: lookup(keys) for name, keys in FIELD_KEYS.items()}
    record["project"] = record["project"] or run.experiment
    record["gpu_type"] = record["gpu_type"] or run.gpu_type
    record["gpu_count"] = record["gpu_count"] if record["gpu_count"] is not None else run.gpu_count
    record["gpu_uuids"] = record["gpu_uuids"] or (",".join(run.gpu_uuids) if run.gpu_uuids else None)
    record.update(run_id=run.run_id, status=STATUSES.get(run.status or "", run.status),
                  start_time=None if run.start_ms is None else run.start_ms / 1000,
                  end_time=None if run.end_ms is None else run.end_ms / 1000)
    if record["end_time"] is None and run.runtime_s is not None and run.status not in ("running", "RUNNING"):
        record["duration_hours"] = run.runtime_s / 3600
    cost = lookup(COST_KEYS, metrics=True)
    price = lookup(PRICE_KEYS, metrics=True)
    catalog = None
    if cost is None and price is None:
        instance_price = prices.instance(record["instance_type"])
        gpu_price = prices.gpu(record["gpu_type"])
        if instance_price is not None:
            price, catalog = instance_price, f"instance type {record['instance_type']}"
        elif gpu_price is not None and record["gpu_count"] is not None:
            try:
                price = gpu_price * Decimal(str(record["gpu_count"]).strip())
                catalog = f"{record['gpu_count']} x {record['gpu_type']}"
            except ArithmeticError:
                pass
    record["estimated_cost_usd"] = _decimal_text(cost)
    record["price_per_hour_usd"] = _decimal_text(price)
    energy = lookup(ENERGY_KWH_KEYS, metrics=True)
    joules = lookup(ENERGY_J_KEYS, metrics=True) if energy is None else None
    if joules is not None:
        try:
            energy = float(joules) / 3.6e6
        except ValueError:
            raise BadValue(f"the energy in joules {joules!r} is not a number") from None
    record["energy_kwh"] = energy
    record["emissions_kg"] = lookup(EMISSIONS_KEYS, metrics=True)
    name = run.val_metric or val_metric_name(run)
    if name is not None:
        record["val_metric_name"] = name
        record["val_metric"] = run.metrics.get(name)
        record["eval_history"] = [{"step": step, **({"time": ms / 1000} if ms is not None else {}), "value": value}
                                  for step, ms, value in run.history]
    tags = {k: v for k, v in run.tags.items() if not k.startswith("mlflow.") and not k.startswith("mlcost.")}
    tags.update({f"param.{k}": v for k, v in run.params.items()})
    if run.name:
        tags["run_name"] = run.name
    if run.experiment:
        tags["experiment"] = run.experiment
    record["tags"] = tags
    return record, catalog


def parse_runs(runs: list[TrackedRun], ctx: ParseContext, kind: str, prices: config.Prices | None = None) -> Parsed:
    """Validated runs (and eval points) of tracked runs; a run that does not validate is a reject
    whose line is its position in the import and whose text is its run id."""
    prices = prices if prices is not None else config.load().prices
    parsed, latest = Parsed(), {}
    for number, run in enumerate(runs, start=1):
        try:
            if run.problem:
                raise BadValue(run.problem)
            record, catalog = to_record(run, prices)
            row, evals = build_run(record, number, ctx, kind)
        except BadValue as error:
            parsed.rejects.append(Reject(number, f"run {run.run_id}: {error}", run.run_id))
            continue
        flags = list(row["flags"] or [])
        if catalog is not None and row["cost_source"] == "derived":
            row["cost_source"] = "catalog"
            flags.append(f"cost estimated from the price catalog ({catalog}) x duration")
        elif row["cost_usd"] is None:
            flags.append("no cost: no cost or price logged and no catalog price for its instance or GPU type"
                         if row["ended_at"] is not None else "no cost yet: the run is still running")
        row["flags"] = flags or None
        collect(latest, row, evals)
        parsed.accepted += 1
    return to_parsed(latest, parsed)


def _decimal_text(value: object) -> object:
    """Money as exact text: a float metric becomes its shortest decimal (0.1, not 0.1000000000000000055)."""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, Decimal):
        return str(value)
    return value
