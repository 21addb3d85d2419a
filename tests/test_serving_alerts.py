"""The two serving alerts of issue 22 (seed 000): a service's cost per 1,000 requests over the last 24
hours against the 24 before ("Service B cost per 1,000 requests increased 2x in the last 24 hours;
new model version: ...") and a service whose QPS stays near zero for a long window while it costs
("scale down or shut down instances"). Small hand-built warehouses check each figure against a
computation here, the edges of each threshold, the message and that a second check fires nothing
new; the sample data fires each new rule (and the run guardrail) once, checked against plain Python
over the sample files. Posts go to a real HTTP server on 127.0.0.1 (tests/slack_server.py)."""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from collections import defaultdict
from datetime import date, datetime, timedelta, timezone
from decimal import ROUND_HALF_UP, Decimal

import pytest

from ingest.pipeline import loader
from ingest.settings import config
from metrics import serving_health
from mlcost.commands import alerts as alert_command
from outputs import alerts
from tests.conftest import REPO_ROOT, SAMPLE_DIR
from tests.slack_server import slack_stand_in

UTC = timezone.utc
DAY1, DAY2 = datetime(2026, 11, 20, tzinfo=UTC), datetime(2026, 11, 21, tzinfo=UTC)
AS_OF = date(2026, 11, 22)  # the check's day: data through Nov 21, the as-of day


def window_line(service: str, version: str, start: datetime, requests: int, cost: str) -> dict:
    return {"window_start": start.isoformat(), "window_end": (start + timedelta(hours=1)).isoformat(),
            "service": service, "model_version": version, "requests_total": requests,
            "requests_success": requests, "requests_error": 0, "cost_usd": float(cost),
            "instance_type": "g6.xlarge", "replicas": 1, "host": f"{service}-host"}


def hours_of(day: datetime, n: int = 24) -> list[datetime]:
    return [day + timedelta(hours=h) for h in range(n)]


def load(tmp_path, records: list[dict]) -> None:
    path = tmp_path / "windows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert loader.ingest_file(path).ok


def settings_with(tmp_path, serving: str) -> config.Config:
    path = tmp_path / "mlcost.toml"
    path.write_text(f"[alerts]\nidle_waste_usd_per_week = 0\n[serving]\n{serving}\n")
    return config.load(path)


def usd(amount: Decimal, places: int = 2) -> str:
    return f"${amount.quantize(Decimal(1).scaleb(-places), ROUND_HALF_UP):,}"


@pytest.fixture
def slack(warehouse, tmp_path, monkeypatch):
    monkeypatch.setenv("MLCOST_SECRETS", str(tmp_path / "none.toml"))
    with slack_stand_in() as stand_in:
        monkeypatch.setenv("MLCOST_SLACK_WEBHOOK_URL", stand_in.url())
        yield stand_in


# --- cost per 1,000 requests, last 24 hours against the 24 before ------------------------------

# (service, version, hour, requests, cost USD) of every window: Nov 20 is the day before, Nov 21 the last 24 h
JUMP_WINDOWS = (
    # svc-b: v1 all of Nov 20 and Nov 21 00:00-02:59, then v2 (a costlier model) from 03:00
    [("svc-b", "v1", t, 1000, "0.50") for t in hours_of(DAY1)]
    + [("svc-b", "v1", t, 1000, "0.50") for t in hours_of(DAY2, 3)]
    + [("svc-b", "v2", t, 1000, "1.30") for t in hours_of(DAY2)[3:]]
    # svc-c: the same version, scaled up on Nov 21: 2.5x, no new version
    + [("svc-c", "v7", t, 2000, "0.50") for t in hours_of(DAY1)] + [("svc-c", "v7", t, 2000, "1.25") for t in hours_of(DAY2)]
    # svc-quiet: a quiet Nov 21 (240 requests) at the same cost: 100x per request, below the minimum requests
    + [("svc-quiet", "v1", t, 1000, "0.50") for t in hours_of(DAY1)] + [("svc-quiet", "v1", t, 10, "0.50") for t in hours_of(DAY2)]
    # svc-flat: no change
    + [("svc-flat", "v1", t, 1500, "0.40") for t in hours_of(DAY1 - timedelta(days=3), 24 * 5)]
)


def per_1k_by_day(windows, service: str, day: datetime) -> tuple[int, Decimal, Decimal]:
    """(requests, cost USD, cost per 1k requests) of a service's windows starting on `day` (UTC)."""
    mine = [w for w in windows if w[0] == service and day <= w[2] < day + timedelta(days=1)]
    requests = sum(w[3] for w in mine)
    cost = sum((Decimal(w[4]) for w in mine), Decimal(0))
    return requests, cost, cost * 1000 / requests


def test_cost_per_1k_24h_is_the_days_cost_over_their_requests(slack, tmp_path):
    load(tmp_path, [window_line(*w) for w in JUMP_WINDOWS])
    last, before, found = serving_health.cost_per_1k_24h(date(2026, 11, 21))
    assert (last.start, last.end, before.start) == (DAY2, DAY2 + timedelta(days=1), DAY1)
    found = found.set_index("service")
    assert sorted(found.index) == ["svc-b", "svc-c", "svc-flat", "svc-quiet"]
    for service in found.index:
        requests_before, cost_before, per_1k_before = per_1k_by_day(JUMP_WINDOWS, service, DAY1)
        requests_after, cost_after, per_1k_after = per_1k_by_day(JUMP_WINDOWS, service, DAY2)
        row = found.loc[service]
        assert (int(row["requests_before"]), int(row["requests_after"])) == (requests_before, requests_after)
        assert (row["cost_before_usd"], row["cost_after_usd"]) == (cost_before, cost_after)
        assert abs(row["cost_per_1k_after_usd"] - per_1k_after) < Decimal("1e-9")
        assert row["ratio"] == pytest.approx(float(per_1k_after / per_1k_before), rel=1e-12)
    assert list(found.loc["svc-b", "new_versions"]) == ["v2"]  # v1 started before the window
    assert [list(found.loc[s, "new_versions"]) for s in ("svc-c", "svc-quiet", "svc-flat")] == [[], [], []]


def test_the_jump_fires_at_the_ratio_not_under_it_and_not_on_a_quiet_day(slack, tmp_path):
    load(tmp_path, [window_line(*w) for w in JUMP_WINDOWS])
    ratio_b = per_1k_by_day(JUMP_WINDOWS, "svc-b", DAY2)[2] / per_1k_by_day(JUMP_WINDOWS, "svc-b", DAY1)[2]
    ratio_c = per_1k_by_day(JUMP_WINDOWS, "svc-c", DAY2)[2] / per_1k_by_day(JUMP_WINDOWS, "svc-c", DAY1)[2]
    assert (ratio_b, ratio_c) == (Decimal("2.4"), Decimal("2.5"))

    def fired(serving: str) -> set[str]:
        return {a.subject for a in alerts.cost_per_1k_alerts(settings_with(tmp_path, serving), AS_OF)}

    assert fired("") == {"svc-b", "svc-c"}  # the default: 2x, 10,000 requests each day; svc-quiet had 240
    assert fired(f"cost_per_1k_jump_ratio = {ratio_b}") == {"svc-b", "svc-c"}  # at the ratio: fires
    assert fired(f"cost_per_1k_jump_ratio = {float(ratio_b) * 1.000001}") == {"svc-c"}  # just over it: not
    assert fired(f"cost_per_1k_jump_ratio = {float(ratio_c) * 0.999999}") == {"svc-c"}
    assert fired(f"cost_per_1k_jump_ratio = {float(ratio_c) * 1.000001}") == set()
    assert fired("cost_per_1k_jump_ratio = 0") == set()  # off
    # the minimum requests: svc-b has 24,000 each day; svc-quiet's 240 on Nov 21 fires only with a minimum of 240
    assert fired("cost_per_1k_min_requests = 24000") == {"svc-b", "svc-c"}  # svc-c has 48,000 each day
    assert fired("cost_per_1k_min_requests = 24001") == {"svc-c"}
    assert fired("cost_per_1k_min_requests = 48001") == set()
    assert "svc-quiet" in fired("cost_per_1k_min_requests = 240") and "svc-quiet" not in fired(
        "cost_per_1k_min_requests = 241")


def test_the_jump_alert_says_the_seeds_words_and_fires_once(slack, tmp_path):
    load(tmp_path, [window_line(*w) for w in JUMP_WINDOWS])
    settings = settings_with(tmp_path, "")
    first = alerts.check(settings, AS_OF)
    keys = {"cost_per_1k_jump|svc-b|2x|2026-11-21", "cost_per_1k_jump|svc-c|2x|2026-11-21"}
    # svc-b's v2 is also a version regression (its whole history against v1's): that rule's own alert
    assert set(first.new) == keys | {"serving_regression|svc-b v2|cost_per_1k_success_usd|2026-11-21"}
    assert keys <= set(first.delivered)
    texts = slack.texts()
    post_b = next(t for t in texts if "Service svc-b" in t)
    n_b, cost_b, per_1k_b = per_1k_by_day(JUMP_WINDOWS, "svc-b", DAY2)
    n_a, cost_a, per_1k_a = per_1k_by_day(JUMP_WINDOWS, "svc-b", DAY1)
    assert post_b == (
        "mlcost: svc-b: cost per 1k requests 2.4× in the last 24 hours\n"
        "Service svc-b cost per 1,000 requests increased 2.4× in the last 24 hours; new model version: v2 (first "
        f"window 2026-11-21 03:00 UTC). {usd(per_1k_b, 4)} per 1k requests over 2026-11-21 00:00 to 2026-11-22 "
        f"00:00 UTC ({n_b:,} requests, {usd(cost_b)}) against {usd(per_1k_a, 4)} over the 24 hours before "
        f"({n_a:,} requests, {usd(cost_a)}); threshold 2×. Did the new version or a scale-up raise the cost? "
        "Decide whether the quality gain is worth it (Serving page).")
    post_c = next(t for t in texts if "Service svc-c" in t)
    assert ("Service svc-c cost per 1,000 requests increased 2.5× in the last 24 hours; new model version: none "
            "started in these 24 hours.") in post_c
    second = alerts.check(settings, AS_OF)
    assert second.new == [] and second.delivered == [] and len(slack.texts()) == len(texts) == 3
    assert keys <= {a.key for a in second.alerts}  # still holding, posted once


# --- idle services ---------------------------------------------------------------------------

IDLE_START = datetime(2026, 11, 19, tzinfo=UTC)
IDLE_WINDOWS = (
    # idle-svc: 36 requests an hour (0.01/s) for three days, $0.80 an hour
    [("idle-svc", "v1", t, 36, "0.80") for t in hours_of(IDLE_START, 72)]
    # busy-once: as idle, but one hour of Nov 21 served 400 requests (0.11/s)
    + [("busy-once", "v1", t, 400 if t == DAY2 + timedelta(hours=9) else 36, "0.80") for t in hours_of(IDLE_START, 72)]
    # late-svc: deployed on Nov 21: not idle for the whole 48 hours
    + [("late-svc", "v1", t, 5, "0.80") for t in hours_of(DAY2)]
    # free-svc: near-zero traffic but nothing costs
    + [("free-svc", "v1", t, 5, "0") for t in hours_of(IDLE_START, 72)]
    # busy-svc: real traffic
    + [("busy-svc", "v1", t, 50_000, "0.80") for t in hours_of(IDLE_START, 72)]
)


def test_idle_services_are_near_zero_qps_for_the_whole_window_while_costing(slack, tmp_path):
    load(tmp_path, [window_line(*w) for w in IDLE_WINDOWS])
    span, found = serving_health.idle_services(date(2026, 11, 21), 48, 0.05)
    assert (span.start, span.end) == (DAY1, DAY2 + timedelta(days=1))
    assert list(found["service"]) == ["idle-svc"]
    mine = [w for w in IDLE_WINDOWS if w[0] == "idle-svc" and DAY1 <= w[2]]
    row = found.iloc[0]
    assert int(row["requests_total"]) == sum(w[3] for w in mine) == 48 * 36
    assert row["throughput_rps"] == pytest.approx(sum(w[3] for w in mine) / (48 * 3600))
    assert row["max_window_rps"] == pytest.approx(max(w[3] for w in mine) / 3600)
    assert row["cost_usd"] == sum((Decimal(w[4]) for w in mine), Decimal(0)) == Decimal("38.40")
    # a 24-hour window: late-svc is idle through all of it too
    assert list(serving_health.idle_services(date(2026, 11, 21), 24, 0.05)[1]["service"]) == ["idle-svc", "late-svc"]
    assert serving_health.idle_services(date(2026, 11, 21), 0, 0.05)[1].empty  # off


def test_the_idle_service_alert_edges_message_and_dedupe(slack, tmp_path):
    load(tmp_path, [window_line(*w) for w in IDLE_WINDOWS])
    qps = 36 / 3600  # every idle-svc window's requests per second

    def fired(serving: str) -> set[str]:
        return {a.subject for a in alerts.idle_service_alerts(settings_with(tmp_path, serving), AS_OF)}

    assert fired("") == {"idle-svc"}
    assert fired(f"idle_qps = {qps}") == set()  # at the bar is not below it
    assert fired(f"idle_qps = {qps * 1.000001}") == {"idle-svc"}
    assert fired(f"idle_qps = {400 / 3600 * 1.000001}") == {"idle-svc", "busy-once"}
    assert fired("idle_window_hours = 0") == set()

    settings = settings_with(tmp_path, "")
    first = alerts.check(settings, AS_OF)
    assert first.new == ["idle_service|idle-svc|0.05 qps/48h|2026-11-01"] == first.delivered
    assert slack.texts() == [
        "mlcost: idle-svc: near-zero traffic for 48 hours, $38.40 spent\n"
        f"Service idle-svc (v1) served {48 * 36:,} requests in the last 48 hours (2026-11-20 00:00 to 2026-11-22 "
        f"00:00 UTC): {qps:.4f} requests per second, never more than {qps:.4f} in a window (idle below 0.05), while "
        "its windows cost $38.40. QPS stayed near zero for a long window: scale down or shut down its instances "
        "(Serving page)."]
    second = alerts.check(settings, AS_OF)
    assert second.new == [] and second.delivered == [] and len(slack.texts()) == 1


def test_every_rule_is_known_to_the_cli():
    assert tuple(alert_command.RULES) == alerts.RULES
    assert {"cost_per_1k_jump", "idle_service", "run_guardrail"} <= set(alerts.RULES)


# --- the sample data ---------------------------------------------------------------------------

def sample_windows() -> list[dict]:
    with gzip.open(SAMPLE_DIR / "serving_windows.jsonl.gz", "rt") as lines:
        return [json.loads(line) for line in lines]


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def window_costs(windows: list[dict]) -> list[Decimal]:
    """Each window's cost: its own, else its instance type's price per replica-hour read off the
    windows that carry one (as the ingestor prices a window sent without a cost)."""
    price = {}
    for w in windows:
        if "cost_usd" in w:
            price[w["instance_type"]] = Decimal(str(w["cost_usd"])) / w["replicas"]  # hourly windows
    return [Decimal(str(w["cost_usd"])) if "cost_usd" in w else price[w["instance_type"]] * w["replicas"]
            for w in windows]


def sample_serving_expectations() -> dict:
    """From the sample files alone: the cost-per-1k jumps and idle services of the last 48 hours
    (Nov 20 and 21; defaults: 2x, 10,000 requests; 0.05 requests/s for 48 hours), per service."""
    windows = sample_windows()
    costs = window_costs(windows)
    days: dict = defaultdict(lambda: [0, Decimal(0)])
    first_seen: dict = {}
    idle: dict = defaultdict(lambda: {"requests": 0, "cost": Decimal(0), "max_rps": 0.0, "hours": 0})
    for w, cost in zip(windows, costs):
        start = at(w["window_start"])
        first_seen[(w["service"], w["model_version"])] = min(start, first_seen.get((w["service"], w["model_version"]),
                                                                                   start))
        if DAY1 <= start < DAY2 + timedelta(days=1):
            day = days[(w["service"], start >= DAY2)]
            day[0] += w["requests_total"]
            day[1] += cost
            i = idle[w["service"]]
            i["requests"] += w["requests_total"]
            i["cost"] += cost
            i["max_rps"] = max(i["max_rps"], w["requests_total"] / 3600)
            i["hours"] += 1
    jumps = {}
    for service in {s for s, _ in days}:
        (n0, c0), (n1, c1) = days[(service, False)], days[(service, True)]
        ratio = (c1 * 1000 / n1) / (c0 * 1000 / n0)
        if ratio >= 2 and n0 >= 10_000 and n1 >= 10_000:
            new = sorted((t, v) for (s, v), t in first_seen.items() if s == service and DAY2 <= t)
            jumps[service] = {"ratio": ratio, "per_1k": (c0 * 1000 / n0, c1 * 1000 / n1), "requests": (n0, n1),
                              "cost": (c0, c1), "new": new}
    idle_services = {s: i for s, i in idle.items() if i["max_rps"] < 0.05 and i["hours"] == 48 and i["cost"] > 0}
    return {"jumps": jumps, "idle": idle_services}


def sample_guardrail_runs(max_cost_usd: Decimal, max_hours: float) -> dict[str, dict]:
    """Runs of runs.jsonl that started in the 30 days through Nov 21 and cost more than the ceiling
    (their logged estimated cost) or ran longer than the maximum hours."""
    over = {}
    for line in (SAMPLE_DIR / "runs.jsonl").read_text().splitlines():
        run = json.loads(line)
        start = run["start_time"]
        started = datetime.fromtimestamp(start, UTC) if isinstance(start, (int, float)) else at(start)
        if datetime(2026, 10, 23, tzinfo=UTC) <= started < DAY2 + timedelta(days=1):
            cost = Decimal(str(run["estimated_cost_usd"]))
            if cost > max_cost_usd or run["duration_hours"] > max_hours:
                over[run["run_id"]] = {**run, "started": started, "cost": cost}
    return over


def sample_new_rule_keys() -> set[str]:
    """The keys of the issue-22 rules on the sample as of Nov 22, from the files and sample_data/mlcost.toml."""
    limits = config.load(SAMPLE_DIR / "mlcost.toml").alerts.run_limits
    expected = sample_serving_expectations()
    keys = {f"cost_per_1k_jump|{service}|2x|2026-11-21" for service in expected["jumps"]}
    keys |= {f"idle_service|{service}|0.05 qps/48h|2026-11-01" for service in expected["idle"]}
    for run_id, run in sample_guardrail_runs(limits.max_cost_usd, limits.max_hours).items():
        which = "+".join(w for w, over in (("cost", run["cost"] > limits.max_cost_usd),
                                           ("hours", run["duration_hours"] > limits.max_hours)) if over)
        keys.add(f"run_guardrail|{run_id}|{which}|{run['started']:%Y-%m-%d}")
    return keys


def test_the_sample_fires_each_new_rule_once_in_the_seeds_words(demo_warehouse, tmp_path, monkeypatch):
    settings = config.load(SAMPLE_DIR / "mlcost.toml")
    assert settings.alerts.run_limits.max_cost_usd == Decimal(300) and settings.alerts.run_limits.max_hours == 48
    expected = sample_serving_expectations()
    assert list(expected["jumps"]) == ["vision-tagger"] and list(expected["idle"]) == ["doc-embedder"]
    guard = sample_guardrail_runs(Decimal(300), 48)
    assert 1 <= len(guard) <= 2 and all(run["cost"] > 300 for run in guard.values())
    keys = sample_new_rule_keys()
    env = {**os.environ, "MLCOST_CONFIG": str(SAMPLE_DIR / "mlcost.toml"), "MLCOST_SECRETS": str(tmp_path / "no.toml")}
    with slack_stand_in() as slack:
        env["MLCOST_SLACK_WEBHOOK_URL"] = slack.url("/default")
        env["MLCOST_SLACK_WEBHOOK_URL_GENAI"] = slack.url("/genai")

        def check() -> dict:
            done = subprocess.run([sys.executable, "-m", "mlcost", "alerts", "check", "--as-of", "2026-11-22", "--json"],
                                  env=env, capture_output=True, text=True, timeout=600, cwd=REPO_ROOT)
            assert done.returncode == 0, done.stderr
            return json.loads(done.stdout)

        first = check()
        mine = {key for key in first["new"] if key.split("|")[0] in ("cost_per_1k_jump", "idle_service", "run_guardrail")}
        assert mine == keys and keys <= set(first["delivered"])
        texts = slack.texts()
        jump = expected["jumps"]["vision-tagger"]
        (post,) = [t for t in texts if "cost per 1,000 requests increased" in t]
        (version_start, version), = jump["new"]
        assert (f"Service vision-tagger cost per 1,000 requests increased {jump['ratio']:.1f}× in the last 24 hours; "
                f"new model version: {version} (first window {version_start:%Y-%m-%d %H:%M} UTC). "
                f"{usd(jump['per_1k'][1], 4)} per 1k requests over 2026-11-21 00:00 to 2026-11-22 00:00 UTC "
                f"({jump['requests'][1]:,} requests, {usd(jump['cost'][1])}) against {usd(jump['per_1k'][0], 4)} over "
                f"the 24 hours before ({jump['requests'][0]:,} requests, {usd(jump['cost'][0])})") in post
        idle = expected["idle"]["doc-embedder"]
        (post,) = [t for t in texts if "QPS stayed near zero" in t]
        assert (f"Service doc-embedder (v2.0) served {idle['requests']:,} requests in the last 48 hours (2026-11-20 "
                f"00:00 to 2026-11-22 00:00 UTC): {idle['requests'] / (48 * 3600):.4f} requests per second, never "
                f"more than {idle['max_rps']:.4f} in a window (idle below 0.05), while its windows cost "
                f"{usd(idle['cost'])}. QPS stayed near zero for a long window: scale down or shut down its "
                "instances") in post
        for run_id, run in guard.items():
            (post,) = [t for t in texts if f"Run {run_id} of project" in t]
            assert (f"Run {run_id} of project {run['project']} (owner {run['owner']}, started "
                    f"{run['started']:%Y-%m-%d %H:%M} UTC): it cost {usd(run['cost'])}, over the $300.00 ceiling "
                    "per run") in post
        posts = len(slack.posts)
        second = check()
        assert second["new"] == [] and second["delivered"] == [] and len(slack.posts) == posts
        assert keys <= set(second["firing"])
