"""The top of ingest: paths in, loaded files out (loader: expand, detect the kind, stage, merge,
summarise) and bills pulled from S3 then loaded (s3_fetch). Imports every layer below."""
