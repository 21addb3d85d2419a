"""Formats: one module (or subpackage) per family of files, each following the parser contract
(ingest/engine/contract.py): runs/, gpu/, billing/, serving_metrics, mixed_scrape. Imports engine, derived
and settings; never importers or pipeline."""
