"""Data: upload any file mlcost ingests, see the validation report, the load history and the rejected lines."""
import tempfile
from datetime import timezone
from pathlib import Path

import streamlit as st

from app import cache, queries
from app.format import table
from ingest import config, loader, values, warehouse
from ingest.contract import BadValue
from ingest.report import summary_lines

st.title("Data")
st.write("Upload training-run summaries (JSONL or `run_meta.json`), CodeCarbon `emissions.csv` "
         "or serving-window files (JSONL or CSV), GPU traces (`mlcost collect` or nvidia-smi CSV, DCGM "
         "`.prom` scrapes), cloud bills (FOCUS, AWS CUR, GCP and Azure exports, CSV or "
         "Parquet), plain or `.gz`; the kind is detected from the content. "
         "The same checks run as for `mlcost ingest`: good lines load, "
         "bad lines are listed with their line number and reason, and a file loaded before is skipped.")

with st.form("upload", clear_on_submit=True):
    files = st.file_uploader("Files to load (runs, CodeCarbon, serving windows, GPU traces, bills)",
                             accept_multiple_files=True,
                             type=["jsonl", "ndjson", "json", "csv", "gz", "prom", "parquet"])
    left, middle, right = st.columns(3)
    kind = left.selectbox("Kind", ["detect", *loader.KINDS], help="Leave on detect unless detection guesses wrong.")
    zone_name = middle.text_input("Time zone of times written without an offset", value="UTC",
                                  help="An IANA name such as Europe/Paris; CodeCarbon writes local times.")
    scrape_time = right.text_input("Scrape time (UTC)", placeholder="2025-11-20T10:00:00Z", key="scrape_time",
                                   help="Only for a DCGM exporter scrape without sample timestamps: when it was "
                                        "taken (`--at` of `mlcost ingest`). ISO-8601 or epoch seconds.")
    submitted = st.form_submit_button("Load files", type="primary")

zone = values.zone(zone_name)
try:
    at, time_problem = values.timestamp(scrape_time, "Scrape time", timezone.utc), None
except BadValue as error:
    at, time_problem = None, error
if submitted and zone is None:
    st.error(f"Unknown time zone {zone_name!r}: use an IANA name such as Europe/Paris, or UTC.")
elif submitted and time_problem:
    st.error(f"{time_problem}: write it as 2025-11-20T10:00:00Z, for example.")
elif submitted and files:
    with tempfile.TemporaryDirectory() as folder:
        for upload in files:
            path = Path(folder) / Path(upload.name).name
            path.write_bytes(upload.getvalue())
            try:
                summary = loader.ingest_file(path, None if kind == "detect" else kind, zone,
                                             display_name=upload.name, at=at)
            except config.ConfigError as error:  # the price catalog serving files are priced with
                st.error(f"FAILED {upload.name}: the settings file cannot be used: {error}")
                continue
            report = "\n".join(summary_lines(summary))
            (st.success if summary.ok else st.error if summary.status in ("failed", "rejected") else st.warning)(
                report.split("\n", 1)[0])
            if "\n" in report:
                st.code(report.split("\n", 1)[1], language=None)
            if summary.status == "failed" and summary.kind == "dcgm" and at is None:  # the scrape has no times
                st.info("Enter when the scrape was taken under **Scrape time (UTC)** and load the file again.")
    cache.forget()
elif submitted:
    st.warning("Choose one or more files first.")

st.subheader("Load history")
history = cache.fetch(queries.loads)
if history.empty:
    st.info("Nothing loaded yet. Upload files above, or run `mlcost ingest PATH` (or `mlcost demo` for sample data).")
else:
    st.caption("Loading a file again with another kind, time zone, host or scrape time replaces its earlier load. "
               "*Rows in use*: the load's rows no later load has replaced.")
    st.dataframe(history, hide_index=True, width="stretch", **table(
        history, first=("load_id", "path", "kind", "options", "rows_loaded", "rows_rejected", "rows_current"),
        labels={"load_id": "Load", "path": "File", "rows_current": "Rows in use", "loaded_at": "Loaded at (UTC)"}))
    with st.form("unload"):
        choices = {f"{row.load_id}: {row.path} ({row.kind}, {row.loaded_at:%Y-%m-%d %H:%M} UTC)": int(row.load_id)
                   for row in history.itertuples()}
        picked_load = st.selectbox("Load to remove", list(choices), key="unload_pick")
        st.caption("Removes the load, every row it brought and its rejected lines (`mlcost unload` does the same). "
                   "Rows it had replaced from earlier loads do not come back: load those files again.")
        if st.form_submit_button("Unload", icon=":material/delete:"):
            removed = warehouse.unload(choices[picked_load])
            cache.forget()
            if removed is None:
                st.warning("That load was already removed.")
            else:
                st.session_state["unloaded"] = (f"Unloaded {picked_load}: removed "
                                                + (", ".join(f"{n:,} {t}" for t, n in removed.items()) or "no rows"))
            st.rerun()
if "unloaded" in st.session_state:
    st.success(st.session_state.pop("unloaded"))

st.subheader("Rejected lines")
rejected = cache.fetch(queries.rejects)
if rejected.empty:
    st.caption("No rejected lines.")
else:
    st.dataframe(rejected, hide_index=True, width="stretch",
                 **table(rejected, first=("path", "line", "reason"), labels={"path": "File", "raw": "Line as read"}))
