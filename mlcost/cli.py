"""The `mlcost` command line: one parser, a subcommand per module in mlcost/commands/."""
from __future__ import annotations

import argparse
import sys

from ingest.engine import warehouse
from ingest.settings import config
from mlcost.commands import alerts, allocation, fetch, imports, ingest, lake, loads, report, serve
from mlcost.common import EXIT_BUSY, EXIT_USAGE, say

# Each module adds its subcommands with register(commands); the order is the order of --help.
COMMAND_MODULES = (ingest, lake, loads, fetch, imports, allocation, alerts, report, serve)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return args.run(args)
    except warehouse.WarehouseBusy as busy:
        say(str(busy))
        return EXIT_BUSY
    except config.ConfigError as error:
        say(str(error))
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mlcost",
        description="Cost and energy analytics for ML teams. The warehouse is $MLCOST_DB "
                    f"(default ./{warehouse.DEFAULT_DB}).",
    )
    parser.add_argument("--version", action=_Version, help="print the installed mlcost version and exit")
    commands = parser.add_subparsers(required=True, metavar="COMMAND",
                                     help="run `mlcost COMMAND --help` for a command's options")
    for module in COMMAND_MODULES:
        module.register(commands)
    return parser


class _Version(argparse.Action):
    """--version: the version is looked up when asked for (importlib.metadata and the lookup cost
    every other command ~20 ms of its start)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        parser._print_message(f"{parser.prog} {version()}\n", sys.stdout)
        parser.exit()


def version() -> str:
    """The installed package's version (its metadata, i.e. pyproject.toml's at install time)."""
    from importlib import metadata

    try:
        return metadata.version("mlcost")
    except metadata.PackageNotFoundError:  # a source tree run without `pip install`
        return "unknown (not installed)"


if __name__ == "__main__":
    sys.exit(main())
