"""The `mlcost` command: ingest files, open the dashboard, open the demo."""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

from ingest import config, loader, values, warehouse
from ingest.contract import BadValue
from ingest.report import summary_lines

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE_DIR = REPO_ROOT / "sample_data"
# The sample files the demo loads: one entry per kind that has an ingestor (a folder is read whole).
SAMPLE_FILES = ("runs.jsonl", "serving_windows.jsonl.gz", "gpu_traces", "billing")
DEMO_DB = "mlcost-demo.duckdb"
DEMO_CONFIG = "mlcost.toml"  # in sample_data/: the sample organisation's budgets
FETCH_DIR = "mlcost-bills"
EXIT_PROBLEMS, EXIT_USAGE, EXIT_BUSY = 1, 2, 3


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except warehouse.WarehouseBusy as busy:
        print(f"mlcost: {busy}", file=sys.stderr)
        return EXIT_BUSY
    except config.ConfigError as error:
        print(f"mlcost: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mlcost",
        description="Cost and energy analytics for ML teams. The warehouse is $MLCOST_DB "
                    f"(default ./{warehouse.DEFAULT_DB}).",
    )
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    ingest = commands.add_parser("ingest", help="load files, folders or globs into the warehouse")
    ingest.add_argument("paths", nargs="+", metavar="PATH", help="file, folder (recursive) or glob; .gz is read too")
    ingest.add_argument("--kind", choices=sorted(loader.KINDS), help="skip detection and read every file as this kind")
    ingest.add_argument("--json", action="store_true", help="print a JSON array with one summary per file")
    ingest.add_argument("--tz", default="UTC", help="time zone of timestamps written without an offset (default UTC)")
    ingest.add_argument("--host", help="GPU traces: the host the samples come from (overrides the file's host column or label)")
    ingest.add_argument("--at", help="DCGM scrapes without sample timestamps: when the scrape was taken (ISO-8601)")
    ingest.set_defaults(run=_ingest)

    collect = commands.add_parser("collect", help="sample every NVIDIA GPU through NVML into rotating trace files")
    collect.add_argument("--out", default="gpu_traces", help="folder for the trace files (default ./gpu_traces)")
    collect.add_argument("--interval", type=float, default=10.0, help="seconds between samples (default 10)")
    collect.add_argument("--rotate", type=float, default=3600.0,
                         help="seconds after which a new file is started (default 3600)")
    collect.add_argument("--host", help="host name written in the files (default: this machine's name)")
    collect.set_defaults(run=_collect)

    rollup = commands.add_parser("rollup", help="recompute the per-minute GPU figures with the current [gpu] settings")
    rollup.set_defaults(run=_rollup)

    fetch = commands.add_parser("fetch", help="pull cloud bills from S3 (following CUR manifests), then ingest them")
    fetch.add_argument("location", metavar="s3://BUCKET/PREFIX", help="the bucket and prefix to pull")
    fetch.add_argument("--profile", help="AWS profile to use (default: the standard credential chain)")
    fetch.add_argument("--endpoint-url", help="an S3-compatible endpoint instead of AWS (MinIO, a test server)")
    fetch.add_argument("--dest", default=FETCH_DIR, help=f"download folder (default ./{FETCH_DIR})")
    fetch.add_argument("--json", action="store_true", help="print a JSON array with one summary per ingested file")
    fetch.set_defaults(run=_fetch)

    alerts = commands.add_parser("alerts", help="budget and waste alerts to Slack, for cron")
    alert_commands = alerts.add_subparsers(required=True, metavar="ACTION")
    check = alert_commands.add_parser("check", help="evaluate every alert rule and post new alerts to Slack")
    check.add_argument("--dry-run", action="store_true", help="print what would fire; record and post nothing")
    check.add_argument("--as-of", metavar="YYYY-MM-DD",
                       help="evaluate as on this day, counting data up to the day before (default today, UTC)")
    check.add_argument("--json", action="store_true", help="print the result as JSON")
    check.set_defaults(run=_alerts_check)
    test = alert_commands.add_parser("test", help="post a test message to a channel's webhook")
    test.add_argument("--channel", help="a named channel (default: the default webhook)")
    test.set_defaults(run=_alerts_test)
    snooze = alert_commands.add_parser("snooze", help="hold the alerts of a budget (or other subject) for a while")
    snooze.add_argument("subject", help='the budget name, "SERVICE VERSION" of a regression, or GPUs')
    snooze.add_argument("--rule", choices=["budget_actual", "budget_forecast", "burn_spike",
                                           "serving_regression", "idle_waste"],
                        help="only this rule (default: every rule)")
    snooze.add_argument("--days", type=float, default=7.0, help="how long (default 7 days; 0 lifts the snooze)")
    snooze.set_defaults(run=_alerts_snooze)

    report = commands.add_parser("report", help="write the monthly efficiency retrospective as Markdown or HTML")
    report.add_argument("--month", metavar="YYYY-MM", help="the UTC month (default: the latest month with data)")
    report.add_argument("--format", choices=("md", "html"), default="md", help="md (default) or html")
    report.add_argument("--out", metavar="PATH",
                        help="file to write (default: Markdown to stdout, HTML to ./mlcost-report-YYYY-MM.html)")
    report.set_defaults(run=_report)

    for name, help_text, runner in (
        ("dashboard", "open the dashboard on the warehouse", _dashboard),
        ("demo", f"load the bundled sample data into ./{DEMO_DB} (or $MLCOST_DB) and open the dashboard", _demo),
    ):
        command = commands.add_parser(name, help=help_text)
        command.add_argument("--port", type=int, default=8501, help="port to serve on (default 8501)")
        command.add_argument("--address", default="localhost", help="address to listen on (default localhost)")
        command.set_defaults(run=runner)
    return parser


def _ingest(args: argparse.Namespace) -> int:
    tz = values.zone(args.tz)
    if tz is None:
        print(f"mlcost: unknown time zone {args.tz!r} (use an IANA name such as Europe/Paris)", file=sys.stderr)
        return 2
    try:
        at = values.timestamp(args.at, "--at", tz)
    except BadValue as error:
        print(f"mlcost: {error}", file=sys.stderr)
        return EXIT_USAGE
    files, _ = loader.expand(args.paths)
    progress = _Progress(sum(p.stat().st_size for p in files)) if _show_progress(args) else None
    summaries = []
    for path, summary in loader.ingest_paths(args.paths, args.kind, tz, host=args.host, at=at):
        summaries.append(summary)
        if progress:
            progress.clear()
        if not args.json:
            print("\n".join(summary_lines(summary)), flush=True)
        if progress and path is not None:
            progress.advance(path.stat().st_size)
    if progress:
        progress.clear()
    if args.json:
        print(json.dumps([s.to_json() for s in summaries], indent=2))
    return 0 if summaries and all(s.ok for s in summaries) else EXIT_PROBLEMS


def _dashboard(args: argparse.Namespace) -> int:
    return _serve(args, warehouse.db_path())


def _demo(args: argparse.Namespace) -> int:
    db = Path(os.environ.get("MLCOST_DB") or DEMO_DB)
    os.environ["MLCOST_DB"] = str(db)
    if config.user_path() is None:  # no settings of the user's: the sample organisation's budgets
        os.environ["MLCOST_CONFIG"] = str(SAMPLE_DIR / DEMO_CONFIG)
    for _, summary in loader.ingest_paths([str(SAMPLE_DIR / name) for name in SAMPLE_FILES]):
        print("\n".join(summary_lines(summary)), flush=True)
    return _serve(args, db)


def _collect(args: argparse.Namespace) -> int:
    from ingest import collector

    return collector.main(Path(args.out), args.interval, args.rotate, args.host)


def _rollup(args: argparse.Namespace) -> int:
    gpus = warehouse.rebuild_gpu_rollups()
    print(f"mlcost: recomputed the per-minute figures of {gpus} GPUs with the current [gpu] settings")
    return 0


def _fetch(args: argparse.Namespace) -> int:
    """Fetch new or changed bill files from S3, then ingest every fetched file not yet ingested."""
    import boto3
    import botocore.exceptions

    from ingest import s3_fetch

    try:
        bucket, prefix = s3_fetch.parse_uri(args.location)
    except ValueError as error:
        print(f"mlcost: {error}", file=sys.stderr)
        return EXIT_USAGE
    dest = Path(args.dest)
    try:
        client = boto3.Session(profile_name=args.profile).client("s3", endpoint_url=args.endpoint_url)
        fetched = s3_fetch.fetch(client, bucket, prefix, dest)
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as error:
        print(f"mlcost: cannot fetch {args.location}: {error}", file=sys.stderr)
        return EXIT_PROBLEMS
    print(f"mlcost: {len(fetched.downloaded)} files fetched ({fetched.bytes_downloaded / 1e6:.1f} MB), "
          f"{len(fetched.unchanged)} unchanged, into {dest}", file=sys.stderr)
    if fetched.not_in_manifest:
        print(f"mlcost: {len(fetched.not_in_manifest)} files under the prefix are in no manifest "
              "(superseded deliveries) and were left alone", file=sys.stderr)
    for uri, reason in fetched.refused:
        print(f"mlcost: {uri}: {reason}", file=sys.stderr)
    summaries = []
    for uri, path in fetched.pending:
        summary = loader.ingest_file(path, display_name=uri)
        summaries.append(summary)
        if not args.json:
            print("\n".join(summary_lines(summary)), flush=True)
        if summary.status != "failed":
            s3_fetch.mark_ingested(dest, [uri])
    if args.json:
        print(json.dumps([s.to_json() for s in summaries], indent=2))
    return 0 if all(s.ok for s in summaries) and not fetched.refused else EXIT_PROBLEMS


def _alerts_check(args: argparse.Namespace) -> int:
    """Evaluate, record, post; exit 1 when a post failed (the alert waits for the next check)."""
    from app import alerts, slack

    try:
        as_of = date.fromisoformat(args.as_of) if args.as_of else datetime.now(timezone.utc).date()
    except ValueError:
        print(f"mlcost: --as-of {args.as_of!r} is not a date (YYYY-MM-DD)", file=sys.stderr)
        return EXIT_USAGE
    try:
        result = alerts.check(config.load(), as_of, dry_run=args.dry_run)
    except slack.SecretsError as error:
        print(f"mlcost: {error}", file=sys.stderr)
        return EXIT_USAGE
    except alerts.CheckRunning as running:
        print(f"mlcost: {running}", file=sys.stderr)
        return EXIT_PROBLEMS
    by_key = {alert.key: alert for alert in result.alerts}
    if args.json:
        print(json.dumps({
            "as_of": as_of.isoformat(), "dry_run": args.dry_run,
            "firing": [alert.key for alert in result.alerts], "new": result.new, "resolved": result.resolved,
            "delivered": result.delivered, "snoozed": result.snoozed, "superseded": result.superseded,
            "failed": [{"alerts": keys, "reason": reason} for keys, reason in result.failed],
        }, indent=2))
    else:
        verb = "would fire" if args.dry_run else "new"
        print(f"mlcost: {len(result.alerts)} alert conditions hold as of {as_of}; {len(result.new)} {verb}, "
              f"{len(result.resolved)} resolved, {len(result.delivered)} posted to Slack"
              + (f", {len(result.superseded)} left unposted under a higher threshold" if result.superseded else "")
              + (f", {len(result.snoozed)} snoozed" if result.snoozed else ""))
        for key in result.new:
            print(f"  {'WOULD FIRE' if args.dry_run else 'NEW'} {by_key[key].title}\n    {by_key[key].message}")
    for keys, reason in result.failed:  # on stderr with --json too, for cron's mail and logs
        print(f"mlcost: NOT POSTED ({len(keys)} alerts, retried on the next check): {reason}", file=sys.stderr)
    return EXIT_PROBLEMS if result.failed else 0


def _alerts_test(args: argparse.Namespace) -> int:
    from app import alerts, slack

    try:
        outcome = alerts.test_message(args.channel, config.load())
    except slack.SecretsError as error:
        print(f"mlcost: {error}", file=sys.stderr)
        return EXIT_USAGE
    channel = args.channel or "default"
    if outcome.ok:
        print(f"mlcost: test message posted to the {channel} channel")
        return 0
    print(f"mlcost: test message to the {channel} channel failed: {outcome.error}", file=sys.stderr)
    return EXIT_PROBLEMS


def _alerts_snooze(args: argparse.Namespace) -> int:
    from app import alert_store

    rule = args.rule or alert_store.ANY_RULE
    at = alert_store.now()
    if args.days <= 0:
        alert_store.unsnooze(rule, args.subject)
        print(f"mlcost: alerts of {args.subject!r} are no longer snoozed")
        return 0
    until = at + timedelta(days=args.days)
    alert_store.snooze(rule, args.subject, until, at)
    print(f"mlcost: {'every' if args.rule is None else args.rule} alert of {args.subject!r} is held until "
          f"{until:%Y-%m-%d %H:%M} UTC")
    return 0


def _serve(args: argparse.Namespace, db: Path) -> int:
    from app import slack

    print(f"mlcost: warehouse {db.resolve()}; dashboard on http://{args.address}:{args.port}", flush=True)
    command = [
        sys.executable, "-m", "streamlit", "run", str(REPO_ROOT / "app" / "main.py"),
        "--server.port", str(args.port), "--server.address", args.address,
        "--browser.gatherUsageStats", "false",
    ]
    env = {**os.environ, "MLCOST_DB": str(db.resolve())}
    settings = config.user_path()  # the dashboard runs from the repository: pass ./mlcost.toml on
    if settings is not None:
        env["MLCOST_CONFIG"] = str(settings.resolve())
    secrets = slack.secrets_path()  # and the Slack webhooks of ./.streamlit/secrets.toml
    if secrets is not None:
        env["MLCOST_SECRETS"] = str(secrets.resolve())
    server = subprocess.Popen(command, env=env, cwd=REPO_ROOT)
    # `kill` (SIGTERM) of mlcost must stop the dashboard too, not leave it serving on the port.
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: server.terminate())
    try:
        return server.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)
        if server.poll() is None:  # Ctrl-C: the server got it too; give it time to stop
            server.terminate()
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                server.kill()


def _report(args: argparse.Namespace) -> int:
    """The retrospective of one month (app/retrospective.py) rendered by app/report.py."""
    from app import report, retrospective

    if args.month is None:
        month = retrospective.latest_month()
        if month is None:
            print("mlcost: the warehouse holds no data yet; load some with `mlcost ingest PATH` first",
                  file=sys.stderr)
            return EXIT_PROBLEMS
    else:
        try:
            month = retrospective.parse_month(args.month)
        except ValueError as error:
            print(f"mlcost: --month {error}", file=sys.stderr)
            return EXIT_USAGE
    retro = retrospective.build(month, config.load())
    text = report.markdown(retro) if args.format == "md" else report.html_report(retro)
    out = args.out or (None if args.format == "md" else f"mlcost-report-{month:%Y-%m}.html")
    if out is None:
        sys.stdout.write(text)
        return 0
    Path(out).write_text(text, encoding="utf-8")
    print(f"mlcost: wrote the {month:%Y-%m} retrospective to {out}", file=sys.stderr)
    return 0


def _show_progress(args: argparse.Namespace) -> bool:
    return not args.json and sys.stderr.isatty()


class _Progress:
    """A one-line progress bar on stderr, by bytes read."""

    WIDTH = 30

    def __init__(self, total_bytes: int) -> None:
        self.total, self.done = max(total_bytes, 1), 0

    def advance(self, size_bytes: int) -> None:
        self.done += size_bytes
        filled = int(self.WIDTH * self.done / self.total)
        bar = "#" * filled + "." * (self.WIDTH - filled)
        sys.stderr.write(f"\r[{bar}] {self.done / 1e6:.1f}/{self.total / 1e6:.1f} MB")
        sys.stderr.flush()

    def clear(self) -> None:
        sys.stderr.write("\r" + " " * (self.WIDTH + 30) + "\r")
        sys.stderr.flush()


if __name__ == "__main__":
    sys.exit(main())
