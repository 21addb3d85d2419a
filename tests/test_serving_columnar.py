"""Serving windows staged in SQL (ingest/serving_columnar.py) equal windows read line by line
(serving.parse): the same rows, costs from the catalog to the last of 12 decimals, rejects
(line, reason, raw text) and accepted count, on a file of every kind of record and on a seeded
random file whose fields vary over good, odd and bad values."""
from __future__ import annotations

import json
import logging
import random
from datetime import timezone
from pathlib import Path

from ingest import serving, serving_columnar, staging
from ingest.contract import ParseContext

UTC = timezone.utc
BASE = {"window_start": "2026-10-01T00:00:00Z", "window_end": "2026-10-01T00:08:00Z", "service": "svc-00",
        "model_version": "v1", "host": "serve-00-0", "requests_total": 459, "requests_success": 454}


def staged(con) -> dict[str, list[tuple]]:
    windows = con.execute("SELECT * EXCLUDE (load_id) FROM serving_windows ORDER BY window_key").fetchall()
    rejects = con.execute("SELECT path, line, reason, raw FROM rejects ORDER BY line, reason").fetchall()
    return {"serving_windows": windows, "rejects": rejects}


def assert_same(path: Path) -> dict:
    ctx = ParseContext(str(path), UTC)
    old = staging.open_stage()
    parsed = serving.parse(staging.lines(staging.Source.of(path)), ctx)
    staging.insert_parsed(old, parsed, str(path))
    new = staging.open_stage()
    result = serving_columnar.stage(staging.Source.of(path), new, ctx)
    staging.keep_last(new, "serving_windows")
    try:
        before, after = staged(old), staged(new)
        for table in before:
            assert after[table] == before[table], table
        assert result.accepted == parsed.accepted
        assert result.totals == serving.totals(parsed)
        return after
    finally:
        old.close()
        new.close()


def write(path: Path, records: list) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n", encoding="utf-8")
    return path


EVERY_KIND = [
    {**BASE, "cost_usd": 0.756267, "energy_kwh": 0.097375},
    {**BASE, "host": "h1", "instance_type": "g5.12xlarge", "replicas": 1},                       # catalog: instance
    {**BASE, "host": "h2", "instance_type": "G5.12XLARGE", "replicas": 3, "window_end": None, "window_seconds": 300.5},
    {**BASE, "host": "h3", "gpu_type": "NVIDIA A10G", "gpu_count": 4},                           # catalog: GPUs
    {**BASE, "host": "h4", "gpu_type": "L4", "gpu_uuids": ["GPU-a", "GPU-b"]},                   # GPUs from the uuids
    {**BASE, "host": "h5", "gpu_type": "A100", "gpu_count": 0},                                  # zero GPUs: cost 0
    {**BASE, "host": "h6", "instance_type": "unknown-type", "replicas": 2},                      # no price: no cost
    {**BASE, "host": "h7", "instance_type": "g4dn.xlarge", "replicas": 7, "window_end": "2026-10-01T00:00:01.333333Z"},
    {**BASE, "host": "h8", "instance_type": "p5.48xlarge", "replicas": 1000,
     "window_end": None, "window_seconds": 0.1234567},
    {**BASE, "host": "h9", "cost_usd": "1.5"},                                                   # cost as text
    {**BASE, "host": "h10", "cost_usd": -1},
    {**BASE, "host": "h11", "requests_success": 500},
    {**BASE, "host": "h12", "window_end": "2026-10-01T00:00:00Z", "cost_usd": 1},
    {**BASE, "host": "h13", "instance_type": "g5.12xlarge", "replicas": 10**9},                # past 10^15 USD
    {**BASE, "host": "h14", "avg_gpu_util": 101, "cost_usd": 1},
    '{"service": "broken", ',
    "",
    '["not", "an", "object"]',
    {**BASE, "cost_usd": 0.5, "energy_kwh": 0.01},                                               # BASE again: wins
]


def test_every_kind_of_window_stages_the_same(tmp_path):
    after = assert_same(write(tmp_path / "serving.jsonl", EVERY_KIND))
    sources = {row[16] for row in after["serving_windows"]}  # cost_source
    assert {"given", "derived", None} <= sources
    assert len(after["rejects"]) >= 6


GOOD = {
    "instance_type": ["g5.12xlarge", "g4dn.xlarge", "G5.2XLARGE", "nowhere"],
    "gpu_type": ["NVIDIA A10G", "L4", "H100", "made-up"],
    "replicas": [1, 2, 16],
    "gpu_count": [0, 1, 8],
    "window_s": [60, 300.5, 0.001, 86400.123456],
    "cost_usd": [0.1, 12, 0.000001],
    "energy_kwh": [0.5, 0],
}
ODD = {
    "replicas": [-1, 1.0, "2", 2**40],
    "gpu_count": [-2, 2.5],
    "window_s": [0, -5, "60", 1e12],
    "cost_usd": [-1, "x", 1e20, 0.1234567],
    "energy_kwh": [-1, "0.5"],
    "instance_type": [" g5.12xlarge", 5],
}


def random_window(rng: random.Random, n: int) -> dict:
    day_hour = f"2026-10-{1 + n % 28:02d}T{n % 24:02d}"
    record = {**BASE, "host": f"h{n % 1500}", "window_start": f"{day_hour}:00:00Z", "window_end": f"{day_hour}:08:00Z"}
    if rng.random() < 0.6:
        del record["window_end"]
        record["window_seconds"] = rng.choice(GOOD["window_s"])
    for name, choices in GOOD.items():
        if name != "window_s" and rng.random() < 0.5:
            record[name] = rng.choice(choices)
    if rng.random() < 0.1:
        name = rng.choice(list(ODD))
        record["window_seconds" if name == "window_s" else name] = rng.choice(ODD[name])
        record.pop("window_end", None) if name == "window_s" else None
    return record


def test_random_windows_stage_the_same(tmp_path, caplog):
    rng = random.Random(42)
    path = write(tmp_path / "random.jsonl", [random_window(rng, n) for n in range(3000)])
    with caplog.at_level(logging.DEBUG, logger="ingest.serving_columnar"):
        after = assert_same(path)
    assert len(after["serving_windows"]) > 1000 and len(after["rejects"]) > 50
    read_in_python = sum(int(r.getMessage().split(": ")[1].split()[0]) for r in caplog.records)
    assert read_in_python < 450  # the odd tenth (and the catalog's few inexact cases), not the file
