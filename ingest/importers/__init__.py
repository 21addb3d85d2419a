"""Importers: read runs and metrics where ML teams keep them (Prometheus, MLflow, W&B, Slurm).

Each importer turns its source into the same `Parsed` records the file parsers make and loads
them through `ledger.load_import`, so an import lands in the ledger like a file.
"""
