"""Fuzzing every ingest format with hypothesis: whatever the bytes, a structured answer that adds up.

Each format family starts from a real file of its kind and is broken the ways real files break:
hostile values in a field (huge, tiny, NaN/inf, non-ASCII digits, dates past 9999, 100k-deep
JSON, 200 KB text), truncated, repeated, dropped and overlong lines, random bytes, other
encodings (latin-1, UTF-16) and gzip. The property: `loader.ingest_file` returns a FileSummary
(it never raises); a failed file says why in one line and loads nothing; a loaded file's
ledger row agrees with the summary, every reject has a line in the file, and where the text
fixes how many records it holds (one per line), loaded + rejected is exactly that number.

Profiles: the default runs a few examples per family (the suite takes a couple of minutes on
2 cores); MLCOST_FUZZ=nightly runs many more. Every finding of issue 13 rows 1-5 is an @example.
"""
from __future__ import annotations

import codecs
import csv
import gzip
import hashlib
import io
import itertools
import json
import os
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from ingest.engine import warehouse as wh
from ingest.pipeline import loader
from ingest.settings import config
from tests import corpus
from tests.conftest import REPO_ROOT

settings.register_profile(
    "default", max_examples=12, deadline=timedelta(seconds=60), derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile(
    "nightly", parent=settings.get_profile("default"), max_examples=400, derandomize=False)
settings.load_profile(os.environ.get("MLCOST_FUZZ", "default"))

SAMPLE = REPO_ROOT / "sample_data"
CASES = REPO_ROOT / "tests" / "cases" / "billing"
AT = datetime(2026, 8, 1, tzinfo=timezone.utc)

# Values that broke or could break a reader (issue 13 and the usual suspects).
HOSTILE = [
    "", " ", "NaN", "nan", "inf", "-Infinity", "1e308", "-1e308", "1e-320", "6e25", "1e12",
    "١٢٣", "1_000", "0x10", " 12 ", "12\x10", "\x00", "１２", "9999-12-31T23:00:00-05:00",
    "0001-01-01T00:00:00Z", "2026-02-30", "-0", "+1", "1.", ".5", "1e", "null", "true", "[]", "{}",
    '"', "'", ",", "\\", "\u202e", "💸", "=HYPERLINK(\"http://127.0.0.1:9/\",\"x\")", "x" * 200_000,
]
JSON_HOSTILE = [float("nan"), float("inf"), 1e308, -1e308, 5e-324, 6e25, 10**30, -(10**20), True, None,
                [], {}, "١٢٣", "1_000", "9999-12-31T23:00:00-05:00", "x" * 200_000]
DEEP = "[" * 100_000 + "]" * 100_000


def _lines(path: Path, count: int) -> list[str]:
    """The first `count` lines of a (possibly gzipped) text file, newlines removed."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8-sig", newline="") as handle:
        return [line.rstrip("\r\n") for line in itertools.islice(handle, count)]


def _formats(relative: str) -> Path:
    """A corpus file: beside the checkout, else fetched (tests/corpus.py); skipped when it cannot
    be had (failed under CI=true)."""
    root = corpus.collected()
    if root is None:
        corpus.absent(f"The real sample files could not be had. {corpus.how_to_get()}")
    return corpus.require(root, relative)


# family -> (file suffix, where its base lines come from, kind, whether each line is one record)
FAMILIES = {
    "runs": (".jsonl", lambda: _lines(SAMPLE / "runs.jsonl", 6), "jsonl"),
    "serving": (".jsonl", lambda: _lines(SAMPLE / "serving_windows.jsonl.gz", 6), "jsonl"),
    "codecarbon": (".csv", lambda: _lines(_formats("codecarbon/codecarbon_examples_emissions.csv"), 6), "csv"),
    "gpu-collector": (".csv", lambda: _lines(SAMPLE / "gpu_traces" / "gpu-node-1_2026-08.csv.gz", 8), "csv"),
    "nvidia-smi": (".csv", lambda: _lines(_formats("nvidia_gpu/powertracesim_burn_nvidia-smi_8gpu_first137lines.csv"), 8),
                   "csv"),
    "dcgm": (".prom", lambda: _lines(_formats("nvidia_gpu/dcgm_exporter_scrape_L4_kops.prom"), 40), None),
    "cur": (".csv", lambda: _lines(CASES / "aws_cur2.csv", 6), "bill-csv"),
    "gcp": (".jsonl", lambda: _lines(CASES / "gcp_export.jsonl", 6), "jsonl"),
    "azure": (".csv", lambda: _lines(CASES / "azure_ea.csv", 6), "bill-csv"),
    "focus": (".csv", lambda: _lines(SAMPLE / "billing" / "focus_2026-08.csv.gz", 8), "bill-csv"),
    "dbr": (".csv", lambda: _lines(CASES / "dbr_detailed_with_tags.csv", 6), "bill-csv"),
}


@st.composite
def broken_lines(draw, base: list[str], shape: str | None) -> list[str]:
    """The base lines with a few breakages drawn from the ways real files break."""
    lines = list(base)
    first_data = 0 if shape == "jsonl" else 1
    for _ in range(draw(st.integers(0, 4))):
        spot = draw(st.integers(first_data, max(first_data, len(lines) - 1))) if lines else 0
        action = draw(st.sampled_from(["field", "field", "json", "truncate", "repeat", "drop", "junk", "overlong",
                                       "blank", "deep"]))
        if not lines:
            lines.append(draw(st.text(max_size=40)))
            continue
        line = lines[spot]
        if action == "field" and "," in line:
            fields = line.split(",")
            fields[draw(st.integers(0, len(fields) - 1))] = draw(st.sampled_from(HOSTILE) | st.text(max_size=20))
            lines[spot] = ",".join(fields)
        elif action == "json" and line.lstrip().startswith("{"):
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and record:
                key = draw(st.sampled_from(sorted(record)))
                record[key] = draw(st.sampled_from(JSON_HOSTILE) | st.text(max_size=20) | st.integers() | st.floats())
                lines[spot] = json.dumps(record)  # allow_nan: NaN and Infinity as Python writes them
        elif action == "truncate":
            lines[spot] = line[:draw(st.integers(0, len(line)))]
        elif action == "repeat":
            lines.insert(spot, line)
        elif action == "drop" and len(lines) > first_data + 1:
            del lines[spot]
        elif action == "junk":
            lines.insert(spot, draw(st.text(st.characters(blacklist_categories=("Cs",)), max_size=60)))
        elif action == "overlong":
            lines.insert(spot, "z" * (loader.limits.current().max_line_bytes + draw(st.integers(1, 3_000_000))))
        elif action == "blank":
            lines.insert(spot, "")
        elif action == "deep":
            lines.insert(spot, DEEP if shape == "jsonl" else '"' + DEEP + '"')
    return lines


ENCODINGS = st.sampled_from(["utf-8", "utf-8", "utf-8", "utf-8-sig", "latin-1", "utf-16"])
counter = itertools.count()


def _write(folder: Path, suffix: str, lines: list[str], encoding: str, packed: bool) -> Path:
    path = folder / f"f{next(counter)}{suffix}{'.gz' if packed else ''}"
    data = ("\n".join(lines) + "\n").encode(encoding, errors="replace")
    path.write_bytes(gzip.compress(data, compresslevel=1) if packed else data)
    return path


def _expected_records(data: bytes, shape: str | None) -> int | None:
    """How many records the text holds when each non-blank line is one (else None: undecided)."""
    try:
        text = codecs.decode(data.removeprefix(codecs.BOM_UTF8), "utf-8")
    except UnicodeDecodeError:
        return None
    lines = text.split("\n")[:-1]
    limit = loader.limits.current().max_line_bytes
    for line in lines:  # blanks must look blank to every reader (Python's strip vs SQL's \s)
        if bool(line.strip()) != bool(re.sub(r"[ \t\r\f\v]", "", line)) or "\r" in line or "\x00" in line:
            return None
    if shape == "jsonl":
        filled = [line for line in lines if line.strip()]
        if not filled or not all(line.lstrip().startswith("{") or len(line.encode()) > limit for line in filled):
            return None  # a whole-document JSON or a CSV serving file: records are not lines
        return len(filled)
    if shape == "csv":
        if '"' in text or not lines or not lines[0].strip() or "," not in lines[0]:
            return None  # quoted fields may span lines; a broken header rejects the file as a whole
        return sum(1 for line in lines[1:] if line.strip())
    if shape == "bill-csv":  # a bill is read as CSV records, a quoted field may span lines
        if any(len(line.encode()) > limit for line in lines) or not lines or "," not in lines[0]:
            return None
        try:
            records = list(csv.reader(io.StringIO(text)))
        except csv.Error:
            return None
        filled = [r for r in records if r and not (len(r) == 1 and not r[0].strip())]
        return len(filled) - 1 if filled and filled[0] == next(csv.reader([lines[0]])) else None
    return None


def _check(path: Path, shape: str | None, kind: str | None = None) -> loader.FileSummary:
    """The property: a structured summary, never an exception; the ledger adds up."""
    summary = loader.ingest_file(path, kind, at=AT)
    assert isinstance(summary, loader.FileSummary)
    assert summary.status in ("loaded", "rejected", "already_loaded", "failed")
    json.dumps(summary.to_json(), default=str)  # --json can print it
    if summary.status == "failed":
        event("failed")
        assert summary.error and "\n" not in summary.error and str(path) in summary.error
        assert (summary.rows_loaded, summary.rows_rejected) == (0, 0)
        assert wh.query("SELECT count(*) AS n FROM loads WHERE path = ?", [str(path)])["n"][0] == 0
        return summary
    if summary.status == "already_loaded":
        return summary
    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    physical = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    ledger = wh.query("SELECT load_id, rows_loaded, rows_rejected FROM loads WHERE path = ?", [str(path)])
    assert len(ledger) == 1
    stored = wh.query("SELECT line FROM rejects WHERE load_id = ?", [int(ledger["load_id"][0])])
    assert int(ledger["rows_loaded"][0]) == summary.rows_loaded
    assert int(ledger["rows_rejected"][0]) == summary.rows_rejected == len(stored)
    assert all(0 <= line <= physical for line in stored["line"])
    assert summary.rows_loaded + summary.rows_rejected <= physical
    expected = _expected_records(data, shape)
    event(f"{summary.status}; records counted exactly: {expected is not None and summary.kind == kind}")
    if expected is not None and summary.kind == kind:
        assert summary.rows_loaded + summary.rows_rejected == expected, (summary.to_json(), expected)
    return summary


@pytest.fixture
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@pytest.fixture(scope="module")
def fuzz_warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz_wh") / "fuzz.duckdb"


@pytest.fixture(autouse=True)
def _warehouse(fuzz_warehouse: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLCOST_DB", str(fuzz_warehouse))


def _family_test(family: str):
    suffix, base, shape = FAMILIES[family]
    kind = {"cur": "billing_aws", "gcp": "billing_gcp", "azure": "billing_azure", "focus": "billing_focus",
            "dbr": "billing_aws_dbr"}.get(family, family)

    @given(data=st.data(), encoding=ENCODINGS, packed=st.booleans(), named=st.booleans())
    def test(fuzz_dir: Path, data, encoding: str, packed: bool, named: bool) -> None:
        lines = data.draw(broken_lines(base(), shape))
        path = _write(fuzz_dir, suffix, lines, encoding, packed)
        _check(path, shape, kind if kind in loader.KINDS else None)

    test.__name__ = f"test_fuzz_{family.replace('-', '_')}"
    return test


for _family in FAMILIES:
    globals()[f"test_fuzz_{_family.replace('-', '_')}"] = _family_test(_family)


@given(data=st.binary(max_size=4096), suffix=st.sampled_from([".csv", ".jsonl", ".prom", ".json", ".gz", ".parquet"]),
       kind=st.sampled_from([None, *loader.KINDS]))
@example(data=b"\x1f\x8b\x08\x00garbage", suffix=".gz", kind=None)
@example(data=b"\x28\xb5\x2f\xfdgarbage", suffix=".csv", kind=None)
@example(data=b"PAR1\x00\x00PAR1", suffix=".parquet", kind=None)
@example(data="١٢٣,1_000\n".encode("utf-16"), suffix=".csv", kind="billing_focus")
def test_fuzz_random_bytes(fuzz_dir: Path, data: bytes, suffix: str, kind: str | None) -> None:
    path = fuzz_dir / f"b{next(counter)}{suffix}"
    path.write_bytes(data)
    _check(path, None, kind)


# Issue 13 rows 1-5, fixed: each must keep giving a structured answer that adds up.
RUN = json.loads(_lines(SAMPLE / "runs.jsonl", 1)[0])
ISSUE_RUNS = [
    json.dumps(dict(RUN, end_time="9999-12-31T23:00:00-05:00")),                      # row 3: date
    json.dumps({k: v for k, v in RUN.items() if k != "end_time"} | {"duration_hours": 1e12 / 3600}),  # row 3
    json.dumps(dict(RUN, throughput_examples_per_sec=1e308)),                         # row 3: throughput
    DEEP,                                                                              # row 3: 100k deep
    json.dumps(dict(RUN, estimated_cost_usd="١٢٣")),                                   # row 4
    json.dumps(dict(RUN, estimated_cost_usd="1_000")),                                 # row 4
    json.dumps(dict(RUN, estimated_cost_usd="12\x10")),                                # row 4
    json.dumps(dict(RUN, estimated_cost_usd=6e25)),                                    # row 5
    "x" * 5_000_000,                                                                   # row 1: a 5 MB line
]


@given(lines=st.lists(st.sampled_from(ISSUE_RUNS), min_size=1, max_size=4), packed=st.booleans())
@example(lines=ISSUE_RUNS, packed=False)
@example(lines=ISSUE_RUNS, packed=True)
def test_fuzz_issue_findings_in_runs(fuzz_dir: Path, lines: list[str], packed: bool) -> None:
    good = json.dumps(dict(RUN, run_id=f"good-{next(counter)}"))
    summary = _check(_write(fuzz_dir, ".jsonl", [good, *lines], "utf-8", packed), "jsonl", "runs")
    if summary.status == "loaded":
        assert summary.rows_loaded == 1 and summary.rows_rejected == len(lines)


LONG_FIELD_FILES: set[str] = set()  # sha256 of the files test_fuzz_focus_long_field_loses_nothing loaded


@given(row=st.integers(1, 99), size=st.sampled_from([200_000, 2_000_000]), column=st.sampled_from(
    ["ChargeDescription", "BilledCost", "Tags", "ResourceId"]))
@example(row=6, size=200_000, column="ChargeDescription")  # row 2 of issue 13
def test_fuzz_focus_long_field_loses_nothing(fuzz_dir: Path, row: int, size: int, column: str) -> None:
    csv.field_size_limit(1 << 30)  # the test reads what it writes, whatever the loader allows
    with gzip.open(SAMPLE / "billing" / "focus_2026-08.csv.gz", "rt", newline="") as handle:
        rows = [r for _, r in zip(range(101), csv.reader(handle))]
    rows[row][rows[0].index(column)] = "d" * size
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows(rows)
    path = fuzz_dir / f"focus{next(counter)}.csv"
    path.write_text(text.getvalue())
    summary = _check(path, None, "billing_focus")
    digest = hashlib.sha256(text.getvalue().encode()).hexdigest()
    if digest in LONG_FIELD_FILES:  # the same draw again (MLCOST_FUZZ=nightly): the same bytes, one load
        assert summary.status == "already_loaded"
        return
    LONG_FIELD_FILES.add(digest)
    assert summary.status == "loaded" and summary.rows_loaded + summary.rows_rejected == 100


@given(lines=st.lists(st.sampled_from([
    '"', "z" * 5_000_000, ",,,,,,,,", "9999-12-31T23:00:00-05:00,gpu-node-1,0,GPU-x,A100,1e308,1,1,1",
    "2026-08-01T00:00:00Z,gpu-node-1,0,GPU-x,A100,١٢٣,1,1,1"]), min_size=1, max_size=3))
@example(lines=['"', "z" * 5_000_000])  # row 3: a stray quote, a 5 MB line in a trace CSV
def test_fuzz_trace_findings(fuzz_dir: Path, lines: list[str]) -> None:
    base = _lines(SAMPLE / "gpu_traces" / "gpu-node-1_2026-08.csv.gz", 6)
    path = _write(fuzz_dir, ".csv", [base[0], *lines, *base[1:]], "utf-8", False)
    summary = _check(path, None, "gpu-collector")
    assert summary.status == "loaded" and summary.rows_loaded + summary.rows_rejected == len(lines) + 5


# Budgets TOML (ingest/settings/config.py): any text gives a Config or a ConfigError naming the key.
BUDGET_VALUES = st.sampled_from(['"all"', '"project"', '"nope"', "1e308", "nan", "inf", "-5", "0", "12.5",
                                 '"١٢٣"', "1_000", "[]", "{}", "true", '"2026-01-01"', "9999-12-31"
                                 ]) | st.integers().map(str) | st.text(max_size=10).map(json.dumps)
BUDGET_KEYS = st.sampled_from(["name", "scope", "match", "amount_usd", "period", "alert_pct", "currency", "x"])


@given(entries=st.lists(st.dictionaries(BUDGET_KEYS, BUDGET_VALUES, max_size=6), max_size=3),
       junk=st.text(max_size=30), section=st.sampled_from(["[[budgets]]", "[budgets]", "[ingest]", "[[budgets.x]]"]))
@example(entries=[{"name": '"a"', "amount_usd": "6e25"}], junk="", section="[[budgets]]")
@example(entries=[{"max_line_bytes": "0"}], junk="", section="[ingest]")
def test_fuzz_budgets_toml(tmp_path_factory, entries: list[dict], junk: str, section: str) -> None:
    text = "".join(f"{section}\n" + "".join(f"{k} = {v}\n" for k, v in entry.items()) for entry in entries) + junk
    path = tmp_path_factory.mktemp("toml") / "mlcost.toml"
    path.write_text(text, encoding="utf-8", errors="replace")
    try:
        loaded = config.load(path)
    except config.ConfigError as error:
        assert str(error).strip() and "\n" not in str(error).strip()
    else:
        assert isinstance(loaded, config.Config)
