"""Reconciliation: per run, the estimated cost next to the billed cost of its bill lines; large
gaps, runs found only by resource id, and spend that belongs to no run."""
import streamlit as st

from app import cache, charts, queries, settings as settings_page
from app.format import money, plural, table

st.title("Reconciliation")
picked = st.session_state["filters"]
rule = settings_page.load_or_stop().reconciliation
slack_s = rule.match_slack_minutes * 60
runs = cache.fetch(queries.reconciliation_runs, picked, rule.run_id_tag, slack_s, rule.gap_pct)
totals = cache.fetch(queries.reconciliation_totals, picked, rule.run_id_tag, slack_s)

if runs.empty and totals.empty:
    st.info("No runs with bill lines in this selection. Load run logs and cloud bills (`mlcost ingest`, "
            "`mlcost fetch`, or the **Data** page) — or widen the filters in the sidebar.")
    st.stop()

st.caption(f"A usage line belongs to the run its tag `{rule.run_id_tag}` names; an untagged line to the run "
           f"whose `tags.resource_id` is its resource and whose time overlaps it (± "
           f"{rule.match_slack_minutes:g} min). A gap over {rule.gap_pct:g} % is flagged "
           "(`[reconciliation]` in mlcost.toml). Runs follow the sidebar's filters; spend below, its date range.")

if runs.empty:
    st.info("No run in this selection matched a bill line. A usage line belongs to a run when its "
            f"`{rule.run_id_tag}` tag names a loaded run, or its resource id is a run's `tags.resource_id`: "
            "load the runs' logs (`mlcost ingest`, or the **Data** page) — or widen the filters in the sidebar.")
else:
    usd = runs[runs["billing_currency"] == "USD"]
    left, middle, right, last = st.columns(4)
    left.metric("Runs with bill lines", f"{runs['run_id'].nunique():,}")
    middle.metric("Estimated (USD)", money(usd["estimated_cost_usd"].sum(), "USD"))
    right.metric("Billed (USD)", money(usd["billed_cost"].sum(), "USD"))
    last.metric("Large gaps", f"{int(runs['large_gap'].fillna(False).sum()):,}")
    st.subheader("Estimated against billed")
    st.plotly_chart(charts.estimated_vs_billed(usd), width="stretch")
    flagged = runs[runs["large_gap"].fillna(False)]
    if not flagged.empty:
        st.warning(f"{plural(len(flagged), 'run')} billed more than {rule.gap_pct:g} % away from the estimate "
                   "(spot capacity bills under it; a run left running bills over it).")
    untagged = runs[runs["untagged"]]
    if not untagged.empty:
        st.warning(f"{plural(len(untagged), 'run')} found by resource id only: their bill lines lack the "
                   f"`{rule.run_id_tag}` tag ({', '.join(untagged['run_id'])}).")
    st.dataframe(runs, hide_index=True, width="stretch",
                 column_order=["run_id", "project", "team", "status", "instance_type", "started_at",
                               "estimated_cost_usd", "billing_currency", "billed_cost", "gap_usd", "gap_pct",
                               "large_gap", "untagged", "lines", "lines_by_resource"],
                 column_config={"estimated_cost_usd": st.column_config.NumberColumn("Estimated (USD)", format="%.2f"),
                                "billed_cost": st.column_config.NumberColumn("Billed", format="%.2f"),
                                "gap_usd": st.column_config.NumberColumn("Gap (USD)", format="%.2f"),
                                "gap_pct": st.column_config.NumberColumn("Gap (%)", format="%.1f")})

st.subheader("Spend that belongs to no run")
for item in totals.itertuples():
    st.caption(f"{item.billing_currency}: {money(item.unmatched_cost, item.billing_currency)} of usage in "
               f"{item.unmatched_lines:,} lines matched no run; {money(item.matched_cost, item.billing_currency)} "
               f"in {item.matched_lines:,} lines did.")
unmatched = cache.fetch(queries.unmatched_spend, picked, rule.run_id_tag, rule.project_tag, slack_s)
if unmatched.empty:
    st.success("Every usage line in this selection belongs to a run.")
else:
    unknown = int(unmatched["lines_naming_unknown_runs"].sum())
    if unknown:
        st.warning(f"{plural(unknown, 'line')} name a run (`{rule.run_id_tag}`) that is not loaded.")
    st.dataframe(unmatched, hide_index=True, width="stretch",
                 **table(unmatched, first=("project", "billed_cost"), money=("billed_cost",),
                         currency=str(unmatched["billing_currency"].iloc[0]) if "billing_currency" in unmatched
                         and unmatched["billing_currency"].nunique() == 1 else "",
                         labels={"project": f"{rule.project_tag} tag", "billed_cost": "Billed"}))
