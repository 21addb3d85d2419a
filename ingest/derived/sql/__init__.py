"""The derived tables' SQL, written once, as full-batch queries any engine runs (docs/spark.md).

Each derived table is one SELECT in DuckDB's dialect over the base tables (runs, gpu_samples,
billing_lines, serving_windows) and the derived tables before it (`steps()`, in order). The text
comes from where the embedded path defines it - ingest/schema.sql's macros and views,
ingest/gpu_rollups.py's interval and minute queries, ingest/derived/run_minutes.py's steps (per-run
GPU time, allocated GPU minutes, run GPU days, run energy) - expanded here into plain SELECTs: table
macros get their arguments, scalar macros (utc_day, run_holds_gpu, gpu_line_rule, ...) are
inlined, settings become literals. The embedded warehouse keeps running the same text
incrementally (ingest/derived/derived.py); this module runs it over everything at once, which is
what a lake's batch job does. ingest/derived/sql/spark.py translates these SELECTs to Spark SQL with
sqlglot.

Nothing here opens a connection: steps() returns text, run_duckdb() runs it on a connection handed in.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date, timedelta
from functools import lru_cache
from importlib import resources
from typing import Any

from ingest.derived import rollup_sql as gpu_rollups
from ingest.derived import run_minutes, run_trace_costs

# Idle cost by GPU node and UTC day: the allocation's idle_gpu pieces (the node's bill line's
# rate x the idle GPU-hours no run held), per currency.
IDLE_COST_DAYS = """
SELECT day, host, billing_currency, sum(effective_cost) AS idle_cost, sum(gpu_hours) AS idle_gpu_hours
FROM bill_allocation_days WHERE bucket = 'idle_gpu'
GROUP BY day, host, billing_currency
"""

# The allocation by month, currency, team and bucket: a run's own team, else the bill line's team
# tag (metrics/allocation.py's key 'team'), '(no team)' without either.
ALLOCATION_MONTH_TEAM = """
SELECT a.month, a.billing_currency, coalesce(r.team, a.tags[{team_tag}], '(no team)') AS team, a.bucket,
       sum(a.effective_cost) AS effective_cost, sum(a.gpu_hours) AS gpu_hours
FROM bill_allocation_days a LEFT JOIN runs r ON r.run_id = a.run_id
GROUP BY a.month, a.billing_currency, coalesce(r.team, a.tags[{team_tag}], '(no team)'), a.bucket
"""


def budget_row_scope(tags: str, provider: str, piece: str | None = None) -> str:
    """SQL: whether a bill line (its `tags` map and `provider`, SQL expressions) is in the scope
    of budget row w: all, by the project or team tag ($project_tag, $team_tag), by a KEY=VALUE tag,
    by provider. With `piece` (an allocation piece's alias), also by its bucket, model or service;
    without, those scopes hold nothing (NULL)."""
    pieces = (f"""
                 WHEN 'bucket' THEN {piece}.bucket = w.value
                 WHEN 'model' THEN {piece}.model_version = w.value
                 WHEN 'service' THEN {piece}.service = w.value""" if piece else "")
    return f"""
    CASE w.scope WHEN 'all' THEN true
                 WHEN 'project' THEN {tags}[$project_tag] = w.value
                 WHEN 'team' THEN {tags}[$team_tag] = w.value
                 WHEN 'tag' THEN {tags}[w.tag_key] = w.tag_value
                 WHEN 'provider' THEN lower({provider}) = lower(w.value){pieces} END
"""


# Budget burn by day: per budget row of `wanted` (budget_no, scope, value, tag_key, tag_value,
# currency, start_day, end_day) and UTC day in [start_day, end_day), the scope's billed cost in the
# budget's currency (credits and taxes included) and its lines in other currencies (not counted).
# metrics/queries/budgets.py reads this with `wanted` from the settings' budgets.
BUDGET_DAILY_BILLED = f"""
SELECT w.budget_no, c.day,
       coalesce(sum(c.billed_cost) FILTER (WHERE c.billing_currency = w.currency), 0) AS spend,
       count(*) FILTER (WHERE c.billing_currency <> w.currency) AS other_currency_lines
FROM wanted w JOIN billing_costs c ON c.day >= w.start_day AND c.day < w.end_day
WHERE coalesce({budget_row_scope("c.tags", "c.provider")}, false)
GROUP BY w.budget_no, c.day
"""


# An imported run's cost from its traced GPU-hours (run_trace_costs.refresh, which updates the
# embedded warehouse's runs in place, as one SELECT over the runs as loaded): per run of
# run_trace_costs.KINDS, its run_id, load_id and the four cost columns as refresh() leaves them.
# An earlier estimate is taken back first (its flags lose the priced note and gain the no-cost
# one; every run loses an unpriced note); then an ended run without a cost or source gets the
# GPU-hours it held per GPU model (run_gpu_time x gpu_minutes' GPU name) x the catalog's price of
# that model (table gpu_prices: gpu_name, price as decimal text), or, when a model has no price,
# a flag naming it. The lake keeps these rows in run_cost_estimates; its runs view applies them.
RUN_COST_ESTIMATES = """
WITH imported AS (
    SELECT run_id, load_id, ended_at,
           CASE WHEN cost_source = $estimate_source THEN NULL ELSE cost_usd END AS cost_usd,
           CASE WHEN cost_source = $estimate_source THEN NULL ELSE price_per_hour_usd END AS price_per_hour_usd,
           CASE WHEN cost_source = $estimate_source THEN NULL ELSE cost_source END AS cost_source,
           list_filter(CASE WHEN cost_source = $estimate_source
                            THEN list_concat(list_filter(coalesce(flags, CAST([] AS VARCHAR[])),
                                                         lambda f: NOT starts_with(f, $priced_flag)), [$no_cost_flag])
                            ELSE flags END,
                       lambda f: NOT starts_with(f, $unpriced_flag)) AS flags
    FROM runs WHERE source_kind IN ($kinds)
), hours AS (
    SELECT t.run_id, m.gpu_name, sum(t.run_s) / 3600.0 AS gpu_hours,
           array_to_string(list_sort(list_distinct(list(t.host))), ', ') AS hosts
    FROM run_gpu_time t
    JOIN gpu_minutes m ON m.host = t.host AND m.gpu_index = t.gpu_index AND m.minute = t.minute
    JOIN imported r ON r.run_id = t.run_id
    WHERE r.cost_usd IS NULL AND r.cost_source IS NULL AND r.ended_at IS NOT NULL
    GROUP BY t.run_id, m.gpu_name HAVING sum(t.run_s) > 0
), costs AS (
    SELECT h.run_id, bool_and(p.price IS NOT NULL) AS priced,
           sum(round(CAST(h.gpu_hours AS DECIMAL(38, 12)) * CAST(p.price AS DECIMAL(38, 12)), 6)) AS cost_usd,
           string_agg(printf('%.4f GPU-hours of %s on %s x %s USD per GPU-hour', h.gpu_hours,
                             coalesce(h.gpu_name, '(unnamed GPU)'), h.hosts, p.price), '; ' ORDER BY h.gpu_name)
               AS detail,
           array_to_string(list_sort(list_distinct(list(CASE WHEN p.price IS NULL
                                                             THEN coalesce(h.gpu_name, '(unnamed GPU)') END))),
                           ', ') AS unpriced
    FROM hours h LEFT JOIN gpu_prices p ON p.gpu_name = h.gpu_name
    GROUP BY h.run_id
)
SELECT r.run_id, r.load_id,
       CASE WHEN c.priced THEN CAST(c.cost_usd AS DECIMAL(38, 12)) ELSE r.cost_usd END AS cost_usd,
       r.price_per_hour_usd,
       CASE WHEN c.priced THEN $estimate_source ELSE r.cost_source END AS cost_source,
       CASE WHEN c.priced
            THEN list_concat(list_filter(coalesce(r.flags, CAST([] AS VARCHAR[])),
                                         lambda f: NOT starts_with(f, 'no cost')),
                             [$priced_flag || ' (an estimate from the price catalog, not billed): ' || c.detail])
            WHEN NOT c.priced
            THEN list_concat(coalesce(r.flags, CAST([] AS VARCHAR[])), [$unpriced_flag || ' ' || c.unpriced])
            ELSE r.flags END AS flags
FROM imported r LEFT JOIN costs c ON c.run_id = r.run_id
"""
# The distinct GPU models the traces name: the names gpu_prices is asked about.
GPU_NAMES = "SELECT DISTINCT gpu_name FROM gpu_minutes WHERE gpu_name IS NOT NULL ORDER BY gpu_name"


def price_rows(settings: "Settings", names) -> list[tuple[str, str]]:
    """The rows of table `gpu_prices` (gpu_name, price as decimal text): the catalog's GPU-hour
    price of each GPU model of `names` it knows (GPU_NAMES' rows)."""
    catalog = {name: settings.prices.gpu(name) if settings.prices is not None else None for (name,) in names}
    return [(name, str(price)) for name, price in catalog.items() if price is not None]


def settings_steps(settings: "Settings") -> list["Step"]:
    """The rows saying which settings the stored tables were computed with (gpu_rollup_settings,
    billing_match_settings, bill_allocation_settings): pages use the stored tables only when these
    are their own settings."""
    gpu = settings.gpu
    now = "CAST(current_timestamp AS TIMESTAMPTZ) AS computed_at"
    return [
        Step("gpu_rollup_settings", f"SELECT CAST({literal(gpu['idle_util_max_pct'])} AS DOUBLE) AS idle_util_max_pct, "
             f"CAST({literal(gpu['idle_power_max_w'])} AS DOUBLE) AS idle_power_max_w, "
             f"CAST({literal(gpu['idle_min_s'])} AS DOUBLE) AS idle_min_s, "
             f"CAST({literal(gpu['max_gap_s'])} AS DOUBLE) AS max_gap_s, CAST(1 AS BIGINT) AS rollups, {now}"),
        Step("billing_match_settings", f"SELECT {literal(settings.run_tag)} AS run_id_tag, "
             f"CAST({literal(settings.slack_s)} AS DOUBLE) AS match_slack_s, {now}"),
        Step("bill_allocation_settings", f"SELECT {literal(settings.run_tag)} AS run_id_tag, "
             f"CAST({literal(settings.slack_s)} AS DOUBLE) AS match_slack_s, "
             f"{literal(settings.service_tag)} AS service_tag, {literal(list(settings.families))} AS gpu_families, "
             f"{literal(list(settings.words))} AS gpu_words, {now}"),
    ]


@dataclass(frozen=True)
class Step:
    """One derived table: its name, its SELECT (DuckDB dialect, settings bound) and whether it is
    written to the lake (`stored`) or only an intermediate the next steps read (`view`)."""

    name: str
    sql: str
    stored: bool = True


@dataclass(frozen=True)
class Settings:
    """What the derived tables depend on besides the data: the [gpu] idle and gap rule, the
    [reconciliation] tags and slack, the [billing] GPU families and words, the price catalog (rows
    of `gpu_prices`) and the budgets (rows of `wanted`)."""

    gpu: dict
    run_tag: str
    slack_s: float
    service_tag: str
    team_tag: str
    project_tag: str
    families: tuple[str, ...]
    words: tuple[str, ...]
    prices: Any = field(default=None, compare=False)  # the price catalog (config.Prices: .gpu(name))

    @classmethod
    def of(cls, config) -> "Settings":
        rec, bill = config.reconciliation, config.billing
        return cls(gpu=gpu_rollups.params(config.gpu), run_tag=rec.run_id_tag,
                   slack_s=float(rec.match_slack_minutes * 60), service_tag=rec.service_tag,
                   team_tag=rec.team_tag, project_tag=rec.project_tag,
                   families=tuple(bill.gpu_instance_families), words=tuple(bill.gpu_sku_words),
                   prices=config.prices)


def literal(value) -> str:
    """A Python value as a DuckDB SQL literal (lists as typed VARCHAR[], dates as DATE, strings quoted)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(float(value)) if isinstance(value, float) else str(value)
    if isinstance(value, date):
        return f"DATE '{value.isoformat()}'"
    if isinstance(value, (list, tuple)):
        return "CAST([" + ", ".join(literal(str(v)) for v in value) + "] AS VARCHAR[])"
    return "'" + str(value).replace("'", "''") + "'"


_TOKENS = re.compile(r"'(?:[^']|'')*'|\$?[A-Za-z_][A-Za-z_0-9]*")


def substitute(sql: str, names: dict[str, str]) -> str:
    """Replace whole identifiers of `sql` (not in strings, not after a '.') named in `names`, and
    $name parameters, with the given SQL text."""
    def swap(match: re.Match) -> str:
        token = match.group(0)
        if token.startswith("'"):
            return token
        if token.startswith("$"):
            return names.get(token[1:], token)
        if match.start() > 0 and sql[match.start() - 1] == ".":
            return token
        return names.get(token, token)
    return _TOKENS.sub(swap, sql)


@dataclass(frozen=True)
class Macro:
    name: str
    params: tuple[str, ...]
    defaults: dict
    body: str
    table: bool


def _strip_comments(sql: str) -> str:
    out, i, quoted = [], 0, False
    while i < len(sql):
        ch = sql[i]
        if ch == "'":
            quoted = not quoted
        if not quoted and sql.startswith("--", i):
            i = sql.find("\n", i)
            if i < 0:
                break
            continue
        out.append(ch)
        i += 1
    return "".join(out)


@lru_cache(maxsize=1)
def schema_definitions() -> tuple[dict[str, Macro], dict[str, str]]:
    """ingest/schema.sql's macros (by name) and views (name: SELECT), as the embedded warehouse
    creates them."""
    text = _strip_comments(resources.files("ingest").joinpath("schema.sql").read_text())
    macros, views = {}, {}
    for statement in text.split(";"):
        statement = statement.strip()
        found = re.match(r"CREATE OR REPLACE MACRO (\w+)\s*\(([^)]*)\)\s+AS\s+(TABLE\s+)?(.*)", statement, re.S)
        if found:
            params, defaults = [], {}
            for part in found.group(2).split(","):
                name, _, default = part.partition(":=")
                params.append(name.strip())
                if default:
                    defaults[name.strip()] = default.strip()
            macros[found.group(1)] = Macro(found.group(1), tuple(params), defaults, found.group(4).strip(),
                                           bool(found.group(3)))
            continue
        found = re.match(r"CREATE OR REPLACE VIEW (\w+) AS\s+(.*)", statement, re.S)
        if found:
            views[found.group(1)] = found.group(2).strip()
    return macros, views


def _split_args(text: str) -> list[str]:
    args, depth, start, quoted = [], 0, 0, False
    for i, ch in enumerate(text):
        if ch == "'":
            quoted = not quoted
        elif not quoted and ch in "([":
            depth += 1
        elif not quoted and ch in ")]":
            depth -= 1
        elif not quoted and ch == "," and depth == 0:
            args.append(text[start:i].strip())
            start = i + 1
    args.append(text[start:].strip())
    return args


def inline_scalars(sql: str) -> str:
    """`sql` with every call of a scalar macro of schema.sql replaced by its body (arguments in
    parentheses), until none is left."""
    macros = {m.name: m for m in schema_definitions()[0].values() if not m.table}
    pattern = re.compile(r"(?<![\w.])(" + "|".join(macros) + r")\s*\(")
    while True:
        found = pattern.search(_mask_strings(sql))
        if not found:
            return sql
        macro = macros[found.group(1)]
        open_at = found.end() - 1
        depth, quoted = 0, False
        for close_at in range(open_at, len(sql)):
            ch = sql[close_at]
            if ch == "'":
                quoted = not quoted
            elif not quoted and ch == "(":
                depth += 1
            elif not quoted and ch == ")":
                depth -= 1
                if depth == 0:
                    break
        args = _split_args(sql[open_at + 1:close_at])
        body = substitute(macro.body, {p: f"({a})" for p, a in zip(macro.params, args)})
        sql = sql[:found.start()] + "(" + body + ")" + sql[close_at + 1:]


def _mask_strings(sql: str) -> str:
    """`sql` with the inside of string literals blanked (same length), so searches skip them."""
    return re.sub(r"'(?:[^']|'')*'", lambda m: "'" + " " * (len(m.group(0)) - 2) + "'", sql)


def table_macro(name: str, args: dict[str, str], calls: dict[str, str] | None = None) -> str:
    """The body of schema.sql's table macro `name` as a SELECT: `query_table(param)` becomes the
    table named by args[param], other parameters their SQL text; `calls` replaces nested table
    macro calls (their text as written in the body) with a table or subquery."""
    macro = schema_definitions()[0][name]
    body = macro.body
    for call, table in (calls or {}).items():
        if call not in body:
            raise KeyError(f"{name} no longer calls {call}: update derived_sql")
        body = body.replace(call, table)
    body = re.sub(r"query_table\((\w+)\)", lambda m: args[m.group(1)], body)
    values = {**macro.defaults, **{k: v for k, v in args.items()}}
    return inline_scalars(substitute(body, {p: values[p] for p in macro.params if p in values}))


def view(name: str) -> str:
    """schema.sql's view `name` as a SELECT, scalar macros inlined."""
    return inline_scalars(schema_definitions()[1][name])


def _bind(sql: str, params: dict) -> str:
    return substitute(sql, {name: literal(value) for name, value in params.items()})


def base_steps(settings: Settings) -> list[Step]:
    """The derived tables that do not depend on the month, in order."""
    labels = gpu_rollups.LABELS.format(source="gpu_samples")
    intervals = _bind(gpu_rollups.SAMPLE_INTERVALS.format(source="gpu_samples", labels="sample_labels"), settings.gpu)
    minutes = _bind(gpu_rollups.MINUTES_OF.format(intervals="sample_intervals", labels="sample_labels"), settings.gpu)
    gaps = _bind(gpu_rollups.GAPS_OF.format(intervals="sample_intervals", labels="sample_labels"), settings.gpu)
    match = {"run_tag": literal(settings.run_tag), "slack_s": literal(settings.slack_s)}
    return [
        Step("sample_labels", labels, stored=False),
        Step("sample_intervals", inline_scalars(intervals), stored=False),
        Step("gpu_minutes", inline_scalars(minutes)),
        Step("gpu_gaps", inline_scalars(gaps)),
        Step("run_gpus", table_macro("run_gpus_of", {"run_table": "runs"}), stored=False),
        *(Step(name, sql, stored) for name, sql, stored in run_minutes.steps("run_gpus")),
        Step("gpu_days", table_macro("gpu_days_of", {"minute_table": "gpu_minutes"})),
        Step("billing_costs", view("billing_costs"), stored=False),
        Step("billing_line_runs", table_macro("billing_run_lines_of", {"line_table": "billing_lines", **match})),
    ]


def allocation_month(month: date, settings: Settings) -> str:
    """The SELECT of bill_allocation_days for one calendar month (its first day): the allocation's
    pieces of lines charged in it, added up per day and line group (schema.sql
    bill_allocation_days_of), with the lines' runs read from billing_line_runs."""
    end = date(month.year + month.month // 12, month.month % 12 + 1, 1)
    args = {"alloc_start": _utc(month), "alloc_end": _utc(end), "run_tag": literal(settings.run_tag),
            "slack_s": literal(settings.slack_s), "service_tag": literal(settings.service_tag),
            "families": literal(list(settings.families)), "words": literal(list(settings.words)),
            "stored": "true"}
    pieces = table_macro("bill_allocation_pieces", args, {
        "billing_run_lines(run_tag, slack_s, stored := stored)":
            "(SELECT line_key, run_id, matched_by FROM billing_line_runs)"})
    days = table_macro("bill_allocation_days_of", args, {
        "bill_allocation_pieces(alloc_start, alloc_end, run_tag, slack_s, service_tag, families, words, "
        "stored := stored)": "(" + pieces + ") AS pieces"})
    return f"SELECT {literal(month)} AS month, * FROM ({days}) AS days"


def _utc(day: date) -> str:
    return f"CAST('{day.isoformat()} 00:00:00+00:00' AS TIMESTAMPTZ)"


MONTHS = ("SELECT DISTINCT month FROM billing_costs WHERE effective_cost IS NOT NULL ORDER BY month")


def late_steps(settings: Settings) -> list[Step]:
    """The derived tables computed after every month of bill_allocation_days: those read from it,
    the run cost estimates (reading table gpu_prices) and the settings rows."""
    estimates = _bind(RUN_COST_ESTIMATES, {"estimate_source": run_trace_costs.SOURCE,
                                           "priced_flag": run_trace_costs.PRICED_FLAG,
                                           "unpriced_flag": run_trace_costs.UNPRICED_FLAG,
                                           "no_cost_flag": run_trace_costs.NO_COST_FLAG})
    estimates = estimates.replace("$kinds", ", ".join(literal(k) for k in run_trace_costs.KINDS))
    return [Step("run_cost_estimates", estimates), *settings_steps(settings),
            Step("idle_cost_days", IDLE_COST_DAYS),
            Step("allocation_month_team", ALLOCATION_MONTH_TEAM.format(team_tag=literal(settings.team_tag))),
            Step("budget_burn_days", _bind(BUDGET_DAILY_BILLED, {"project_tag": settings.project_tag,
                                                                 "team_tag": settings.team_tag}))]


def wanted_rows(budgets, start: date, end: date) -> list[dict]:
    """The rows of table `wanted` for budget burn by day: each budget (settings' [[budgets]]) over
    [start, end)."""
    return [{"budget_no": no, "scope": b.scope, "value": b.scope_value or "", "tag_key": b.tag_key or "",
             "tag_value": b.tag_value or "", "currency": b.currency, "start_day": start, "end_day": end}
            for no, b in enumerate(budgets)]


def months_of(rows) -> list[date]:
    """The calendar months (first days) of the MONTHS query's rows."""
    return [row[0] for row in rows]


def run_duckdb(con, settings: Settings, budgets=()) -> list[str]:
    """Compute every derived table as a temp table on DuckDB connection `con`, whose current
    database holds the base tables (runs, gpu_samples, billing_lines, serving_windows; tables or
    views): the same SELECTs Spark runs. Budget burn reads `budgets` over the bill's days, the run
    cost estimates the settings' price catalog.
    Returns the stored tables' names, in order."""
    stored = []
    for step in base_steps(settings):
        con.execute(f"CREATE OR REPLACE TEMP TABLE {step.name} AS {step.sql}")
        stored += [step.name] if step.stored else []
    months = months_of(con.execute(MONTHS).fetchall())
    con.execute("CREATE OR REPLACE TEMP TABLE bill_allocation_days AS "
                + (" UNION ALL ".join(f"({allocation_month(m, settings)})" for m in months)
                   if months else f"SELECT * FROM ({allocation_month(date(1970, 1, 1), settings)}) AS none WHERE false"))
    stored.append("bill_allocation_days")
    first, last = con.execute("SELECT min(day), max(day) FROM billing_costs").fetchone()
    rows = wanted_rows(budgets, first, last + timedelta(days=1)) if first is not None else []
    con.execute("CREATE OR REPLACE TEMP TABLE wanted (budget_no INTEGER, scope VARCHAR, value VARCHAR, "
                "tag_key VARCHAR, tag_value VARCHAR, currency VARCHAR, start_day DATE, end_day DATE)")
    if rows:
        con.executemany("INSERT INTO wanted VALUES (?, ?, ?, ?, ?, ?, ?, ?)", [list(r.values()) for r in rows])
    con.execute("CREATE OR REPLACE TEMP TABLE gpu_prices (gpu_name VARCHAR, price VARCHAR)")
    prices = price_rows(settings, con.execute(GPU_NAMES).fetchall())
    if prices:
        con.executemany("INSERT INTO gpu_prices VALUES (?, ?)", prices)
    for step in late_steps(settings):
        con.execute(f"CREATE OR REPLACE TEMP TABLE {step.name} AS {step.sql}")
        stored.append(step.name)
    return stored
