"""The docs cannot drift: the README's two quick-start commands and CI's, a short README whose links
resolve, and a docs site (MkDocs, docs/) that builds strictly and documents every command, option,
setting, environment variable and warehouse column."""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from mlcost import cli
from tests.conftest import IN_CI, REPO_ROOT

README = (REPO_ROOT / "README.md").read_text()
DOCS = REPO_ROOT / "docs"
SITE = "\n".join(page.read_text() for page in sorted(DOCS.rglob("*.md")))
README_MAX_LINES = 150


def quick_start_commands() -> list[str]:
    section = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.+?)\n```", section)


def test_quick_start_has_exactly_two_commands():
    commands = quick_start_commands()
    assert len(commands) == 2, commands
    assert commands[0].startswith("pip install") and "mlcost demo" in commands[0]
    assert commands[1].startswith("pip install") and "pytest" in commands[1]


def test_ci_runs_the_readme_test_command_verbatim():
    ci_lines = (REPO_ROOT / ".ci" / "run").read_text().splitlines()
    assert quick_start_commands()[1] in ci_lines


def test_readme_is_short():
    lines = README.count("\n") + 1
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; the reference belongs in docs/"


def test_readme_links_and_images_resolve():
    targets = re.findall(r"\]\(([^)\s]+)\)", README)
    local = [t for t in targets if not re.match(r"[a-z]+:", t) and not t.startswith("#")]
    assert "docs/img/overview.png" in local and any(t.startswith("docs/") and t.endswith(".md") for t in local)
    missing = [t for t in local if not (REPO_ROOT / t.split("#", 1)[0]).exists()]
    assert not missing, f"README links to files that do not exist: {missing}"


def test_screenshot_is_small():
    size = (DOCS / "img" / "overview.png").stat().st_size
    assert 5_000 < size < 300_000, f"docs/img/overview.png is {size:,} bytes"


def commands(parser, prefix: str = "mlcost") -> list[tuple[str, object]]:
    """(`mlcost ingest`, its parser), ... including nested ones such as `mlcost alerts check`."""
    found = []
    for action in parser._actions:
        if action.__class__.__name__ == "_SubParsersAction":
            for name, command in action.choices.items():
                nested = commands(command, f"{prefix} {name}")
                found += nested or [(f"{prefix} {name}", command)]
    return found


def test_every_command_and_option_is_documented():
    reference = (DOCS / "commands.md").read_text()
    found = commands(cli._parser())
    assert "mlcost alerts check" in dict(found)
    for name, command in found:
        row = next((line for line in reference.splitlines() if line.startswith(f"| `{name}")), None)
        assert row is not None, f"command {name} has no row in docs/commands.md"
        for action in command._actions:
            for option in action.option_strings:
                if option.startswith("--") and option != "--help":
                    assert option in row, f"option {option} of {name} is not in its row of docs/commands.md"


def setting_names(table: dict, prefix: str = "") -> list[tuple[str, bool]]:
    """(dotted key, whether it is a table of free names such as prices by type) for defaults.toml."""
    names = []
    for key, value in table.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and prefix:  # [energy.pue_by_region], [slurm.partition_...]
            names.append((dotted, True))
        elif isinstance(value, dict):
            names += setting_names(value, f"{dotted}.") if value else [(dotted, True)]
        else:
            names.append((dotted, False))
    return names


def test_every_setting_is_documented():
    defaults = tomllib.loads((REPO_ROOT / "ingest" / "defaults.toml").read_text())
    documented = (DOCS / "configuration.md").read_text()
    names = setting_names(defaults)
    assert ("gpu.idle_min_s", False) in names and ("prices.gpu_usd_per_hour", True) in names
    for name, is_table in names:
        written = f"`{name}." if is_table else f"`{name}`"
        assert written in documented, f"setting {name} is not in docs/configuration.md"


def environment_variables(folders: tuple[str, ...]) -> set[str]:
    found: set[str] = set()
    for folder in folders:
        for source in (REPO_ROOT / folder).rglob("*.py"):
            found |= set(re.findall(r"\b((?:MLCOST|MLFLOW)_[A-Z0-9_]+)", source.read_text()))
    return found - {"MLCOST_SLACK_WEBHOOK_URL_GENAI"}  # an instance of MLCOST_SLACK_WEBHOOK_URL_<NAME>


def test_every_environment_variable_is_documented():
    product = environment_variables(("app", "ingest", "metrics", "outputs", "present", "mlcost"))
    assert {"MLCOST_DB", "MLCOST_CONFIG", "MLCOST_STAGE_MEMORY"} <= product
    configuration = (DOCS / "configuration.md").read_text()
    missing = sorted(name for name in product if f"`{name}" not in configuration)
    assert not missing, f"environment variables missing from docs/configuration.md: {missing}"
    tests = environment_variables(("tests",)) - product
    missing = sorted(name for name in tests if f"`{name}" not in SITE)
    assert not missing, f"test environment variables missing from docs/: {missing}"


def test_every_warehouse_table_is_documented():
    schema = (REPO_ROOT / "ingest" / "schema.sql").read_text()
    documented = (DOCS / "schema.md").read_text()
    for table in re.findall(r"CREATE (?:TABLE|OR REPLACE VIEW) (?:IF NOT EXISTS )?(\w+)", schema):
        assert f"`{table}`" in documented, f"table {table} is not in docs/schema.md"


def test_every_warehouse_column_is_documented(warehouse):
    from ingest.engine import warehouse as wh

    documented = (DOCS / "schema.md").read_text()
    with wh.connect() as con:
        columns = con.execute(
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_name IN "
            "('loads', 'rejects', 'runs', 'run_evals', 'serving_windows', 'serving_costs', "
            "'billing_lines', 'billing_costs', 'billing_currency_totals', "
            "'gpu_samples', 'gpu_minutes', 'gpu_gaps', 'gpu_rollup_settings', 'run_gpus', "
            "'run_gpu_minutes', 'run_energy', 'gpu_minute_use', 'run_gpu_time', 'gpu_minutes_allocated', "
            "'run_gpu_energy', 'run_gpu_days', 'gpu_days', 'alerts', 'alert_deliveries', 'alert_snoozes', 'decisions', 'import_watermarks')"
        ).fetchall()
    missing = [f"{t}.{c}" for t, c in columns if f"`{c}`" not in documented]
    assert not missing, f"columns missing from docs/schema.md: {missing}"


def test_every_docs_page_is_in_the_nav():
    """Strict builds only warn about pages left out of the nav when mkdocs.yml asks; check it here too."""
    config = (REPO_ROOT / "mkdocs.yml").read_text()
    pages = sorted(str(page.relative_to(DOCS)) for page in DOCS.rglob("*.md"))
    missing = [page for page in pages if f": {page}\n" not in config]
    assert not missing, f"docs pages missing from mkdocs.yml's nav: {missing}"


def test_the_benchmark_keeps_the_notes_of_its_results_file(tmp_path):
    sys.path.insert(0, str(REPO_ROOT / "bench"))
    try:
        import fleet
    finally:
        sys.path.remove(str(REPO_ROOT / "bench"))
    results = (REPO_ROOT / "bench" / "RESULTS.md").read_text()
    assert fleet.NOTES_MARK in results, "bench/RESULTS.md lost the mark its notes are kept below"
    old = tmp_path / "RESULTS.md"
    old.write_text("# Fleet benchmark\n\nold table\n\n" + fleet.NOTES_MARK + "\n## Notes\n\nwhy\n")
    assert fleet.kept_notes(old) == "\n" + fleet.NOTES_MARK + "\n## Notes\n\nwhy\n"
    assert fleet.kept_notes(tmp_path / "missing.md") == ""


def test_docs_site_builds_strictly(tmp_path):
    """`mkdocs build --strict`: a broken link or anchor, a missing page or include fails. The build
    needs mkdocs and mkdocs-material (the test extras); CI must have them."""
    if importlib.util.find_spec("mkdocs") is None:
        if IN_CI:
            pytest.fail("mkdocs is not installed: pip install -e '.[test]'")
        pytest.skip("mkdocs is not installed (pip install -e '.[test]')")
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                           cwd=REPO_ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    home = (site / "index.html").read_text()
    assert "img/overview.png" in home and (site / "img" / "overview.png").exists()
    performance = (site / "performance" / "index.html").read_text()
    assert "Fleet benchmark" in performance, "bench/RESULTS.md is not included in the Performance page"
    assert not (site / "screenshot.py").exists()
