"""Where every importer's records enter the warehouse: the one call to warehouse.load for imports,
and the per-source watermarks that make imports incremental."""
from __future__ import annotations

import hashlib
from datetime import datetime, timezone

from ingest.engine import warehouse
from ingest.engine.contract import Parsed
from ingest.engine.report import REJECTS_SHOWN, FileSummary


def load_import(source: str, kind: str, parsed: Parsed, content: bytes, totals: dict) -> FileSummary:
    """Load one import's records through the ledger (the same content twice is a no-op); its summary."""
    sha256 = hashlib.sha256(content).hexdigest()
    result = warehouse.load(source, sha256, kind, parsed)
    summary = FileSummary(source, kind, status="already_loaded" if result.already_loaded else "loaded")
    if not result.already_loaded:
        summary.rows_loaded, summary.rows_rejected = result.rows_loaded, result.rows_rejected
        summary.rejects = [{"line": r.line, "reason": r.reason} for r in parsed.rejects[:REJECTS_SHOWN]]
        summary.totals = totals
        summary.warnings = list(parsed.warnings) + result.warnings  # e.g. a GPU energy counter that never rose
    return summary


def watermark(source: str) -> str | None:
    """The watermark the last import of this source left (opaque text, e.g. epoch ms), if any."""
    frame = warehouse.query("SELECT watermark FROM import_watermarks WHERE source = ?", [source])
    return None if frame.empty else str(frame["watermark"][0])


def set_watermark(source: str, kind: str, value: str) -> None:
    """Remember how far this source has been imported."""
    warehouse.execute([
        ("DELETE FROM import_watermarks WHERE source = ?", [source]),
        ("INSERT INTO import_watermarks VALUES (?, ?, ?, ?)", [source, kind, value, datetime.now(timezone.utc)]),
    ])
