"""One training run built from Python values (tracked runs, Slurm jobs) through the
run-summary definition (ingest/formats/runs/run_summary.py), read by the engine's generic reader:
the same checks, derivations and reasons as a run file, with the source's own kind; and the runs
summary (run_totals) every run source reports.
"""
from __future__ import annotations

import dataclasses
from decimal import Decimal
from functools import lru_cache

from ingest.engine import reader
from ingest.engine.contract import ParseContext, Parsed
from ingest.engine.definition import Definition
from ingest.engine.run_rules import HourlyCost
from ingest.formats.runs import run_summary
from ingest.settings import config

CENT = Decimal("0.01")
MAX_RUN_HOURS = run_summary.MAX_RUN_HOURS
MAX_GPUS = run_summary.MAX_GPUS


@lru_cache(maxsize=None)
def definition_of(source_kind: str) -> Definition:
    """The run-summary definition for runs of `source_kind`: a run file ("runs") flags a run it
    cannot price; other sources say why in their own words (or not at all)."""
    if source_kind == run_summary.KIND:
        return run_summary.RUNS
    steps = tuple(dataclasses.replace(step, open="", unpriced="") if isinstance(step, HourlyCost) else step
                  for step in run_summary.RUNS.steps)
    return dataclasses.replace(run_summary.RUNS, kind=source_kind, steps=steps)


def build_run(record: dict, line: int, ctx: ParseContext, source_kind: str,
              prices: config.Prices | None = None, unknown: set[str] | None = None) -> tuple[dict, list[dict]]:
    """The `runs` row and `run_evals` rows for one record in the run-summary vocabulary; raises
    BadValue with the reason. Without `prices` a run with neither a cost nor a price stays unpriced
    (the caller prices it); fields outside the vocabulary are kept as tags and added to `unknown`."""
    row, children = reader.build_record(definition_of(source_kind), record, line, ctx, prices, unknown)
    return row, children["run_evals"]


def collect(latest: dict[str, tuple[dict, list[dict]]], run: dict, evals: list[dict]) -> None:
    """Remember a run; a later record of the same run_id in the same file replaces it
    (a source may rewrite a run's record with growing totals as it goes)."""
    latest.pop(run["run_id"], None)
    latest[run["run_id"]] = (run, evals)


def to_parsed(latest: dict[str, tuple[dict, list[dict]]], parsed: Parsed) -> Parsed:
    """Put the collected runs and their eval points into `parsed`, in file order."""
    parsed.tables["runs"] = [run for run, _ in latest.values()]
    parsed.tables["run_evals"] = [point for _, evals in latest.values() for point in evals]
    return parsed


def run_totals(parsed: Parsed) -> dict:
    """The runs summary: run count, cost and energy totals over the runs that carry them."""
    runs = parsed.tables.get("runs", [])
    costs = [r["cost_usd"] for r in runs if r["cost_usd"] is not None]
    energies = [r["energy_kwh"] for r in runs if r["energy_kwh"] is not None]
    return {
        "runs": len(runs),
        "cost_usd_total": str(sum(costs, Decimal(0)).quantize(CENT)) if costs else None,
        "runs_with_cost": len(costs),
        "energy_kwh_total": round(sum(energies), 9) if energies else None,
        "runs_with_energy": len(energies),
    }
