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
SPLIT_ROWS = 16_384  # a batch of more lines is marked in two halves at once, the first on a thread of its own


def marked(batch: "pa.Table", pattern: str) -> "pa.Table":
    """`batch` (line, raw) with quirk_found (BOOLEAN) and key_marks (BIGINT) added. A large batch
    is marked in two halves at once: Arrow lets go of the GIL, so the second core does the other
    half (one 62 MB batch of 100k runs: ~0.25 CPU s either way, about half of it in wall time)."""
    import pyarrow as pa

    raw = batch.column("raw")
    if len(raw) <= SPLIT_ROWS:
        quirk, marks = _marks(raw, pattern)
    else:
        from concurrent.futures import ThreadPoolExecutor

        half = len(raw) // 2
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="mlcost-marks") as beside:
            first = beside.submit(_marks, raw.slice(0, half), pattern)
            quirk_rest, marks_rest = _marks(raw.slice(half), pattern)
            quirk_first, marks_first = first.result()  # the thread's error, if any, raised here
        quirk = pa.chunked_array(quirk_first.chunks + quirk_rest.chunks, pa.bool_())
        marks = pa.chunked_array(marks_first.chunks + marks_rest.chunks, pa.int64())
    return batch.append_column("quirk_found", quirk).append_column("key_marks", marks)


def _marks(raw: "pa.ChunkedArray", pattern: str) -> tuple["pa.ChunkedArray", "pa.ChunkedArray"]:
    """Each line's quirk match and `":` count."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.match_substring_regex(raw, pattern), pc.count_substring(raw, '":').cast(pa.int64())


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
