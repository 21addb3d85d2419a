"""One call run on a thread of its own while the caller goes on (the loader's stage opening and
warehouse schema check, beside its reading the head and detecting the kind).

DuckDB lets go of the GIL while it runs a statement, so opening a staging database (~0.05-0.1 s
the first time in a process: schema.sql run in memory) or putting the warehouse's schema in place
(~0.1 s for a new warehouse) overlaps the Python the caller runs meanwhile (importing the formats'
modules for detection). The call's error is raised where its value is asked for, as if it had been
made there.
"""
from __future__ import annotations

import threading
from typing import Callable, Generic, TypeVar

T = TypeVar("T")


class Beside(threading.Thread, Generic[T]):
    """`call(*args)` started on a daemon thread; value() waits for it."""

    def __init__(self, call: Callable[..., T], *args, name: str = "mlcost-beside") -> None:
        super().__init__(name=name, daemon=True)
        self._call, self._args = call, args
        self._value: T | None = None
        self._error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            self._value = self._call(*self._args)
        except BaseException as error:  # noqa: BLE001 (raised by value(), on the caller's thread)
            self._error = error

    def value(self) -> T:
        """The call's result, once it has returned; its error raised here if it raised."""
        self.join()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]

    def discard(self, close: Callable[[T], object] | None = None) -> None:
        """Wait for the call and drop its result (passed to `close` when it returned one); its
        error is dropped too (the caller has a reason of its own to stop)."""
        self.join()
        if self._error is None and close is not None and self._value is not None:
            close(self._value)
