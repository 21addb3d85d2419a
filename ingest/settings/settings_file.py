"""Changing the settings file from the dashboard: budgets and the idle rule, written where the CLI and
`mlcost alerts check` read them (config.user_path(), else ./mlcost.toml), comments and layout kept
(tomlkit), and checked by the same code as any hand-written file (config.check_text) before a byte
is written."""
from __future__ import annotations

import os
import tempfile
from decimal import Decimal
from collections.abc import Callable
from pathlib import Path

import tomlkit

from ingest.settings import config

BUDGET_DEFAULTS = {"scope": "all", "period": "month", "currency": "USD",
                   "actual_thresholds_pct": [50, 80, 100], "forecast_thresholds_pct": [100]}


def target() -> Path:
    """The file the dashboard writes: the one mlcost reads ($MLCOST_CONFIG or ./mlcost.toml), else a new ./mlcost.toml."""
    return config.user_path() or config.local_path()


def save_budget(entry: dict, replaces: str | None = None) -> config.Config:
    """Add the [[budgets]] table `entry` (name, scope, period, amount, ...), or replace the budget named
    `replaces`; returns the settings as they now read. ConfigError (nothing written) when the result
    would not be usable, with the same message a hand edit gets."""
    def edit(document: tomlkit.TOMLDocument, path: Path) -> None:
        _put_budget(document, entry, replaces)
    return _change(edit)


def _put_budget(document: tomlkit.TOMLDocument, entry: dict, replaces: str | None) -> None:
    budgets = document.get("budgets")
    if budgets is None:
        budgets = tomlkit.aot()
        document.append("budgets", budgets)
    table = tomlkit.table()
    for key, value in _clean(entry).items():
        table.add(key, value)
    names = [str(b.get("name", "")).strip() for b in budgets]
    if replaces is not None and replaces in names:
        budgets[names.index(replaces)] = table
    else:
        budgets.append(table)


def delete_budget(name: str) -> config.Config:
    """Remove the budget `name` from the settings file; returns the settings as they now read."""
    def edit(document: tomlkit.TOMLDocument, path: Path) -> None:
        budgets = document.get("budgets") or []
        kept = [b for b in budgets if str(b.get("name", "")).strip() != name]
        if len(kept) == len(budgets):
            raise config.ConfigError(str(path), "budgets", f"has no budget named {name!r}")
        if kept:
            array = tomlkit.aot()
            for budget in kept:
                array.append(budget)
            document["budgets"] = array
        else:
            del document["budgets"]
    return _change(edit)


def save_idle_rule(idle_util_max_pct: float, idle_min_s: float, idle_power_max_w: float) -> config.Config:
    """Set [gpu] idle_util_max_pct, idle_min_s and idle_power_max_w (0: no power condition); returns the
    settings as they now read. The stored GPU rollups then need warehouse.rebuild_gpu_rollups()."""
    def edit(document: tomlkit.TOMLDocument, path: Path) -> None:
        gpu = document.get("gpu")
        if gpu is None:
            gpu = tomlkit.table()
            document.add("gpu", gpu)
        for key, value in (("idle_util_max_pct", idle_util_max_pct), ("idle_min_s", idle_min_s),
                           ("idle_power_max_w", idle_power_max_w)):
            gpu[key] = _number(value)
    return _change(edit)


def _change(edit: Callable[[tomlkit.TOMLDocument, Path], None]) -> config.Config:
    """Read the settings file, let `edit` change it, then write it checked (see _write)."""
    path = target()
    document = _document(path)
    edit(document, path)
    return _write(path, document)


def _document(path: Path) -> tomlkit.TOMLDocument:
    if not path.is_file():
        return tomlkit.document()
    try:
        return tomlkit.parse(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise config.ConfigError(str(path), None, f"cannot be read ({error.strerror or error})") from None
    except tomlkit.exceptions.ParseError as error:
        raise config.ConfigError(str(path), None, f"is not valid TOML: {error}") from None


def _write(path: Path, document: tomlkit.TOMLDocument) -> config.Config:
    """Check the new text as load() would, then replace the file in one step (never half written)."""
    text = tomlkit.dumps(document)
    checked = config.check_text(text, path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return checked


def _clean(entry: dict) -> dict:
    """The entry's keys as TOML values: empty text and None left out, amounts as numbers."""
    cleaned = {}
    for key, value in entry.items():
        if value is None or (isinstance(value, str) and not value.strip()):
            continue
        if isinstance(value, Decimal):
            value = _number(value)
        cleaned[key] = value
    return cleaned


def _number(value: object) -> int | float | object:
    """A whole number as an int (TOML `10000`, not `10000.0`), other numbers as float; else as given."""
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
        return value
    return int(value) if value == int(value) else float(value)
