"""Stage a GPU trace file as a load does, noting which lines the engine's line reader read.

The format tests (test_gpu_collector, test_nvidia_smi_definition, test_dcgm_definition) check each
line's path with it: `spied` is the module whose `read_lines` the SQL pass hands its leftover lines
to (ingest.engine.reader for CSV definitions, ingest.engine.prom_text for Prometheus text).
"""
from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from ingest.engine import staging
from ingest.engine.contract import ParseContext


def stage_spied(fmt: ModuleType, spied: ModuleType, columns: str, path: Path,
                ctx: ParseContext) -> tuple[dict, list, list[int], object]:
    """Stage `path` with `fmt.stage`: its gpu_samples rows ({source_line: (columns...)}), its rejects
    ([(line, reason)] by line), the line numbers the reader read (in the order read), and the Staged."""
    by_reader: list[int] = []
    read_lines = spied.read_lines

    def spy(definition, lines, *args):
        lines = list(lines)
        by_reader.extend(number for number, _ in lines)
        return read_lines(definition, lines, *args)

    con = staging.open_stage()
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(spied, "read_lines", spy)
            staged = fmt.stage(staging.Source.of(path, str(path)), con, ctx)
        rows = {r[-1]: r[:-1] for r in con.execute(f"SELECT {columns}, source_line FROM gpu_samples").fetchall()}
        rejects = con.execute("SELECT line, reason FROM rejects ORDER BY line").fetchall()
    finally:
        con.close()
    return rows, rejects, by_reader, staged
