"""The warehouse as an open lake: Parquet files plus a ledger in a folder or an s3:// prefix.

docs/lake.md is the layout contract (Spark's entry point writes the same). The package lives inside
ingest/, below the engine, because the warehouse module (ingest/engine/wh_connection.py, the one owner
of connections) opens it: a `[warehouse] lake` turns every connection into one whose warehouse tables
are views over the lake's committed files. Writing a lake runs the whole pipeline, so it sits on top,
in ingest/pipeline/ (lake_load.py: `mlcost load --lake`; lake_derive.py: `mlcost derive --lake`).

- layout.py: which table goes where, partition columns, load ids, file names;
- store.py: the folder or bucket (fsspec), atomic writes, the ledger's entries;
- views.py: the read side, temp views over the committed files on a warehouse connection.
"""
