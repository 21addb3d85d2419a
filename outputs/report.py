"""The retrospective (metrics/retrospective.py) as Markdown or as one self-contained HTML file.

The HTML carries plotly.js inline once, before the first chart, and no link to anything
outside the file (no CDN, no web font), so it opens offline. Every text that came from data or
from a person (names, notes, decisions) is escaped.
"""
from __future__ import annotations

import html
from decimal import Decimal

import pandas as pd

from present.format import Column, cell, html_code, md_code, md_inline, text_table, unit_column
from metrics.retrospective import Figure, Retrospective, Section, is_missing

TITLE = "Efficiency retrospective"
CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 2rem auto;
       max-width: 1100px; color: #1f2933; padding: 0 1rem; }
h1 { margin-bottom: .2rem; } h2 { margin-top: 2.2rem; border-bottom: 1px solid #d9dee3; }
table { border-collapse: collapse; margin: .6rem 0; font-size: .92rem; }
th, td { border: 1px solid #d9dee3; padding: .3rem .6rem; text-align: left; vertical-align: top; white-space: nowrap; }
table.wrap td { white-space: normal; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f3f5f7; } .note { color: #52606d; } .evidence { font-weight: 600; }
ol.recs li { margin: .35rem 0; } .partial { background: #fff4d6; padding: .4rem .7rem; }
"""


# --- numbers as text ----------------------------------------------------------------------

def number(value: object, unit: str) -> str:
    """`value` written for `unit` as every table writes that kind (present.format.cell):
    '$1,234.56' for USD, '1,234.56 EUR', '12.5 kWh', '3.1 %', '—' when unknown."""
    if is_missing(value):
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    spec, suffix = unit_column(unit)
    if spec is None:
        if isinstance(value, float):
            return f"{value:,.4g}"
        return cell(value, Column("", "datetime")) if isinstance(value, pd.Timestamp) else str(value)
    return cell(value, spec) + suffix


def change(figure: Figure) -> str:
    """'+12.5 %'; on a tiny base (Figure.tiny_base) the difference itself, '+$1,234.56'."""
    difference = figure.change
    if difference is None:
        return "—"
    if figure.tiny_base or figure.change_pct is None:
        text = number(abs(difference), figure.unit)
        return f"{'-' if difference < 0 else '+'}{text}"
    return f"{figure.change_pct:+.1f} %"


def _month(retro: Retrospective, which: str) -> str:
    return getattr(retro, which).strftime("%Y-%m")


def column_label(retro: Retrospective, which: str) -> str:
    """A figure table's column: '2026-10', or with the days compared in a partial month, '2026-10 (1-21)'
    (the comparison window, metrics/periods.py)."""
    if retro.window is None:
        return _month(retro, which)
    return retro.window.label("current" if which == "month" else "previous")


def figure_rows(retro: Retrospective, section: Section) -> list[list[str]]:
    """[label, previous, current, change] per figure, as text."""
    return [[f.label, number(f.previous, f.unit), number(f.current, f.unit), change(f)] for f in section.figures]


def table_rows(section: Section) -> tuple[list[str], list[list[str]]]:
    """The section's table as header and rows of text, each column labelled and formatted as the
    column catalogue says (present.format: the same labels and money as the dashboard's tables)."""
    return text_table(section.table)


DECISION_HEADER = ["Written (UTC)", "Kind", "Author", "Text"]


def decision_rows(retro: Retrospective) -> list[list[str]]:
    return [[f"{pd.Timestamp(d.written_at):%Y-%m-%d %H:%M}", d.kind, "" if is_missing(d.author) else d.author, d.text]
            for d in retro.decisions.itertuples()]


def headline(retro: Retrospective) -> str:
    """The report's first line: the months and, once, the days compared."""
    return f"{_month(retro, 'month')} against {_month(retro, 'previous')} (UTC days). {retro.comparison}"


# --- Markdown -----------------------------------------------------------------------------

def _md_cell(text: str) -> str:
    return md_inline(text)  # names, tags and notes come from data and people: text, never markup


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(_md_cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return lines + [""]


def markdown(retro: Retrospective) -> str:
    """The whole retrospective as Markdown: figures, tables, recommendations and decisions."""
    out = [f"# {TITLE} {_month(retro, 'month')}", "", headline(retro), "", "## Recommendations", ""]
    if retro.recommendations:
        out += [f"{i}. {md_code(r.text, md_inline)} (evidence: **{_md_cell(r.evidence)}**)" for i, r in enumerate(retro.recommendations, 1)]
    else:
        out.append("No rule found anything to change this month.")
    out.append("")
    for section in retro.sections:
        out += [f"## {_md_cell(section.title)}", ""]
        if section.figures:
            out += _md_table(["Figure", column_label(retro, "previous"), column_label(retro, "month"), "Change"],
                             figure_rows(retro, section))
        if section.table is not None and not section.table.empty:
            out += _md_table(*table_rows(section))
        out += [f"{md_code(note, md_inline)}\n" for note in section.notes]
    out += ["## Decisions and notes", ""]
    rows = decision_rows(retro)
    out += _md_table(DECISION_HEADER, rows) if rows else ["None written yet.", ""]
    return "\n".join(out).rstrip() + "\n"


# --- HTML ---------------------------------------------------------------------------------

def _html_table(header: list[str], rows: list[list[str]], wrap: bool = False) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f'<td{_numeric(c)}>{html.escape(c)}</td>' for c in row) + "</tr>" for row in rows)
    opening = '<table class="wrap">' if wrap else "<table>"
    return f"{opening}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _numeric(text: str) -> str:
    bare = text.replace(",", "").replace("$", "").replace("%", "").replace("+", "").replace("-", "").split(" ")[0]
    return ' class="num"' if bare.replace(".", "", 1).isdigit() else ""


def html_report(retro: Retrospective) -> str:
    """The whole retrospective as one HTML file with its charts inline (plotly.js embedded once)."""
    month = _month(retro, "month")
    parts = [f"<h1>{TITLE} {month}</h1>",
             f'<p class="{"partial" if retro.data_through else "note"}">{html.escape(headline(retro))}</p>',
             "<h2>Recommendations</h2>"]
    if retro.recommendations:
        items = "".join(f'<li>{html_code(r.text)} <span class="evidence">(evidence: {html.escape(r.evidence)})</span></li>'
                        for r in retro.recommendations)
        parts.append(f'<ol class="recs">{items}</ol>')
    else:
        parts.append("<p>No rule found anything to change this month.</p>")
    plotly_included = False
    for section in retro.sections:
        parts.append(f"<h2>{html.escape(section.title)}</h2>")
        if section.figures:
            parts.append(_html_table(["Figure", column_label(retro, "previous"), column_label(retro, "month"), "Change"],
                                     figure_rows(retro, section)))
        if section.chart is not None:
            parts.append(section.chart.to_html(full_html=False, include_plotlyjs=not plotly_included,
                                               config={"displaylogo": False, "responsive": True}))
            plotly_included = True
        if section.table is not None and not section.table.empty:
            parts.append(_html_table(*table_rows(section)))
        parts += [f'<p class="note">{html_code(note)}</p>' for note in section.notes]
    parts.append("<h2>Decisions and notes</h2>")
    rows = decision_rows(retro)
    parts.append(_html_table(DECISION_HEADER, rows, wrap=True) if rows
                 else "<p>None written yet.</p>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{TITLE} {month}</title><style>{CSS}</style></head><body>\n"
            + "\n".join(parts) + "\n</body></html>\n")
