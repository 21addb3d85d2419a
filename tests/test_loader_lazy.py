"""The loader imports a format's module when detection reaches it or --kind names it: a serving
file's load imports no bill, trace or Prometheus parser, a runs file's none of trace, Prometheus or
Slurm (bills sniff before runs: a GCP label named run_id would look like a run). Real processes.
Also: the sha256 worked out on a thread still fails a file first, and newlines are counted only
for files that do not open as JSON."""
from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from tests import import_probe

REPO = Path(__file__).resolve().parents[1]
BILL_MODULES = ("ingest.formats.billing.billing_focus", "ingest.formats.billing.billing_aws",
                "ingest.formats.billing.bill_definition", "ingest.formats.billing.bill_stage")
TRACE_MODULES = ("ingest.formats.gpu.gpu_collector", "ingest.formats.gpu.nvidia_smi", "ingest.formats.gpu.dcgm",
                 "ingest.formats.gpu.traces")
OTHER_MODULES = ("ingest.formats.mixed_scrape", "ingest.formats.serving_metrics", "prometheus_client",
                 "ingest.importers.slurm", "hostlist")
WATCHED = (*BILL_MODULES, *TRACE_MODULES, *OTHER_MODULES, "ingest.formats.serving", "ingest.formats.runs.run_summary")

def _ingest(tmp_path: Path, *args: str) -> tuple[int, set[str]]:
    code, modules = import_probe.imported(["ingest", "--json", *args], WATCHED, tmp_path / "w.duckdb", cwd=tmp_path)
    return code, set(modules)


def _rows(tmp_path: Path, table: str) -> int:
    with duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True) as con:
        return con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def _window(i: int) -> dict:
    return {"window_start": f"2026-08-01T00:{i:02d}:00Z", "window_end": f"2026-08-01T00:{i + 1:02d}:00Z",
            "service": "chat", "model_version": "v1", "host": "h1", "requests_total": 10 + i,
            "requests_success": 9 + i, "cost_usd": 0.5}


def test_a_serving_file_imports_no_bill_trace_or_prometheus_parser(tmp_path):
    windows = [_window(i) for i in range(12)]
    (tmp_path / "serving.jsonl").write_text("".join(json.dumps(w) + "\n" for w in windows))
    code, imported = _ingest(tmp_path, "serving.jsonl")
    assert code == 0
    assert "ingest.formats.serving" in imported
    assert imported.isdisjoint(BILL_MODULES + TRACE_MODULES + OTHER_MODULES), imported
    assert _rows(tmp_path, "serving_windows") == len(windows)
    with duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True) as con:
        assert con.execute("SELECT sum(requests_total) FROM serving_windows").fetchone()[0] == \
            sum(w["requests_total"] for w in windows)


def test_a_runs_file_imports_no_trace_prometheus_or_slurm_parser(tmp_path):
    runs = [{"run_id": f"r{i}", "start_time": "2026-08-01T00:00:00Z", "end_time": "2026-08-01T02:00:00Z",
             "price_per_hour_usd": 2.5, "gpu_count": 1} for i in range(7)]
    (tmp_path / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in runs) + "{not json\n")
    code, imported = _ingest(tmp_path, "runs.jsonl")
    assert code == 1  # the bad line is a reject
    assert "ingest.formats.runs.run_summary" in imported
    assert imported.isdisjoint(TRACE_MODULES + OTHER_MODULES), imported
    assert _rows(tmp_path, "runs") == len(runs)
    with duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True) as con:
        assert con.execute("SELECT line, reason IS NOT NULL FROM rejects").fetchall() == [(len(runs) + 1, True)]
        assert con.execute("SELECT sum(cost_usd) FROM runs").fetchone()[0] == len(runs) * 2 * 2.5


def test_kind_imports_the_formats_up_to_it(tmp_path):
    windows = [_window(i) for i in range(3)]
    (tmp_path / "w.jsonl").write_text("".join(json.dumps(w) + "\n" for w in windows))
    code, imported = _ingest(tmp_path, "--kind", "serving", "w.jsonl")
    assert code == 0
    assert imported.isdisjoint(BILL_MODULES + TRACE_MODULES + OTHER_MODULES), imported
    assert _rows(tmp_path, "serving_windows") == 3


def test_kinds_and_parsers_are_every_format_in_detection_order():
    from ingest.pipeline import loader

    parsers = loader.PARSERS
    assert [parser.__name__ for parser in parsers] == list(loader.FORMATS)
    assert loader.KINDS == {parser.KIND: parser for parser in parsers}
    assert loader.of_kind("runs").__name__ == "ingest.formats.runs.run_summary"
    assert loader.of_kind("no-such-kind") is None


@pytest.mark.parametrize("text", [json.dumps(_window(0)) + "\n", "", "\xff not text"])
def test_a_file_that_cannot_be_hashed_says_cannot_read_and_loads_nothing(tmp_path, warehouse, monkeypatch, text):
    """The sha256 is worked out on a thread beside detection: its failure still ends the file
    first, whatever detection would have said (a serving file, an empty file, not UTF-8)."""
    from ingest.pipeline import loader

    path = tmp_path / "serving.jsonl"
    path.write_bytes(text.encode("latin-1") if text.startswith("\xff") else text.encode())

    def unreadable(_path, _counting=None):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(loader, "_sha256", unreadable)
    summary = loader.ingest_file(path)
    assert summary.error == f"{path}: cannot read (Permission denied)"
    assert (summary.kind, summary.rows_loaded) == (None, 0)
    assert not warehouse.exists()  # the warehouse was not even opened


def test_newlines_are_counted_for_csv_not_for_json(tmp_path):
    """A CSV bill's line numbers take the count from the hash pass; a JSON file's is not counted."""
    from ingest.engine import line_numbers
    from ingest.engine.staging import Source
    from ingest.pipeline import loader

    csv_path = tmp_path / "bill.csv"
    csv_path.write_text("a,b\n1,2\n3,4")  # 2 newlines, 3 lines (the last without one)
    loader._sha256(csv_path)
    assert line_numbers.count_lines(Source.of(csv_path, "bill.csv")) == 3
    assert len(line_numbers._COUNTED) == 1
    json_path = tmp_path / "runs.jsonl"
    json_path.write_text('\ufeff {"run_id": "a"}\n{"run_id": "b"}\n')
    line_numbers._COUNTED.clear()
    digest = loader._sha256(json_path)
    assert line_numbers._COUNTED == {}
    assert digest == __import__("hashlib").sha256(json_path.read_bytes()).hexdigest()
