"""A harness comparing a bill module's columnar `stage()` with its row-by-row `parse()`.

`staged(module, path)` runs stage() on a fresh staging database (ingest/engine/staging.py) and returns
the staged lines, rejects, records accepted and totals; `parsed(module, path)` returns the same
from today's parse()/parse_bytes() as the loader calls them. Rows are compared as dicts with
tags as dicts and times in UTC, keyed and sorted by line_key.
"""
from __future__ import annotations

import gzip
from datetime import timezone
from pathlib import Path

from ingest.engine.contract import ParseContext, numbered
from ingest.engine.staging import Source, open_stage
from ingest.formats.billing import bill_family

UTC = timezone.utc


def _plain(row: dict) -> dict:
    row = {k: row[k] for k in bill_family.LINE_COLUMNS}
    tags = row["tags"]
    row["tags"] = dict(tags) if tags else None
    for key in ("charge_period_start", "charge_period_end", "billing_period_start", "billing_period_end"):
        if row[key] is not None:
            row[key] = row[key].astimezone(UTC)
    return row


def staged(module, path: Path, name: str | None = None) -> dict:
    """What stage() puts in the staging tables for this file."""
    con = open_stage()
    try:
        src = Source.of(path, name)
        result = module.stage(src, con, ParseContext(src.name, UTC))
        cursor = con.execute(f"SELECT {', '.join(bill_family.LINE_COLUMNS)} FROM billing_lines")
        rows = [_plain(dict(zip(bill_family.LINE_COLUMNS, r))) for r in cursor.fetchall()]
        rejects = con.execute("SELECT line, reason, raw FROM rejects ORDER BY line").fetchall()
    finally:
        con.close()
    return {"rows": sorted(rows, key=lambda r: r["line_key"]), "rejects": [tuple(r) for r in rejects],
            "accepted": result.accepted, "totals": result.totals}


def parsed(module, path: Path, name: str | None = None) -> dict:
    """What today's parse() makes of this file (as loader.ingest_file calls it)."""
    raw = path.read_bytes()
    data = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    ctx = ParseContext(name or str(path), UTC)
    result = (module.parse_bytes(data, ctx) if data[:4] == b"PAR1"
              else module.parse(numbered(data.decode("utf-8-sig").split("\n")), ctx))
    rows = [_plain(r) for r in result.tables.get(bill_family.TABLE, [])]
    return {"rows": sorted(rows, key=lambda r: r["line_key"]),
            "rejects": [(r.line, r.reason, r.raw[:500]) for r in sorted(result.rejects, key=lambda r: r.line)],
            "accepted": result.accepted, "totals": module.totals(result)}
