"""docs/metrics.md lists every metric the seed documents name (issue 22: "the docs list each seed
metric with its formula, unit and where it is shown"). Two checks: each `snake_case` name the seeds
write in backticks is a metric with a row, unless it is listed below as a record field or a knob;
each metric the seeds give in prose (quoted here, and the quote checked against the seed text) has
a row. A new metric in a seed, or a row removed, fails."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

SEEDS = REPO_ROOT.parent / "shared" / "seeds"
DOC = (REPO_ROOT / "docs" / "metrics.md").read_text()

# Names the seeds write in backticks that are not metrics: inputs of a record, code knobs, labels.
NOT_METRICS = {
    "start_time", "end_time", "instance_type", "price_per_hour", "project", "team", "experiment",  # record fields
    "num_workers", "prefetch_factor", "max_batch_size", "max_wait_ms", "max_memory", "model_fp32", "k",  # code knobs
    "requests", "limits",  # Kubernetes resource requests/limits, not request counts
}

# Metrics the seeds give in prose: (the row's bold name in docs/metrics.md, a quote from the seeds).
PROSE = [
    ("run cost", "the *run cost* is `X * T`"),
    ("cost = hourly_rate × runtime", "cost = hourly_rate × runtime"),
    ("Time-to-Result Cost", "Time-to-Result Cost = (Total training hours)"),
    ("GPU-hours", "Per-run budget limits (dollars, GPU-hours)"),
    ("GPU/TPU Hours", "GPU/TPU Hours"),
    ("cost per example", "**cost per example** is `(X * T) / N`"),
    ("Cost Efficiency", "Cost Efficiency = (Throughput in samples/sec) / ($/hr)"),
    ("20 % more energy for a 0.1 % gain in accuracy", "consumes 20% more energy for a 0.1% gain in accuracy"),
    ("energy per run", "**energy per run**"),
    ("Energy for a device", "Energy for a device: `average_power_watts * duration_hours`"),
    ("Energy per unit of work", "**Energy per unit of work**"),
    ("Energy per 1,000 inferences", "Energy per 1,000 inferences: `(energy_for_run * 1000) / num_requests`"),
    ("emissions", "track emissions"),
    ("PUE", "PUE (Power Usage Effectiveness)"),
    ("cost per successful trial", "cost per successful trial"),
    ("retry/preemption counts", "retry/preemption counts"),
    ("cost per epoch", "Track cost per epoch"),
    ("GPU utilization", "Monitor GPU utilization"),
    ("idle time", "GPU/CPU usage, I/O wait, idle time"),
    ("Ignoring Idle Power", "Ignoring Idle Power"),
    ("cost per prediction", "Calculate cost per prediction"),
    ("times of day when utilization is low but capacity is high",
     "Spot times of day when utilization is low but capacity is high"),
    ("per-project or per-team monthly budgets", "Per-project or per-team monthly budgets"),
    ("Project A spent $X in the last 7 days (budget $Y)", r"Project A spent \$X in the last 7 days (budget \$Y)"),
    ("burn-rate exceeds a threshold", "alert when burn-rate exceeds a threshold"),
    ("per-experiment cost ceilings", "Per-experiment cost ceilings"),
    ("per-run budget limits (dollars, GPU-hours)", "Per-run budget limits (dollars, GPU-hours)"),
    ("max wall-clock hours per job", "max wall-clock hours per job"),
    ("cost per 1,000 requests increased 2× in the last 24 hours",
     "cost per 1,000 requests increased 2× in the last 24 hours"),
    ("QPS stays near zero for a long window", "If QPS stays near zero for a long window"),
    ("per run vs", "`estimated_cost_usd` per run vs `val_metric`"),
    ("per model version", "`cost_per_1k_requests` per model version"),
    ("FLOPs", "FLOPs (Floating-Point Operations)"),
    ("Memory Bandwidth", "Memory Bandwidth"),
    ("I/O wait", "I/O wait"),
]


def seed_table() -> list[tuple[str, list[str]]]:
    """(first cell, the other cells) of each row of the seed metrics table in docs/metrics.md."""
    section = DOC.split("## The seed documents' metrics", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if line.startswith("| ") and not line.startswith("| seed metric") and not line.startswith("|---"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
            rows.append((cells[0], cells[1:]))
    return rows


def seed_text() -> str:
    if not SEEDS.is_dir():  # CI runs with ../shared beside the clone: there, missing seeds fail
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"the seed documents are not at {SEEDS} (CI=true)")
        pytest.skip(f"the seed documents are not at {SEEDS}")
    return "\n".join(path.read_text() for path in sorted(SEEDS.glob("*.txt")))


def test_every_row_says_formula_unit_and_where_shown():
    rows = seed_table()
    assert len(rows) >= 30
    for first, rest in rows:
        assert len(rest) == 4 and all(rest[1:]), (first, rest)  # formula may be "—"; unit, figure, where never empty
        if rest[3] == "—":  # not shown anywhere: the figure column must say why
            assert rest[2].startswith("not "), first


def test_every_backticked_seed_metric_has_a_row():
    named = set(re.findall(r"`([a-z][a-z0-9_]*)`", seed_text()))
    assert {"cost_per_1k_requests", "energy_to_target", "speedup"} <= named  # the pattern finds them
    firsts = " ".join(first for first, _ in seed_table())
    missing = sorted(name for name in named - NOT_METRICS if f"`{name}`" not in firsts)
    assert not missing, f"seed metrics without a row in docs/metrics.md: {missing}"


def test_every_prose_seed_metric_has_a_row():
    text = seed_text()
    firsts = [first for first, _ in seed_table()]
    for name, quote in PROSE:
        assert quote in text, f"not in the seed documents (the list is stale): {quote!r}"
        assert any(f"**{name}**" in first or f"**{name}" in first for first in firsts), \
            f"seed metric {name!r} has no row in docs/metrics.md"

