"""Untrusted text stays text: a project named like a Markdown image (a tracking pixel on
127.0.0.1), a run named like a spreadsheet formula, a metric named like a link. Every Markdown
string the pages write and the Markdown report are rendered with a CommonMark renderer with GFM
tables (markdown-it-py) and must hold no image, no link and no raw HTML; the CSV download neutralises
formula cells."""
from __future__ import annotations

import csv
import io
import json
import re
from datetime import date, timedelta
from pathlib import Path

import pandas as pd
import pytest
from markdown_it import MarkdownIt
from streamlit.testing.v1 import AppTest

from metrics import retrospective
from outputs import report
from present import format as fmt
from ingest.pipeline import loader
from tests.conftest import REPO_ROOT

APP = REPO_ROOT / "app" / "main.py"
PIXEL = "![x](http://127.0.0.1:9/leak.png)"
FORMULA = '=HYPERLINK("http://127.0.0.1:9/x","x")'
METRIC = "[acc](http://127.0.0.1:9/m) <img src=http://127.0.0.1:9/i.png> :red[x] $x$"
RENDER = MarkdownIt("commonmark").enable(["table", "strikethrough"])


def hostile_runs(path: Path) -> Path:
    """March 2026: project PIXEL with a cheap run on the frontier and a 3x dearer dominated one,
    a run named FORMULA, all on metric METRIC."""
    runs = []
    for i, (run_id, hours, score) in enumerate([("cheap", 1, 0.9), ("dear", 3, 0.8), (FORMULA, 2, 0.85),
                                               ("-2+3", 2, 0.7), ("@SUM(A1)", 2, 0.6)]):
        day = date(2026, 3, 2) + timedelta(days=i)
        runs.append({"run_id": run_id, "project": PIXEL, "team": "t <b>x</b>", "start_time": f"{day}T08:00:00Z",
                     "end_time": f"{day}T{8 + hours:02d}:00:00Z", "instance_type": "x", "price_per_hour_usd": 10,
                     "val_metric": score, "val_metric_name": METRIC, "goal": "max", "status": "completed"})
    path.write_text("\n".join(json.dumps(run) for run in runs) + "\n")
    return path


def markup_in(markdown: str) -> list[str]:
    """Images, links and raw HTML in `markdown` rendered as a browser would get it."""
    rendered = RENDER.render(markdown)
    return re.findall(r"<(?:img|a|b|script)\b[^>]*>", rendered)


def test_md_escapes_render_as_the_same_text():
    for text in (PIXEL, FORMULA, METRIC, "a_b*c*", "# heading", "- item", "1. item", "x|y", "back\\slash"):
        rendered = RENDER.render(fmt.md(text))
        assert markup_in(fmt.md(text)) == [] and markup_in(fmt.md_inline(text)) == [], text
        plain = re.sub(r"<[^>]+>", "", rendered).strip()
        assert plain == text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;"), text


def test_the_markdown_report_keeps_names_as_text(warehouse, tmp_path):
    assert loader.ingest_file(hostile_runs(tmp_path / "runs.jsonl")).ok
    retro = retrospective.build(date(2026, 3, 1))
    assert any(PIXEL in item.text for item in retro.recommendations)  # the name reaches the report
    text = report.markdown(retro)
    assert markup_in(text) == []
    assert "!\\[x\\](http://127.0.0.1:9/leak.png)" in text  # still readable as the name it is
    page = report.html_report(retro)
    assert "http://127.0.0.1:9" not in re.sub(r"&[a-z]+;|&#\d+;", "", "".join(
        re.findall(r"<(?:img|link|script|a)\b[^>]*>", page)))


def markdown_strings(at: AppTest) -> list[str]:
    """Every string the page handed to Streamlit to render as Markdown."""
    out = [e.value for kind in ("markdown", "caption", "header", "subheader", "title", "info", "warning",
                                "error", "success") for e in getattr(at, kind)]
    out += [e.label for e in at.metric] + [e.label for e in at.expander]
    return out


@pytest.mark.parametrize("page", ["app_pages/overview.py", "app_pages/training_runs.py",
                                  "app_pages/retrospective.py", "app_pages/budgets.py", "app_pages/data.py"])
def test_pages_render_names_as_text(warehouse, tmp_path, monkeypatch, page):
    assert loader.ingest_file(hostile_runs(tmp_path / "runs.jsonl")).ok
    (tmp_path / "mlcost.toml").write_text(f'[[budgets]]\nname = "{PIXEL}"\nscope = "project:{PIXEL}"\namount = 10\n')
    monkeypatch.setenv("MLCOST_CONFIG", str(tmp_path / "mlcost.toml"))
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    at.switch_page(page).run()
    if page.endswith("retrospective.py"):
        at.selectbox(key="retro_month").set_value(date(2026, 3, 1)).run()
    assert not at.exception, [e.value for e in at.exception]
    strings = markdown_strings(at)
    assert all(markup_in(s) == [] for s in strings), [s for s in strings if markup_in(s)]
    if page.endswith(("retrospective.py", "training_runs.py")):
        assert any("127.0.0.1" in s for s in strings)  # the hostile names were shown, as text


def test_csv_downloads_neutralise_formulas():
    frame = pd.DataFrame({"run_id": [FORMULA, "+1", "-2+3", "@SUM(A1)", "\tx", "\rx", "plain", None],
                          "cost_usd": [1.5, -2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]})
    rows = list(csv.DictReader(io.StringIO(fmt.csv_bytes(frame).decode(), newline="")))
    assert [r["run_id"] for r in rows] == ["'" + FORMULA, "'+1", "'-2+3", "'@SUM(A1)", "'\tx", "'\rx", "plain", ""]
    assert [r["cost_usd"] for r in rows][:2] == ["1.5", "-2.0"]  # numbers stay numbers


def test_every_download_goes_through_the_helper():
    pages = list((REPO_ROOT / "app").rglob("*.py"))
    offenders = [str(p) for p in pages if ".to_csv(" in p.read_text() and p.name != "format.py"]
    assert offenders == []
    downloads = [p for p in pages if "download_button" in p.read_text() and "mime=\"text/csv\"" in p.read_text()]
    # a page builds its CSV with csv_bytes, or gets it from app/cache.py, which does
    assert downloads and all("csv_bytes(" in p.read_text() or "cache.training_runs_csv(" in p.read_text()
                             for p in downloads)
    assert "return csv_bytes(" in (REPO_ROOT / "app" / "cache.py").read_text()
