"""Budgets that follow the allocation of the bill: budgets on a bucket or a key (bucket:, model:,
service:, and team: and project:, the Costs page's showback) and "what drives it", checked
against sums of the sample files (csv + Decimal; tests/test_budgets.allocated_by_day) and against
`mlcost allocation`, never against the budget code's own SQL."""
from __future__ import annotations

import csv
import gzip
import json
import shutil
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from metrics import allocation, budget_drivers, budgets
from ingest.pipeline import loader
from ingest.settings import config, settings_file
from mlcost import cli
from tests.conftest import REPO_ROOT, SAMPLE_DIR
from tests.test_budgets import allocated_by_day, close, run_line

AS_OF = date(2026, 11, 22)  # the sample's "today": bills run to 2026-11-21


def rows_between(first: str, last: str) -> list[dict]:
    """Every sample bill line (all files) whose ChargePeriodStart day is in [first, last] (ISO days)."""
    found = []
    for path in sorted((SAMPLE_DIR / "billing").glob("*.csv.gz")):
        with gzip.open(path, "rt", newline="") as handle:
            found += [row for row in csv.DictReader(handle) if first <= row["ChargePeriodStart"][:10] <= last]
    return found


def effective(rows: list[dict], keep=lambda row, tags: True) -> Decimal:
    """Σ EffectiveCost (USD lines) of the rows `keep(row, tags)` accepts."""
    return sum((Decimal(r["EffectiveCost"]) for r in rows if r["BillingCurrency"] == "USD"
                and keep(r, json.loads(r["Tags"] or "{}"))), Decimal(0))


def is_shared(row: dict, tags: dict) -> bool:
    """The sample's shared lines: every charge that is not usage, and usage of no instance."""
    return row["ChargeCategory"] != "Usage" or row["ResourceType"] != "Instance"


def is_serving(row: dict, tags: dict) -> bool:
    return row["ChargeCategory"] == "Usage" and "service" in tags


@pytest.fixture
def sample_db(demo_db: Path, warehouse: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copyfile(demo_db, warehouse)
    monkeypatch.setenv("MLCOST_CONFIG", str(SAMPLE_DIR / "mlcost.toml"))
    return warehouse


def budget(tmp_path: Path, scope: str, period: str = "month") -> tuple[config.Budget, config.Config]:
    path = tmp_path / "mlcost.toml"
    path.write_text(f'[[budgets]]\nname = "b"\nscope = "{scope}"\nperiod = "{period}"\namount = 5000\n')
    settings = config.load(path)
    return settings.budgets[0], settings


# --- spend of a budget on the allocation ------------------------------------------------------

@pytest.mark.parametrize("scope, keep", [("bucket:shared", is_shared), ("bucket:serving", is_serving),
                                         ("service:chat-assistant",
                                          lambda row, tags: tags.get("service") == "chat-assistant")])
def test_spend_of_a_bucket_or_service_is_its_effective_cost(sample_db, tmp_path, scope, keep):
    b, settings = budget(tmp_path, scope)
    burn = budgets.burn(b, settings, AS_OF)
    assert burn.source == "billed" and burn.through == date(2026, 11, 21)
    assert burn.spent == effective(rows_between("2026-11-01", "2026-11-21"), keep) != 0
    # per day, by the day the charge period starts
    nov_20 = effective(rows_between("2026-11-20", "2026-11-20"), keep)
    assert burn.daily.loc[burn.daily["day"] == date(2026, 11, 20), "spend"].iloc[0] == nov_20


@pytest.mark.parametrize("bucket", allocation.BUCKETS)
def test_a_bucket_over_a_whole_month_is_the_allocations_figure(sample_db, tmp_path, capsys, bucket):
    assert cli.main(["allocation", "--json", "--month", "2026-10"]) == 0
    want = Decimal(json.loads(capsys.readouterr().out)["currencies"]["USD"]["buckets"][bucket])
    b, settings = budget(tmp_path, f"bucket:{bucket}")
    burn = budgets.burn(b, settings, date(2026, 11, 1))
    assert (burn.period_start, burn.through) == (date(2026, 10, 1), date(2026, 10, 31))
    assert burn.spent == want


def test_the_buckets_of_a_quarter_add_up_to_its_effective_cost(sample_db, tmp_path):
    spent = Decimal(0)
    for bucket in allocation.BUCKETS:
        b, settings = budget(tmp_path, f"bucket:{bucket}", "quarter")
        spent += budgets.burn(b, settings, AS_OF).spent
    assert spent == effective(rows_between("2026-10-01", "2026-11-21"))


def test_a_model_version_budget_is_its_serving_pieces(sample_db, tmp_path):
    rules = allocation.Rules.of(config.load(SAMPLE_DIR / "mlcost.toml"))
    found = allocation.versions(date(2026, 10, 1), date(2026, 11, 1), rules)
    version = found.iloc[0]
    b, settings = budget(tmp_path, f"model:{version.model_version}")
    want = sum(found.loc[found["model_version"] == version.model_version, "allocated_cost"], Decimal(0))
    assert budgets.burn(b, settings, date(2026, 11, 1)).spent == want > 0
    # a version's pieces are its service's serving lines, shared with the service's other versions
    service = effective(rows_between("2026-10-01", "2026-10-31"),
                        lambda row, tags: is_serving(row, tags) and tags["service"] == version.service)
    assert want <= service


def test_without_a_bill_a_bucket_budget_counts_its_estimates(warehouse, tmp_path):
    """No bill: a budget on the training bucket counts runs at their estimate; one on idle GPUs
    has no estimate to count (idle is only known from the bill's nodes)."""
    (tmp_path / "runs.jsonl").write_text("\n".join(
        run_line(f"r{i}", "p", date(2027, 3, 1 + i), 2, "5.25") for i in range(3)) + "\n")  # 10.50 each
    assert loader.ingest_file(tmp_path / "runs.jsonl").ok
    training, settings = budget(tmp_path, "bucket:training")
    burn = budgets.burn(training, settings, date(2027, 3, 10))
    assert (burn.source, burn.through, burn.bill_through) == ("estimated", date(2027, 3, 3), None)
    assert burn.spent == burn.estimated == 3 * Decimal("5.25") * 2
    assert "no bill yet" in burn.source_note
    idle, settings = budget(tmp_path, "bucket:idle_gpu")
    assert budgets.burn(idle, settings, date(2027, 3, 10)).spent == 0


# --- what drives it ---------------------------------------------------------------------------

@pytest.mark.parametrize("scope, keep", [
    ("all", lambda row, tags: True),
    ("project:vision", None),
    ("team:genai", None),
    ("bucket:idle_gpu", None),
])
def test_the_drivers_add_up_to_the_spend_they_explain(sample_db, tmp_path, scope, keep):
    b, settings = budget(tmp_path, scope)
    burn = budgets.burn(b, settings, AS_OF)
    found = budget_drivers.drivers(b, allocation.Rules.of(settings), burn.period_start, AS_OF)
    if keep is not None:
        assert found.total == effective(rows_between("2026-11-01", "2026-11-21"), keep) != 0
    else:  # a budget on the allocation (team and project included): the drivers explain exactly its spend
        assert found.total == burn.spent != 0
    if scope.startswith(("team:", "project:")):
        key, _, value = scope.partition(":")
        assert close(found.total, sum((v for d, v in allocated_by_day(key, value).items()
                                       if date(2026, 11, 1) <= d <= date(2026, 11, 21)), Decimal(0)))
    assert list(found.buckets["bucket"]) == list(allocation.BUCKETS)
    for table in (found.buckets, found.items, found.projects):
        assert sum(table["cost"], Decimal(0)) == found.total
    assert len(found.items) <= budget_drivers.TOP_ITEMS + 1


def test_the_drivers_of_several_budgets_from_one_allocation_are_each_their_own(sample_db, tmp_path):
    """budget_drivers.drivers_of allocates each month once for every budget (what alerts use):
    each budget's totals still come from its own lines and days."""
    path = tmp_path / "mlcost.toml"
    path.write_text('[[budgets]]\nname = "v"\nscope = "project:vision"\namount = 5000\n'
                    '[[budgets]]\nname = "g"\nscope = "team:genai"\namount = 5000\n'
                    '[[budgets]]\nname = "q"\nscope = "all"\nperiod = "quarter"\namount = 5000\n')
    settings = config.load(path)
    vision, genai, everything = settings.budgets
    found = budget_drivers.drivers_of([(vision, date(2026, 11, 1), AS_OF), (genai, date(2026, 11, 1), date(2026, 11, 10)),
                                       (everything, date(2026, 10, 1), AS_OF)], allocation.Rules.of(settings))
    days = lambda by_day, first, last: sum((v for d, v in by_day.items() if first <= d <= last), Decimal(0))  # noqa: E731
    want = [days(allocated_by_day("project", "vision"), date(2026, 11, 1), date(2026, 11, 21)),
            days(allocated_by_day("team", "genai"), date(2026, 11, 1), date(2026, 11, 9)),
            effective(rows_between("2026-10-01", "2026-11-21"))]
    assert all(close(f.total, w) for f, w in zip(found, want)), ([f.total for f in found], want)
    assert all(f.total != 0 and sum(f.items["cost"], Decimal(0)) == f.total for f in found)


def test_untagged_and_unallocated_spend_are_named(sample_db, tmp_path):
    b, settings = budget(tmp_path, "all")
    found = budget_drivers.drivers(b, allocation.Rules.of(settings), date(2026, 11, 1), AS_OF, top=1000)
    rows = rows_between("2026-11-01", "2026-11-21")
    by_bucket = dict(zip(found.buckets["bucket"], found.buckets["cost"]))
    assert by_bucket["shared"] == effective(rows, is_shared)
    assert by_bucket["serving"] == effective(rows, is_serving)
    projects = dict(zip(found.projects["project"], found.projects["cost"]))
    assert projects["(no project)"] > 0
    # with no limit, every item is listed by name: the idle hours of each node, the support fee, the tax
    items = set(found.items["item"])
    assert {"idle GPUs of gpu-node-1", "idle GPUs of gpu-node-2"} <= items
    assert not any(item.startswith("everything else") for item in items)
    tax = effective(rows, lambda row, tags: row["ChargeCategory"] == "Tax")
    assert sum(found.items.loc[found.items["rule"] == "tax", "cost"], Decimal(0)) == tax != 0


def test_the_drivers_stop_at_the_as_of_day(sample_db, tmp_path):
    b, settings = budget(tmp_path, "all")
    found = budget_drivers.drivers(b, allocation.Rules.of(settings), date(2026, 11, 1), date(2026, 11, 10))
    assert found.total == effective(rows_between("2026-11-01", "2026-11-09"))


# --- settings ---------------------------------------------------------------------------------

@pytest.mark.parametrize("scope", ["bucket:gpus", "bucket:", "model:", "service:", "buckets:training"])
def test_a_bad_allocation_scope_names_its_key(tmp_path, scope):
    with pytest.raises(config.ConfigError, match=r'budgets\[1\] \("b"\)\.scope') as error:
        budget(tmp_path, scope)
    if scope == "bucket:gpus":
        assert "training, serving, idle_gpu, shared, unallocated" in str(error.value)


def test_the_budget_form_writes_an_allocation_scope(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLCOST_CONFIG", raising=False)
    monkeypatch.setenv("MLCOST_WORKDIR", str(tmp_path))
    settings = settings_file.save_budget({"name": "idle", "scope": "bucket:idle_gpu", "amount": 4000})
    assert [(b.scope, b.scope_value, b.on_allocation) for b in settings.budgets] == [("bucket", "idle_gpu", True)]
    with pytest.raises(config.ConfigError, match="bucket"):
        settings_file.save_budget({"name": "bad", "scope": "bucket:gpu", "amount": 1})


def test_the_budget_page_lists_drivers_that_add_up(sample_db):
    at = AppTest.from_file(str(REPO_ROOT / "app" / "main.py"), default_timeout=90)
    at.run()
    at.switch_page("app_pages/budgets.py").run()
    at.date_input(key="budget_as_of").set_value(AS_OF - timedelta(days=1)).run()  # the as-of day: Nov 21
    assert not at.exception, [e.value for e in at.exception]
    want = effective(rows_between("2026-11-01", "2026-11-21"))
    tables = [t.value for t in at.dataframe[2:5]]  # after the budgets and the top runs: by bucket, by project, items
    assert [sorted(t.columns) for t in tables] == [
        ["cost", "label"], ["cost", "project"], ["bucket", "cost", "item", "rule"]]
    for table in tables:
        assert abs(Decimal(repr(float(table["cost"].sum()))) - want) < Decimal("0.01")
    assert "(no project)" in set(tables[1]["project"])
    assert any("effective cost" in c.value and "billed cost" in c.value for c in at.caption)
