"""Reconciliation: per run, the estimated cost next to the billed cost of its bill lines; large
gaps, runs found only by resource id, and spend that belongs to no run."""
import streamlit as st

from app import cache, settings as settings_page
from metrics import queries
from present import charts_runs
from app.tables import show
from present.format import md, money, plural

TABLE_ROWS = 1000  # runs listed in the table, largest gap first
NAMED_RUNS = 20  # runs named in a warning; the table has the rest

st.title("Reconciliation")
picked = st.session_state["filters"]
rule = settings_page.load_or_stop().reconciliation
slack_s = rule.match_slack_minutes * 60
runs = cache.fetch_shared(queries.reconciliation_runs, picked, rule.run_id_tag, slack_s, rule.gap_pct)
totals = cache.fetch(queries.reconciliation_totals, picked, rule.run_id_tag, slack_s)

if runs.empty and totals.empty:
    st.info("No runs with bill lines in this selection. Load run logs and cloud bills (`mlcost ingest`, "
            "`mlcost fetch`, or the **Data** page) — or widen the filters in the sidebar.")
    st.stop()

st.caption(f"A usage line belongs to the run its tag `{rule.run_id_tag}` names; an untagged line to the run "
           f"whose `tags.resource_id` is its resource and whose time overlaps it (± "
           f"{rule.match_slack_minutes:g} min). A gap over {rule.gap_pct:g} % is flagged "
           "(`[reconciliation]` in mlcost.toml). Runs follow the sidebar's filters; spend below, its date range.")



def summary() -> dict:
    """The figures, flags and chart of the matched runs (once per data version and settings: up
    to 100k rows)."""
    usd = runs[runs["billing_currency"] == "USD"]
    untagged = runs[runs["untagged"]]
    return {"runs": runs["run_id"].nunique(), "estimated_usd": usd["estimated_cost_usd"].sum(),
            "billed_usd": usd["billed_cost"].sum(), "flagged": int(runs["large_gap"].fillna(False).sum()),
            "plotted": int((usd["estimated_cost_usd"].notna() & usd["billed_cost"].notna()).sum()),
            "untagged": len(untagged), "untagged_ids": untagged["run_id"].head(NAMED_RUNS).tolist(),
            "figure": charts_runs.estimated_vs_billed(usd, known=cache.fetch(queries.filter_choices)["projects"])}


if runs.empty:
    st.info("No run in this selection matched a bill line. A usage line belongs to a run when its "
            f"`{rule.run_id_tag}` tag names a loaded run, or its resource id is a run's `tags.resource_id`: "
            "load the runs' logs (`mlcost ingest`, or the **Data** page) — or widen the filters in the sidebar.")
else:
    facts = cache.derived("reconciliation", (picked, rule.run_id_tag, slack_s, rule.gap_pct), summary)
    left, middle, right, last = st.columns(4)
    left.metric("Runs with bill lines", f"{facts['runs']:,}")
    middle.metric("Estimated (USD)", money(facts["estimated_usd"], "USD"))
    right.metric("Billed (USD)", money(facts["billed_usd"], "USD"))
    last.metric("Large gaps", f"{facts['flagged']:,}")
    st.subheader("Estimated against billed")
    st.plotly_chart(facts["figure"], width="stretch")
    if facts["plotted"] > charts_runs.ESTIMATED_VS_BILLED_MAX_RUNS:
        st.caption(f"The chart shows the {charts_runs.ESTIMATED_VS_BILLED_MAX_RUNS:,} runs with the largest gaps of "
                   f"{facts['plotted']:,}; the table below lists the {TABLE_ROWS:,} largest.")
    if facts["flagged"]:
        st.warning(f"{plural(facts['flagged'], 'run')} billed more than {rule.gap_pct:g} % away from the estimate "
                   "(spot capacity bills under it; a run left running bills over it).")
    if facts["untagged"]:
        named = ", ".join(facts["untagged_ids"][:NAMED_RUNS])
        more = facts["untagged"] - min(facts["untagged"], NAMED_RUNS)
        st.warning(f"{plural(facts['untagged'], 'run')} found by resource id only: their bill lines lack the "
                   f"`{rule.run_id_tag}` tag ({named}{f' and {more:,} more' if more else ''}).")
    if len(runs) > TABLE_ROWS:  # a browser table of 100k rows costs seconds to send and to draw
        st.caption(f"The table lists the {TABLE_ROWS:,} runs with the largest gaps of {len(runs):,}; narrow the "
                   "sidebar's filters to see others.")
    listed = runs.head(TABLE_ROWS)
    one_currency = listed["billing_currency"].nunique() <= 1  # else each row's currency column says it
    show(listed[["run_id", "project", "team", "status", "instance_type", "started_at", "estimated_cost_usd",
                 "billing_currency", "billed_cost", "gap_usd", "gap_pct", "large_gap", "untagged", "lines",
                 "lines_by_resource"]],
         currency=str(listed["billing_currency"].iloc[0]) if one_currency and len(listed) else "")

st.subheader("Spend that belongs to no run")
for item in totals.itertuples():
    st.caption(f"{md(item.billing_currency)}: {money(item.unmatched_cost, item.billing_currency)} of usage in "
               f"{item.unmatched_lines:,} lines matched no run; {money(item.matched_cost, item.billing_currency)} "
               f"in {item.matched_lines:,} lines did.")
unmatched = cache.fetch(queries.unmatched_spend, picked, rule.run_id_tag, rule.project_tag, slack_s)
if unmatched.empty:
    st.success("Every usage line in this selection belongs to a run.")
else:
    unknown = int(unmatched["lines_naming_unknown_runs"].sum())
    if unknown:
        st.warning(f"{plural(unknown, 'line')} name a run (`{rule.run_id_tag}`) that is not loaded.")
    show(unmatched, first=("project", "billed_cost"),
         currency=str(unmatched["billing_currency"].iloc[0]) if unmatched["billing_currency"].nunique() == 1 else "",
         labels={"project": "Project" if rule.project_tag == "project" else f"Project (tag {rule.project_tag})"})
