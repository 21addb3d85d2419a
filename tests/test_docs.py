"""The README cannot drift: its two quick-start commands, CI's command, every CLI command and option."""
from __future__ import annotations

import re

from mlcost import cli
from tests.conftest import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text()


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
    found = commands(cli._parser())
    assert "mlcost alerts check" in dict(found)
    for name, command in found:
        assert f"`{name}" in README, f"command {name} is not in the README"
        for action in command._actions:
            for option in action.option_strings:
                if option.startswith("--") and option != "--help":
                    assert option in README, f"option {option} of {name} is not in the README"


def test_every_warehouse_table_is_documented():
    schema = (REPO_ROOT / "ingest" / "schema.sql").read_text()
    documented = (REPO_ROOT / "docs" / "schema.md").read_text()
    for table in re.findall(r"CREATE (?:TABLE|OR REPLACE VIEW) (?:IF NOT EXISTS )?(\w+)", schema):
        assert f"`{table}`" in documented, f"table {table} is not in docs/schema.md"


def test_every_warehouse_column_is_documented(warehouse):
    from ingest import warehouse as wh

    documented = (REPO_ROOT / "docs" / "schema.md").read_text()
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
