"""One set of numbers everywhere (issue 20): each figure of the bill's allocation and of the idle
GPUs, on every surface that shows it, on every sample month, against tests/oracle.py, which
computes them from the sample files with the standard library and no project code.

Figures checked (their definitions stay while the surfaces change):
- the month's bill and its split by bucket (training, serving, idle_gpu, shared, unallocated);
- each GPU node's billed, training, idle and unallocated amounts and its idle GPU-hours (the idle
  GPU-hours no run held, which the allocation prices);
- each team's and project's allocated cost (showback);
- idle GPU-hours over every traced GPU: all idle, allocated but idle (a run held the GPU), and
  unallocated idle.

Surfaces: `mlcost allocation --json`, the Costs page and the Idle GPUs page (Streamlit AppTest on the
sample warehouse), `mlcost report --month` (Markdown) and the Slack payload of `mlcost alerts check`
(tests/slack_server.py, a real HTTP server on 127.0.0.1).

Each surface has ONE helper below (`*_shows`) that reads what it shows into plain values: when a
surface's labels or layout change, change its helper, not the comparisons. Idle cost (all idle vs
unallocated idle, shown as two named parts once issue 20 is done) is in the oracle
(`Oracle.idle_cost`) for the lead to add here after merging.
"""
from __future__ import annotations

import calendar
import json
import re
import shutil
from datetime import date, timedelta
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from mlcost import cli
from tests import oracle
from tests.conftest import REPO_ROOT, SAMPLE_DIR
from tests.slack_server import slack_stand_in

APP = REPO_ROOT / "app" / "main.py"
MONTHS = oracle.SAMPLE_MONTHS
CURRENCY = "USD"  # the sample bill's only currency
EXACT = Fraction(1, 10 ** 6)  # --json carries the pieces' own decimals: the oracle's exact sums within this


@pytest.fixture(scope="module")
def truth() -> oracle.Oracle:
    return oracle.sample()


@pytest.fixture
def sample_db(demo_db: Path, warehouse: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the sample warehouse with the sample organisation's settings."""
    shutil.copyfile(demo_db, warehouse)
    monkeypatch.setenv("MLCOST_CONFIG", str(SAMPLE_DIR / "mlcost.toml"))
    return warehouse


# --- reading what a person sees ------------------------------------------------------------------

def amount(text: str) -> Decimal:
    """'$27,531.27', '-$800.00', '1,234.56 EUR', '3,262.1 GPU-h' -> the number."""
    found = re.search(r"[-−]?\$?\s*[0-9][0-9,]*(?:\.[0-9]+)?", str(text))
    assert found, f"no number in {text!r}"
    return Decimal(found[0].replace("−", "-").replace("$", "").replace(",", "").replace(" ", ""))


def assert_shown(text: str, exact: Fraction, what: str, places: int = 2) -> None:
    """`text` shows `exact` rounded to `places` decimals (either neighbour on a rounding boundary)."""
    shown = amount(text)
    assert shown in oracle.shown_as(exact, places), f"{what}: shows {text!r}, the oracle says {float(exact):,.6f}"


def assert_close(value: float, exact: Fraction, what: str, within: float = 0.005) -> None:
    assert abs(Fraction(value) - exact) <= Fraction(within), f"{what}: {value!r} vs the oracle's {float(exact):,.6f}"


def month_days(month: str) -> tuple[date, date]:
    """First and last day of a 'YYYY-MM'."""
    first, after = oracle.month_bounds(month)
    return first, after - timedelta(days=1)


# --- the oracle itself ------------------------------------------------------------------------------

def test_the_oracle_uses_no_project_code():
    """tests/oracle.py imports the standard library only: an oracle that called the program would
    agree with it by construction."""
    import ast
    import sys

    tree = ast.parse((REPO_ROOT / "tests" / "oracle.py").read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert imported and imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


def test_the_oracles_idle_rule_is_the_generators(truth):
    """sample_data/truth.json, written by the generator from its own samples (idle_sustained_s per
    GPU and UTC day: samples at or under 5 % in stretches of 300 s or more, x 120 s): the oracle's
    idle seconds and observed seconds per GPU and day are the same, every day of the sample."""
    days = json.loads((SAMPLE_DIR / "truth.json").read_text())["gpu_idle_by_day"]
    assert len(days) > 800
    for row in days:
        first = date.fromisoformat(row["date"])
        start, end = oracle.utc(first), oracle.utc(first + timedelta(days=1))
        key = (row["host"], row["gpu_index"])
        assert oracle.seconds_within(truth.idle_of[key], start, end) == row["idle_sustained_s"], row
        assert oracle.seconds_within(truth.covered_of[key], start, end) == row["observed_s"], row


# --- surface helpers: one per surface; extend these after merging ---------------------------------

def allocation_json_shows(capsys, month: str, by: str) -> dict:
    """`mlcost allocation --json --month M --by KEY`, the USD currency's figures."""
    assert cli.main(["allocation", "--json", "--month", month, "--by", by]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["from"] == f"{month}-01" and result["by"] == by
    return result["currencies"][CURRENCY]


def allocation_table_shows(capsys, month: str) -> dict:
    """`mlcost allocation --month M` (the text table): {'billed': text, 'buckets': {label: text},
    'by_team': {team: text}} of the USD section."""
    assert cli.main(["allocation", "--month", month]) == 0
    text = capsys.readouterr().out
    billed = re.search(r"USD: billed \(effective cost\) (\S+)", text)
    assert billed, text
    sections: dict[str, dict[str, str]] = {}
    section = None
    for line in text.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) >= 2 and cells[1].lower() == "amount":
            section = sections.setdefault(cells[0], {})
        elif section is not None and len(cells) >= 2 and line.startswith("  "):
            section[cells[0]] = cells[1]
        elif not line.strip():
            section = None
    return {"billed": billed[1], "buckets": sections["bucket"], "by_team": sections["by team"]}


def open_page(page: str) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def costs_page_shows(month: str, key: str = "team") -> dict:
    """The Costs page for `month`, split by `key`: {'billed': text, 'buckets': {bucket: text},
    'by_key': {value: float total}, 'nodes': {host: {figure: float}}}."""
    at = open_page("app_pages/costs.py")
    first, _ = oracle.month_bounds(month)
    at.selectbox(key="costs_month").set_value(first).run()
    if key != "team":
        at.selectbox(key="costs_key").set_value(key).run()
    assert not at.exception, [e.value for e in at.exception]
    metrics = {m.label: m.value for m in at.metric}
    labels = {"training": "Training runs", "serving": "Serving", "idle_gpu": "Idle GPUs", "shared": "Shared",
              "unallocated": "Unallocated"}
    billed = [value for label, value in metrics.items() if label.startswith("Billed in")]
    by_key = at.dataframe[0].value
    by_key = by_key.set_index(by_key.columns[0])
    total = next(c for c in by_key.columns if str(c).lower() == "total")
    nodes = at.dataframe[1].value
    nodes = nodes.set_index(nodes.columns[0])

    def column(*words: str) -> str:  # a node-table column by the words of its label
        return next(c for c in nodes.columns if all(w in str(c).lower() for w in words))

    names = {"billed": column("billed"), "training": column("training"), "idle_gpu": column("idle", "cost"),
             "unallocated": column("unallocated"), "idle_gpu_hours": column("idle", "hour")}
    return {"billed": billed[0], "buckets": {b: metrics[label] for b, label in labels.items()},
            "by_key": {str(k): float(v) for k, v in by_key[total].items()},
            "nodes": {str(host): {name: float(row[col]) for name, col in names.items()}
                      for host, row in nodes.iterrows()}}


def idle_page_shows(month: str) -> dict:
    """The Idle GPUs page with the sidebar's date range set to `month`: texts of the idle
    GPU-hours, allocated but idle and unallocated idle GPU-hours."""
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    at.switch_page("app_pages/idle_gpus.py").run()
    at.sidebar.date_input(key="date_range").set_value(month_days(month)).run()
    assert not at.exception, [e.value for e in at.exception]
    metrics = {m.label: m.value for m in at.metric}
    texts = " ".join(m.value for m in at.markdown)
    unallocated = re.search(r"idle GPU-hours = ([0-9][0-9,]*\.[0-9]) not held by any run", texts)
    assert unallocated, texts
    return {"idle_gpu_hours": metrics["Idle GPU-hours"],
            "allocated_idle_gpu_hours": metrics["Held by runs while idle"].removesuffix(" GPU-h"),
            "unallocated_idle_gpu_hours": unallocated[1]}


PERIOD = re.compile(r"^(\d{4})-(\d{2})(?: \((\d+)-(\d+)\))?$")


def report_shows(capsys, month: str) -> dict:
    """`mlcost report --month M` (Markdown): {figure: {(first day, day after): cell}} of its
    tables' rows, each column's period read from the header ('2026-10 (1-21)' or '2026-11')."""
    assert cli.main(["report", "--month", month]) == 0
    text = capsys.readouterr().out
    figures: dict[str, dict] = {}
    periods: list = []
    for line in text.splitlines():
        if not line.startswith("|"):
            periods = [] if not line.strip() else periods
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0].lower() == "figure":
            periods = []
            for cell in cells[1:]:
                found = PERIOD.match(cell)
                if not found:
                    periods.append(None)
                    continue
                year, number = int(found[1]), int(found[2])
                last = int(found[4]) if found[4] else calendar.monthrange(year, number)[1]
                periods.append((date(year, number, int(found[3] or 1)), date(year, number, last) + timedelta(days=1)))
        elif periods and not set(cells[0]) <= {"-"}:
            figures[cells[0]] = {p: v for p, v in zip(periods, cells[1:]) if p is not None}
    return figures


IDLE_ALERT = re.compile(r"idle ([0-9][0-9,]*\.[0-9]) GPU-hours in the last \d+ days \((\d{4}-\d\d-\d\d) to "
                        r"(\d{4}-\d\d-\d\d)[^)]*\), costing \$([0-9,]+\.[0-9]{2}).*?Idle GPUs \$([0-9,]+\.[0-9]{2}) = "
                        r"\$([0-9,]+\.[0-9]{2}) not held by any run")


def slack_idle_alert_shows(monkeypatch, as_of: date) -> dict | None:
    """The idle-waste alert that `mlcost alerts check --as-of` posts to Slack (a real HTTP server):
    its first and last day, idle GPU-hours, those no run held and the idle cost, as texts; None when
    none was posted."""
    with slack_stand_in() as slack:
        monkeypatch.setenv("MLCOST_SLACK_WEBHOOK_URL", slack.url("/services/default"))
        monkeypatch.setenv("MLCOST_SLACK_WEBHOOK_URL_GENAI", slack.url("/services/genai"))
        assert cli.main(["alerts", "check", "--as-of", as_of.isoformat()]) == 0
        posts = [p["body"] for p in slack.posts if p["status"] == 200]
    for body in posts:
        texts = [body.get("text", "")] + [json.dumps(block) for block in body.get("blocks", [])]
        for text in texts:
            found = IDLE_ALERT.search(text)
            if found:
                return {"from": date.fromisoformat(found[2]), "to": date.fromisoformat(found[3]),
                        "idle_gpu_hours": found[1], "idle_cost_usd": found[4], "all_idle_usd": found[5],
                        "unallocated_idle_usd": found[6]}  # at the nodes' rates: oracle.idle_cost()
    return None


# --- the comparisons -------------------------------------------------------------------------------

@pytest.mark.parametrize("month", MONTHS)
def test_allocation_json_is_the_oracles(sample_db, capsys, truth, month):
    """Bill, buckets, nodes and showback by team and by project of `mlcost allocation --json`."""
    expected = truth.allocation(*oracle.month_bounds(month))
    for by, keyed in (("team", expected.by_team[CURRENCY]), ("project", expected.by_project[CURRENCY])):
        shown = allocation_json_shows(capsys, month, by)
        assert Fraction(Decimal(shown["billed"])) == expected.billed[CURRENCY]
        assert shown["lines"] == expected.lines[CURRENCY]
        for bucket in oracle.BUCKETS:
            exact = expected.buckets[CURRENCY][bucket]
            assert abs(Fraction(Decimal(shown["buckets"][bucket])) - exact) <= EXACT, bucket
        assert set(shown["by_key"]) == set(keyed), by
        for value, exact in keyed.items():
            assert abs(Fraction(Decimal(shown["by_key"][value])) - exact) <= EXACT, (by, value)
        assert set(shown["nodes"]) == set(expected.nodes[CURRENCY])
        for host, node in expected.nodes[CURRENCY].items():
            figures = shown["nodes"][host]
            for name in ("billed", "training", "idle_gpu", "unallocated"):
                assert abs(Fraction(Decimal(str(figures[name]))) - getattr(node, name)) <= EXACT, (host, name)
            assert figures["gpu_hours"] == pytest.approx(float(node.gpu_hours), abs=1e-6)
            assert figures["idle_gpu_hours"] == pytest.approx(float(node.idle_gpu_hours), abs=1e-6)


@pytest.mark.parametrize("month", MONTHS)
def test_allocation_table_is_the_oracles(sample_db, capsys, truth, month):
    """`mlcost allocation --month` as text: the bill, each bucket and each team, to the cent."""
    expected = truth.allocation(*oracle.month_bounds(month))
    shown = allocation_table_shows(capsys, month)
    assert_shown(shown["billed"], expected.billed[CURRENCY], "billed")
    labels = {"training": "Training runs", "serving": "Serving", "idle_gpu": "Idle GPUs", "shared": "Shared",
              "unallocated": "Unallocated"}
    for bucket, label in labels.items():
        (cell,) = [text for name, text in shown["buckets"].items() if name.startswith(label)]
        assert_shown(cell, expected.buckets[CURRENCY][bucket], bucket)
    assert set(shown["by_team"]) == set(expected.by_team[CURRENCY])
    for team, exact in expected.by_team[CURRENCY].items():
        assert_shown(shown["by_team"][team], exact, f"team {team}")


@pytest.mark.parametrize("month", MONTHS)
def test_costs_page_is_the_oracles(sample_db, truth, month):
    """The Costs page's bill, bucket metrics, by-team table and GPU nodes table."""
    expected = truth.allocation(*oracle.month_bounds(month))
    shown = costs_page_shows(month)
    assert_shown(shown["billed"], expected.billed[CURRENCY], "billed")
    for bucket in oracle.BUCKETS:
        assert_shown(shown["buckets"][bucket], expected.buckets[CURRENCY][bucket], bucket)
    assert set(shown["by_key"]) == set(expected.by_team[CURRENCY])
    for team, exact in expected.by_team[CURRENCY].items():
        assert_close(shown["by_key"][team], exact, f"team {team}")
    for host, node in expected.nodes[CURRENCY].items():
        figures = shown["nodes"][host]
        for name in ("billed", "training", "idle_gpu", "unallocated"):
            assert_close(figures[name], getattr(node, name), f"{host} {name}")
        assert_close(figures["idle_gpu_hours"], node.idle_gpu_hours, f"{host} idle GPU-hours", within=1e-6)


@pytest.mark.parametrize("month", MONTHS)
def test_idle_page_is_the_oracles(sample_db, truth, month):
    """Idle GPU-hours over the month on the Idle GPUs page: all, allocated but idle, unallocated."""
    expected = truth.idle(*oracle.month_bounds(month))
    shown = idle_page_shows(month)
    assert_shown(shown["idle_gpu_hours"], expected.idle_gpu_hours, "idle GPU-hours", places=1)
    assert_shown(shown["unallocated_idle_gpu_hours"], expected.unallocated_idle_gpu_hours, "unallocated idle",
                 places=1)
    # the held part is shown as the difference of the two shown figures, so the parts add up on screen
    # (metrics/idle.py); it is then within one rounding step of each of them of the exact value
    held = Decimal(shown["idle_gpu_hours"].replace(",", "")) - Decimal(shown["unallocated_idle_gpu_hours"].replace(",", ""))
    assert Decimal(shown["allocated_idle_gpu_hours"].replace(",", "")) == held
    assert abs(float(held) - float(expected.allocated_idle_gpu_hours)) <= 0.1 + 1e-9, (held, expected.allocated_idle_gpu_hours)


@pytest.mark.parametrize("month", MONTHS)
def test_report_is_the_oracles(sample_db, capsys, truth, month):
    """`mlcost report --month`: the month's bill (charges whose period starts in it) and its idle,
    observed and allocated-but-idle GPU-hours, for each period its columns name."""
    shown = report_shows(capsys, month)
    first, after = oracle.month_bounds(month)
    charges = shown["Charges for the month (USD)"]  # lines whose charge period starts in the columns' days
    assert any(start == first for start, _ in charges), charges
    for (start, end), cell in charges.items():
        billed = truth.allocation(start, end).billed.get(CURRENCY)
        if cell in ("—", ""):
            assert billed is None, (start, end)
            continue
        assert_shown(cell, billed, f"charges {start}..{end}")
    for figure, exact in (("Idle GPU-hours", lambda i: i.idle_gpu_hours),
                          ("Observed GPU-hours", lambda i: i.observed_gpu_hours),
                          ("Not held by any run (GPU-h)", lambda i: i.unallocated_idle_gpu_hours)):
        cells = shown[figure]
        assert any(start == first for start, _ in cells), (figure, cells)
        for (start, end), cell in cells.items():
            if cell in ("—", ""):
                assert truth.idle(start, end).observed_gpu_hours == 0, (figure, start)
                continue
            assert_shown(cell, exact(truth.idle(start, end)), f"{figure} {start}..{end}", places=1)


SLACK_AS_OF = (date(2026, 9, 1), date(2026, 10, 1), date(2026, 11, 1), date(2026, 11, 22))


@pytest.mark.parametrize("as_of", SLACK_AS_OF, ids=str)
def test_slack_idle_alert_is_the_oracles(sample_db, monkeypatch, truth, as_of):
    """The idle-waste alert of the 7 days before `as_of` (each sample month's last week, and the
    sample's 'today'), posted to a real HTTP server: its idle GPU-hours and idle cost, all and not
    held by any run."""
    shown = slack_idle_alert_shows(monkeypatch, as_of)
    assert shown is not None, "no idle-waste alert was posted"  # the sample idles far above $200 a week
    assert shown["to"] == as_of - timedelta(days=1)
    expected = truth.idle(shown["from"], shown["to"] + timedelta(days=1))
    assert expected.observed_gpu_hours > 0
    assert_shown(shown["idle_gpu_hours"], expected.idle_gpu_hours, "idle GPU-hours", places=1)
    cost = truth.idle_cost(shown["from"], shown["to"] + timedelta(days=1))
    assert_shown(shown["idle_cost_usd"], cost["all"], "idle cost")
    assert_shown(shown["all_idle_usd"], cost["all"], "idle cost, both parts")
    assert_shown(shown["unallocated_idle_usd"], cost["unallocated"], "idle cost not held by any run")


def test_idle_rule_follows_the_settings(sample_db, tmp_path, monkeypatch, capsys):
    """Other [gpu] settings (a power condition, a lower utilization threshold, a longer minimum
    stretch), recomputed with `mlcost rollup`: the idle GPU-hours and the nodes' idle are the
    oracle's under the same settings, in every sample month."""
    from metrics import queries
    from metrics.filters import Filters

    settings = tmp_path / "mlcost.toml"
    settings.write_text((SAMPLE_DIR / "mlcost.toml").read_text()
                        + "\n[gpu]\nidle_power_max_w = 56\nidle_min_s = 600\nidle_util_max_pct = 3\n")
    monkeypatch.setenv("MLCOST_CONFIG", str(settings))
    assert cli.main(["rollup"]) == 0
    capsys.readouterr()
    S = SAMPLE_DIR
    truth = oracle.Oracle.of(runs=S / "runs.jsonl", serving=S / "serving_windows.jsonl.gz",
                             traces=sorted((S / "gpu_traces").glob("*.csv*")),
                             bills=sorted((S / "billing").glob("*.csv*")), config=settings)
    default = oracle.sample().idle(*oracle.month_bounds("2026-11")).idle_gpu_hours
    assert truth.idle(*oracle.month_bounds("2026-11")).idle_gpu_hours < default - 100  # the settings matter
    for month in MONTHS:
        first, last = month_days(month)
        expected = truth.idle(first, last + timedelta(days=1))
        gpus = queries.idle_by_gpu(Filters(start=first, end=last))
        assert float(gpus["idle_h"].sum()) == pytest.approx(float(expected.idle_gpu_hours), abs=1e-6), month
        assert float(gpus["unallocated_idle_h"].sum()) == \
            pytest.approx(float(expected.unallocated_idle_gpu_hours), abs=1e-6), month
        nodes = allocation_json_shows(capsys, month, "team")["nodes"]
        for host, node in truth.allocation(first, last + timedelta(days=1)).nodes[CURRENCY].items():
            assert nodes[host]["idle_gpu_hours"] == pytest.approx(float(node.idle_gpu_hours), abs=1e-6)
            assert abs(Fraction(Decimal(nodes[host]["idle_gpu"])) - node.idle_gpu) <= EXACT


# --- the idle seconds no run held: one rule for the allocation, gpu_days and the Idle GPUs page ----

def test_unallocated_idle_is_one_figure_when_a_run_starts_mid_minute(warehouse, tmp_path, capsys):
    from ingest.pipeline import loader
    from metrics import queries
    from metrics.filters import Filters

    trace = tmp_path / "n1_2026-01.csv"
    rows = ["timestamp,host,gpu_index,gpu_uuid,gpu_name,power_w,energy_mj,gpu_util_pct,mem_used_mib"]
    rows += [f"2026-01-05T10:{s // 60:02d}:{s % 60:02d}Z,n1,0,GPU-0,NVIDIA L4,20,,0,0" for s in range(0, 3600, 30)]
    trace.write_text("\n".join(rows) + "\n")
    runs = tmp_path / "runs.jsonl"
    runs.write_text(json.dumps({"run_id": "r1", "project": "p", "team": "t", "start_time": "2026-01-05T10:00:30Z",
                                "end_time": "2026-01-05T10:30:30Z", "price_per_hour_usd": 1, "host": "n1",
                                "gpu_indices": [0], "gpu_type": "NVIDIA L4"}) + "\n")
    bill = tmp_path / "bill.csv"
    bill.write_text("BilledCost,EffectiveCost,BillingCurrency,ChargePeriodStart,ChargePeriodEnd,ChargeCategory,"
                    "ProviderName,ServiceName,ResourceId,ResourceName,x_LineItemId\n"
                    "1,1,USD,2026-01-05 10:00:00,2026-01-05 11:00:00,Usage,AWS,EC2,i-1,n1,li-1\n")
    assert all(s.ok for _, s in loader.ingest_paths([str(trace), str(runs), str(bill)]))
    day = date(2026, 1, 5)
    expected = oracle.Oracle.of(runs=runs, traces=[trace], bills=[bill]).idle(day, day + timedelta(days=1))
    assert expected.unallocated_idle_gpu_hours == Fraction(1, 2)  # by hand: 11:00 - 10:30:30 + 10:00:30 - 10:00
    node = allocation_json_shows(capsys, "2026-01", "team")["nodes"]["n1"]
    assert node["idle_gpu_hours"] == pytest.approx(0.5)  # the allocation agrees with the oracle
    page = queries.idle_by_gpu(Filters(start=day, end=day))
    assert float(page["unallocated_idle_h"].sum()) == pytest.approx(float(expected.unallocated_idle_gpu_hours))
    assert float(page["allocated_idle_h"].sum()) == pytest.approx(float(expected.allocated_idle_gpu_hours))
