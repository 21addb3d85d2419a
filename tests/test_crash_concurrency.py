"""Crash safety and concurrency of `mlcost ingest`, with real processes on a real warehouse file.

Crash: `python -m mlcost ingest` is SIGKILLed at a random moment of a load (seeded delays), and
the warehouse is checked: every load in the ledger has exactly the rows it says it loaded, no row
belongs to a load the ledger lacks, and ingesting again afterwards ends with every line once.
Concurrency: one process ingests file after file while this one reads the warehouse in a loop;
every read answers (or says the warehouse is busy) and the final counts equal the files' lines.
MLCOST_CRASH_TRIALS sets the kill trials (README's figures: 20).
"""
from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from ingest.engine import warehouse as wh

TRIALS = int(os.environ.get("MLCOST_CRASH_TRIALS", "4"))
HEADER = "timestamp,host,gpu_index,gpu_uuid,gpu_name,power_w,energy_mj,gpu_util_pct,mem_used_mib"
ROWS_PER_FILE = 40_000  # 4 GPUs x 10,000 samples: a load of a second or two


def trace_file(folder: Path, host: str, rows: int = ROWS_PER_FILE) -> Path:
    """A gpu-collector CSV of `rows` samples (4 GPUs, every 10 s) for `host`; its path."""
    start = datetime(2026, 10, 1, tzinfo=timezone.utc)
    rng = random.Random(host)
    lines = [HEADER]
    for i in range(rows // 4):
        at = (start + timedelta(seconds=10 * i)).isoformat().replace("+00:00", "Z")
        for gpu in range(4):
            util = rng.choice((0, 0, 3, 55, 97))
            lines.append(f"{at},{host},{gpu},GPU-{host}-{gpu},NVIDIA A100,{60 + 3 * util},,{util},1024")
    path = folder / f"{host}_2026-10.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def ingest_process(paths: list[Path], db: Path) -> subprocess.Popen:
    env = {**os.environ, "MLCOST_DB": str(db)}
    return subprocess.Popen([sys.executable, "-m", "mlcost", "ingest", "--json", *map(str, paths)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def ledger_holds(db: Path, replaced: bool = False) -> tuple[int, int]:
    """Check the ledger against the rows (with `replaced`, a later load may have taken over some
    of a load's rows); returns (loads, samples)."""
    loads = wh.query("SELECT load_id, rows_loaded FROM loads WHERE kind = 'gpu-collector'", path=db)
    for load_id, rows_loaded in loads.itertuples(index=False):
        stored = wh.query("SELECT count(*) AS n FROM gpu_samples WHERE load_id = ?", [int(load_id)], path=db)["n"][0]
        assert stored <= rows_loaded if replaced else stored == rows_loaded, \
            f"load {load_id}: {stored} rows stored, the ledger says {rows_loaded}"
    orphans = wh.query("SELECT count(*) AS n FROM gpu_samples WHERE load_id NOT IN (SELECT load_id FROM loads)",
                       path=db)["n"][0]
    assert orphans == 0, f"{orphans} samples belong to no load in the ledger"
    samples = wh.query("SELECT count(*) AS n FROM gpu_samples", path=db)["n"][0]
    return len(loads), int(samples)


def test_a_load_killed_at_any_moment_leaves_nothing_half_loaded(tmp_path):
    files = [trace_file(tmp_path, f"node-{n}") for n in range(2)]
    db = tmp_path / "crash.duckdb"
    started = time.monotonic()  # how long a whole load takes here, to spread the kills over it
    assert ingest_process(files, db).wait(timeout=600) == 0
    whole_s = time.monotonic() - started
    assert ledger_holds(db) == (2, 2 * ROWS_PER_FILE)
    rng = random.Random(13)
    for trial in range(TRIALS):
        db = tmp_path / f"crash-{trial}.duckdb"
        process = ingest_process(files, db)
        time.sleep(rng.uniform(0.0, whole_s))
        process.kill()
        process.wait(timeout=60)
        loads, samples = ledger_holds(db) if db.exists() else (0, 0)
        assert samples == loads * ROWS_PER_FILE
        assert ingest_process(files, db).wait(timeout=600) == 0  # the rest loads; nothing twice
        assert ledger_holds(db) == (2, 2 * ROWS_PER_FILE)


def test_pages_read_while_files_load_and_nothing_is_lost_or_doubled(tmp_path):
    files = [trace_file(tmp_path, f"host-{n}", rows=20_000) for n in range(4)]
    again = tmp_path / "again"  # the same samples in new files: replaced, not doubled
    again.mkdir()
    copies = [again / path.name for path in files[:2]]
    for source, copy in zip(files, copies):
        copy.write_text(source.read_text().replace("NVIDIA A100", "NVIDIA A100-SXM4"))
    db = tmp_path / "busy.duckdb"
    wh.query("SELECT 1", path=db)  # the file exists with its schema before the reader starts
    loader = ingest_process(files + copies, db)
    reads = busy = 0
    seen = []
    while loader.poll() is None:
        try:
            seen.append(int(wh.query("SELECT count(*) AS n FROM gpu_samples", path=db)["n"][0]))
            reads += 1
        except wh.WarehouseBusy:
            busy += 1
        time.sleep(0.05)
    assert loader.returncode == 0
    assert reads > 0
    assert seen == sorted(seen)  # a reader never sees rows go missing while loads commit
    assert ledger_holds(db, replaced=True) == (6, 4 * 20_000)
    names = wh.query("SELECT gpu_name, count(*) AS n FROM gpu_samples GROUP BY ALL ORDER BY gpu_name", path=db)
    assert names.to_dict("records") == [{"gpu_name": "NVIDIA A100", "n": 2 * 20_000},
                                        {"gpu_name": "NVIDIA A100-SXM4", "n": 2 * 20_000}]
