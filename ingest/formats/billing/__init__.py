"""Cloud bills: FOCUS, AWS CUR, GCP (CSV and JSON lines), Azure; each format is a Bill
(bill_definition, its steps in bill_steps) read as SQL (bill_plan, staged by bill_stage and bill_sql)
and record by record (bill_build, with bill_values' readers, billing's file readers and line keys);
bill_family says what a family and a billing_lines row are."""
