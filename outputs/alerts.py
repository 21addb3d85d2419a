"""Alert rules, their messages, and `check`: evaluate every rule, record state, post to Slack.

Rules (thresholds in mlcost.toml: [[budgets]] and [alerts]):
- budget_actual    a budget's spend this period reached a threshold (% of the amount);
- budget_forecast  its forecast to period end reached a threshold;
- burn_spike       its spend on the last full day is more than burn_spike_factor x its mean
                   daily spend over the burn_spike_baseline_days before;
- serving_regression  a model version's cost or energy per 1k successful requests regressed
                   (the [serving] rule of the Serving page), started in the lookback;
- idle_waste       idle GPU-hours of the last 7 days cost more than idle_waste_usd_per_week.
Each alert fires once per period: a budget's month or quarter, the regressed version's start
day, the month for idle waste.
"""
from __future__ import annotations

import fcntl
from dataclasses import dataclass, field
from datetime import date, timedelta
from decimal import Decimal

import pandas as pd

from metrics import allocation, budget_drivers, budgets, queries
from outputs import alert_store, slack
from metrics.filters import Filters
from present.format import money
from ingest import warehouse as wh
from ingest.config import Config

RULES = ("budget_actual", "budget_forecast", "burn_spike", "serving_regression", "idle_waste")
IDLE_DAYS = 7
TOP_RUNS = 3
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

    @property
    def ok(self) -> bool:
        return not self.failed


def evaluate(settings: Config, as_of: date) -> list[Alert]:
    """Every alert whose condition holds as of `as_of` (data up to the day before)."""
    alerts: list[Alert] = []
    burns = budgets.burns(settings.budgets, settings, as_of)
    crossed = [burn for burn in burns if _crossed(burn, settings)]
    drivers = _top_drivers(crossed, settings)
    for burn in burns:
        alerts.extend(budget_alerts(burn, settings, drivers.get(id(burn))))
    alerts.extend(regression_alerts(settings, as_of))
    alerts.extend(idle_alerts(settings, as_of))
    return alerts


def _crossed(burn: budgets.Burn, settings: Config) -> bool:
    """Whether any threshold or the spike rule of the budget holds."""
    budget = burn.budget
    return (any(burn.used_pct >= pct for pct in budget.actual_thresholds_pct) or burn_spike(burn, settings) is not None
            or any(burn.days_left > 0 and burn.forecast_pct >= pct for pct in budget.forecast_thresholds_pct))


def _top_drivers(burns: list[budgets.Burn], settings: Config) -> dict[int, pd.DataFrame]:
    """The costliest allocation items (budget_drivers) of each billed burn's days so far, by
    id(burn): one allocation of the month for all budgets, not one per budget."""
    billed = [burn for burn in burns if burn.source == "billed" and burn.through is not None]
    found = budget_drivers.drivers_of([(burn.budget, burn.period_start, burn.through + timedelta(days=1))
                                       for burn in billed], allocation.Rules.of(settings), TOP_RUNS)
    return {id(burn): drivers.items for burn, drivers in zip(billed, found)}


def budget_alerts(burn: budgets.Burn, settings: Config, top_items: pd.DataFrame | None = None) -> list[Alert]:
    """Threshold and spike alerts of one budget's period (`top_items`: its budget_drivers items
    when already read for it)."""
    budget, out = burn.budget, []
    spike = burn_spike(burn, settings)
    if not _crossed(burn, settings):
        return out
    summary = _budget_summary(burn, settings, top_items)  # queries for the top drivers: only when an alert will carry it
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
        day, spend, baseline = spike
        title = f"{budget.name}: spend spiked to {spend / baseline:.1f}x its daily mean"
        text = (f"{_sentence(budget.scope_label)} spent {_money(spend, budget.currency)} on {day:%a %Y-%m-%d}, "
                f"{spend / baseline:.1f}x its mean of {_money(baseline, budget.currency)}/day over the "
                f"{settings.alerts.burn_spike_baseline_days} days before. " + summary)
        out.append(_budget_alert(burn, "burn_spike", settings.alerts.burn_spike_factor, title, text))
    return out


def burn_spike(burn: budgets.Burn, settings: Config) -> tuple[date, Decimal, Decimal] | None:
    """(day, its spend, baseline mean per day) when the last counted day is a spike, else None."""
    if burn.through is None or burn.through < burn.period_start:
        return None
    days = settings.alerts.burn_spike_baseline_days
    history = budgets.daily_spend(burn, burn.through - timedelta(days=days), burn.through + timedelta(days=1))
    if len(history) < days + 1 or days == 0:
        return None
    spend = history["spend"].iloc[-1]
    baseline = sum(history["spend"].iloc[:-1], Decimal(0)) / days
    if baseline > 0 and spend > baseline * Decimal(str(settings.alerts.burn_spike_factor)):
        return burn.through, spend, baseline
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
    """Idle GPU-hours of the 7 days before `as_of` that cost more than the weekly threshold."""
    threshold = settings.alerts.idle_waste_usd_per_week
    if threshold <= 0 or queries.gpu_rollup_rule().empty:
        return []
    start, last = as_of - timedelta(days=IDLE_DAYS), as_of - timedelta(days=1)
    models = queries.gpu_models()
    prices = tuple((name, str(settings.prices.gpu(name))) for name in models["gpu_name"]
                   if settings.prices.gpu(name) is not None)
    gpus = queries.idle_by_gpu(Filters(start=start, end=last), prices)
    priced = gpus[gpus["idle_usd"].notna()]
    if priced.empty:
        return []
    cost = Decimal(str(priced["idle_usd"].sum())).quantize(CENT)
    if cost <= threshold:
        return []
    worst = priced.sort_values("idle_usd", ascending=False).head(3)
    named = ", ".join(f"{r.host} GPU {r.gpu_index} ({r.gpu_name}) {r.idle_h:,.1f} h ${r.idle_usd:,.2f}"
                      for r in worst.itertuples())
    idle_h = priced["idle_h"].sum()
    unallocated_h = priced["unallocated_idle_h"].sum()
    text = (f"{len(priced)} GPUs were idle {idle_h:,.1f} GPU-hours from {start:%Y-%m-%d} to {last:%Y-%m-%d}, "
            f"costing ${cost:,.2f} (threshold ${threshold:,.2f}/week); {unallocated_h:,.1f} of those hours no run "
            f"held the GPU. Most idle: {named}. Release or share these GPUs, or shrink the pool (Idle GPUs page).")
    return [Alert("idle_waste", "GPUs", f"${threshold:g}/week", date(last.year, last.month, 1),
                  settings.alerts.channel, f"Idle GPUs cost ${cost:,.2f} in the last 7 days", text)]


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
        if url is None:
            reason = f"no webhook for the {name or 'default'} channel: {slack.where_to_set(name)}"
            alert_store.failed(keys, name, alert_store.now(), None, reason, repeat)
            result.failed.append((keys, reason))
            continue
        posts = [keys] if settings.alerts.digest else [[key] for key in keys]
        for post in posts:
            rows = group[group["alert_key"].isin(post)]
            text, blocks = message(rows)
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


def _budget_summary(burn: budgets.Burn, settings: Config, top_items: pd.DataFrame | None = None) -> str:
    """'Project vision spent $4,210.00 in the last 7 days (budget $10,000.00/month, 82 % used,
    forecast $12,900.00). Top 3 drivers (effective cost): ...' with the figures of this burn:
    the allocation's costliest pieces when billed, else the costliest runs (estimated)."""
    budget, currency = burn.budget, burn.budget.currency
    if burn.through is None:
        return f"No spend data for {budget.scope_label} yet."
    last_7 = sum(budgets.daily_spend(burn, burn.through - timedelta(days=6), burn.through + timedelta(days=1))["spend"],
                 Decimal(0))
    who = "All spend came to" if budget.scope == "all" else f"{_sentence(budget.scope_label)} spent"
    text = (f"{who} {_money(last_7, currency)} in the last 7 days to "
            f"{burn.through:%Y-%m-%d} (budget {_money(budget.amount, currency)}/{budget.period}, "
            f"{burn.used_pct:.0f} % used: {_money(burn.spent, currency)}, forecast {_money(burn.forecast, currency)} "
            f"by {burn.period_end - timedelta(days=1):%Y-%m-%d}; burning {_money(burn.rate_per_day, currency)}/day "
            f"against {_money(burn.allowed_per_day, currency)}/day allowed).")
    if burn.breach_day is not None and burn.breach_in_period and burn.days_to_breach:
        text += f" At this rate it runs out on {burn.breach_day:%Y-%m-%d}."
    if burn.source == "billed":  # what the allocation of the bill puts the period's spend on
        items = top_items if top_items is not None else budget_drivers.drivers(
            budget, allocation.Rules.of(settings), burn.period_start, burn.through + timedelta(days=1), TOP_RUNS).items
        items = items[~items["item"].str.startswith("everything else")]
        if not items.empty:
            text += f" Top {len(items)} drivers (effective cost): " + ", ".join(
                f"{r.item} {_money(r.cost, currency)}" for r in items.itertuples()) + "."
    runs = (queries.budget_top_runs(budget, burn.period_start, burn.period_end, TOP_RUNS)
            if burn.source != "billed" else None)
    if runs is not None and not runs.empty:
        text += f" Top {len(runs)} runs: " + ", ".join(
            f"{r.run_id} ({r.instance_type or 'unknown instance'}) {_money(r.cost_usd, 'USD')}" for r in runs.itertuples()) + "."
    if budget.owner:
        text += f" Owner: {budget.owner}."
    return text + f" Source: {burn.source} cost."


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
