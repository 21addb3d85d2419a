"""nvidia-smi logs never fold the rows of one timestamp into one GPU (issue 21): a constant `index`
column beside a `gpu` (or uuid, minor_number, pci.bus_id) column that tells them apart reads the GPU
from that column, with a warning; when nothing tells them apart, those rows are refused, not merged.
Expected samples are read from the test's own text with csv, not by the product."""
from __future__ import annotations

import csv
from datetime import datetime, timezone
from pathlib import Path

import duckdb
import pytest

from ingest.pipeline import loader

HEADER = "timestamp, gpu, index, memory.used, utilization.gpu, power.draw"
STAMPS = ["2025/05/05 20:58:44.813+08:00", "2025/05/05 20:58:45.813+08:00", "2025/05/05 20:58:46.813+08:00"]


def _log(path: Path, header: str, ids: list[str]) -> Path:
    """A custom-header nvidia-smi log (noheader,nounits values): every GPU's row at every timestamp."""
    lines = [header] + [f"{stamp}, {gpu}, 0, {100 + i}, {10 + i}, {60 + i + n / 10}"
                        for n, stamp in enumerate(STAMPS) for i, gpu in enumerate(ids)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _expected(path: Path, gpu_of) -> list[tuple]:
    with path.open() as handle:
        rows = list(csv.reader(handle, skipinitialspace=True))[1:]
    return sorted((gpu_of(row[1]), datetime.strptime(row[0].replace("+08:00", "+0800"), "%Y/%m/%d %H:%M:%S.%f%z")
                   .astimezone(timezone.utc), float(row[5]), float(row[4])) for row in rows)


def _load(tmp_path: Path, monkeypatch, path: Path):
    monkeypatch.setenv("MLCOST_DB", str(tmp_path / "w.duckdb"))
    (summary,) = [s for _, s in loader.ingest_paths([str(path)], host="box")]
    con = duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True)
    try:
        samples = con.execute("SELECT gpu_index, sampled_at, power_w, gpu_util_pct FROM gpu_samples ORDER BY ALL").fetchall()
    finally:
        con.close()
    return summary, [(g, t.astimezone(timezone.utc), p, u) for g, t, p, u in samples]


def test_a_constant_index_beside_a_gpu_column_reads_the_gpu_from_it(tmp_path, monkeypatch):
    path = _log(tmp_path / "custom.csv", HEADER, [str(g) for g in range(8)])
    summary, samples = _load(tmp_path, monkeypatch, path)
    assert (summary.rows_loaded, summary.rows_rejected) == (24, 0)
    assert samples == _expected(path, int)  # 8 GPUs, 3 samples each: none folded
    assert summary.warnings == ["rows of one timestamp share the same GPU index; the gpu column tells them apart, "
                                "so each row's GPU is its number in that column"]


def test_a_bus_id_that_is_not_a_number_gives_gpus_in_order_of_first_appearance(tmp_path, monkeypatch):
    buses = ["00000000:3B:00.0", "00000000:1A:00.0", "00000000:5E:00.0"]
    path = _log(tmp_path / "bus.csv", HEADER.replace(" gpu,", " pci.bus_id,"), buses)
    summary, samples = _load(tmp_path, monkeypatch, path)
    assert samples == _expected(path, buses.index)
    assert "pci.bus_id column tells them apart" in summary.warnings[0]


@pytest.mark.parametrize("extra", ["", ", name"])
def test_rows_nothing_tells_apart_are_refused_not_merged(tmp_path, monkeypatch, extra):
    header = "timestamp, index, memory.used, utilization.gpu, power.draw" + extra
    lines = [header] + [f"{stamp}, 0, 100, 10, {60 + i}" + (", NVIDIA A100" if extra else "")
                        for stamp in STAMPS for i in range(2)]
    path = tmp_path / "ambiguous.csv"
    path.write_text("\n".join(lines) + "\n")
    summary, samples = _load(tmp_path, monkeypatch, path)
    assert samples == [] and (summary.rows_loaded, summary.rows_rejected) == (0, 6)
    assert {r["reason"] for r in summary.rejects} == {
        "2 rows share this timestamp and GPU index 0: which GPU each one is cannot be told "
        "(add uuid or index to --query-gpu)"}
    assert sorted(r["line"] for r in summary.rejects) == list(range(2, 8))
