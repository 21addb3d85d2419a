"""A file's next line batch split on a thread while DuckDB types the current one.

`Ahead(make)` wraps the batches of a Source: `make(src)` is called with a copy of the Source
whose progress calls are recorded, not made, and each batch is handed out with the calls its
split made, which are then made on the caller's thread (a Streamlit progress bar can only be
drawn from the script's own thread). Until `start()` the batches are read on the caller's
thread, as a plain iterator would; after it, one batch is read ahead on a thread of its own
(Arrow's split and the file's reads let go of the GIL). An error of the split (a byte that is
not UTF-8, a broken .gz) is raised where the batch it stopped would have been handed out, so
the caller sees what it saw without this. `close()` stops the thread (a file refused at its
header stops reading early).

Why (500k serving windows, 237 MB, 64 MB batches): the split of each batch costs ~0.07 s of one
core, Python's, during which DuckDB waited; DuckDB's typing statements wait on nothing here.
"""
from __future__ import annotations

import dataclasses
import queue
import threading
from typing import Callable, Iterator

from ingest.engine.staging import Source

_DONE = object()  # the split's end


class Ahead:
    """The batches of `make(src)`, read one ahead on a thread once start() is called."""

    def __init__(self, src: Source, make: Callable[[Source], Iterator]) -> None:
        self._progress = src.progress
        self._calls: list[tuple[int, int]] = []  # progress calls made by the split, not yet replayed
        recorded = dataclasses.replace(src, progress=self._record) if src.progress is not None else src
        self._batches = make(recorded)
        self._queue: queue.Queue = queue.Queue()
        # One batch ahead, no more: the next is split only once the caller has taken the one before
        # (memory for one more batch; a queue of one alone would let the thread hold two).
        self._free = threading.Semaphore(1)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._then: Callable | None = None

    def _record(self, done: int, lines: int) -> None:
        self._calls.append((done, lines))

    def _replay(self, calls: list[tuple[int, int]]) -> None:
        for call in calls:
            self._progress(*call)

    def __iter__(self) -> "Ahead":
        return self

    def __next__(self):
        if self._thread is None:  # on this thread, as a plain iterator
            batch = next(self._batches)  # StopIteration and errors as they come
            calls, self._calls = self._calls, []
            self._replay(calls)
            return batch
        item, calls, error = self._queue.get()
        self._free.release()  # the thread may split the next
        self._replay(calls)
        if error is not None:
            self._thread.join()
            raise error
        if item is _DONE:
            self._thread.join()
            raise StopIteration
        return item

    def start(self, then: Callable | None = None) -> None:
        """Read the following batches on a thread, one ahead of the caller; `then(batch)`, when
        given, is applied to each on that thread too (line_marks.marked)."""
        if self._thread is None:
            self._then = then
            self._thread = threading.Thread(target=self._run, name="mlcost-read-ahead", daemon=True)
            self._thread.start()

    def _wait_free(self) -> bool:
        """Wait until the caller has taken the batch before; False when it has stopped reading."""
        while not self._stop.is_set():
            if self._free.acquire(timeout=0.05):
                return True
        return False

    def _run(self) -> None:
        try:
            while self._wait_free():
                try:
                    batch = next(self._batches)
                except StopIteration:
                    calls, self._calls = self._calls, []
                    self._queue.put((_DONE, calls, None))
                    return
                if self._stop.is_set():  # closed meanwhile: the batch is not wanted
                    return
                if self._then is not None:
                    batch = self._then(batch)
                calls, self._calls = self._calls, []
                self._queue.put((batch, calls, None))
        except BaseException as error:  # noqa: BLE001 (handed to the caller, raised there)
            calls, self._calls = self._calls, []
            self._queue.put((None, calls, error))
        finally:
            if self._stop.is_set():
                close = getattr(self._batches, "close", None)
                if close is not None:
                    close()  # the file is closed on this thread, which owns the generator now

    def close(self, wait: bool = True) -> None:
        """Stop reading ahead (the batch in hand is dropped); the file is closed. Not `wait`: the
        thread, if it is splitting a batch, finishes it and closes the file on its own meanwhile
        (a file found already loaded does not wait for a batch no one will read)."""
        if self._thread is None:
            close = getattr(self._batches, "close", None)
            if close is not None:
                close()
            return
        self._stop.set()
        if not wait:
            return
        self._thread.join()  # it stops before the next batch (or after the one it is splitting)
        while not self._queue.empty():
            self._queue.get_nowait()  # a batch not taken: its memory
