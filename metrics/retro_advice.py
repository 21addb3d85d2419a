"""The retrospective's recommendations (RULES, in the order they are listed): each rule reads the
month's Context (and the figures of metrics/retro_sections.py) and returns the recommendations it
makes, each quoting the number behind it."""
from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

from metrics import idle, queries
from metrics.retro_report import BILL_CHANGE_LABEL, Context, Figure, Recommendation, sum_money
from metrics.retro_sections import budget_burns, money_text, run_standing, version_changes, weekend_idle


def _right_size(ctx: Context) -> list[Recommendation]:
    threshold = ctx.settings.gpu.right_size_util_pct
    candidates = ctx.fetch(queries.right_size_candidates, ctx.current_range, threshold)
    found = []
    for c in candidates.itertuples():
        if c.run_gpu_h < ctx.settings.retrospective.right_size_min_gpu_h:
            continue
        evidence = f"{c.mean_util_pct:.1f} %"
        found.append(Recommendation(
            "right_size",
            f"{c.host} GPU {c.gpu_index} ({c.gpu_name}) averaged {evidence} utilization over "
            f"{c.run_gpu_h:,.1f} GPU-hours of {c.project} runs (under {threshold:g} %): a smaller GPU would do.",
            evidence, float(c.mean_util_pct)))
    return found


def _dominated(ctx: Context) -> list[Recommendation]:
    standing = run_standing(ctx)
    dominated = standing[(standing["on_frontier"] == False) & standing["dominating_cost_usd"].notna()]
    dominated = dominated[dominated["cost_usd"].astype(float)
                          >= ctx.settings.retrospective.dominated_min_ratio
                          * dominated["dominating_cost_usd"].astype(float)]
    if dominated.empty:
        return []
    spent, cheaper = sum_money(dominated["cost_usd"]), sum_money(dominated["dominating_cost_usd"])
    ratio = float(spent) / float(cheaper)
    evidence = f"{ratio:.1f}x"
    projects = ", ".join(sorted(dominated["project"].unique()))
    return [Recommendation(
        "dominated_runs",
        f"{len(dominated)} run{'' if len(dominated) == 1 else 's'} {'was' if len(dominated) == 1 else 'were'} dominated ({projects}): another run of the project reached the same metric "
        f"or better for {evidence} less (${spent:,.2f} spent where ${cheaper:,.2f} did); reuse the frontier "
        "runs' configurations.", evidence, ratio)]


def _regressions(ctx: Context) -> list[Recommendation]:
    changes = version_changes(ctx)
    found = []
    for c in changes[changes["is_regression"]].itertuples() if not changes.empty else ():
        evidence = f"{c.change_pct:.1f} %"
        what = ("costs", "per 1k successful requests", f"${c.before:,.4f} → ${c.after:,.4f}") \
            if c.metric == "cost_per_1k_success_usd" else \
            ("uses", "energy per 1k successful requests", f"{c.before:,.2f} → {c.after:,.2f} Wh")
        found.append(Recommendation(
            "serving_regression",
            f"Service {c.service} {c.to_version} {what[0]} {evidence} more {what[1]} than {c.from_version} "
            f"({what[2]}, since {c.start_date:%Y-%m-%d}): review its replicas or roll back.",
            evidence, float(c.change_pct)))
    return found


def _weekend_idle(ctx: Context) -> list[Recommendation]:
    hours, dollars = weekend_idle(ctx, ctx.current_range)
    if dollars is None or dollars < Decimal(str(ctx.settings.retrospective.weekend_idle_min_usd)):
        return []
    evidence = f"${dollars:,.0f}"
    return [Recommendation(
        "weekend_idle",
        f"{hours:,.0f} idle GPU-hours on weekends cost {evidence}: scale the nodes down or schedule batch jobs "
        "on Saturdays and Sundays.", evidence, float(dollars))]


def _idle_share(ctx: Context) -> list[Recommendation]:
    gpus = ctx.fetch(queries.idle_by_gpu, ctx.current_range, ctx.gpu_prices())
    if gpus.empty or not gpus["observed_h"].sum():
        return []
    share = float(gpus["idle_h"].sum() / gpus["observed_h"].sum() * 100)
    if share <= ctx.settings.retrospective.idle_share_pct:
        return []
    evidence = f"{share:.0f} %"
    found = ctx.idle(ctx.current_range)
    cost = "".join(f" ({idle.parts_text(parts)})" for parts in found.billed.values())
    return [Recommendation(
        "idle_share",
        f"The traced GPUs were idle {evidence} of their observed hours{cost}: fewer nodes, or more jobs "
        "on them, would do the same work.", evidence, share)]


def bill_change(ctx: Context) -> list[Figure]:
    """The bill's change, one figure per currency: the charges of the compared days (the comparison
    window: whole months, or the same days of the month before), as the Spend section shows it."""
    spend = ctx.sections.get("spend")
    return [f for f in (spend.figures if spend else ()) if f.label.startswith(BILL_CHANGE_LABEL)]


def _spend_change(ctx: Context) -> list[Recommendation]:
    """A bill that moved more than spend_change_pct, over the compared days (bill_change())."""
    found = []
    for figure in bill_change(ctx):
        if figure.change_pct is None:
            continue
        change = figure.change_pct
        detail = (f"{money_text(figure.previous, figure.unit)} → {money_text(figure.current, figure.unit)}, "
                  f"{ctx.window.label('previous')} against {ctx.window.label('current')}")
        if abs(change) > ctx.settings.retrospective.spend_change_pct:
            evidence = f"{change:+.1f} %"
            if figure.tiny_base:  # "+5800%" of almost nothing says less than the amount
                evidence = money_text(Decimal(str(figure.change)), figure.unit)
                evidence = evidence if evidence.startswith("-") else "+" + evidence
            found.append(Recommendation(
                "spend_change",
                f"The {figure.unit} bill moved {evidence} ({detail}): "
                "see the Billing page's split by service and tag for where.", evidence, change))
    return found


def _untagged(ctx: Context) -> list[Recommendation]:
    run_tag, slack_s = ctx.reconciliation_args()
    runs = ctx.fetch(queries.reconciliation_runs, ctx.current_range, run_tag, slack_s,
                     ctx.settings.reconciliation.gap_pct)
    untagged = runs[runs["untagged"]] if not runs.empty else runs
    if untagged.empty:
        return []
    count = untagged["run_id"].nunique()
    evidence = f"{count}"
    return [Recommendation(
        "untagged_runs",
        f"{evidence} run{'' if count == 1 else 's'} {'was' if count == 1 else 'were'} billed without the {run_tag!r} tag ({', '.join(sorted(untagged['run_id'].unique()))}): "
        "only their resource id ties the bill to them; tag their instances.", evidence, float(evidence))]


def _budget_overrun(ctx: Context) -> list[Recommendation]:
    """A budget whose period ended over its amount, or whose running period is forecast to."""
    found = []
    for burn in budget_burns(ctx, ctx.current_range.end):
        budget = burn.budget
        if burn.spent > budget.amount:
            evidence = f"{burn.used_pct:.0f} %"
            text = (f"Budget {budget.name} ({budget.scope_label}) spent {evidence} of its "
                    f"{money_text(budget.amount, budget.currency)}/{budget.period}")
        elif burn.days_left > 0 and burn.forecast > budget.amount:
            evidence = f"{burn.forecast_pct:.0f} %"
            text = (f"Budget {budget.name} ({budget.scope_label}) is forecast to spend {evidence} of its "
                    f"{money_text(budget.amount, budget.currency)}/{budget.period}")
        else:
            continue
        found.append(Recommendation("budget_overrun", text + ": raise the budget deliberately or cut the top "
                                    "spenders on the Budgets page.", evidence, float(evidence.rstrip(" %"))))
    return found


# The rules, in the order their recommendations are listed.
RULES: tuple[Callable[[Context], list[Recommendation]], ...] = (
    _regressions, _right_size, _dominated, _weekend_idle, _idle_share, _spend_change, _untagged,
    _budget_overrun,
)

