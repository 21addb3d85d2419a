"""`mlcost import mlflow`: a real `mlflow server` on 127.0.0.1 filled through the MLflow client, and
mlruns/ file stores with the quirks real ones have."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from decimal import Decimal
from pathlib import Path

import pytest

from ingest.engine import warehouse as wh
from mlcost import cli
from tests.conftest import IN_CI

T0_MS = 1_763_632_800_000  # 2025-11-20T10:00:00Z
HOUR_MS = 3_600_000


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)  # MLflow writes params and tags without a trailing newline


def mlflow_run(store: Path, experiment: str, run_id: str, status: int, start_ms: int, end_ms: int | None,
               params: dict | None = None, tags: dict | None = None, metrics: dict | None = None,
               lifecycle: str = "active") -> Path:
    folder = store / experiment / run_id
    write(folder / "meta.yaml",
          f"artifact_uri: file:///C:/Users/alice/mlruns/{experiment}/{run_id}/artifacts\n"
          f"end_time: {'null' if end_ms is None else end_ms}\nentry_point_name: ''\nexperiment_id: '{experiment}'\n"
          f"lifecycle_stage: {lifecycle}\nrun_id: {run_id}\nrun_name: {run_id}-name\nrun_uuid: {run_id}\n"
          f"source_name: ''\nsource_type: 4\nsource_version: ''\nstart_time: {start_ms}\nstatus: {status}\n"
          "tags: []\nuser_id: alice\n")
    for key, value in (params or {}).items():
        write(folder / "params" / key, value)
    for key, value in (tags or {}).items():
        write(folder / "tags" / key, value)
    for key, points in (metrics or {}).items():
        write(folder / "metrics" / key, "".join(f"{ts} {value} {step}\n" for ts, value, step in points))
    return folder


def file_store(tmp_path: Path) -> Path:
    store = tmp_path / "mlruns"
    write(store / "1" / "meta.yaml", "artifact_location: C:\\Users\\alice\\mlruns\\1\nexperiment_id: '1'\n"
                                     "lifecycle_stage: active\nname: vision\n")
    mlflow_run(store, "1", "aaa", 3, T0_MS, T0_MS + 2 * HOUR_MS,
               params={"instance_type": "g5.xlarge", "lr": "0.001"},
               tags={"mlflow.user": "alice", "team": "cv", "mlflow.runName": "resnet-a", "host": "gpu-node-1",
                     "gpu_indices": "0,1"},
               metrics={"val_accuracy": [(T0_MS + 1000, 0.5, 0), (T0_MS + 3_600_000, 0.7, 1),
                                         (T0_MS + 7_000_000, 0.81, 2)],
                        "train/loss": [(T0_MS + 1000, 2.0, 0)],
                        "energy_consumed": [(T0_MS + 7_100_000, 1.25, 0)]})
    mlflow_run(store, "1", "bbb", 1, T0_MS + HOUR_MS, None, params={"gpu_type": "A10G", "gpu_count": "2"})
    mlflow_run(store, "1", "ccc", 3, T0_MS, T0_MS + HOUR_MS, lifecycle="deleted")
    mlflow_run(store, "1", "ddd", 4, T0_MS, T0_MS + HOUR_MS // 2, params={"cost_usd": "12.50"},
               tags={"project": "speech"})
    mlflow_run(store, "1", "eee", 3, T0_MS, T0_MS + HOUR_MS, metrics={"val_loss": [(T0_MS, "oops", 0)]})
    mlflow_run(store, "1", "fff", 5, T0_MS, T0_MS + HOUR_MS)  # KILLED, no price anywhere
    mlflow_run(store / ".trash", "1", "ggg", 3, T0_MS, T0_MS + HOUR_MS)
    return store


def runs() -> dict[str, dict]:
    frame = wh.query_exact("SELECT run_id, project, team, owner, status, started_at, ended_at, duration_s, "
                           "instance_type, price_per_hour_usd, cost_usd, cost_source, val_metric, "
                           "val_metric_name, energy_kwh, flags, tags, source_kind FROM runs")
    return {row["run_id"]: row for row in frame.to_dict("records")}


def test_file_store_with_quirks(warehouse, tmp_path, capsys):
    store = file_store(tmp_path)
    code = cli.main(["import", "mlflow", str(store), "--json"])
    out = capsys.readouterr()
    (summary,) = json.loads(out.out)
    assert code == 1  # one run was rejected
    assert (summary["kind"], summary["rows_loaded"], summary["rows_rejected"], summary["runs_deleted_skipped"]) == (
        "mlflow", 4, 1, 2)
    assert "metric val_loss: line 1" in summary["rejects"][0]["reason"] and "eee" in summary["rejects"][0]["reason"]
    got = runs()
    assert set(got) == {"aaa", "bbb", "ddd", "fff"}
    a = got["aaa"]
    # 2 hours of a g5.xlarge at the catalog's 1.006 USD/h: an estimate, labelled as one.
    assert (a["project"], a["team"], a["owner"], a["status"], a["cost_source"]) == (
        "vision", "cv", "alice", "completed", "catalog")
    assert a["cost_usd"] == Decimal("1.006") * 2 and a["price_per_hour_usd"] == Decimal("1.006")
    assert (a["val_metric_name"], a["val_metric"], a["energy_kwh"]) == ("val_accuracy", 0.81, 1.25)
    assert any("price catalog" in flag for flag in a["flags"])
    host, indices = wh.query("SELECT host, gpu_indices FROM runs WHERE run_id = 'aaa'").values[0]
    assert host == "gpu-node-1" and list(indices) == [0, 1]  # joins the host's GPU traces
    tags = dict(a["tags"]) if not isinstance(a["tags"], dict) else a["tags"]
    assert tags["param.lr"] == "0.001" and tags["run_name"] == "aaa-name" and "mlflow.user" not in tags
    # the Training runs table names each run as MLflow does (its meta.yaml run_name)
    from app import filters
    from metrics import queries

    table = queries.training_runs(filters.Filters(), None, None).set_index("run_id")
    assert table.loc["aaa", "run_name"] == "aaa-name" and table.loc["ddd", "run_name"] == "ddd-name"
    evals = wh.query("SELECT step, elapsed_s, value FROM run_evals WHERE run_id = 'aaa' ORDER BY seq")
    assert evals.values.tolist() == [[0, 1.0, 0.5], [1, 3600.0, 0.7], [2, 7000.0, 0.81]]
    assert (got["bbb"]["status"], got["bbb"]["ended_at"], got["bbb"]["cost_usd"]) == ("running", None, None)
    assert got["ddd"]["cost_usd"] == Decimal("12.50") and got["ddd"]["cost_source"] == "given"
    assert got["ddd"]["project"] == "speech" and got["ddd"]["status"] == "failed"
    assert got["fff"]["cost_usd"] is None and any(f.startswith("no cost") for f in got["fff"]["flags"])
    assert set(runs()[r]["source_kind"] for r in got) == {"mlflow"}

    # Nothing finished or started since: only the RUNNING run is read again; unchanged, the next
    # such import is already in the ledger.
    assert cli.main(["import", "mlflow", str(store), "--json"]) == 0
    (again,) = json.loads(capsys.readouterr().out)
    assert (again["status"], again["runs"]) == ("loaded", 1)
    assert cli.main(["import", "mlflow", str(store), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["status"] == "already_loaded"

    # bbb finishes, a new run arrives: the next import reads those two only (latest wins by run id).
    mlflow_run(store, "1", "bbb", 3, T0_MS + HOUR_MS, T0_MS + 4 * HOUR_MS, params={"gpu_type": "A10G", "gpu_count": "2"})
    mlflow_run(store, "1", "hhh", 3, T0_MS + 5 * HOUR_MS, T0_MS + 6 * HOUR_MS, params={"cost_usd": "3"})
    assert cli.main(["import", "mlflow", str(store), "--json"]) == 0
    (third,) = json.loads(capsys.readouterr().out)
    assert (third["runs"], third["rows_loaded"]) == (2, 2)
    b = runs()["bbb"]
    # 3 hours x 2 A10G at the catalog's 1.006 USD per GPU-hour
    assert b["status"] == "completed" and b["cost_usd"] == Decimal("1.006") * 2 * 3 and b["cost_source"] == "catalog"
    assert len(runs()) == 5


def test_not_a_store_says_why(warehouse, tmp_path, capsys):
    assert cli.main(["import", "mlflow", str(tmp_path / "nope")]) == 1
    assert "no such folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert cli.main(["import", "mlflow", str(tmp_path / "empty")]) == 1
    assert "not an MLflow file store" in capsys.readouterr().err


# --- a real tracking server ------------------------------------------------------------------

def mlflow_binary() -> Path:
    named = os.environ.get("MLCOST_TEST_MLFLOW") or shutil.which("mlflow") or "/opt/mlflow-venv/bin/mlflow"
    if not Path(named).is_file():
        if IN_CI:
            pytest.fail("no mlflow server in CI: install it (a venv at /opt/mlflow-venv, or $MLCOST_TEST_MLFLOW)")
        pytest.skip("mlflow is not installed: python -m venv /opt/mlflow-venv && /opt/mlflow-venv/bin/pip install mlflow")
    return Path(named)


FILL = r'''
import sys, mlflow
from mlflow.tracking import MlflowClient
mlflow.set_tracking_uri(sys.argv[1])
client = MlflowClient()
exp = client.create_experiment("llm-finetune")
t0 = int(sys.argv[2])
ids = []
run = client.create_run(exp, start_time=t0, run_name="lora-a", tags={"team": "nlp", "instance_type": "g5.2xlarge"})
client.log_param(run.info.run_id, "lr", "0.0002")
for step, (ms, value) in enumerate([(60_000, 2.1), (1_800_000, 1.7), (3_500_000, 1.4)]):
    client.log_metric(run.info.run_id, "eval_loss", value, timestamp=t0 + ms, step=step)
client.log_metric(run.info.run_id, "emissions", 0.33, timestamp=t0 + 3_600_000)
client.log_metric(run.info.run_id, "energy_consumed", 0.75, timestamp=t0 + 3_600_000)
client.set_terminated(run.info.run_id, "FINISHED", end_time=t0 + 3_600_000)
ids.append(run.info.run_id)
run = client.create_run(exp, start_time=t0 + 600_000, run_name="lora-b", tags={"price_per_hour_usd": "2.50"})
client.set_terminated(run.info.run_id, "FAILED", end_time=t0 + 600_000 + 1_800_000)
ids.append(run.info.run_id)
run = client.create_run(exp, start_time=t0, run_name="gone")
client.set_terminated(run.info.run_id, "FINISHED", end_time=t0 + 60_000)
client.delete_run(run.info.run_id)
run = client.create_run(exp, start_time=t0 + 900_000, run_name="still-going")
ids.append(run.info.run_id)
print("IDS " + " ".join(ids))
'''


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    binary = mlflow_binary()
    tmp = tmp_path_factory.mktemp("mlflow")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = open(tmp / "server.log", "w")
    server = subprocess.Popen([str(binary), "server", "--host", "127.0.0.1", "--port", str(port),
                               "--backend-store-uri", f"sqlite:///{tmp / 'mlflow.db'}",
                               "--default-artifact-root", str(tmp / "artifacts"), "--workers", "1"],
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=5) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            assert server.poll() is None, (tmp / "server.log").read_text()[-3000:]
            assert time.monotonic() < deadline, (tmp / "server.log").read_text()[-3000:]
            time.sleep(0.5)
        filled = subprocess.run([str(binary.parent / "python"), "-c", FILL, url, str(T0_MS)],
                                capture_output=True, text=True, timeout=300)
        assert filled.returncode == 0, filled.stderr[-3000:]
        yield url, next(l for l in filled.stdout.splitlines() if l.startswith("IDS ")).split()[1:]
    finally:
        os.killpg(server.pid, 15)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:  # on a busy machine its workers may outlast 30 s
            os.killpg(server.pid, 9)
            server.wait(timeout=30)
        log.close()


def test_tracking_server_runs_with_history_cost_and_energy(mlflow_server, warehouse, capsys):
    url, (lora_a, lora_b, going) = mlflow_server
    assert cli.main(["import", "mlflow", url, "--json"]) == 0
    (summary,) = json.loads(capsys.readouterr().out)
    assert (summary["runs"], summary["runs_deleted_skipped"], summary["rows_rejected"]) == (3, 1, 0)
    got = runs()
    assert set(got) == {lora_a, lora_b, going}
    a, b = got[lora_a], got[lora_b]
    assert (a["project"], a["team"], a["status"], a["val_metric_name"], a["val_metric"]) == (
        "llm-finetune", "nlp", "completed", "eval_loss", 1.4)
    assert (a["energy_kwh"], a["cost_source"], a["cost_usd"]) == (0.75, "catalog", Decimal("1.212"))  # 1 h g5.2xlarge
    evals = wh.query("SELECT step, elapsed_s, value FROM run_evals WHERE run_id = ? ORDER BY seq", [lora_a])
    assert evals.values.tolist() == [[0, 60.0, 2.1], [1, 1800.0, 1.7], [2, 3500.0, 1.4]]
    assert (b["status"], b["cost_source"], b["cost_usd"]) == ("failed", "derived", Decimal("1.25"))  # 0.5 h x 2.50
    assert got[going]["status"] == "running"
    emissions = wh.query("SELECT emissions_kg FROM runs WHERE run_id = ?", [lora_a])["emissions_kg"][0]
    assert emissions == 0.33

    # Incremental: only the running run is read again.
    assert cli.main(["import", "mlflow", url, "--json"]) == 0
    (again,) = json.loads(capsys.readouterr().out)
    assert (again["status"], again["runs"]) == ("loaded", 1)
    watermark = wh.query("SELECT watermark FROM import_watermarks")["watermark"][0]
    assert int(watermark) == T0_MS + 3_600_000  # the latest start or end seen (lora-a's end)
    code = subprocess.run([str(mlflow_binary().parent / "python"), "-c",
                           "import sys, mlflow; from mlflow.tracking import MlflowClient; "
                           "mlflow.set_tracking_uri(sys.argv[1]); "
                           "MlflowClient().set_terminated(sys.argv[2], 'FINISHED', end_time=int(sys.argv[3]))",
                           url, going, str(T0_MS + 5 * HOUR_MS)], capture_output=True, text=True, timeout=300)
    assert code.returncode == 0, code.stderr[-2000:]
    assert cli.main(["import", "mlflow", url, "--json"]) == 0
    (third,) = json.loads(capsys.readouterr().out)
    assert third["runs"] == 1 and runs()[going]["status"] == "completed"
    assert runs()[going]["duration_s"] == pytest.approx((5 * HOUR_MS - 900_000) / 1000)


# --- the last cost fallback: the GPU traces of the run's host over its window -----------------

def test_cost_and_energy_from_the_traces_of_the_runs_host(warehouse, tmp_path, capsys, monkeypatch):
    """Runs that log no cost, price, instance or GPU type are priced from their host's traces once
    those are loaded (after the runs here), labelled as an estimate; unloading the traces takes it back."""
    from datetime import datetime, timedelta, timezone

    from ingest.pipeline import loader
    from tests.trace_files import energy_kwh, write_trace

    settings = tmp_path / "mlcost.toml"
    settings.write_text('[prices.gpu_usd_per_hour]\n"A100-SXM4-80GB" = 4.1\n')
    monkeypatch.setenv("MLCOST_CONFIG", str(settings))
    store = tmp_path / "mlruns"
    write(store / "2" / "meta.yaml", "artifact_location: C:\\mlruns\\2\nexperiment_id: '2'\n"
                                     "lifecycle_stage: active\nname: traced\n")
    # two of the node's four GPUs for 1 h; the whole node (no GPU count) for 1.5 h; a logged cost
    mlflow_run(store, "2", "half", 3, T0_MS, T0_MS + HOUR_MS, tags={"host": "gpu-node-7", "gpu_count": "2"})
    mlflow_run(store, "2", "whole", 3, T0_MS + 2 * HOUR_MS, T0_MS + 7 * HOUR_MS // 2, tags={"host": "gpu-node-7"})
    mlflow_run(store, "2", "paid", 3, T0_MS, T0_MS + HOUR_MS,
               tags={"host": "gpu-node-7", "gpu_count": "1"}, params={"cost_usd": "0.40"})
    mlflow_run(store, "2", "elsewhere", 3, T0_MS, T0_MS + HOUR_MS, tags={"host": "gpu-node-9", "gpu_count": "1"})
    assert cli.main(["import", "mlflow", str(store), "--json"]) == 0
    capsys.readouterr()
    before = runs()
    assert before["half"]["cost_usd"] is None and any(f.startswith("no cost") for f in before["half"]["flags"])

    t0 = datetime.fromtimestamp(T0_MS / 1000, timezone.utc)
    trace = write_trace(tmp_path / "gpu-node-7_traces.csv", "gpu-node-7", 4, "NVIDIA A100-SXM4-80GB",
                        t0 - timedelta(minutes=5), t0 + timedelta(hours=4), base_w=180)
    summary = loader.ingest_file(trace)
    assert (summary.kind, summary.rows_rejected) == ("gpu-collector", 0), summary.error

    got = runs()
    half, whole = got["half"], got["whole"]
    # 2 of 4 GPUs: half of each of the node's GPUs for 1 h = 2 GPU-hours x 4.1 USD
    assert (half["cost_source"], half["cost_usd"]) == ("gpu_traces_catalog", Decimal("4.1") * 2)
    assert (whole["cost_source"], whole["cost_usd"]) == ("gpu_traces_catalog", Decimal("4.1") * 4 * Decimal("1.5"))
    assert not any(f.startswith("no cost") for f in half["flags"])
    assert any("GPU traces" in f and "estimate" in f and "not billed" in f for f in half["flags"])
    assert (got["paid"]["cost_source"], got["paid"]["cost_usd"]) == ("given", Decimal("0.40"))  # never replaced
    assert got["elsewhere"]["cost_usd"] is None  # no traces of its host

    energy = wh.query("SELECT run_id, gpu_energy_kwh, gpus_traced FROM run_energy").set_index("run_id")
    t1, t2, t35 = t0 + timedelta(hours=1), t0 + timedelta(hours=2), t0 + timedelta(hours=3.5)
    # "half" and "paid" overlap on the node: paid (1 of 4) and half (2 of 4) take 3/4 of each GPU-minute
    assert energy.loc["half", "gpu_energy_kwh"] == pytest.approx(0.5 * energy_kwh([trace], t0, t1), rel=1e-9)
    assert energy.loc["paid", "gpu_energy_kwh"] == pytest.approx(0.25 * energy_kwh([trace], t0, t1), rel=1e-9)
    assert energy.loc["whole", "gpu_energy_kwh"] == pytest.approx(energy_kwh([trace], t2, t35), rel=1e-9)
    assert energy.loc["whole", "gpus_traced"] == 4
    coverage = wh.query("SELECT run_id, gpu_energy_coverage_pct FROM run_energy").set_index("run_id")
    assert coverage.loc["whole", "gpu_energy_coverage_pct"] == pytest.approx(100.0)  # every GPU-second traced
    assert coverage.loc["half", "gpu_energy_coverage_pct"] == pytest.approx(100.0)

    # A run arriving after its traces is priced as it loads; the summary says how many were so.
    mlflow_run(store, "2", "late", 3, T0_MS + 3 * HOUR_MS, T0_MS + 4 * HOUR_MS, tags={"host": "gpu-node-7", "gpu_count": "4"})
    assert cli.main(["import", "mlflow", str(store), "--json"]) == 0
    (late,) = json.loads(capsys.readouterr().out)
    assert (late["runs"], late["runs_cost_from_traces"]) == (1, 1)
    assert Decimal(late["cost_from_traces_usd_total"]) == Decimal("4.1") * 4 and late["cost_usd_total"] is None

    # The traces go: so do the estimates; the run is back to no cost, flagged.
    load_id = int(wh.query("SELECT load_id FROM loads WHERE kind = 'gpu-collector'")["load_id"][0])
    assert cli.main(["unload", str(load_id)]) == 0
    after = runs()["half"]
    assert (after["cost_usd"], after["cost_source"]) == (None, None)
    assert any(f.startswith("no cost") for f in after["flags"]) and not any("GPU traces (" in f for f in after["flags"])


def test_traces_of_a_gpu_the_catalog_lacks_leave_the_cost_unknown(warehouse, tmp_path, capsys, monkeypatch):
    from datetime import datetime, timedelta, timezone

    from ingest.pipeline import loader
    from tests.trace_files import write_trace

    settings = tmp_path / "mlcost.toml"
    settings.write_text('[prices.gpu_usd_per_hour]\n"A100-SXM4-80GB" = 4.1\n')
    monkeypatch.setenv("MLCOST_CONFIG", str(settings))
    t0 = datetime.fromtimestamp(T0_MS / 1000, timezone.utc)
    loader.ingest_file(write_trace(tmp_path / "gpu-node-3_t.csv", "gpu-node-3", 2, "Mystery GPU X",
                                   t0 - timedelta(minutes=1), t0 + timedelta(hours=2), base_w=100))
    store = tmp_path / "mlruns"
    write(store / "2" / "meta.yaml", "experiment_id: '2'\nlifecycle_stage: active\nname: traced\n")
    mlflow_run(store, "2", "odd", 3, T0_MS, T0_MS + HOUR_MS, tags={"hostname": "gpu-node-3"})
    assert cli.main(["import", "mlflow", str(store), "--json"]) == 0  # runs after the traces: priced at once
    capsys.readouterr()
    odd = runs()["odd"]
    assert (odd["cost_usd"], odd["cost_source"]) == (None, None)
    assert any("no GPU-hour price for Mystery GPU X" in f for f in odd["flags"])
    assert wh.query("SELECT gpus_traced FROM run_energy WHERE run_id = 'odd'")["gpus_traced"][0] == 2
