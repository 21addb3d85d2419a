"""Derived tables: SQL run on a connection the warehouse hands in, inside its transaction (GPU rollups,
per-run energy, bill lines' runs, the allocation, runs priced from traces). Never opens the warehouse;
imports settings only."""
