"""The dashboard in a real browser over a lake (a folder, and S3 through moto_server): every page
opens and shows the figures (each metric's label and value) of the same data in the embedded
DuckDB file, served side by side."""
from __future__ import annotations

import shutil
import time

import pytest

from tests.lake_fixtures import SETTINGS, lake_of, moto_s3, sample_pair  # noqa: F401  (fixtures)
from tests.test_browser import WAIT_MS, browser_page, chromium, running_dashboard  # noqa: F401

pytestmark = pytest.mark.browser

PAGES = {"": "Overview", "costs": "Costs", "training_runs": "Training runs", "serving": "Serving",
         "idle_gpus": "Idle GPUs", "billing": "Billing", "reconciliation": "Reconciliation", "budgets": "Budgets",
         "retrospective": "Monthly retrospective", "alerts": "Alerts", "data": "Data"}
SETTLE_S = 90  # a cold page on a busy machine (the allocation) takes a while to show every figure


def shown_metrics(page) -> list[tuple[str, str]]:
    metrics = page.get_by_test_id("stMetric")
    return [(m.get_by_test_id("stMetricLabel").inner_text().strip(), m.get_by_test_id("stMetricValue").inner_text().strip())
            for m in metrics.all()]


def settled(page, want: list | None = None) -> list[tuple[str, str]]:
    """The page's metrics once they equal `want`; without `want`, once the same on two reads 2 s
    apart (figures arrive as the page runs; a page without any, after 10 s); at most SETTLE_S."""
    started, before = time.monotonic(), None
    while True:
        shown = shown_metrics(page)
        waited = time.monotonic() - started
        if waited > SETTLE_S or (shown == want if want is not None
                                 else shown == before and (shown or waited > 10)):
            return shown
        before = shown
        time.sleep(2)


@pytest.mark.parametrize("kind", ["folder", "s3"])
def test_every_page_from_a_lake_shows_the_embedded_warehouses_figures(chromium, sample_pair, kind, tmp_path,
                                                                       monkeypatch, request):
    from playwright.sync_api import expect

    db, folder = sample_pair
    url = lake_of(folder, kind, request, monkeypatch)
    copy = tmp_path / "embedded.duckdb"
    shutil.copyfile(db, copy)
    monkeypatch.delenv("MLCOST_LAKE", raising=False)
    with running_dashboard(copy, tmp_path / "embedded.log", SETTINGS) as embedded_url:
        monkeypatch.setenv("MLCOST_LAKE", url)
        with running_dashboard(tmp_path / "local.duckdb", tmp_path / "lake.log", SETTINGS) as lake_url, \
                browser_page(chromium) as page:
            seen = 0
            for path, heading in PAGES.items():
                page.goto(f"{embedded_url}/{path}")
                expect(page.get_by_role("heading", name=heading, exact=True)).to_be_visible(timeout=4 * WAIT_MS)
                want = settled(page)
                page.goto(f"{lake_url}/{path}")
                expect(page.get_by_role("heading", name=heading, exact=True)).to_be_visible(timeout=4 * WAIT_MS)
                got = settled(page, want)
                assert got == want, f"page /{path}"
                seen += len(want)
            assert seen > 20  # the pages did show figures
