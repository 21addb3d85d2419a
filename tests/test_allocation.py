"""The allocation of the bill (`mlcost allocation`, schema.sql bill_allocation) against figures
worked out from the sample files, never from the warehouse: bill totals here with csv and Decimal,
the split by rule, the nodes and their idle GPU-hours by tests/oracle.py (standard library only,
no project code). Every surface's figures against the oracle: tests/test_consistency.py.

The sample bill (sample_data/README.md): FOCUS lines of cloud runs (tagged run_id, three untagged
ones tied by ResourceId), two GPU nodes billed 24 h a day (ResourceName gpu-node-1, gpu-node-2),
serving replicas (tag service), S3 and data transfer, and per month a support fee, a credit,
a tax and (October) an adjustment.
"""
from __future__ import annotations

import csv
import gzip
import json
import shutil
import tomllib
from collections import defaultdict
from datetime import datetime, timezone
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest

from ingest.engine import warehouse as wh
from ingest.engine.contract import ParseContext
from ingest.formats.runs import run_summary
from ingest.pipeline import loader
from ingest.settings import config
from metrics import allocation
from mlcost import cli
from tests import oracle
from tests.conftest import REPO_ROOT, SAMPLE_DIR

MONTHS = ("2026-08", "2026-09", "2026-10", "2026-11")
NODES = ("gpu-node-1", "gpu-node-2")
CENT = Decimal("0.01")


def bill_rows(month: str) -> list[dict]:
    """Every sample bill line (all files) whose ChargePeriodStart falls in `month` (YYYY-MM)."""
    rows = []
    for path in sorted((SAMPLE_DIR / "billing").glob("*.csv.gz")):
        with gzip.open(path, "rt", newline="") as handle:
            rows += [row for row in csv.DictReader(handle) if row["ChargePeriodStart"].startswith(month)]
    return rows


def effective(rows: list[dict]) -> dict[str, Decimal]:
    """Σ EffectiveCost per BillingCurrency."""
    sums: dict[str, Decimal] = defaultdict(Decimal)
    for row in rows:
        sums[row["BillingCurrency"]] += Decimal(row["EffectiveCost"])
    return dict(sums)


def allocation_json(capsys, *args: str) -> dict:
    assert cli.main(["allocation", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def sample_db(demo_db: Path, warehouse: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the sample warehouse with the sample organisation's settings."""
    shutil.copyfile(demo_db, warehouse)
    monkeypatch.setenv("MLCOST_CONFIG", str(SAMPLE_DIR / "mlcost.toml"))
    return warehouse


@pytest.mark.parametrize("month", MONTHS)
def test_buckets_add_up_to_the_bill_to_the_cent(sample_db, capsys, month):
    rows = bill_rows(month)
    result = allocation_json(capsys, "--month", month)
    assert result["from"] == f"{month}-01" and result["by"] == "team"
    expected = effective(rows)
    assert set(result["currencies"]) == set(expected)
    for currency, billed in expected.items():
        figures = result["currencies"][currency]
        assert Decimal(figures["billed"]) == billed
        assert set(figures["buckets"]) == {"training", "serving", "idle_gpu", "shared", "unallocated"}
        buckets = sum(Decimal(v) for v in figures["buckets"].values())
        assert buckets.quantize(CENT) == billed.quantize(CENT)
        assert buckets == billed  # exact: pieces of a line are rounded to add up to the line
        assert sum(Decimal(v) for v in figures["by_key"].values()) == billed
        assert figures["lines"] == len(rows)


@pytest.mark.parametrize("month", MONTHS)
def test_each_rule_carries_what_the_oracle_gives(sample_db, month):
    """Per bucket and rule (the Costs page's "Rules" drill-down), the month's effective cost is the
    oracle's, and no rule the oracle does not know carries money."""
    start, end = oracle.month_bounds(month)
    expected = oracle.sample().allocation(start, end).by_rule["USD"]
    table = allocation.figures(start, end, "team", allocation.Rules.of(config.load(SAMPLE_DIR / "mlcost.toml")))
    rows = table[(table["split"] == "bucket") & (table["billing_currency"] == "USD")]
    found = {(row.bucket, row.rule): Fraction(row.effective_cost) for row in rows.itertuples() if row.effective_cost}
    assert set(found) == set(expected)
    for key, exact in expected.items():
        assert abs(found[key] - exact) <= Fraction(1, 10 ** 6), key
    # The sample's shape (sample_data/README.md): every cloud run instance belongs to a loaded run,
    # so nothing is unallocated but node hours neither a run's nor idle.
    assert {rule for bucket, rule in expected if bucket == "unallocated"} == \
        {"node GPU-hours without a run or idle reading"}


@pytest.mark.parametrize("month", MONTHS)
def test_no_node_idles_above_its_bill(sample_db, capsys, month):
    """Each node's idle cost is its own bill rate x the idle GPU-hours no run held, as the oracle
    counts them from the traces and the runs; training, idle and unallocated add up to its bill."""
    rows = bill_rows(month)
    nodes = allocation_json(capsys, "--month", month)["currencies"]["USD"]["nodes"]
    expected = oracle.sample().allocation(*oracle.month_bounds(month)).nodes["USD"]
    assert set(nodes) == set(NODES) == set(expected)
    for host in NODES:
        lines = [r for r in rows if r["ResourceName"] == host]
        billed = sum((Decimal(r["EffectiveCost"]) for r in lines), Decimal(0))
        hours = sum((Decimal(r["ConsumedQuantity"]) for r in lines), Decimal(0))
        node = nodes[host]
        assert Decimal(node["billed"]) == billed
        assert Decimal(node["idle_gpu"]) <= billed
        assert Decimal(node["idle_gpu"]) + Decimal(node["training"]) + Decimal(node["unallocated"]) == billed
        rate = billed / (4 * hours)  # four GPUs per node
        assert Decimal(node["rate_per_gpu_hour"]) == rate.quantize(Decimal("0.000001"))
        idle_hours = expected[host].idle_gpu_hours
        assert node["idle_gpu_hours"] == pytest.approx(float(idle_hours), abs=1e-6)
        assert abs(Fraction(Decimal(node["idle_gpu"])) - Fraction(rate) * idle_hours) < Fraction(1, 10 ** 6)
        assert node["gpu_hours"] == pytest.approx(float(4 * hours))


def test_node_idle_over_the_whole_sample_stays_under_what_the_nodes_cost(sample_db, capsys):
    """The issue's case: priced at list price, the nodes' idle hours came to more than the bill
    charged for the nodes; priced at the nodes' own bill rate it cannot."""
    result = allocation_json(capsys, "--from", "2026-08-01", "--to", "2026-11-30", "--by", "project")
    assert result["to"] == "2026-11-30"
    rows = [r for month in MONTHS for r in bill_rows(month)]
    for host in NODES:
        billed = sum((Decimal(r["EffectiveCost"]) for r in rows if r["ResourceName"] == host), Decimal(0))
        node = result["currencies"]["USD"]["nodes"][host]
        assert Decimal(node["billed"]) == billed
        assert Decimal(node["idle_gpu"]) < billed


def test_showback_by_team_names_what_has_no_team(sample_db, capsys):
    rows = bill_rows("2026-11")
    by_team = allocation_json(capsys, "--month", "2026-11", "--by", "team")["currencies"]["USD"]["by_key"]
    # Lines without a team tag and without a run: the support fee, the credit and the tax.
    no_team = sum((Decimal(r["EffectiveCost"]) for r in rows if not json.loads(r["Tags"] or "{}").get("team")
                   and r["ChargeCategory"] != "Usage"), Decimal(0))
    assert Decimal(by_team["(no team)"]) == no_team
    assert {"genai", "perception", "relevance", "ml-platform"} <= set(by_team)
    # Serving lines go by their own tag: the relevance team's serving is its search-api replicas.
    by_service = allocation_json(capsys, "--month", "2026-11", "--by", "service")["currencies"]["USD"]["by_key"]
    search_api = sum((Decimal(r["EffectiveCost"]) for r in rows
                      if json.loads(r["Tags"] or "{}").get("service") == "search-api"), Decimal(0))
    assert Decimal(by_service["search-api"]) == search_api


def test_the_table_names_every_bucket(sample_db, capsys):
    assert cli.main(["allocation", "--month", "2026-11"]) == 0
    text = capsys.readouterr().out
    for label in ("Training runs", "Serving", "Idle GPUs", "Shared", "Unallocated", "gpu-node-1", "by team"):
        assert label in text
    assert f"{effective(bill_rows('2026-11'))['USD']:,.2f}" in text


@pytest.mark.parametrize("args, message", [
    (["--month", "2026-13"], "is not a month"),
    (["--from", "2026-11-05", "--to", "2026-11-01"], "is before --from"),
    (["--to", "2026-11-01"], "--to needs --from"),
    (["--from", "yesterday"], "is not a day"),
])
def test_bad_periods_are_usage_errors(sample_db, capsys, args, message):
    assert cli.main(["allocation", *args]) == 2
    assert message in capsys.readouterr().err


def test_an_empty_warehouse_says_so(warehouse, capsys):
    assert cli.main(["allocation"]) == 1
    assert "no bill lines" in capsys.readouterr().err


def test_a_line_split_between_runs_and_idle_adds_up_exactly(warehouse, tmp_path, capsys):
    """One node billed 10.00 for an hour with 3 GPUs: thirds do not divide a cent, yet the pieces
    add up to the line exactly; a run holding one GPU for the hour gets one third."""
    trace = tmp_path / "n1_2026-01.csv"
    lines = ["timestamp,host,gpu_index,gpu_uuid,gpu_name,power_w,energy_mj,gpu_util_pct,mem_used_mib"]
    for minute in range(0, 60, 2):
        for gpu in range(3):
            util = 90 if gpu == 0 else 0
            lines.append(f"2026-01-05T10:{minute:02d}:00Z,n1,{gpu},GPU-{gpu},NVIDIA L4,50,,{util},0")
    trace.write_text("\n".join(lines) + "\n")
    run = {"run_id": "r1", "project": "p", "team": "t", "start_time": "2026-01-05T10:00:00Z",
           "end_time": "2026-01-05T11:00:00Z", "price_per_hour_usd": 1, "host": "n1", "gpu_indices": [0],
           "gpu_type": "NVIDIA L4"}
    runs = tmp_path / "runs.jsonl"
    runs.write_text(json.dumps(run) + "\n")
    bill = tmp_path / "bill.csv"
    bill.write_text("BilledCost,EffectiveCost,BillingCurrency,ChargePeriodStart,ChargePeriodEnd,ChargeCategory,"
                    "ProviderName,ServiceName,ResourceId,ResourceName,x_LineItemId\n"
                    "10,10,EUR,2026-01-05 10:00:00,2026-01-05 11:00:00,Usage,AWS,EC2,i-1,n1,li-1\n"
                    "1.5,1.5,USD,2026-01-05 10:00:00,2026-01-05 11:00:00,Tax,AWS,Tax,,,li-2\n")
    assert all(s.ok for _, s in loader.ingest_paths([str(trace), str(runs), str(bill)]))
    result = allocation_json(capsys, "--from", "2026-01-05")
    eur = result["currencies"]["EUR"]
    assert Decimal(eur["billed"]) == Decimal(10)
    assert sum(Decimal(v) for v in eur["buckets"].values()) == Decimal(10)
    assert Decimal(eur["buckets"]["training"]).quantize(Decimal("0.000001")) == Decimal("3.333333")
    # The two other GPUs read 0 % for the whole hour (the last sample stands for one interval).
    assert Decimal(eur["buckets"]["idle_gpu"]).quantize(Decimal("0.000001")) == Decimal("6.666667")
    assert Decimal(eur["buckets"]["unallocated"]) == 0
    assert eur["by_key"].get("t") == eur["buckets"]["training"]
    assert result["currencies"]["USD"]["buckets"]["shared"] == "1.5"  # never added to the euros


# --- GPU spend by the bill's own fields -----------------------------------------------------------

def test_gpu_lines_are_found_by_instance_family_never_by_a_sku_id(formats_dir, warehouse):
    focus = formats_dir / "focus" / "focusfoundation_FOCUS-1.0_focus_sample.csv"
    assert all(s.ok for _, s in loader.ingest_paths([str(focus)]))
    defaults = tomllib.loads((REPO_ROOT / "ingest" / "defaults.toml").read_text())["billing"]
    found = wh.query("""
        SELECT sku_id, charge_description FROM billing_costs
        WHERE gpu_line_rule(instance_family, service_name, charge_description, $f::VARCHAR[], $w::VARCHAR[]) IS NOT NULL
    """, {"f": defaults["gpu_instance_families"], "w": defaults["gpu_sku_words"]})
    with focus.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    # Independently: the descriptions that name a g3 or g5 instance (the sample's only GPU types).
    expected = sorted(r["ChargeDescription"] for r in rows
                      if any(f" {family}." in r["ChargeDescription"] for family in ("g3", "g5")))
    assert expected and sorted(found["charge_description"]) == expected
    # Lines whose SKU id happens to contain GPU (a t2.micro, a public IPv4 address) are not GPU spend.
    sneaky = [r for r in rows if "GPU" in r["SkuId"].upper()]
    assert any("t2.micro" in r["ChargeDescription"] for r in sneaky)
    assert not set(found["sku_id"]) & {r["SkuId"] for r in sneaky}


@pytest.mark.parametrize("service, description, family, is_gpu", [
    ("Compute Engine", "Nvidia Tesla T4 GPU running in Americas", None, True),   # GCP attached GPU
    ("Compute Engine", "N1 Predefined Instance Core running in Americas", None, False),
    ("Virtual Machines", "Virtual Machines NCasT4_v3 Series - NC4as T4 v3 - US East", None, True),
    ("Virtual Machines", "Virtual Machines NDasrA100 v4 Series - ND96asr v4 - US East", None, True),
    ("Virtual Machines", "Virtual Machines Dv3/DSv3 Series - D2 v3/D2s v3 - US South Central", None, False),
    ("Amazon Elastic Compute Cloud", "$0.0116 per On Demand Linux t2.micro Instance Hour", "t2", False),
    ("Amazon Elastic Compute Cloud", "On Demand Linux p4d.24xlarge Instance Hour", "p4d", True),
    ("Amazon SageMaker", "ml.gpuish-thing", None, False),  # a word inside another word is not one
])
def test_gpu_line_rule_reads_each_providers_fields(warehouse, service, description, family, is_gpu):
    defaults = tomllib.loads((REPO_ROOT / "ingest" / "defaults.toml").read_text())["billing"]
    found = wh.query("SELECT gpu_line_rule($family, $service, $description, $f::VARCHAR[], $w::VARCHAR[]) AS rule",
                     {"family": family, "service": service, "description": description,
                      "f": defaults["gpu_instance_families"], "w": defaults["gpu_sku_words"]})
    assert (found["rule"].iloc[0] is not None and found["rule"].notna().iloc[0]) == is_gpu


# --- runs without a logged price ---------------------------------------------------------------

def test_a_run_without_a_price_gets_a_catalog_estimate():
    catalog = tomllib.loads((REPO_ROOT / "ingest" / "defaults.toml").read_text())["prices"]
    records = [
        {"run_id": "own-instance", "start_time": "2026-01-01T00:00:00Z", "duration_hours": 2,
         "instance_type": "g5.xlarge", "gpu_type": "NVIDIA A10G", "gpu_count": 1},
        {"run_id": "node-share", "start_time": "2026-01-01T00:00:00Z", "duration_hours": 3,
         "instance_type": "g6.12xlarge", "gpu_type": "NVIDIA L4", "gpu_indices": [0, 1], "host": "n2"},
        {"run_id": "not-in-catalog", "start_time": "2026-01-01T00:00:00Z", "duration_hours": 1,
         "instance_type": "x9.huge", "gpu_type": "Imaginary 1"},
        {"run_id": "logged", "start_time": "2026-01-01T00:00:00Z", "duration_hours": 1,
         "instance_type": "g5.xlarge", "price_per_hour_usd": 0.5},
    ]
    parsed = run_summary.parse(list(enumerate((json.dumps(r) for r in records), start=1)),
                             ParseContext(source="runs.jsonl", tz=timezone.utc))
    runs = {row["run_id"]: row for row in parsed.tables["runs"]}
    g5 = Decimal(str(catalog["instance_usd_per_hour"]["g5.xlarge"]))
    l4 = Decimal(str(catalog["gpu_usd_per_hour"]["L4"]))
    assert (runs["own-instance"]["cost_usd"], runs["own-instance"]["cost_source"]) == (g5 * 2, "catalog")
    assert runs["own-instance"]["price_per_hour_usd"] == g5
    assert (runs["node-share"]["cost_usd"], runs["node-share"]["cost_source"]) == (l4 * 2 * 3, "catalog")
    assert (runs["not-in-catalog"]["cost_usd"], runs["not-in-catalog"]["cost_source"]) == (None, None)
    assert (runs["logged"]["cost_usd"], runs["logged"]["cost_source"]) == (Decimal("0.5"), "derived")


def test_showback_by_dcgm_namespace(warehouse, tmp_path, capsys):
    """A Kubernetes node scraped by dcgm-exporter (labels namespace, pod) and billed by its
    hostname: by namespace, its pieces go to the namespace of its samples; other lines to their tag."""
    start = int(datetime(2026, 1, 5, 10, tzinfo=timezone.utc).timestamp() * 1000)
    scrape = []
    for step in range(31):
        at = start + step * 120_000
        labels = ('gpu="0",UUID="GPU-k1",modelName="NVIDIA L4",Hostname="k8s-a",'
                  'namespace="research",pod="trainer-0"')
        scrape += [f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {80 if step < 15 else 0} {at}",
                   f"DCGM_FI_DEV_POWER_USAGE{{{labels}}} 60.5 {at}"]
    prom = tmp_path / "k8s-a.prom"
    prom.write_text("\n".join(scrape) + "\n")
    bill = tmp_path / "bill.csv"
    bill.write_text("BilledCost,EffectiveCost,BillingCurrency,ChargePeriodStart,ChargePeriodEnd,ChargeCategory,"
                    "ProviderName,ServiceName,ResourceId,ResourceName,Tags,x_LineItemId\n"
                    "6,6,USD,2026-01-05 10:00:00,2026-01-05 11:00:00,Usage,AWS,EC2,k8s-a,,,li-1\n"
                    '2,2,USD,2026-01-05 10:00:00,2026-01-05 11:00:00,Usage,AWS,S3,bucket,,"{""namespace"":""data""}",li-2\n')
    assert all(s.ok for _, s in loader.ingest_paths([str(prom), str(bill)]))
    usd = allocation_json(capsys, "--from", "2026-01-05", "--by", "namespace")["currencies"]["USD"]
    assert usd["by_key"] == {"research": "6", "data": "2"}
    # The GPU idled for the second half hour (no run held it): about half the node's dollar.
    assert Decimal(usd["buckets"]["idle_gpu"]) + Decimal(usd["buckets"]["unallocated"]) == Decimal(6)
    assert Decimal(2) < Decimal(usd["buckets"]["idle_gpu"]) < Decimal(4)
    assert allocation_json(capsys, "--from", "2026-01-05", "--by", "pod")["currencies"]["USD"]["by_key"] == \
        {"trainer-0": "6", "(no pod)": "2"}
