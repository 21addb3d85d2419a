"""Ingestors: read source files, validate them line by line, load them into the warehouse."""
