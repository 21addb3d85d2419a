"""Idle GPU cost of a period, defined once, in its two named parts.

Every idle GPU-minute of a billed GPU node (a traced host its bill lines name) is either
- **not held by any run** (unallocated idle): the allocation's `idle_gpu` bucket (metrics/allocation.py,
  rule 'idle GPU-hours x node rate'), or
- **held by runs while idle**: a run held the GPU but left it idle; the allocation charges that
  time to the run (its 'node GPU-hours share' training piece), so it is not in the idle bucket.

Both are priced as the allocation prices a node line: the line's effective cost over its GPU-hours,
so all idle cost = unallocated idle + held idle, to the cent, and the unallocated part is the
Costs page's "Idle GPUs" bucket. A GPU-minute's idle seconds no run held are least(idle_s, 60 -
held_s), the allocation's rule; the rest of its idle seconds runs held.

Traced hosts without a bill line in the period have the same two parts, priced at the catalog's
GPU price ([prices.gpu_usd_per_hour]): an estimate in USD, shown apart, never in the bill's buckets.

The Costs page, the Idle GPUs page, the Retrospective, `mlcost report`, `mlcost allocation` and the
idle alert all read idle_cost().
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timezone
from decimal import ROUND_HALF_UP, Decimal

import pandas as pd

from ingest.engine import warehouse
from ingest.settings import config
from metrics import allocation
from present.format import money

CENT, MICRO = Decimal("0.01"), Decimal("0.000001")

# Per node line of the allocation: its rate (effective cost over the GPU-hours its pieces share),
# its idle_gpu piece, and the idle seconds of its GPU-minutes that runs held, with the allocation's
# own rule for a minute (schema.sql's idle_not_held_s): the rest of idle_s is held.
IDLE_SQL = allocation.PIECES + """
, node_pieces AS (   -- a node line's pieces add up to its effective cost (every line keeps its key)
    SELECT line_key, any_value(host) AS host, any_value(billing_currency) AS billing_currency,
           sum(effective_cost) AS line_cost, sum(gpu_hours) AS line_gpu_hours,
           coalesce(sum(effective_cost) FILTER (WHERE bucket = 'idle_gpu'), 0) AS unallocated_cost,
           coalesce(sum(gpu_hours) FILTER (WHERE bucket = 'idle_gpu'), 0) AS unallocated_gpu_hours
    FROM pieces WHERE host IS NOT NULL
    GROUP BY line_key
), node_lines AS MATERIALIZED (
    SELECT n.*, date_trunc('minute', b.charge_period_start) AS line_start, b.charge_period_end AS line_end
    FROM node_pieces n JOIN billing_lines b USING (line_key)
), held_idle AS (   -- only the GPU-minutes a run held (gpu_minutes_allocated), idle in part
    SELECT m.host, m.minute, m.idle_s - idle_not_held_s(m.idle_s, a.held_s) AS held_idle_s
    FROM gpu_minutes m JOIN gpu_minutes_allocated a USING (host, gpu_index, minute)
    WHERE m.idle_s > 0 AND m.minute >= (SELECT min(line_start) FROM node_lines)
      AND m.minute < (SELECT max(line_end) FROM node_lines)
), held_per_line AS (
    SELECT n.line_key, sum(h.held_idle_s) / 3600.0 AS held_gpu_hours
    FROM node_lines n JOIN held_idle h ON h.host = n.host AND h.minute >= n.line_start AND h.minute < n.line_end
    WHERE h.held_idle_s > 0
    GROUP BY n.line_key
)
SELECT n.host, n.billing_currency,
       sum(n.unallocated_gpu_hours) AS unallocated_gpu_hours, sum(n.unallocated_cost) AS unallocated_cost,
       coalesce(sum(h.held_gpu_hours), 0) AS held_gpu_hours,
       coalesce(sum(CAST(n.line_cost * CAST(h.held_gpu_hours / n.line_gpu_hours AS DECIMAL(18, 15))
                         AS DECIMAL(38, 12))) FILTER (WHERE n.line_gpu_hours > 0), 0) AS held_cost
FROM node_lines n LEFT JOIN held_per_line h USING (line_key)
GROUP BY n.host, n.billing_currency
ORDER BY n.billing_currency, n.host
"""

# Traced hosts without a bill line: both parts per host over the period's GPU-minutes (same rule).
UNBILLED_SQL = """
SELECT m.host, arg_max(m.gpu_name, m.minute) AS gpu_name,
       sum(idle_not_held_s(m.idle_s, a.held_s)) / 3600.0 AS unallocated_gpu_hours,
       sum(m.idle_s - idle_not_held_s(m.idle_s, a.held_s)) / 3600.0 AS held_gpu_hours
FROM gpu_minutes m LEFT JOIN gpu_minutes_allocated a USING (host, gpu_index, minute)
WHERE m.minute >= $start AND m.minute < $end AND NOT list_contains($billed::VARCHAR[], m.host)
GROUP BY m.host ORDER BY m.host
"""


@dataclass(frozen=True)
class IdleParts:
    """Idle GPU-hours and cost of billed GPU nodes in one billing currency, in two named parts."""

    currency: str
    unallocated_gpu_hours: float  # idle, no run held the GPU: the allocation's idle_gpu bucket
    unallocated_cost: Decimal
    held_gpu_hours: float  # idle while a run held the GPU: charged to those runs (training)
    held_cost: Decimal

    @property
    def gpu_hours(self) -> float:
        """All idle GPU-hours of the billed nodes (both parts)."""
        return self.unallocated_gpu_hours + self.held_gpu_hours

    @property
    def cost(self) -> Decimal:
        """All idle cost of the billed nodes (both parts), in `currency`, exact."""
        return self.unallocated_cost + self.held_cost

    def shown(self) -> "Shown":
        """The parts as shown, adding up: the total and the part no run held (the Costs page's Idle GPUs
        bucket) each rounded (cents, 0.1 GPU-hour), the part runs held their difference."""
        cost, unallocated = self.cost.quantize(CENT, ROUND_HALF_UP), self.unallocated_cost.quantize(CENT, ROUND_HALF_UP)
        hours, unallocated_h = _tenths(self.gpu_hours), _tenths(self.unallocated_gpu_hours)
        return Shown(cost, unallocated, cost - unallocated, float(hours), float(unallocated_h),
                     float(hours - unallocated_h))


def _tenths(hours: float) -> Decimal:
    return Decimal(repr(hours)).quantize(Decimal("0.1"), ROUND_HALF_UP)


@dataclass(frozen=True)
class Shown:
    """IdleParts rounded for display (IdleParts.shown()): each total is the sum of its parts."""

    cost: Decimal
    unallocated_cost: Decimal
    held_cost: Decimal
    gpu_hours: float
    unallocated_gpu_hours: float
    held_gpu_hours: float


@dataclass(frozen=True)
class Idle:
    """Idle GPUs of [start, end): billed nodes per billing currency (`billed`), and traced hosts
    without a bill line in the period at catalog prices (`estimated`, USD, an estimate; its cost
    leaves out `unpriced_hosts`, GPUs the catalog lacks)."""

    start: date
    end: date
    billed: dict[str, IdleParts]
    estimated: IdleParts | None  # None: every traced host has bill lines in the period
    estimated_hosts: tuple[str, ...]
    unpriced_hosts: tuple[str, ...]
    nodes: pd.DataFrame  # per host: both parts' GPU-hours and cost, `price_source` 'bill' or 'catalog (estimated)'

    @property
    def gpu_hours(self) -> float:
        """Every idle GPU-hour of the period: billed nodes and hosts without bill lines, both parts."""
        return sum((p.gpu_hours for p in self.billed.values()), 0.0) + (self.estimated.gpu_hours if self.estimated else 0.0)


def idle_cost(start: date, end: date, rules: allocation.Rules,
              gpu_prices: tuple[tuple[str, Decimal], ...] = ()) -> Idle:
    """Idle GPU-hours and cost of [start, end) (UTC days; bill lines by the day their charge period
    starts, as the allocation): per billing currency, not held by any run + held by runs while idle
    (Decimal, exact); hosts without bill lines at `gpu_prices` ((gpu_name, USD per GPU-hour))."""
    per_node = allocation._query(IDLE_SQL, start, end, rules).assign(price_source="bill")
    billed = {currency: _parts(currency, group)
              for currency, group in per_node.groupby("billing_currency", sort=True)}
    span = {"start": datetime.combine(start, time(), timezone.utc), "end": datetime.combine(end, time(), timezone.utc)}
    unbilled = warehouse.query(UNBILLED_SQL, {**span, "billed": sorted(set(per_node["host"]))})
    prices = config.Prices(gpu_usd_per_hour=dict(gpu_prices))
    rates = [prices.gpu(name) for name in unbilled["gpu_name"]]
    for part in ("unallocated", "held"):
        unbilled[f"{part}_cost"] = [None if rate is None else (rate * Decimal(repr(float(hours)))).quantize(MICRO)
                                    for rate, hours in zip(rates, unbilled[f"{part}_gpu_hours"])]
    unbilled = unbilled.assign(billing_currency="USD", price_source="catalog (estimated)")
    priced = unbilled[[rate is not None for rate in rates]]
    estimated = None if unbilled.empty else IdleParts(
        "USD", round(float(unbilled["unallocated_gpu_hours"].sum()), 6),
        sum(priced["unallocated_cost"], Decimal(0)), round(float(unbilled["held_gpu_hours"].sum()), 6),
        sum(priced["held_cost"], Decimal(0)))
    return Idle(start, end, billed, estimated, tuple(unbilled["host"]),
                tuple(h for h, rate in zip(unbilled["host"], rates) if rate is None),
                pd.concat([per_node, unbilled.drop(columns="gpu_name")], ignore_index=True))


def _parts(currency: str, group: pd.DataFrame) -> IdleParts:
    return IdleParts(currency, round(float(group["unallocated_gpu_hours"].astype(float).sum()), 6),
                     sum((Decimal(v) for v in group["unallocated_cost"]), Decimal(0)),
                     round(float(group["held_gpu_hours"].astype(float).sum()), 6),
                     sum((Decimal(v) for v in group["held_cost"]), Decimal(0)))


def parts_text(parts: IdleParts) -> str:
    """'Idle GPUs $5,781.05 = $5,774.19 not held by any run + $6.86 held by runs while idle'."""
    shown = parts.shown()
    return (f"Idle GPUs {money(shown.cost, parts.currency)} = {money(shown.unallocated_cost, parts.currency)} "
            f"not held by any run + {money(shown.held_cost, parts.currency)} held by runs while idle")


def hours_text(parts: IdleParts) -> str:
    """'3,262.1 idle GPU-hours = 3,258.1 not held by any run + 4.0 held by runs while idle' (IdleParts.shown())"""
    shown = parts.shown()
    return (f"{shown.gpu_hours:,.1f} idle GPU-hours = {shown.unallocated_gpu_hours:,.1f} not held by any run "
            f"+ {shown.held_gpu_hours:,.1f} held by runs while idle")


def estimated_text(found: Idle) -> str | None:
    """The idle of hosts without bill lines (catalog prices, an estimate) in words, or None when there is none."""
    if found.estimated is None:
        return None
    shown = found.estimated.shown()
    unpriced = f"; not priced (GPU not in the catalog): {', '.join(found.unpriced_hosts)}" if found.unpriced_hosts else ""
    return (f"Hosts without bill lines ({', '.join(found.estimated_hosts)}): {shown.gpu_hours:,.1f} idle GPU-hours "
            f"({shown.held_gpu_hours:,.1f} held by runs), estimated {money(shown.cost, 'USD')} = "
            f"{money(shown.unallocated_cost, 'USD')} not held by any run + {money(shown.held_cost, 'USD')} held by "
            f"runs while idle at catalog GPU prices, not in the bill{unpriced}.")
