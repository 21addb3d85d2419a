"""mlcost's settings: the shipped defaults (ingest/defaults.toml) under the user's mlcost.toml.

The user file is the one $MLCOST_CONFIG names, else ./mlcost.toml when it exists. Its keys
override the defaults one by one; a key mlcost does not know, or a value it cannot use, is a
ConfigError naming the file and the key.
"""
from __future__ import annotations

import math
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from importlib import resources
from pathlib import Path
from types import MappingProxyType

from ingest.settings.limits import Limits

USER_FILE = "mlcost.toml"
DEFAULTS = "defaults.toml"
PRICE_TABLES = ("instance_usd_per_hour", "gpu_usd_per_hour")
GPU_NAME_PREFIXES = ("nvidia ", "tesla ")


class ConfigError(ValueError):
    """A settings file mlcost cannot use; `file` and `key` say where."""

    def __init__(self, file: str, key: str | None, problem: str) -> None:
        self.file, self.key = file, key
        super().__init__(f"{file}: {key} {problem}" if key else f"{file}: {problem}")


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
        key = None if name is None else f"{table}.{_gpu_key(name) if table == 'gpu_usd_per_hour' else name.strip().lower()}"
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
        return None if gpu_type is None else self.gpu_usd_per_hour.get(_gpu_key(gpu_type))


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


def user_path() -> Path | None:
    """The user's settings file: $MLCOST_CONFIG (which must exist), else ./mlcost.toml if present."""
    named = os.environ.get("MLCOST_CONFIG")
    if named:
        path = Path(named).expanduser()
        if not path.is_file():
            raise ConfigError(named, None, "no such file (named by $MLCOST_CONFIG)")
        return path
    local = local_path()
    return local if local.is_file() else None


def local_path() -> Path:
    """./mlcost.toml of the folder mlcost was started in ($MLCOST_WORKDIR, which `mlcost dashboard` passes
    to the dashboard it starts in the repository's folder), whether or not it exists."""
    return Path(os.environ.get("MLCOST_WORKDIR") or ".") / USER_FILE


def load(path: Path | None = None) -> Config:
    """The defaults with the user file (`path`, else user_path()) laid over them, checked."""
    path = path or user_path()
    return _build(_read(path) if path else {}, path)


def ingest_limits() -> Limits:
    """The [ingest] settings of mlcost.toml (what the loader puts in force with limits.configure);
    ConfigError when the file cannot be used. Here, not in limits.py: limits sits below config."""
    return load().ingest


def check_text(text: str, path: Path) -> Config:
    """The settings `text` would give if it were the file `path`: ConfigError exactly as load() would."""
    try:
        user = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(str(path), None, f"is not valid TOML: {error}") from None
    return _build(user, path)


def _build(user: dict, path: Path | None) -> Config:
    defaults = tomllib.loads(resources.files("ingest").joinpath(DEFAULTS).read_text())
    user = dict(user)
    budgets = user.pop("budgets", [])
    merged = _merge(defaults, user, str(path))
    source = str(path) if path else f"ingest/{DEFAULTS}"
    prices = Prices(**{
        table: MappingProxyType({
            (_gpu_key(name) if table == "gpu_usd_per_hour" else name.strip().lower()):
                _price(value, source, f"prices.{table}.{name}")
            for name, value in merged["prices"][table].items()
        })
        for table in PRICE_TABLES
    }, **{kind: MappingProxyType(_price_notes(merged["prices"][kind], user.get("prices", {}), source, kind))
          for kind in ("source", "as_of")})
    serving = merged["serving"]
    return Config(
        prices=prices,
        serving=Serving(
            regression_pct=_number(serving["regression_pct"], source, "serving.regression_pct"),
            min_requests=_whole(serving["min_requests"], source, "serving.min_requests"),
            cost_per_1k_jump_ratio=_number(serving["cost_per_1k_jump_ratio"], source, "serving.cost_per_1k_jump_ratio"),
            cost_per_1k_min_requests=_whole(serving["cost_per_1k_min_requests"], source,
                                            "serving.cost_per_1k_min_requests"),
            idle_qps=_number(serving["idle_qps"], source, "serving.idle_qps"),
            idle_window_hours=_whole(serving["idle_window_hours"], source, "serving.idle_window_hours"),
        ),
        user_file=path,
        gpu=_gpu(merged["gpu"], source),
        energy=_energy(merged["energy"], source),
        billing=Billing(
            gpu_instance_families=_words(merged["billing"]["gpu_instance_families"], source,
                                         "billing.gpu_instance_families"),
            gpu_sku_words=_words(merged["billing"]["gpu_sku_words"], source, "billing.gpu_sku_words"),
            default_currency=_currency(merged["billing"]["default_currency"], source, "billing.default_currency"),
            default_provider=_optional_text(merged["billing"]["default_provider"], source,
                                            "billing.default_provider"),
        ),
        reconciliation=_reconciliation(merged["reconciliation"], source),
        alerts=_alerts(merged["alerts"], source),
        budgets=_budgets(budgets, source),
        retrospective=_retrospective(merged["retrospective"], source),
        comparison=Comparison(**{key: _number(value, source, f"comparison.{key}")
                                 for key, value in merged["comparison"].items()}),
        dashboard=_dashboard(merged["dashboard"], source),
        slurm=Slurm(MappingProxyType({
            name.strip().lower(): _price(value, source, f"slurm.partition_gpu_usd_per_hour.{name}")
            for name, value in merged["slurm"]["partition_gpu_usd_per_hour"].items()})),
        ingest=_ingest(merged["ingest"], source),
    )


def _read(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigError(str(path), None, f"cannot be read ({error.strerror or error})") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(str(path), None, f"is not valid TOML: {error}") from None


def _merge(defaults: dict, user: dict, file: str) -> dict:
    """Defaults with the user's keys laid over; price tables accept new names, nothing else does."""
    merged = {section: dict(values) for section, values in defaults.items()}
    merged["prices"] = {table: dict(prices) for table, prices in defaults["prices"].items()}
    for section, values in user.items():
        if section not in defaults:
            raise ConfigError(file, section, f"is not a setting (known: {', '.join(defaults)})")
        if not isinstance(values, dict):
            raise ConfigError(file, section, "must be a table, e.g. [" + section + "]")
        for key, value in values.items():
            if key not in defaults[section]:
                raise ConfigError(file, f"{section}.{key}",
                                  f"is not a setting (known: {', '.join(f'{section}.{k}' for k in defaults[section])})")
            if section == "prices":
                if not isinstance(value, dict):
                    raise ConfigError(file, f"prices.{key}", 'must be a table of "name" = USD per hour')
                merged["prices"][key].update(value)
            elif isinstance(defaults[section][key], dict):  # a table of names, e.g. per region
                if not isinstance(value, dict):
                    raise ConfigError(file, f"{section}.{key}", 'must be a table of "name" = value')
                merged[section][key] = {**defaults[section][key], **value}
            else:
                merged[section][key] = value
    return merged


def _price(value: object, file: str, key: str) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ConfigError(file, key, f"must be a price in USD per hour, got {value!r}")
    try:
        price = Decimal(str(value).strip())
    except InvalidOperation:
        raise ConfigError(file, key, f"must be a price in USD per hour, got {value!r}") from None
    if not price.is_finite() or price < 0:
        raise ConfigError(file, key, f"must be a price of 0 or more USD per hour, got {value!r}")
    return price


def _number(value: object, file: str, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ConfigError(file, key, f"must be a number of 0 or more, got {value!r}")
    return float(value)


def _whole(value: object, file: str, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(file, key, f"must be a whole number of 0 or more, got {value!r}")
    return value


def _ingest(section: dict, file: str) -> Limits:
    ratio = _number(section["max_ratio"], file, "ingest.max_ratio")
    if ratio < 1:
        raise ConfigError(file, "ingest.max_ratio", f"must be 1 or more, got {ratio:g}")
    sizes = {key: _whole(section[key], file, f"ingest.{key}") for key in ("max_decompressed_bytes", "max_line_bytes")}
    for key, size in sizes.items():
        if size < 1024:
            raise ConfigError(file, f"ingest.{key}", f"must be at least 1024 bytes, got {size}")
    return Limits(max_ratio=ratio, **sizes)


def _currency(value: object, file: str, key: str) -> str | None:
    """An ISO 4217 code in upper case ('usd' -> 'USD'); '' is none."""
    if not isinstance(value, str) or (value.strip() and not re.fullmatch(r"[A-Za-z]{3}", value.strip())):
        raise ConfigError(file, key, f"must be a three-letter currency code such as \"USD\" (or \"\"), got {value!r}")
    return value.strip().upper() or None


def _gpu(section: dict, file: str) -> Gpu:
    power = _number(section["idle_power_max_w"], file, "gpu.idle_power_max_w")
    util = _number(section["idle_util_max_pct"], file, "gpu.idle_util_max_pct")
    if util > 100:
        raise ConfigError(file, "gpu.idle_util_max_pct", f"must be a percentage (0 to 100), got {util:g}")
    gap = _number(section["max_gap_s"], file, "gpu.max_gap_s")
    if gap <= 0:
        raise ConfigError(file, "gpu.max_gap_s", "must be more than 0 seconds")
    return Gpu(idle_util_max_pct=util,
               idle_min_s=_number(section["idle_min_s"], file, "gpu.idle_min_s"),
               idle_power_max_w=power or None,  # 0 means no power condition
               max_gap_s=gap,
               right_size_util_pct=_number(section["right_size_util_pct"], file, "gpu.right_size_util_pct"))


def _energy(section: dict, file: str) -> Energy:
    def table(name: str) -> dict[str, float]:
        return {region.strip().lower(): _number(value, file, f"energy.{name}.{region}")
                for region, value in section[name].items()}
    return Energy(pue=_number(section["pue"], file, "energy.pue"),
                  grid_gco2_per_kwh=_number(section["grid_gco2_per_kwh"], file, "energy.grid_gco2_per_kwh"),
                  pue_by_region=MappingProxyType(table("pue_by_region")),
                  grid_gco2_per_kwh_by_region=MappingProxyType(table("grid_gco2_per_kwh_by_region")))


def _words(value: object, file: str, key: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ConfigError(file, key, f'must be a list of names, e.g. ["p4d", "g5"], got {value!r}')
    return tuple(dict.fromkeys(v.strip().lower() for v in value))


def _reconciliation(section: dict, file: str) -> Reconciliation:
    tags = {}
    for key in ("run_id_tag", "project_tag", "team_tag", "service_tag"):
        value = section[key]
        if not isinstance(value, str) or not value:
            raise ConfigError(file, f"reconciliation.{key}", f"must be a tag name, got {value!r}")
        tags[key] = value
    return Reconciliation(**tags,
                          gap_pct=_number(section["gap_pct"], file, "reconciliation.gap_pct"),
                          match_slack_minutes=_number(section["match_slack_minutes"], file,
                                                      "reconciliation.match_slack_minutes"))


def _alerts(section: dict, file: str) -> Alerts:
    channel = section["channel"]
    if not isinstance(channel, str):
        raise ConfigError(file, "alerts.channel", f"must be a channel name, got {channel!r}")
    if not isinstance(section["digest"], bool):
        raise ConfigError(file, "alerts.digest", f"must be true or false, got {section['digest']!r}")
    return Alerts(
        burn_spike_factor=_number(section["burn_spike_factor"], file, "alerts.burn_spike_factor"),
        burn_spike_baseline_days=_whole(section["burn_spike_baseline_days"], file, "alerts.burn_spike_baseline_days"),
        regression_lookback_days=_whole(section["regression_lookback_days"], file, "alerts.regression_lookback_days"),
        idle_waste_usd_per_week=_price(section["idle_waste_usd_per_week"], file, "alerts.idle_waste_usd_per_week"),
        channel=_channel(channel, file, "alerts.channel"),
        digest=section["digest"],
        retry_after_max_s=_number(section["retry_after_max_s"], file, "alerts.retry_after_max_s"),
        post_timeout_s=_number(section["post_timeout_s"], file, "alerts.post_timeout_s"),
        run_limits=(limits := _run_limits(section, file, "alerts")),
        project_run_limits=MappingProxyType(_project_run_limits(section["run_limits"], limits, file)),
        guardrail_lookback_days=_whole(section["guardrail_lookback_days"], file, "alerts.guardrail_lookback_days"),
    )


RUN_LIMIT_KEYS = ("run_max_cost_usd", "run_max_hours", "run_max_gpu_hours")


def _run_limits(section: dict, file: str, where: str, base: RunLimits | None = None) -> RunLimits:
    """The run guardrails of a table of settings (keys it lacks keep `base`'s)."""
    base = base or RunLimits()
    return RunLimits(
        max_cost_usd=_price(section["run_max_cost_usd"], file, f"{where}.run_max_cost_usd")
        if "run_max_cost_usd" in section else base.max_cost_usd,
        max_hours=_number(section["run_max_hours"], file, f"{where}.run_max_hours")
        if "run_max_hours" in section else base.max_hours,
        max_gpu_hours=_number(section["run_max_gpu_hours"], file, f"{where}.run_max_gpu_hours")
        if "run_max_gpu_hours" in section else base.max_gpu_hours)


def _project_run_limits(table: object, base: RunLimits, file: str) -> dict[str, RunLimits]:
    """[alerts.run_limits.PROJECT]: each project's guardrails over the global ones."""
    if not isinstance(table, dict):
        raise ConfigError(file, "alerts.run_limits", "must be a table of [alerts.run_limits.PROJECT] tables")
    found = {}
    for project, limits in table.items():
        where = f"alerts.run_limits.{project}"
        if not isinstance(limits, dict):
            raise ConfigError(file, where, f"must be a table of {', '.join(RUN_LIMIT_KEYS)}")
        unknown = sorted(set(limits) - set(RUN_LIMIT_KEYS))
        if unknown:
            raise ConfigError(file, f"{where}.{unknown[0]}", f"is not a setting (known: {', '.join(RUN_LIMIT_KEYS)})")
        found[project] = _run_limits(limits, file, where, base)
    return found


BUDGET_KEYS = ("name", "scope", "period", "amount", "currency", "actual_thresholds_pct",
               "forecast_thresholds_pct", "channel", "owner")


def _budgets(entries: object, file: str) -> tuple[Budget, ...]:
    """[[budgets]] entries, each checked; names must be unique (alert state is keyed by them)."""
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ConfigError(file, "budgets", "must be an array of tables: [[budgets]]")
    budgets: list[Budget] = []
    for number, entry in enumerate(entries, start=1):
        where = f"budgets[{number}]"
        for key in entry:
            if key not in BUDGET_KEYS:
                raise ConfigError(file, f"{where}.{key}", f"is not a budget setting (known: {', '.join(BUDGET_KEYS)})")
        for key in ("name", "amount"):
            if key not in entry:
                raise ConfigError(file, f"{where}.{key}", "is required")
        name = entry["name"]
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(file, f"{where}.name", f"must be a name, got {name!r}")
        where = f'budgets[{number}] ("{name}")'
        if any(b.name == name.strip() for b in budgets):
            raise ConfigError(file, f"{where}.name", "is used by an earlier budget; names must be unique")
        scope, scope_value = _scope(entry.get("scope", "all"), file, f"{where}.scope")
        period = entry.get("period", "month")
        if period not in PERIODS:
            raise ConfigError(file, f"{where}.period", f"must be one of {', '.join(PERIODS)}, got {period!r}")
        amount = _price(entry["amount"], file, f"{where}.amount")
        if amount <= 0:
            raise ConfigError(file, f"{where}.amount", "must be more than 0")
        currency = entry.get("currency", "USD")
        if not isinstance(currency, str) or len(currency.strip()) != 3 or not currency.strip().isalpha():
            raise ConfigError(file, f"{where}.currency", f"must be a 3-letter currency code such as USD, got {currency!r}")
        budgets.append(Budget(
            name=name.strip(), scope=scope, scope_value=scope_value, period=period, amount=amount,
            currency=currency.strip().upper(),
            actual_thresholds_pct=_percents(entry.get("actual_thresholds_pct", [50, 80, 100]), file,
                                            f"{where}.actual_thresholds_pct"),
            forecast_thresholds_pct=_percents(entry.get("forecast_thresholds_pct", [100]), file,
                                              f"{where}.forecast_thresholds_pct"),
            channel=_channel(entry.get("channel", ""), file, f"{where}.channel"),
            owner=_optional_text(entry.get("owner"), file, f"{where}.owner"),
        ))
    return tuple(budgets)


def _scope(value: object, file: str, key: str) -> tuple[str, str | None]:
    """'all' | 'project:NAME' | 'team:NAME' | 'tag:KEY=VALUE' | 'provider:NAME' | 'bucket:BUCKET'
    | 'model:VERSION' | 'service:NAME'."""
    hint = ('must be "all", "project:NAME", "team:NAME", "tag:KEY=VALUE", "provider:NAME", "bucket:BUCKET", '
            '"model:VERSION" or "service:NAME"')
    if not isinstance(value, str):
        raise ConfigError(file, key, f"{hint}, got {value!r}")
    kind, _, name = value.strip().partition(":")
    kind, name = kind.strip().lower(), name.strip()
    if kind == "all" and not name:
        return "all", None
    if kind not in SCOPES or kind == "all" or not name or (kind == "tag" and not _is_tag(name)):
        raise ConfigError(file, key, f"{hint}, got {value!r}")
    if kind == "bucket" and name not in ALLOCATION_BUCKETS:
        raise ConfigError(file, key, f"names a bucket of the allocation ({', '.join(ALLOCATION_BUCKETS)}), "
                                     f"got {name!r}")
    return kind, name


def _is_tag(name: str) -> bool:
    tag_key, equals, tag_value = name.partition("=")
    return bool(equals and tag_key.strip() and tag_value.strip()) and tag_key == tag_key.strip()


def _percents(value: object, file: str, key: str) -> tuple[float, ...]:
    if not isinstance(value, list):
        raise ConfigError(file, key, f"must be a list of percentages such as [50, 80, 100], got {value!r}")
    percents = [_number(v, file, key) for v in value]
    if any(p <= 0 for p in percents):
        raise ConfigError(file, key, f"must hold percentages above 0, got {value!r}")
    return tuple(sorted(set(percents)))


def _channel(value: object, file: str, key: str) -> str | None:
    """A named Slack channel (its webhook comes from the environment or secrets), or None for the default."""
    if not isinstance(value, str):
        raise ConfigError(file, key, f"must be a channel name, got {value!r}")
    name = value.strip().lstrip("#")
    if name and not all(c.isalnum() or c in "-_" for c in name):
        raise ConfigError(file, key, f"must be a channel name of letters, digits, - and _, got {value!r}")
    return name or None


def _optional_text(value: object, file: str, key: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigError(file, key, f"must be text, got {value!r}")
    return value.strip() or None


def _dashboard(section: dict, file: str) -> Dashboard:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    zone = section["time_zone"]
    try:
        if not isinstance(zone, str) or not zone.strip() or zone.strip() == "localtime":  # DuckDB lacks localtime
            raise ValueError
        ZoneInfo(zone.strip())
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(file, "dashboard.time_zone", "must be an IANA time zone name such as "
                          f"\"UTC\" or \"America/New_York\", not {zone!r}") from None
    return Dashboard(time_zone=zone.strip(),
                     low_util_pct=_number(section["low_util_pct"], file, "dashboard.low_util_pct"))


def _retrospective(section: dict, file: str) -> Retrospective:
    values = {key: _number(section[key], file, f"retrospective.{key}") for key in section}
    if values["idle_share_pct"] > 100:
        raise ConfigError(file, "retrospective.idle_share_pct",
                          f"must be a percentage (0 to 100), got {values['idle_share_pct']:g}")
    if values["dominated_min_ratio"] < 1:
        raise ConfigError(file, "retrospective.dominated_min_ratio",
                          f"must be 1 or more (a cost ratio), got {values['dominated_min_ratio']:g}")
    return Retrospective(**values)


def _price_notes(notes: dict, user_prices: object, file: str, kind: str) -> dict[str, str]:
    """[prices.source] or [prices.as_of] keyed as Prices.source_of looks them up; a price the
    user's file sets without a note of its own is noted as from that file."""
    found = {}
    for key, value in notes.items():
        if not isinstance(value, str):
            raise ConfigError(file, f"prices.{kind}.{key}", f"must be text, got {value!r}")
        table, _, name = key.partition(".")
        if table not in PRICE_TABLES:
            raise ConfigError(file, f"prices.{kind}.{key}", f"must name a price table ({', '.join(PRICE_TABLES)})")
        found[key if not name else f"{table}.{_gpu_key(name) if table == 'gpu_usd_per_hour' else name.strip().lower()}"] = value
    if isinstance(user_prices, dict):
        for table in PRICE_TABLES:
            for name in user_prices.get(table) or {}:
                key = f"{table}.{_gpu_key(name) if table == 'gpu_usd_per_hour' else name.strip().lower()}"
                if key not in found and kind == "source":
                    found[key] = f"your settings file {file}"
    return found


def _gpu_key(name: str) -> str:
    key = name.strip().lower()
    for prefix in GPU_NAME_PREFIXES:
        key = key.removeprefix(prefix)
    return key
