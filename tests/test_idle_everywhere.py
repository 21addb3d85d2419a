"""Idle GPU cost, one definition in two named parts (metrics/idle.py), on every surface that shows it,
and month-over-month figures that compare the same days (metrics/periods.py).

Expected values come from the sample files in plain Python (csv, json, Decimal): idle GPU-seconds from
the GPU trace CSVs by the documented idle rule (tests/test_gpu_traces.py's plain_samples: utilization
<= 5 % for >= 300 s in a row, [gpu] of ingest/defaults.toml), held when a run of runs.jsonl named the
GPU at the sample's time; each node's cost per GPU-hour from its own bill lines of the day
(EffectiveCost / (4 GPUs x ConsumedQuantity hours)); and a small warehouse built here.
"""
from __future__ import annotations

import csv
import gzip
import json
import re
import subprocess
import sys
from bisect import bisect_left
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from ingest.pipeline import loader
from metrics import allocation, idle, periods
from mlcost import cli
from tests.conftest import REPO_ROOT, SAMPLE_DIR, as_read

APP = REPO_ROOT / "app" / "main.py"
CENT, TENTH = Decimal("0.01"), Decimal("0.1")
MONTHS = ("2026-08", "2026-09", "2026-10", "2026-11")


# --- plain Python over the sample files ------------------------------------------------------------

def node_rate_by_day() -> dict[tuple[str, str], Decimal]:
    """(host, UTC day of ChargePeriodStart) -> the node's USD per GPU-hour from its bill lines that day."""
    cost: dict[tuple[str, str], Decimal] = {}
    gpu_hours: dict[tuple[str, str], Decimal] = {}
    for path in sorted((SAMPLE_DIR / "billing").glob("*.csv.gz")):
        with gzip.open(path, "rt", newline="") as handle:
            for row in csv.DictReader(handle):
                if row["ResourceName"].startswith("gpu-node-") and row["ChargeCategory"] == "Usage":
                    key = (row["ResourceName"], row["ChargePeriodStart"][:10])
                    cost[key] = cost.get(key, Decimal(0)) + Decimal(row["EffectiveCost"])
                    gpu_hours[key] = gpu_hours.get(key, Decimal(0)) + 4 * Decimal(row["ConsumedQuantity"])
    return {key: cost[key] / gpu_hours[key] for key in cost}


@pytest.fixture(scope="module")
def idle_seconds() -> dict[tuple[str, str], tuple[int, int]]:
    """(host, UTC day) -> (idle GPU-seconds, of which a run held the GPU), from the trace CSVs and runs.jsonl."""
    from tests.test_gpu_traces import node_runs, plain_samples

    by_gpu = plain_samples()
    by_uuid = {samples[0]["uuid"]: samples for samples in by_gpu.values()}
    held: set[tuple[str, float]] = set()
    for run in node_runs():
        for uuid in run["gpu_uuids"]:
            samples = by_uuid[uuid]
            times = [sample["t"] for sample in samples]
            held.update((uuid, s["t"]) for s in samples[bisect_left(times, run["start_time"]):
                                                         bisect_left(times, run["end_time"])])
    found: dict[tuple[str, str], list[int]] = {}
    for (host, _), samples in by_gpu.items():
        for sample in samples:
            if sample["idle"]:
                day = datetime.fromtimestamp(sample["t"], UTC).date().isoformat()
                seconds = found.setdefault((host, day), [0, 0])
                seconds[0] += sample["interval"]
                seconds[1] += sample["interval"] if (sample["uuid"], sample["t"]) in held else 0
    return {key: (idle_s, held_s) for key, (idle_s, held_s) in found.items()}


def expected_idle(seconds: dict[tuple[str, str], tuple[int, int]], first: date, last: date) -> dict[str, Decimal]:
    """Idle of the sample's billed GPU nodes from `first` to `last` (UTC days, included): GPU-hours and
    USD, all / not held by any run / held by runs while idle."""
    rates = node_rate_by_day()
    all_h = all_usd = held_h = held_usd = Decimal(0)
    for (host, day), (idle_s, held_s) in seconds.items():
        if first.isoformat() <= day <= last.isoformat():
            all_h, held_h = all_h + Decimal(idle_s) / 3600, held_h + Decimal(held_s) / 3600
            all_usd += Decimal(idle_s) / 3600 * rates[(host, day)]
            held_usd += Decimal(held_s) / 3600 * rates[(host, day)]
    return {"gpu_hours": all_h, "cost": all_usd, "held_gpu_hours": held_h, "held_cost": held_usd,
            "unallocated_gpu_hours": all_h - held_h, "unallocated_cost": all_usd - held_usd}


def shown(expected: dict[str, Decimal]) -> dict[str, str]:
    """The parts as every surface writes them: total and not-held each rounded, held their difference."""
    cost, unallocated = (expected[k].quantize(CENT, ROUND_HALF_UP) for k in ("cost", "unallocated_cost"))
    hours, unallocated_h = (expected[k].quantize(TENTH, ROUND_HALF_UP) for k in ("gpu_hours", "unallocated_gpu_hours"))
    return {"cost": f"${cost:,.2f}", "unallocated_cost": f"${unallocated:,.2f}", "held_cost": f"${cost - unallocated:,.2f}",
            "gpu_hours": f"{hours:,.1f}", "unallocated_gpu_hours": f"{unallocated_h:,.1f}",
            "held_gpu_hours": f"{hours - unallocated_h:,.1f}",
            "sentence": f"Idle GPUs ${cost:,.2f} = ${unallocated:,.2f} not held by any run + "
                        f"${cost - unallocated:,.2f} held by runs while idle"}


def month_days(month: str) -> tuple[date, date]:
    first = date.fromisoformat(month + "-01")
    return first, (first + timedelta(days=32)).replace(day=1) - timedelta(days=1)


def billed_by_day() -> dict[date, Decimal]:
    """Σ BilledCost (USD) of every sample bill line per UTC day of its ChargePeriodStart."""
    by_day: dict[date, Decimal] = {}
    for path in sorted((SAMPLE_DIR / "billing").glob("*.csv.gz")):
        with gzip.open(path, "rt", newline="") as handle:
            for row in csv.DictReader(handle):
                if row["BillingCurrency"] == "USD":
                    day = date.fromisoformat(row["ChargePeriodStart"][:10])
                    by_day[day] = by_day.get(day, Decimal(0)) + Decimal(row["BilledCost"])
    return by_day


# --- fixtures ----------------------------------------------------------------------------------

@pytest.fixture
def on_sample(demo_warehouse: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLCOST_CONFIG", str(SAMPLE_DIR / "mlcost.toml"))
    return demo_warehouse


# --- the definition ------------------------------------------------------------------------------

@pytest.mark.parametrize("month", MONTHS)
def test_idle_parts_of_every_sample_month_match_the_sample_files(on_sample, idle_seconds, month):
    first, last = month_days(month)
    expected = expected_idle(idle_seconds, first, last)
    assert 0 < expected["held_gpu_hours"] < expected["gpu_hours"]
    found = idle.idle_cost(first, last + timedelta(days=1), allocation.Rules(), ())
    usd = found.billed["USD"]
    assert found.estimated is None  # both sample nodes are billed every day
    for name in ("gpu_hours", "unallocated_gpu_hours", "held_gpu_hours"):
        assert Decimal(repr(getattr(usd, name))) == pytest.approx(expected[name], abs=Decimal("0.000002")), name
    for name in ("cost", "unallocated_cost", "held_cost"):
        assert getattr(usd, name) == pytest.approx(expected[name], abs=Decimal("0.000001")), name
    assert usd.cost == usd.unallocated_cost + usd.held_cost
    # the part no run held is the allocation's Idle GPUs bucket, to the last digit
    summary = allocation.summary(first, last + timedelta(days=1), "team", allocation.Rules())
    assert usd.unallocated_cost == summary["currencies"]["USD"]["buckets"]["idle_gpu"]


def test_a_run_holding_an_idle_gpu_is_the_held_part(warehouse, tmp_path):
    """One node, 2 GPUs, billed $8.00 for an hour ($4 per GPU-hour). GPU 0: a run holds it the whole hour,
    idle for its first 30 minutes; GPU 1: no run, idle all hour."""
    trace = tmp_path / "n1_2026-01.csv"
    lines = ["timestamp,host,gpu_index,gpu_uuid,gpu_name,power_w,energy_mj,gpu_util_pct,mem_used_mib"]
    for minute in range(0, 60, 2):
        lines.append(f"2026-01-05T10:{minute:02d}:00Z,n1,0,GPU-0,NVIDIA L4,50,,{0 if minute < 30 else 90},0")
        lines.append(f"2026-01-05T10:{minute:02d}:00Z,n1,1,GPU-1,NVIDIA L4,50,,0,0")
    trace.write_text("\n".join(lines) + "\n")
    run = {"run_id": "r1", "project": "p", "team": "t", "start_time": "2026-01-05T10:00:00Z",
           "end_time": "2026-01-05T11:00:00Z", "price_per_hour_usd": 1, "host": "n1", "gpu_indices": [0],
           "gpu_type": "NVIDIA L4"}
    (tmp_path / "runs.jsonl").write_text(json.dumps(run) + "\n")
    bill = tmp_path / "bill.csv"
    bill.write_text("BilledCost,EffectiveCost,BillingCurrency,ChargePeriodStart,ChargePeriodEnd,ChargeCategory,"
                    "ProviderName,ServiceName,ResourceId,ResourceName,x_LineItemId\n"
                    "8,8,USD,2026-01-05 10:00:00,2026-01-05 11:00:00,Usage,AWS,EC2,i-1,n1,li-1\n")
    assert all(s.ok for _, s in loader.ingest_paths([str(trace), str(tmp_path / "runs.jsonl"), str(bill)]))
    found = idle.idle_cost(date(2026, 1, 5), date(2026, 1, 6), allocation.Rules(), ())
    usd = found.billed["USD"]
    assert (usd.unallocated_gpu_hours, usd.held_gpu_hours) == (1.0, 0.5)
    assert (usd.unallocated_cost, usd.held_cost, usd.cost) == (Decimal(4), Decimal(2), Decimal(6))
    assert idle.parts_text(usd) == "Idle GPUs $6.00 = $4.00 not held by any run + $2.00 held by runs while idle"
    buckets = allocation.summary(date(2026, 1, 5), date(2026, 1, 6), "team", allocation.Rules())["currencies"]["USD"]
    assert buckets["buckets"]["idle_gpu"] == Decimal(4) and buckets["buckets"]["training"] == Decimal(4)


def test_a_host_without_bill_lines_is_estimated_at_catalog_prices_apart(warehouse, tmp_path):
    trace = tmp_path / "n2_2026-01.csv"
    lines = ["timestamp,host,gpu_index,gpu_uuid,gpu_name,power_w,energy_mj,gpu_util_pct,mem_used_mib"]
    lines += [f"2026-01-05T10:{minute:02d}:00Z,n2,0,GPU-9,NVIDIA L4,50,,0,0" for minute in range(0, 60, 2)]
    trace.write_text("\n".join(lines) + "\n")
    assert all(s.ok for _, s in loader.ingest_paths([str(trace)]))
    found = idle.idle_cost(date(2026, 1, 5), date(2026, 1, 6), allocation.Rules(), (("l4", Decimal("0.80")),))
    assert found.billed == {} and found.estimated_hosts == ("n2",)
    assert (found.estimated.gpu_hours, found.estimated.cost) == (1.0, Decimal("0.80"))
    assert "estimated $0.80" in idle.estimated_text(found) and "not in the bill" in idle.estimated_text(found)


# --- every surface shows the same total and parts for November 2026 ---------------------------------

def page(path: str) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=180).run()
    at.switch_page(path).run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def texts(at: AppTest) -> str:
    return as_read(" ".join([m.value for m in at.markdown] + [c.value for c in at.caption]))


def test_november_idle_is_the_same_on_every_surface(on_sample, idle_seconds, capsys):
    expected = shown(expected_idle(idle_seconds, date(2026, 11, 1), date(2026, 11, 30)))
    assert expected["held_cost"] != "$0.00"

    costs = page("app_pages/costs.py")  # the latest month, November
    assert {m.label: m.value for m in costs.metric}["Idle GPUs"] == expected["unallocated_cost"]
    assert expected["sentence"] in texts(costs)

    idle_page = page("app_pages/idle_gpus.py")
    idle_page.date_input(key="date_range").set_value((date(2026, 11, 1), date(2026, 11, 30))).run()
    metrics = {m.label: m.value for m in idle_page.metric}
    assert metrics["Idle cost"] == expected["cost"]
    assert metrics["Idle GPU-hours"] == expected["gpu_hours"]
    assert metrics["Held by runs while idle"] == f"{expected['held_gpu_hours']} GPU-h"
    assert expected["sentence"] in texts(idle_page)
    assert f"= {expected['unallocated_cost']} not held by any run + {expected['held_cost']} held" in texts(idle_page)

    retro = page("app_pages/retrospective.py")  # the latest month, November
    metrics = {as_read(m.label): m.value for m in retro.metric}
    assert metrics["Idle cost (USD)"] == expected["cost"]
    assert metrics["Not held by any run (USD)"] == expected["unallocated_cost"]
    assert metrics["Held by runs while idle (USD)"] == expected["held_cost"]
    assert metrics["Held by runs while idle (GPU-h)"] == f"{expected['held_gpu_hours']} GPU-h"
    assert metrics["Idle GPU-hours"] == f"{expected['gpu_hours']} GPU-h"
    assert expected["sentence"] in texts(retro)

    assert cli.main(["allocation", "--json", "--month", "2026-11"]) == 0
    usd = json.loads(capsys.readouterr().out)["currencies"]["USD"]
    parts = usd["idle"]
    assert parts["not_held_by_runs"]["cost"] == usd["buckets"]["idle_gpu"]
    assert f"${Decimal(parts['cost']).quantize(CENT, ROUND_HALF_UP):,.2f}" == expected["cost"]
    assert parts["text"] == expected["sentence"]
    assert cli.main(["allocation", "--month", "2026-11"]) == 0
    assert expected["sentence"] in capsys.readouterr().out

    report = mlcost_report("2026-11")
    assert expected["sentence"] in as_read(report)
    row = next(line for line in report.splitlines() if line.startswith("| Idle cost (USD) |"))
    assert row.split(" | ")[2] == expected["cost"]


def mlcost_report(month: str, *more: str) -> str:
    done = subprocess.run([sys.executable, "-m", "mlcost", "report", "--month", month, *more],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stdout


# --- like with like: the same days of the month before ------------------------------------------------

@pytest.mark.parametrize("month, through, current, previous, partial", [
    (date(2026, 11, 1), date(2026, 11, 21), (date(2026, 11, 1), date(2026, 11, 21)),
     (date(2026, 10, 1), date(2026, 10, 21)), True),
    (date(2026, 3, 15), date(2026, 3, 30), (date(2026, 3, 1), date(2026, 3, 30)),
     (date(2026, 2, 1), date(2026, 2, 28)), True),  # February is shorter: all of it
    (date(2026, 10, 1), date(2026, 11, 21), (date(2026, 10, 1), date(2026, 10, 31)),
     (date(2026, 9, 1), date(2026, 9, 30)), False),  # a month before the data's end is whole
    (date(2026, 10, 1), date(2026, 10, 31), (date(2026, 10, 1), date(2026, 10, 31)),
     (date(2026, 9, 1), date(2026, 9, 30)), False),  # data through the last day: whole
    (date(2027, 1, 1), None, (date(2027, 1, 1), date(2027, 1, 31)), (date(2026, 12, 1), date(2026, 12, 31)), False),
])
def test_comparison_days(month, through, current, previous, partial):
    window = periods.comparison_days(month, through)
    assert (window.current_first, window.current_last) == current
    assert (window.previous_first, window.previous_last) == previous
    assert window.partial is partial


def test_the_reports_budget_outcomes_and_bill_change_compare_the_same_days(on_sample):
    report = mlcost_report("2026-11")
    by_day = billed_by_day()
    october_1_21 = sum((by_day.get(date(2026, 10, d), Decimal(0)) for d in range(1, 22)), Decimal(0))
    november_1_21 = sum((by_day.get(date(2026, 11, d), Decimal(0)) for d in range(1, 22)), Decimal(0))
    whole_october = sum((v for d, v in by_day.items() if d.month == 10), Decimal(0))
    assert october_1_21 < whole_october
    change = f"{(november_1_21 / october_1_21 - 1) * 100:+.1f} %"

    header = "| Figure | 2026-10 (1-21) | 2026-11 (1-21) | Change |"
    assert header in report
    org = next(line for line in report.splitlines() if line.startswith("| Budget ML org: month to date (USD) |"))
    assert org == (f"| Budget ML org: month to date (USD) | ${october_1_21.quantize(CENT):,.2f} | "
                   f"${november_1_21.quantize(CENT):,.2f} | {change} |")
    charges = next(line for line in report.splitlines() if line.startswith("| Charges for the month (USD) |"))
    assert charges.endswith(f"| {change} |")
    # the bill's change is stated once: no other percentage for it, no daily-rate comparison
    assert " a day" not in report
    invoice = next(line for line in report.splitlines() if line.startswith("| Billed, invoice month (USD) |"))
    assert invoice.split(" | ")[1] == "—" and invoice.endswith("| — |")
    for line in report.splitlines():
        if "bill moved" in line:
            assert change in line and "2026-10 (1-21) against 2026-11 (1-21)" in line
    # the comparison is said once, at the top
    assert len(re.findall(r"same days of October 2026", report)) == 1
    assert "(Oct 01 to Oct 21): 21 days against 21." in report.splitlines()[2]
