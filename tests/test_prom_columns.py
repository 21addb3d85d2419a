"""The Prometheus importer's DCGM series read by the DCGM definition as columns (ingest/engine/prom_columns),
checked against a model in plain Python over generated series, broken ones included: what each point
and sample must become is worked out here from the rules as documented (dcgm.py, prom_records.py), not
by the code under test. No server needed (tests/test_import_prometheus.py runs a real Prometheus)."""
from __future__ import annotations

import math
import random
from datetime import datetime, timezone

import pytest

from ingest.importers import prometheus

T0 = 1_764_000_000
STEP_S = 15
P, E, U, M = ("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_GPU_UTIL",
              "DCGM_FI_DEV_FB_USED")
COLUMN = {P: "power_w", E: "energy_mj", U: "gpu_util_pct", M: "mem_used_mib"}
LIMITS = {"gpu_index": (0, 65_535), "power_w": (0, 10_000), "energy_mj": (0, 2**63 - 1),
          "gpu_util_pct": (0, 100), "mem_used_mib": (0, 10_000_000)}  # traces.LIMITS, in the Within order
LABELS = {"UUID": "gpu_uuid", "modelName": "gpu_name", "pod": "pod", "namespace": "namespace"}
BROKEN = ("gpu label", "not finite", "not whole", "out of range", "repeated", "no host", "blank edges", "instance host")
COLS = ("host", "gpu_index", "sampled_at", "gpu_uuid", "gpu_name", "power_w", "energy_mj", "gpu_util_pct",
        "mem_used_mib", "pod", "namespace", "source_kind", "source_line")


def fleet(seed: int, hosts: int = 2, gpus: int = 3, steps: int = 12, broken: tuple[str, ...] = ()) -> list[dict]:
    """Series as a Prometheus server answers query_range for dcgm-exporter's metrics: hosts x gpus x 4,
    `steps` points each ([t, "value"]), with the kinds of breakage named in `broken` mixed in."""
    rng = random.Random(seed)
    out = []
    for h in range(hosts):
        for g in range(gpus):
            labels = {"gpu": str(g), "UUID": f"GPU-{h}-{g}", "modelName": "NVIDIA L4", "Hostname": f"node-{h}",
                      "instance": f"10.0.0.{h}:9400", "job": "dcgm"}
            if g == 0:
                labels |= {"pod": f"trainer-{h}", "namespace": "ml"}
            if "blank edges" in broken and g == 1:
                labels |= {"UUID": f" GPU-{h}-{g}\t", "modelName": "  NVIDIA L4"}
            if "instance host" in broken and g == 2:
                labels["Hostname"] = ""
            energy = rng.randrange(10**9)
            for name in (P, E, U, M):
                texts = []
                for _ in range(steps):
                    energy += rng.randrange(10**6)
                    texts.append({P: repr(round(rng.uniform(60, 400), 3)), E: str(energy),
                                  U: str(rng.randrange(101)), M: repr(float(rng.randrange(20_000)))}[name])
                out.append({"metric": {"__name__": name, **labels},
                            "values": [[T0 + STEP_S * i, text] for i, text in enumerate(texts)]})
    for kind in broken:
        target = rng.choice([s for s in out if s["metric"].get("Hostname") == "node-0" and s["metric"]["gpu"] == "0"])
        values = target["values"]
        if kind == "gpu label":
            for gpu in ("x", "", None):
                labels = {"__name__": rng.choice((P, U)), "Hostname": "node-9", "instance": "10.0.0.9:9400"}
                if gpu is not None:
                    labels["gpu"] = gpu
                out.append({"metric": labels, "values": [[T0 + STEP_S * i, "5"] for i in range(3)]})
        elif kind == "not finite":
            for text in ("NaN", "+Inf", "-Inf"):
                series = rng.choice([s for s in out if s["metric"]["__name__"] != E and "gpu" in s["metric"]
                                     and s["metric"]["gpu"].isdigit()])
                series["values"][rng.randrange(len(series["values"]))][1] = text
        elif kind == "not whole":
            series = rng.choice([s for s in out if s["metric"]["__name__"] == E])
            series["values"][1][1] = "1000.5"
            series["values"][2][1] = "NaN"
        elif kind == "out of range":
            by_name = {s["metric"]["__name__"]: s for s in out if s["metric"].get("Hostname") == "node-1"
                       and s["metric"]["gpu"] == "1"}
            by_name[P]["values"][0][1] = "20000"
            by_name[U]["values"][1][1] = "101"
            by_name[M]["values"][2][1] = "-5"
            by_name[P]["values"][3][1] = "-0.5"
            out.append({"metric": {"__name__": P, "gpu": "70000", "Hostname": "node-1"}, "values": [[T0, "1"]]})
        elif kind == "repeated":  # another job's series of the same GPU and metric, other values
            again = {"metric": {**target["metric"], "job": "other"},
                     "values": [[t, str(float(v) + 1) if v.isdigit() else v] for t, v in values[: len(values) // 2]]}
            out.append(again)
        elif kind == "no host":
            out.append({"metric": {"__name__": U, "gpu": "3"}, "values": [[T0, "7"], [T0 + STEP_S, "NaN"]]})
    return out


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat()


def expected(series: list[dict]) -> tuple[list[tuple], list[tuple[int, str]]]:
    """(samples, rejects as (line, reason)) by the rules, in plain Python: the points numbered in the
    order of the series sorted by their labels; a point refused by the first rule it fails (its gpu
    label, its value, its host); one sample per host, GPU and time from the points left, a metric
    given again refused with the importer's reason; a sample outside the bounds refused at its first line."""
    rejects, kept = [], []
    line = 0
    for one in sorted(series, key=lambda s: sorted(s["metric"].items())):
        labels, name = one["metric"], one["metric"]["__name__"]
        for t, text in one["values"]:
            line += 1
            gpu = (labels.get("gpu") or "").strip()
            host = (labels.get("Hostname") or "").strip() or (labels.get("instance") or "").rsplit(":", 1)[0].strip()
            value = float(text)
            if not gpu:
                rejects.append((line, "no gpu label"))
            elif not gpu.lstrip("-").isdigit():
                rejects.append((line, f"gpu must be a number, got {labels['gpu']!r}"))
            elif not math.isfinite(value):
                rejects.append((line, f"{name} must be a finite number, got {value!r}"))
            elif name == E and value != int(value):
                rejects.append((line, f"{name} must be a whole number, got {value!r}"))
            elif not host:
                rejects.append((line, "no Hostname or instance label"))
            else:
                texts = {column: (labels.get(label) or "").strip() or None for label, column in LABELS.items()}
                kept.append((line, (host, int(gpu), t), name, int(value) if name == E else value, texts))
    samples: dict[tuple, dict] = {}
    for line, key, name, value, texts in kept:
        sample = samples.setdefault(key, {"source_line": line, "metrics": {}, **dict.fromkeys(LABELS.values())})
        if name in sample["metrics"]:
            rejects.append((line, f"a second {name} for GPU {key[1]} of {key[0]} at {iso(key[2])}: "
                                  "another series of the same GPU"))
            continue
        sample["metrics"][name] = value
        for column, text in texts.items():
            sample[column] = sample[column] if sample[column] is not None else text
    rows = []
    for (host, gpu, t), sample in samples.items():
        found = {"gpu_index": gpu, **{COLUMN[name]: value for name, value in sample["metrics"].items()}}
        outside = [(column, found[column]) for column in LIMITS if found.get(column) is not None
                   and not LIMITS[column][0] <= found[column] <= LIMITS[column][1]]
        if outside:
            column, value = outside[0]
            low, high = LIMITS[column]
            rejects.append((sample["source_line"], f"{column} {value!r} is outside {low:g} to {high:g}"))
            continue
        rows.append((host, gpu, datetime.fromtimestamp(t, timezone.utc), sample["gpu_uuid"], sample["gpu_name"],
                     found.get("power_w"), found.get("energy_mj"), found.get("gpu_util_pct"), found.get("mem_used_mib"),
                     sample["pod"], sample["namespace"], "prometheus", sample["source_line"]))
    return sorted(rows), sorted(rejects)


def rows(parsed) -> list[tuple]:
    table = parsed.tables.get("gpu_samples")
    return [] if table is None else sorted(tuple(r[c] for c in COLS) for r in table.select(list(COLS)).to_pylist())


@pytest.mark.parametrize("broken", [(), *((kind,) for kind in BROKEN), BROKEN])
def test_gpu_samples_are_the_rules_applied_to_the_generated_series(broken):
    series = fleet(7, broken=broken)
    want_rows, want_rejects = expected(series)
    parsed = prometheus.gpu_samples(series)
    assert rows(parsed) == want_rows
    assert [(r.line, r.reason) for r in parsed.rejects] == want_rejects
    assert parsed.accepted == len(want_rows) and not parsed.warnings
    if set(broken) - {"blank edges", "instance host"}:
        assert want_rejects  # each kind of breakage refuses something
    if "blank edges" in broken:  # labels are read stripped
        assert {r[3] for r in want_rows} >= {"GPU-0-1", "GPU-1-1"}
    if "instance host" in broken:  # a blank Hostname: the instance's host
        assert {r[0] for r in want_rows} >= {"10.0.0.0", "10.0.0.1"}


def test_a_refused_point_shows_the_sample_line_it_stands_for():
    series = [{"metric": {"__name__": P, "gpu": "x", "Hostname": "h", "UUID": 'a"b\\c'}, "values": [[T0, "NaN"]]},
              {"metric": {"__name__": P, "gpu": "1", "Hostname": "h"}, "values": [[T0 + 0.5, "20000"]]}]
    parsed = prometheus.gpu_samples(series)
    assert [(r.line, r.reason, r.raw) for r in parsed.rejects] == [  # the series sorted by labels: UUID < __name__
        (1, "gpu must be a number, got 'x'", f'{P}{{Hostname="h",UUID="a\\"b\\\\c",gpu="x"}} NaN {T0}000'),
        (2, "power_w 20000.0 is outside 0 to 10000", f'{P}{{Hostname="h",gpu="1"}} 20000 {T0}500')]


def test_series_without_points_or_of_no_gpu_make_nothing():
    assert rows(prometheus.gpu_samples([])) == [] and prometheus.gpu_samples([]).rejects == []
    parsed = prometheus.gpu_samples([{"metric": {"__name__": P, "gpu": "0", "Hostname": "h"}, "values": []}])
    assert rows(parsed) == [] and parsed.rejects == [] and parsed.accepted == 0
