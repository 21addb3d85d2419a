"""Alert state in the warehouse: which alerts fired, their delivery, the post log and snoozes.

Tables `alerts`, `alert_deliveries` and `alert_snoozes` (ingest/schema.sql). Every function
opens its own short-lived connection through ingest.engine.warehouse.
"""
from __future__ import annotations

from datetime import datetime, timezone

import pandas as pd

from ingest.engine import warehouse

PENDING, DELIVERED, SNOOZED, SUPERSEDED = "pending", "delivered", "snoozed", "superseded"
# A post's intent is recorded (SENDING) before the request goes out and its outcome after. An
# alert found SENDING by a later check was interrupted between the two; UNCERTAIN: the post got
# no answer in time. Slack may hold either: the next check re-sends it once, marked as a possible
# repeat (outputs/alerts.py).
SENDING, UNCERTAIN = "sending", "uncertain"
INTERRUPTED = ("interrupted: the check stopped after the post went out and before Slack's answer was "
               "recorded; re-sent, marked as a possible repeat")
ANY_RULE = "*"
ALARM, RESOLVED = "alarm", "resolved"


def now() -> datetime:
    return datetime.now(timezone.utc)


def record(alerts: list, at: datetime) -> tuple[dict[str, str], list[str]]:
    """Write the alerts whose condition holds now: new keys become alarms (pending, or snoozed
    when their subject is); stored alarms missing from `alerts` become resolved. A key already
    stored, alarm or resolved, is left as it is: it fires once per period. When one check finds
    several new thresholds of one rule, subject and period (50 % and 80 % at once), only the
    highest is posted; the others are stored as superseded.
    Returns ({new key: its delivery}, resolved keys)."""
    keys = [alert.key for alert in alerts]
    with warehouse.connect() as con:
        con.execute("BEGIN TRANSACTION")
        try:
            known = {row[0] for row in con.execute(
                "SELECT alert_key FROM alerts WHERE alert_key IN (SELECT unnest(?::VARCHAR[]))", [keys]).fetchall()}
            snoozed = _snoozed(con, at)
            new = [alert for alert in alerts if alert.key not in known]
            deliveries: dict[str, str] = {}
            top: dict[tuple, float] = {}
            for alert in new:
                group = (alert.rule, alert.subject, alert.period_start)
                top[group] = max(top.get(group, alert.level), alert.level)
            for alert in new:
                delivery = (SNOOZED if _is_snoozed(snoozed, alert.rule, alert.subject)
                            else SUPERSEDED if alert.level < top[(alert.rule, alert.subject, alert.period_start)]
                            else PENDING)
                con.execute(
                    "INSERT INTO alerts VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, 0, NULL)",
                    [alert.key, alert.rule, alert.subject, alert.threshold, alert.period_start, alert.channel,
                     ALARM, delivery, alert.title, alert.message, at])
                deliveries[alert.key] = delivery
            resolved = [row[0] for row in con.execute(
                "UPDATE alerts SET status = ?, resolved_at = ? WHERE status = ? "
                "AND alert_key NOT IN (SELECT unnest(?::VARCHAR[])) RETURNING alert_key",
                [RESOLVED, at, ALARM, keys]).fetchall()]
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
    return deliveries, sorted(resolved)


def known_keys(keys: list[str]) -> set[str]:
    """Which of these alert keys are already stored (for a dry run)."""
    frame = warehouse.query("SELECT alert_key FROM alerts WHERE alert_key IN (SELECT unnest($keys::VARCHAR[]))",
                            {"keys": keys})
    return set(frame["alert_key"])


def pending(at: datetime) -> pd.DataFrame:
    """Alerts still to post, oldest first, with `repeat`: true when an earlier post of it may
    have reached Slack (interrupted, or unanswered). Those whose subject got snoozed meanwhile
    are marked snoozed instead and left out; an interrupted post is logged as such."""
    with warehouse.connect() as con:
        con.execute("BEGIN TRANSACTION")
        try:
            for rule, subject in _snoozed(con, at):
                con.execute("UPDATE alerts SET delivery = ? WHERE delivery = ? AND (rule = ? OR ? = ?) "
                            "AND subject = ?", [SNOOZED, PENDING, rule, rule, ANY_RULE, subject])
            con.execute("INSERT INTO alert_deliveries SELECT ?::TIMESTAMPTZ, alert_key, channel, false, NULL, ?::VARCHAR "
                        "FROM alerts "
                        "WHERE delivery = ?", [at, INTERRUPTED, SENDING])
            con.execute("UPDATE alerts SET last_error = ? WHERE delivery = ?", [INTERRUPTED, SENDING])
            result = con.execute("SELECT alert_key, rule, subject, channel, title, message, delivery <> ? AS repeat "
                                 "FROM alerts WHERE delivery IN (?, ?, ?) ORDER BY fired_at, alert_key",
                                 [PENDING, PENDING, SENDING, UNCERTAIN])
            columns = [column[0] for column in result.description]
            rows = result.fetchall()
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
    return pd.DataFrame(rows, columns=columns)


def sending(keys: list[str]) -> None:
    """Record the intent to post these alerts (one post), before the request goes out."""
    warehouse.execute([("UPDATE alerts SET delivery = ?, attempts = attempts + 1 WHERE alert_key = ?",
                        [SENDING, key]) for key in keys])


def uncertain(keys: list[str], channel: str | None, at: datetime, error: str) -> None:
    """The post of these alerts got no answer (Slack may have posted it): the next check re-sends
    it once, marked as a possible repeat. Logged."""
    warehouse.execute(
        [("UPDATE alerts SET delivery = ?, last_error = ? WHERE alert_key = ?", [UNCERTAIN, error, key])
         for key in keys]
        + [("INSERT INTO alert_deliveries VALUES (?, ?, ?, false, NULL, ?)", [at, key, channel, error])
           for key in keys])


def delivered(keys: list[str], channel: str | None, at: datetime, status: int | None) -> None:
    """Mark these alerts delivered (one post carried them) and log the post."""
    warehouse.execute(
        [("UPDATE alerts SET delivery = ?, delivered_at = ?, last_error = NULL "
          "WHERE alert_key = ?", [DELIVERED, at, key]) for key in keys]
        + [("INSERT INTO alert_deliveries VALUES (?, ?, ?, true, ?, NULL)", [at, key, channel, status])
           for key in keys])


def failed(keys: list[str], channel: str | None, at: datetime, status: int | None, error: str,
           repeat: set[str] = frozenset()) -> None:
    """A post Slack did not take (refused, an error answer, no webhook): these alerts wait for the
    next check, pending, or uncertain for those in `repeat` (an earlier post may be in Slack, so
    the next one stays marked). Logged."""
    warehouse.execute(
        [("UPDATE alerts SET delivery = ?, last_error = ? WHERE alert_key = ?",
          [UNCERTAIN if key in repeat else PENDING, error, key]) for key in keys]
        + [("INSERT INTO alert_deliveries VALUES (?, ?, ?, false, ?, ?)", [at, key, channel, status, error])
           for key in keys])


def log_test(channel: str | None, at: datetime, ok: bool, status: int | None, error: str | None) -> None:
    """Log a test message's post."""
    warehouse.execute([("INSERT INTO alert_deliveries VALUES (?, NULL, ?, ?, ?, ?)", [at, channel, ok, status, error])])


def snooze(rule: str, subject: str, until: datetime, at: datetime) -> None:
    """Hold alerts of this rule (ANY_RULE: every rule) and subject until `until`, replacing an
    earlier snooze. Alerts that fire meanwhile are stored as snoozed and never posted."""
    warehouse.execute([
        ("DELETE FROM alert_snoozes WHERE rule = ? AND subject = ?", [rule, subject]),
        ("INSERT INTO alert_snoozes VALUES (?, ?, ?, ?)", [rule, subject, until, at]),
    ])


def unsnooze(rule: str, subject: str) -> None:
    warehouse.execute([("DELETE FROM alert_snoozes WHERE rule = ? AND subject = ?", [rule, subject])])


def history(limit: int = 500) -> pd.DataFrame:
    """Every stored alert, newest first."""
    return warehouse.query("""
        SELECT fired_at, rule, subject, threshold, period_start, status, delivery, channel, attempts,
               delivered_at, resolved_at, last_error, title, message, alert_key
        FROM alerts ORDER BY fired_at DESC, alert_key LIMIT $limit
    """, {"limit": limit})


def deliveries(limit: int = 200) -> pd.DataFrame:
    """The latest posts to Slack, newest first."""
    return warehouse.query("""
        SELECT attempted_at, coalesce(alert_key, '(test message)') AS alert, coalesce(channel, '(default)') AS channel,
               ok, http_status, error
        FROM alert_deliveries ORDER BY attempted_at DESC LIMIT $limit
    """, {"limit": limit})


def snoozes(at: datetime) -> pd.DataFrame:
    """Snoozes still in force."""
    return warehouse.query("SELECT rule, subject, until, created_at FROM alert_snoozes WHERE until > $at "
                           "ORDER BY until", {"at": at})


def _is_snoozed(snoozed: set[tuple[str, str]], rule: str, subject: str) -> bool:
    return (rule, subject) in snoozed or (ANY_RULE, subject) in snoozed


def _snoozed(con, at: datetime) -> set[tuple[str, str]]:
    return {(rule, subject) for rule, subject in con.execute(
        "SELECT rule, subject FROM alert_snoozes WHERE until > ?", [at]).fetchall()}
