"""Access: readers connect read-only; every page shows "warehouse busy, retrying" instead of an
exception while another process holds the file; the dashboard listens on 127.0.0.1 however it
is started; the read-only mode hides every write; uploads are spooled to disk and released; the
OIDC login (Streamlit's st.login) against a local provider (oidc-provider-mock on 127.0.0.1),
driven in Chromium."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pytest
from streamlit.testing.v1 import AppTest

from ingest.engine import warehouse as wh
from ingest.engine import wh_connection
from tests.conftest import IN_CI, REPO_ROOT
from tests.test_browser import browser_page, chromium, free_port, wait_until_healthy  # noqa: F401 (fixture)

APP = REPO_ROOT / "app" / "main.py"
PAGES = ["app_pages/overview.py", "app_pages/training_runs.py", "app_pages/serving.py", "app_pages/idle_gpus.py",
         "app_pages/billing.py", "app_pages/reconciliation.py", "app_pages/budgets.py", "app_pages/alerts.py",
         "app_pages/retrospective.py", "app_pages/data.py"]
HOLD = ("import duckdb, sys, time; con = duckdb.connect(sys.argv[1], read_only=sys.argv[2] == 'ro'); "
        "print('held', flush=True); time.sleep(300)")


@contextmanager
def held(path: Path, mode: str) -> Iterator[None]:
    """Another process holding the warehouse open, read-write ("rw") or read-only ("ro")."""
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path), mode], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        yield
    finally:
        holder.kill()
        holder.wait(timeout=30)


# --- read-only readers -----------------------------------------------------------------------

def test_readers_connect_read_only(warehouse):
    assert not warehouse.exists()
    assert wh.query("SELECT count(*) AS n FROM runs")["n"].tolist() == [0]  # a missing file: created first
    with pytest.raises(duckdb.Error, match="read-only"):
        wh.query("CREATE TABLE sneaky (a INTEGER)")
    with pytest.raises(duckdb.Error, match="read-only"):
        wh.query_exact("INSERT INTO decisions (month, kind, text, written_at) VALUES (DATE '2026-01-01', 'note', "
                       "'x', now())")
    wh.add_decision(__import__("datetime").date(2026, 1, 1), "note", "written through the one write path")
    assert wh.query("SELECT text FROM decisions")["text"].tolist() == ["written through the one write path"]


def test_a_file_without_the_schema_is_read(tmp_path, monkeypatch):
    path = tmp_path / "bare.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE unrelated (a INTEGER)")
    con.close()
    monkeypatch.setenv("MLCOST_DB", str(path))
    assert wh.query("SELECT count(*) AS n FROM loads")["n"].tolist() == [0]


def test_readers_and_writers_of_one_process_take_turns(warehouse):
    """DuckDB refuses a read-only and a read-write connection to one file at once in one process."""
    import threading

    wh.query("SELECT 1")
    errors: list[Exception] = []

    def work(write: bool) -> None:
        for i in range(20):
            try:
                if write:
                    wh.add_decision(__import__("datetime").date(2026, 1, 1), "note", f"n{i}")
                else:
                    wh.query("SELECT count(*) FROM decisions")
            except Exception as error:  # noqa: BLE001 (collected and asserted below)
                errors.append(error)

    threads = [threading.Thread(target=work, args=(write,)) for write in (False, True, False, True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and wh.query("SELECT count(*) AS n FROM decisions")["n"].tolist() == [40]


# --- busy ------------------------------------------------------------------------------------

def shows_busy(at: AppTest) -> bool:
    return not at.exception and any("Warehouse busy, retrying" in w.value for w in at.warning)


def test_every_page_shows_busy_while_a_writer_holds_the_file(warehouse, monkeypatch):
    wh.query("SELECT 1")  # the file and its schema exist, as they do before any ingest
    monkeypatch.setattr(wh_connection, "LOCK_WAIT_S", 0.5)
    with held(warehouse, "rw"):
        at = AppTest.from_file(str(APP), default_timeout=120).run()
        assert shows_busy(at), [e.value for e in at.exception]
        for page in PAGES:
            at.switch_page(page).run()
            assert shows_busy(at), (page, [e.value for e in at.exception])
    at.switch_page("app_pages/overview.py").run()  # released: the page is back
    assert not at.exception and not any("Warehouse busy" in w.value for w in at.warning)


def test_a_write_refused_in_the_middle_of_a_page_shows_busy(warehouse, tmp_path, monkeypatch):
    """Readers share the file with a reader elsewhere; a snooze (a write) waits and then says busy."""
    (tmp_path / "mlcost.toml").write_text('[[budgets]]\nname = "p"\nscope = "project:p"\namount = 10\n')
    monkeypatch.setenv("MLCOST_CONFIG", str(tmp_path / "mlcost.toml"))
    wh.query("SELECT 1")
    monkeypatch.setattr(wh_connection, "LOCK_WAIT_S", 0.5)
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    at.switch_page("app_pages/alerts.py").run()
    assert not at.exception
    with held(warehouse, "ro"):
        at.run()  # pages read while another process reads
        assert not at.exception and not any("Warehouse busy" in w.value for w in at.warning)
        at.button(key="FormSubmitter:snooze-Snooze").click().run()
        assert shows_busy(at), [e.value for e in at.exception]
    assert wh.query("SELECT count(*) AS n FROM alert_snoozes")["n"].tolist() == [0]


# --- read-only mode, uploads ------------------------------------------------------------------

def test_read_only_mode_hides_every_write(warehouse, tmp_path, monkeypatch):
    (tmp_path / "mlcost.toml").write_text('[[budgets]]\nname = "p"\nscope = "project:p"\namount = 10\n')
    monkeypatch.setenv("MLCOST_CONFIG", str(tmp_path / "mlcost.toml"))
    wh.add_decision(__import__("datetime").date(2026, 3, 1), "note", "a month to look back on")
    (tmp_path / "runs.jsonl").write_text('{"run_id": "r", "project": "p", "start_time": "2026-03-02T08:00:00Z", '
                                         '"end_time": "2026-03-02T10:00:00Z", "estimated_cost_usd": 5}\n')
    from ingest.pipeline import loader
    assert loader.ingest_file(tmp_path / "runs.jsonl").ok
    writes = {"app_pages/data.py": "upload", "app_pages/alerts.py": "snooze", "app_pages/retrospective.py": "decision"}
    for read_only in (False, True):
        if read_only:
            monkeypatch.setenv("MLCOST_READ_ONLY", "1")
        at = AppTest.from_file(str(APP), default_timeout=120).run()
        for page, form in writes.items():
            at.switch_page(page).run()
            assert not at.exception, (page, [e.value for e in at.exception])
            buttons = {b.key for b in at.button}
            has_form = any(key and key.startswith(f"FormSubmitter:{form}") for key in buttons)
            assert has_form != read_only, (page, buttons)
            if page.endswith("alerts.py"):
                assert any(key and key.startswith("FormSubmitter:test_message") for key in buttons) != read_only
            if read_only:
                assert any("read-only" in i.value for i in at.info) and not at.get("file_uploader")


def test_uploads_are_spooled_to_disk_and_released(warehouse, tmp_path, monkeypatch):
    spool = tmp_path / "spool"
    spool.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spool))
    content = b"".join(
        f'{{"run_id": "u{i}", "project": "p", "start_time": "2026-03-02T08:00:00Z", '
        f'"end_time": "2026-03-02T10:00:00Z", "estimated_cost_usd": 1}}\n'.encode() for i in range(50))
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    at.switch_page("app_pages/data.py").run()
    at.file_uploader[0].set_value([("a.jsonl", content, "application/octet-stream"),
                                   ("b.jsonl", content.replace(b'"u', b'"v'), "application/octet-stream")])
    at.button(key="FormSubmitter:upload-Load files").click().run()
    assert not at.exception and len(at.success) == 2, [e.value for e in [*at.error, *at.warning]]
    assert wh.query("SELECT count(*) AS n FROM runs")["n"].tolist() == [100]
    assert list(spool.iterdir()) == []  # every spooled file and its folder deleted


# --- where the dashboard listens, and the login -------------------------------------------------

def listening_addresses(port: int) -> set[str]:
    """Local addresses with a socket listening on `port` (from /proc/net/tcp and tcp6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.add(address)
    return found


@contextmanager
def serving(command: list[str], port: int, log: Path, env: dict | None = None,
            cwd: Path | None = None) -> Iterator[str]:
    with log.open("w") as output:
        server = subprocess.Popen(command, cwd=cwd or REPO_ROOT, env=env or dict(os.environ), stdout=output,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    try:
        base_url = f"http://127.0.0.1:{port}"
        wait_until_healthy(base_url, server, log)
        yield base_url
    finally:
        os.killpg(server.pid, 15)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, 9)
            server.wait(timeout=20)


@pytest.mark.parametrize("how", ["streamlit run", "mlcost dashboard"])
def test_the_dashboard_listens_on_127_0_0_1_however_started(warehouse, tmp_path, how):
    port = free_port()
    command = ([sys.executable, "-m", "streamlit", "run", "app/main.py", "--server.port", str(port)]
               if how == "streamlit run" else [sys.executable, "-m", "mlcost", "dashboard", "--port", str(port)])
    with serving(command, port, tmp_path / "server.log"):
        assert listening_addresses(port) == {"0100007F"}  # 127.0.0.1, and nothing else


@pytest.fixture
def oidc_provider(tmp_path) -> Iterator[str]:
    """oidc-provider-mock on 127.0.0.1 (any client id; the user is typed on its form)."""
    command = shutil.which("oidc-provider-mock")
    if command is None:
        if IN_CI:
            pytest.fail("oidc-provider-mock is missing in CI: pip install -e '.[test]'")
        pytest.skip("oidc-provider-mock is missing (pip install oidc-provider-mock)")
    port = free_port()
    with (tmp_path / "oidc.log").open("w") as output:
        provider = subprocess.Popen([command, "--host", "127.0.0.1", "--port", str(port)], stdout=output,
                                    stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        import urllib.request

        for _ in range(120):
            try:
                urllib.request.urlopen(f"{url}/.well-known/openid-configuration", timeout=2).close()
                break
            except OSError:
                time.sleep(0.5)
        yield url
    finally:
        provider.kill()
        provider.wait(timeout=20)


@pytest.mark.browser
@pytest.mark.parametrize("how", ["streamlit run", "mlcost dashboard"])
def test_the_oidc_login_guards_every_page(chromium, oidc_provider, warehouse, tmp_path, how):  # noqa: F811
    """`streamlit run` with [auth] in ~/.streamlit/secrets.toml; `mlcost dashboard --login oidc` with
    [auth] in ./.streamlit/secrets.toml of the folder it is started in (which it passes on)."""
    from playwright.sync_api import expect

    port = free_port()
    home, work = tmp_path / "home", tmp_path / "work"
    secrets = (home if how == "streamlit run" else work) / ".streamlit" / "secrets.toml"
    secrets.parent.mkdir(parents=True)
    home.mkdir(exist_ok=True)
    secrets.write_text(
        f'[auth]\nredirect_uri = "http://127.0.0.1:{port}/oauth2callback"\n'
        'cookie_secret = "a-test-cookie-secret-of-some-length"\nclient_id = "mlcost"\nclient_secret = "mlcost-secret"\n'
        f'server_metadata_url = "{oidc_provider}/.well-known/openid-configuration"\n')
    env = {**os.environ, "HOME": str(home), "MLCOST_LOGIN": "oidc", "PYTHONPATH": str(REPO_ROOT)}
    command = ([sys.executable, "-m", "streamlit", "run", "app/main.py", "--server.port", str(port)]
               if how == "streamlit run" else
               [sys.executable, "-m", "mlcost", "dashboard", "--login", "oidc", "--port", str(port)])
    with serving(command, port, tmp_path / "server.log", env, cwd=work if how == "mlcost dashboard" else None) \
            as base_url, browser_page(chromium) as page:
        page.goto(base_url)
        expect(page.get_by_text("Sign in to open the cost dashboard.")).to_be_visible()
        assert page.get_by_role("heading", name="Overview").count() == 0
        page.goto(f"{base_url}/data")  # another page's address: the same door
        expect(page.get_by_text("Sign in to open the cost dashboard.")).to_be_visible()
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(f"{oidc_provider}/**")
        page.locator("input[name=sub]").fill("dana@example.com")
        page.get_by_role("button", name="Authorize").click()
        page.wait_for_url(f"{base_url}/**")
        expect(page.get_by_text("Signed in as")).to_be_visible()
        expect(page.get_by_text("dana@example.com")).to_be_visible()
        expect(page.get_by_role("heading", name="Overview")).to_be_visible()  # the dashboard itself
        page.goto(f"{base_url}/data")
        expect(page.get_by_role("heading", name="Data")).to_be_visible()


# --- a dashboard that would fail open: the login without its settings, an address without a login --

AUTH_KEYS = ["redirect_uri", "cookie_secret", "client_id", "client_secret", "server_metadata_url"]
REFUSE_S = 60


def mlcost_serve(args: list[str], cwd: Path, home: Path, port: int, **env: str) -> subprocess.CompletedProcess:
    """`python -m mlcost dashboard ARGS --port PORT` in `cwd` with HOME=`home`, expected to refuse (a
    server that starts instead is stopped by the timeout and fails the test)."""
    environ = {**os.environ, "HOME": str(home), "MLCOST_DB": str(cwd / "w.duckdb"), "PYTHONPATH": str(REPO_ROOT),
               **env}
    for name in ("MLCOST_LOGIN", "MLCOST_SECRETS", "STREAMLIT_SECRETS_FILES"):
        if name not in env:
            environ.pop(name, None)
    return subprocess.run([sys.executable, "-m", "mlcost", "dashboard", *args, "--port", str(port)], cwd=cwd,
                          env=environ, capture_output=True, text=True, timeout=REFUSE_S)


def assert_one_sentence_refusal(done: subprocess.CompletedProcess, port: int) -> str:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mlcost: not starting the dashboard"), done.stderr
    assert lines[0].count(". ") == 0 and "Traceback" not in done.stdout + done.stderr
    assert listening_addresses(port) == set()
    return lines[0]


@pytest.mark.parametrize("secrets, how", [
    (None, "flag"),
    (None, "env"),
    ('[auth]\nclient_id = "mlcost"\ncookie_secret = "   "\n', "flag"),  # blank counts as missing
    ('[auth]\nredirect_uri = "http://127.0.0.1:8501/oauth2callback"\ncookie_secret = "c"\nclient_id = "i"\n'
     'client_secret = "s"\n', "flag"),
    ('[slack]\nwebhook_url = "https://hooks.example.com/x"\n', "env"),
])
def test_the_login_without_its_settings_refuses_to_start(tmp_path, secrets, how):
    """--login oidc (or MLCOST_LOGIN=oidc) with no [auth], or one lacking settings: exit 2, one
    sentence naming exactly the missing settings, nothing listening."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    (work / ".streamlit").mkdir(parents=True)
    given: set[str] = set()
    if secrets is not None:
        (work / ".streamlit" / "secrets.toml").write_text(secrets)
        if secrets.startswith("[auth]"):
            given = {line.split(" = ")[0] for line in secrets.splitlines()[1:] if line.split(" = ")[1].strip('" ')}
    port = free_port()
    done = (mlcost_serve(["--login", "oidc"], work, home, port) if how == "flag"
            else mlcost_serve([], work, home, port, MLCOST_LOGIN="oidc"))
    sentence = assert_one_sentence_refusal(done, port)
    missing = [key for key in AUTH_KEYS if key not in given]
    assert missing and all(key in sentence for key in missing), sentence
    assert not any(key in sentence for key in given), sentence
    assert "[auth]" in sentence and "secrets.toml" in sentence


def test_a_redirect_uri_streamlit_would_refuse_and_unreadable_secrets_refuse_to_start(tmp_path):
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".streamlit").mkdir(parents=True)
    (work / ".streamlit").mkdir(parents=True)
    full = {"redirect_uri": "http://127.0.0.1:8501/callback", "cookie_secret": "c", "client_id": "i",
            "client_secret": "the-client-secret", "server_metadata_url": "http://127.0.0.1:9/.well-known/x"}
    (work / ".streamlit" / "secrets.toml").write_text("[auth]\n" + "".join(f'{k} = "{v}"\n' for k, v in full.items()))
    port = free_port()
    sentence = assert_one_sentence_refusal(mlcost_serve(["--login", "oidc"], work, home, port), port)
    assert "redirect_uri" in sentence and "/oauth2callback" in sentence and "the-client-secret" not in sentence
    (home / ".streamlit" / "secrets.toml").write_text("[auth\nclient_id = ")  # not TOML: Streamlit reads no secrets
    (work / ".streamlit" / "secrets.toml").unlink()
    sentence = assert_one_sentence_refusal(mlcost_serve(["--login", "oidc"], work, home, port), port)
    assert "not valid TOML" in sentence and str(home / ".streamlit" / "secrets.toml") in sentence


@pytest.mark.parametrize("address", ["0.0.0.0", "::", "192.0.2.10", "dashboard.example.com", ""])
def test_an_address_beyond_this_machine_needs_a_login_or_no_login(tmp_path, address):
    port = free_port()
    sentence = assert_one_sentence_refusal(mlcost_serve(["--address", address], tmp_path, tmp_path, port), port)
    assert "--login oidc" in sentence and "--no-login" in sentence
    contradiction = mlcost_serve(["--address", address, "--no-login"], tmp_path, tmp_path, port, MLCOST_LOGIN="oidc")
    assert "--no-login contradicts MLCOST_LOGIN=oidc" in assert_one_sentence_refusal(contradiction, port)


def test_loopback_addresses_are_this_machine_only():
    from app.access import is_loopback

    assert [is_loopback(a) for a in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost", "LocalHost")] == [True] * 6
    assert [is_loopback(a) for a in ("0.0.0.0", "::", "", None, "10.0.0.5", "example.com", "127.0.0.1.nip.io")] \
        == [False] * 7


@pytest.mark.browser
def test_no_login_serves_beyond_this_machine_and_says_it_is_unauthenticated(chromium, warehouse, tmp_path):  # noqa: F811
    """`mlcost dashboard --address 0.0.0.0 --no-login` listens on every interface (the test connects
    through 127.0.0.1 only); the sidebar and the Data page say the dashboard is unauthenticated."""
    from playwright.sync_api import expect

    port = free_port()
    command = [sys.executable, "-m", "mlcost", "dashboard", "--address", "0.0.0.0", "--no-login", "--port", str(port)]
    env = {**os.environ, "HOME": str(tmp_path)}
    env.pop("MLCOST_LOGIN", None)
    with serving(command, port, tmp_path / "server.log", env) as base_url, browser_page(chromium) as page:
        assert listening_addresses(port) == {"00000000"}  # 0.0.0.0: reachable beyond this machine
        page.goto(f"{base_url}/data")
        expect(page.get_by_role("heading", name="Data", exact=True)).to_be_visible()
        main = page.get_by_test_id("stMain").get_by_test_id("stAlertContentWarning")
        expect(main.filter(has_text="unauthenticated")).to_have_text(re.compile(
            r"This dashboard is unauthenticated and reachable beyond this machine \(it listens on 0\.0\.0\.0\)"))
        sidebar = page.get_by_test_id("stSidebar").get_by_test_id("stAlertContentWarning")
        expect(sidebar.filter(has_text="unauthenticated")).to_have_count(1)
        page.get_by_test_id("stSidebar").get_by_role("link", name="Overview").click()
        expect(page.get_by_role("heading", name="Overview", exact=True)).to_be_visible()
        expect(sidebar.filter(has_text="unauthenticated")).to_have_count(1)  # on every page
    assert "unauthenticated (--no-login)" in (tmp_path / "server.log").read_text()


@pytest.mark.browser
def test_the_login_without_auth_shows_one_sentence_when_started_directly(chromium, warehouse, tmp_path):  # noqa: F811
    """`MLCOST_LOGIN=oidc streamlit run app/main.py` without [auth]: every page shows the sentence
    naming the settings, no traceback, no page content; the server log says it too."""
    from playwright.sync_api import expect

    port = free_port()
    (tmp_path / "home").mkdir()
    env = {**os.environ, "HOME": str(tmp_path / "home"), "MLCOST_LOGIN": "oidc"}
    env.pop("STREAMLIT_SECRETS_FILES", None)
    command = [sys.executable, "-m", "streamlit", "run", "app/main.py", "--server.port", str(port)]
    with serving(command, port, tmp_path / "server.log", env) as base_url, browser_page(chromium) as page:
        for path in ("", "data", "budgets"):
            page.goto(f"{base_url}/{path}")
            error = page.get_by_test_id("stAlertContentError").get_by_test_id("stMarkdownContainer")
            expect(error).to_have_text(
                "The OIDC login (MLCOST_LOGIN=oidc) needs redirect_uri, cookie_secret, client_id, client_secret and "
                "server_metadata_url under [auth] in .streamlit/secrets.toml: until then this dashboard shows "
                "nothing (docs/access.md).")
            assert page.get_by_role("heading", name="Overview").count() == 0
            assert page.get_by_test_id("stSidebarNav").count() == 0
    log = (tmp_path / "server.log").read_text()
    assert log.count("needs redirect_uri, cookie_secret") == 1  # logged once for the administrator


@pytest.mark.browser
def test_a_failing_page_shows_no_traceback(chromium, tmp_path):
    """A page that fails (here: the warehouse is not a DuckDB file) shows Streamlit's generic error
    without the traceback, the exception's type or message (paths); the server log has them all."""
    from playwright.sync_api import expect

    bad = tmp_path / "not-a-warehouse.duckdb"
    bad.write_bytes(b"\x00garbage" * 1000)
    port = free_port()
    env = {**os.environ, "MLCOST_DB": str(bad), "HOME": str(tmp_path)}
    env.pop("STREAMLIT_CLIENT_SHOW_ERROR_DETAILS", None)
    shown: list = []
    command = [sys.executable, "-m", "mlcost", "dashboard", "--port", str(port)]
    with serving(command, port, tmp_path / "server.log", env) as base_url, browser_page(chromium, shown) as page:
        page.goto(base_url)
        error = page.get_by_test_id("stException")
        expect(error).to_contain_text("This app has encountered an error")
        page_text = page.locator("body").inner_text()
        assert "Traceback" not in page_text and str(bad) not in page_text and "IOException" not in page_text
    assert shown and all(what.startswith("exception element: This app has encountered an error") for _, what in shown)
    log = (tmp_path / "server.log").read_text()
    assert "Traceback" in log and str(bad) in log


def test_the_demo_refuses_before_it_loads_anything(tmp_path):
    """`mlcost demo --address 0.0.0.0` refuses like the dashboard, before writing the warehouse or
    ./mlcost.toml."""
    port = free_port()
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(REPO_ROOT)}
    for name in ("MLCOST_DB", "MLCOST_CONFIG", "MLCOST_LOGIN"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, "-m", "mlcost", "demo", "--address", "0.0.0.0", "--port", str(port)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=REFUSE_S)
    assert "--no-login" in assert_one_sentence_refusal(done, port)
    assert sorted(path.name for path in tmp_path.iterdir()) == []
