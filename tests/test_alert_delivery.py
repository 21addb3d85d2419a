"""Alert delivery when a check dies or Slack is slow: `mlcost alerts check` runs as a real
process against the Slack stand-in on 127.0.0.1 (tests/slack_server.py), which SIGKILLs it
before Slack takes a post, right after Slack's 200, or after the first alert was marked, or
answers too late. The guarantee (README, "Alert delivery"): every alert reaches Slack; a second
copy only follows an interrupted or unanswered post, and it is marked as a possible repeat.

MLCOST_ALERT_KILL_TRIALS=N repeats each kill point N times (README's figures: 10)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT
from tests.test_alerts import hand, stored  # noqa: F401 (hand is a fixture)

TRIALS = int(os.environ.get("MLCOST_ALERT_KILL_TRIALS", "1"))
BUDGET = 'name = "p"\nscope = "project:p"\namount = 250\nforecast_thresholds_pct = [100]'
ACTUAL, FORECAST = "budget_actual|p|80%|2026-03-01", "budget_forecast|p|100%|2026-03-01"
TOKEN = "T0KILL/B0KILL/xoxKILLtoken"


def run_check(slack, env: dict) -> tuple[int, dict | None, str]:
    """One `mlcost alerts check` process for 2026-03-21 (two posts: 80 % spent, then the
    forecast); slack may kill it. (exit code, its JSON or None when killed, stderr)."""
    process = subprocess.Popen([sys.executable, "-m", "mlcost", "alerts", "check", "--as-of", "2026-03-21", "--json"],
                               env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    slack.victim = process.pid
    out, err = process.communicate(timeout=300)
    assert TOKEN not in out + err
    return process.returncode, (json.loads(out) if process.returncode >= 0 else None), err


def copies(slack) -> list[tuple[str, bool]]:
    """(alert key, marked as a possible repeat) of every message Slack posted, in order."""
    found = []
    for text in slack.texts():
        key = ACTUAL if "threshold 80 %" in text else FORECAST if "threshold 100 %" in text else text
        marked = text.startswith("[possible repeat] ") and "Possible repeat: an earlier post" in text
        found.append((key, marked))
    return found


@pytest.fixture
def checker(hand, tmp_path):
    """(slack stand-in, env) for checks in new processes: the hand-made runs, budget p of 250 USD."""
    slack, settings = hand
    settings(BUDGET, "post_timeout_s = 1")
    env = {**os.environ, "MLCOST_CONFIG": str(tmp_path / "mlcost.toml"),
           "MLCOST_SLACK_WEBHOOK_URL": slack.url(f"/services/{TOKEN}")}
    return slack, env


SCENARIOS = {
    # kill point: (what Slack holds after the killed check, after the next check)
    "before the first post": ([], [(ACTUAL, True), (FORECAST, False)]),
    "after Slack's 200 to the first post": ([(ACTUAL, False)], [(ACTUAL, False), (ACTUAL, True), (FORECAST, False)]),
    "after the first alert was marked": ([(ACTUAL, False)], [(ACTUAL, False), (FORECAST, True)]),
}


@pytest.mark.parametrize("trial", range(TRIALS))
@pytest.mark.parametrize("point", SCENARIOS)
def test_a_killed_check_is_resolved_by_the_next_one_once_and_marked(checker, point, trial):
    slack, env = checker
    post, when = {"before the first post": (1, "before"), "after Slack's 200 to the first post": (1, "after_200"),
                  "after the first alert was marked": (2, "before")}[point]
    slack.kill_at(post, when)
    code, _, _ = run_check(slack, env)
    assert code == -signal.SIGKILL
    after_kill, after_next = SCENARIOS[point]
    assert copies(slack) == after_kill
    interrupted = [ACTUAL] if post == 1 else [FORECAST]
    assert stored("SELECT alert_key FROM alerts WHERE delivery = 'sending'") == [(k,) for k in interrupted]

    code, result, _ = run_check(slack, env)
    assert code == 0 and result["failed"] == [] and result["repeated"] == interrupted
    assert copies(slack) == after_next
    log = stored("SELECT alert_key, ok, error FROM alert_deliveries")
    assert [(k, e.split(":")[0]) for k, ok, e in log if not ok] == [(interrupted[0], "interrupted")]
    answered = after_next if when == "before" else after_next[len(after_kill):]  # the killed 200 was never seen
    assert sorted(k for k, ok, _ in log if ok) == sorted(k for k, _ in answered)

    code, third, _ = run_check(slack, env)  # resolved: nothing more is ever posted
    assert code == 0 and third["delivered"] == [] and copies(slack) == after_next
    assert stored("SELECT DISTINCT delivery FROM alerts WHERE delivery <> 'superseded'") == [("delivered",)]


@pytest.mark.parametrize("trial", range(TRIALS))
def test_an_unanswered_post_is_not_retried_blindly_but_re_sent_once_marked(checker, trial):
    slack, env = checker
    slack.stall_at(1, 3)  # Slack posts the first alert but answers after 3 s; the check waits 1 s
    code, result, stderr = run_check(slack, env)
    assert code == 1 and result["delivered"] == [FORECAST]
    assert [f["alerts"] for f in result["failed"]] == [[ACTUAL]] and "may have posted it" in stderr
    assert slack.requests == 2  # no blind retry of the slow post within the check
    assert stored(f"SELECT delivery FROM alerts WHERE alert_key = '{ACTUAL}'") == [("uncertain",)]

    code, second, _ = run_check(slack, env)
    assert code == 0 and second["repeated"] == [ACTUAL] and second["delivered"] == [ACTUAL]
    code, third, _ = run_check(slack, env)
    assert code == 0 and third["delivered"] == []
    assert sorted(copies(slack)) == [(ACTUAL, False), (ACTUAL, True), (FORECAST, False)]


def test_a_refused_or_rejected_post_is_retried_unmarked(checker):
    """Slack said no (500 twice: the post and its one retry): it did not post, so the next
    check's post is the first copy and carries no mark."""
    slack, env = checker
    slack.answer((500, {}, "internal_error"), (500, {}, "internal_error"))
    code, first, _ = run_check(slack, env)
    assert code == 1 and first["delivered"] == [FORECAST]
    code, second, _ = run_check(slack, env)
    assert code == 0 and second["delivered"] == [ACTUAL] and second["repeated"] == []
    assert sorted(copies(slack)) == [(ACTUAL, False), (FORECAST, False)]
