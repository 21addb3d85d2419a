"""`check`: evaluate every rule, record state, post each new alert to Slack once; the Slack message."""
from __future__ import annotations

import fcntl
from dataclasses import dataclass, field
from datetime import date

from outputs import alert_store, slack
from outputs.alerts.common import Alert, _escape
from outputs.alerts.rules import evaluate
from ingest.engine import warehouse as wh
from ingest.settings.sections import Config


@dataclass
class CheckResult:
    """What one check did. New alerts are posted, or held: snoozed, or superseded by a higher
    threshold of the same budget that fired in the same check. `failed` holds (alert keys,
    reason) per failed post; `repeated`, the delivered alerts that an interrupted or unanswered
    earlier post may have delivered already (their message says so)."""

    alerts: list[Alert] = field(default_factory=list)
    new: list[str] = field(default_factory=list)
    resolved: list[str] = field(default_factory=list)
    delivered: list[str] = field(default_factory=list)
    failed: list[tuple[list[str], str]] = field(default_factory=list)
    snoozed: list[str] = field(default_factory=list)
    superseded: list[str] = field(default_factory=list)
    repeated: list[str] = field(default_factory=list)  # delivered, marked as a possible repeat
    # named channels without a webhook of their own whose alerts went to the default webhook: (channel, keys)
    rerouted: list[tuple[str, list[str]]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed


class CheckRunning(RuntimeError):
    """Another `mlcost alerts check` on the same warehouse has not finished."""


def check(settings: Config, as_of: date, dry_run: bool = False, send=slack.send) -> CheckResult:
    """Evaluate every rule, record what fired or resolved, and post every pending alert.

    A dry run writes nothing and posts nothing: `new` lists what a real check would fire.
    `send(url, text, blocks, retry_after_max_s, timeout_s)` posts one message (slack.send; the I/O is
    handed in). Two checks on one warehouse never overlap (a lock file beside it), so a
    pending alert cannot be posted twice by checks started close together.

    Delivery: each post's intent is recorded before the request and its outcome after. A post
    found with its intent but no outcome (the check was killed in between), or one that got no
    answer in time, may be in Slack: the next check re-sends it once, marked as a possible
    repeat; nothing else is ever posted twice."""
    if dry_run:
        result = CheckResult(alerts=evaluate(settings, as_of))
        known = alert_store.known_keys([a.key for a in result.alerts])
        result.new = [a.key for a in result.alerts if a.key not in known]
        return result
    lock_path = wh.db_path().with_name(wh.db_path().name + ".alerts.lock")
    with open(lock_path, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CheckRunning(f"another `mlcost alerts check` on {wh.db_path()} is still running "
                               f"(lock {lock_path}); this one did nothing") from None
        return _check(settings, as_of, send)


def _check(settings: Config, as_of: date, send) -> CheckResult:
    result = CheckResult(alerts=evaluate(settings, as_of))
    at = alert_store.now()
    recorded, result.resolved = alert_store.record(result.alerts, at)
    result.new = list(recorded)
    result.superseded = [key for key, delivery in recorded.items() if delivery == alert_store.SUPERSEDED]
    waiting = alert_store.pending(at)
    waiting_keys = set(waiting["alert_key"])
    result.snoozed = [key for key, delivery in recorded.items() if delivery == alert_store.SNOOZED
                      or (delivery == alert_store.PENDING and key not in waiting_keys)]
    for channel, group in waiting.groupby(waiting["channel"].fillna(""), sort=True):
        name = channel or None
        url = slack.webhook_url(name)
        keys = list(group["alert_key"])
        repeat = set(group.loc[group["repeat"], "alert_key"])
        # A named channel without a webhook of its own falls back to the default webhook (said in
        # the post and by the check), so one webhook is enough to receive every alert.
        rerouted = url is None and name is not None and slack.webhook_url(None) is not None
        if rerouted:
            url = slack.webhook_url(None)
            result.rerouted.append((name, keys))
        if url is None:
            reason = (f"no webhook for the {name or 'default'} channel: {slack.where_to_set(name)}"
                      + (f", or {slack.where_to_set(None)}" if name else ""))
            alert_store.failed(keys, name, alert_store.now(), None, reason, repeat)
            result.failed.append((keys, reason))
            continue
        posts = [keys] if settings.alerts.digest else [[key] for key in keys]
        for post in posts:
            rows = group[group["alert_key"].isin(post)]
            text, blocks = message(rows)
            if rerouted:
                note = f"Meant for the {name} channel, which has no webhook of its own: {slack.where_to_set(name)}."
                text += "\n" + note
                noted = {"type": "context", "elements": [{"type": "mrkdwn", "text": _escape(note)}]}
                blocks = (blocks[:-1] + [noted])[:49] + blocks[-1:]  # Slack takes at most 50 blocks
            alert_store.sending(post)  # the intent, before the request: a kill from here on is seen next time
            outcome = send(url, text, blocks, settings.alerts.retry_after_max_s, settings.alerts.post_timeout_s)
            if outcome.ok:
                alert_store.delivered(post, name, alert_store.now(), outcome.status)
                result.delivered.extend(post)
                result.repeated.extend(key for key in post if key in repeat)
            elif outcome.maybe_delivered:
                alert_store.uncertain(post, name, alert_store.now(), outcome.error or "no answer")
                result.failed.append((post, f"{outcome.error}; the next check re-sends it marked as a possible repeat"))
            else:
                alert_store.failed(post, name, alert_store.now(), outcome.status, outcome.error or "not delivered",
                                   repeat)
                result.failed.append((post, outcome.error or "not delivered"))
    return result


REPEAT_NOTE = ("Possible repeat: an earlier post of this alert was interrupted or got no answer, "
               "so Slack may already show it.")


def message(rows) -> tuple[str, list[dict]]:
    """The plain-text fallback and Block Kit blocks for one post of one or more stored alerts;
    alerts whose earlier post may have reached Slack (`repeat`) are marked as possible repeats."""
    items = list(rows[["alert_key", "title", "message"]].itertuples(index=False))
    repeats = set(rows.loc[rows["repeat"], "alert_key"]) if "repeat" in rows else set()
    if len(items) == 1:
        _, title, text = items[0]
        header = f"mlcost: {title}"
    else:
        header = f"mlcost: {len(items)} alerts"
    if repeats:
        header = "[possible repeat] " + header
    plain = header + "\n" + "\n".join(f"- {title}: {text}" if len(items) > 1 else text
                                      for _, title, text in items)
    if repeats:
        plain += "\n" + REPEAT_NOTE + (f" ({', '.join(sorted(repeats))})" if len(items) > 1 else "")
    blocks: list[dict] = [{"type": "header", "text": {"type": "plain_text", "text": header[:150]}}]
    for _, title, text in items:
        body = f"*{_escape(title)}*\n{_escape(text)}" if len(items) > 1 else _escape(text)
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": body[:3000]}})
    context = "Sent by `mlcost alerts check`" + (f". {REPEAT_NOTE}" if repeats else "")
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": context}]})
    return plain, blocks[:50]


def test_message(channel: str | None, settings: Config, send=slack.send) -> slack.Outcome:
    """Post a test message to `channel` (None: the default) and log it."""
    url = slack.webhook_url(channel)
    if url is None:
        outcome = slack.Outcome(False, None, f"no webhook for the {channel or 'default'} channel: "
                                             f"{slack.where_to_set(channel)}")
    else:
        text = "mlcost test message: alerts for this channel will arrive here."
        outcome = send(url, text, [{"type": "section", "text": {"type": "mrkdwn", "text": text}}],
                       settings.alerts.retry_after_max_s, settings.alerts.post_timeout_s)
    alert_store.log_test(channel, alert_store.now(), outcome.ok, outcome.status, outcome.error)
    return outcome


