"""What every command module shares: exit codes and the one way of telling the user a problem."""
from __future__ import annotations

import sys
from pathlib import Path

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, EXIT_BUSY = 0, 1, 2, 3

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE_DIR = REPO_ROOT / "sample_data"


def say(message: str) -> None:
    """One line for the user on stderr, prefixed with the program's name."""
    print(f"mlcost: {message}", file=sys.stderr, flush=True)
