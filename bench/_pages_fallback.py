"""Every dashboard page timed cold and warm under Streamlit's AppTest, with the points of its
largest chart; bench/fleet.py uses this only while bench/page_timings.py is absent."""
from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[1]
APP = REPO_ROOT / "app" / "main.py"
PAGES = {
    "Overview": "app_pages/overview.py", "Training runs": "app_pages/training_runs.py",
    "Serving": "app_pages/serving.py", "Idle GPUs": "app_pages/idle_gpus.py",
    "Billing": "app_pages/billing.py", "Reconciliation": "app_pages/reconciliation.py",
    "Budgets": "app_pages/budgets.py", "Alerts": "app_pages/alerts.py",
    "Retrospective": "app_pages/retrospective.py", "Data": "app_pages/data.py",
}
DATA_KEYS = ("x", "y", "z", "values", "lat", "lon", "r")


def time_pages(db_path: Path) -> list[tuple[str, float, float, int]]:
    """(page, cold_s, warm_s, max_points): seconds of a run with empty caches, then of a rerun,
    and the most data points any one chart of the page carries."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    os.environ["MLCOST_DB"] = str(db_path)
    rows = []
    at = AppTest.from_file(str(APP), default_timeout=1800).run()  # imports done, sidebar drawn
    for page, script in PAGES.items():
        st.cache_data.clear()
        if page != "Overview":
            at.switch_page(script)
        began = time.perf_counter()
        at.run()
        cold_s = time.perf_counter() - began
        began = time.perf_counter()
        at.run()
        warm_s = time.perf_counter() - began
        if at.exception:
            raise RuntimeError(f"{page}: {at.exception[0].message}")
        rows.append((page, cold_s, warm_s, max((chart_points(c.proto.spec) for c in at.get("plotly_chart")),
                                                default=0)))
    return rows


def chart_points(spec: str) -> int:
    """Data points a plotly figure (its JSON) sends to the browser, over all its traces."""
    figure = json.loads(spec)
    return sum(max((_length(trace[key]) for key in DATA_KEYS if key in trace), default=0)
               for trace in figure.get("data", []))


def _length(values) -> int:
    if isinstance(values, dict) and "bdata" in values:  # plotly's typed array
        shape = values.get("shape")
        if shape:
            return int(np.prod([int(n) for n in str(shape).split(",")]))
        return len(base64.b64decode(values["bdata"])) // np.dtype(values["dtype"]).itemsize
    if isinstance(values, list):
        return sum(_length(v) if isinstance(v, (list, dict)) else 1 for v in values)
    return 1
