"""mlcost's settings: the shipped defaults (ingest/defaults.toml) under the user's mlcost.toml.

The user file is the one $MLCOST_CONFIG names, else ./mlcost.toml when it exists. Its keys
override the defaults one by one; a key mlcost does not know, or a value it cannot use, is a
ConfigError naming the file and the key.

Here: where the file is, reading it over the defaults, and building each section from its table.
What each section holds is in ingest/settings/sections.py (Config and its parts, which this module
builds), the check of one value (a price, a currency) in ingest/settings/checks.py.
"""
from __future__ import annotations

import os
import tomllib
from importlib import resources
from pathlib import Path
from types import MappingProxyType

from ingest.settings import checks
from ingest.settings.checks import ConfigError
from ingest.settings.limits import Limits
from ingest.settings.sections import (ALLOCATION_BUCKETS, PERIODS, PRICE_TABLES, SCOPES, Alerts, Billing, Budget,
                                      Comparison, Config, Dashboard, Energy, Gpu, Prices, Reconciliation,
                                      Retrospective, RunLimits, Serving, Slurm, gpu_key)

USER_FILE = "mlcost.toml"
DEFAULTS = "defaults.toml"


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
            (gpu_key(name) if table == "gpu_usd_per_hour" else name.strip().lower()):
                checks.price(value, source, f"prices.{table}.{name}")
            for name, value in merged["prices"][table].items()
        })
        for table in PRICE_TABLES
    }, **{kind: MappingProxyType(_price_notes(merged["prices"][kind], user.get("prices", {}), source, kind))
          for kind in ("source", "as_of")})
    serving = merged["serving"]
    return Config(
        prices=prices,
        serving=Serving(
            regression_pct=checks.number(serving["regression_pct"], source, "serving.regression_pct"),
            min_requests=checks.whole(serving["min_requests"], source, "serving.min_requests"),
            cost_per_1k_jump_ratio=checks.number(serving["cost_per_1k_jump_ratio"], source, "serving.cost_per_1k_jump_ratio"),
            cost_per_1k_min_requests=checks.whole(serving["cost_per_1k_min_requests"], source,
                                            "serving.cost_per_1k_min_requests"),
            idle_qps=checks.number(serving["idle_qps"], source, "serving.idle_qps"),
            idle_window_hours=checks.whole(serving["idle_window_hours"], source, "serving.idle_window_hours"),
        ),
        user_file=path,
        gpu=_gpu(merged["gpu"], source),
        energy=_energy(merged["energy"], source),
        billing=Billing(
            gpu_instance_families=checks.words(merged["billing"]["gpu_instance_families"], source,
                                         "billing.gpu_instance_families"),
            gpu_sku_words=checks.words(merged["billing"]["gpu_sku_words"], source, "billing.gpu_sku_words"),
            default_currency=checks.currency(merged["billing"]["default_currency"], source, "billing.default_currency"),
            default_provider=checks.optional_text(merged["billing"]["default_provider"], source,
                                            "billing.default_provider"),
        ),
        reconciliation=_reconciliation(merged["reconciliation"], source),
        alerts=_alerts(merged["alerts"], source),
        budgets=_budgets(budgets, source),
        retrospective=_retrospective(merged["retrospective"], source),
        comparison=Comparison(**{key: checks.number(value, source, f"comparison.{key}")
                                 for key, value in merged["comparison"].items()}),
        dashboard=_dashboard(merged["dashboard"], source),
        slurm=Slurm(MappingProxyType({
            name.strip().lower(): checks.price(value, source, f"slurm.partition_gpu_usd_per_hour.{name}")
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




def _ingest(section: dict, file: str) -> Limits:
    ratio = checks.number(section["max_ratio"], file, "ingest.max_ratio")
    if ratio < 1:
        raise ConfigError(file, "ingest.max_ratio", f"must be 1 or more, got {ratio:g}")
    sizes = {key: checks.whole(section[key], file, f"ingest.{key}") for key in ("max_decompressed_bytes", "max_line_bytes")}
    for key, size in sizes.items():
        if size < 1024:
            raise ConfigError(file, f"ingest.{key}", f"must be at least 1024 bytes, got {size}")
    return Limits(max_ratio=ratio, **sizes)



def _gpu(section: dict, file: str) -> Gpu:
    power = checks.number(section["idle_power_max_w"], file, "gpu.idle_power_max_w")
    util = checks.number(section["idle_util_max_pct"], file, "gpu.idle_util_max_pct")
    if util > 100:
        raise ConfigError(file, "gpu.idle_util_max_pct", f"must be a percentage (0 to 100), got {util:g}")
    gap = checks.number(section["max_gap_s"], file, "gpu.max_gap_s")
    if gap <= 0:
        raise ConfigError(file, "gpu.max_gap_s", "must be more than 0 seconds")
    return Gpu(idle_util_max_pct=util,
               idle_min_s=checks.number(section["idle_min_s"], file, "gpu.idle_min_s"),
               idle_power_max_w=power or None,  # 0 means no power condition
               max_gap_s=gap,
               right_size_util_pct=checks.number(section["right_size_util_pct"], file, "gpu.right_size_util_pct"))


def _energy(section: dict, file: str) -> Energy:
    def table(name: str) -> dict[str, float]:
        return {region.strip().lower(): checks.number(value, file, f"energy.{name}.{region}")
                for region, value in section[name].items()}
    return Energy(pue=checks.number(section["pue"], file, "energy.pue"),
                  grid_gco2_per_kwh=checks.number(section["grid_gco2_per_kwh"], file, "energy.grid_gco2_per_kwh"),
                  pue_by_region=MappingProxyType(table("pue_by_region")),
                  grid_gco2_per_kwh_by_region=MappingProxyType(table("grid_gco2_per_kwh_by_region")))



def _reconciliation(section: dict, file: str) -> Reconciliation:
    tags = {}
    for key in ("run_id_tag", "project_tag", "team_tag", "service_tag"):
        value = section[key]
        if not isinstance(value, str) or not value:
            raise ConfigError(file, f"reconciliation.{key}", f"must be a tag name, got {value!r}")
        tags[key] = value
    return Reconciliation(**tags,
                          gap_pct=checks.number(section["gap_pct"], file, "reconciliation.gap_pct"),
                          match_slack_minutes=checks.number(section["match_slack_minutes"], file,
                                                      "reconciliation.match_slack_minutes"))


def _alerts(section: dict, file: str) -> Alerts:
    channel = section["channel"]
    if not isinstance(channel, str):
        raise ConfigError(file, "alerts.channel", f"must be a channel name, got {channel!r}")
    if not isinstance(section["digest"], bool):
        raise ConfigError(file, "alerts.digest", f"must be true or false, got {section['digest']!r}")
    return Alerts(
        burn_spike_factor=checks.number(section["burn_spike_factor"], file, "alerts.burn_spike_factor"),
        burn_spike_baseline_days=checks.whole(section["burn_spike_baseline_days"], file, "alerts.burn_spike_baseline_days"),
        regression_lookback_days=checks.whole(section["regression_lookback_days"], file, "alerts.regression_lookback_days"),
        idle_waste_usd_per_week=checks.price(section["idle_waste_usd_per_week"], file, "alerts.idle_waste_usd_per_week"),
        channel=checks.channel(channel, file, "alerts.channel"),
        digest=section["digest"],
        retry_after_max_s=checks.number(section["retry_after_max_s"], file, "alerts.retry_after_max_s"),
        post_timeout_s=checks.number(section["post_timeout_s"], file, "alerts.post_timeout_s"),
        run_limits=(limits := _run_limits(section, file, "alerts")),
        project_run_limits=MappingProxyType(_project_run_limits(section["run_limits"], limits, file)),
        guardrail_lookback_days=checks.whole(section["guardrail_lookback_days"], file, "alerts.guardrail_lookback_days"),
    )


RUN_LIMIT_KEYS = ("run_max_cost_usd", "run_max_hours", "run_max_gpu_hours")


def _run_limits(section: dict, file: str, where: str, base: RunLimits | None = None) -> RunLimits:
    """The run guardrails of a table of settings (keys it lacks keep `base`'s)."""
    base = base or RunLimits()
    return RunLimits(
        max_cost_usd=checks.price(section["run_max_cost_usd"], file, f"{where}.run_max_cost_usd")
        if "run_max_cost_usd" in section else base.max_cost_usd,
        max_hours=checks.number(section["run_max_hours"], file, f"{where}.run_max_hours")
        if "run_max_hours" in section else base.max_hours,
        max_gpu_hours=checks.number(section["run_max_gpu_hours"], file, f"{where}.run_max_gpu_hours")
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
        amount = checks.price(entry["amount"], file, f"{where}.amount")
        if amount <= 0:
            raise ConfigError(file, f"{where}.amount", "must be more than 0")
        currency = entry.get("currency", "USD")
        if not isinstance(currency, str) or len(currency.strip()) != 3 or not currency.strip().isalpha():
            raise ConfigError(file, f"{where}.currency", f"must be a 3-letter currency code such as USD, got {currency!r}")
        budgets.append(Budget(
            name=name.strip(), scope=scope, scope_value=scope_value, period=period, amount=amount,
            currency=currency.strip().upper(),
            actual_thresholds_pct=checks.percents(entry.get("actual_thresholds_pct", [50, 80, 100]), file,
                                            f"{where}.actual_thresholds_pct"),
            forecast_thresholds_pct=checks.percents(entry.get("forecast_thresholds_pct", [100]), file,
                                              f"{where}.forecast_thresholds_pct"),
            channel=checks.channel(entry.get("channel", ""), file, f"{where}.channel"),
            owner=checks.optional_text(entry.get("owner"), file, f"{where}.owner"),
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
                     low_util_pct=checks.number(section["low_util_pct"], file, "dashboard.low_util_pct"))


def _retrospective(section: dict, file: str) -> Retrospective:
    values = {key: checks.number(section[key], file, f"retrospective.{key}") for key in section}
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
        found[key if not name else f"{table}.{gpu_key(name) if table == 'gpu_usd_per_hour' else name.strip().lower()}"] = value
    if isinstance(user_prices, dict):
        for table in PRICE_TABLES:
            for name in user_prices.get(table) or {}:
                key = f"{table}.{gpu_key(name) if table == 'gpu_usd_per_hour' else name.strip().lower()}"
                if key not in found and kind == "source":
                    found[key] = f"your settings file {file}"
    return found
