"""The load ledger, import sources, rejected lines and the decisions log."""
from __future__ import annotations

from datetime import date

import pandas as pd

from ingest.engine import warehouse

def loads() -> pd.DataFrame:
    """The load ledger, newest first, with the options each file was read with and how many of
    its rows are still in the warehouse (later loads replace rows with the same key)."""
    return warehouse.query("""
        WITH current AS (
            SELECT load_id, count(*) AS n FROM runs GROUP BY load_id
            UNION ALL SELECT load_id, count(*) FROM serving_windows GROUP BY load_id
            UNION ALL SELECT load_id, count(*) FROM gpu_samples GROUP BY load_id
            UNION ALL SELECT load_id, count(*) FROM billing_lines GROUP BY load_id
        )
        SELECT l.load_id, l.loaded_at, l.path, l.kind, coalesce(l.options, '') AS options,
               l.rows_loaded, l.rows_rejected,
               coalesce((SELECT sum(n) FROM current c WHERE c.load_id = l.load_id), 0)::BIGINT AS rows_current,
               l.sha256
        FROM loads l ORDER BY l.load_id DESC
    """)


IMPORT_KINDS = ("prometheus", "mlflow", "wandb", "slurm", "serving-metrics")


def import_sources() -> pd.DataFrame:
    """Each import source (`mlcost import ...`, or files of an import kind) with its last import
    that brought data (UTC), how many rows it brought, and how far it has been read (MLflow)."""
    return warehouse.query(
        r"""
        WITH imported AS (
            SELECT CASE WHEN kind IN ('prometheus', 'mlflow') OR regexp_matches(path, '^(wandb|slurm) ')
                        THEN regexp_extract(path, '^(\S+ \S+)', 1) ELSE kind || ' files' END AS source,
                   kind, load_id, loaded_at, rows_loaded, rows_rejected
            FROM loads WHERE kind IN (SELECT unnest(?))
        )
        SELECT i.source, i.kind, max(i.loaded_at) AS last_import, count(*) AS imports,
               arg_max(i.rows_loaded, i.load_id) AS last_rows_loaded,
               arg_max(i.rows_rejected, i.load_id) AS last_rows_rejected,
               sum(i.rows_loaded) AS rows_loaded_total,
               CASE WHEN w.kind = 'mlflow' THEN make_timestamp(CAST(w.watermark AS BIGINT) * 1000) END
                   AS read_up_to
        FROM imported i LEFT JOIN import_watermarks w USING (source)
        GROUP BY i.source, i.kind, w.kind, w.watermark
        ORDER BY last_import DESC
        """, [list(IMPORT_KINDS)])


def rejects(limit: int = 1000) -> pd.DataFrame:
    """The most recent rejected lines with file, line and reason."""
    return warehouse.query(
        "SELECT r.load_id, l.loaded_at, r.path, r.line, r.reason, r.raw "
        "FROM rejects r JOIN loads l USING (load_id) "
        "ORDER BY r.load_id DESC, r.line LIMIT ?", [limit]
    )


def decisions(month: date) -> pd.DataFrame:
    """The decisions log of `month` (the month of that date), oldest first."""
    return warehouse.query(
        "SELECT decision_id, month, kind, text, author, written_at FROM decisions "
        "WHERE month = date_trunc('month', ?::DATE)::DATE ORDER BY written_at, decision_id", [month])
