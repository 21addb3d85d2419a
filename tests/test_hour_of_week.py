"""The hour-of-day x weekday view (issue 22; seed 000: "times of day when utilization is low but
capacity is high"): GPU utilization and capacity, serving requests and cost per 1k requests, per
weekday and hour in UTC and in America/New_York across the change to summer time on Sunday
2026-03-08 (02:00 EST -> 03:00 EDT). Every expected cell is worked out here from the rows this
test writes, with Python's zoneinfo, minute by minute: not with the product's SQL."""
from __future__ import annotations

import csv
import json
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from ingest.pipeline import loader
from ingest.settings import config
from metrics import hour_of_week, queries
from metrics.filters import Filters

UTC = timezone.utc
NEW_YORK = "America/New_York"
FIRST = datetime(2026, 3, 6, tzinfo=UTC)  # a Friday
LAST = datetime(2026, 3, 10, tzinfo=UTC)  # Tuesday 00:00 UTC, exclusive
GPU1_FROM, GPU1_TO = datetime(2026, 3, 7, 12, tzinfo=UTC), datetime(2026, 3, 8, 20, tzinfo=UTC)


def util_of(at: datetime, gpu: int) -> int:
    """The utilization (%) a GPU reports all through the UTC hour of `at`: uneven across hours,
    at or under 5 % (idle) in some whole hours."""
    return min((at.hour * 7 + at.day * 3) % 100 + 10 * gpu, 100)


def gpu_hours() -> list[tuple[datetime, int]]:
    """(UTC hour, GPU) of every hour the trace covers: GPU 0 throughout, GPU 1 for a day and a half."""
    out, at = [], FIRST
    while at < LAST:
        out.append((at, 0))
        if GPU1_FROM <= at < GPU1_TO:
            out.append((at, 1))
        at += timedelta(hours=1)
    return out


def write_trace(path) -> None:
    """`mlcost collect` CSV: a sample a minute, each GPU's utilization constant through a UTC hour."""
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["timestamp", "host", "gpu_index", "gpu_uuid", "gpu_name", "power_w", "energy_mj",
                         "gpu_util_pct", "mem_used_mib"])
        for hour, gpu in gpu_hours():
            for minute in range(60):
                at = hour + timedelta(minutes=minute)
                writer.writerow([at.isoformat().replace("+00:00", "Z"), "node-a", gpu, f"GPU-a-{gpu}",
                                 "NVIDIA A100-SXM4-80GB", "120", "", util_of(hour, gpu), "100"])


WINDOWS = [  # start (UTC), minutes, service, version, requests, successful, cost USD (None: no cost)
    ("2026-03-08T05:20:00", 180, "chat", "v1", 1800, 1700, "9.00"),    # across the change to summer time
    ("2026-03-06T10:30:00", 60, "chat", "v1", 600, 600, "3.00"),       # half in 10:00, half in 11:00
    ("2026-03-06T10:00:00", 5, "search", "v2", 500, 480, "0.25"),
    ("2026-03-07T23:45:00", 30, "search", "v2", 900, 890, "1.20"),     # across UTC midnight (Sat -> Sun)
    ("2026-03-09T14:00:00", 60, "search", "v2", 1200, 1150, "2.40"),
    ("2026-03-09T14:00:00", 60, "vision", "v3", 300, 300, None),        # no cost: out of cost per 1k
    ("2026-03-08T06:07:00", 13, "vision", "v3", 130, 129, "0.13"),      # Sunday 01:07 EST
    ("2026-03-08T07:07:00", 13, "vision", "v3", 130, 128, "0.13"),      # Sunday 03:07 EDT, an hour later in UTC
]


def write_windows(path) -> None:
    lines = []
    for start, minutes, service, version, total, success, cost in WINDOWS:
        begin = datetime.fromisoformat(start).replace(tzinfo=UTC)
        record = {"window_start": start + "Z", "window_end": (begin + timedelta(minutes=minutes)).isoformat()
                  .replace("+00:00", "Z"), "service": service, "model_version": version,
                  "requests_total": total, "requests_success": success}
        if cost is not None:
            record["cost_usd"] = float(cost)
        lines.append(json.dumps(record))
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture
def hours_warehouse(warehouse, tmp_path):
    write_trace(tmp_path / "node-a.csv")
    write_windows(tmp_path / "serving.jsonl")
    summaries = [s for _, s in loader.ingest_paths([str(tmp_path / "node-a.csv"), str(tmp_path / "serving.jsonl")])]
    assert all(s.ok for s in summaries), [s.to_json() for s in summaries]
    return warehouse


def cell(at: datetime, zone: str) -> tuple[int, int]:
    local = at.astimezone(ZoneInfo(zone))
    return local.isoweekday(), local.hour


def span_hours(first: datetime, last_end: datetime, zone: str) -> dict[tuple[int, int], float]:
    """Hours of [first quarter hour, last quarter hour with data] per cell, walked minute by minute."""
    start = datetime.fromtimestamp(first.timestamp() // 900 * 900, UTC)
    end = datetime.fromtimestamp(-(-last_end.timestamp() // 900) * 900, UTC)
    out: dict[tuple[int, int], float] = defaultdict(float)
    at = start
    while at < end:
        out[cell(at, zone)] += 1 / 60
        at += timedelta(minutes=1)
    return out


def by_cell(frame) -> dict[tuple[int, int], dict]:
    return {(int(r["weekday"]), int(r["hour"])): r for r in frame.to_dict("records")}


@pytest.mark.parametrize("zone", ["UTC", NEW_YORK])
def test_gpu_cells_match_the_trace_worked_out_hour_by_hour(hours_warehouse, zone):
    util, observed, idle = defaultdict(list), defaultdict(float), defaultdict(float)
    for hour, gpu in gpu_hours():
        key = cell(hour, zone)
        util[key].append(util_of(hour, gpu))
        observed[key] += 1
        idle[key] += 1 if util_of(hour, gpu) <= 5 else 0  # whole idle hours: longer than idle_min_s (5 min)
    span = span_hours(FIRST, LAST, zone)
    cells = by_cell(queries.gpu_hour_of_week(Filters(), zone))
    assert set(cells) == set(span) and len(cells) <= 7 * 24
    for key, row in cells.items():
        assert row["span_h"] == pytest.approx(span[key]), key
        assert row["observed_gpu_h"] == pytest.approx(observed[key]), key
        assert row["gpus_present"] == pytest.approx(observed[key] / span[key]), key
        assert row["util_pct"] == pytest.approx(sum(util[key]) / len(util[key])), key
        assert row["idle_gpu_h"] == pytest.approx(idle[key]), key


def test_new_york_cells_follow_the_summer_time_change(hours_warehouse):
    cells = by_cell(queries.gpu_hour_of_week(Filters(), NEW_YORK))
    sunday = 7
    assert (sunday, 2) not in cells  # 02:00-03:00 did not exist on 2026-03-08 in New York
    # 06:00 UTC is 01:00 EST, 07:00 UTC is 03:00 EDT: a fixed UTC-5 would put it at 02:00
    assert cells[(sunday, 1)]["util_pct"] == pytest.approx(
        (util_of(datetime(2026, 3, 8, 6, tzinfo=UTC), 0) + util_of(datetime(2026, 3, 8, 6, tzinfo=UTC), 1)) / 2)
    assert cells[(sunday, 3)]["util_pct"] == pytest.approx(
        (util_of(datetime(2026, 3, 8, 7, tzinfo=UTC), 0) + util_of(datetime(2026, 3, 8, 7, tzinfo=UTC), 1)) / 2)
    # Friday 2026-03-06 00:00 UTC is Thursday 19:00 EST
    assert (4, 19) in cells and (4, 18) not in cells


def expected_serving(zone: str) -> dict[tuple[int, int], dict[str, float]]:
    """Each window cut minute by minute (all start and end on whole minutes), each minute's share
    of requests and cost going to the cell of that minute on `zone`'s clock."""
    out: dict[tuple[int, int], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for start, minutes, _, _, total, success, cost in WINDOWS:
        begin = datetime.fromisoformat(start).replace(tzinfo=UTC)
        for minute in range(minutes):
            sums = out[cell(begin + timedelta(minutes=minute), zone)]
            sums["requests_total"] += total / minutes
            sums["requests_success"] += success / minutes
            if cost is not None:
                sums["cost_usd"] += float(cost) / minutes
                sums["success_priced"] += success / minutes
                sums["requests_priced"] += total / minutes
    return out


@pytest.mark.parametrize("zone", ["UTC", NEW_YORK])
def test_serving_cells_split_windows_across_hours_in_proportion(hours_warehouse, zone):
    expected = expected_serving(zone)
    starts = [datetime.fromisoformat(w[0]).replace(tzinfo=UTC) for w in WINDOWS]
    ends = [s + timedelta(minutes=w[1]) for s, w in zip(starts, WINDOWS)]
    span = span_hours(min(starts), max(ends), zone)
    cells = by_cell(queries.serving_hour_of_week(Filters(), zone))
    assert set(cells) == set(span)
    for key, row in cells.items():
        sums = expected.get(key, {})
        assert row["span_h"] == pytest.approx(span[key]), key
        assert row["requests_total"] == pytest.approx(sums.get("requests_total", 0), abs=1e-6), key
        assert row["requests_per_h"] == pytest.approx(sums.get("requests_total", 0) / span[key], abs=1e-6), key
        if sums.get("success_priced"):
            assert float(row["cost_usd"]) == pytest.approx(sums["cost_usd"], abs=1e-7), key  # shares to 1e-9
            assert row["cost_per_1k_success_usd"] == pytest.approx(
                sums["cost_usd"] / sums["success_priced"] * 1000, rel=1e-7), key
            assert row["cost_per_1k_requests_usd"] == pytest.approx(
                sums["cost_usd"] / sums["requests_priced"] * 1000, rel=1e-7), key
        else:
            assert row["cost_per_1k_success_usd"] != row["cost_per_1k_success_usd"] or row[
                "cost_per_1k_success_usd"] is None, key  # NaN: no priced window there
    # the whole of every window lands somewhere, once
    assert sum(r["requests_total"] for r in cells.values()) == pytest.approx(sum(w[4] for w in WINDOWS))


def test_window_across_the_change_lands_on_new_york_clock(hours_warehouse):
    cells = by_cell(queries.serving_hour_of_week(Filters(), NEW_YORK))
    chat = 1800 / 180  # requests a minute of the 05:20-08:20 UTC window; the vision windows add theirs
    assert cells[(7, 0)]["requests_total"] == pytest.approx(40 * chat)          # 00:20-01:00 EST
    assert cells[(7, 1)]["requests_total"] == pytest.approx(60 * chat + 130)    # 01:00-02:00 EST
    assert (7, 2) not in cells
    assert cells[(7, 3)]["requests_total"] == pytest.approx(60 * chat + 130)    # 03:00-04:00 EDT
    assert cells[(7, 4)]["requests_total"] == pytest.approx(20 * chat)          # 04:00-04:20 EDT


def test_low_use_high_capacity_names_the_hours_by_hand(hours_warehouse):
    zone, low_pct = "UTC", 30.0
    cells = queries.gpu_hour_of_week(Filters(), zone)
    mean_gpus = cells["observed_gpu_h"].sum() / cells["span_h"].sum()
    expected = sorted((int(r.weekday), int(r.hour)) for r in cells.itertuples()
                      if r.util_pct < low_pct and r.gpus_present >= mean_gpus - 1e-9)
    found = hour_of_week.low_use_high_capacity(cells, low_pct)
    assert sorted(zip(found["weekday"].astype(int), found["hour"].astype(int))) == expected and expected
    sentence = hour_of_week.low_use_sentence(cells, low_pct, zone)
    for weekday, first, last in hour_of_week.hour_ranges(found):
        assert f"{hour_of_week.WEEKDAYS[weekday - 1]}" in sentence and f"{first:02d}:00–{last + 1:02d}:00" in sentence


def test_time_zone_setting_is_checked(tmp_path):
    settings = tmp_path / "mlcost.toml"
    assert config.check_text('[dashboard]\ntime_zone = "Europe/Berlin"\n', settings).dashboard.time_zone == "Europe/Berlin"
    for bad in ('"Mars/Olympus"', '"+05:00"', '""', "5", '"localtime"'):
        with pytest.raises(config.ConfigError, match="dashboard.time_zone"):
            config.check_text(f"[dashboard]\ntime_zone = {bad}\n", settings)
    with pytest.raises(ValueError):
        hour_of_week.check_zone("../etc/passwd")


def heatmaps(at) -> dict[str, list]:
    """{colour bar title: z grid} of every heatmap the page drew."""
    out = {}
    for chart in at.get("plotly_chart"):
        for trace in json.loads(chart.proto.spec)["data"]:
            if trace.get("type") == "heatmap":
                out[trace["colorbar"]["title"]["text"]] = trace["z"]
    return out


def open_page(page: str):
    from streamlit.testing.v1 import AppTest

    from tests.conftest import REPO_ROOT

    at = AppTest.from_file(str(REPO_ROOT / "app" / "main.py"), default_timeout=60).run()
    at.switch_page(page).run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def grid_value(z, weekday: int, hour: int):
    """A cell of a heatmap's z as the browser gets it (a list of rows, or plotly's typed array)."""
    if isinstance(z, dict):  # {"dtype": "f8", "bdata": base64, "shape": "7, 24"}
        import base64

        import numpy as np

        shape = tuple(int(n) for n in str(z["shape"]).split(","))
        z = np.frombuffer(base64.b64decode(z["bdata"]), dtype=z["dtype"]).reshape(shape).tolist()
    value = z[weekday - 1][hour]
    return None if value is None or value != value else float(value)


def test_pages_draw_the_heatmaps_in_the_zone_picked(hours_warehouse):
    at = open_page("app_pages/serving.py")
    at.selectbox(key="hour_of_week_zone_serving").set_value(NEW_YORK).run()
    assert not at.exception, [e.message for e in at.exception]
    drawn = heatmaps(at)
    expected = expected_serving(NEW_YORK)
    requests = drawn["Requests per hour"]
    assert grid_value(requests, 7, 2) is None  # no such hour on 2026-03-08 in New York
    assert grid_value(requests, 7, 3) == pytest.approx(expected[(7, 3)]["requests_total"] / 1.0)  # one Sunday 03:00
    cost = next(z for title, z in drawn.items() if title.startswith("USD per 1k"))
    sums = expected[(7, 1)]
    assert grid_value(cost, 7, 1) == pytest.approx(sums["cost_usd"] / sums["success_priced"] * 1000)

    at.switch_page("app_pages/idle_gpus.py").run()  # the zone picked stays picked
    assert not at.exception, [e.message for e in at.exception]
    drawn = heatmaps(at)
    at_utc = datetime(2026, 3, 8, 7, tzinfo=UTC)
    assert grid_value(drawn["Utilization (%)"], 7, 3) == pytest.approx((util_of(at_utc, 0) + util_of(at_utc, 1)) / 2)
    assert grid_value(drawn["GPUs present"], 7, 3) == pytest.approx(2)
    sentence = [m.value for m in at.markdown if "GPUs are present" in m.value or "No hour of the week" in m.value]
    assert sentence and "America/New" in sentence[0]
