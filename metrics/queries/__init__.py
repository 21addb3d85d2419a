"""Every query the dashboard runs: bound parameters only, results as DataFrames.

One module per topic; this package hands every query on, so callers write `queries.training_runs`.
"""
from metrics.queries.common import (  # noqa: F401
    FILTERED_RUNS,
    data_version,
    filter_choices,
)
from metrics.queries.runs import (  # noqa: F401
    overview_totals,
    spend_by_month,
    top_runs,
    runs_over_limits,
    metric_names,
    STANDING,
    training_runs,
    cost_per_successful_run,
    hardware_throughput,
    run_tags,
    GROUPINGS,
    pareto_standing,
)
from metrics.queries.ledger import (  # noqa: F401
    loads,
    IMPORT_KINDS,
    import_sources,
    rejects,
    decisions,
)
from metrics.queries.serving import (  # noqa: F401
    SERVING_WINDOWS,
    SERVING_FIGURES,
    SERVING_CHANGES,
    serving_totals,
    serving_by_version,
    serving_over_time,
    serving_version_changes,
    serving_regressions,
    serving_by_service,
    serving_span_change,
    serving_quiet_services,
)
from metrics.queries.gpus import (  # noqa: F401
    gpu_rollup_rule,
    gpu_models,
    idle_by_gpu,
    idle_by_day,
    utilization_histogram,
    right_size_candidates,
    coverage_holes,
    run_energy_figures,
)
from metrics.queries.billing import (  # noqa: F401
    BILL_LINES,
    BILLING_DIMENSIONS,
    billing_totals,
    billing_tag_keys,
    billing_spend_over_time,
    billing_by_category,
    billing_top_resources,
    GPU_LINES,
    billing_gpu_spend,
    reconciliation_runs,
    reconciliation_totals,
    unmatched_spend,
)
from metrics.queries.budgets import (  # noqa: F401
    BUDGET_SCOPE_BILLED,
    BUDGET_SCOPE_RUNS,
    bill_days,
    bill_complete_through,
    data_days,
    last_data_day,
    estimate_days,
    WANTED,
    BUDGET_ROWS,
    budget_row_scope,
    budget_rows,
    BUDGET_ROW_BILLED,
    BUDGET_ROW_RUNS,
    budget_daily_billed,
    budget_daily_estimated,
    budget_top_runs,
    budget_top_services,
    budget_top_projects,
)
from metrics.queries.hours import (  # noqa: F401
    gpu_hour_of_week,
    serving_hour_of_week,
)
