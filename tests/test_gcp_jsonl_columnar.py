"""GCP billing exports as JSON lines staged in SQL (ingest/formats/billing/bill_gcp_json.py) against billing.py
line by line: the real GCP exports (the JSON-lines case, and the real CSV exports written as
BigQuery's JSON) and synthetic files of odd and bad lines, plain, CRLF, with a BOM and gzipped,
must give the same rows (keys included), rejects (line, reason, text), records accepted and
totals; plain lines must be settled in SQL, and the totals match sums taken from the raw file.
"""
from __future__ import annotations

import csv
import gzip
import json
import random
import sys
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import pytest

from ingest.engine import staging, values
from ingest.formats.billing import bill_gcp_json, bill_stage, billing_gcp
from tests.bill_equivalence import parsed, staged
from tests import corpus

CASES = Path(__file__).parent / "cases" / "billing"
sys.path.insert(0, str(Path(__file__).parents[1] / "bench"))
import bill_files  # noqa: E402  (the bench's generator of GCP JSON-lines exports)

JSON_CELLS = ("labels", "system_labels", "credits", "project.labels")
NUMBER_CELLS = ("cost", "usage.amount", "currency_conversion_rate", "usage.amount_in_pricing_units")


def real_files() -> list[Path]:
    found = [CASES / "gcp_export.jsonl", CASES / "gcp_flat.csv", CASES / "gcp_repr.csv"]
    return found + corpus.files("gcp_billing", "*.csv")  # [ABSENT] when the corpus cannot be had


def as_json_lines(path: Path, target: Path) -> Path:
    """A CSV export written as BigQuery writes JSON: dotted names nested, list cells that are
    JSON as lists (a Python-literal cell stays text), numbers as numbers, empty cells left out."""
    if path.suffix == ".jsonl":
        return path
    with open(path, newline="", encoding="utf-8-sig") as handle, open(target, "w") as out:
        for record in csv.DictReader(handle):
            document: dict = {}
            for name, cell in record.items():
                if cell is None or cell == "":
                    continue
                value: object = cell
                if name in JSON_CELLS:
                    try:
                        value = json.loads(cell)
                    except json.JSONDecodeError:
                        pass
                elif name in NUMBER_CELLS and values.is_number_text(cell):
                    value = float(cell)
                *parents, leaf = name.split(".")
                place = document
                for parent in parents:
                    place = place.setdefault(parent, {})
                place[leaf] = value
            out.write(json.dumps(document) + "\n")
    return target


BASE = {"billing_account_id": "0000-CCCC", "service": {"id": "6F81", "description": "Compute Engine"},
        "sku": {"id": "A2-1", "description": "A2 Instance Core running in Americas"},
        "usage_start_time": "2026-08-01 00:00:00 UTC", "usage_end_time": "2026-08-01 01:00:00 UTC",
        "project": {"id": "ml-proj", "name": "ML"}, "labels": [{"key": "run_id", "value": "run-j"}],
        "system_labels": [{"key": "compute.googleapis.com/machine_spec", "value": "a2-highgpu-1g"}],
        "location": {"location": "us-central1", "region": "us-central1"}, "cost": 3.67, "currency": "EUR",
        "usage": {"amount": 3600, "unit": "seconds"},
        "credits": [{"name": "Committed use discount", "amount": -1.1, "type": "COMMITTED_USAGE_DISCOUNT"}],
        "invoice": {"month": "202608"}, "cost_type": "regular",
        "resource": {"name": "vm-a2", "global_name": "//compute/vm-a2"}}


def line(**changes) -> str:
    """BASE with some fields changed (a value of ... drops the field; dotted names nest)."""
    document = json.loads(json.dumps(BASE))
    for name, value in changes.items():
        *parents, leaf = name.replace("__", ".").split(".")
        place = document
        for parent in parents:
            place = place.setdefault(parent, {})
        if value is ...:
            place.pop(leaf, None)
        else:
            place[leaf] = value
    return json.dumps(document, ensure_ascii=False)


def raw_line(fragment: str) -> str:
    """BASE with its "cost" written as `fragment` says (numbers json.dumps cannot write)."""
    return line(cost="@@").replace('"@@"', fragment)


GOOD = [
    line(),
    line(currency="USD", cost=0.25, credits=[], labels=[]),
    line(currency="JPY", cost="125", credits=[{"name": "A", "amount": "-5"}, {"full_name": "B", "amount": -1}]),
    line(cost_type="tax", sku__description="Spot Preemptible Nvidia L4 GPU"),
    line(cost_type="adjustment", sku__description="Commitment v1: A2 GPU for 1 year", system_labels=[]),
    line(project__name="Проект ☃", labels=[{"key": "équipe", "value": "naïve <b>x</b> \"q\""}]),
    line(labels=[{"key": "run_id", "value": None}, {"key": "team", "value": "a,b;c"}]),
    line(usage_start_time="2026-08-01T00:00:00Z", usage_end_time="2026-08-01T01:00:00+02:00"),
    line(usage_start_time="08/01/2026 1:00 PM", usage_end_time=...),
    line(usage_start_time="2026-08-01", invoice=..., cost_type=...),
    line(cost=1e-06, usage__amount="3600"),
    line(cost="0.000000000001", credits="[{\"name\": \"x\", \"amount\": \"-0.5\"}]"),
    line(labels="[{\"key\": \"a\", \"value\": \"b\"}]", project__id=""),
    line(),  # the same line again: both stay (keys #0 and #1)
    line(resource=..., location={"location": "europe-west4"}),
]
ODD = [  # lines billing.py reads (or refuses) where SQL hands them over
    "", "   ", "\t",
    "{\"cost\": 1,", "not json", "[1, 2]", "\"text\"", "null", "{}",
    raw_line("NaN"), raw_line("Infinity"), raw_line("1e400"), raw_line("1E+20"), raw_line("1e20"),
    raw_line("0.1234567890123456789"), raw_line("12345678901234567"), raw_line("1e-7"),
    # numbers a double cannot hold to 12 places: the digits written decide (billing.py reads them)
    raw_line("0.12345678901249999999"), raw_line("123456789012.3456789"), raw_line("2048.0000000000004"),
    line().replace('"amount": -1.1', '"amount": -0.12345678901249999999'),
    line(cost=True), line(cost=[1]), line(cost="1_000"), line(cost=" 12 "), line(cost="+1.5"), line(cost="1e3"),
    line(cost="١٢"), line(cost="１２"), line(cost="0.0000000000005"), line(cost="0.0000000000015"),
    line(cost="abc"), line(cost=...), line(cost=""), line(cost=None),
    line(currency=5), line(currency={"code": "USD"}), line(currency=...), line(currency=" USD"),
    line(currency="USD\u00a0"), line(usage_start_time=1785542400), line(usage_start_time="yesterday"),
    line(usage_start_time="1980-01-01 00:00:00 UTC"), line(usage_start_time=...),
    line(usage__amount="٣٦٠٠"), line(usage__amount=True), line(usage__amount=1e16), line(usage__amount="nan"),
    line(project__id=12345), line(project__id=1.50), line(billing_account_id=False),
    line(labels={"env": "prod"}), line(labels={}), line(labels="[{'key': 'a', 'value': None}]"),
    line(labels=[{"key": "n", "value": 5}]), line(labels=[{"key": "", "value": "x"}]),
    line(labels=[{"key": "a", "value": "1"}, {"key": "a", "value": "2"}]), line(labels=[["a", "b"]]),
    line(labels=[{"value": "x"}]), line(labels=[{"key": 7, "value": "x"}]), line(labels="oops"),
    line(labels=[{"key": "t", "value": "a\tb\nc"}]), line(labels=[{"key": "t", "value": " padded "}]),
    line(credits=[{"name": "x", "amount": "abc"}]), line(credits=[1]), line(credits={}), line(credits="[]"),
    line(credits="[{'name': 'FreeTrial', 'amount': -1e-05, 'full_name': None}]"),
    line(credits=[{"name": 5, "amount": -1}]), line(credits=[{"name": "", "full_name": "", "amount": -1}]),
    line(credits=[{"name": "x", "amount": True}]), line(credits=[{"name": "x"}]), line(credits=[{"amount": "-1e-5"}]),
    line(invoice__month="2026-13"), line(invoice__month="٢٠٢٦٠٨"), line(cost_type="weird"), line(cost_type="Regular"),
    line(cost_type="ROUNDING_ERROR"),
    line(sku={"Description": "Upper"}), line().replace('"cost"', '"Cost"'),
    line().replace('"cost"', '" cost"'), line().replace('{"billing_account_id"', '{"cost": 9, "billing_account_id"'),
    line().replace('"service": {', '"service.description": "Flat", "service": {'),
    line().replace('"description": "Compute Engine"', '"description": "A", "description": "B"'),
    line(project__name="tab\there"), line().replace("Compute Engine", "Compute\\u0000Engine"),
    line().replace("Compute Engine", "Compute \\ud83d\\ude00"), line().replace("Compute Engine", "Comp\\u00e9te"),
    line().replace(", \"cost_type\"", ",, \"cost_type\""), line() + " x", line().replace("}", "},", 1),
    line(usage={"amount": {"x": 1}}), line(service="Flat text"), line(project__name=" ML "),
]


def mixed_lines(rng: random.Random) -> list[str]:
    lines = GOOD + ODD + GOOD
    body = lines[1:]
    rng.shuffle(body)
    return [lines[0]] + body  # a good first line: the file is taken as JSON lines


def write(path: Path, lines: list[str], newline: str = "\n", bom: bool = False, gz: bool = False) -> Path:
    data = (("\ufeff" if bom else "") + newline.join(lines) + newline).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


class WholeFile:
    """The path JSON lines took before: the whole text through billing.py in bill_stage."""

    @staticmethod
    def stage(src, con, ctx):
        return bill_stage.stage(src, con, ctx, billing_gcp.EXPORT.family, billing_gcp.EXPORT.plan)


def assert_same(path: Path, before: str = "parse") -> dict:
    """stage() as billing.py's parse() reads the file (or as bill_stage read it whole before)."""
    mine = staged(billing_gcp, path, "bill")
    today = parsed(billing_gcp, path, "bill") if before == "parse" else staged(WholeFile, path, "bill")
    assert mine["rejects"] == today["rejects"]
    assert (mine["accepted"], mine["totals"]) == (today["accepted"], today["totals"])
    assert len(mine["rows"]) == len(today["rows"])
    for new, old in zip(mine["rows"], today["rows"]):
        assert new == old
    return mine


@pytest.fixture
def to_python(monkeypatch) -> list[int]:
    """The numbers of the lines the SQL path hands to billing.py (the real reader still runs)."""
    handed: list[int] = []
    reader = bill_gcp_json._by_python

    def counting(con, ctx, family, lines):
        handed.extend(number for number, _ in lines)
        return reader(con, ctx, family, lines)

    monkeypatch.setattr(bill_gcp_json, "_by_python", counting)
    return handed


@pytest.mark.parametrize("path", real_files(), ids=lambda p: p.name)
def test_real_exports_stage_as_billing_py_reads_them(path, tmp_path, to_python):
    jsonl = as_json_lines(corpus.present(path), tmp_path / (path.stem + ".jsonl"))
    mine = assert_same(jsonl)
    assert mine["rows"]
    # the real export's good lines, but for Python-literal cells, are settled in SQL
    literal_cells = {n for n, text in enumerate(jsonl.read_text().split("\n"), start=1) if "': " in text}
    assert set(to_python) <= literal_cells | {number for number, _, _ in mine["rejects"]}


@pytest.mark.parametrize("variant", ["plain", "crlf", "bom", "gzip", "bom-crlf-gzip"])
def test_mixed_bad_lines_stage_as_billing_py_reads_them(variant, tmp_path, to_python):
    lines = mixed_lines(random.Random(7))
    path = write(tmp_path / ("mixed.jsonl.gz" if "gzip" in variant else "mixed.jsonl"), lines,
                 newline="\r\n" if "crlf" in variant else "\n", bom="bom" in variant, gz="gzip" in variant)
    mine = assert_same(path)
    assert len(mine["rejects"]) > 40 and mine["rows"]
    good = {n for n, text in enumerate(lines, start=1) if text in GOOD}
    assert good and not good & set(to_python)  # every plain line settled in SQL


def test_lines_across_many_batches(tmp_path, monkeypatch, to_python):
    """Small batches: odd lines at batch edges and a line over max_line_bytes keep their numbers
    (billing.parse has no line limit: compared with the whole-file path of bill_stage)."""
    monkeypatch.setattr(staging, "LINE_BATCH_BYTES", 20_000)
    rng = random.Random(11)
    lines = list(bill_files.gcp_lines(300, random.Random(42)))
    for odd in rng.sample(ODD, 25):
        lines.insert(rng.randrange(1, len(lines)), odd)
    lines.insert(120, line(project__name="x" * 1_100_000))
    path = write(tmp_path / "batches.jsonl", lines)
    mine = assert_same(path, before="whole file")
    assert any(reason.endswith("not read") for _, reason, _ in mine["rejects"])
    generated = {n for n, text in enumerate(lines, start=1) if text.startswith('{"billing_account_id": "0123AB')}
    assert not generated & set(to_python)


def test_totals_match_sums_of_the_raw_file(tmp_path, to_python):
    """Independently of billing.py: cost and credits summed per currency from the raw JSON."""
    path = write(tmp_path / "gcp.jsonl", list(bill_files.gcp_lines(3000, random.Random(5))))
    billed: dict[str, Decimal] = defaultdict(Decimal)
    lines = 0
    for text in path.read_text().splitlines():
        document = json.loads(text, parse_float=Decimal)
        billed[document["currency"]] += Decimal(document["cost"])
        for credit in document["credits"]:
            billed[document["currency"]] += Decimal(credit["amount"])
        lines += 1 + len(document["credits"])
    mine = staged(billing_gcp, path, "bill")
    assert to_python == []
    assert mine["accepted"] == 3000 and mine["totals"]["lines"] == lines
    assert {c: Decimal(v) for c, v in mine["totals"]["billed_cost_total"].items()} == dict(billed)
