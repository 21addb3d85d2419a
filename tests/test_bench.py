"""bench/fleet.py at a tiny scale: every row of the table is there, RESULTS.md is written, every
generated row is loaded; and the dataset is the same bytes every time. No timing assertions."""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

BENCH = REPO_ROOT / "bench"
TINY = "0.001"


def run_fleet(tmp_path: Path) -> tuple[subprocess.CompletedProcess, Path]:
    results = tmp_path / "RESULTS.md"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, str(BENCH / "fleet.py"), "--scale", TINY, "--repeats", "1",
                           "--cache", str(tmp_path / "cache"), "--results", str(results)],
                          capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return done, results


def data_rows(path: Path) -> int:
    """Lines of a generated file that hold data (CSV: all but the header)."""
    with path.open("rb") as lines:
        count = sum(1 for line in lines if line.strip())
    return count - 1 if path.suffix == ".csv" else count


def dashboard_pages() -> list[str]:
    """The page titles app/main.py navigates to, read from its source."""
    return re.findall(r'st\.Page\("[^"]+", title="([^"]+)"', (REPO_ROOT / "app" / "main.py").read_text())


@pytest.fixture(scope="module")
def fleet_run(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("fleet")
    done, results = run_fleet(tmp_path)
    return done, results, tmp_path / "cache" / f"scale-{TINY}"


def table_row(text: str, label: str) -> list[str]:
    (line,) = [line for line in text.splitlines() if line.startswith(f"| {label} |")]
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_the_table_has_every_row_and_is_written(fleet_run):
    done, results, _ = fleet_run
    text = results.read_text()
    assert text in done.stdout  # printed and written alike
    assert re.search(r"^- date: \d{4}-\d\d-\d\d \d\d:\d\d UTC; commit \w+", text, re.MULTILINE)
    assert re.search(r"^- machine: \d+ CPUs .*GiB memory", text, re.MULTILINE)
    for label in ("FOCUS bill", "serving windows (JSONL)", "runs (JSONL)", "trace rows (16 files)",
                  "one 4-host trace file"):
        cells = table_row(text, label)
        assert len(cells) == 11 and re.search(r"[\d.]+× (met|\*\*not met\*\*)", cells[5]), cells
        # the ratio to pandas/json and its verdict (not slower than it)
        assert re.search(r"^[\d.]+× of its speed (met|\*\*not met\*\*)$", cells[6]), cells
        # wall and CPU seconds of both sides, and the ratio by CPU beside the wall one
        assert re.search(r"[\d.]+ s CPU", cells[2]) and re.search(r"[\d.]+ s CPU", cells[3]), cells
        assert re.search(r"by CPU seconds [\d.]+×", cells[5]), cells
    assert "Idle GPUs query (rollups) vs naive window query" in text
    assert "a page read while the 4-host file" in text
    assert re.search(r"\d+ of them over 0\.5 s", text)  # the reader's slow reads, not only the longest
    pages = dashboard_pages()
    assert len(pages) >= 10
    for page in pages:
        cells = table_row(text, page)
        assert all(re.search(r"(met|\*\*not met\*\*)$", cell) for cell in cells[1:]), cells


def test_every_generated_row_is_loaded_without_a_reject(fleet_run):
    """The 'loaded / rejected' column against the files themselves, counted line by line."""
    _, results, dataset = fleet_run
    text = results.read_text()
    traces = sorted((dataset / "traces").glob("*.csv"))
    assert len(traces) == 16
    expected = {
        "FOCUS bill": data_rows(dataset / "focus_2026-10.csv"),
        "serving windows (JSONL)": data_rows(dataset / "serving.jsonl"),
        "runs (JSONL)": data_rows(dataset / "runs.jsonl"),
        "trace rows (16 files)": sum(data_rows(path) for path in traces),
        "one 4-host trace file": data_rows(dataset / "trace_4hosts.csv"),
    }
    for label, rows in expected.items():
        cells = table_row(text, label)
        assert cells[1] == f"{rows:,}" and cells[10] == f"{rows:,} / 0", (label, cells)


def test_the_dataset_is_the_same_bytes_every_time(tmp_path):
    sys.path.insert(0, str(BENCH))
    try:
        import fleet_data
    finally:
        sys.path.remove(str(BENCH))
    digests = []
    for name in ("one", "two"):
        fleet_data.generate(tmp_path / name, float(TINY))
        digests.append({str(p.relative_to(tmp_path / name)): hashlib.sha256(p.read_bytes()).hexdigest()
                        for p in sorted((tmp_path / name).rglob("*")) if p.is_file()})
    assert digests[0] == digests[1] and len(digests[0]) == 16 + 4


def test_the_sql_built_fleet_warehouse_holds_what_it_says(tmp_path):
    """bench/fleet_warehouse.py writes a warehouse of the current schema: its counts are the tables' rows."""
    import duckdb

    out = tmp_path / "fleet.duckdb"
    done = subprocess.run([sys.executable, str(BENCH / "fleet_warehouse.py"), str(out), "--scale", "0.002",
                           "--days", "1"], capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env={k: v for k, v in os.environ.items() if k != "MLCOST_CONFIG"})
    assert done.returncode == 0, done.stderr
    printed = dict(re.findall(r"'(\w+)': (\d+)", done.stdout))
    assert printed and int(printed["gpu_samples"]) > 0, done.stdout
    con = duckdb.connect(str(out), read_only=True)
    try:
        for table, rows in printed.items():
            assert con.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == int(rows), table
        # the allocation stored as a load stores it: every line with an effective cost, once
        # (node hours of its traced GPUs among them), with the settings it was computed for
        lines, cost = con.execute("SELECT count(*), sum(effective_cost) FROM billing_lines "
                                  "WHERE effective_cost IS NOT NULL").fetchone()
        assert con.execute("SELECT sum(effective_cost) FROM bill_allocation_days").fetchone()[0] == cost
        assert con.execute("SELECT coalesce(sum(lines) FILTER (WHERE line_key IS NULL), 0) "
                           "+ count(DISTINCT line_key) FROM bill_allocation_days").fetchone()[0] == lines
        assert con.execute("SELECT count(*) FROM bill_allocation_days WHERE bucket = 'idle_gpu'").fetchone()[0] > 0
        assert con.execute("SELECT count(*) FROM bill_allocation_settings").fetchone()[0] == 1
    finally:
        con.close()


def test_a_page_that_raised_is_not_met_however_fast():
    """A page that raised drew nothing: fast seconds and no points must not read as targets met."""
    sys.path.insert(0, str(BENCH))
    try:
        import fleet
    finally:
        sys.path.remove(str(BENCH))
    lines = fleet.page_table({"source": "test", "pages": [["Costs", 0.1, 0.01, 0, "KeyError: 'cost_usd'"],
                                                          ["Overview", 0.1, 0.01, 10, None]]})
    (costs,) = [line for line in lines if line.startswith("| Costs |")]
    (overview,) = [line for line in lines if line.startswith("| Overview |")]
    assert costs.count("**not met**") == 3 and "KeyError: 'cost_usd'" in costs
    assert "not met" not in overview and overview.count("met") == 3


def test_page_queries_names_each_slow_query_and_its_operators(tmp_path):
    """bench/page_queries.py on a small SQL-built warehouse: the page's queries, the app function
    that made each, and the operators of the slowest, as DuckDB profiled them."""
    out = tmp_path / "fleet.duckdb"
    env = {k: v for k, v in os.environ.items() if k != "MLCOST_CONFIG"}
    built = subprocess.run([sys.executable, str(BENCH / "fleet_warehouse.py"), str(out), "--scale", "0.002",
                            "--days", "1"], capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert built.returncode == 0, built.stderr
    done = subprocess.run([sys.executable, str(BENCH / "page_queries.py"), str(out), "--page", "Idle GPUs",
                           "--queries", "50", "--operators", "2"], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path, env={**env, "PYTHONPATH": str(REPO_ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    header = re.match(r"== Idle GPUs: cold [\d.]+ s; (\d+) queries", lines[0])
    assert header and "raised" not in lines[0], lines[:3]
    made = [line for line in lines if re.match(r"\s+[\d.]+ s  (app|metrics|outputs)/[\w/]+\.py:\w+  ", line)]
    assert 0 < len(made) == int(header.group(1)), done.stdout  # every query listed (fewer than 50 here)
    assert any("metrics/queries/gpus.py:idle_by_gpu" in line for line in made)  # the page's query, by who made it
    operator_lines = [line for line in lines if re.match(r"\s+[\d.]+ s\s+[\d,]+ rows  [A-Z_]+  ", line)]
    assert len(made) <= len(operator_lines) <= 2 * len(made), done.stdout


def test_each_child_reports_its_own_peak_memory_not_its_parents():
    """A child's peak RSS is its own even when the measuring process has grown far beyond it (as
    when it generated the dataset): a forked child's ru_maxrss would start at its parent's peak."""
    import resource

    sys.path.insert(0, str(BENCH))
    try:
        import fleet
    finally:
        sys.path.remove(str(BENCH))
    ballast = bytearray(b"\x01") * (600 << 20)  # written, so resident: this process peaks above 600 MiB
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 >= 600
    env = {**os.environ}
    sizes = {}
    for mib in (40, 300):
        code = f"import time; data = bytearray(b'\\x01') * ({mib} << 20); time.sleep(0.2); print(len(data))"
        run = fleet.measure([sys.executable, "-c", code], env, REPO_ROOT)
        assert run.returncode == 0 and run.stdout.strip() == str(mib << 20), run.stderr
        sizes[mib] = run.peak_rss_mb
    del ballast
    bare = fleet.measure([sys.executable, "-c", "pass"], env, REPO_ROOT).peak_rss_mb  # the interpreter alone
    for mib, peak_mb in sizes.items():
        # the child's own peak: its allocation (MiB) over a bare interpreter's, not the 600 MiB above
        assert mib - 1 <= peak_mb - bare <= mib + 40, (mib, peak_mb, bare)
    assert sizes[300] < 500
