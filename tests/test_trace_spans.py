"""A staged trace file's GPUs and spans, read from its intervals (gpu_rollups.spans and touched):
the file's totals (GPUs, first and last sample) and touched_gpus (each GPU's first and last sample
and the minute its rollups are rewritten from) against plain Python over the lines written, with
two hosts sharing GPU indices, a GPU whose uuid changes, a repeated sample (its last line kept)
and out-of-order lines."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from ingest.derived import derived, gpu_rollups
from ingest.engine import staging
from ingest.engine.contract import ParseContext
from ingest.formats.gpu import gpu_collector
from ingest.settings import config

HEADER = "timestamp,host,gpu_index,gpu_uuid,gpu_name,power_w,energy_mj,gpu_util_pct,mem_used_mib"
START = datetime(2026, 3, 1, 10, 0, 7, 250000, tzinfo=timezone.utc)


def _lines() -> list[tuple[datetime, str, int, str]]:
    """(time, host, gpu index, uuid) of every sample written, in the file's order."""
    rows = []
    for n in range(200):
        at = START + timedelta(seconds=10 * n)
        for host, gpus in (("node-a", 3), ("node-b", 2)):
            for gpu in range(gpus):
                uuid = f"GPU-{host}-{gpu}" + ("-new" if host == "node-a" and gpu == 1 and n >= 120 else "")
                rows.append((at, host, gpu, uuid))
    rows.append((START + timedelta(seconds=10 * 50), "node-b", 1, "GPU-node-b-1"))  # repeated: the last kept
    rows.insert(7, (START - timedelta(minutes=7, seconds=3), "node-b", 0, "GPU-node-b-0"))  # earlier, out of order
    return rows


def _write(path, rows) -> None:
    text = [HEADER] + [f"{at.isoformat().replace('+00:00', 'Z')},{host},{gpu},{uuid},L4,70.5,,40,10"
                       for at, host, gpu, uuid in rows]
    path.write_text("\n".join(text) + "\n")


@pytest.mark.parametrize("repeated", [False, True])
def test_spans_and_touched_gpus_match_the_lines(tmp_path, repeated):
    rows = _lines() if repeated else _lines()[:-1]
    path = tmp_path / "node-a_spans.csv"
    _write(path, rows)
    gpu = config.load().gpu
    con = staging.open_stage()
    try:
        staged = gpu_collector.stage(staging.Source.of(path), con, ParseContext(str(path), timezone.utc))
        gpu_rollups.touched(con, gpu)
        touched = con.execute("SELECT host, gpu_index, since, first_at, last_at FROM touched_gpus "
                              "ORDER BY host, gpu_index").fetchall()
    finally:
        con.close()
    by_gpu: dict[tuple[str, int], list[datetime]] = {}
    for at, host, index, _ in rows:
        by_gpu.setdefault((host, index), []).append(at)
    margin = timedelta(seconds=gpu.max_gap_s + gpu.idle_min_s + 60)
    want = []
    for (host, index), times in sorted(by_gpu.items()):
        since = (min(times) - margin).replace(second=0, microsecond=0)
        want.append((host, index, since, min(times), max(times)))
    assert touched == want
    everything = [at for at, *_ in rows]
    assert staged.totals["gpus"] == len(by_gpu) == 5
    assert staged.totals["first_ts"] == min(everything).isoformat().replace("+00:00", "Z")
    assert staged.totals["last_ts"] == max(everything).isoformat().replace("+00:00", "Z")
    assert staged.totals["samples"] == len(rows)


def test_touched_computes_the_intervals_when_absent(tmp_path):
    """Samples staged without a file's totals (the Prometheus importer, an old-style parser):
    touched works out the intervals the merge reads next."""
    rows = _lines()[:-1]
    path = tmp_path / "node-a_x.csv"
    _write(path, rows)
    gpu = config.load().gpu
    con = staging.open_stage()
    try:
        gpu_collector.stage(staging.Source.of(path), con, ParseContext(str(path), timezone.utc))
        gpu_rollups.drop_intervals(con, "file_intervals")
        gpu_rollups.touched(con, gpu)
        assert derived.has_temp(con, "file_intervals")
        first = con.execute("SELECT min(first_at), max(last_at), count(*) FROM touched_gpus").fetchall()[0]
    finally:
        con.close()
    times = [at for at, *_ in rows]
    assert first == (min(times), max(times), 5)

