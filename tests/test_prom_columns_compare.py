"""TEMPORARY (deleted with the old pivot): the importer's old gpu_samples pivot (_gpu_samples_old) against
the new one (the DCGM definition read as columns by ingest/engine/prom_columns + prom_records), over the
series the real Prometheus of tests/test_import_prometheus.py answers and generated series with each kind
of breakage. Equal samples, rejects and counts where the behaviour is kept; each difference stated."""
from __future__ import annotations

import math

import pytest

from ingest.importers import prometheus as p
from tests.test_import_prometheus import STEP_S, grid, prom  # noqa: F401 (prom: the fixture)
from tests.test_prom_columns import BROKEN, COLS, E, fleet

KEY = slice(0, 3)


def rows(parsed) -> dict[tuple, tuple]:
    table = parsed.tables.get("gpu_samples")
    found = [] if table is None else [tuple(r[c] for c in COLS) for r in table.select(list(COLS)).to_pylist()]
    return {row[KEY]: row for row in found}


def rejects(parsed) -> list[tuple[int, str]]:
    return [(r.line, r.reason) for r in parsed.rejects]


def numbered(series: list[dict]) -> list[tuple[int, dict, float, str]]:
    """(line, labels, time, value text) of every point, numbered as both pivots number them."""
    out, line = [], 0
    for one in sorted(series, key=lambda s: sorted(s["metric"].items())):
        for t, text in one["values"]:
            line += 1
            out.append((line, one["metric"], t, text))
    return out


@pytest.mark.parametrize("broken", [(), *((kind,) for kind in BROKEN), BROKEN])
def test_old_and_new_pivot_agree_but_where_stated(broken):
    series = fleet(11, broken=broken)
    old, new = p._gpu_samples_old(series), p.gpu_samples(series)
    old_rows, new_rows = rows(old), rows(new)
    assert old.accepted == len(old_rows) and new.accepted == len(new_rows)
    assert old.warnings == new.warnings == []
    points = numbered(series)
    if set(broken) <= {"out of range", "instance host"}:  # kept: the same samples, rejects (line, reason), counts
        assert new_rows == old_rows and rejects(new) == rejects(old)
        if broken:
            assert rejects(new) or "out of range" not in broken
        return
    if broken == ("gpu label",):
        # one reject per point, with the definition's reason, where the old pivot gave one per series
        bad = [(line, labels) for line, labels, _, _ in points if not (labels.get("gpu") or "").isdigit()]
        assert new_rows == old_rows
        assert rejects(new) == [(line, "no gpu label" if not labels.get("gpu") else
                                 f"gpu must be a number, got {labels['gpu']!r}") for line, labels in bad]
        firsts = sorted({min(line for line, same in bad if same is labels): labels for _, labels in bad}.items())
        assert rejects(old) == [(line, f"{labels['__name__']} has no gpu index label (3 values)")
                                for line, labels in firsts]
    elif broken in (("not finite",), ("not whole",)):
        # a value that is not a finite (whole, for energy) number refuses its point with the Field's
        # reason and the sample keeps its other metrics; the old pivot refused the whole sample
        bad = [(line, labels, t, text) for line, labels, t, text in points
               if not math.isfinite(float(text)) or (labels["__name__"] == E and float(text) != int(float(text)))]
        assert bad
        column = {"DCGM_FI_DEV_POWER_USAGE": 5, E: 6, "DCGM_FI_DEV_GPU_UTIL": 7, "DCGM_FI_DEV_FB_USED": 8}
        lost = {(labels["Hostname"], int(labels["gpu"]), t) for _, labels, t, _ in bad}
        assert {k: r for k, r in new_rows.items() if k[0:2] + (r[2].timestamp(),) not in lost} == old_rows
        for _, labels, t, _ in bad:
            row = next(r for k, r in new_rows.items() if k[0:2] == (labels["Hostname"], int(labels["gpu"]))
                       and k[2].timestamp() == t)
            assert row[column[labels["__name__"]]] is None
        new_reasons = [(line, f"{labels['__name__']} must be a " +
                        ("finite" if not math.isfinite(float(text)) else "whole") + f" number, got {float(text)!r}")
                       for line, labels, _, text in bad]
        assert rejects(new) == new_reasons
        assert len(rejects(old)) == len(lost)
        for _, reason in rejects(old):
            assert reason.startswith("energy counter ") or " is outside " in reason
    elif broken == ("repeated",):
        # a second series of one GPU and metric (another job): the first series' value kept and the
        # other's points refused; the old pivot kept the larger value silently
        other = [(line, labels, t) for line, labels, t, _ in points if labels.get("job") == "other"]
        name = other[0][1]["__name__"]
        assert rejects(old) == []
        assert rejects(new) == [(line, f"a second {name} for GPU {labels['gpu']} of {labels['Hostname']} at "
                                       f"{_iso(t)}: another series of the same GPU") for line, labels, t in other]
        assert new_rows.keys() == old_rows.keys()
        index = {"DCGM_FI_DEV_POWER_USAGE": 5, E: 6, "DCGM_FI_DEV_GPU_UTIL": 7, "DCGM_FI_DEV_FB_USED": 8}[name]
        first = {t: text for line, labels, t, text in points if labels.get("job") == "dcgm"
                 and labels["__name__"] == name and labels["gpu"] == other[0][1]["gpu"]
                 and labels["Hostname"] == other[0][1]["Hostname"]}
        seconds = {t for _, _, t in other}
        for key, row in new_rows.items():
            if key[2].timestamp() in seconds and key[0:2] == (other[0][1]["Hostname"], int(other[0][1]["gpu"])):
                assert row[index] == (int if name == E else float)(first[key[2].timestamp()])
                assert old_rows[key][index] >= row[index]
            else:
                assert row == old_rows[key]
    elif broken == ("no host",):
        # each point refused (its value's reason first, else "no Hostname or instance label"); the old
        # pivot refused the sample ("host is missing", or a value's range first)
        assert new_rows == old_rows
        assert rejects(new)[-2:] == [(rejects(new)[-2][0], "no Hostname or instance label"),
                                     (rejects(new)[-1][0], "DCGM_FI_DEV_GPU_UTIL must be a finite number, got nan")]
        assert rejects(old)[-2:] == [(rejects(new)[-2][0], "host is missing"),
                                     (rejects(new)[-1][0], "gpu_util_pct nan is outside 0 to 100")]
    elif broken == ("blank edges",):
        # label values are read stripped (a TEXT Field); the old pivot kept them as given
        stripped = {k: r[:3] + (r[3].strip(), r[4].strip()) + r[5:] for k, r in old_rows.items()}
        assert new_rows == stripped and new_rows != old_rows
        assert rejects(new) == rejects(old) == []
    else:  # every kind at once: they differ as above (the model test checks the new); the new keeps
        assert old_rows.keys() < new_rows.keys()  # every sample the old kept, and those of a bad point
        assert len(rejects(new)) > len(rejects(old))


def _iso(t: float) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(t, timezone.utc).isoformat()


def test_old_and_new_pivot_agree_on_the_tests_prometheus(prom):
    url, log = prom
    times = grid(log)
    series = p.Client(url).query_range(p.DCGM_QUERY, times[0] / 1000, times[-1] / 1000, STEP_S)
    assert sum(len(one["values"]) for one in series) == 2 * 3 * len(times)
    old, new = p._gpu_samples_old(series), p.gpu_samples(series)
    assert rows(old) == rows(new) and len(rows(new)) == 2 * len(times) == new.accepted == old.accepted
    assert rejects(old) == rejects(new) == []
    assert [r.raw for r in old.rejects] == [r.raw for r in new.rejects] == []
