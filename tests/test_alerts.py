"""Alerts end to end against a real HTTP server on 127.0.0.1 standing in for Slack: the sample
data's first check posts the expected alerts, a second posts nothing, a failed post is retried
on the next check (a new process) and then never repeated; 429 with Retry-After, 5xx and refused
connections; the webhook URL never shows. Expected alerts come from the sample files and
truth.json by a plain second computation (tests/test_budgets.py), not from the warehouse."""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from outputs import alert_store, alerts
from ingest.engine import warehouse as wh
from ingest.pipeline import loader
from ingest.settings import config
from tests.conftest import REPO_ROOT, SAMPLE_DIR, sample_node_rates
from tests.slack_server import refused_url, slack_stand_in
from tests.test_serving_alerts import sample_new_rule_keys
from tests.test_budgets import (SCOPES, allocated_by_day, allocated_by_run, bill_spend_by_day, expected_burn,
                                run_line, sample_runs, spend_by_day)

SAMPLE_CONFIG = SAMPLE_DIR / "mlcost.toml"
AS_OF = date(2026, 11, 22)
SECRET = "T0SECRET/B0SECRET/xoxsecretpath"  # must never appear in output, tables or pages
APP = REPO_ROOT / "app" / "main.py"


@pytest.fixture
def on_sample(demo_warehouse, tmp_path, monkeypatch) -> Path:
    """A fresh copy of the sample warehouse, the sample budgets, no webhook and no secrets file."""
    warehouse = demo_warehouse
    monkeypatch.setenv("MLCOST_CONFIG", str(SAMPLE_CONFIG))
    monkeypatch.setenv("MLCOST_SECRETS", str(tmp_path / "no-secrets.toml"))
    for name in list(os.environ):
        if name.startswith("MLCOST_SLACK_WEBHOOK_URL"):
            monkeypatch.delenv(name)
    return warehouse


def expected_sample_alerts() -> tuple[set[str], set[str]]:
    """(keys that hold, keys posted) on the sample data as of 2026-11-22, computed from the files."""
    holding, posted = set(), set()
    for budget in config.load(SAMPLE_CONFIG).budgets:
        scope = "all" if budget.scope == "all" else f"{budget.scope}:{budget.scope_value}"
        start = date(2026, 11, 1) if budget.period == "month" else date(2026, 10, 1)
        end = date(2026, 12, 1) if budget.period == "month" else date(2027, 1, 1)
        want = expected_burn(spend_by_day(scope), budget.amount, start, end, date(2026, 11, 21))
        for rule, figure, thresholds in (("budget_actual", want["spent"], budget.actual_thresholds_pct),
                                         ("budget_forecast", want["forecast"], budget.forecast_thresholds_pct)):
            crossed = [pct for pct in thresholds if figure * 100 / budget.amount >= Decimal(str(pct))]
            holding |= {f"{rule}|{budget.name}|{pct:g}%|{start}" for pct in crossed}
            posted |= {f"{rule}|{budget.name}|{max(crossed):g}%|{start}"} if crossed else set()
    truth = json.loads((SAMPLE_DIR / "truth.json").read_text())
    regression, jump = truth["regression"], truth["alert_cases"]["cost_per_1k_jump"]
    assert regression["service"] == "chat-assistant" and regression["change_pct"] > 10
    # only the regression and the last day's version (vision-tagger v3.2) are > 10 % on cost
    worse = [c for c in truth["serving_version_changes"] if c["change_pct"] > 10]
    assert [(c["service"], c["to_version"]) for c in worse] == [(jump["service"], jump["new_version"]),
                                                                 (regression["service"], regression["to_version"])]
    energy = energy_wh_per_1k_success()
    assert energy[("chat-assistant", "v1.0")] > 1.10 * energy[("chat-assistant", "v0.9")]
    assert energy[("search-api", "v1.5")] < energy[("search-api", "v1.4")]
    assert not any(service == "vision-tagger" for service, _ in energy)  # it sends no energy: cost only
    for metric in ("cost_per_1k_success_usd", "energy_wh_per_1k_success"):
        holding.add(f"serving_regression|chat-assistant {regression['to_version']}|{metric}|{regression['start_date']}")
    holding.add(f"serving_regression|{jump['service']} {jump['new_version']}|cost_per_1k_success_usd|"
                f"{jump['version_start'][:10]}")
    assert idle_usd_last_week(truth) > 200
    holding.add("idle_waste|GPUs|$200/week|2026-11-01")
    holding |= sample_new_rule_keys()  # cost per 1k jump, idle service, run guardrails (tests/test_serving_alerts.py)
    return holding, posted | {key for key in holding if not key.startswith("budget_")}


def energy_wh_per_1k_success() -> dict[tuple[str, str], float]:
    totals: dict[tuple[str, str], list[float]] = {}
    with gzip.open(SAMPLE_DIR / "serving_windows.jsonl.gz", "rt") as lines:
        for line in lines:
            window = json.loads(line)
            if window.get("energy_kwh") is not None:
                total = totals.setdefault((window["service"], window["model_version"]), [0, 0.0])
                total[0] += window["requests_success"]
                total[1] += window["energy_kwh"]
    return {key: kwh * 1e6 / success for key, (success, kwh) in totals.items()}


def idle_usd_last_week(truth: dict) -> Decimal:
    """Sustained idle GPU-seconds of 2026-11-15..21 (truth.json) x the node's cost per GPU-hour
    from its own bill lines of those days (both nodes are billed: the catalog is not used)."""
    rates = sample_node_rates("2026-11-15", "2026-11-21")
    total = Decimal(0)
    for day in truth["gpu_idle_by_day"]:
        if "2026-11-15" <= day["date"] <= "2026-11-21":
            total += Decimal(day["idle_sustained_s"]) / 3600 * rates[day["host"]]
    return total


def money(amount: Decimal) -> str:
    return f"${amount.quantize(Decimal('0.01')):,}"


def top_runs_text(by_run: dict[str, Decimal], estimated: dict[str, Decimal] | None = None) -> str:
    """'r1 $5,000.00 (estimated), r2 $75.14, r3 $65.58': the three costliest runs, as the alert names them."""
    estimated = estimated or {}
    total = {run: by_run.get(run, Decimal(0)) + estimated.get(run, Decimal(0)) for run in {*by_run, *estimated}}
    top = sorted(total, key=lambda run: (-total[run], run))[:3]
    return ", ".join(f"{run} {money(total[run])}" + (" (estimated)" if run in estimated and run not in by_run else "")
                     for run in top)


def check(env: dict, *extra: str) -> tuple[int, dict, str]:
    """`mlcost alerts check --as-of 2026-11-22 --json` in a new process: (exit code, JSON, stderr)."""
    done = subprocess.run([sys.executable, "-m", "mlcost", "alerts", "check", "--as-of", "2026-11-22", "--json",
                           *extra], env=env, capture_output=True, text=True, timeout=600, cwd=REPO_ROOT)
    assert SECRET not in done.stdout + done.stderr
    return done.returncode, json.loads(done.stdout), done.stderr


def env_with(**webhooks: str) -> dict:
    return {**os.environ, **webhooks}


def stored(sql: str) -> list[tuple]:
    with wh.connect() as con:
        return con.execute(sql).fetchall()


# --- the sample data: first check, second check ------------------------------------------------

def test_first_check_posts_the_expected_alerts_and_a_second_posts_nothing(on_sample):
    holding, posted = expected_sample_alerts()
    with slack_stand_in() as slack:
        env = env_with(MLCOST_SLACK_WEBHOOK_URL=slack.url(f"/default/{SECRET}"),
                       MLCOST_SLACK_WEBHOOK_URL_GENAI=slack.url(f"/genai/{SECRET}"))
        code, first, _ = check(env)
        assert code == 0
        assert set(first["firing"]) == holding
        assert set(first["delivered"]) == posted
        assert set(first["superseded"]) == holding - posted  # genai 50 % under its 80 %
        assert len(slack.posts) == len(posted) and all(p["status"] == 200 for p in slack.posts)
        genai = {p["body"]["text"].split("\n")[0] for p in slack.posts if p["path"].startswith("/genai/")}
        team = expected_burn(spend_by_day("team:genai"), Decimal(14000), date(2026, 11, 1), date(2026, 12, 1),
                             date(2026, 11, 21))
        used, forecast = float(team["spent"] * 100 / 14000), float(team["forecast"] * 100 / 14000)
        assert genai == {f"mlcost: genai team: {used:.0f} % of the budget spent "
                         f"(threshold {max(p for p in (50, 80, 100) if used >= p)} %)",
                         f"mlcost: genai team: forecast {forecast:.0f} % of the budget (threshold 100 %)"}
        org = expected_burn(bill_spend_by_day(SCOPES["all"]), Decimal(38000), date(2026, 11, 1), date(2026, 12, 1),
                            date(2026, 11, 21))
        org_post = next(p["body"] for p in slack.posts if p["body"]["text"].startswith("mlcost: ML org: ")
                        and "of the budget spent" in p["body"]["text"])
        assert f"${org['spent'].quantize(Decimal('0.01')):,}" in org_post["text"]
        assert f"forecast ${org['forecast'].quantize(Decimal('0.01')):,}" in org_post["text"]
        assert [b["type"] for b in org_post["blocks"]] == ["header", "section", "context"]
        # the seed's wording: spend over the stated window, then the top three runs by cost
        week = [date(2026, 11, 15) + timedelta(days=i) for i in range(7)]
        all_week = sum((bill_spend_by_day(SCOPES["all"]).get(d, Decimal(0)) for d in week), Decimal(0))
        assert (f"All spend came to {money(all_week)} in the last 7 days (2026-11-15 to 2026-11-21, 7 days, "
                f"7 with data; budget $38,000.00/month). Top 3 most expensive runs: "
                + top_runs_text(allocated_by_run(week[0], week[-1])) + ".") in org_post["text"]
        genai_post = next(p["body"]["text"] for p in slack.posts if p["path"].startswith("/genai/")
                          and "of the budget spent" in p["body"]["text"])
        runs = sample_runs()
        genai_week = sum((allocated_by_day("team", "genai").get(d, Decimal(0)) for d in week), Decimal(0))
        assert (f"Team genai spent {money(genai_week)} in the last 7 days (2026-11-15 to 2026-11-21, 7 days, 7 with "
                f"data; budget $14,000.00/month). Top 3 most expensive runs: "
                + top_runs_text(allocated_by_run(week[0], week[-1], lambda run, tags: runs[run]["team"] == "genai"))
                + ".") in genai_post
        assert "Amazon Simple Storage Service" not in genai_post and "AWS Data Transfer" not in genai_post
        idle_post = next(p["body"]["text"] for p in slack.posts if "Idle GPUs cost" in p["body"]["text"])
        figure = Decimal(idle_post.split("costing $")[1].split(" ")[0].replace(",", ""))
        assert abs(figure - idle_usd_last_week(json.loads((SAMPLE_DIR / "truth.json").read_text()))) < Decimal("0.5")

        code, second, _ = check(env)
        assert code == 0 and second["new"] == [] and second["delivered"] == []
        assert set(second["firing"]) == holding
        assert len(slack.posts) == len(posted)
    assert stored("SELECT count(*) FROM alerts WHERE delivery = 'delivered'") == [(len(posted),)]


def test_a_failed_post_is_retried_by_the_next_process_and_never_repeated(on_sample):
    _, posted = expected_sample_alerts()
    with slack_stand_in() as slack:
        env = env_with(MLCOST_SLACK_WEBHOOK_URL=slack.url(f"/default/{SECRET}"),
                       MLCOST_SLACK_WEBHOOK_URL_GENAI=slack.url(f"/genai/{SECRET}"))
        slack.answer(*[(500, {}, "internal_error")] * (2 * len(posted)))  # each post and its one retry
        code, first, stderr = check(env)
        assert code == 1 and first["delivered"] == [] and len(slack.posts) == 2 * len(posted)
        assert {k for failure in first["failed"] for k in failure["alerts"]} == posted
        assert all("HTTP 500" in failure["reason"] for failure in first["failed"])
        assert stored("SELECT DISTINCT delivery, attempts FROM alerts WHERE delivery <> 'superseded'") == [("pending", 1)]

        code, second, _ = check(env)  # Slack is back; a new process
        assert code == 0 and set(second["delivered"]) == posted and second["new"] == []
        code, third, _ = check(env)
        assert code == 0 and third["delivered"] == []
        delivered_texts = slack.texts()
        assert len(delivered_texts) == len(posted) == len(set(delivered_texts))  # each alert posted once
    failures = stored("SELECT error FROM alert_deliveries WHERE NOT ok")
    assert len(failures) == len(posted) and all(SECRET not in e for (e,) in failures)


def test_refused_connections_leave_the_alert_for_the_next_check(on_sample):
    _, posted = expected_sample_alerts()
    code, first, _ = check(env_with(MLCOST_SLACK_WEBHOOK_URL=refused_url() + SECRET,
                                    MLCOST_SLACK_WEBHOOK_URL_GENAI=refused_url() + SECRET))
    assert code == 1 and first["delivered"] == []
    assert all("refused" in f["reason"].lower() and SECRET not in f["reason"] for f in first["failed"])
    with slack_stand_in() as slack:
        code, second, _ = check(env_with(MLCOST_SLACK_WEBHOOK_URL=slack.url(f"/d/{SECRET}"),
                                         MLCOST_SLACK_WEBHOOK_URL_GENAI=slack.url(f"/g/{SECRET}")))
        assert code == 0 and set(second["delivered"]) == posted and len(slack.posts) == len(posted)
    errors = stored("SELECT coalesce(last_error, '') FROM alerts UNION ALL SELECT coalesce(error, '') FROM alert_deliveries")
    assert all(SECRET not in e for (e,) in errors)


def test_429_is_retried_after_retry_after(on_sample, monkeypatch):
    _, posted = expected_sample_alerts()
    with slack_stand_in() as slack:
        monkeypatch.setenv("MLCOST_SLACK_WEBHOOK_URL", slack.url("/default"))
        monkeypatch.setenv("MLCOST_SLACK_WEBHOOK_URL_GENAI", slack.url("/genai"))
        slack.answer((429, {"Retry-After": "1"}, "rate_limited"))
        result = alerts.check(config.load(), AS_OF)
        assert result.ok and set(result.delivered) == posted
        assert [p["status"] for p in slack.posts[:2]] == [429, 200]
        assert slack.posts[0]["body"] == slack.posts[1]["body"]  # the same message, waited for and resent
        assert len(slack.posts) == len(posted) + 1


def test_a_long_retry_after_is_left_for_the_next_check(hand):
    slack, settings = hand
    tight = settings('name = "p"\nscope = "project:p"\namount = 250\nforecast_thresholds_pct = []')
    slack.answer((429, {"Retry-After": "3600"}, "rate_limited"))  # more than retry_after_max_s (60)
    first = alerts.check(tight, date(2026, 3, 21))
    assert first.delivered == [] and "HTTP 429" in first.failed[0][1] and len(slack.posts) == 1
    second = alerts.check(tight, date(2026, 3, 21))
    assert second.delivered == ["budget_actual|p|80%|2026-03-01"] and [p["status"] for p in slack.posts] == [429, 200]


def test_no_webhook_is_a_clear_failure_naming_where_to_set_it(on_sample):
    code, result, stderr = check(dict(os.environ))
    assert code == 1 and result["delivered"] == []
    assert "set MLCOST_SLACK_WEBHOOK_URL or webhook_url under [slack] in .streamlit/secrets.toml" in stderr
    assert "MLCOST_SLACK_WEBHOOK_URL_GENAI" in stderr


def test_a_dry_run_records_and_posts_nothing(on_sample):
    holding, _ = expected_sample_alerts()
    with slack_stand_in() as slack:
        code, result, _ = check(env_with(MLCOST_SLACK_WEBHOOK_URL=slack.url()), "--dry-run")
        assert code == 0 and set(result["new"]) == holding and slack.posts == []
    assert stored("SELECT count(*) FROM alerts") == [(0,)]


def test_webhooks_from_the_secrets_file(on_sample, tmp_path, monkeypatch):
    with slack_stand_in() as slack:
        secrets = tmp_path / "secrets.toml"
        secrets.write_text(f'[slack]\nwebhook_url = "{slack.url("/from-secrets/" + SECRET)}"\n'
                           f'[slack.channels]\ngenai = "{slack.url("/genai-from-secrets/" + SECRET)}"\n')
        monkeypatch.setenv("MLCOST_SECRETS", str(secrets))
        result = alerts.check(config.load(), AS_OF)
        assert result.ok and result.delivered
        assert {p["path"].split("/")[1] for p in slack.posts} == {"from-secrets", "genai-from-secrets"}


# --- rules and state on small hand-made data -------------------------------------------------

@pytest.fixture
def hand(warehouse, tmp_path, monkeypatch):
    """Runs of project p (10.50 USD each) on every day of March 1-28 and April 1-10, 2026, and a
    Slack stand-in as the default webhook; yields (stand-in, write_settings)."""
    days = [date(2026, 3, 1) + timedelta(days=i) for i in range(28)] + [date(2026, 4, 1) + timedelta(days=i)
                                                                        for i in range(10)]
    (tmp_path / "runs.jsonl").write_text("\n".join(run_line(f"r{d}", "p", d, 2, "5.25") for d in days) + "\n")
    assert loader.ingest_file(tmp_path / "runs.jsonl").ok
    monkeypatch.setenv("MLCOST_SECRETS", str(tmp_path / "none.toml"))

    def settings(budget: str, alerts_section: str = "") -> config.Config:
        path = tmp_path / "mlcost.toml"
        path.write_text(f"[alerts]\nidle_waste_usd_per_week = 0\n{alerts_section}\n[[budgets]]\n{budget}\n")
        return config.load(path)

    with slack_stand_in() as slack:
        monkeypatch.setenv("MLCOST_SLACK_WEBHOOK_URL", slack.url())
        yield slack, settings


def test_alerts_resolve_fire_once_per_period_and_again_next_period(hand):
    slack, settings = hand
    tight = settings('name = "p"\nscope = "project:p"\namount = 250\nforecast_thresholds_pct = [100]')
    # March 1-20: 20 x 10.50 = 210 = 84 % of 250 -> 50 and 80 hold, 80 is posted; forecast 210 + 10.50 x 11 = 325.50
    first = alerts.check(tight, date(2026, 3, 21))
    assert set(first.new) == {"budget_actual|p|50%|2026-03-01", "budget_actual|p|80%|2026-03-01",
                              "budget_forecast|p|100%|2026-03-01"}
    assert set(first.delivered) == {"budget_actual|p|80%|2026-03-01", "budget_forecast|p|100%|2026-03-01"}
    loose = settings('name = "p"\nscope = "project:p"\namount = 1000\nforecast_thresholds_pct = [100]')
    calm = alerts.check(loose, date(2026, 3, 22))
    assert calm.alerts == [] and set(calm.resolved) == set(first.new)
    assert stored("SELECT DISTINCT status FROM alerts") == [("resolved",)]
    again = alerts.check(tight, date(2026, 3, 23))  # holds again in the same month: fired already
    assert again.new == [] and again.delivered == [] and len(again.alerts) == 3
    april = alerts.check(tight, date(2026, 4, 11))  # 10 x 10.50 = 105 = 42 %; forecast 105 + 10.50 x 20 = 315
    assert set(april.new) == {"budget_forecast|p|100%|2026-04-01"} and april.delivered == april.new
    assert len(slack.posts) == 3


def test_a_snoozed_subject_is_recorded_but_not_posted(hand):
    slack, settings = hand
    tight = settings('name = "p"\nscope = "project:p"\namount = 250')
    now = alert_store.now()
    alert_store.snooze(alert_store.ANY_RULE, "p", now + timedelta(days=1), now)
    result = alerts.check(tight, date(2026, 3, 21))
    assert result.new and result.delivered == [] and slack.posts == []
    assert set(result.snoozed) | set(result.superseded) == set(result.new)
    alert_store.unsnooze(alert_store.ANY_RULE, "p")
    assert alerts.check(tight, date(2026, 3, 21)).delivered == []  # snoozed alerts are never posted later


def test_a_digest_posts_once_per_channel(hand):
    slack, settings = hand
    result = alerts.check(settings('name = "p"\nscope = "project:p"\namount = 250', "digest = true"),
                          date(2026, 3, 21))
    assert len(result.delivered) == 2 and len(slack.posts) == 1
    text = slack.posts[0]["body"]["text"]
    assert text.startswith("mlcost: 2 alerts") and "threshold 80 %" in text and "threshold 100 %" in text


def test_a_burn_spike_fires_and_a_normal_day_does_not(hand, tmp_path):
    slack, settings = hand
    big = settings('name = "p"\nscope = "project:p"\namount = 100000\nforecast_thresholds_pct = []')
    assert alerts.check(big, date(2026, 3, 29), dry_run=True).alerts == []  # a steady 10.50 a day
    (tmp_path / "spike.jsonl").write_text(run_line("sweep", "p", date(2026, 3, 28), 6, "7.00") + "\n")  # + 42.00
    assert loader.ingest_file(tmp_path / "spike.jsonl").ok
    spike = alerts.check(big, date(2026, 3, 29))
    assert [a.key for a in spike.alerts] == ["burn_spike|p|2x|2026-03-01"]
    # 52.50 on Mar 28 against the 28 days before it, of which 27 have data: Mar 1-27 (Feb 28 has none)
    spend, baseline = Decimal("10.50") + Decimal("42.00"), 27 * Decimal("10.50") / 27
    assert (f"spent {money(spend)} on Sat 2026-03-28, {spend / baseline:.1f}x its mean of {money(baseline)} per day "
            "with data over the 28 days before (27 with data)") in spike.alerts[0].message
    assert len(slack.posts) == 1


# --- test message, CLI, pages ------------------------------------------------------------------

def test_the_test_message_is_posted_and_logged(on_sample, monkeypatch):
    with slack_stand_in() as slack:
        env = env_with(MLCOST_SLACK_WEBHOOK_URL_GENAI=slack.url(f"/genai/{SECRET}"))
        done = subprocess.run([sys.executable, "-m", "mlcost", "alerts", "test", "--channel", "genai"], env=env,
                              capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
        assert done.returncode == 0 and "posted to the genai channel" in done.stdout
        assert len(slack.posts) == 1 and "test message" in slack.posts[0]["body"]["text"]
    done = subprocess.run([sys.executable, "-m", "mlcost", "alerts", "test"], env=dict(os.environ),
                          capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert done.returncode == 1 and "set MLCOST_SLACK_WEBHOOK_URL" in done.stderr
    assert stored("SELECT channel, ok FROM alert_deliveries ORDER BY attempted_at") == [("genai", True), (None, False)]


def test_the_alerts_page_shows_what_holds_and_the_history(on_sample, monkeypatch):
    with slack_stand_in() as slack:
        monkeypatch.setenv("MLCOST_SLACK_WEBHOOK_URL", slack.url(f"/default/{SECRET}"))
        monkeypatch.setenv("MLCOST_SLACK_WEBHOOK_URL_GENAI", slack.url(f"/genai/{SECRET}"))
        alerts.check(config.load(), AS_OF)
        at = AppTest.from_file(str(APP), default_timeout=120)
        at.run()
        at.switch_page("app_pages/alerts.py").run()
        assert not at.exception, [e.value for e in at.exception]
        history = at.dataframe[0].value
        assert len(history) == len(stored("SELECT * FROM alerts"))
        assert set(history["delivery"]) == {"delivered", "superseded"}
        at.button[1].click().run()  # "Send test message" to the default channel
        assert any("Posted to the default channel" in s.value for s in at.success)
        texts = " ".join(str(e.value) for e in [*at.markdown, *at.caption, *at.success, *at.text])
        assert SECRET not in texts and SECRET not in at.dataframe[1].value.to_string()


def test_the_alerts_page_on_an_empty_warehouse(warehouse, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLCOST_CONFIG", raising=False)
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    at.switch_page("app_pages/alerts.py").run()
    assert not at.exception
    assert any("No alert condition holds" in s.value for s in at.success)
    assert any("No alert has fired yet" in i.value for i in at.info)


def test_two_checks_never_overlap(hand):
    import fcntl

    slack, settings = hand
    tight = settings('name = "p"\nscope = "project:p"\namount = 250')
    lock_path = wh.db_path().with_name(wh.db_path().name + ".alerts.lock")
    with open(lock_path, "a") as held:  # another check is running
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(alerts.CheckRunning, match="still running"):
            alerts.check(tight, date(2026, 3, 21))
    assert slack.posts == [] and stored("SELECT count(*) FROM alerts") == [(0,)]
    assert alerts.check(tight, date(2026, 3, 21)).delivered  # once it is released


# --- spend after the bill's last day, and one as-of day for every rule ----------------------------

BIG_RUN = {"run_id": "vision-big-1125", "project": "vision", "team": "perception", "owner": "alice",
           "start_time": "2026-11-25T08:00:00Z", "end_time": "2026-11-25T18:00:00Z", "instance_type": "p5.48xlarge",
           "estimated_cost_usd": 5000, "status": "completed"}


def sample_data_end() -> date:
    """The sample's last day with data (truth.json: its span ends the day before span_end_exclusive)."""
    about = json.loads((SAMPLE_DIR / "truth.json").read_text())["about"]
    return date.fromisoformat(about["span_end_exclusive"][:10]) - timedelta(days=1)


def test_a_run_after_the_bills_last_day_fires_the_budget_alert_once(on_sample, tmp_path):
    """Issue 20: a $5,000 run for project vision on Nov 25 (budget $3,000) while the bill ends Nov 21."""
    (tmp_path / "big.jsonl").write_text(json.dumps(BIG_RUN) + "\n")
    assert loader.ingest_file(tmp_path / "big.jsonl").ok
    budget = next(b for b in config.load(SAMPLE_CONFIG).budgets if b.name == "vision")
    bill_end, as_of = sample_data_end(), date(2026, 11, 25)
    allocated = allocated_by_day("project", "vision")
    billed = sum((v for d, v in allocated.items() if date(2026, 11, 1) <= d <= bill_end), Decimal(0))
    tagged = sum((v for d, v in bill_spend_by_day(lambda row, tags: tags.get("project") == "vision",
                                                  "EffectiveCost").items()
                  if date(2026, 11, 1) <= d <= bill_end), Decimal(0))
    estimated = Decimal(BIG_RUN["estimated_cost_usd"])
    spent = billed + estimated
    used = float(spent * 100 / budget.amount)
    top = max(p for p in budget.actual_thresholds_pct if used >= p)
    window = [as_of - timedelta(days=6 - i) for i in range(7)]
    with_data = [d for d in window if d <= bill_end or d == as_of]
    week = sum((allocated.get(d, Decimal(0)) for d in window), Decimal(0)) + estimated
    runs = sample_runs()
    by_run = allocated_by_run(window[0], bill_end, lambda run, tags: runs[run]["project"] == "vision")

    with slack_stand_in() as slack:
        env = env_with(MLCOST_SLACK_WEBHOOK_URL=slack.url(f"/default/{SECRET}"),
                       MLCOST_SLACK_WEBHOOK_URL_GENAI=slack.url(f"/genai/{SECRET}"))
        code, first, _ = check(env, "--as-of", "2026-11-26")
        assert code == 0 and first["as_of"] == "2026-11-25"
        key = f"budget_actual|vision|{top:g}%|2026-11-01"
        assert key in first["delivered"]
        post = next(p["body"]["text"] for p in slack.posts if p["body"]["text"].startswith(
            f"mlcost: vision: {used:.0f} % of the budget spent (threshold {top:g} %)"))
        assert (f"Project vision spent {money(week)} in the last 7 days (2026-11-19 to 2026-11-25, 7 days, "
                f"{len(with_data)} with data; budget $3,000.00/month). Top 3 most expensive runs: "
                + top_runs_text(by_run, {BIG_RUN["run_id"]: estimated}) + ".") in post
        assert (f"This month as of 2026-11-25: {money(spent)}, {used:.0f} % of the budget (allocated "
                f"{money(billed)} through {bill_end}, of which tagged {money(tagged)}, + estimated "
                f"{money(estimated)} after it)") in post
        posts = len(slack.posts)
        code, second, _ = check(env, "--as-of", "2026-11-26")
        assert code == 0 and second["new"] == [] and second["delivered"] == [] and len(slack.posts) == posts
        assert key in second["firing"]


def test_every_rule_reads_through_one_as_of_day(on_sample):
    """A check on Nov 25 reads the sample through its last day with data (Nov 21): the CLI says so,
    and the budget and idle alerts state the same 7 days and how many have data."""
    end = sample_data_end()
    done = subprocess.run([sys.executable, "-m", "mlcost", "alerts", "check", "--dry-run", "--as-of", "2026-11-25"],
                          env=dict(os.environ), capture_output=True, text=True, timeout=600, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr
    assert f"hold as of {end} (the last day with data before 2026-11-25)" in done.stdout
    window = f"{end - timedelta(days=6)} to {end}, 7 days, 7 with data"
    messages = [line for line in done.stdout.splitlines() if line.startswith("    ")]
    budget_lines = [m for m in messages if "in the last 7 days" in m and "budget $" in m]
    idle_lines = [m for m in messages if "GPUs were idle" in m]
    assert budget_lines and idle_lines
    assert all(f"({window};" in m for m in budget_lines), budget_lines[0]
    assert all(f"({window})" in m for m in idle_lines), idle_lines[0]
    assert all(f"as of {end}:" in m for m in budget_lines)
