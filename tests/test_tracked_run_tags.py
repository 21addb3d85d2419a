"""The tags a tracker's run is read by, spelled as teams log them."""
from __future__ import annotations

import pytest

from ingest.importers import tracked_runs
from ingest.settings import config


@pytest.mark.parametrize("tag", ["gpu_indices", "CUDA_VISIBLE_DEVICES", "cuda_visible_devices"])
def test_the_runs_gpus_come_from_cuda_visible_devices_as_the_environment_spells_it(tag):
    """README: `gpu_indices` (or `CUDA_VISIBLE_DEVICES`) with `host` join a run to its GPU traces."""
    run = tracked_runs.TrackedRun("r1", "lora", "exp", "FINISHED", 1_000, 61_000,
                                  tags={tag: "0,1", "host": "gpu-node-1"})
    record, _ = tracked_runs.to_record(run, config.Prices())
    assert (record["host"], record["gpu_indices"]) == ("gpu-node-1", "0,1")
