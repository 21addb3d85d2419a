"""The engine every format uses: the parser contract and strict value readers, one file's staging database
(staging, line_sql, line_numbers), the warehouse (warehouse, the one entry point, over wh_connection,
wh_merge, wh_loads) and the summary of a loaded file (report). Imports derived and settings only."""
