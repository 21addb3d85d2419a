"""The command line explains itself: every command's --help has a description, every option a help
text, `mlcost --version` prints the version pyproject.toml declares, and `ingest --help` names .zst."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tomllib

from mlcost import cli
from tests.conftest import REPO_ROOT


def parsers(parser: argparse.ArgumentParser, prefix: str = "mlcost"):
    """(`mlcost`, parser), (`mlcost alerts`, ...), (`mlcost alerts check`, ...): every node of the tree."""
    yield prefix, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, command in action.choices.items():
                yield from parsers(command, f"{prefix} {name}")


def test_the_tree_is_walked():
    names = [name for name, _ in parsers(cli._parser())]
    # a nested group and a nested command are reached, not only the top level
    assert {"mlcost ingest", "mlcost alerts", "mlcost alerts check", "mlcost import prometheus",
            "mlcost demo"} <= set(names)
    assert len(names) == len(set(names)) >= 18


def test_every_command_has_a_one_line_description():
    for name, parser in parsers(cli._parser()):
        description = (parser.description or "").strip()
        assert description, f"`{name} --help` has no description"
        assert "\n" not in description, f"`{name}`'s description is more than one line"
        assert " ".join(description.split()[:3]) in " ".join(parser.format_help().split()), name


def test_every_subcommand_is_listed_with_a_summary_in_its_parents_help():
    for name, parser in parsers(cli._parser()):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                listed = {choice.dest: (choice.help or "").strip() for choice in action._choices_actions}
                assert set(listed) == set(action.choices), name
                assert all(listed.values()), f"`{name} --help` lists a command without a summary: {listed}"


def test_every_option_and_argument_has_a_help_text():
    for name, parser in parsers(cli._parser()):
        for action in parser._actions:
            label = "/".join(action.option_strings) or action.dest
            assert (action.help or "").strip(), f"{label} of `{name}` has no help text"


def run_mlcost(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run([sys.executable, "-m", "mlcost", *args], capture_output=True, text=True,
                          env=env, cwd=REPO_ROOT, timeout=120)


def test_version_prints_the_declared_version():
    declared = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]
    done = run_mlcost("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"mlcost {declared}"


def test_ingest_help_says_gz_and_zst_are_read():
    done = run_mlcost("ingest", "--help")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert ".gz" in text and ".zst" in text, text
