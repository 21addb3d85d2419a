"""A webhook token planted in the URL never shows: whatever form a failure takes (a space in
the URL, a server error quoting the path raw, URL-encoded or inside JSON, a timeout, a refused
connection, a character urllib refuses), neither stdout, stderr, Python's logs, any table of
the warehouse (dumped as text) nor the Alerts page holds any piece of it, in any encoding."""
from __future__ import annotations

import logging
import os
import subprocess
import sys
from datetime import date
from urllib.parse import quote, quote_plus

from streamlit.testing.v1 import AppTest

from outputs import alerts, slack as slack_module
from ingest.engine import warehouse as wh
from ingest.settings import config
from tests.conftest import REPO_ROOT
from tests.slack_server import refused_url
from tests.test_alerts import APP, hand  # noqa: F401 (hand is a fixture)

PIECES = ("T0PLANT9", "B0PLANT9", "xoxPlanted", "Secret42")  # every secret piece of the URLs below
PATH = "/services/T0PLANT9/B0PLANT9/xoxPlantedSecret42"
BUDGET = 'name = "p"\nscope = "project:p"\namount = 250\nforecast_thresholds_pct = [100]'


def leaks(text: str) -> list[str]:
    """The secret pieces (or their encodings) found in `text`, case-insensitively."""
    forms = {form for piece in PIECES for form in (piece, quote(piece, safe=""), quote_plus(piece))}
    return sorted(form for form in forms if form.lower() in text.lower())


def hostile_webhooks(slack) -> dict[str, str]:
    """A name -> webhook URL holding the planted token, each failing in its own way."""
    return {
        "a space in the URL": slack.url(PATH.replace("xoxPlantedSecret42", "xoxPlanted Secret42")),
        "path echoed raw": slack.url(PATH),
        "path echoed URL-encoded": slack.url(PATH + "?x=1"),
        "path echoed in JSON": slack.url(PATH),
        "no answer in time": slack.url(PATH),
        "refused": refused_url().rsplit("/services", 1)[0] + PATH,
        "non-ASCII in the URL": slack.url(PATH + "é"),
        "not a URL": "hooks.slack.com" + PATH,
    }


def script(slack, name: str) -> None:
    answers = {"path echoed raw": (404, {}, "no_service: {path}"),
               "path echoed URL-encoded": (400, {}, "invalid_payload for {path_encoded}"),
               "path echoed in JSON": (403, {}, '{"ok": false, "error": "invalid_token", "url": "{path}"}')}
    slack.script.clear()
    for number in range(slack.requests + 1, slack.requests + 5):  # a check's two posts, a test message
        if name in answers:
            slack.answer(answers[name])
        if name == "no answer in time":
            slack.stall_at(number, 2.5)


def warehouse_as_text() -> str:
    with wh.connect() as con:
        tables = [row[0] for row in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'").fetchall()]
        return "\n".join(f"{table}: {con.execute(f'SELECT * FROM {table}').fetchall()}" for table in tables)


def test_a_planted_token_never_shows_anywhere(hand, tmp_path, monkeypatch, caplog, capsys):
    slack, settings = hand
    settings(BUDGET, "post_timeout_s = 1")
    monkeypatch.setenv("MLCOST_CONFIG", str(tmp_path / "mlcost.toml"))
    caplog.set_level(logging.DEBUG)
    tried = 0
    for name, url in hostile_webhooks(slack).items():
        # a check in a new process, as cron runs it (and a test message, for two of them)
        env = {**os.environ, "MLCOST_SLACK_WEBHOOK_URL": url}
        commands = [["alerts", "check", "--as-of", "2026-03-21"]] + (
            [["alerts", "test"]] if name in ("a space in the URL", "path echoed raw") else [])
        for command in commands:
            script(slack, name)
            done = subprocess.run([sys.executable, "-m", "mlcost", *command], env=env, cwd=REPO_ROOT,
                                  capture_output=True, text=True, timeout=300)
            assert done.returncode == 1, (name, done.stderr)
            assert leaks(done.stdout + done.stderr) == [], (name, command, done.stdout + done.stderr)
            tried += 1
        # and in this process, with every logger at DEBUG
        script(slack, name)
        monkeypatch.setenv("MLCOST_SLACK_WEBHOOK_URL", url)
        result = alerts.check(config.load(), date(2026, 3, 21))
        assert not result.ok and result.delivered == []
        script(slack, name)
        outcome = alerts.test_message(None, config.load())
        assert not outcome.ok and leaks(str(result.failed) + str(outcome)) == [], name
    assert tried == 10
    assert leaks(caplog.text) == [] and leaks(capsys.readouterr().err) == []
    errors = wh.query("SELECT error FROM alert_deliveries WHERE NOT ok")["error"]
    assert len(errors) >= 8 * 5  # every failure was recorded, with a reason
    assert any("not a valid URL" in e for e in errors) and any("refused" in e for e in errors)
    assert any("may have posted it" in e for e in errors) and any("HTTP 404" in e for e in errors)
    assert leaks(warehouse_as_text()) == []

    at = AppTest.from_file(str(APP), default_timeout=120)
    at.run()
    at.switch_page("app_pages/alerts.py").run()
    assert not at.exception, [e.value for e in at.exception]
    at.button[1].click().run()  # "Send test message": fails, and says why
    assert at.error and "Not posted" in at.error[0].value
    shown = " ".join(str(e.value) for e in [*at.markdown, *at.caption, *at.error, *at.success, *at.text, *at.info])
    shown += " ".join(frame.value.to_string() for frame in at.dataframe)
    assert "HTTP 404" in shown and leaks(shown) == []


def test_scrub_removes_every_form_of_the_url():
    url = "https://hooks.slack.com/services/T0PLANT9/B0PLANT9/xoxPlanted Secret42"
    quoted = [url, quote(url, safe=""), quote_plus(url), "/services/T0PLANT9/B0PLANT9/xoxPlanted%20Secret42",
              '"\\/services\\/T0PLANT9\\/B0PLANT9"', "xoxplanted", quote(url, safe="").lower()]
    for text in quoted:
        assert leaks(slack_module.scrub(f"error: {text} (end)", url)) == [], text
    assert slack_module.scrub("HTTP 500: internal_error", url) == "HTTP 500: internal_error"
