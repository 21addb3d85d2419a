"""`mlcost alerts check|test|snooze`: budget and waste alerts to Slack, for cron."""
from __future__ import annotations

import argparse
import json
from datetime import date, datetime, timedelta, timezone

from ingest.settings import config
from mlcost.common import EXIT_PROBLEMS, EXIT_USAGE, say

RULES = ["budget_actual", "budget_forecast", "burn_spike", "serving_regression", "idle_waste", "run_guardrail",
         "cost_per_1k_jump", "idle_service"]  # outputs/alerts RULES (not imported: the CLI starts without it)


def register(commands) -> None:
    alerts = commands.add_parser("alerts", help="budget and waste alerts to Slack, for cron",
                                  description="Budget, burn, regression and idle-GPU alerts to Slack.")
    alert_commands = alerts.add_subparsers(required=True, metavar="ACTION", help="what to do")
    check = alert_commands.add_parser(
        "check", help="evaluate every alert rule and post new alerts to Slack",
        description="Evaluate every alert rule, record what fired or resolved, and post each new alert to "
                    "Slack once (run it from cron).")
    check.add_argument("--dry-run", action="store_true", help="print what would fire; record and post nothing")
    check.add_argument("--as-of", metavar="YYYY-MM-DD",
                       help="check as on this day (default today, UTC): every rule reads data through the as-of day, "
                            "the last day with data before it")
    check.add_argument("--json", action="store_true", help="print the result as JSON")
    check.set_defaults(run=run_check)
    test = alert_commands.add_parser("test", help="post a test message to a channel's webhook",
                                     description="Post a test message to a Slack channel's webhook.")
    test.add_argument("--channel", help="a named channel (default: the default webhook)")
    test.set_defaults(run=run_test)
    snooze = alert_commands.add_parser(
        "snooze", help="hold the alerts of a budget (or other subject) for a while",
        description="Hold the alerts of a budget (or a regressed version, or GPUs) for some days: they are "
                    "recorded, never posted.")
    snooze.add_argument("subject", help='the budget name, "SERVICE VERSION" of a regression, a service, a run id, or GPUs')
    snooze.add_argument("--rule", choices=RULES, help="only this rule (default: every rule)")
    snooze.add_argument("--days", type=float, default=7.0, help="how long (default 7 days; 0 lifts the snooze)")
    snooze.set_defaults(run=run_snooze)


def run_check(args: argparse.Namespace) -> int:
    """Evaluate, record, post; exit 1 when a post failed (the alert waits for the next check)."""
    from metrics import budgets
    from outputs import alerts, slack

    try:
        as_of = date.fromisoformat(args.as_of) if args.as_of else datetime.now(timezone.utc).date()
    except ValueError:
        say(f"--as-of {args.as_of!r} is not a date (YYYY-MM-DD)")
        return EXIT_USAGE
    try:
        result = alerts.check(config.load(), as_of, dry_run=args.dry_run)
    except slack.SecretsError as error:
        say(str(error))
        return EXIT_USAGE
    except alerts.CheckRunning as running:
        say(str(running))
        return EXIT_PROBLEMS
    by_key = {alert.key: alert for alert in result.alerts}
    if args.json:
        print(json.dumps({
            "checked_on": as_of.isoformat(), "as_of": (budgets.as_of_day(as_of) or as_of).isoformat(),
            "dry_run": args.dry_run,
            "firing": [alert.key for alert in result.alerts], "new": result.new, "resolved": result.resolved,
            "delivered": result.delivered, "snoozed": result.snoozed, "superseded": result.superseded,
            "repeated": result.repeated,
            "rerouted": [{"channel": channel, "alerts": keys} for channel, keys in result.rerouted],
            "failed": [{"alerts": keys, "reason": reason} for keys, reason in result.failed],
        }, indent=2))
    else:
        verb = "would fire" if args.dry_run else "new"
        through = budgets.as_of_day(as_of)
        print(f"mlcost: {len(result.alerts)} alert conditions hold as of {through or 'no data'} (the last day with "
              f"data before {as_of}); {len(result.new)} {verb}, "
              f"{len(result.resolved)} resolved, {len(result.delivered)} posted to Slack"
              + (f", {len(result.superseded)} left unposted under a higher threshold" if result.superseded else "")
              + (f", {len(result.snoozed)} snoozed" if result.snoozed else "")
              + (f"; {len(result.repeated)} re-sent marked as a possible repeat (an earlier post was interrupted "
                 "or unanswered)" if result.repeated else ""))
        for key in result.new:
            print(f"  {'WOULD FIRE' if args.dry_run else 'NEW'} {by_key[key].title}\n    {by_key[key].message}")
    for channel, keys in result.rerouted:  # on stderr: the user may want the channel's own webhook
        say(f"the {channel} channel has no webhook of its own: its {len(keys)} alerts went to the default "
            f"webhook ({slack.where_to_set(channel)})")
    for keys, reason in result.failed:  # on stderr with --json too, for cron's mail and logs
        verdict = "NO ANSWER" if "may have posted it" in reason else "NOT POSTED"
        say(f"{verdict} ({len(keys)} alerts, left for the next check): {reason}")
    return EXIT_PROBLEMS if result.failed else 0


def run_test(args: argparse.Namespace) -> int:
    from outputs import alerts, slack

    try:
        outcome = alerts.test_message(args.channel, config.load())
    except slack.SecretsError as error:
        say(str(error))
        return EXIT_USAGE
    channel = args.channel or "default"
    if outcome.ok:
        print(f"mlcost: test message posted to the {channel} channel")
        return 0
    say(f"test message to the {channel} channel failed: {outcome.error}")
    return EXIT_PROBLEMS


def run_snooze(args: argparse.Namespace) -> int:
    from outputs import alert_store

    rule = args.rule or alert_store.ANY_RULE
    at = alert_store.now()
    if args.days <= 0:
        alert_store.unsnooze(rule, args.subject)
        print(f"mlcost: alerts of {args.subject!r} are no longer snoozed")
        return 0
    until = at + timedelta(days=args.days)
    alert_store.snooze(rule, args.subject, until, at)
    print(f"mlcost: {'every' if args.rule is None else args.rule} alert of {args.subject!r} is held until "
          f"{until:%Y-%m-%d %H:%M} UTC")
    return 0
