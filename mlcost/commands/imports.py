"""`mlcost import SOURCE ...`: read runs and metrics where teams keep them (ingest/importers/)."""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import TYPE_CHECKING

from ingest.engine import values
from ingest.engine.contract import BadValue, ParseContext, numbered
from ingest.engine.report import summary_lines
from mlcost.common import EXIT_PROBLEMS, EXIT_USAGE, say

if TYPE_CHECKING:  # annotations only: the loader imports every parser
    from ingest.engine.report import FileSummary

DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhdw]?)$")
SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def register(commands) -> None:
    imports = commands.add_parser(
        "import", help="import runs and metrics from Prometheus, MLflow, W&B or Slurm",
        description="Import runs and metrics from the systems that hold them, with the same checks as a file.")
    sources = imports.add_subparsers(required=True, metavar="SOURCE", help="where the runs and metrics live")

    prom = sources.add_parser(
        "prometheus", help="GPU traces (DCGM) and serving windows (vLLM, Triton, TorchServe) from a "
                           "Prometheus server's HTTP API",
        description="Pull DCGM GPU traces and vLLM, Triton or TorchServe serving windows from a Prometheus "
                    "server's HTTP API.")
    prom.add_argument("url", nargs="?", metavar="URL",
                      help="the server, e.g. http://127.0.0.1:9090 (default $MLCOST_PROMETHEUS_URL); a bearer "
                           "token comes from $MLCOST_PROMETHEUS_TOKEN")
    prom.add_argument("--since", required=True, metavar="TIME", help="start: ISO-8601 time or a duration back from now (2h, 7d)")
    prom.add_argument("--until", metavar="TIME", help="end: ISO-8601 time or a duration back from now (default now)")
    prom.add_argument("--step", default="60s",
                      help="resolution and serving-window length, e.g. 15s, 1m, 5m (default 60s)")
    prom.add_argument("--instance-type", help="serving windows: the instance type serving them (prices them from the catalog)")
    prom.add_argument("--replicas", type=int, help="serving windows: instances serving each model (default 1 with --instance-type)")
    prom.add_argument("--gpu-type", help="serving windows: the GPU model serving them (priced per GPU-hour)")
    prom.add_argument("--gpu-count", type=int, help="serving windows: GPUs serving each model (default 1 with --gpu-type)")
    prom.add_argument("--json", action="store_true", help="print a JSON array with one summary per load")
    prom.set_defaults(run=run_prometheus)

    mlflow = sources.add_parser(
        "mlflow", help="runs from an MLflow tracking server or mlruns/ file store",
        description="Import runs from an MLflow tracking server or an mlruns/ file store, incrementally.")
    mlflow.add_argument("uri", nargs="?", metavar="URI",
                        help="http(s)://server:5000 or a path to mlruns/ (default $MLFLOW_TRACKING_URI); a token "
                             "comes from $MLCOST_MLFLOW_TOKEN or $MLFLOW_TRACKING_TOKEN")
    mlflow.add_argument("--full", action="store_true",
                        help="read every run again, not only those changed since the last import")
    mlflow.add_argument("--json", action="store_true", help="print a JSON array with one summary per load")
    mlflow.set_defaults(run=run_mlflow)

    wandb = sources.add_parser(
        "wandb", help="W&B runs from the UI's runs-table CSV export or local run folders",
        description="Import W&B runs from the UI's runs-table CSV export or local run folders (no network).")
    wandb.add_argument("paths", nargs="+", metavar="PATH",
                       help="a runs-table CSV export, or a folder holding run folders (wandb/run-*/files/)")
    wandb.add_argument("--json", action="store_true", help="print a JSON array with one summary per load")
    wandb.set_defaults(run=run_wandb)

    slurm = sources.add_parser(
        "slurm", help="Slurm jobs as training runs, from sacct or its saved output",
        description="Import Slurm jobs as training runs, by running sacct or reading its saved output.")
    slurm.add_argument("--since", metavar="TIME", help="run sacct for jobs from this time on: ISO-8601 or a duration back (2d)")
    slurm.add_argument("--until", metavar="TIME", help="with --since: jobs up to this time (default now)")
    slurm.add_argument("--file", action="append", metavar="FILE",
                       help="read saved `sacct --parsable2` output instead of running sacct (repeatable)")
    slurm.add_argument("--tz", default="UTC", metavar="ZONE", help="the cluster's time zone: sacct prints local times (default UTC)")
    slurm.add_argument("--json", action="store_true", help="print a JSON array with one summary per load")
    slurm.set_defaults(run=run_slurm)


def run_prometheus(args: argparse.Namespace) -> int:
    from ingest.formats.gpu import traces
    from ingest.formats import serving_metrics
    from ingest.importers import ledger, prometheus

    url = args.url or os.environ.get("MLCOST_PROMETHEUS_URL")
    if not url:
        say("name the Prometheus server: mlcost import prometheus URL, or set $MLCOST_PROMETHEUS_URL")
        return EXIT_USAGE
    try:
        now = datetime.now(timezone.utc)
        since = when(args.since, "--since", now)
        until = when(args.until, "--until", now) if args.until else now
        step_s = duration_s(args.step, "--step")
        client = prometheus.Client(url, token=os.environ.get("MLCOST_PROMETHEUS_TOKEN") or None,
                                   on_chunk=_chunk_progress if sys.stderr.isatty() and not args.json else None)
    except (BadValue, prometheus.PrometheusError) as error:
        say(str(error))
        return EXIT_USAGE
    if until <= since:
        say(f"--until {until.isoformat()} is not after --since {since.isoformat()}")
        return EXIT_USAGE
    deployment = {key: value for key, value in (("instance_type", args.instance_type), ("replicas", args.replicas),
                                                ("gpu_type", args.gpu_type), ("gpu_count", args.gpu_count))
                  if value is not None}
    if args.instance_type and args.replicas is None:
        deployment["replicas"] = 1  # one instance serves unless told otherwise
    if args.gpu_type and args.gpu_count is None:
        deployment["gpu_count"] = 1
    try:
        pulled = prometheus.pull(client, since, until, step_s, deployment)
    except prometheus.PrometheusError as error:
        say(str(error))
        return EXIT_PROBLEMS
    span = f"{_iso(pulled.start_s)} to {_iso(pulled.end_s)} step {step_s:g}s"
    summaries = []
    for label, parsed, content, totals in (
            ("GPU traces", pulled.gpu, pulled.gpu_content, traces.totals),
            ("serving windows", pulled.serving, pulled.serving_content, serving_metrics.totals)):
        if not parsed.accepted and not parsed.rejects:
            say(f"{client.display}: no {label} between {span}")
            continue
        source = f"prometheus {client.display} {label} {span}"
        summaries.append(ledger.load_import(source, prometheus.KIND, parsed, content, totals(parsed)))
    return report(summaries, args.json)


def run_mlflow(args: argparse.Namespace) -> int:
    from ingest.importers import mlflow_runs

    uri = args.uri or os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        say("name the MLflow store: mlcost import mlflow URI (a server URL or an mlruns/ path), "
            "or set $MLFLOW_TRACKING_URI")
        return EXIT_USAGE
    return import_runs(f"mlflow {mlflow_runs.display_uri(uri)}", mlflow_runs.KIND, args,
                       lambda since_ms: mlflow_runs.fetch(uri, since_ms), mlflow_runs.MlflowError)


def run_wandb(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ingest.pipeline import loader
    from ingest.importers import ledger, tracked_runs, wandb_runs
    from ingest.formats.runs.run_record import run_totals

    summaries = []
    for name in args.paths:
        path = Path(name)
        if path.is_file():
            summaries.append(loader.ingest_file(path, kind=wandb_runs.KIND))
            continue
        if not path.is_dir():
            summaries.append(loader.FileSummary(name, wandb_runs.KIND, error=f"{name}: no such file or folder"))
            continue
        runs, rejects, content = wandb_runs.read_run_folders(path)
        if not runs and not rejects:
            summaries.append(loader.FileSummary(name, wandb_runs.KIND, error=f"{name}: no W&B run folders "
                                         "(run-*/files/wandb-metadata.json or wandb-summary.json) in it"))
            continue
        parsed = tracked_runs.parse_runs(runs, ParseContext(name, timezone.utc), wandb_runs.KIND)
        parsed.rejects = rejects + parsed.rejects
        summaries.append(ledger.load_import(f"wandb {path.resolve()}", wandb_runs.KIND, parsed, content,
                                            run_totals(parsed)))
    return report(summaries, args.json)


def run_slurm(args: argparse.Namespace) -> int:
    import subprocess
    from pathlib import Path

    from ingest.pipeline import loader
    from ingest.importers import ledger, slurm

    tz = values.zone(args.tz)
    if tz is None:
        say(f"unknown time zone {args.tz!r} (use an IANA name such as Europe/Paris)")
        return EXIT_USAGE
    if args.file:
        return report([loader.ingest_file(Path(name), kind=slurm.KIND, tz=tz) for name in args.file], args.json)
    if not args.since:
        say("pass --since (run sacct) or --file (saved sacct --parsable2 output)")
        return EXIT_USAGE
    try:
        now = datetime.now(timezone.utc)
        since = when(args.since, "--since", now)
        until = when(args.until, "--until", now) if args.until else None
    except BadValue as error:
        say(str(error))
        return EXIT_USAGE
    try:
        output = slurm.run_sacct(since, until, tz)
    except (FileNotFoundError, RuntimeError, subprocess.TimeoutExpired) as error:
        say(str(error))
        return EXIT_PROBLEMS
    parsed = slurm.parse(numbered(output.split("\n")), ParseContext("sacct", tz))
    span = f"{since.isoformat()} to {(until or now).isoformat()}"
    summary = ledger.load_import(f"slurm sacct {span}", slurm.KIND, parsed, output.encode(), slurm.totals(parsed))
    add_trace_estimates(summary, parsed)
    return report([summary], args.json)


def import_runs(source: str, kind: str, args: argparse.Namespace, fetch, error_type) -> int:
    """Fetch a tracker's runs changed since the source's watermark, load them, move the watermark."""
    from dataclasses import asdict

    from ingest.importers import ledger, tracked_runs
    from ingest.formats.runs.run_record import run_totals

    since = None if getattr(args, "full", False) else ledger.watermark(source)
    try:
        fetched = fetch(int(since) if since else None)
    except error_type as error:
        say(str(error))
        return EXIT_PROBLEMS
    if fetched.deleted:
        say(f"{source}: skipped {fetched.deleted} deleted runs")
    if not fetched.runs:
        say(f"{source}: no runs changed since the last import" if since else f"{source}: no runs found")
        if args.json:
            print("[]")
        return 0 if since else EXIT_PROBLEMS
    ctx = ParseContext(source, timezone.utc)
    parsed = tracked_runs.parse_runs(fetched.runs, ctx, kind)
    content = json.dumps([asdict(run) for run in fetched.runs], sort_keys=True, default=str).encode()
    totals = {**run_totals(parsed), "runs_deleted_skipped": fetched.deleted}
    summary = ledger.load_import(source, kind, parsed, content, totals)
    if fetched.watermark_ms is not None:
        ledger.set_watermark(source, kind, str(fetched.watermark_ms))
    add_trace_estimates(summary, parsed)
    return report([summary], args.json)


def add_trace_estimates(summary: FileSummary, parsed) -> None:
    """Add to a loaded runs summary how many of its runs the warehouse priced from their hosts'
    GPU traces on loading them (`runs_cost_from_traces`, `cost_from_traces_usd_total`): estimates,
    apart from the costs the source gave."""
    from ingest.engine import warehouse

    if summary.status != "loaded":
        return
    count, cost_usd = warehouse.priced_from_traces([run["run_id"] for run in parsed.tables.get("runs", [])])
    summary.totals.update(runs_cost_from_traces=count, cost_from_traces_usd_total=str(cost_usd))
    if count:
        say(f"{summary.path}: {count} runs priced from their hosts' GPU traces x the catalog "
            f"(estimates, cost_source gpu_traces_catalog): USD {cost_usd.quantize(Decimal('0.01'))}")


def _chunk_progress(query: str, done: int, chunks: int) -> None:
    """One line on stderr, rewritten as the chunks of a query arrive."""
    what = "GPU series" if "DCGM" in query else "serving series"
    sys.stderr.write(f"\rpulling {what}: {done}/{chunks} chunks" + ("\n" if done == chunks else ""))
    sys.stderr.flush()


def report(summaries: list[FileSummary], as_json: bool) -> int:
    """Print each load's summary (text or one JSON array); the exit code of the import."""
    if as_json:
        print(json.dumps([s.to_json() for s in summaries], indent=2, default=str))
    else:
        for summary in summaries:
            print("\n".join(summary_lines(summary)), flush=True)
    if not summaries:
        say("nothing to import")
        return EXIT_PROBLEMS
    return 0 if all(s.ok for s in summaries) else EXIT_PROBLEMS


def when(text: str, name: str, now: datetime) -> datetime:
    """A UTC time from ISO-8601 (naive is UTC) or a duration back from now ('2h', '7d')."""
    match = DURATION.match(text.strip())
    if match and match[2]:
        return now - timedelta(seconds=float(match[1]) * SECONDS[match[2]])
    value = values.timestamp(text, name, timezone.utc)
    if value is None:
        raise BadValue(f"{name} is empty")
    return value


def duration_s(text: str, name: str) -> float:
    """Seconds from '60', '15s', '5m', '1h'; more than 0."""
    match = DURATION.match(text.strip())
    if not match or float(match[1]) <= 0:
        raise BadValue(f"{name} {text!r} must be a duration such as 15s, 1m or 5m")
    return float(match[1]) * SECONDS[match[2]]


def _iso(at_s: float) -> str:
    return datetime.fromtimestamp(at_s, timezone.utc).isoformat().replace("+00:00", "Z")
