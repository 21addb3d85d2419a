"""What each section of mlcost's settings holds: one frozen dataclass per [section] of mlcost.toml
(ingest/defaults.toml lists every key with its default), `Config` holding them all, and the names a
budget's scope and period may take. No reading or checking here: ingest/settings/config.py builds
these from the files, with the value checks of ingest/settings/checks.py.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from ingest.settings.limits import Limits

PRICE_TABLES = ("instance_usd_per_hour", "gpu_usd_per_hour")
GPU_NAME_PREFIXES = ("nvidia ", "tesla ")


@dataclass(frozen=True)
class Prices:
    """The price catalog: USD per instance-hour and per GPU-hour."""

    instance_usd_per_hour: Mapping[str, Decimal] = field(default_factory=dict)
    gpu_usd_per_hour: Mapping[str, Decimal] = field(default_factory=dict)
    # where and when each price was read: {"table" or "table.name" (name as the table keys it): text}
    source: Mapping[str, str] = field(default_factory=dict)
    as_of: Mapping[str, str] = field(default_factory=dict)

    def source_of(self, table: str, name: str | None) -> str | None:
        """'source, as of date' of the catalog price of `name` in `table` (instance_usd_per_hour or
        gpu_usd_per_hour): the entry's own, else the table's; None when neither is known."""
        key = None if name is None else f"{table}.{gpu_key(name) if table == 'gpu_usd_per_hour' else name.strip().lower()}"
        source = self.source.get(key) or self.source.get(table)
        as_of = self.as_of.get(key) or self.as_of.get(table)
        if source is None:
            return None
        return f"{source}, as of {as_of}" if as_of else source

    def instance(self, instance_type: str | None) -> Decimal | None:
        """USD per hour of one instance of this type, or None when the catalog lacks it."""
        return None if instance_type is None else self.instance_usd_per_hour.get(instance_type.strip().lower())

    def gpu(self, gpu_type: str | None) -> Decimal | None:
        """USD per hour of one GPU of this model, or None when the catalog lacks it."""
        return None if gpu_type is None else self.gpu_usd_per_hour.get(gpu_key(gpu_type))

    def of(self, catalog: str, name: str | None) -> Decimal | None:
        """USD per hour from the `catalog` a definition names ("instance" or "gpu"), or None."""
        return self.instance(name) if catalog == "instance" else self.gpu(name)


@dataclass(frozen=True)
class Serving:
    """When a model version counts as a regression (see metrics/queries/serving.py serving_version_changes)."""

    regression_pct: float
    min_requests: int
    cost_per_1k_jump_ratio: float = 2.0  # the cost_per_1k_jump alert (outputs/alerts/serving.py)
    cost_per_1k_min_requests: int = 10000
    idle_qps: float = 0.05  # the idle_service alert
    idle_window_hours: int = 48


@dataclass(frozen=True)
class Gpu:
    """How GPU traces are rolled up (ingest/engine/warehouse.py) and judged on the Idle GPUs page."""

    idle_util_max_pct: float = 5.0
    idle_min_s: float = 300.0
    idle_power_max_w: float | None = None  # None: no power condition
    max_gap_s: float = 300.0
    right_size_util_pct: float = 50.0


@dataclass(frozen=True)
class Energy:
    """Facility overhead (PUE) and grid carbon intensity (g CO2e per kWh), per region with a default."""

    pue: float = 1.2
    grid_gco2_per_kwh: float = 480.0
    pue_by_region: Mapping[str, float] = field(default_factory=dict)
    grid_gco2_per_kwh_by_region: Mapping[str, float] = field(default_factory=dict)

    def pue_for(self, region: str | None) -> float:
        """The PUE of this region, else the default."""
        return self.pue_by_region.get((region or "").strip().lower(), self.pue)

    def grid_for(self, region: str | None) -> float:
        """The grid's g CO2e per kWh in this region, else the default."""
        return self.grid_gco2_per_kwh_by_region.get((region or "").strip().lower(), self.grid_gco2_per_kwh)

    def query_factors(self) -> tuple[tuple[tuple[str, float, float], ...], float, float]:
        """(((region, PUE, g CO2e/kWh), ...) for every region with its own figure, default PUE,
        default g CO2e/kWh): the arguments metrics/queries/gpus.py's energy queries take."""
        regions = tuple((region, self.pue_for(region), self.grid_for(region))
                        for region in sorted({*self.pue_by_region, *self.grid_gco2_per_kwh_by_region}))
        return regions, self.pue, self.grid_gco2_per_kwh


@dataclass(frozen=True)
class Billing:
    """Which bill lines are GPU spend: instance families (p4d, g5, nc, a2, ...) and whole words in a
    line's description (schema.sql gpu_line_rule), all lower case."""

    gpu_instance_families: tuple[str, ...] = ()
    gpu_sku_words: tuple[str, ...] = ()
    # the currency of every line of a bill that has no currency column (None: such a bill is refused)
    default_currency: str | None = None
    # the provider of every line of a FOCUS bill without a ProviderName column (the specification's
    # own example files have none); None: such a bill is refused
    default_provider: str | None = None


@dataclass(frozen=True)
class Reconciliation:
    """How bill lines are matched to runs (schema.sql billing_run_lines) and when a gap is large."""

    run_id_tag: str = "run_id"
    project_tag: str = "project"
    team_tag: str = "team"
    service_tag: str = "service"
    gap_pct: float = 10.0
    match_slack_minutes: float = 60.0


SCOPES = ("all", "project", "team", "tag", "provider", "bucket", "model", "service")
# Scopes counted on the allocation of the bill (metrics/allocation.py): its effective cost of a bucket,
# a model version (serving) or a service (the lines tagged with it).
ALLOCATION_SCOPES = ("bucket", "model", "service")
ALLOCATION_BUCKETS = ("training", "serving", "idle_gpu", "shared", "unallocated")
PERIODS = ("month", "quarter")


@dataclass(frozen=True)
class Budget:
    """One [[budgets]] entry: how much a scope may spend per period, and when to say so.

    scope is all, project, team, tag, provider (bill lines) or bucket, model, service (the
    allocation's pieces); scope_value names which (for tag "key=value", split into tag_key and
    tag_value). Thresholds are percent of `amount`."""

    name: str
    scope: str
    scope_value: str | None
    period: str
    amount: Decimal
    currency: str
    actual_thresholds_pct: tuple[float, ...] = (50.0, 80.0, 100.0)
    forecast_thresholds_pct: tuple[float, ...] = (100.0,)
    channel: str | None = None
    owner: str | None = None

    @property
    def scope_label(self) -> str:
        """'everything', 'project vision', 'tag team=genai'."""
        return "everything" if self.scope == "all" else f"{self.scope} {self.scope_value}"

    @property
    def on_allocation(self) -> bool:
        """True when the scope is a bucket or key of the allocation (counted in effective cost)."""
        return self.scope in ALLOCATION_SCOPES

    @property
    def tag_key(self) -> str | None:
        return self.scope_value.split("=", 1)[0] if self.scope == "tag" else None

    @property
    def tag_value(self) -> str | None:
        return self.scope_value.split("=", 1)[1] if self.scope == "tag" else None


@dataclass(frozen=True)
class Alerts:
    """The alert rules besides budget thresholds (outputs/alerts.py), and how alerts are delivered."""

    burn_spike_factor: float = 2.0
    burn_spike_baseline_days: int = 28
    regression_lookback_days: int = 30
    idle_waste_usd_per_week: Decimal = Decimal("200")
    channel: str | None = None
    digest: bool = False
    retry_after_max_s: float = 60.0
    post_timeout_s: float = 10.0
    run_limits: RunLimits = field(default_factory=lambda: RunLimits())
    project_run_limits: Mapping[str, RunLimits] = field(default_factory=dict)
    guardrail_lookback_days: int = 30

    def limits_of(self, project: str | None) -> RunLimits:
        """The run guardrails of a project's runs: its own limits where set, else the global ones."""
        return self.project_run_limits.get(project or "", self.run_limits)


@dataclass(frozen=True)
class RunLimits:
    """Guardrails on one training run (0: no limit): its cost, wall-clock hours and GPU-hours."""

    max_cost_usd: Decimal = Decimal(0)
    max_hours: float = 0.0
    max_gpu_hours: float = 0.0


@dataclass(frozen=True)
class Comparison:
    """When a compared candidate spends too much for its gain (metrics/comparison.py)."""

    more_energy_pct: float = 20.0
    more_cost_pct: float = 20.0
    better_metric_pct: float = 0.1


@dataclass(frozen=True)
class Dashboard:
    """The hour-of-day x weekday view (metrics/hour_of_week.py): its default zone and low-utilization mark."""

    time_zone: str = "UTC"
    low_util_pct: float = 30.0


@dataclass(frozen=True)
class Retrospective:
    """When a figure of the month becomes a recommendation (metrics/retrospective.py)."""

    right_size_min_gpu_h: float = 8.0
    dominated_min_ratio: float = 1.5
    weekend_idle_min_usd: float = 50.0
    idle_share_pct: float = 33.0
    spend_change_pct: float = 10.0


@dataclass(frozen=True)
class Slurm:
    """USD per GPU-hour per Slurm partition (names lower case), for jobs read from sacct."""

    partition_gpu_usd_per_hour: Mapping[str, Decimal] = field(default_factory=dict)

    def rate(self, partition: str | None) -> Decimal | None:
        """USD per GPU-hour on this partition, or None when the settings lack it."""
        return None if partition is None else self.partition_gpu_usd_per_hour.get(partition.strip().lower())


@dataclass(frozen=True)
class Config:
    prices: Prices
    serving: Serving
    user_file: Path | None = None
    gpu: Gpu = field(default_factory=Gpu)
    energy: Energy = field(default_factory=Energy)
    billing: Billing = field(default_factory=Billing)
    reconciliation: Reconciliation = field(default_factory=Reconciliation)
    alerts: Alerts = field(default_factory=Alerts)
    budgets: tuple[Budget, ...] = ()
    retrospective: Retrospective = field(default_factory=Retrospective)
    comparison: Comparison = field(default_factory=Comparison)
    dashboard: Dashboard = field(default_factory=Dashboard)
    slurm: Slurm = field(default_factory=Slurm)
    ingest: Limits = field(default_factory=Limits)


def gpu_key(name: str) -> str:
    """A GPU model as the price catalog keys it: lower case, without an "NVIDIA " or "Tesla " prefix."""
    key = name.strip().lower()
    for prefix in GPU_NAME_PREFIXES:
        key = key.removeprefix(prefix)
    return key
