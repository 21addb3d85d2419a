"""Training-run files: JSON run summaries (run_summary, one definition read by ingest/engine) and
CodeCarbon (and the importers' runs), checked and derived by run_record."""
