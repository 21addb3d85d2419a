"""The bill SQL's slow fallbacks (a charge category by its normalised key, a time in a rarer
spelling) give the values billing.py gives, and stay inside their branch: DuckDB's
common-subexpression pass must not hoist them out to run on every value (ingest/formats/billing/bill_sql.py)."""
from __future__ import annotations

import json
import re
from datetime import datetime, timezone

import duckdb
import pytest

from ingest.formats.billing import bill_sql

CATEGORIES = {"usage": "usage", "credit": "credit", "tax": "tax"}


@pytest.fixture()
def con():
    connection = duckdb.connect()
    connection.execute("SET TimeZone = 'UTC'")
    bill_sql.install(connection)
    yield connection
    connection.close()


def _expected_category(raw: str | None) -> str | None:
    """billing.py's rule, written out: the plain lower-case spelling, else letters and digits only."""
    if raw is None:
        return None
    return CATEGORIES.get(raw.lower(), CATEGORIES.get(re.sub(r"[^a-z0-9]", "", raw.lower())))


def test_mapping_falls_back_to_the_normalised_key(con):
    raws = ["Usage", "USAGE", "us-age", "Credit!", " t a x ", "refund", "", None]
    con.execute("CREATE TABLE t (i INTEGER, c VARCHAR)")
    con.executemany("INSERT INTO t VALUES (?, ?)", list(enumerate(raws)))
    got = [row[0] for row in con.execute(f"SELECT {bill_sql.mapping('c', CATEGORIES)} FROM t ORDER BY i").fetchall()]
    assert got == [_expected_category(raw) for raw in raws]
    assert got[:5] == ["usage", "usage", "usage", "credit", "tax"]


def test_moment_slow_spellings(con):
    cases = {
        "2026-10-01T05:06:07Z": datetime(2026, 10, 1, 5, 6, 7, tzinfo=timezone.utc),
        "2026-10-01 05:06:07": datetime(2026, 10, 1, 5, 6, 7, tzinfo=timezone.utc),
        "2026-10-01": datetime(2026, 10, 1, tzinfo=timezone.utc),
        "2026-10-01 05:06:07 UTC": datetime(2026, 10, 1, 5, 6, 7, tzinfo=timezone.utc),
        "10/01/2026 1:30 PM": datetime(2026, 10, 1, 13, 30, tzinfo=timezone.utc),
        "2026/10/01 05:06:07": datetime(2026, 10, 1, 5, 6, 7, tzinfo=timezone.utc),
        "2026-10-01T05:06:07+02:00": datetime(2026, 10, 1, 3, 6, 7, tzinfo=timezone.utc),
        "1790000000": datetime.fromtimestamp(1790000000, timezone.utc),
        "soon": None,
    }
    con.execute("CREATE TABLE t (i INTEGER, s VARCHAR)")
    con.executemany("INSERT INTO t VALUES (?, ?)", [(i, s) for i, s in enumerate([*cases, None])])
    got = con.execute("SELECT epoch_us(bill_moment_of(s)) FROM t ORDER BY i").fetchall()
    expected = [None if t is None else int(t.timestamp()) * 1_000_000 for t in [*cases.values(), None]]
    assert [row[0] for row in got] == expected


def _hoisted(con, sql: str) -> list[str]:
    """The expressions DuckDB's physical plan computes in projections of its own (every row)."""
    plan = json.loads(con.execute("EXPLAIN (FORMAT JSON) " + sql).fetchall()[0][1])
    found: list[str] = []

    def walk(node):
        projections = node.get("extra_info", {}).get("Projections", [])
        found.extend([projections] if isinstance(projections, str) else projections)
        for child in node.get("children", []):
            walk(child)

    for node in plan:
        walk(node)
    return found


def test_fallbacks_are_not_hoisted_to_every_value(con):
    con.execute("CREATE TABLE t (c VARCHAR, s VARCHAR)")
    sql = (f"SELECT {bill_sql.mapping('c', CATEGORIES)} AS category, bill_moment_of(s) AS a, "
           "bill_moment_of(s) IS NULL AS b FROM t")
    hoisted = " ".join(_hoisted(con, sql))
    assert "regexp_replace" not in hoisted  # bill_key(): only for values the plain lookup missed
    assert "upper(s)" not in hoisted  # bill_unzoned(): only for times the fast spellings missed
