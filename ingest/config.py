"""mlcost's settings: the shipped defaults (ingest/defaults.toml) under the user's mlcost.toml.

The user file is the one $MLCOST_CONFIG names, else ./mlcost.toml when it exists. Its keys
override the defaults one by one; a key mlcost does not know, or a value it cannot use, is a
ConfigError naming the file and the key.
"""
from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from importlib import resources
from pathlib import Path
from types import MappingProxyType

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

    def instance(self, instance_type: str | None) -> Decimal | None:
        """USD per hour of one instance of this type, or None when the catalog lacks it."""
        return None if instance_type is None else self.instance_usd_per_hour.get(instance_type.strip().lower())

    def gpu(self, gpu_type: str | None) -> Decimal | None:
        """USD per hour of one GPU of this model, or None when the catalog lacks it."""
        return None if gpu_type is None else self.gpu_usd_per_hour.get(_gpu_key(gpu_type))


@dataclass(frozen=True)
class Serving:
    """When a model version counts as a regression (see app/queries.py serving_version_changes)."""

    regression_pct: float
    min_requests: int


@dataclass(frozen=True)
class Config:
    prices: Prices
    serving: Serving
    user_file: Path | None = None


def user_path() -> Path | None:
    """The user's settings file: $MLCOST_CONFIG (which must exist), else ./mlcost.toml if present."""
    named = os.environ.get("MLCOST_CONFIG")
    if named:
        path = Path(named).expanduser()
        if not path.is_file():
            raise ConfigError(named, None, "no such file (named by $MLCOST_CONFIG)")
        return path
    local = Path(USER_FILE)
    return local if local.is_file() else None


def load(path: Path | None = None) -> Config:
    """The defaults with the user file (`path`, else user_path()) laid over them, checked."""
    defaults = tomllib.loads(resources.files("ingest").joinpath(DEFAULTS).read_text())
    path = path or user_path()
    merged = _merge(defaults, _read(path) if path else {}, str(path))
    source = str(path) if path else f"ingest/{DEFAULTS}"
    prices = Prices(**{
        table: MappingProxyType({
            (_gpu_key(name) if table == "gpu_usd_per_hour" else name.strip().lower()):
                _price(value, source, f"prices.{table}.{name}")
            for name, value in merged["prices"][table].items()
        })
        for table in PRICE_TABLES
    })
    serving = merged["serving"]
    return Config(
        prices=prices,
        serving=Serving(
            regression_pct=_number(serving["regression_pct"], source, "serving.regression_pct"),
            min_requests=_whole(serving["min_requests"], source, "serving.min_requests"),
        ),
        user_file=path,
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


def _gpu_key(name: str) -> str:
    key = name.strip().lower()
    for prefix in GPU_NAME_PREFIXES:
        key = key.removeprefix(prefix)
    return key
