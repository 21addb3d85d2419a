"""`mlcost dashboard` and `mlcost demo`: serve the Streamlit dashboard on a warehouse."""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from ingest import config, warehouse
from ingest.report import summary_lines
from mlcost.common import REPO_ROOT, SAMPLE_DIR

# The sample files the demo loads: one entry per kind that has an ingestor (a folder is read whole).
SAMPLE_FILES = ("runs.jsonl", "serving_windows.jsonl.gz", "gpu_traces", "billing")
DEMO_CONFIG = "mlcost.toml"  # in sample_data/: the sample organisation's budgets


def register(commands) -> None:
    for name, help_text, runner in (
        ("dashboard", "open the dashboard on the warehouse", run_dashboard),
        ("demo", "load the bundled sample data into the warehouse ($MLCOST_DB, default ./mlcost.duckdb) and open the dashboard", run_demo),
    ):
        command = commands.add_parser(name, help=help_text)
        command.add_argument("--port", type=int, default=8501, help="port to serve on (default 8501)")
        command.add_argument("--address", default="127.0.0.1",
                             help="address to listen on (default 127.0.0.1: this machine only; another address "
                                  "exposes the dashboard: use --login oidc)")
        command.add_argument("--read-only", action="store_true",
                             help="pages change nothing: no uploads, snoozes, test messages or decision-log entries")
        command.add_argument("--login", choices=["oidc"],
                             help="visitors sign in with the OIDC provider of [auth] in .streamlit/secrets.toml")
        command.set_defaults(run=runner)
        if name == "demo":
            command.add_argument("--no-dashboard", action="store_true",
                                 help="load the sample and write ./mlcost.toml, then stop without opening the "
                                      "dashboard (for scripts and CI: `mlcost report`, `mlcost alerts check` next)")


def run_dashboard(args: argparse.Namespace) -> int:
    return _serve(args, warehouse.db_path())


def run_demo(args: argparse.Namespace) -> int:
    from ingest import loader

    # The demo loads into the warehouse every command reads, so `mlcost report` or
    # `mlcost alerts check` afterwards (in the same folder) see the sample data.
    db = warehouse.db_path()
    if config.user_path() is None:  # no settings of the user's: the sample organisation's budgets
        shutil.copyfile(SAMPLE_DIR / DEMO_CONFIG, config.local_path())
        print(f"mlcost: wrote ./{config.USER_FILE} with the sample organisation's budgets (edit it, or the "
              "Budgets page)", flush=True)
    for _, summary in loader.ingest_paths([str(SAMPLE_DIR / name) for name in SAMPLE_FILES]):
        print("\n".join(summary_lines(summary)), flush=True)
    _print_month()
    print(f"mlcost: the sample data is in {db}, the warehouse every mlcost command run here reads "
          "(`mlcost report`, `mlcost alerts check`, ...); `mlcost unload` removes a sample file again", flush=True)
    if args.no_dashboard:
        return 0
    return _serve(args, db)


def _print_month() -> None:
    """The Overview's headline of the sample's month (metrics/month.py), as a first answer."""
    from datetime import datetime, timezone

    from metrics import month

    as_of = month.as_of_day(datetime.now(timezone.utc).date())
    with warehouse.session():
        for line in month.summary_lines(month.build(as_of, config.load())):
            print(f"mlcost: {line}", flush=True)


def _serve(args: argparse.Namespace, db: Path) -> int:
    from outputs import slack

    print(f"mlcost: warehouse {db.resolve()}; dashboard on http://{args.address}:{args.port}", flush=True)
    command = [
        sys.executable, "-m", "streamlit", "run", str(REPO_ROOT / "app" / "main.py"),
        "--server.port", str(args.port), "--server.address", args.address,
        "--browser.gatherUsageStats", "false",
    ]
    # The dashboard runs in the repository's folder: it reads and writes (budgets, the idle rule)
    # the settings of the folder mlcost was started in.
    env = {**os.environ, "MLCOST_DB": str(db.resolve()), "MLCOST_WORKDIR": os.getcwd()}
    if args.read_only:
        env["MLCOST_READ_ONLY"] = "1"
    if args.login:
        env["MLCOST_LOGIN"] = args.login
    if args.address not in ("127.0.0.1", "localhost", "::1") and not (args.login or env.get("MLCOST_LOGIN")):
        print(f"mlcost: warning: the dashboard on {args.address} is open to anyone who can reach it; "
              "use --login oidc (README, Access)", file=sys.stderr, flush=True)
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
