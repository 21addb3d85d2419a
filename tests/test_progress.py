"""Progress of `mlcost ingest`: bars on a terminal, none in a pipe or with --json; the loader's
on_progress hears each file's size and rows."""
from __future__ import annotations

import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path

from ingest.pipeline import loader
from tests.conftest import REPO_ROOT

CASES = Path(__file__).parent / "cases"
GOOD = CASES / "pages_runs.jsonl"
MIXED = CASES / "pages_bad_lines.jsonl"


def run_cli(args: list[str], db: Path, stderr_tty: bool) -> tuple[int, str, str]:
    """`python -m mlcost ingest ARGS` with stdout a pipe and stderr a terminal (a pty of 120 x 40)
    or a pipe; returns the exit code, stdout and stderr."""
    env = {**os.environ, "MLCOST_DB": str(db), "PYTHONPATH": str(REPO_ROOT)}
    command = [sys.executable, "-m", "mlcost", "ingest", *args]
    if not stderr_tty:
        done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=120)
        return done.returncode, done.stdout, done.stderr
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    chunks: list[bytes] = []

    def drain() -> None:  # read as it comes: a pty loses what is unread once the child closes it
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=slave, env=env, cwd=REPO_ROOT)
    os.close(slave)
    stdout = process.stdout.read().decode()
    code = process.wait(timeout=120)
    reader.join(timeout=10)
    os.close(master)
    return code, stdout, b"".join(chunks).decode(errors="replace")


def data_lines(path: Path) -> int:
    return sum(1 for line in path.read_text().splitlines() if line.strip())


def test_a_terminal_shows_per_file_and_within_file_bars(tmp_path: Path) -> None:
    code, stdout, stderr = run_cli([str(GOOD), str(MIXED)], tmp_path / "w.duckdb", stderr_tty=True)
    assert code == 1  # the mixed file has rejects
    assert "files 2/2" in stderr  # the bar over every file
    assert GOOD.name in stderr and MIXED.name in stderr  # the bar of the file being read
    assert f"{data_lines(GOOD):,} rows" in stderr
    assert "B/s" in stderr and "100%" in stderr  # rate, and the end of each file
    # the summaries still reach stdout, one per file
    assert f"OK {GOOD}" in stdout and f"{MIXED}" in stdout


def test_json_or_a_pipe_shows_no_bar(tmp_path: Path) -> None:
    code, stdout, stderr = run_cli(["--json", str(GOOD)], tmp_path / "a.duckdb", stderr_tty=True)
    assert code == 0
    assert "%|" not in stderr and "\r" not in stderr and "files" not in stderr
    (summary,) = json.loads(stdout)
    assert summary["rows_loaded"] == data_lines(GOOD)

    code, stdout, stderr = run_cli([str(GOOD)], tmp_path / "b.duckdb", stderr_tty=False)
    assert code == 0
    assert stderr == ""
    assert stdout.startswith(f"OK {GOOD}")


def test_on_progress_hears_each_file_at_its_end(warehouse: Path, tmp_path: Path) -> None:
    again = tmp_path / "again.jsonl"  # the same content under another name: already loaded
    again.write_bytes(GOOD.read_bytes())
    heard: list[tuple[int, int]] = []
    summaries = [s for _, s in loader.ingest_paths([str(GOOD), str(MIXED), str(again)],
                                                    on_progress=lambda b, r: heard.append((b, r)))]
    assert [s.status for s in summaries] == ["loaded", "loaded", "already_loaded"]
    # the last call of each file: its size on disk and its rows, loaded or rejected
    sizes = [GOOD.stat().st_size, MIXED.stat().st_size, GOOD.stat().st_size]
    assert heard[-1] == (sizes[2], 0)
    ends = [call for call in heard if call[0] in sizes]
    assert (sizes[0], data_lines(GOOD)) in ends
    assert (sizes[1], data_lines(MIXED)) in ends
    assert summaries[1].rows_loaded + summaries[1].rows_rejected == data_lines(MIXED)


def test_the_data_page_shows_its_progress_over_the_uploaded_files(warehouse: Path) -> None:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(REPO_ROOT / "app" / "main.py"), default_timeout=60).run()
    at.switch_page("app_pages/data.py").run()
    at.file_uploader[0].set_value([(path.name, path.read_bytes(), "application/octet-stream") for path in (GOOD, MIXED)])
    at.button(key="FormSubmitter:upload-Load files").click()
    at.run()
    assert not at.exception
    (bar,) = at.get("progress")
    assert bar.proto.value == 100
    megabytes = (GOOD.stat().st_size + MIXED.stat().st_size) / 1e6
    assert bar.proto.text.startswith(f"Read 2 file(s): {data_lines(GOOD) + data_lines(MIXED):,} rows, "
                                     f"{megabytes:,.1f} MB in ")
