"""The Costs page under AppTest: the same figures as `mlcost allocation --json`, by bucket and by
team, on the sample data; an empty warehouse gets a sentence, not a traceback."""
from __future__ import annotations

import json
import shutil
from decimal import Decimal
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from present.format import money
from mlcost import cli
from tests.conftest import REPO_ROOT, SAMPLE_DIR

APP = REPO_ROOT / "app" / "main.py"
LABELS = {"training": "Training runs", "serving": "Serving", "idle_gpu": "Idle GPUs", "shared": "Shared",
          "unallocated": "Unallocated"}


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


def test_costs_page_shows_the_commands_figures(sample_db, capsys):
    assert cli.main(["allocation", "--json", "--by", "team"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["from"] == "2026-11-01"  # the latest month with bill lines, as the page's default
    usd = result["currencies"]["USD"]

    at = open_costs()
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Billed in November 2026 (USD, effective cost)"] == money(Decimal(usd["billed"]), "USD")
    for bucket, label in LABELS.items():
        assert metrics[label] == money(Decimal(usd["buckets"][bucket]), "USD"), bucket
    assert "Unallocated" in at.caption[-1].value or any("Unallocated" in c.value for c in at.caption)

    by_team = at.dataframe[0].value.set_index("team")["total"]
    assert set(by_team.index) == set(usd["by_key"])
    for team, amount in usd["by_key"].items():
        assert by_team[team] == pytest.approx(float(Decimal(amount)), abs=0.005)

    nodes = at.dataframe[1].value.set_index("node")
    for host, node in usd["nodes"].items():
        assert nodes.loc[host, "price source"] == "bill"
        assert nodes.loc[host, "idle cost"] == pytest.approx(float(Decimal(node["idle_gpu"])), abs=0.005)
        assert nodes.loc[host, "idle cost"] <= nodes.loc[host, "billed"]


def test_costs_page_splits_by_another_key(sample_db, capsys):
    assert cli.main(["allocation", "--json", "--by", "project"]) == 0
    by_project = json.loads(capsys.readouterr().out)["currencies"]["USD"]["by_key"]
    at = open_costs()
    at.selectbox(key="costs_key").set_value("project").run()
    assert not at.exception
    table = at.dataframe[0].value.set_index("project")["total"]
    assert {k: round(v, 2) for k, v in table.items()} == {k: round(float(Decimal(v)), 2) for k, v in by_project.items()}


def test_costs_page_without_a_bill(warehouse):
    at = open_costs()
    assert "No bill yet" in at.info[0].value


def test_drill_down_adds_up_to_its_bucket(sample_db, capsys):
    assert cli.main(["allocation", "--json"]) == 0
    buckets = json.loads(capsys.readouterr().out)["currencies"]["USD"]["buckets"]
    at = open_costs()
    for view, column, bucket in (("Runs", "allocated_cost", "training"),
                                 ("Model versions", "allocated_cost", "serving"),
                                 ("Bill lines", "effective_cost", "unallocated")):
        at.button_group(key="costs_drill").set_value(view).run()
        assert not at.exception, [e.value for e in at.exception]
        shown = at.dataframe[-1].value
        assert shown[column].astype(float).sum() == pytest.approx(float(Decimal(buckets[bucket])), abs=0.01), view
    runs = at.button_group(key="costs_drill").set_value("Runs").run().dataframe[-1].value
    assert set(runs["cost_source"].replace("", None).dropna()) <= {"given", "derived", "catalog"}
