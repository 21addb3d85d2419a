"""`mlcost dashboard` and `mlcost demo`: serve the Streamlit dashboard on a warehouse."""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from ingest.engine import warehouse
from ingest.engine.report import summary_lines
from ingest.settings import config
from mlcost.common import EXIT_USAGE, REPO_ROOT, SAMPLE_DIR, say

# The sample files the demo loads: one entry per kind that has an ingestor (a folder is read whole).
SAMPLE_FILES = ("runs.jsonl", "serving_windows.jsonl.gz", "gpu_traces", "billing")
DEMO_CONFIG = "mlcost.toml"  # in sample_data/: the sample organisation's budgets
ERROR_DETAILS_ENV = "STREAMLIT_CLIENT_SHOW_ERROR_DETAILS"
SECRETS_FILES_ENV = "STREAMLIT_SECRETS_FILES"


def register(commands) -> None:
    for name, help_text, description, runner in (
        ("dashboard", "open the dashboard on the warehouse",
         "Serve the Streamlit dashboard on the warehouse ($MLCOST_DB, default ./mlcost.duckdb).", run_dashboard),
        ("demo", "load the bundled sample data into the warehouse ($MLCOST_DB, default ./mlcost.duckdb) and open the dashboard",
         "Load the bundled sample data (and, without a ./mlcost.toml, its budgets) into the warehouse, then serve "
         "the dashboard on it.", run_demo),
    ):
        command = commands.add_parser(name, help=help_text, description=description)
        command.add_argument("--port", type=int, default=8501, help="port to serve on (default 8501)")
        command.add_argument("--address", default="127.0.0.1",
                             help="address to listen on (default 127.0.0.1: this machine only; another address "
                                  "exposes the dashboard and needs --login oidc or --no-login)")
        command.add_argument("--read-only", action="store_true",
                             help="pages change nothing: no uploads, snoozes, test messages or decision-log entries")
        login = command.add_mutually_exclusive_group()
        login.add_argument("--login", choices=["oidc"],
                           help="visitors sign in with the OIDC provider of [auth] in .streamlit/secrets.toml")
        login.add_argument("--no-login", action="store_true",
                           help="serve on an --address beyond this machine without a login, on purpose: anyone "
                                "who can reach the port sees every page")
        if name == "demo":
            command.add_argument("--no-dashboard", action="store_true",
                                 help="load the sample and write ./mlcost.toml, then stop without opening the "
                                      "dashboard (for scripts and CI: `mlcost report`, `mlcost alerts check` next)")
        command.set_defaults(run=_checked(runner))


def _checked(runner):
    """`runner` behind the access check: a dashboard that would fail open does not start (and the
    demo loads nothing first); the one sentence why on stderr, exit code 2."""
    def run(args: argparse.Namespace) -> int:
        env = {**os.environ, **({"MLCOST_LOGIN": args.login} if args.login else {})}
        refusal = access_refusal(args, env, streamlit_secrets_files())
        if refusal is not None:
            say(refusal)
            return EXIT_USAGE
        return runner(args)
    return run


def run_dashboard(args: argparse.Namespace) -> int:
    return _serve(args, warehouse.db_path())


def run_demo(args: argparse.Namespace) -> int:
    from ingest.pipeline import loader

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
    from app import access  # imports Streamlit: only for the commands that serve
    from outputs import slack

    # The dashboard runs in the repository's folder: it reads and writes (budgets, the idle rule)
    # the settings of the folder mlcost was started in.
    env = {**os.environ, "MLCOST_DB": str(db.resolve()), "MLCOST_WORKDIR": os.getcwd()}
    if args.read_only:
        env["MLCOST_READ_ONLY"] = "1"
    if args.login:
        env["MLCOST_LOGIN"] = args.login
    secrets_files = streamlit_secrets_files()  # checked (access_refusal) before the command ran
    print(f"mlcost: warehouse {db.resolve()}; dashboard on http://{args.address}:{args.port}", flush=True)
    command = [
        sys.executable, "-m", "streamlit", "run", str(REPO_ROOT / "app" / "main.py"),
        "--server.port", str(args.port), "--server.address", args.address,
        "--browser.gatherUsageStats", "false",
    ]
    # Visitors never see a traceback (server paths, code): errors go to this console only. A
    # developer asks for them with STREAMLIT_CLIENT_SHOW_ERROR_DETAILS=full.
    if not os.environ.get(ERROR_DETAILS_ENV):
        command += ["--client.showErrorDetails", "none"]
    # The [auth] settings (and every other secret) from the files checked above, the folder
    # mlcost was started in included, not only the repository's folder Streamlit runs in.
    if not os.environ.get(SECRETS_FILES_ENV):
        for path in secrets_files:
            command += ["--secrets.files", str(path)]
    if args.no_login and not access.is_loopback(args.address):
        say(f"warning: the dashboard on {args.address} is unauthenticated (--no-login): anyone who can reach "
            f"port {args.port} sees every page")
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


def streamlit_secrets_files() -> list[Path]:
    """The secrets files the dashboard reads, first to last (a later file's table wins): Streamlit's
    own (~/.streamlit, the repository's and app/'s .streamlit/secrets.toml), then the folder mlcost
    was started in and $MLCOST_SECRETS. With $STREAMLIT_SECRETS_FILES set, that list instead."""
    named = os.environ.get(SECRETS_FILES_ENV)
    if named:  # Streamlit splits a multiple option's environment variable on whitespace
        return [Path(item).expanduser() for item in named.split()]
    candidates = [Path.home() / ".streamlit" / "secrets.toml", REPO_ROOT / ".streamlit" / "secrets.toml",
                  REPO_ROOT / "app" / ".streamlit" / "secrets.toml", Path.cwd() / ".streamlit" / "secrets.toml"]
    mlcost_secrets = os.environ.get("MLCOST_SECRETS")
    if mlcost_secrets and mlcost_secrets.endswith(".toml"):  # Streamlit reads only *.toml files
        candidates.append(Path(mlcost_secrets).expanduser())
    files: list[Path] = []
    for path in candidates:
        path = path.absolute()
        if path in files:  # a file listed twice is read where it comes last
            files.remove(path)
        files.append(path)
    return files


def access_refusal(args: argparse.Namespace, env: dict[str, str], secrets_files: list[Path]) -> str | None:
    """Why the dashboard must not start as asked (one sentence), or None: the login on without the
    settings it needs, or an address beyond this machine with neither a login nor --no-login."""
    from app import access

    login = access.login_required(env)
    if login and args.no_login:
        return (f"not starting the dashboard: --no-login contradicts {access.LOGIN_ENV}="
                f"{env[access.LOGIN_ENV]}; drop one of them")
    if login:
        try:
            problem = access.login_problem(access.auth_settings_in(secrets_files), _secrets_where(secrets_files))
        except access.SecretsUnreadable as error:
            problem = f"needs the [auth] settings, but {error}"
        if problem is not None:
            return f"not starting the dashboard: the OIDC login (--login oidc) {problem}; see docs/access.md"
        return None
    if not access.is_loopback(args.address) and not args.no_login:
        return (f"not starting the dashboard on {args.address or 'every interface'} without a login, where anyone "
                f"who can reach port {args.port} would see every page: add --login oidc (visitors sign in; "
                "docs/access.md) or, to serve it unauthenticated on purpose, --no-login")
    return None


def _secrets_where(files: list[Path]) -> str:
    """The secrets files, for a message: those that exist, else the one to create (in this folder)."""
    existing = [str(path) for path in files if path.exists()]
    if existing:
        return " or ".join(existing)
    return str(Path.cwd() / ".streamlit" / "secrets.toml")
