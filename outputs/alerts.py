"""Alert rules, their messages, and `check`: evaluate every rule, record state, post to Slack.

Rules (thresholds in mlcost.toml: [[budgets]] and [alerts]):
- budget_actual    a budget's spend this period reached a threshold (% of the amount);
- budget_forecast  its forecast to period end reached a threshold;
- burn_spike       its spend on the last full day is more than burn_spike_factor x its mean
                   daily spend over the burn_spike_baseline_days before;
- serving_regression  a model version's cost or energy per 1k successful requests regressed
                   (the [serving] rule of the Serving page), started in the lookback;
- idle_waste       idle GPU-hours of the last 7 days cost more than idle_waste_usd_per_week.
Every rule reads data through one day, the as-of day (metrics/budgets.as_of_day: the last day
with data before the check), and its windows end there, saying their days and how many have
data. A budget alert reads as the seed's: "Project vision spent $X in the last 7 days (budget
$Y/month). Top 3 most expensive runs: ...", then the period's spend in its parts (billed or
allocated through the bill's last day + estimated after it).
Each alert fires once per period: a budget's month or quarter, the regressed version's start
day, the month for idle waste.
"""
from __future__ import annotations

import fcntl
from dataclasses import dataclass, field
from datetime import date, timedelta
from decimal import Decimal

import pandas as pd

from metrics import allocation, budgets, idle, queries
from outputs import alert_store, slack
from metrics.filters import Filters
from present.format import money
from ingest.engine import warehouse as wh
from ingest.settings.config import Config

RULES = ("budget_actual", "budget_forecast", "burn_spike", "serving_regression", "idle_waste")
IDLE_DAYS = 7
TOP_RUNS = budgets.TOP_RUNS
CENT = Decimal("0.01")


@dataclass(frozen=True)
class Alert:
    rule: str
    subject: str          # the budget's name, "service version metric", or "GPUs"
    threshold: str        # "80%", "2x", "$200/week", the regression's metric
    period_start: date
    channel: str | None   # named channel, None for the default webhook
    title: str
    message: str
    level: float = 0.0    # among new alerts of one rule, subject and period only the highest level is posted

    @property
    def key(self) -> str:
        return f"{self.rule}|{self.subject}|{self.threshold}|{self.period_start:%Y-%m-%d}"


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


def evaluate(settings: Config, as_of: date) -> list[Alert]:
    """Every alert whose condition holds as of `as_of` (data up to the day before)."""
    alerts: list[Alert] = []
    burns = budgets.burns(settings.budgets, settings, as_of)
    crossed = [burn for burn in burns if _crossed(burn, settings)]
    runs = budgets.top_runs(crossed, settings, TOP_RUNS)  # read only for budgets that will alert
    for burn in burns:
        alerts.extend(budget_alerts(burn, settings, runs.get(id(burn))))
    alerts.extend(regression_alerts(settings, as_of))
    alerts.extend(idle_alerts(settings, as_of))
    alerts.extend(guardrail_alerts(settings, as_of))
    return alerts


def _crossed(burn: budgets.Burn, settings: Config) -> bool:
    """Whether any threshold or the spike rule of the budget holds."""
    budget = burn.budget
    return (any(burn.used_pct >= pct for pct in budget.actual_thresholds_pct) or burn_spike(burn, settings) is not None
            or any(burn.days_left > 0 and burn.forecast_pct >= pct for pct in budget.forecast_thresholds_pct))


def budget_alerts(burn: budgets.Burn, settings: Config, top_runs: pd.DataFrame | None = None) -> list[Alert]:
    """Threshold and spike alerts of one budget's period (`top_runs`: its budgets.top_runs when
    already read for it)."""
    budget, out = burn.budget, []
    spike = burn_spike(burn, settings)
    if not _crossed(burn, settings):
        return out
    summary = _budget_summary(burn, settings, top_runs)  # queries for the top runs: only when an alert will carry it
    for pct in budget.actual_thresholds_pct:
        if burn.used_pct >= pct:
            out.append(_budget_alert(burn, "budget_actual", pct,
                                     f"{budget.name}: {burn.used_pct:.0f} % of the budget spent (threshold {pct:g} %)", summary))
    for pct in budget.forecast_thresholds_pct:
        if burn.days_left > 0 and burn.forecast_pct >= pct:
            out.append(_budget_alert(burn, "budget_forecast", pct,
                                     f"{budget.name}: forecast {burn.forecast_pct:.0f} % of the budget (threshold {pct:g} %)",
                                     summary))
    if spike is not None:
        day, spend, baseline, with_data = spike
        title = f"{budget.name}: spend spiked to {spend / baseline:.1f}x its daily mean"
        text = (f"{_sentence(budget.scope_label)} spent {_money(spend, budget.currency)} on {day:%a %Y-%m-%d}, "
                f"{spend / baseline:.1f}x its mean of {_money(baseline, budget.currency)} per day with data over the "
                f"{settings.alerts.burn_spike_baseline_days} days before ({with_data} with data). " + summary)
        out.append(_budget_alert(burn, "burn_spike", settings.alerts.burn_spike_factor, title, text))
    return out


def burn_spike(burn: budgets.Burn, settings: Config) -> tuple[date, Decimal, Decimal, int] | None:
    """(day, its spend, baseline mean per day with data, days with data in the baseline) when the
    as-of day is a spike, else None. The baseline is the burn_spike_baseline_days before it."""
    if burn.through is None or burn.through < burn.period_start:
        return None
    days = settings.alerts.burn_spike_baseline_days
    history = budgets.daily_spend(burn, burn.through - timedelta(days=days), burn.through + timedelta(days=1))
    if len(history) < days + 1 or days == 0 or not history["has_data"].iloc[-1]:
        return None
    before = history.iloc[:-1]
    counted = [spend for spend, has in zip(before["spend"], before["has_data"]) if has]
    if not counted:
        return None
    spend = history["spend"].iloc[-1]
    baseline = sum(counted, Decimal(0)) / len(counted)
    if baseline > 0 and spend > baseline * Decimal(str(settings.alerts.burn_spike_factor)):
        return burn.through, spend, baseline, len(counted)
    return None


def regression_alerts(settings: Config, as_of: date) -> list[Alert]:
    """Model versions that regressed (Serving page rule) and started within the lookback."""
    rule = settings.serving
    found = queries.serving_regressions(Filters(), rule.regression_pct, rule.min_requests)
    since = as_of - timedelta(days=settings.alerts.regression_lookback_days)
    out = []
    for row in found.itertuples():
        started = pd.Timestamp(row.start_date).date()
        if not since <= started < as_of:
            continue
        is_cost = "cost" in row.metric
        before, after = (money(row.before, "USD", 4), money(row.after, "USD", 4)) if is_cost else (
            f"{row.before:,.2f} Wh", f"{row.after:,.2f} Wh")
        what = "costs" if is_cost else "uses"
        text = (f"Service {row.service} {row.to_version} {what} {row.change_pct:.0f} % more per 1k successful "
                f"requests than {row.from_version}: {after} against {before} ({row.metric}), since "
                f"{started:%Y-%m-%d}, over {int(row.to_requests_success):,} successful requests. "
                f"Compare the two versions on the Serving page; roll back or resize if the change was not intended.")
        out.append(Alert("serving_regression", f"{row.service} {row.to_version}", row.metric, started,
                         settings.alerts.channel,
                         f"{row.service} {row.to_version}: {'cost' if is_cost else 'energy'} per 1k requests "
                         f"{row.change_pct:.0f} % worse than {row.from_version}", text))
    return out


def idle_alerts(settings: Config, as_of: date) -> list[Alert]:
    """Idle GPU-hours of the 7 days ending at the as-of day that cost more than the weekly threshold."""
    threshold = settings.alerts.idle_waste_usd_per_week
    through = budgets.as_of_day(as_of)
    if threshold <= 0 or through is None or queries.gpu_rollup_rule().empty:
        return []
    window = budgets.window(through, IDLE_DAYS)
    start, last = window.first, window.last
    models = queries.gpu_models()
    prices = tuple((name, str(settings.prices.gpu(name))) for name in models["gpu_name"]
                   if settings.prices.gpu(name) is not None)
    gpus = queries.idle_by_gpu(Filters(start=start, end=last), prices)
    priced = gpus[gpus["idle_usd"].notna()]
    if priced.empty:
        return []
    # the idle cost (metrics/idle.py): billed nodes' both parts (USD), plus hosts without bill lines at catalog prices
    found = idle.idle_cost(start, last + timedelta(days=1), allocation.Rules.of(settings),
                           tuple(settings.prices.gpu_usd_per_hour.items()))
    parts = found.billed.get("USD")
    cost = sum((p.shown().cost for p in (parts, found.estimated) if p is not None), Decimal(0))
    if cost <= threshold:
        return []
    worst = priced.sort_values("idle_usd", ascending=False).head(3)
    named = ", ".join(f"{r.host} GPU {r.gpu_index} ({r.gpu_name}) {r.idle_h:,.1f} h ${r.idle_usd:,.2f}"
                      for r in worst.itertuples())
    idle_h = priced["idle_h"].sum()
    text = (f"{len(priced)} GPUs were idle {idle_h:,.1f} GPU-hours in the last {window.days} days "
            f"({window.text()}), costing ${cost:,.2f} (threshold ${threshold:,.2f}/week): "
            + "; ".join(t for t in ((idle.parts_text(parts) if parts else None), idle.estimated_text(found)) if t)
            + f". Most idle: {named}. Release or share these GPUs, or shrink the pool (Idle GPUs page).")
    return [Alert("idle_waste", "GPUs", f"${threshold:g}/week", date(last.year, last.month, 1),
                  settings.alerts.channel, f"Idle GPUs cost ${cost:,.2f} in the last {window.days} days", text)]


def guardrail_alerts(settings: Config, as_of: date) -> list[Alert]:
    """Training runs that started in the guardrail lookback ending at the as-of day and are over a
    run guardrail ([alerts] run_max_cost_usd, run_max_hours, run_max_gpu_hours; per project
    [alerts.run_limits.PROJECT]): one alert per run, naming it, its owner and its figures."""
    rules = settings.alerts
    if not any(limits.max_cost_usd or limits.max_hours or limits.max_gpu_hours
               for limits in (rules.run_limits, *rules.project_run_limits.values())):
        return []
    through = budgets.as_of_day(as_of)
    if through is None:
        return []
    window = budgets.window(through, rules.guardrail_lookback_days, data_days=())
    own = tuple((project, float(limits.max_cost_usd), limits.max_hours, limits.max_gpu_hours)
                for project, limits in sorted(rules.project_run_limits.items()))
    over = queries.runs_over_limits(Filters(start=window.first, end=window.last), float(rules.run_limits.max_cost_usd),
                                    rules.run_limits.max_hours, rules.run_limits.max_gpu_hours, own)
    out = []
    for run in over.itertuples():
        figures, which = [], []
        if run.over_cost:
            figures.append(f"it cost ${run.cost_usd:,.2f}, over the ${run.max_cost_usd:,.2f} ceiling per run"
                           + ("" if run.cost_source == "given" else f" (estimated: {run.cost_source})"))
            which.append("cost")
        if run.over_hours:
            figures.append(f"it ran {run.duration_h:,.1f} wall-clock hours, over the {run.max_hours:g} h maximum")
            which.append("hours")
        if run.over_gpu_hours:
            figures.append(f"it used {run.gpu_hours:,.1f} GPU-hours, over the {run.max_gpu_hours:g} GPU-hours per run")
            which.append("gpu_hours")
        started = pd.Timestamp(run.started_at).tz_convert("UTC").to_pydatetime()
        owner = run.owner if isinstance(run.owner, str) else "no owner logged"
        project = run.project if isinstance(run.project, str) else "(no project)"
        text = (f"Run {run.run_id} of project {project} (owner {owner}, started {started:%Y-%m-%d %H:%M} UTC"
                + (", still running" if run.status == "running" else "") + "): " + "; ".join(figures)
                + ". A single run this large should be rare and intentional: check that it was meant, and stop or "
                  "resize it if not (Training runs page).")
        out.append(Alert("run_guardrail", run.run_id, "+".join(which), started.date(), rules.channel,
                         f"Run {run.run_id} ({owner}) over its guardrail: {', '.join(which).replace('_', ' ')}", text))
    return out


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


def _budget_summary(burn: budgets.Burn, settings: Config, top_runs: pd.DataFrame | None = None) -> str:
    """The seed's budget alert with this burn's figures: 'Project vision spent $X in the last 7 days
    (2026-11-19 to 2026-11-25, 7 days, 4 with data; budget $3,000.00/month). Top 3 most expensive
    runs: ...', then the period's spend in its parts, the forecast and the owner."""
    budget, currency = burn.budget, burn.budget.currency
    if burn.through is None or burn.rate_window is None:
        return f"No spend data for {budget.scope_label} yet."
    window = burn.rate_window
    who = "All spend came to" if budget.scope == "all" else f"{_sentence(budget.scope_label)} spent"
    text = (f"{who} {_money(budgets.spent_in(burn, window), currency)} in the last {window.days} days "
            f"({window.text()}; budget {_money(budget.amount, currency)}/{budget.period}).")
    runs = top_runs if top_runs is not None else budgets.top_runs([burn], settings, TOP_RUNS)[id(burn)]
    if runs.empty:
        text += " No run has cost in this window."
    else:
        text += f" Top {len(runs)} most expensive runs: " + ", ".join(
            f"{r.run_id} {_money(r.cost, currency)}" + ("" if r.source == "allocated" else f" ({r.source})")
            for r in runs.itertuples()) + "."
    text += (f" This {budget.period} as of {burn.through:%Y-%m-%d}: {_money(burn.spent, currency)}, "
             f"{burn.used_pct:.0f} % of the budget ({burn.parts_text(_money)}); forecast "
             f"{_money(burn.forecast, currency)} by {burn.period_end - timedelta(days=1):%Y-%m-%d}, burning "
             f"{_money(burn.rate_per_day, currency)} per day with data against "
             f"{_money(burn.allowed_per_day, currency)}/day allowed.")
    if burn.breach_day is not None and burn.breach_in_period and burn.days_to_breach:
        text += f" At this rate it runs out on {burn.breach_day:%Y-%m-%d}."
    if budget.owner:
        text += f" Owner: {budget.owner}."
    return text


def _budget_alert(burn: budgets.Burn, rule: str, level: float, title: str, text: str) -> Alert:
    threshold = f"{level:g}x" if rule == "burn_spike" else f"{level:g}%"
    reason = {"budget_actual": f"Spend passed {threshold} of the budget. ",
              "budget_forecast": f"The forecast passed {threshold} of the budget. "}.get(rule, "")
    return Alert(rule, burn.budget.name, threshold, burn.period_start, burn.budget.channel, title,
                 reason + text, level)


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def _money(amount, currency: str) -> str:
    """'$1,234.56', '-$12.00', '1,234.56 EUR': the one money format of every surface (present.format)."""
    return money(amount, currency)


def _escape(text: str) -> str:
    """Slack mrkdwn treats &, < and > as control characters."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
