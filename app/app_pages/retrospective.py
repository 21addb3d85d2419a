"""Retrospective: one month against the one before, recommendations with the number behind each,
the decisions log, and the report (Markdown, or one HTML file that opens offline)."""
import streamlit as st

from app import access, cache, settings as settings_page
from metrics import queries, retrospective
from outputs import report
from app.tables import show
from present.format import md, md_code
from ingest.engine import warehouse

st.title("Monthly retrospective")
months = retrospective.months_with_data(cache.fetch(queries.filter_choices))
if not months:
    st.info("Nothing to look back on yet. Load runs, serving windows, GPU traces or bills with "
            "`mlcost ingest PATH` (`mlcost demo` loads sample data) or upload them on the **Data** page.")
    st.stop()
settings = settings_page.load_or_stop()

st.caption("A UTC month against the month before, for every project and team: the sidebar's date range and "
           "filters do not apply to this page. Each figure is the one its page shows with the month as date "
           "range; recommendations follow `[retrospective]` in mlcost.toml.")
month = st.selectbox("Month", months, format_func=lambda m: f"{m:%B %Y}", key="retro_month")
retro = cache.month_retrospective(month, settings)
if retro.data_through:
    st.warning(retro.comparison)
else:
    st.caption(retro.comparison)

st.header("Recommendations")
if not retro.recommendations:
    st.success("No rule found anything to change this month.")
for item in retro.recommendations:
    st.markdown(f"- {md_code(item.text)} — evidence: **{md(item.evidence)}**")

previous = f"{retro.previous:%Y-%m}"
for section in retro.sections:
    st.header(md(section.title))
    per_row = 3 if any(len(f.label) > 34 for f in section.figures) else 4  # long labels fit, not cut off
    columns = st.columns(per_row)
    for i, figure in enumerate(section.figures):
        columns[i % per_row].metric(md(figure.label), report.number(figure.current, figure.unit),
                              delta=None if figure.change is None else report.change(figure), delta_color="off",
                              help=f"{report.column_label(retro, 'previous')}: "
                                   f"{report.number(figure.previous, figure.unit)}. "
                                   f"The {figure.page} page shows the same figure for the month.")
    if section.chart is not None:
        st.plotly_chart(section.chart, width="stretch")
    if section.table is not None and not section.table.empty:
        show(section.table, currency="")
    for note in section.notes:
        st.caption(md_code(note))

st.header("Decisions and notes")
if access.read_only():
    st.info(access.READ_ONLY_NOTE)
else:
    with st.form("decision", clear_on_submit=True):
        kind = st.radio("Kind", warehouse.DECISION_KINDS, horizontal=True, key="decision_kind")
        text = st.text_area("What the team decided or observed", key="decision_text")
        author = st.text_input("Author (optional)", key="decision_author")
        saved = st.form_submit_button("Save to the log", type="primary")
    if saved and not text.strip():
        st.warning("Write the decision or note first.")
    elif saved:
        warehouse.add_decision(month, kind, text, author)
        retro.decisions = queries.decisions(month)
        st.success(f"Saved to the {month:%B %Y} log.")
if retro.decisions.empty:
    st.caption("Nothing written for this month yet.")
else:  # a table shows the text as text, never as markup
    show(retro.decisions[["written_at", "kind", "author", "text"]])

st.header("Report")
name = f"mlcost-report-{month:%Y-%m}"
left, right = st.columns(2)
# written when a button is pressed, not on every rerun (the HTML embeds every chart)
left.download_button("Download Markdown", lambda: report.markdown(retro), file_name=f"{name}.md",
                     mime="text/markdown", icon=":material/download:")
right.download_button("Download HTML (opens offline)", lambda: report.html_report(retro), file_name=f"{name}.html",
                      mime="text/html", icon=":material/download:")
st.caption(f"`mlcost report --month {month:%Y-%m} --format html` writes the same report from the command line.")
