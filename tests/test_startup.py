"""A command imports what it uses: `mlcost ingest` starts without the dashboard's libraries, and
commands that only read or merge start without every parser (real processes, real files)."""
from __future__ import annotations

import json
from pathlib import Path

import duckdb

from tests import import_probe

REPO = Path(__file__).resolve().parents[1]
DASHBOARD_LIBRARIES = ("streamlit", "plotly", "pandas", "boto3", "app")

def test_kind_choices_are_the_loaders_kinds():
    from ingest.pipeline import loader
    from mlcost.commands import ingest as ingest_command

    assert list(ingest_command.KIND_CHOICES) == sorted(loader.KINDS)


def test_ingest_starts_without_the_dashboard_libraries(tmp_path):
    runs = tmp_path / "runs.jsonl"
    # records in the run vocabulary (the sample's seed measures, batch_size and the like, are read in
    # Python, which imports pandas through pyarrow: issue 23's one reading of a format removes that)
    plain = [json.dumps({k: v for k, v in json.loads(line).items() if k not in ("batch_size", "epochs", "tokens_per_sec")})
             for line in (REPO / "sample_data" / "runs.jsonl").read_text().splitlines()[:20]]
    runs.write_text("\n".join(plain) + "\n{not json\n")
    code, imported = import_probe.imported(["ingest", str(runs), "--json"], DASHBOARD_LIBRARIES, tmp_path / "w.duckdb")
    assert imported == []
    assert code == 1  # the bad line is a reject, so the command says there were problems
    with duckdb.connect(str(tmp_path / "w.duckdb"), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 20
        assert con.execute("SELECT line, raw FROM rejects").fetchall() == [(21, "{not json")]


def test_trace_ingest_starts_without_the_dashboard_libraries(tmp_path):
    trace = REPO / "sample_data" / "gpu_traces" / "gpu-node-1_2026-08.csv.gz"
    code, imported = import_probe.imported(["ingest", str(trace), "--json"], DASHBOARD_LIBRARIES, tmp_path / "w.duckdb")
    assert (code, imported) == (0, [])


def test_help_and_reading_commands_import_no_parser(tmp_path):
    watched = ("ingest.pipeline.loader", "pyarrow", "prometheus_client", "yaml", "tqdm", *DASHBOARD_LIBRARIES)
    code, imported = import_probe.imported(["--help"], watched, tmp_path / "w.duckdb")
    assert (code, imported) == (0, [])
    code, imported = import_probe.imported(["rollup"], watched, tmp_path / "w.duckdb")
    assert (code, imported) == (0, [])
