"""Cloud bills: FOCUS, AWS CUR, GCP (CSV and JSON lines), Azure; billing holds the shared line rules,
bill_stage and bill_sql the columnar staging every schema uses."""
