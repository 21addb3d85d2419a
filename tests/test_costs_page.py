"""The Costs page under AppTest against tests/oracle.py (the allocation computed from the sample
files with the standard library, no project code): the split by another key and every drill-down
(rules, runs, model versions, bill lines); an empty warehouse gets a sentence, not a traceback.
The page's bill, buckets, teams and GPU nodes in every sample month: tests/test_consistency.py."""
from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from tests import oracle
from tests.conftest import REPO_ROOT, SAMPLE_DIR

APP = REPO_ROOT / "app" / "main.py"
MONTH = "2026-11"
CENT = 0.005  # the page's tables hold floats of the exact amounts


def open_costs() -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    at.switch_page("app_pages/costs.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


@pytest.fixture
def sample_db(demo_db: Path, warehouse: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copyfile(demo_db, warehouse)
    monkeypatch.setenv("MLCOST_CONFIG", str(SAMPLE_DIR / "mlcost.toml"))
    return warehouse


@pytest.fixture(scope="module")
def expected() -> oracle.Allocation:
    return oracle.sample().allocation(*oracle.month_bounds(MONTH))


def column(table: pd.DataFrame, *words: str) -> str:
    """The column whose label holds every word (case-insensitive): labels may gain units or words."""
    found = [c for c in table.columns if all(w in str(c).lower() for w in words)]
    assert len(found) == 1, (words, list(table.columns))
    return found[0]


def drill_down(at: AppTest, view: str) -> pd.DataFrame:
    at.button_group(key="costs_drill").set_value(view).run()
    assert not at.exception, [e.value for e in at.exception]
    return at.dataframe[-1].value


def assert_amounts(shown: dict, exact: dict, what: str) -> None:
    assert set(shown) == set(exact), (what, set(shown) ^ set(exact))
    wrong = {k: (shown[k], float(v)) for k, v in exact.items() if abs(shown[k] - float(v)) > CENT}
    assert not wrong, (what, wrong)


def test_costs_page_splits_by_another_key(sample_db, expected):
    at = open_costs()
    at.selectbox(key="costs_key").set_value("project").run()
    assert not at.exception
    table = at.dataframe[0].value
    table = table.set_index(table.columns[0])[column(table, "total")]
    assert_amounts({str(k): float(v) for k, v in table.items()}, expected.by_project["USD"], "by project")


def test_costs_page_without_a_bill(warehouse):
    at = open_costs()
    assert "No bill yet" in at.info[0].value


def test_every_drill_down_is_the_oracles(sample_db, expected):
    at = open_costs()
    assert any("Unallocated" in c.value for c in at.caption)  # what no rule could place is explained

    rules = drill_down(at, "Rules")  # per bucket and rule
    labels = {"training": "Training", "serving": "Serving", "idle_gpu": "Idle", "shared": "Shared",
              "unallocated": "Unallocated"}
    bucket_of = {label: b for b, label in labels.items()}
    bucket, rule, amount = column(rules, "bucket"), column(rules, "rule"), column(rules, "cost")
    shown = {(next(b for label, b in bucket_of.items() if str(row[bucket]).startswith(label)), row[rule]):
             float(row[amount]) for row in rules.to_dict("records")}
    assert_amounts(shown, expected.by_rule["USD"], "rules")

    runs = drill_down(at, "Runs")  # each run's share of the bill
    assert_amounts(dict(zip(runs[column(runs, "run")], runs[column(runs, "allocated")].astype(float))),
                   expected.by_run["USD"], "runs")
    assert set(runs[column(runs, "source")].dropna()) <= {"given", "derived", "catalog"}

    versions = drill_down(at, "Model versions")  # serving lines by model version
    assert_amounts({(s, v): float(a) for s, v, a in zip(versions[column(versions, "service")],
                                                        versions[column(versions, "version")],
                                                        versions[column(versions, "allocated")])},
                   expected.by_version["USD"], "model versions")

    pieces = drill_down(at, "Bill lines")  # the unallocated bucket's pieces (fewer than the 500 shown)
    unallocated = expected.buckets["USD"]["unallocated"]
    assert pieces["effective_cost"].sum() == pytest.approx(float(unallocated), abs=CENT)
    assert len(pieces) == sum(1 for key in expected.pieces if key[1] == "unallocated")
