"""Time every dashboard page cold and warm under Streamlit's AppTest, and count its chart points.

    python bench/page_timings.py WAREHOUSE.duckdb [--page "Training runs"]

`time_pages(db_path)` is what bench/fleet.py imports: per page (in the order of app/main.py),
the seconds of a first run with empty caches (cold), of a rerun (warm), and the largest number
of points any one of its plotly charts carries.
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
APP = REPO / "app" / "main.py"
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# plotly's typed arrays ({"dtype": "f8", "bdata": base64}): bytes per value
_ITEM_BYTES = {"i1": 1, "u1": 1, "i2": 2, "u2": 2, "i4": 4, "u4": 4, "f4": 4, "f8": 8, "i8": 8, "u8": 8}


@dataclass(frozen=True)
class PageTiming:
    page: str
    cold_s: float
    warm_s: float
    max_points: int
    error: str | None = None

    def __iter__(self):  # unpacks as (page, cold_s, warm_s, max_points)
        return iter((self.page, self.cold_s, self.warm_s, self.max_points))


# the component registry of the first AppTest, handed to every later one (see time_page)
_COMPONENTS: list = []


def pages() -> list[tuple[str, str]]:
    """(title, path relative to app/) of every page registered in app/main.py, in menu order."""
    text = APP.read_text()
    return [(title, path) for path, title in re.findall(r'st\.Page\("([^"]+)", title="([^"]+)"', text)]


def _values(array: object) -> int:
    """How many values a plotly data array holds (a list, nested lists, or a typed array)."""
    if isinstance(array, dict) and "bdata" in array:
        size = len(base64.b64decode(array["bdata"])) // _ITEM_BYTES.get(array.get("dtype", "f8"), 8)
        return size
    if isinstance(array, (list, tuple)):
        if array and isinstance(array[0], (list, tuple, dict)):
            return sum(_values(item) for item in array)
        return len(array)
    return 0


def chart_points(spec: dict) -> int:
    """Points a plotly figure draws: per trace, its z cells (heatmaps) or else its x or y values."""
    total = 0
    for trace in spec.get("data", []):
        if "z" in trace:
            total += _values(trace["z"])
        else:
            total += max(_values(trace.get("x")), _values(trace.get("y")))
    return total


def _max_points(at) -> int:
    counts = [0]
    for element in at.get("plotly_chart"):
        spec = json.loads(element.proto.spec)
        counts.append(chart_points(spec))
    return max(counts)


def time_page(path: str, timeout_s: float = 300) -> PageTiming:
    """One page against the warehouse in $MLCOST_DB: a cold run (caches cleared), then a rerun."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    st.cache_data.clear()
    st.cache_resource.clear()
    at = AppTest.from_file(str(APP), default_timeout=timeout_s)
    if _COMPONENTS and hasattr(at, "_bidi_component_manager"):
        # a server scans installed packages for components once, at start; each AppTest would
        # scan again on its first run (0.5-2 s here), which is no page's time
        at._bidi_component_manager = _COMPONENTS[0]
    at.switch_page(path)
    began = time.perf_counter()
    at.run()
    cold_s = time.perf_counter() - began
    began = time.perf_counter()
    at.run()
    warm_s = time.perf_counter() - began
    error = "; ".join(e.message for e in at.exception) or None
    return PageTiming(path, cold_s, warm_s, _max_points(at), error)


def _start_up() -> None:
    """What a server pays once when it starts, not per page: Streamlit's scan for installed
    components (on the first script run of a process, seconds), the warehouse's schema check (on
    its first connection) and plotly's first figure (it loads its validators)."""
    import plotly.graph_objects as go
    from streamlit.testing.v1 import AppTest

    from ingest.engine import warehouse

    first = AppTest.from_string("import streamlit as st\nst.write('up')", default_timeout=300)
    first.run()
    if getattr(first, "_bidi_component_manager", None) is not None:
        _COMPONENTS[:] = [first._bidi_component_manager]
    with warehouse.read():
        pass
    go.Figure(go.Bar(x=[1], y=[1])).to_json()


def time_pages(db_path: Path | str, only: list[str] | None = None) -> list[PageTiming]:
    """Every page (or those titled in `only`) timed cold and warm against the warehouse `db_path`."""
    previous = os.environ.get("MLCOST_DB")
    os.environ["MLCOST_DB"] = str(db_path)
    # imports are paid once per server process, not per page: take them out of the first page's time
    import plotly.express  # noqa: F401
    from app import cache  # noqa: F401
    from metrics import queries, retrospective  # noqa: F401
    from outputs import report  # noqa: F401
    from present import charts  # noqa: F401
    try:
        _start_up()
        results = []
        for title, path in pages():
            if only and title not in only:
                continue
            timing = time_page(path)
            results.append(PageTiming(title, timing.cold_s, timing.warm_s, timing.max_points, timing.error))
        return results
    finally:
        if previous is None:
            os.environ.pop("MLCOST_DB", None)
        else:
            os.environ["MLCOST_DB"] = previous


def table(results: list[PageTiming]) -> str:
    """A Markdown table of the timings."""
    lines = ["| page | cold (s) | warm (s) | most points in a chart |", "|---|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r.page} | {r.cold_s:.2f} | {r.warm_s:.2f} | {r.max_points:,} |"
                     + (f" error: {r.error}" if r.error else ""))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("db", type=Path)
    parser.add_argument("--page", action="append", help="only this page title (repeatable)")
    args = parser.parse_args()
    print(table(time_pages(args.db, args.page)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
