"""Data: upload any file mlcost ingests, see the validation report, the load history and the rejected lines."""
import shutil
import tempfile
import time
from datetime import timezone
from pathlib import Path

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from app import access, cache
from metrics import queries
from app.tables import show
from present.format import md
from ingest.engine import values, warehouse
from ingest.engine.contract import BadValue
from ingest.engine.report import summary_lines
from ingest.pipeline import loader
from ingest.settings import config

SPOOL_CHUNK_BYTES = 1 << 20

st.title("Data")
access.warn_if_exposed(st)
st.write("Upload training-run summaries (JSONL or `run_meta.json`), CodeCarbon `emissions.csv` "
         "or serving-window files (JSONL or CSV), inference servers' `/metrics` scrapes (vLLM, Triton, "
         "TorchServe `.prom`), GPU traces (`mlcost collect` or nvidia-smi CSV, DCGM "
         "`.prom` scrapes), cloud bills (FOCUS, AWS CUR, GCP and Azure exports, CSV or "
         "Parquet), plain or `.gz`; the kind is detected from the content. "
         "The same checks run as for `mlcost ingest`: good lines load, "
         "bad lines are listed with their line number and reason, and a file loaded before is skipped.")

def spool(upload) -> Path:
    """The upload written, in 1 MB chunks, to a file of its own in a new temporary folder, and its
    in-memory copy released; the caller deletes both."""
    path = Path(tempfile.mkdtemp(prefix="mlcost-upload-")) / (Path(upload.name).name or "upload")
    upload.seek(0)
    with path.open("wb") as out:
        shutil.copyfileobj(upload, out, SPOOL_CHUNK_BYTES)
    upload.close()  # our copy of the bytes, then the upload manager's: nothing of it stays in memory
    context = get_script_run_ctx()
    if context is not None and getattr(upload, "file_id", None):
        context.uploaded_file_mgr.remove_file(context.session_id, upload.file_id)
    return path


def upload_progress(bar, name: str, number: int, files: int, file_bytes: int, done_bytes: int, total_bytes: int):
    """loader's on_progress for one uploaded file: moves `bar` over every file's bytes, naming the
    file, its rows and bytes so far, the rate and the time left; redrawn at most every 0.2 s."""
    started, drawn = time.monotonic(), [0.0]

    def step(bytes_done: int, rows_done: int) -> None:
        now = time.monotonic()
        if now - drawn[0] < 0.2 and bytes_done < file_bytes:  # the file's last call always draws
            return
        drawn[0] = now
        elapsed_s = max(now - started, 1e-9)
        left_s = (total_bytes - done_bytes - bytes_done) / max(bytes_done / elapsed_s, 1e-9)
        bar.progress(min((done_bytes + bytes_done) / max(total_bytes, 1), 1.0),
                     text=f"File {number} of {files}, {name}: {rows_done:,} rows, {bytes_done / 1e6:,.1f} of "
                          f"{file_bytes / 1e6:,.1f} MB ({rows_done / elapsed_s:,.0f} rows/s"
                          + (f", about {left_s:,.0f} s left)" if bytes_done else ")"))
    return step


def load(files: list, kind: str, zone, at) -> None:
    """Ingest each upload from disk, one at a time, with a progress bar over every file's bytes,
    and show its report."""
    total_bytes, done_bytes, rows_read, started = sum(upload.size for upload in files), 0, 0, time.monotonic()
    bar = st.progress(0.0, text=f"Loading {len(files):,} file(s)…")
    with loader.batch(files):  # the derived tables stored once, after the last file
        for number, upload in enumerate(files, start=1):
            name, size_bytes = upload.name, upload.size
            path = spool(upload)
            step = upload_progress(bar, name, number, len(files), size_bytes, done_bytes, total_bytes)
            try:
                summary = loader.ingest_file(path, None if kind == "detect" else kind, zone,
                                             display_name=name, at=at, on_progress=step)
            except config.ConfigError as error:  # the price catalog serving files are priced with
                st.error(f"FAILED {md(name)}: the settings file cannot be used: {md(error)}")
                continue
            finally:
                done_bytes += size_bytes
                path.unlink(missing_ok=True)
                path.parent.rmdir()
            rows_read += summary.rows_loaded + summary.rows_rejected
            report = "\n".join(summary_lines(summary))
            (st.success if summary.ok else st.error if summary.status in ("failed", "rejected") else st.warning)(
                md(report.split("\n", 1)[0]))
            if "\n" in report:
                st.code(report.split("\n", 1)[1], language=None)
            if summary.status == "failed" and summary.kind in ("dcgm", "serving-metrics") and at is None \
                    and "--at" in (summary.error or ""):  # the scrape has no times
                st.info("Enter when the scrape was taken under **Scrape time (UTC)** and load the file again.")
            if summary.status == "failed" and "--started-at" in (summary.error or ""):  # no field for it here
                st.info("This scrape does not say when its server started: load it with `mlcost ingest FILE --at TIME "
                        "--started-at TIME` (docs/formats/serving.md: Serving metrics from Prometheus).")
    bar.progress(1.0, text=f"Read {len(files):,} file(s): {rows_read:,} rows, {total_bytes / 1e6:,.1f} MB "
                           f"in {time.monotonic() - started:,.1f} s")
    cache.forget()


if access.read_only():
    st.info(access.READ_ONLY_NOTE + " Load files with `mlcost ingest PATH`.")
else:
    with st.form("upload", clear_on_submit=True):
        files = st.file_uploader("Files to load (runs, CodeCarbon, serving windows, GPU traces, bills)",
                                 accept_multiple_files=True,
                                 type=["jsonl", "ndjson", "json", "csv", "gz", "prom", "parquet"])
        left, middle, right = st.columns(3)
        kind = left.selectbox("Kind", ["detect", *loader.KINDS],
                              help="Leave on detect unless detection guesses wrong.")
        zone_name = middle.text_input("Time zone of times written without an offset", value="UTC",
                                      help="An IANA name such as Europe/Paris; CodeCarbon writes local times.")
        scrape_time = right.text_input("Scrape time (UTC)", placeholder="2025-11-20T10:00:00Z", key="scrape_time",
                                       help="Only for a scrape without sample timestamps (DCGM exporter, vLLM, "
                                            "Triton): when it was taken (`--at` of `mlcost ingest`). ISO-8601 or "
                                            "epoch seconds.")
        submitted = st.form_submit_button("Load files", type="primary")

    zone = values.zone(zone_name)
    try:
        at, time_problem = values.timestamp(scrape_time, "Scrape time", timezone.utc), None
    except BadValue as error:
        at, time_problem = None, error
    if submitted and zone is None:
        st.error(f"Unknown time zone {md(repr(zone_name))}: use an IANA name such as Europe/Paris, or UTC.")
    elif submitted and time_problem:
        st.error(f"{md(time_problem)}: write it as 2025-11-20T10:00:00Z, for example.")
    elif submitted and files:
        load(files, kind, zone, at)
        del files  # no reference to the uploads outlives this run
    elif submitted:
        st.warning("Choose one or more files first.")

st.subheader("Imported sources")
sources = cache.fetch(queries.import_sources)
if sources.empty:
    st.caption("No imports yet: `mlcost import prometheus URL --since 2h`, `mlcost import mlflow URI`, "
               "`mlcost import wandb PATH` or `mlcost import slurm --since 2d` (docs/imports.md: Import from "
               "where your data lives).")
else:
    show(sources, labels={"last_rows_loaded": "Rows in the last import",
                          "last_rows_rejected": "Rejected in the last import",
                          "rows_loaded_total": "Rows imported in all"},
         kinds={"last_rows_loaded": "count", "last_rows_rejected": "count", "rows_loaded_total": "count"},
         config={"last_import": st.column_config.DatetimeColumn("Last import (UTC)", format="YYYY-MM-DD HH:mm"),
                 "read_up_to": st.column_config.DatetimeColumn(
                     "Read up to (UTC)", format="YYYY-MM-DD HH:mm",
                     help="MLflow: the latest run start or end seen; the next import reads what changed after")})
    st.caption("An import that found nothing new is not listed as a new import: the ledger already holds it.")

st.subheader("Load history")
history = cache.fetch(queries.loads)
if history.empty:
    st.info("Nothing loaded yet. Upload files above, or run `mlcost ingest PATH` (or `mlcost demo` for sample data).")
else:
    st.caption("Loading a file again with another kind, time zone, host or scrape time replaces its earlier load. "
               "*Rows in use*: the load's rows no later load has replaced.")
    show(history, first=("load_id", "path", "kind", "options", "rows_loaded", "rows_rejected", "rows_current"))
    if not access.read_only():  # removing data is a write
        with st.form("unload"):
            choices = {f"{row.load_id}: {row.path} ({row.kind}, {row.loaded_at:%Y-%m-%d %H:%M} UTC)": int(row.load_id)
                       for row in history.itertuples()}
            # Nothing picked until the user picks: a preselected load is one click from removal.
            picked_load = st.selectbox("Load to remove", list(choices), index=None, key="unload_pick",
                                       placeholder="Choose a load to remove")
            st.caption("Removes the load, every row it brought and its rejected lines (`mlcost unload` does the same). "
                       "Rows it had replaced from earlier loads do not come back: load those files again.")
            if st.form_submit_button("Unload", icon=":material/delete:"):
                if picked_load is None:
                    st.warning("Choose the load to remove first.")
                    st.stop()
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
    show(rejected, first=("path", "line", "reason"), labels={"raw": "Line as read"})
