"""The warehouse as an open lake: Parquet files plus a ledger in a folder or an s3:// prefix.

docs/lake.md is the layout contract (Spark's entry point writes the same). The package lives inside
ingest/ because the warehouse module (ingest/wh_connection.py, the one owner of connections) opens
it: a `[warehouse] lake` turns every connection into one whose warehouse tables are views over the
lake's committed files.

- layout.py: which table goes where, partition columns, load ids, file names;
- store.py: the folder or bucket (fsspec), atomic writes, the ledger's entries;
- writer.py: `mlcost load --lake` (each file validated by the embedded pipeline, then written);
- derive.py: `mlcost derive --lake` (the derived tables, with the embedded path's SQL);
- views.py: the read side, temp views over the committed files on a warehouse connection.
"""
