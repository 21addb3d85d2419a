"""The allocation macro (schema.sql bill_allocation), piece by piece, against tests/oracle.py: every
piece of every bill line (line, bucket, rule, run, model version, amount) is the one the oracle
computes from the input files with the standard library and the rules of docs/allocation.md, and
a line's pieces add up to the line exactly. On the sample's four months and on a small hand-made
case whose figures are also worked out by hand below.
"""
from __future__ import annotations

import json
import shutil
from collections import defaultdict
from datetime import date, datetime, timezone
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import duckdb
import pytest

from ingest.pipeline import loader
from ingest.settings import config
from metrics import allocation
from tests import oracle
from tests.conftest import SAMPLE_DIR

PIECES = """
SELECT b.source_line_id, a.bucket, a.rule, a.run_id, a.model_version, a.effective_cost, a.line_effective_cost
FROM bill_allocation($start, $end, $run_tag, $slack_s, $service_tag, $families::VARCHAR[], $words::VARCHAR[],
                     stored := $stored) a
JOIN billing_lines b USING (line_key)
"""
NEAR = Fraction(1, 10 ** 9)  # the macro rounds each piece to 12 decimals; the oracle is exact


def params(start: date, end: date, rules: allocation.Rules, stored: bool) -> dict:
    return {"start": datetime(start.year, start.month, start.day, tzinfo=timezone.utc),
            "end": datetime(end.year, end.month, end.day, tzinfo=timezone.utc),
            "run_tag": rules.run_tag, "slack_s": rules.slack_s, "service_tag": rules.service_tag,
            "families": list(rules.families), "words": list(rules.words), "stored": stored}


def program_pieces(db: Path, tmp_path: Path, start: date, end: date, rules: allocation.Rules,
                   stored: bool = False) -> dict:
    """The macro's pieces of [start, end) read from a copy of `db`, keyed as the oracle keys them
    (the bill's line id, bucket, rule, run, model version); asserts each line's pieces add up to it."""
    copy = tmp_path / "pieces.duckdb"
    shutil.copyfile(db, copy)
    with duckdb.connect(str(copy), read_only=True) as con:
        rows = con.execute(PIECES, params(start, end, rules, stored)).fetchall()
    per_line: dict[str, Decimal] = defaultdict(Decimal)
    line_cost: dict[str, Decimal] = {}
    pieces: dict[tuple, Fraction] = defaultdict(Fraction)
    for line, bucket, rule, run_id, version, cost, whole in rows:
        per_line[line] += cost
        line_cost[line] = whole
        if cost:
            pieces[(line, bucket, rule, run_id, version)] += Fraction(cost)
    assert per_line == line_cost  # every billed unit lands once: no line short or over by a digit
    return dict(pieces)


def assert_same_pieces(found: dict, expected: dict) -> None:
    """The same pieces with the same amounts (within NEAR); a piece too small to survive the
    macro's 12-decimal rounding may be missing from it."""
    missing = {key for key in set(expected) - set(found) if abs(expected[key]) > NEAR}
    assert not missing and set(found) <= set(expected), {
        "program only": sorted(set(found) - set(expected), key=str)[:5], "oracle only": sorted(missing, key=str)[:5]}
    wrong = {key: (float(found.get(key, 0)), float(value)) for key, value in expected.items()
             if abs(found.get(key, 0) - value) > NEAR}
    assert not wrong, list(wrong.items())[:5]


@pytest.mark.parametrize("month", oracle.SAMPLE_MONTHS)
def test_the_sample_bill_is_cut_as_the_oracle_cuts_it(demo_db, tmp_path, month):
    rules = allocation.Rules.of(config.load(SAMPLE_DIR / "mlcost.toml"))
    start, end = oracle.month_bounds(month)
    expected = oracle.sample().allocation(start, end)
    assert sum(1 for key in expected.pieces if key[1] == "idle_gpu") > 0  # the nodes' lines are split
    assert_same_pieces(program_pieces(demo_db, tmp_path, start, end, rules), expected.pieces)
    # The stored line-to-run matches (billing_line_runs) give the same pieces as matching anew.
    assert_same_pieces(program_pieces(demo_db, tmp_path, start, end, rules, stored=True), expected.pieces)


BILL = """BilledCost,EffectiveCost,BillingCurrency,ChargePeriodStart,ChargePeriodEnd,ChargeCategory,\
ProviderName,ServiceName,ResourceId,ResourceName,Tags,x_LineItemId
10,10,EUR,2026-01-05 10:00:00,2026-01-05 11:00:00,Usage,AWS,EC2,i-1,n1,{},li-1
7.01,7.01,USD,2026-01-05 10:00:00,2026-01-05 10:30:00,Usage,AWS,EC2,i-1,n1,{},li-2
0.000000000001,0.000000000001,USD,2026-01-05 10:30:00,2026-01-05 11:00:00,Usage,AWS,EC2,i-1,n1,{},li-3
5.55,5.55,USD,2026-01-05 10:00:00,2026-01-05 11:00:00,Usage,AWS,SageMaker,ep-1,,"{""service"": ""chat""}",li-4
3,3,USD,2026-01-05 10:00:00,2026-01-05 11:00:00,Usage,AWS,SageMaker,ep-2,,"{""service"": ""quiet""}",li-5
2.5,2.5,USD,2026-01-05 10:00:00,2026-01-05 11:00:00,Usage,AWS,EC2,i-9,,"{""run_id"": ""r1""}",li-6
1.5,1.5,USD,2026-01-05 10:00:00,2026-01-05 11:00:00,Tax,AWS,Tax,,,{},li-7
-0.4,-0.4,USD,2026-01-05 10:00:00,2026-01-05 11:00:00,Credit,AWS,EC2,,,{},li-8
"""


def hand_made_case(tmp_path: Path) -> dict:
    """A node n1 of 3 GPUs sampled every 2 minutes 10:00-10:58 (each sample stands for 120 s):
    GPU 0 busy all hour (run r1 holds it 10:00-11:00), GPU 1 busy until 10:20 (run r2 holds it
    10:00-10:20) then at 0 %, GPU 2 at 0 % all hour; a service chat with two versions' windows
    (costs 1 and 2), a service without windows; the bill BILL. Returns the files."""
    trace = tmp_path / "n1_2026-01.csv"
    lines = ["timestamp,host,gpu_index,gpu_uuid,gpu_name,power_w,energy_mj,gpu_util_pct,mem_used_mib"]
    for minute in range(0, 60, 2):
        for gpu in range(3):
            util = 90 if gpu == 0 or (gpu == 1 and minute < 20) else 0
            lines.append(f"2026-01-05T10:{minute:02d}:00Z,n1,{gpu},GPU-{gpu},NVIDIA L4,50,,{util},0")
    trace.write_text("\n".join(lines) + "\n")
    run = {"project": "p", "team": "t", "price_per_hour_usd": 1, "host": "n1", "gpu_type": "NVIDIA L4"}
    runs = tmp_path / "runs.jsonl"
    runs.write_text("\n".join(json.dumps({**run, **more}) for more in (
        {"run_id": "r1", "start_time": "2026-01-05T10:00:00Z", "end_time": "2026-01-05T11:00:00Z", "gpu_indices": [0]},
        {"run_id": "r2", "start_time": "2026-01-05T10:00:00Z", "end_time": "2026-01-05T10:20:00Z", "gpu_indices": [1]},
    )) + "\n")
    window = {"service": "chat", "requests_total": 10, "requests_success": 10, "requests_error": 0,
              "latency_ms_p50": 1, "latency_ms_p95": 2, "latency_ms_p99": 3}
    serving = tmp_path / "serving.jsonl"
    serving.write_text("\n".join(json.dumps({**window, **more}) for more in (
        {"window_start": "2026-01-05T10:00:00Z", "window_end": "2026-01-05T11:00:00Z", "model_version": "v1",
         "cost_usd": 1},
        {"window_start": "2026-01-05T10:00:00Z", "window_end": "2026-01-05T11:00:00Z", "model_version": "v2",
         "cost_usd": 2},
    )) + "\n")
    bill = tmp_path / "bill.csv"
    bill.write_text(BILL)
    settings = tmp_path / "mlcost.toml"
    settings.write_text("[reconciliation]\nmatch_slack_minutes = 0\n"
                        "[billing]\ngpu_instance_families = [\"p4d\"]\ngpu_sku_words = [\"gpu\"]\n")
    return {"runs": runs, "serving": serving, "traces": [trace], "bills": [bill], "config": settings}


def test_lines_of_many_pieces_are_cut_as_the_oracle_and_by_hand(warehouse, tmp_path):
    """Thirds that divide no cent, a line too small to split, a service with two model versions, a
    service without windows, a run's tagged line, a tax, a credit; two currencies never added."""
    files = hand_made_case(tmp_path)
    loaded = [str(files["traces"][0]), str(files["runs"]), str(files["serving"]), str(files["bills"][0])]
    for _, summary in loader.ingest_paths(loaded):
        assert summary.ok and summary.rows_rejected == 0, summary
    found = oracle.Oracle.of(**files).allocation(date(2026, 1, 1), date(2026, 2, 1))
    F = Fraction
    node, cheap = "node GPU-hours share", "idle GPU-hours x node rate"
    # By hand. li-1 (10 EUR, 10:00-11:00): capacity 3 GPUs x 3600 s; r1 3600 s, r2 1200 s, idle 2400 s
    # (GPU 1 from 10:20) + 3600 s (GPU 2) = 6000 s; nothing left over.
    # li-2 (7.01 USD, 10:00-10:30): capacity 5400 s; r1 1800, r2 1200, idle 600 + 1800 = 2400.
    # li-4 (5.55, chat): v1 and v2 by their windows' cost 1 : 2. li-5: a service with no window.
    assert found.pieces == {
        ("li-1", "training", node, "r1", None): F(10) / 3, ("li-1", "training", node, "r2", None): F(10) / 9,
        ("li-1", "idle_gpu", cheap, None, None): F(50, 9),
        ("li-2", "training", node, "r1", None): F("7.01") / 3,
        ("li-2", "training", node, "r2", None): F("7.01") * 2 / 9,
        ("li-2", "idle_gpu", cheap, None, None): F("7.01") * 4 / 9,
        ("li-3", "training", node, "r1", None): F("1e-12") / 3,
        ("li-3", "idle_gpu", cheap, None, None): F("1e-12") * 2 / 3,
        ("li-4", "serving", "service tag, versions by window cost", None, "v1"): F("1.85"),
        ("li-4", "serving", "service tag, versions by window cost", None, "v2"): F("3.70"),
        ("li-5", "serving", "service tag, no serving windows in the charge period", None, None): F(3),
        ("li-6", "training", "run tag", "r1", None): F("2.5"),
        ("li-7", "shared", "tax", None, None): F("1.5"), ("li-8", "shared", "credit", None, None): F("-0.4"),
    }
    usd = F("7.01") + F("1e-12") + F("5.55") + 3 + F("2.5") + F("1.5") - F("0.4")
    assert found.billed == {"EUR": F(10), "USD": usd}
    rules = allocation.Rules(run_tag="run_id", slack_s=0, service_tag="service", team_tag="team",
                             project_tag="project", families=("p4d",), words=("gpu",))
    assert_same_pieces(program_pieces(warehouse, tmp_path, date(2026, 1, 1), date(2026, 2, 1), rules), found.pieces)


def test_the_gpu_word_rule_is_any_word_on_its_own(warehouse):
    """gpu_line_rule's word test (one pattern for all words) says what testing each word apart
    with Python's re says: a word counts only between word boundaries, regex characters are
    plain text, and no words match nothing."""
    import re

    from ingest.engine import warehouse as store

    descriptions = ["2x NVIDIA A100 80GB", "a100x is not a GPU", "Tesla T4 (spot)", "t4g.medium burstable",
                    "gpu-hours", "GPUs", "c++ build box", "p4d.24xlarge", "", None, "h100 h100", "L4 l40s", "nogpu here", "xh100"]
    for words in (["a100", "t4", "gpu"], ["c++", "p4d.24xlarge"], ["l40s", "a100x"], [], ["h100"]):
        with store.connect() as con:
            got = [row[0] for row in con.execute(
                "SELECT gpu_line_rule(NULL, 'Compute', d, []::VARCHAR[], ?::VARCHAR[]) "
                "FROM unnest(?::VARCHAR[]) WITH ORDINALITY AS t(d, i) ORDER BY i", [words, descriptions]).fetchall()]
        expected = ["description names a GPU" if d is not None and any(
            re.search(r"\b" + re.escape(w) + r"\b", d.lower(), re.ASCII) for w in words) else None
            for d in descriptions]
        assert got == expected, words
