"""Training-run files: JSON run summaries (runs_json, staged by runs_columnar) and CodeCarbon, both
checked and derived by run_record."""
