"""`mlcost import SOURCE ...`: read runs and metrics where teams keep them (ingest/importers/)."""
from __future__ import annotations

import argparse
import json
import os
import re
from datetime import datetime, timedelta, timezone

from ingest import values
from ingest.contract import BadValue
from ingest.loader import FileSummary
from ingest.report import summary_lines
from mlcost.common import EXIT_PROBLEMS, EXIT_USAGE, say

DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhdw]?)$")
SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def register(commands) -> None:
    imports = commands.add_parser("import", help="import runs and metrics from Prometheus, MLflow, W&B or Slurm")
    sources = imports.add_subparsers(required=True, metavar="SOURCE")

    prom = sources.add_parser("prometheus", help="GPU traces (DCGM) and serving windows (vLLM, Triton, "
                                                 "TorchServe) from a Prometheus server's HTTP API")
    prom.add_argument("url", nargs="?", metavar="URL",
                      help="the server, e.g. http://127.0.0.1:9090 (default $MLCOST_PROMETHEUS_URL); a bearer "
                           "token comes from $MLCOST_PROMETHEUS_TOKEN")
    prom.add_argument("--since", required=True, help="start: ISO-8601 time or a duration back from now (2h, 7d)")
    prom.add_argument("--until", help="end: ISO-8601 time or a duration back from now (default now)")
    prom.add_argument("--step", default="60s",
                      help="resolution and serving-window length, e.g. 15s, 1m, 5m (default 60s)")
    prom.add_argument("--instance-type", help="serving windows: the instance type serving them (prices them from the catalog)")
    prom.add_argument("--replicas", type=int, help="serving windows: instances serving each model (with --instance-type)")
    prom.add_argument("--gpu-type", help="serving windows: the GPU model serving them (priced per GPU-hour)")
    prom.add_argument("--gpu-count", type=int, help="serving windows: GPUs serving each model (with --gpu-type)")
    prom.add_argument("--json", action="store_true", help="print a JSON array with one summary per load")
    prom.set_defaults(run=run_prometheus)


def run_prometheus(args: argparse.Namespace) -> int:
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
        client = prometheus.Client(url, token=os.environ.get("MLCOST_PROMETHEUS_TOKEN") or None)
    except (BadValue, prometheus.PrometheusError) as error:
        say(str(error))
        return EXIT_USAGE
    if until <= since:
        say(f"--until {until.isoformat()} is not after --since {since.isoformat()}")
        return EXIT_USAGE
    deployment = {key: value for key, value in (("instance_type", args.instance_type), ("replicas", args.replicas),
                                                ("gpu_type", args.gpu_type), ("gpu_count", args.gpu_count))
                  if value is not None}
    try:
        pulled = prometheus.pull(client, since, until, step_s, deployment)
    except prometheus.PrometheusError as error:
        say(str(error))
        return EXIT_PROBLEMS
    span = f"{_iso(pulled.start_s)} to {_iso(pulled.end_s)} step {step_s:g}s"
    summaries = []
    from ingest import serving, traces
    from ingest.importers import serving_metrics

    for label, parsed, content, totals in (
            ("GPU traces", pulled.gpu, pulled.gpu_content, traces.totals),
            ("serving windows", pulled.serving, pulled.serving_content, serving_metrics.totals)):
        if not parsed.accepted and not parsed.rejects:
            say(f"{client.display}: no {label} between {span}")
            continue
        source = f"prometheus {client.display} {label} {span}"
        summaries.append(ledger.load_import(source, prometheus.KIND, parsed, content, totals(parsed)))
    return report(summaries, args.json)


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
