"""What happened to one ingested file (FileSummary, made by the loader and the importers' ledger) and its
human-readable validation report, shared by the CLI and the Data page."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import ROUND_HALF_UP, Decimal

REJECTS_SHOWN = 10


@dataclass
class FileSummary:
    """What happened to one file; `to_json` is the --json record."""

    path: str
    kind: str | None = None
    status: str = "failed"  # loaded | rejected (every line refused) | already_loaded | not_data | failed
    rows_loaded: int = 0
    rows_rejected: int = 0
    rejects: list[dict] = field(default_factory=list)
    totals: dict = field(default_factory=dict)
    error: str | None = None
    replaced: list[int] = field(default_factory=list)  # earlier loads of this file, read otherwise
    warnings: list[str] = field(default_factory=list)
    merge_s: float | None = None  # seconds the warehouse was locked to merge this file (None: no merge)

    @property
    def ok(self) -> bool:
        return self.status != "failed" and self.rows_rejected == 0

    def to_json(self) -> dict:
        record = {
            "path": self.path, "kind": self.kind, "status": self.status,
            "rows_loaded": self.rows_loaded, "rows_rejected": self.rows_rejected,
            "rejects": self.rejects, **self.totals,
        }
        if self.error:
            record["error"] = self.error
        if self.replaced:
            record["replaced_load_ids"] = self.replaced
        if self.warnings:
            record["warnings"] = self.warnings
        if self.merge_s is not None:
            record["merge_s"] = round(self.merge_s, 3)
        return record


CENT = Decimal("0.01")

TOTAL_LABELS = {
    "runs": "runs",
    "windows": "serving windows",
    "requests_total": "requests",
    "cost_usd_total": "estimated cost (USD)",
    "windows_cost_derived": "windows priced from the catalog",
    "windows_without_cost": "windows without cost",
    "energy_kwh_total": "measured energy (kWh)",
    "windows_energy_kwh_total": "serving windows' energy (kWh)",
    "gpus": "GPUs",
    "samples": "samples",
    "first_ts": "from",
    "last_ts": "to",
    "lines": "bill lines",
    "billed_cost_total": "billed",
    "effective_cost_total": "effective cost",
    "charge_period_min": "charges from",
    "charge_period_max": "to",
}
MONEY = {"cost_usd_total", "billed_cost_total", "effective_cost_total"}  # exact in --json, cents here


def summary_lines(summary: FileSummary) -> list[str]:
    """One headline, the totals, then each shown reject as `path:line: reason`."""
    if summary.error:
        return [f"FAILED {summary.error}"]
    if summary.status == "not_data":
        return [f"SKIPPED {summary.path}: {'; '.join(summary.warnings)}"]
    if summary.status == "already_loaded":
        return [f"SKIPPED {summary.path}: already loaded (same content, kind {summary.kind}); nothing changed"]
    verdict = ("OK" if summary.rows_rejected == 0 else "REJECTED" if summary.rows_loaded == 0
               else "PARTLY LOADED")
    replaced = (f"; replaces load {', '.join(map(str, summary.replaced))} of the same file read with "
                "another kind or other options" if summary.replaced else "")
    lines = [f"{verdict} {summary.path} [{summary.kind}]: {summary.rows_loaded:,} rows loaded, "
             f"{summary.rows_rejected:,} rejected{replaced}"]
    lines += [f"  warning: {warning}" for warning in summary.warnings]
    figures = [f"{label} {_figure(summary.totals[key], key in MONEY)}" for key, label in TOTAL_LABELS.items()
               if summary.totals.get(key) is not None]
    if figures:
        lines.append("  " + "; ".join(figures))
    lines += [f"  {summary.path}:{r['line']}: {r['reason']}" for r in summary.rejects]
    hidden = summary.rows_rejected - len(summary.rejects)
    if hidden > 0:
        lines.append(f"  ... and {hidden:,} more rejected lines (see the Data page or the rejects table)")
    return lines


def _figure(value: object, money: bool = False) -> str:
    """A total as text: counts with thousands separators ('618,171,801'), measured quantities to 2
    decimals ('6,574.31', '4.5'), amounts per currency (bills) as 'USD 1,012.50, EUR 3.00' (never added up)."""
    text = _money if money else _number
    if isinstance(value, dict):
        return ", ".join(f"{currency} {text(amount)}" for currency, amount in value.items()) or "nothing"
    return text(value)


def _number(value: object) -> str:
    """An integer with separators, any other number to at most 2 decimals with separators, an instant as
    '2026-11-01 00:00 UTC', other text as it is."""
    if isinstance(value, str):
        try:  # an instant: '2026-11-01 00:00 UTC', not ISO 8601 with its offset
            instant = datetime.fromisoformat(value)
        except ValueError:
            return value
        if instant.tzinfo is not None:
            instant = instant.astimezone(timezone.utc)
        return f"{instant:%Y-%m-%d %H:%M}" + (" UTC" if instant.tzinfo is not None else "")
    if isinstance(value, datetime):
        return _number(value.isoformat())
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal)):
        return str(value)
    if isinstance(value, int) or (isinstance(value, Decimal) and value == value.to_integral_value()):
        return f"{int(value):,}"
    return f"{float(value):,.2f}".rstrip("0").rstrip(".")  # '4.5', '6,574.31'


def _money(amount: object) -> str:
    """Decimal text rounded half-up to cents with thousands separators: '32565.9952' -> '32,566.00'."""
    return f"{Decimal(str(amount)).quantize(CENT, rounding=ROUND_HALF_UP):,}"
