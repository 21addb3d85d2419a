"""The packages' layers hold: imports run downward only, and only the dashboard imports Streamlit
(pyproject.toml [tool.importlinter]); a broken contract fails with import-linter's own report."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT


def test_imports_run_downward_and_figures_need_no_streamlit():
    command = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    done = subprocess.run([command], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "2 kept, 0 broken" in done.stdout, done.stdout[-2000:]
