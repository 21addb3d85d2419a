"""What the GPU trace formats share: the gpu_samples table's plausible ranges, the host a file name
gives, and a file's totals.

(The collector CSV, nvidia-smi and DCGM, and the Prometheus importer's DCGM series, are Definitions
read by ingest/engine; as everywhere in ingest, a bad value rejects its line and never becomes NULL
or 0; an absent value is NULL.)
"""
from __future__ import annotations

from datetime import datetime, timezone

from ingest.engine import staging
from ingest.engine.contract import Parsed
from ingest.engine.definition import FromFileName
from ingest.engine.staging import Staged

TABLE = "gpu_samples"
# Plausible ranges; a value outside is a misread column or a broken counter, not a reading.
LIMITS: dict[str, tuple[float, float]] = {
    "gpu_index": (0, 65_535), "power_w": (0, 10_000), "energy_mj": (0, 2**63 - 1),
    "gpu_util_pct": (0, 100), "mem_used_mib": (0, 10_000_000),
}
HOST_SUFFIXES = (".gz", ".csv", ".prom", ".txt", ".log", ".metrics")
# The host a file name gives: the name up to its first `_` without the suffixes
# (`gpu-node-1_2026-08.csv.gz` -> `gpu-node-1`, the collector's own file names).
HOST_FROM_FILE_NAME = FromFileName("host", before="_", suffixes=HOST_SUFFIXES)


def file_host(source: str) -> str:
    """The host the name of file `source` gives (HOST_FROM_FILE_NAME)."""
    return HOST_FROM_FILE_NAME.of(source)


def stage_totals(con, accepted: int) -> Staged:
    """What a trace file staged in `con` adds up to: a repeated sample keeps its last line, the
    samples' intervals are computed once (temp table file_intervals, which the merge reuses) and
    give the file's energy. GPUs, samples, first and last sample (ISO, UTC), energy in kWh."""
    from ingest.derived import gpu_rollups
    from ingest.settings import config

    if not staging.count(con, TABLE):
        return Staged(accepted, {"gpus": 0, "samples": 0, "first_ts": None, "last_ts": None,
                                 "energy_kwh_total": None})
    gpu = config.load().gpu
    gpu_rollups.intervals(con, TABLE, "file_intervals", gpu)
    # a repeated sample (same host, GPU and time) is the only way to a zero gap: the intervals'
    # sort finds them (a GROUP BY of every sample cost ~0.15 s CPU a million); when there are
    # any (rare), the intervals are computed again over the samples kept
    repeated = con.execute("SELECT EXISTS (SELECT 1 FROM file_intervals WHERE next_s = 0)").fetchall()[0][0]
    staging.keep_last(con, TABLE, repeated=repeated)
    if repeated:
        gpu_rollups.intervals(con, TABLE, "file_intervals", gpu)
    gpus, first, last = gpu_rollups.spans(con, "file_intervals")  # not another scan of every sample's text
    energy = gpu_rollups.energy_kwh(con, "file_intervals")
    return Staged(accepted, {
        "gpus": gpus,
        "samples": accepted,
        "first_ts": _iso(first),
        "last_ts": _iso(last),
        "energy_kwh_total": None if energy is None else round(energy, 6),
    })


def totals(parsed: Parsed) -> dict:
    """The --json figures of a Parsed trace file (see stage_totals)."""
    con = staging.open_stage()
    try:
        staging.insert_parsed(con, parsed, "")
        return stage_totals(con, parsed.accepted).totals
    finally:
        con.close()


def _iso(instant: datetime) -> str:
    return instant.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")

