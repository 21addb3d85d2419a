"""Alerts: what fires now, the alert history and Slack posts, snoozes and a test message."""
from datetime import datetime, timedelta, timezone

import streamlit as st

from app import access, cache, settings as settings_page
from app.tables import show
from metrics import budgets
from outputs import alert_store, alerts, slack
from present.format import md

st.title("Alerts")
settings = settings_page.load_or_stop()

rules = settings.alerts
st.caption(
    f"`mlcost alerts check` (run it from cron) evaluates every rule and posts each new alert to Slack once: "
    f"budget thresholds ({len(settings.budgets)} budgets in mlcost.toml), a day's spend over "
    f"{rules.burn_spike_factor:g}× its {rules.burn_spike_baseline_days}-day mean, cost or energy per 1k requests "
    f"regressions started in the last {rules.regression_lookback_days} days, idle GPUs costing over "
    f"${rules.idle_waste_usd_per_week:,.0f} a week, training runs over a guardrail ([alerts] run_max_cost_usd, "
    f"run_max_hours, run_max_gpu_hours), a service's cost per 1k requests over the last 24 hours at least "
    f"{settings.serving.cost_per_1k_jump_ratio:g}× the 24 hours before (with "
    f"{settings.serving.cost_per_1k_min_requests:,} requests or more in each), and services below "
    f"{settings.serving.idle_qps:g} requests per second for {settings.serving.idle_window_hours} hours while "
    "costing money. Each rule and threshold fires once per period; a failed "
    "post is retried on the next check; one interrupted (or unanswered) is re-sent once, marked as a possible "
    "repeat." + (" New alerts go out as one digest per channel." if rules.digest else ""))

today = datetime.now(timezone.utc).date()
as_of = budgets.default_as_of(today)  # the check's day; its figures end on the as-of day
through = budgets.as_of_day(as_of)
st.subheader(f"Holding now (as of {through:%Y-%m-%d})" if through else "Holding now (no data yet)")
if through:
    st.caption(f"Every rule reads data through {through:%Y-%m-%d}, the last day with data; its windows end there.")
holding = cache.alert_conditions(as_of, settings)
posted_before = alert_store.known_keys([alert.key for alert in holding])
if not holding:
    st.success("No alert condition holds.")
for alert in holding:
    fresh = alert.key not in posted_before
    with st.expander(f"{'**New** · ' if fresh else ''}{md(alert.title)}"):
        st.text(alert.message)
        st.caption(f"rule `{alert.rule}`, threshold {md(alert.threshold)}, period from {alert.period_start}, channel "
                   f"{md(alert.channel or 'default')}" + ("; not posted yet: the next check will" if fresh else ""))

st.subheader("History")
history = alert_store.history()
if history.empty:
    st.info("No alert has fired yet. Run `mlcost alerts check` (or `--dry-run` to see what it would send).")
else:
    show(history[["fired_at", "title", "status", "delivery", "channel", "attempts", "delivered_at", "resolved_at",
                  "last_error", "rule", "subject", "threshold", "period_start"]])

st.subheader("Slack posts")
posts = alert_store.deliveries()
if posts.empty:
    st.caption("Nothing posted yet.")
else:
    # an alert by its title, never by its internal key (rule|subject|threshold|period)
    titles = dict(zip(history["alert_key"], history["title"])) if not history.empty else {}
    show(posts.assign(alert=posts["alert"].map(lambda key: titles.get(key, key))),
         labels={"attempted_at": "Attempted (UTC)"}, kinds={"attempted_at": "datetime"})

if access.read_only():
    st.info(access.READ_ONLY_NOTE + " Snooze with `mlcost alerts snooze`, test with `mlcost alerts test`.")
    active = alert_store.snoozes(alert_store.now())
    if not active.empty:
        show(active)
else:
    snooze_col, test_col = st.columns(2)
    with snooze_col.form("snooze"):
        st.markdown("**Snooze**: hold a subject's alerts; those that fire meanwhile are never posted.")
        subjects = sorted({b.name for b in settings.budgets} | {a.subject for a in holding}
                          | set(history["subject"] if not history.empty else []))
        subject = st.selectbox("Budget or subject", subjects)
        days = st.number_input("Days", min_value=0.0, value=7.0, step=1.0, help="0 lifts the snooze")
        if st.form_submit_button("Snooze") and subject:
            now = alert_store.now()
            if days > 0:
                alert_store.snooze(alert_store.ANY_RULE, subject, now + timedelta(days=days), now)
                st.success(f"Alerts of {md(subject)} are held until {now + timedelta(days=days):%Y-%m-%d %H:%M} UTC.")
            else:
                alert_store.unsnooze(alert_store.ANY_RULE, subject)
                st.success(f"Alerts of {md(subject)} are no longer snoozed.")
    active = alert_store.snoozes(alert_store.now())
    if not active.empty:
        show(active, snooze_col)

    with test_col.form("test_message"):
        st.markdown("**Send a test message** to a channel's webhook.")
        channels = ["default"] + sorted({b.channel for b in settings.budgets if b.channel}
                                        | ({rules.channel} if rules.channel else set()))
        channel = st.selectbox("Channel", channels)
        if st.form_submit_button("Send test message"):
            name = None if channel == "default" else channel
            try:
                outcome = alerts.test_message(name, settings)
            except slack.SecretsError as error:
                outcome = slack.Outcome(False, None, str(error))
            if outcome.ok:
                st.success(f"Posted to the {md(channel)} channel.")
            else:
                st.error(f"Not posted: {md(outcome.error)}")
