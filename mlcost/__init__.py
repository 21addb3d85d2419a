"""The `mlcost` command: the one package that imports both `ingest` and `app` (downward)."""
