"""Which modules one `mlcost` command imports: it runs in a fresh interpreter (this test process
has imported everything already), and the modules of a watched list it imported come back."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Runs `mlcost ARGS...` in this process, then prints which of the watched modules were imported.
PROBE = """
import json, sys
from mlcost.cli import main
watched = sys.argv[1].split(",")
try:
    code = main(sys.argv[2:])
except SystemExit as stop:
    code = stop.code
print(json.dumps({"code": code, "imported": [name for name in watched if name in sys.modules]}), file=sys.stderr)
"""


def imported(args: list[str], watched: tuple[str, ...], db: Path, cwd: Path = REPO) -> tuple[int, list[str]]:
    """`mlcost ARGS...` run against the warehouse `db`: its exit code and the watched modules it imported."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "MLCOST_DB": str(db)}
    done = subprocess.run([sys.executable, "-c", PROBE, ",".join(watched), *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=300)
    record = json.loads(done.stderr.strip().splitlines()[-1])
    return record["code"], record["imported"]
