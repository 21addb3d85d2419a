"""TEMPORARY (deleted with tests/old_billing_focus.py once equal): the FOCUS definition
(ingest/formats/billing/billing_focus.py read by bill_definition.py) against the hand-written
`build` + `plan` it replaces, over every FOCUS file we have, the fuzz cases of tests/test_fuzz.py and
lines breaking every check: the same rows, totals, accepted counts and rejects (line, reason, raw),
both through stage() (SQL + per-record) and parse() (per-record only)."""
from __future__ import annotations

import gzip
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ingest.formats.billing import billing_focus
from tests import old_billing_focus
from tests.bill_equivalence import parsed, staged
from tests.test_bill_stage import bill_files, focus_parquet
from tests.test_fuzz import FAMILIES, broken_lines

HEADER = ("BilledCost,EffectiveCost,ListCost,BillingCurrency,ChargePeriodStart,ChargePeriodEnd,BillingPeriodStart,"
          "BillingPeriodEnd,ChargeCategory,ProviderName,ConsumedQuantity,PricingCategory,Tags,ChargeDescription,"
          "SkuPriceDetails,x_LineItemId\n")
GOOD = ["1", "1", "1", "USD", "2026-08-01", "2026-08-02", "2026-08-01", "2026-09-01", "Usage", "AWS", "1",
        "Standard", "", "p4d.24xlarge hour", "", "id"]
# (column index, value): each breaks one check (or sends the line to the per-record reader)
BREAKS = [(0, ""), (0, "abc"), (0, "1_000"), (0, "NaN"), (0, "1e400"), (0, "123456789012345678901234567"),
          (1, "x"), (2, "inf"), (3, ""), (4, ""), (4, "13/45/26"), (4, "3/15/2024 13:05 PM"), (4, "1989-12-31"),
          (4, "1700000000000"), (4, "nope"), (4, "2026-08-01 00:00:00 UTC"), (4, "8/1/26"), (5, "x"), (6, "2200-01-01"),
          (7, "1/1/1"), (8, ""), (8, "Refund"), (8, "usage"), (9, ""), (10, "x"), (10, "1e999"), (11, "Dynamic"),
          (11, "Other"), (12, '"{\'team\': \'a\'}"'), (12, "not tags"), (12, '"{""a"": 1, ""b"": true}"'),
          (12, '"{"""": ""x""}"'), (12, '"[{""key"": ""a"", ""value"": ""b""}]"'), (12, '"""x"": ""y"""'),
          (12, '"{""a"": ""b"", ""a"": ""c""}"'), (12, "null"), (12, "[1, 2]"), (13, "a2-highgpu-1g"),
          (14, "g5.xlarge"), (15, ""), (9, "NULL"), (0, " 12 "), (3, "EUR")]


def same(path: Path) -> None:
    for run in (staged, parsed):
        new, old = run(billing_focus, path, "bill"), run(old_billing_focus, path, "bill")
        assert new == old, run.__name__


@pytest.mark.parametrize("path", [p for family, p in bill_files() if family == "focus"], ids=lambda p: p.name)
def test_every_focus_file(path):
    same(path)


def test_every_check(tmp_path):
    lines = []
    for index, value in BREAKS:
        fields = list(GOOD)
        fields[index] = value
        fields[-1] = f"id-{len(lines)}"
        lines.append(",".join(fields))
    path = tmp_path / "checks.csv"
    path.write_text(HEADER + "\n".join(lines) + "\n")
    same(path)
    json_lines = tmp_path / "checks.jsonl"  # the per-record reader only (JSON lines)
    json_lines.write_text('{"BilledCost": "1", "BillingCurrency": "USD", "ChargePeriodStart": "2026-08-01", '
                          '"ChargeCategory": "Usage", "ProviderName": ["x"], "Tags": {"a": 1}}\n'
                          '{"BilledCost": 2, "BillingCurrency": "USD", "ChargePeriodStart": "2026-08-01", '
                          '"ChargeCategory": "Usage", "ProviderName": "AWS", "Tags": {"a": "b"}}\n')
    same(json_lines)


def test_parquet(tmp_path):
    same(focus_parquet(tmp_path / "focus.parquet"))
    nested = tmp_path / "nested.parquet"
    pq.write_table(pa.table({
        "BilledCost": ["1", "2"], "BillingCurrency": ["USD"] * 2, "ChargePeriodStart": ["2026-08-01"] * 2,
        "ChargeCategory": ["Usage"] * 2, "ProviderName": ["AWS"] * 2,
        "SkuPriceDetails": pa.array([["g5.xlarge"], None], pa.list_(pa.string())),
    }), nested)
    same(nested)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), packed=st.booleans())
def test_fuzz_cases(tmp_path_factory, data, packed):
    suffix, base, shape = FAMILIES["focus"]
    lines = data.draw(broken_lines(base(), shape))
    path = tmp_path_factory.mktemp("eq") / f"f{suffix}"
    text = ("\n".join(lines) + "\n").encode("utf-8", errors="replace")
    if len(text) > 2_000_000:  # the overlong lines: the loader refuses those before any parser
        return
    path.write_bytes(gzip.compress(text) if packed else text)
    try:
        same(path)
    except Exception as error:  # both must raise the same error, if any
        with pytest.raises(type(error)):
            staged(old_billing_focus, path, "bill")
