"""Sums never overflow on a page or in the report: two runs of 6e25 USD each (each fits the
warehouse's DECIMAL(38, 12); their sum does not) still give an Overview, a retrospective and
`mlcost report`, with the total computed here with Decimal. Sums are DECIMAL(38, 10). (Rejecting values the warehouse
cannot hold at all is the ingest's job.)"""
from __future__ import annotations

import json
import subprocess
import sys
from datetime import date
from decimal import Decimal

from streamlit.testing.v1 import AppTest

from metrics import queries, retrospective
from metrics.filters import Filters
from ingest.engine import warehouse as wh
from ingest.pipeline import loader
from tests.conftest import REPO_ROOT

HUGE = "60000000000000000000000000"  # 6e25 USD


def test_huge_costs_sum_without_overflow(warehouse, tmp_path):
    runs = [{"run_id": f"r{i}", "project": "p", "team": "t", "start_time": f"2026-03-0{i + 1}T08:00:00Z",
             "end_time": f"2026-03-0{i + 1}T10:00:00Z", "examples": 1_000_000, "estimated_cost_usd": "1"}
            for i in range(3)]
    (tmp_path / "runs.jsonl").write_text("\n".join(json.dumps(r) for r in runs) + "\n")
    assert loader.ingest_file(tmp_path / "runs.jsonl").ok
    # costs the warehouse's type holds one by one, set directly: the parser's own limits are not tested here
    wh.execute([("UPDATE runs SET cost_usd = ?::DECIMAL(38, 12) WHERE run_id = ?", [cost, f"r{i}"])
                for i, cost in enumerate([HUGE, HUGE, "12.34"])])
    want = 2 * Decimal(HUGE) + Decimal("12.34")
    assert float(queries.overview_totals(Filters())["cost_usd"].iloc[0]) == float(want)
    at = AppTest.from_file(str(REPO_ROOT / "app" / "main.py"), default_timeout=120).run()
    assert not at.exception, [e.value for e in at.exception]
    for page in ("app_pages/training_runs.py", "app_pages/retrospective.py", "app_pages/budgets.py"):
        at.switch_page(page).run()
        assert not at.exception, (page, [e.value for e in at.exception])
    retro = retrospective.build(date(2026, 3, 1))
    assert retro.sections
    done = subprocess.run([sys.executable, "-m", "mlcost", "report", "--month", "2026-03"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    # the report's table goes through float (pandas): the sum's leading digits, not its cents
    assert f"| ${want:,.2f}"[:30] in done.stdout
