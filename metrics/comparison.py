"""Two runs or two groups of runs side by side (the seed's "configuration A vs B"): speedup,
cost ratio, cost- and energy-to-target, metric difference, and whether the candidate spends too
much for what it gains. Works on the frame metrics.queries.training_runs returns (columns, no loop
per run)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal, localcontext

import pandas as pd

from ingest.settings.sections import Comparison

# Groupings the comparison offers: label -> training_runs column.
GROUP_BY = {"config": "config", "instance type": "instance_type", "GPU type": "gpu_type", "model": "model",
            "project": "project", "batch size": "batch_size", "owner": "owner"}


@dataclass(frozen=True)
class Side:
    """One side's figures: means per run (wall-clock hours, cost USD, energy kWh) and per run that
    reached the target (cost_to_target_usd, energy_to_target_kwh), mean val_metric of its completed
    runs, and how many runs each mean covers."""

    runs: int
    wall_clock_h: float | None
    cost_usd: Decimal | None
    energy_kwh: float | None
    runs_with_energy: int
    cost_to_target_usd: Decimal | None
    energy_to_target_kwh: float | None
    runs_to_target: int
    upper_bounds: int  # of runs_to_target, those whose figure is an upper bound
    val_metric: float | None
    metric_names: tuple[str, ...]
    goal: str | None


def _mean(values: pd.Series) -> float | None:
    values = pd.to_numeric(values, errors="coerce").dropna().astype(float)
    return None if values.empty else float(values.mean())


def _mean_usd(values: pd.Series) -> Decimal | None:
    """Exact mean of a column of Decimal dollars (NULLs left out), 6 places."""
    money = [Decimal(str(v)) for v in values.dropna()]
    if not money:
        return None
    with localcontext() as exact:  # run costs sum to 28 integer digits (DECIMAL(38, 10)); 6 places after
        exact.prec = 50
        return (sum(money, Decimal(0)) / len(money)).quantize(Decimal("0.000001"))


def side(runs: pd.DataFrame) -> Side:
    """The figures of one side (any number of training_runs rows)."""
    reached = runs[runs["cost_to_target_usd"].notna()]
    done = runs[(runs["status"].fillna("completed") == "completed") & runs["val_metric"].notna()]
    goals = done["metric_goal"].dropna().unique()
    return Side(
        runs=len(runs), wall_clock_h=_mean(runs["duration_h"]), cost_usd=_mean_usd(runs["cost_usd"]),
        energy_kwh=_mean(runs["run_energy_kwh"]), runs_with_energy=int(runs["run_energy_kwh"].notna().sum()),
        cost_to_target_usd=_mean_usd(reached["cost_to_target_usd"]),
        energy_to_target_kwh=_mean(reached["energy_to_target_kwh"]), runs_to_target=len(reached),
        upper_bounds=int((reached["to_target_basis"] == "upper bound").sum()),
        val_metric=_mean(done["val_metric"]),
        metric_names=tuple(sorted(done["val_metric_name"].dropna().unique())),
        goal=str(goals[0]) if len(goals) == 1 else None)


def _ratio(top, bottom) -> float | None:
    if top is None or bottom is None or float(bottom) == 0:
        return None
    return float(top) / float(bottom)


@dataclass(frozen=True)
class Result:
    """baseline and candidate Sides; speedup = baseline wall-clock / candidate wall-clock (above 1:
    the candidate is faster); cost_ratio, energy_ratio, cost_to_target_ratio, energy_to_target_ratio
    = candidate / baseline; metric_difference = candidate - baseline val_metric and metric_gain_pct
    that difference in % of the baseline's, positive when better in the metric's direction (None
    unless both sides report one same metric); flagged and why."""

    baseline: Side
    candidate: Side
    speedup: float | None
    cost_ratio: float | None
    energy_ratio: float | None
    cost_to_target_ratio: float | None
    energy_to_target_ratio: float | None
    metric_difference: float | None
    metric_gain_pct: float | None
    flagged: bool
    reason: str


def compare(baseline: pd.DataFrame, candidate: pd.DataFrame, rule: Comparison) -> Result:
    """Candidate against baseline, flagged when it spends >= rule.more_energy_pct % more energy or
    >= rule.more_cost_pct % more cost for <= rule.better_metric_pct % better metric."""
    a, b = side(baseline), side(candidate)
    speedup = _ratio(a.wall_clock_h, b.wall_clock_h)
    cost_ratio, energy_ratio = _ratio(b.cost_usd, a.cost_usd), _ratio(b.energy_kwh, a.energy_kwh)
    difference = gain = None
    if a.val_metric is not None and b.val_metric is not None and a.metric_names == b.metric_names \
            and len(a.metric_names) == 1 and a.goal == b.goal:
        difference = b.val_metric - a.val_metric
        if a.val_metric != 0:
            gain = difference / abs(a.val_metric) * 100 * (-1 if a.goal == "min" else 1)
    more = []
    if energy_ratio is not None and energy_ratio >= 1 + rule.more_energy_pct / 100:
        more.append(f"{(energy_ratio - 1) * 100:.0f} % more energy")
    if cost_ratio is not None and cost_ratio >= 1 + rule.more_cost_pct / 100:
        more.append(f"{(cost_ratio - 1) * 100:.0f} % more cost")
    flagged = bool(more) and gain is not None and gain <= rule.better_metric_pct
    if flagged:
        reason = (f"The candidate spends {' and '.join(more)} for {gain:+.3f} % metric "
                  f"(flagged at >= {rule.more_energy_pct:g} % more energy or >= {rule.more_cost_pct:g} % more cost "
                  f"for <= {rule.better_metric_pct:g} % better metric).")
    elif more and gain is None:
        reason = f"The candidate spends {' and '.join(more)}; the two sides share no metric to weigh it against."
    else:
        reason = ""
    return Result(a, b, speedup, cost_ratio, energy_ratio, _ratio(b.cost_to_target_usd, a.cost_to_target_usd),
                  _ratio(b.energy_to_target_kwh, a.energy_to_target_kwh), difference, gain, flagged, reason)


def _times(value) -> str:
    return "–" if value is None else f"{value:,.4g}×"


def _text(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:,.4g}" if isinstance(value, float) else str(value)


def table(result: Result) -> pd.DataFrame:
    """The comparison as rows (figure with unit, baseline, candidate, candidate vs baseline), as text."""
    a, b = result.baseline, result.candidate

    def usd(v):
        return "–" if v is None else f"${v:,.2f}"

    def to_target(s: Side, v: str) -> str:
        return v if not s.upper_bounds else f"{v} ({s.upper_bounds} of {s.runs_to_target} upper bound)"

    rows = [
        ("Runs", str(a.runs), str(b.runs), ""),
        ("Wall-clock per run (h)", _text(a.wall_clock_h), _text(b.wall_clock_h), f"speedup {_times(result.speedup)}"),
        ("Cost per run (USD)", usd(a.cost_usd), usd(b.cost_usd), f"cost ratio {_times(result.cost_ratio)}"),
        ("Energy per run (kWh)", _text(a.energy_kwh), _text(b.energy_kwh), f"energy ratio {_times(result.energy_ratio)}"),
        ("Cost to target (USD)", to_target(a, usd(a.cost_to_target_usd)), to_target(b, usd(b.cost_to_target_usd)),
         _times(result.cost_to_target_ratio)),
        ("Energy to target (kWh)", to_target(a, _text(a.energy_to_target_kwh)),
         to_target(b, _text(b.energy_to_target_kwh)), _times(result.energy_to_target_ratio)),
        (f"Validation metric ({', '.join(a.metric_names) or '–'} / {', '.join(b.metric_names) or '–'})",
         _text(a.val_metric), _text(b.val_metric),
         "–" if result.metric_difference is None else
         f"{result.metric_difference:+.4g} ({_text(result.metric_gain_pct)} % better)"),
    ]
    return pd.DataFrame(rows, columns=["figure", "baseline", "candidate", "candidate vs baseline"])
