"""Every alert rule, evaluated as of one day: `evaluate`."""
from __future__ import annotations

from datetime import date

from outputs.alerts.budget import budget_rule_alerts
from outputs.alerts.common import Alert
from outputs.alerts.gpus import idle_alerts
from outputs.alerts.runs import guardrail_alerts
from outputs.alerts.serving import cost_per_1k_alerts, idle_service_alerts, regression_alerts
from ingest.settings.sections import Config

RULES = ("budget_actual", "budget_forecast", "burn_spike", "serving_regression", "idle_waste", "run_guardrail",
         "cost_per_1k_jump", "idle_service")


def evaluate(settings: Config, as_of: date) -> list[Alert]:
    """Every alert whose condition holds as of `as_of` (data up to the day before)."""
    return [*budget_rule_alerts(settings, as_of), *regression_alerts(settings, as_of), *idle_alerts(settings, as_of),
            *guardrail_alerts(settings, as_of), *cost_per_1k_alerts(settings, as_of),
            *idle_service_alerts(settings, as_of)]
