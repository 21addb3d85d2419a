"""During the move of serving windows onto the definition engine: the old parsers
(ingest/serving.py line by line, ingest/serving_columnar.py in SQL) and the new ones
(ingest/formats/serving.py: the engine's SQL pass and its generic reader) stage the same rows,
totals and rejects (line, reason, raw text) on every serving file of the corpus, the sample data,
the columnar tests' cases and the fuzz family's broken files. Deleted with the old parsers."""
from __future__ import annotations

import gzip
import json
import random
from datetime import timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest import serving as old_serving, serving_columnar, staging
from ingest.contract import ParseContext, numbered
from ingest.formats import serving as new_serving
from tests import corpus
from tests import test_serving_columnar as cases
from tests.conftest import REPO_ROOT, SAMPLE_DIR
from tests.test_fuzz import broken_lines

UTC = timezone.utc


def both(path: Path, tz=UTC):
    ctx = ParseContext(str(path), tz)
    out = []
    for stage in (serving_columnar.stage, new_serving.stage):
        con = staging.open_stage()
        try:
            result = stage(staging.Source.of(path), con, ctx)
            staging.keep_last(con, "serving_windows")
            out.append((cases.staged(con), result.accepted, result.totals))
        finally:
            con.close()
    (old, old_n, old_t), (new, new_n, new_t) = out
    assert new["rejects"] == old["rejects"], path
    assert new["serving_windows"] == old["serving_windows"], path
    assert (new_n, new_t) == (old_n, old_t), path
    lines = list(staging.lines(staging.Source.of(path)))
    a, b = old_serving.parse(lines, ctx), new_serving.parse(lines, ctx)
    assert b.tables == a.tables and b.rejects == a.rejects and b.accepted == a.accepted
    assert new_serving.totals(b) == old_serving.totals(a)
    return new


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8", newline="")
    return path


def test_sample_and_its_csv(tmp_path):
    both(SAMPLE_DIR / "serving_windows.jsonl.gz")
    with gzip.open(SAMPLE_DIR / "serving_windows.jsonl.gz", "rt", encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle if line.strip()]
    both(cases.write_csv(tmp_path / "sample.csv", records))


def test_corpus_serving_files():
    """Every serving-window file (found by sniffing) of the fetched corpus, the samples and the cases."""
    roots = [SAMPLE_DIR, REPO_ROOT / "tests" / "cases"]
    fetched = corpus.collected()
    if fetched is not None:
        roots.append(fetched)
    found = 0
    for folder in roots:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            data = path.read_bytes()[:65536]
            if data[:2] == b"\x1f\x8b":
                data = gzip.decompress(path.read_bytes())[:65536]
            if old_serving.sniff(path.name, data.decode("utf-8", "replace")):
                both(path)
                found += 1
    assert found >= 1


def test_every_kind_random_and_quirky(tmp_path):
    both(cases.write(tmp_path / "every.jsonl", cases.EVERY_KIND))
    rng = random.Random(42)
    both(cases.write(tmp_path / "random.jsonl", [cases.random_window(rng, n) for n in range(3000)]))
    both(cases.write(tmp_path / "quirky.jsonl", cases.QUIRKY_JSON))
    both(cases.write(tmp_path / "quirky_berlin.jsonl", cases.QUIRKY_JSON), tz=ZoneInfo("Europe/Berlin"))


def test_csv_cases(tmp_path):
    for newline in ("\n", "\r\n"):
        path = tmp_path / f"mixed{len(newline)}.csv"
        path.write_text(newline.join(cases.MIXED_BAD_CSV) + newline, encoding="utf-8", newline="")
        both(path)
    both(path, tz=ZoneInfo("Europe/Berlin"))
    for name, text in {
        "bad_header.csv": "window_start,service,requests_total\n" + cases.GOOD_LINE + "\n",
        "header_only.csv": "\n\n" + cases.HEADER + "\n",
        "repeated_column.csv": cases.HEADER + ",service\n" + cases.GOOD_LINE + ",svc-b\n" + cases.GOOD_LINE + ", \n",
        "aliases.csv": ("start_time,end_time,service,model_version,requests_total,requests_success,avg_cpu_util,cost_usd\n"
                        "2026-10-01T00:00:00+02:00,2026-10-01T00:08:00+02:00,s,v,5,5,50,1.5\n"),
        "empty.csv": "",
    }.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
        both(tmp_path / name)
    rng = random.Random(7)
    path = cases.write_csv(tmp_path / "random.csv", [cases.random_window(rng, n) for n in range(3000)])
    lines = path.read_text(encoding="utf-8").split("\n")
    lines = [lines[0]] + [cases.corrupt(rng, line) if line and rng.random() < 0.1 else line for line in lines[1:]]
    both(write_lines(path, lines))


SAMPLE_LINES = [line for line in gzip.decompress((SAMPLE_DIR / "serving_windows.jsonl.gz").read_bytes())
                .decode().split("\n")[:6]]


@settings(max_examples=60, deadline=None, derandomize=True)
@given(data=st.data())
def test_fuzz_family(tmp_path_factory, data):
    lines = data.draw(broken_lines([line for line in SAMPLE_LINES if len(line) < 5000], "jsonl"))
    lines = [line for line in lines if len(line) < 100_000]  # the overlong case: the loader's, not the parser's
    both(write_lines(tmp_path_factory.mktemp("fz") / "f.jsonl", lines))
