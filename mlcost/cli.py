"""The `mlcost` command line: one parser, a subcommand per module in mlcost/commands/."""
from __future__ import annotations

import argparse
import sys
from importlib import metadata

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
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}",
                        help="print the installed mlcost version and exit")
    commands = parser.add_subparsers(required=True, metavar="COMMAND",
                                     help="run `mlcost COMMAND --help` for a command's options")
    for module in COMMAND_MODULES:
        module.register(commands)
    return parser


def version() -> str:
    """The installed package's version (its metadata, i.e. pyproject.toml's at install time)."""
    try:
        return metadata.version("mlcost")
    except metadata.PackageNotFoundError:  # a source tree run without `pip install`
        return "unknown (not installed)"


if __name__ == "__main__":
    sys.exit(main())
