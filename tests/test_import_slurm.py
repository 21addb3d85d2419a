"""Slurm jobs from `sacct --parsable2` output: saved files, `mlcost ingest`, and sacct on the PATH."""
from __future__ import annotations

import json
import os
import stat
from datetime import datetime, timezone
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest

from ingest.engine import warehouse as wh
from ingest.pipeline import loader
from mlcost import cli

SACCT = """JobID|JobName|User|Account|Partition|AllocTRES|Start|End|Elapsed|State|NodeList
1001|train-llm|alice|nlp|gpu|billing=32,cpu=32,gres/gpu=4,mem=256G,node=1|2025-11-20T10:00:00|2025-11-20T12:30:00|02:30:00|COMPLETED|gpu-node-1
1001.batch|batch||||cpu=32,gres/gpu=4,mem=256G,node=1|2025-11-20T10:00:00|2025-11-20T12:30:00|02:30:00|COMPLETED|gpu-node-1
1001.extern|extern||nlp||billing=32,cpu=32,gres/gpu=4,mem=256G,node=1|2025-11-20T10:00:00|2025-11-20T12:30:00|02:30:00|COMPLETED|gpu-node-1
1002_1|sweep|bob|cv|a100|cpu=8,gres/gpu:a100=2,gres/gpu=2,mem=64G,node=1|2025-11-20T09:00:00|2025-11-20T10:00:00|01:00:00|COMPLETED|gpu-node-[2-3]
1002_2|sweep|bob|cv|a100|cpu=8,gres/gpu:a100=2,gres/gpu=2,mem=64G,node=1|2025-11-20T11:00:00|2025-11-20T11:45:00|00:45:00|FAILED|gpu-node-4
1002_2.batch|batch||cv||cpu=8,gres/gpu:a100=2,gres/gpu=2,mem=64G,node=1|2025-11-20T11:00:00|2025-11-20T11:45:00|00:45:00|FAILED|gpu-node-4
1002_[3-5]|sweep|bob|cv|a100||Unknown|Unknown|00:00:00|PENDING|None assigned
1003|serve-eval|carol|nlp|gpu|cpu=4,gres/gpu=1,node=1|2025-11-21T08:00:00|Unknown|1-02:00:00|RUNNING|gpu-node-5
1004|preprocess|dave|data|cpu|billing=64,cpu=64,mem=128G,node=1|2025-11-20T10:00:00|2025-11-20T10:10:00|00:10:00|CANCELLED by 1234|cpu-node-1
1005|broken|erin|nlp|gpu|cpu=4,gres/gpu=1,node=1|2025-11-20T10:00:00|2025-11-20T11:00:00|one hour|COMPLETED|gpu-node-6
1006|waiting|erin|nlp|gpu||Unknown|Unknown|00:00:00|PENDING|None assigned
"""
PARIS = ZoneInfo("Europe/Paris")


@pytest.fixture
def settings(tmp_path, monkeypatch):
    path = tmp_path / "mlcost.toml"
    path.write_text('[slurm.partition_gpu_usd_per_hour]\n"gpu" = 2.5\n\n[prices.gpu_usd_per_hour]\n"a100" = 3.0\n')
    monkeypatch.setenv("MLCOST_CONFIG", str(path))


def runs() -> dict[str, dict]:
    frame = wh.query_exact("SELECT run_id, project, owner, team, status, started_at, ended_at, gpu_count, gpu_type, "
                           "host, cost_usd, cost_source, flags, tags, source_line FROM runs")
    return {row["run_id"]: row for row in frame.to_dict("records")}


def test_saved_sacct_output_folds_steps_and_arrays(warehouse, settings, tmp_path):
    path = tmp_path / "sacct_2025-11-20.txt"
    path.write_text(SACCT)
    summary = loader.ingest_file(path, tz=PARIS)  # detected as slurm; the cluster runs on Paris time
    assert (summary.kind, summary.rows_loaded, summary.rows_rejected) == ("slurm", 4, 1)
    assert summary.rejects == [{"line": 11, "reason": "job 1005: Elapsed 'one hour' is not [DD-]HH:MM:SS"}]
    # 4 GPUs x 2.5 h + 2 x 1 h + 2 x 0.75 h (+ the running job's 1 GPU x 26 h so far)
    assert summary.totals["gpu_hours_total"] == pytest.approx(4 * 2.5 + 2 * 1 + 2 * 0.75 + 26)
    assert (summary.totals["steps_folded"], summary.totals["jobs_pending_skipped"]) == (3, 2)
    got = runs()
    assert set(got) == {"slurm-1001", "slurm-1002", "slurm-1003", "slurm-1004"}
    job = got["slurm-1001"]
    assert (job["project"], job["owner"], job["team"], job["status"], job["gpu_count"], job["host"]) == (
        "train-llm", "alice", "nlp", "completed", 4, "gpu-node-1")
    assert job["started_at"] == datetime(2025, 11, 20, 9, 0, tzinfo=timezone.utc)  # 10:00 in Paris
    assert job["cost_usd"] == Decimal("2.5") * 4 * Decimal("2.5") and job["cost_source"] == "partition_rate"
    array = got["slurm-1002"]
    # two tasks: 2 A100 x (1 h + 0.75 h) at the catalog's 3.0 USD per A100-hour; from the first start
    # to the last end; one task failed, so the array did
    assert array["cost_usd"] == Decimal("3.0") * 2 * Decimal("1.75") and array["cost_source"] == "catalog"
    assert (array["status"], array["gpu_type"], array["gpu_count"], array["host"]) == ("failed", "a100", 2, None)
    assert array["started_at"] == datetime(2025, 11, 20, 8, 0, tzinfo=timezone.utc)
    assert array["ended_at"] == datetime(2025, 11, 20, 10, 45, tzinfo=timezone.utc)
    assert dict(array["tags"])["array_tasks"] == "2"
    running = got["slurm-1003"]
    assert (running["status"], running["ended_at"], running["cost_usd"]) == ("running", None, None)
    cpu = got["slurm-1004"]
    assert (cpu["status"], cpu["gpu_count"], cpu["cost_usd"]) == ("failed", None, None)
    assert any("no GPUs allocated" in flag for flag in cpu["flags"])


def test_import_slurm_runs_sacct_from_the_path(warehouse, settings, tmp_path, monkeypatch, capsys):
    """A stand-in `sacct` on the PATH records its arguments and prints saved output."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "out.txt").write_text(SACCT)
    script = bin_dir / "sacct"
    script.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/args.txt\necho "$SLURM_TIME_FORMAT" >> {tmp_path}/args.txt\n'
                      f'cat {tmp_path}/out.txt\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    code = cli.main(["import", "slurm", "--since", "2025-11-20T00:00:00Z", "--until", "2025-11-22T00:00:00Z",
                     "--tz", "Europe/Paris", "--json"])
    (summary,) = json.loads(capsys.readouterr().out)
    assert code == 1 and (summary["kind"], summary["rows_loaded"], summary["rows_rejected"]) == ("slurm", 4, 1)
    args, time_format = (tmp_path / "args.txt").read_text().splitlines()
    assert "--parsable2" in args and "--allusers" in args and time_format == "standard"
    assert "--starttime=2025-11-20T01:00:00" in args and "--endtime=2025-11-22T01:00:00" in args
    assert cli.main(["import", "slurm", "--since", "2025-11-20T00:00:00Z", "--until", "2025-11-22T00:00:00Z",
                     "--tz", "Europe/Paris", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["status"] == "already_loaded"


def test_without_sacct_or_options_it_says_what_to_do(warehouse, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert cli.main(["import", "slurm", "--since", "1d"]) == 1
    assert "sacct is not on the PATH" in capsys.readouterr().err
    assert cli.main(["import", "slurm"]) == 2
    path = tmp_path / "not_sacct.txt"
    path.write_text("JobID|AllocTRES\n12|x\n")
    assert cli.main(["import", "slurm", "--file", str(path)]) == 1


TRACED_SACCT = """JobID|JobName|User|Account|Partition|AllocTRES|Start|End|Elapsed|State|NodeList
2001|ddp|alice|nlp|gpu|cpu=64,gres/gpu=4,mem=512G,node=2|2025-11-20T11:00:00|2025-11-20T12:00:00|01:00:00|COMPLETED|gpu-node[01-02]
2001.0|torchrun|||||2025-11-20T11:00:00|2025-11-20T12:00:00|01:00:00|COMPLETED|gpu-node[01-02]
2002|solo|bob|cv|scavenger|cpu=8,gres/gpu=1,node=1|2025-11-20T11:30:00|2025-11-20T12:00:00|00:30:00|COMPLETED|gpu-node03
2003|odd|carol|nlp|gpu|cpu=8,gres/gpu=1,node=1|2025-11-20T11:00:00|2025-11-20T11:10:00|00:10:00|COMPLETED|gpu-node[04-
2004|cpu|dave|data|gpu|cpu=8,node=1|2025-11-20T11:00:00|2025-11-20T12:00:00|01:00:00|COMPLETED|gpu-node03
"""


def test_job_energy_from_its_nodes_traces(warehouse, tmp_path, monkeypatch, capsys):
    """sacct names nodes, not GPUs: a job takes its share (GPUs per node / the node's traced GPUs)
    of each traced GPU of its nodes over its window, for energy and, unpriced otherwise, its cost."""
    from tests.trace_files import energy_kwh, write_trace

    from ingest.importers import slurm

    settings = tmp_path / "mlcost.toml"
    settings.write_text('[slurm.partition_gpu_usd_per_hour]\n"gpu" = 2.5\n\n'
                        '[prices.gpu_usd_per_hour]\n"A100-SXM4-80GB" = 4.1\n')
    monkeypatch.setenv("MLCOST_CONFIG", str(settings))
    assert slurm.expand_nodes(["gpu-node[01-03,07]", "cpu1"]) == (
        ["cpu1", "gpu-node01", "gpu-node02", "gpu-node03", "gpu-node07"], None)
    assert slurm.expand_nodes(["gpu-node[04-"]) == ([], "gpu-node[04-")

    start, end = datetime(2025, 11, 20, 10, 50, tzinfo=timezone.utc), datetime(2025, 11, 20, 12, 10, tzinfo=timezone.utc)
    traces = {host: write_trace(tmp_path / f"{host}.csv", host, 4, "NVIDIA A100-SXM4-80GB", start, end, base_w=150 + 10 * n)
              for n, host in enumerate(["gpu-node01", "gpu-node02", "gpu-node03"])}
    for path in traces.values():
        assert loader.ingest_file(path).status == "loaded"
    path = tmp_path / "sacct.txt"
    path.write_text(TRACED_SACCT)
    summary = loader.ingest_file(path)  # the jobs after the traces
    assert (summary.kind, summary.rows_loaded, summary.rows_rejected) == ("slurm", 4, 0)

    got = runs()
    ddp, solo, odd, cpu = got["slurm-2001"], got["slurm-2002"], got["slurm-2003"], got["slurm-2004"]
    assert dict(ddp["tags"])["nodes"] == "gpu-node01,gpu-node02" and ddp["host"] is None
    assert solo["host"] == "gpu-node03"
    # the partition's rate stays the cost where there is one: 4 GPUs x 1 h x 2.5
    assert (ddp["cost_source"], ddp["cost_usd"]) == ("partition_rate", Decimal("10.0"))
    # no rate for "scavenger", an untyped GPU: 1 of node03's 4 GPUs for 0.5 h from the traces
    assert (solo["cost_source"], solo["cost_usd"]) == ("gpu_traces_catalog", Decimal("4.1") * Decimal("0.5"))
    assert any("not a Slurm host list" in f for f in odd["flags"]) and "nodes" not in dict(odd["tags"])
    assert cpu["cost_usd"] is None

    energy = wh.query("SELECT run_id, gpu_energy_kwh, gpus_traced, gpu_energy_coverage_pct FROM run_energy"
                      ).set_index("run_id")
    t11, t1130, t12 = (datetime(2025, 11, 20, h, m, tzinfo=timezone.utc) for h, m in ((11, 0), (11, 30), (12, 0)))
    # 2 GPUs per node of each node's 4: half of every GPU of both nodes over 11:00-12:00
    expected = 0.5 * energy_kwh([traces["gpu-node01"], traces["gpu-node02"]], t11, t12)
    assert energy.loc["slurm-2001", "gpu_energy_kwh"] == pytest.approx(expected, rel=1e-9)
    assert energy.loc["slurm-2001", "gpus_traced"] == 8
    assert energy.loc["slurm-2001", "gpu_energy_coverage_pct"] == pytest.approx(100.0)
    assert energy.loc["slurm-2002", "gpu_energy_kwh"] == pytest.approx(
        0.25 * energy_kwh([traces["gpu-node03"]], t1130, t12), rel=1e-9)
    assert "slurm-2004" not in energy.index and "slurm-2003" not in energy.index

    # The bill for gpu-node03's hour: the job's billed share is its GPU-seconds there (1/4 of 4 GPUs
    # for 30 min = 1,800 of the node's 14,400), kept apart from the run's own estimate.
    bill = tmp_path / "bill.csv"
    bill.write_text("BilledCost,EffectiveCost,BillingCurrency,ChargePeriodStart,ChargePeriodEnd,ChargeCategory,"
                    "ProviderName,ServiceName,ResourceId,ResourceName,x_LineItemId\n"
                    "8.00,8.00,USD,2025-11-20 11:00:00,2025-11-20 12:00:00,Usage,OnPrem,Compute,n3,gpu-node03,li-1\n")
    assert loader.ingest_file(bill).status == "loaded"
    assert cli.main(["allocation", "--json", "--from", "2025-11-20"]) == 0
    usd = json.loads(capsys.readouterr().out)["currencies"]["USD"]
    assert Decimal(usd["buckets"]["training"]) == Decimal("8.00") * 1800 / 14400
    assert Decimal(usd["by_key"]["cv"]) == Decimal("8.00") * 1800 / 14400
    assert sum(Decimal(v) for v in usd["buckets"].values()) == Decimal("8.00")
    assert runs()["slurm-2002"]["cost_usd"] == Decimal("4.1") * Decimal("0.5")  # the estimate stays the estimate
