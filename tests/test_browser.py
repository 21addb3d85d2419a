"""The real dashboard in headless Chromium: upload a run log on the Data page, see it on Training runs.

Run table cells are drawn on a canvas (glide-data-grid), so the visible proof is the
cost-to-target caption, which names the cheapest run to reach its target in the page's
text; the grid's hidden accessibility table is checked to hold the run as well.

Every page a test opens through browser_page is watched (WATCH_ERRORS_JS): a Streamlit exception
element or a traceback shown at any moment fails the test.
"""
from __future__ import annotations

import json
import os
from datetime import date
from decimal import Decimal
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from mlcost.commands.serve import SAMPLE_FILES
from tests.conftest import IN_CI, REPO_ROOT, SAMPLE_DIR, free_port

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
SERVER_START_S = 60
WAIT_MS = 30_000
SCREENSHOT_COPY = Path("/tmp/mlcost_browser_training_runs.png")

RUN_ID = "browser-upload-001"
RUN = {  # 2 h at 3.50 USD/h = 7.00; target 0.80 first reached at 3600 s of 7200 s -> 3.50
    "run_id": RUN_ID, "project": "browser-test", "team": "browser-team",
    "start_time": "2025-05-01T08:00:00Z", "end_time": "2025-05-01T10:00:00Z",
    "price_per_hour_usd": 3.50, "examples": 7000, "val_metric": 0.90, "val_metric_name": "accuracy",
    "target_metric": 0.80,
    "eval_history": [{"elapsed_s": 1800, "value": 0.70}, {"elapsed_s": 3600, "value": 0.85}],
}


def wait_until_healthy(base_url: str, server: subprocess.Popen, log: Path,
                       limit_s: float = SERVER_START_S) -> None:
    """Poll /_stcore/health until it answers `ok`, for at most limit_s seconds."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"the dashboard exited with {server.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"{base_url}/_stcore/health", timeout=2) as answer:
                if answer.read().decode().strip() == "ok":
                    return
        except OSError:
            pass
        time.sleep(0.5)
    pytest.fail(f"the dashboard did not answer {base_url}/_stcore/health within {limit_s} s:\n"
                f"{log.read_text()}")


@pytest.fixture
def chromium() -> Path:
    """Debian's Chromium: skipped where missing, a failure in CI."""
    if not CHROMIUM.exists():
        if IN_CI:
            pytest.fail(f"{CHROMIUM} is missing: a skipped browser test is a failure in CI")
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)")
    return CHROMIUM


@contextmanager
def running_dashboard(db: Path, log: Path, settings: Path | None = None) -> Iterator[str]:
    """`streamlit run app/main.py` on a free port over the warehouse `db` (and the settings file
    `settings`, if given); yields its base URL."""
    port = free_port()
    env = {**os.environ, "MLCOST_DB": str(db)}
    if settings is not None:
        env["MLCOST_CONFIG"] = str(settings)
    with log.open("w") as output:
        server = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app/main.py", "--server.address", "127.0.0.1",
             "--server.port", str(port), "--server.headless", "true",
             "--browser.gatherUsageStats", "false"],
            cwd=REPO_ROOT, env=env, stdout=output, stderr=subprocess.STDOUT)
    try:
        base_url = f"http://127.0.0.1:{port}"
        wait_until_healthy(base_url, server, log)
        yield base_url
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=15)


@pytest.fixture
def dashboard(tmp_path: Path) -> Iterator[str]:
    """The dashboard over an empty warehouse in tmp_path."""
    with running_dashboard(tmp_path / "browser.duckdb", tmp_path / "server.log") as base_url:
        yield base_url


@pytest.fixture(scope="module")
def sample_dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The dashboard over a warehouse holding the bundled sample data (as `mlcost demo` loads it)."""
    folder = tmp_path_factory.mktemp("sample_dashboard")
    db = folder / "sample.duckdb"
    for name in SAMPLE_FILES:
        loaded = subprocess.run([sys.executable, "-m", "mlcost", "ingest", str(SAMPLE_DIR / name)],
                                env={**os.environ, "MLCOST_DB": str(db)}, capture_output=True, text=True)
        assert loaded.returncode == 0, loaded.stdout + loaded.stderr
    with running_dashboard(db, folder / "server.log", SAMPLE_DIR / "mlcost.toml") as base_url:
        yield base_url, db


# Run in every document the browser opens: reports each Streamlit exception element and each text
# with "Traceback" (Python's header, or Streamlit's "Traceback:" above the frames it shows with
# showErrorDetails = false/"stacktrace") that ever appears, however briefly, to Python.
WATCH_ERRORS_JS = """
(() => {
  const reported = new Set();
  const report = (what) => {
    const key = location.href + " " + what;
    if (!reported.has(key)) { reported.add(key); window.mlcostShownError(location.href, what); }
  };
  const look = (nodes) => {
    document.querySelectorAll('[data-testid="stException"]').forEach(
      (element) => report("exception element: " + element.textContent.slice(0, 300)));
    for (const node of nodes) {
      const text = node.textContent || "";
      if (text.includes("Traceback")) report("traceback: " + text.slice(0, 300));
    }
  };
  window.mlcostLook = () => look(document.body ? [document.body] : []);
  new MutationObserver((mutations) => look(mutations.flatMap(
    (m) => m.type === "characterData" ? [m.target] : Array.from(m.addedNodes))))
    .observe(document, {childList: true, subtree: true, characterData: true});
})();
"""


@contextmanager
def browser_page(chromium: Path, errors_shown: list | None = None) -> Iterator[object]:
    """A Chromium page; on leaving, fails the test if any page it showed had a Streamlit exception
    or a traceback (pass a list as `errors_shown` to collect them instead and check them yourself)."""
    from playwright.sync_api import expect, sync_playwright

    shown = [] if errors_shown is None else errors_shown
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(chromium), args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            context.expose_function("mlcostShownError", lambda url, what: shown.append((url, what)))
            context.add_init_script(WATCH_ERRORS_JS)
            page = context.new_page()
            page.set_default_timeout(WAIT_MS)
            expect.set_options(timeout=WAIT_MS)
            yield page
            for open_page in context.pages:  # what is on screen now, and the reports still on their way
                open_page.evaluate("window.mlcostLook && window.mlcostLook()")
        finally:
            browser.close()
    if errors_shown is None:
        assert shown == [], f"a page showed an exception or a traceback: {shown}"


def test_uploaded_run_shows_on_training_runs(chromium, dashboard, tmp_path):
    from playwright.sync_api import expect

    run_log = tmp_path / "browser_runs.jsonl"
    run_log.write_text(json.dumps(RUN) + "\n")
    screenshot = tmp_path / "training_runs.png"

    with browser_page(chromium) as page:
        page.goto(f"{dashboard}/data")
        expect(page.get_by_text("Nothing loaded yet")).to_be_visible()
        page.locator("[data-testid=stFileUploader] input[type=file]").set_input_files(run_log)
        expect(page.get_by_test_id("stFileChipName").filter(has_text=run_log.name)).to_be_visible()
        expect(page.get_by_test_id("stFileChipIconSpinner")).to_have_count(0)  # upload finished
        page.get_by_role("button", name="Load files").click()
        expect(page.get_by_text(f"OK {run_log.name} [runs]: 1 rows loaded, 0 rejected")).to_be_visible()

        page.get_by_test_id("stSidebar").get_by_role("link", name="Training runs").click()
        expect(page.get_by_role("heading", name="Training runs")).to_be_visible()
        caption = page.get_by_test_id("stCaptionContainer").filter(has_text="cheapest to get there")
        expect(caption).to_have_text(
            f"1 run reached the target; cheapest to get there: {RUN_ID} at $3.50 after 1.00 h.")
        expect(caption.locator("strong")).to_have_text(RUN_ID)
        # The grid paints its cells on a canvas; its accessibility table (hidden) has the text.
        expect(page.get_by_test_id("stDataFrame").locator("td", has_text=RUN_ID)).to_have_count(1)
        expect(page.get_by_test_id("stPlotlyChart").locator(".main-svg").first).to_be_visible()
        page.screenshot(path=screenshot, full_page=True)

    assert screenshot.stat().st_size > 0
    shutil.copyfile(screenshot, SCREENSHOT_COPY)


@pytest.mark.parametrize("path, heading", [
    ("", "Overview"), ("costs", "Costs"), ("training_runs", "Training runs"), ("serving", "Serving"),
    ("data", "Data"),
    ("billing", "Billing"), ("reconciliation", "Reconciliation"), ("budgets", "Budgets"),
    ("retrospective", "Monthly retrospective"),
])
def test_every_page_renders_on_the_sample_data(chromium, sample_dashboard, tmp_path, path, heading):
    from playwright.sync_api import expect

    base_url, _ = sample_dashboard
    with browser_page(chromium) as page:
        page.goto(f"{base_url}/{path}")
        expect(page.get_by_role("heading", name=heading, exact=True)).to_be_visible()
        if path != "data":
            expect(page.get_by_test_id("stPlotlyChart").locator(".main-svg").first).to_be_visible()
        expect(page.get_by_test_id("stException")).to_have_count(0)
        page.screenshot(path=tmp_path / f"{heading}.png", full_page=True)


def test_costs_page_shows_the_oracles_figures(chromium, sample_dashboard):
    """The Costs page in a real browser: November's bill, every bucket and each team's total as the
    independent oracle (tests/oracle.py: plain Python over the sample files) computes them."""
    from playwright.sync_api import expect

    from present.format import money
    from tests import oracle

    base_url, db = sample_dashboard
    truth = oracle.sample().allocation(*oracle.month_bounds("2026-11"))

    def cents(exact) -> Decimal:  # the oracle's exact Fraction, in Decimal for money()
        return Decimal(exact.numerator) / Decimal(exact.denominator)

    labels = {"training": "Training runs", "serving": "Serving", "idle_gpu": "Idle GPUs", "shared": "Shared",
              "unallocated": "Unallocated"}
    with browser_page(chromium) as page:
        page.goto(f"{base_url}/costs")
        expect(page.get_by_role("heading", name="Costs", exact=True)).to_be_visible()
        # The first allocation of a fresh server takes a while on a busy machine.
        expect(page.get_by_role("heading", name="By team")).to_be_visible(timeout=4 * WAIT_MS)
        billed = page.get_by_test_id("stMetric").filter(has_text="Billed in November 2026")
        expect(billed.get_by_test_id("stMetricValue")).to_have_text(money(cents(truth.billed["USD"]), "USD"),
                                                                    timeout=4 * WAIT_MS)
        for bucket, label in labels.items():
            metric = page.get_by_test_id("stMetric").filter(
                has=page.get_by_test_id("stMetricLabel").get_by_text(label, exact=True))
            expect(metric.get_by_test_id("stMetricValue")).to_have_text(money(cents(truth.buckets["USD"][bucket]), "USD"))
        # The grid paints on a canvas; its hidden accessibility table holds the cells' values
        # (team, then the total).
        rows = page.get_by_test_id("stDataFrame").first.locator("tr:has(td)")
        expect(rows).to_have_count(len(truth.by_team["USD"]), timeout=4 * WAIT_MS)
        shown = {cells[0]: float(cells[1]) for cells in (row.locator("td").all_inner_texts() for row in rows.all())}
        assert shown == {team: pytest.approx(float(amount), abs=0.005) for team, amount in truth.by_team["USD"].items()}
        expect(page.get_by_test_id("stException")).to_have_count(0)


def test_ingest_while_the_dashboard_is_in_use(chromium, sample_dashboard, tmp_path):
    """`mlcost ingest` succeeds while a browser uses the dashboard; the run shows after a refresh."""
    from playwright.sync_api import expect

    base_url, db = sample_dashboard
    # Inside the sample's span: a run years away would be a stray the default date range leaves out.
    new_run = {**RUN, "run_id": "browser-concurrent-001", "project": "concurrent-test",
               "start_time": "2026-11-10T08:00:00Z", "end_time": "2026-11-10T10:00:00Z"}
    run_log = tmp_path / "concurrent.jsonl"
    run_log.write_text(json.dumps(new_run) + "\n")
    with browser_page(chromium) as page:
        page.goto(base_url)
        runs_metric = page.get_by_test_id("stMetric").filter(has_text="Training runs")
        expect(runs_metric).to_be_visible()
        before = int(runs_metric.get_by_test_id("stMetricValue").inner_text().replace(",", ""))
        loaded = subprocess.run([sys.executable, "-m", "mlcost", "ingest", str(run_log)],
                                env={**os.environ, "MLCOST_DB": str(db)}, capture_output=True, text=True)
        assert loaded.returncode == 0, loaded.stdout + loaded.stderr
        # The data version is cached for cache.VERSION_TTL_S, so a refresh within that window may
        # still show the old figures: refresh until it shows the new run (bounded).
        for _ in range(10):
            page.reload()
            value = runs_metric.get_by_test_id("stMetricValue")
            expect(value).to_be_visible()
            if value.inner_text() == f"{before + 1:,}":
                break
            page.wait_for_timeout(1000)
        expect(runs_metric.get_by_test_id("stMetricValue")).to_have_text(f"{before + 1:,}")


def test_idle_gpus_page_renders_on_the_sample_data(chromium, sample_dashboard, tmp_path):
    """The Idle GPUs page over the sample traces: the idle GPU-hours of truth.json, the heatmap, no error."""
    from playwright.sync_api import expect

    truth = json.loads((SAMPLE_DIR / "truth.json").read_text())
    idle_h = sum(day["idle_sustained_s"] for day in truth["gpu_idle_by_day"]) / 3600
    base_url, _ = sample_dashboard
    with browser_page(chromium) as page:
        page.goto(f"{base_url}/idle_gpus")
        expect(page.get_by_role("heading", name="Idle GPUs", exact=True)).to_be_visible()
        idle_metric = page.get_by_test_id("stMetric").filter(has_text="Idle GPU-hours")
        expect(idle_metric.get_by_test_id("stMetricValue")).to_have_text(f"{idle_h:,.1f}")
        expect(page.get_by_test_id("stPlotlyChart").locator(".main-svg").first).to_be_visible()
        expect(page.get_by_text("Right-size candidates")).to_be_visible()
        expect(page.get_by_test_id("stException")).to_have_count(0)
        page.screenshot(path=tmp_path / "idle_gpus.png", full_page=True)
        shutil.copyfile(tmp_path / "idle_gpus.png", Path("/tmp/mlcost_browser_idle_gpus.png"))


def test_serving_page_shows_the_last_24_hours_the_alert_compares(chromium, sample_dashboard, tmp_path):
    """The Serving page's 24-hour section names the services over the cost_per_1k_jump threshold,
    computed here from the sample's serving file (tests/test_serving_alerts.py), and states the
    two spans the alert compares."""
    from playwright.sync_api import expect

    from tests.test_serving_alerts import sample_serving_expectations

    jumps = sample_serving_expectations()["jumps"]
    assert jumps, "the sample has a cost-per-1k jump (vision-tagger v3.2)"
    base_url, _ = sample_dashboard
    with browser_page(chromium) as page:
        page.goto(f"{base_url}/serving")
        expect(page.get_by_role("heading", name="The last 24 hours of data against the 24 hours before")).to_be_visible()
        expect(page.get_by_text("2026-11-21 00:00 to 2026-11-22 00:00 UTC against "
                                "2026-11-20 00:00 to 2026-11-21 00:00 UTC", exact=False)).to_be_visible()
        expect(page.get_by_text(f"Over the alert's threshold: {', '.join(sorted(jumps))}.")).to_be_visible()
        expect(page.get_by_role("heading", name="Every model version")).to_be_visible(timeout=60_000)
        expect(page.get_by_test_id("stException")).to_have_count(0)
        page.get_by_text("Over the alert's threshold").scroll_into_view_if_needed()
        page.screenshot(path=tmp_path / "serving.png")
        shutil.copyfile(tmp_path / "serving.png", Path("/tmp/mlcost_browser_serving.png"))


def test_budget_burn_page_renders_on_the_sample_data(chromium, sample_dashboard, tmp_path):
    """The Budgets page over the sample bills: the first budget's spend to date and days to breach
    equal the figures computed from the bill files, the burn chart draws, no error."""
    from playwright.sync_api import expect

    from tests.test_budgets import SCOPES, bill_spend_by_day, expected_burn

    want = expected_burn(bill_spend_by_day(SCOPES["all"]), Decimal(38000), date(2026, 11, 1), date(2026, 12, 1),
                         date(2026, 11, 21))
    base_url, _ = sample_dashboard
    with browser_page(chromium) as page:
        page.goto(f"{base_url}/budgets")
        expect(page.get_by_role("heading", name="Budgets", exact=True)).to_be_visible()
        spent = page.get_by_test_id("stMetric").filter(has_text="Spent this month")
        expect(spent.get_by_test_id("stMetricValue")).to_have_text(f"${want['spent'].quantize(Decimal('0.01')):,}")
        breach = page.get_by_test_id("stMetric").filter(has_text="Days until breach")
        expect(breach.get_by_test_id("stMetricValue")).to_have_text(str(want["days_to_breach"]))
        expect(page.get_by_test_id("stPlotlyChart").locator(".main-svg").first).to_be_visible()
        expect(page.get_by_test_id("stException")).to_have_count(0)
        page.screenshot(path=tmp_path / "budgets.png", full_page=True)
        shutil.copyfile(tmp_path / "budgets.png", Path("/tmp/mlcost_browser_budgets.png"))
        page.goto(f"{base_url}/alerts")
        expect(page.get_by_role("heading", name="Alerts", exact=True)).to_be_visible()
        used = float(want["spent"] * 100 / 38000)
        expect(page.get_by_text(f"ML org: {used:.0f} % of the budget spent (threshold 50 %)")).to_be_visible()
        expect(page.get_by_test_id("stException")).to_have_count(0)


def test_mlcost_demo_serves_the_sample_and_stops_with_it(chromium, tmp_path):
    """The README's first command (`mlcost demo`, as `python -m mlcost demo`): the sample loads,
    the Training runs page shows it, and stopping mlcost (SIGTERM) stops the dashboard too."""
    from playwright.sync_api import expect

    port, log = free_port(), tmp_path / "demo.log"
    env = {**os.environ, "MLCOST_DB": str(tmp_path / "demo.duckdb")}
    env.pop("MLCOST_CONFIG", None)
    with log.open("w") as output:
        demo = subprocess.Popen([sys.executable, "-m", "mlcost", "demo", "--port", str(port),
                                 "--address", "127.0.0.1"], cwd=tmp_path, env=env,
                                stdout=output, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(base_url, demo, log, limit_s=SERVER_START_S + 180)  # loads the sample first
        runs = sum(1 for line in (SAMPLE_DIR / "runs.jsonl").read_text().splitlines() if line.strip())
        with browser_page(chromium) as page:
            page.goto(f"{base_url}/training_runs")
            expect(page.get_by_role("heading", name="Training runs", exact=True)).to_be_visible()
            expect(page.get_by_test_id("stPlotlyChart").locator(".main-svg").first).to_be_visible()
            expect(page.get_by_text("on the Pareto frontier")).to_be_visible()
            expect(page.get_by_test_id("stException")).to_have_count(0)
            page.get_by_test_id("stSidebar").get_by_role("link", name="Overview").click()
            runs_metric = page.get_by_test_id("stMetric").filter(has_text="Training runs")
            expect(runs_metric.get_by_test_id("stMetricValue")).to_have_text(f"{runs:,}")
    finally:
        demo.terminate()
        demo.wait(timeout=30)
    with pytest.raises(OSError):  # nothing is left serving on the port
        urllib.request.urlopen(f"{base_url}/_stcore/health", timeout=2)


def test_exported_report_opens_offline_and_shows_its_charts(chromium, sample_dashboard, tmp_path):
    """`mlcost report --format html` over the sample data, opened from file:// with every other
    request refused and the browser offline: the plotly charts draw from the inline library."""
    from playwright.sync_api import expect

    _, db = sample_dashboard
    out = tmp_path / "report.html"
    written = subprocess.run([sys.executable, "-m", "mlcost", "report", "--month", "2026-10", "--format", "html",
                              "--out", str(out)], env={**os.environ, "MLCOST_DB": str(db)}, capture_output=True,
                             text=True, cwd=REPO_ROOT)
    assert written.returncode == 0, written.stderr
    refused: list[str] = []

    def only_the_file(route) -> None:
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort()

    with browser_page(chromium) as page:
        page.context.set_offline(True)
        page.route("**/*", only_the_file)
        page.goto(out.as_uri())
        expect(page.get_by_role("heading", name="Efficiency retrospective 2026-10")).to_be_visible()
        charts = page.locator(".js-plotly-plot .main-svg")
        expect(charts.first).to_be_visible()
        assert page.locator(".js-plotly-plot").count() >= 4
        expect(page.locator(".js-plotly-plot").nth(3).locator(".main-svg").first).to_be_visible()
        assert page.locator(".js-plotly-plot .bars .point").count() > 0  # bars were drawn, not empty axes
        expect(page.get_by_text("chat-assistant v1.0 costs")).to_be_visible()
        page.screenshot(path=tmp_path / "report.png", full_page=True)
        shutil.copyfile(tmp_path / "report.png", Path("/tmp/mlcost_browser_report.png"))
    assert refused == [], refused


def choose_option(page, selectbox, label: str, attempts: int = 4) -> None:
    """Open a selectbox and pick the option containing `label`. A rerun that lands while the list is
    open (the page settles after a load) closes it, so the list is opened again until the option shows."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    option = page.get_by_role("option").filter(has_text=label)
    for attempt in range(attempts):
        selectbox.get_by_role("combobox").click()
        try:
            option.wait_for(state="visible", timeout=WAIT_MS // attempts)
        except PlaywrightTimeout:
            if attempt == attempts - 1:
                raise
            page.keyboard.press("Escape")
            continue
        option.click()
        return


def test_a_load_is_unloaded_from_the_data_page(chromium, dashboard, tmp_path):
    """Data page: the load history lists the upload; Unload removes it and its run."""
    from playwright.sync_api import expect

    run_log = tmp_path / "to_unload.jsonl"
    run_log.write_text(json.dumps({**RUN, "run_id": "browser-unload-001"}) + "\n")
    with browser_page(chromium) as page:
        page.goto(f"{dashboard}/data")
        page.locator("[data-testid=stFileUploader] input[type=file]").set_input_files(run_log)
        expect(page.get_by_test_id("stFileChipName").filter(has_text=run_log.name)).to_be_visible()
        expect(page.get_by_test_id("stFileChipIconSpinner")).to_have_count(0)  # upload finished
        page.get_by_role("button", name="Load files").click()
        expect(page.get_by_text(f"OK {run_log.name} [runs]: 1 rows loaded, 0 rejected")).to_be_visible()
        expect(page.get_by_text("Load to remove")).to_be_visible()
        picker = page.get_by_test_id("stSelectbox").filter(has_text="Load to remove")
        expect(picker.get_by_role("combobox")).to_have_value("")  # nothing preselected
        expect(picker.get_by_role("combobox")).to_have_attribute("placeholder", "Choose a load to remove")
        choose_option(page, picker, run_log.name)
        page.get_by_role("button", name="Unload").click()
        expect(page.get_by_text(f"Unloaded 1: {run_log.name} (runs,")).to_be_visible()
        expect(page.get_by_text("Nothing loaded yet")).to_be_visible()
        expect(page.get_by_test_id("stException")).to_have_count(0)


def test_overview_answers_the_month_on_the_sample_data(chromium, sample_dashboard, tmp_path):
    """The landing page in a real browser: November's bill to date (Σ EffectiveCost of the sample's
    November lines, read with csv), its links, and no error; the screenshot is kept for review."""
    import csv
    import gzip

    from playwright.sync_api import expect

    billed = Decimal(0)
    for path in sorted((SAMPLE_DIR / "billing").glob("focus_*.csv.gz")):
        with gzip.open(path, "rt", newline="") as handle:
            billed += sum((Decimal(r["EffectiveCost"]) for r in csv.DictReader(handle)
                           if r["ChargePeriodStart"].startswith("2026-11")), Decimal(0))
    base_url, _ = sample_dashboard
    with browser_page(chromium) as page:
        page.goto(base_url)
        expect(page.get_by_role("heading", name="November 2026 to date")).to_be_visible(timeout=4 * WAIT_MS)
        metric = page.get_by_test_id("stMetric").filter(has_text="Billed so far (USD)")
        expect(metric.get_by_test_id("stMetricValue")).to_have_text(f"${billed:,.2f}", timeout=4 * WAIT_MS)
        for name in ("Costs", "Budgets", "Idle GPUs"):
            expect(page.get_by_test_id("stPageLink").get_by_role("link", name=name, exact=True).first).to_be_visible()
        expect(page.get_by_test_id("stException")).to_have_count(0)
        page.screenshot(path=tmp_path / "overview.png", full_page=True)
        shutil.copyfile(tmp_path / "overview.png", Path("/tmp/mlcost_browser_overview.png"))
