"""What the lenient JSON read and the CSV read ask of each line's text, worked out by Arrow before DuckDB reads the batch.

Two columns are added to a batch of JSON lines (`line`, `raw`):
- `quirk_found`: the line matches the definition's quirk pattern (batch_json.quirk_pattern: a line
  the lenient read may take otherwise than Python; it goes to the strict read);
- `key_marks`: how many times `":` occurs in it (each key of a line without escapes ends so; the
  lenient read trusts a line whose count equals the keys it read: none repeated or unknown).

Both are what DuckDB's `regexp_matches(raw, pattern)` and `(strlen(raw) - strlen(replace(raw,
'":', ''))) // 2` gave in the lenient statement: the same RE2 library, the same pattern text,
non-overlapping counts. Arrow's RE2 scan costs about half of DuckDB's (500k serving windows:
~0.3 vs ~0.6 CPU s), and it runs on the read-ahead thread (read_ahead.py) while DuckDB types the
batch before, so the typing statement no longer waits for it.

For CSV, one column (`tight_marked`): the line is tight under the file's header (the whole line
matches batch_csv.tight_pattern; what DuckDB's `regexp_full_match(raw, pattern)` gave in the
typing statement: ~0.5 of its ~1.3 CPU s a million collector samples; Arrow: ~0.24, on the
read-ahead thread).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

COLUMNS = ("quirk_found", "key_marks")
CSV_COLUMN = "tight_marked"


def marked(batch: "pa.Table", pattern: str) -> "pa.Table":
    """`batch` (line, raw) with quirk_found (BOOLEAN) and key_marks (BIGINT) added."""
    import pyarrow as pa
    import pyarrow.compute as pc

    raw = batch.column("raw")
    quirk = pc.match_substring_regex(raw, pattern)
    marks = pc.count_substring(raw, '":').cast(pa.int64())
    return batch.append_column("quirk_found", quirk).append_column("key_marks", marks)


def csv_marked(batch: "pa.Table", pattern: str | None) -> "pa.Table":
    """`batch` (line, raw) with tight_marked (BOOLEAN): the whole line matches `pattern`
    (batch_csv.tight_pattern; None: no line is tight)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    raw = batch.column("raw")
    if pattern is None:  # all false, from its bytes (a Python value handed to Arrow imports pandas)
        tight = pa.Array.from_buffers(pa.bool_(), len(raw), [None, pa.py_buffer(bytes((len(raw) + 7) // 8))])
    else:  # anchored at both ends: RE2's `$` is the end of the text alone, as regexp_full_match
        tight = pc.match_substring_regex(raw, f"^(?:{pattern})$")
    return batch.append_column(CSV_COLUMN, tight)
