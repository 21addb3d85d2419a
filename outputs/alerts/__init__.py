"""Alert rules, their messages, and `check`: evaluate every rule, record state, post to Slack.

Rules (thresholds in mlcost.toml: [[budgets]], [alerts] and [serving]), one module per topic:
- budget.py   budget_actual    a budget's spend this period reached a threshold (% of the amount);
              budget_forecast  its forecast to period end reached a threshold;
              burn_spike       its spend on the last full day is more than burn_spike_factor x its
                               mean daily spend over the burn_spike_baseline_days before;
- serving.py  serving_regression  a model version's cost or energy per 1k successful requests
                               regressed (the [serving] rule of the Serving page), started in the lookback;
              cost_per_1k_jump a service's cost per 1,000 requests over the last 24 hours is at least
                               cost_per_1k_jump_ratio x the 24 hours before (the seed: "Service B cost
                               per 1,000 requests increased 2x in the last 24 hours; new model version: ...");
              idle_service     a service served fewer than idle_qps requests per second in every window
                               of the last idle_window_hours while costing money;
- gpus.py     idle_waste       idle GPU-hours of the last 7 days cost more than idle_waste_usd_per_week;
- runs.py     run_guardrail    a run over its cost ceiling, wall-clock hours or GPU-hours.
Every rule reads data through one day, the as-of day (metrics/budgets.as_of_day: the last day
with data before the check), and its windows end there. A budget alert reads as the seed's:
"Project vision spent $X in the last 7 days (budget $Y/month). Top 3 most expensive runs: ...",
then the period's spend in its parts (billed or allocated through the bill's last day + estimated
after it). Each alert fires once per period: a budget's month or quarter, the regressed version's
start day, the as-of day for a cost-per-1k jump, the month for idle waste and an idle service, the
run's start day for a guardrail. rules.py evaluates them all; delivery.py records and posts.
"""
from outputs.alerts.budget import budget_alerts, burn_spike  # noqa: F401
from outputs.alerts.common import Alert  # noqa: F401
from outputs.alerts.delivery import REPEAT_NOTE, CheckResult, CheckRunning, check, message, test_message  # noqa: F401
from outputs.alerts.gpus import idle_alerts  # noqa: F401
from outputs.alerts.rules import RULES, evaluate  # noqa: F401
from outputs.alerts.runs import guardrail_alerts  # noqa: F401
from outputs.alerts.serving import cost_per_1k_alerts, idle_service_alerts, regression_alerts  # noqa: F401
