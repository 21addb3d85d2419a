"""Serving windows staged in SQL (ingest/serving_columnar.py) equal windows read line by line
(serving.parse): the same rows, costs from the catalog to the last of 12 decimals, rejects
(line, reason, raw text) and accepted count, for JSON lines and CSV: on the real sample file
(and its CSV rendering), every serving CSV of the corpus, files of every kind of record and
of bad line, and seeded random files whose fields vary over good, odd and bad values."""
from __future__ import annotations

import csv
import gzip
import io
import json
import logging
import random
from datetime import timezone
from pathlib import Path
from zoneinfo import ZoneInfo

from ingest import serving, serving_columnar
from ingest.engine import staging
from ingest.engine.contract import ParseContext
from tests.conftest import REPO_ROOT, SAMPLE_DIR

UTC = timezone.utc
BASE = {"window_start": "2026-10-01T00:00:00Z", "window_end": "2026-10-01T00:08:00Z", "service": "svc-00",
        "model_version": "v1", "host": "serve-00-0", "requests_total": 459, "requests_success": 454}


def staged(con) -> dict[str, list[tuple]]:
    windows = con.execute("SELECT * EXCLUDE (load_id) FROM serving_windows ORDER BY window_key").fetchall()
    rejects = con.execute("SELECT path, line, reason, raw FROM rejects ORDER BY line, reason").fetchall()
    return {"serving_windows": windows, "rejects": rejects}


def assert_same(path: Path, tz=UTC) -> dict:
    ctx = ParseContext(str(path), tz)
    old = staging.open_stage()
    parsed = serving.parse(staging.lines(staging.Source.of(path)), ctx)
    staging.insert_parsed(old, parsed, str(path))
    new = staging.open_stage()
    result = serving_columnar.stage(staging.Source.of(path), new, ctx)
    staging.keep_last(new, "serving_windows")
    try:
        before, after = staged(old), staged(new)
        for table in before:
            assert after[table] == before[table], table
        assert result.accepted == parsed.accepted
        assert result.totals == serving.totals(parsed)
        return after
    finally:
        old.close()
        new.close()


def write(path: Path, records: list) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n", encoding="utf-8")
    return path


EVERY_KIND = [
    {**BASE, "cost_usd": 0.756267, "energy_kwh": 0.097375},
    {**BASE, "host": "h1", "instance_type": "g5.12xlarge", "replicas": 1},                       # catalog: instance
    {**BASE, "host": "h2", "instance_type": "G5.12XLARGE", "replicas": 3, "window_end": None, "window_seconds": 300.5},
    {**BASE, "host": "h3", "gpu_type": "NVIDIA A10G", "gpu_count": 4},                           # catalog: GPUs
    {**BASE, "host": "h4", "gpu_type": "L4", "gpu_uuids": ["GPU-a", "GPU-b"]},                   # GPUs from the uuids
    {**BASE, "host": "h5", "gpu_type": "A100", "gpu_count": 0},                                  # zero GPUs: cost 0
    {**BASE, "host": "h6", "instance_type": "unknown-type", "replicas": 2},                      # no price: no cost
    {**BASE, "host": "h7", "instance_type": "g4dn.xlarge", "replicas": 7, "window_end": "2026-10-01T00:00:01.333333Z"},
    {**BASE, "host": "h8", "instance_type": "p5.48xlarge", "replicas": 1000,
     "window_end": None, "window_seconds": 0.1234567},
    {**BASE, "host": "h9", "cost_usd": "1.5"},                                                   # cost as text
    {**BASE, "host": "h10", "cost_usd": -1},
    {**BASE, "host": "h11", "requests_success": 500},
    {**BASE, "host": "h12", "window_end": "2026-10-01T00:00:00Z", "cost_usd": 1},
    {**BASE, "host": "h13", "instance_type": "g5.12xlarge", "replicas": 10**9},                # past 10^15 USD
    {**BASE, "host": "h14", "avg_gpu_util": 101, "cost_usd": 1},
    {**BASE, "host": "h15", "prompt_tokens": 120000, "output_tokens": 2**40, "cost_usd": 1},  # tokens kept
    {**BASE, "host": "h16", "prompt_tokens": -1, "cost_usd": 1},
    '{"service": "broken", ',
    "",
    '["not", "an", "object"]',
    {**BASE, "cost_usd": 0.5, "energy_kwh": 0.01},                                               # BASE again: wins
]


def test_every_kind_of_window_stages_the_same(tmp_path):
    after = assert_same(write(tmp_path / "serving.jsonl", EVERY_KIND))
    sources = {row[16] for row in after["serving_windows"]}  # cost_source
    assert {"given", "derived", None} <= sources
    assert len(after["rejects"]) >= 6


GOOD = {
    "instance_type": ["g5.12xlarge", "g4dn.xlarge", "G5.2XLARGE", "nowhere"],
    "gpu_type": ["NVIDIA A10G", "L4", "H100", "made-up"],
    "replicas": [1, 2, 16],
    "gpu_count": [0, 1, 8],
    "window_s": [60, 300.5, 0.001, 86400.123456],
    "cost_usd": [0.1, 12, 0.000001],
    "energy_kwh": [0.5, 0],
}
ODD = {
    "replicas": [-1, 1.0, "2", 2**40],
    "gpu_count": [-2, 2.5],
    "window_s": [0, -5, "60", 1e12],
    "cost_usd": [-1, "x", 1e20, 0.1234567],
    "energy_kwh": [-1, "0.5"],
    "instance_type": [" g5.12xlarge", 5],
}


def random_window(rng: random.Random, n: int) -> dict:
    day_hour = f"2026-10-{1 + n % 28:02d}T{n % 24:02d}"
    record = {**BASE, "host": f"h{n % 1500}", "window_start": f"{day_hour}:00:00Z", "window_end": f"{day_hour}:08:00Z"}
    if rng.random() < 0.6:
        del record["window_end"]
        record["window_seconds"] = rng.choice(GOOD["window_s"])
    for name, choices in GOOD.items():
        if name != "window_s" and rng.random() < 0.5:
            record[name] = rng.choice(choices)
    if rng.random() < 0.1:
        name = rng.choice(list(ODD))
        record["window_seconds" if name == "window_s" else name] = rng.choice(ODD[name])
        record.pop("window_end", None) if name == "window_s" else None
    return record


def test_random_windows_stage_the_same(tmp_path, caplog):
    rng = random.Random(42)
    path = write(tmp_path / "random.jsonl", [random_window(rng, n) for n in range(3000)])
    with caplog.at_level(logging.DEBUG, logger="ingest.serving_columnar"):
        after = assert_same(path)
    assert len(after["serving_windows"]) > 1000 and len(after["rejects"]) > 50
    read_in_python = sum(int(r.getMessage().split(": ")[1].split()[0]) for r in caplog.records)
    assert read_in_python < 450  # the odd tenth (and the catalog's few inexact cases), not the file


# --- CSV --------------------------------------------------------------------------------------
def write_csv(path: Path, records: list[dict], names: list[str] | None = None, newline: str = "\n") -> Path:
    """Records as CSV under the union of their keys (lists joined with ';'); csv quotes what needs it."""
    names = names or list(dict.fromkeys(k for r in records for k in r))
    out = io.StringIO()
    writer = csv.DictWriter(out, names, lineterminator=newline, extrasaction="ignore")
    writer.writeheader()
    for record in records:
        writer.writerow({k: ";".join(v) if isinstance(v, list) else v for k, v in record.items()})
    path.write_text(out.getvalue(), encoding="utf-8", newline="")
    return path


def read_in_python(caplog) -> int:
    return sum(int(r.getMessage().split(": ")[1].split()[0]) for r in caplog.records)


def test_sample_serving_file_and_its_csv_rendering_stage_the_same(tmp_path, caplog):
    """The real sample (JSON lines) and the same windows written as CSV."""
    assert_same(SAMPLE_DIR / "serving_windows.jsonl.gz")
    with gzip.open(SAMPLE_DIR / "serving_windows.jsonl.gz", "rt", encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle if line.strip()]
    with caplog.at_level(logging.DEBUG, logger="ingest.serving_columnar"):
        after = assert_same(write_csv(tmp_path / "sample.csv", records))
    assert len(after["serving_windows"]) == len({(r["service"], r["model_version"], r.get("host"), r["window_start"])
                                                  for r in records})
    assert read_in_python(caplog) == 0  # plain CSV is settled in SQL


def test_every_real_serving_csv_stages_the_same(formats_dir):
    """Every serving CSV in the corpus, the sample data and the test cases (found by sniffing)."""
    found = 0
    for folder in (formats_dir, SAMPLE_DIR, REPO_ROOT / "tests" / "cases"):
        for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in (".csv", ".txt", ".gz")):
            head = path.read_bytes()[:4096]
            if head[:2] == b"\x1f\x8b":
                head = gzip.decompress(path.read_bytes())[:4096]
            text = head.decode("utf-8", "replace")
            if serving.sniff(path.name, text) and serving.is_csv_header(text.lstrip().split("\n", 1)[0]):
                assert_same(path)
                found += 1
    print(f"{found} real serving CSV files")  # none in the corpus today: the sample's rendering stands in


HEADER = ("window_start,window_end,window_seconds,service,model_version,host,requests_total,requests_success,"
          "requests_error,latency_ms_p50,avg_gpu_util,estimated_cost_usd,energy_kwh,instance_type,replicas,"
          "gpu_type,gpu_count,gpu_uuids,prompt_tokens")
GOOD_LINE = "2026-10-01T00:00:00Z,2026-10-01T00:08:00Z,,svc-a,v1,h0,459,454,5,12.5,40,0.75,0.1,,,,,,1000"
MIXED_BAD_CSV = [
    "\ufeff" + HEADER,
    GOOD_LINE,
    "",                                                                                   # blank
    "   \t ",                                                                             # blank to Python's strip
    GOOD_LINE.replace("h0", "h1").replace(",0.75,", ",,") + "",                          # no cost, no catalog
    '2026-10-01T00:00:00Z,2026-10-01T00:08:00Z,,"svc, eu",v1,h2,10,9,1,,,,,g5.12xlarge,2,,,,',  # quoted comma
    GOOD_LINE.replace("h0", "h3") + ",extra",                                             # too many fields
    GOOD_LINE.replace("h0", "h4").rsplit(",", 3)[0],                                      # too few
    GOOD_LINE.replace("h0", "h5") + ',"x',                                                # too many, quoted
    GOOD_LINE.replace(",459,", ",١٢,").replace("h0", "h6"),                              # non-ASCII digits
    GOOD_LINE.replace(",454,", ",-4,").replace("h0", "h7"),                               # negative count
    "2026-10-01T00:00:00Z,,,svc-a,v1,h8,10,9,1,,,,,,,,,,",                                # no end, no length
    "2026-10-01T00:00:00Z,,300.5,svc-a,v1,h9,10,9,1,,,,,g4dn.xlarge,3,,,,",               # length, catalog
    "2026-10-01T00:00:00Z,,60,svc-a,v1,h10,10,9,1,,,,,,,L4,,GPU-a;GPU-b; ;,",            # uuids, blank item
    "2026-10-01T00:00:00Z,,60,svc-a,v1,h11,10,9,1,,,,,,,L4,,GPU-a;GPU-b;;,",             # uuids, empty item
    GOOD_LINE.replace("svc-a", " svc-a "),                                                # blanks kept out
    GOOD_LINE.replace(",459,", ", 459 ,").replace("h0", "h12"),                           # spaced count
    GOOD_LINE.replace(",40,", ",101,").replace("h0", "h13"),                              # not a percentage
    GOOD_LINE.replace(",0.75,", ",0.123456789012345,").replace("h0", "h14"),             # money past 12 places
    GOOD_LINE.replace(",0.75,", ",1234567.123456789012,").replace("h0", "h15"),          # money, 12 places
    GOOD_LINE.replace(",0.75,", ",-1,").replace("h0", "h16"),
    GOOD_LINE.replace(",0.75,", ",1e3,").replace("h0", "h17"),
    GOOD_LINE.replace("2026-10-01T00:00:00Z", "1790000000").replace("h0", "h18"),        # epoch start
    GOOD_LINE.replace("2026-10-01T00:00:00Z", "2026-10-01 00:00:00").replace("h0", "h19"),  # naive start
    GOOD_LINE.replace("2026-10-01T00:08:00Z", "2026-09-30T00:08:00Z").replace("h0", "h20"),  # ends first
    GOOD_LINE.replace(",12.5,", ",1e2,").replace("h0", "h21"),
    GOOD_LINE.replace(",12.5,", ",12.,").replace("h0", "h22"),
    GOOD_LINE.replace(",459,454,", ",459,460,").replace("h0", "h23"),                     # success > total
    GOOD_LINE.replace(",459,", ",99999999999999999999,").replace("h0", "h24"),            # past BIGINT
    GOOD_LINE.replace(",1000", ",1.0").replace("h0", "h25"),                              # integral float
    GOOD_LINE.replace("svc-a", "svc\x0ba").replace("h0", "h26"),                         # control character
    GOOD_LINE.replace("svc-a", "svc\ta").replace("h0", "h27"),                           # tab inside
    'x,"quoted field that',                                                               # a quoted field
    'spans two lines",y',                                                                 # over two lines
    GOOD_LINE.replace("svc-a", "svc-ü").replace("h0", "h28"),
    GOOD_LINE.replace(",12.5,", ",0x1F,").replace("h0", "h29"),
    GOOD_LINE.replace(",12.5,", ",nan,").replace("h0", "h30"),
    ",,,,,,,,,,,,,,,,,,",                                                                 # all empty
    GOOD_LINE.replace(",0.75,", ",0.5,"),                                                 # repeat: wins
]


def test_mixed_bad_csv_stages_the_same(tmp_path):
    for newline in ("\n", "\r\n"):
        path = tmp_path / f"mixed{len(newline)}.csv"
        path.write_text(newline.join(MIXED_BAD_CSV) + newline, encoding="utf-8", newline="")
        after = assert_same(path)
        reasons = " | ".join(r[2] for r in after["rejects"])
        assert "has 20 fields, the header has 19" in reasons and "has 16 fields" in reasons
        assert "requests_total" in reasons and "negative" in reasons and "no window_end or window_seconds" in reasons
        assert len(after["serving_windows"]) >= 12
    after = assert_same(path, tz=ZoneInfo("Europe/Berlin"))  # naive times in a zone: Python's
    assert any("h19" in row for row in after["serving_windows"])  # its naive start read in Berlin time


def test_csv_headers_stage_the_same(tmp_path):
    cases = {
        "bad_header.csv": "window_start,service,requests_total\n" + GOOD_LINE + "\n",
        "header_only.csv": "\n\n" + HEADER + "\n",
        "repeated_column.csv": HEADER + ",service\n" + GOOD_LINE + ",svc-b\n" + GOOD_LINE.replace("h0", "h1") + ", \n",
        "aliases.csv": ("start_time,end_time,service,model_version,requests_total,requests_success,avg_cpu_util,cost_usd\n"
                        "2026-10-01T00:00:00+02:00,2026-10-01T00:08:00+02:00,s,v,5,5,50,1.5\n"),
        "empty.csv": "",
    }
    for name, text in cases.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
        assert_same(tmp_path / name)


def corrupt(rng: random.Random, line: str) -> str:
    """One of the ways a hand-edited or badly exported CSV line goes wrong."""
    fields = line.split(",")
    where = rng.randrange(len(fields))
    change = rng.randrange(7)
    if change == 0:
        del fields[where]
    elif change == 1:
        fields.insert(where, "x")
    elif change == 2:
        fields[where] = f'"{fields[where]}"'
    elif change == 3:
        fields[where] = f" {fields[where]}"
    elif change == 4:
        fields[where] = fields[where].replace("1", "١")
    elif change == 5:
        fields[where] = "-" + fields[where]
    else:
        fields[where] = ""
    return ",".join(fields)


def test_random_csv_stages_the_same(tmp_path, caplog):
    rng = random.Random(7)
    records = [random_window(rng, n) for n in range(3000)]
    path = write_csv(tmp_path / "random.csv", records)
    lines = path.read_text(encoding="utf-8").split("\n")
    lines = [lines[0]] + [corrupt(rng, line) if line and rng.random() < 0.1 else line for line in lines[1:]]
    path.write_text("\n".join(lines), encoding="utf-8")
    with caplog.at_level(logging.DEBUG, logger="ingest.serving_columnar"):
        after = assert_same(path)
    assert len(after["serving_windows"]) > 1000 and len(after["rejects"]) > 100
    assert read_in_python(caplog) < 900  # the odd and corrupted lines, not the file


# --- JSON lines: the lenient read and its quirk detector ----------------------------------------
PLAIN = json.dumps(BASE)[:-1]  # an object missing its closing brace, to add one field and close
QUIRKY_JSON = [
    json.dumps(BASE),                                                          # plain: the lenient read
    PLAIN.replace('"svc-00"', '"svc-01"') + ', "service": "svc-02"}',          # a key repeated: Python's last
    PLAIN.replace("serve-00-0", "q1") + ', "region": "eu"}',                   # an unknown key
    PLAIN.replace("serve-00-0", "q2") + ', "meta": {"requests_total": "9"}}',  # a known key nested
    PLAIN.replace("serve-00-0", "q3") + ', "energy_kwh" : 0.5}',               # a blank before the colon
    PLAIN.replace("serve-00-0", "q4") + ', "energy_\\u006bwh": 0.5}',          # an escaped key
    PLAIN.replace("serve-00-0", "q5").replace("459", '"459"') + "}",           # a count as text
    PLAIN.replace("serve-00-0", "q6").replace("459", "459.0") + "}",           # a count as 459.0
    PLAIN.replace("serve-00-0", "q7").replace("459", "4.59e2") + "}",
    PLAIN.replace("serve-00-0", "q8").replace("454", "true") + "}",
    PLAIN.replace("serve-00-0", "q9").replace("454", "1.5") + "}",
    PLAIN.replace("serve-00-0", "q10").replace('"v1"', "1") + "}",             # text as a number
    PLAIN.replace("serve-00-0", "q11").replace('"v1"', "1.50") + "}",
    PLAIN.replace("serve-00-0", "q12").replace('"svc-00"', '" svc-00"') + "}",  # blanks at an edge
    PLAIN.replace("serve-00-0", "q13").replace('"svc-00"', '"svc-00\u00a0"') + "}",
    PLAIN.replace("serve-00-0", "q14").replace('"svc-00"', '"svc-00\u3000"') + "}",
    PLAIN.replace("serve-00-0", "q15") + ", }",                                # a trailing comma
    PLAIN.replace("serve-00-0", "q16") + ', "gpu_uuids": ["a", ]}',
    PLAIN.replace("serve-00-0", "q17") + ', "energy_kwh": NaN}',
    PLAIN.replace("serve-00-0", "q18") + ', "energy_kwh": -Infinity}',
    PLAIN.replace("serve-00-0", "q19") + ', "energy_kwh": null, "cost_usd": null}',  # nulls
    PLAIN.replace("serve-00-0", "q20") + ', "instance_type": ""}',             # empty text: absent
    PLAIN.replace("serve-00-0", "q21").replace("459", "99999999999999999999") + "}",
    PLAIN.replace("serve-00-0", "q22") + ', "cost_usd": 1234567.1234567891}',  # more digits than a double
    PLAIN.replace("serve-00-0", "q23") + ', "cost_usd": 12345.5}',
    PLAIN.replace("serve-00-0", "q24") + ', "energy_kwh": 1e400}',
    PLAIN.replace("serve-00-0", "q25") + ', "gpu_uuids": ["GPU-a", "GPU-b"], "gpu_type": "L4"}',
    PLAIN.replace("serve-00-0", "q26").replace('"window_end": "2026-10-01T00:08:00Z", ', "")
    + ', "window_seconds": 60, "window_s": null, "start_time": "2026-10-01T01:00:00Z"}',  # spellings
    PLAIN.replace("serve-00-0", "q27").replace("459", "-459") + "}",
    PLAIN.replace("serve-00-0", "q28") + ', "energy_kwh": -0.5}',
    PLAIN.replace("serve-00-0", "q29") + ', "avg_gpu_util": 100.5}',
    PLAIN.replace("serve-00-0", "q30").replace('"svc-00"', '"svc-\u00fc\u4e2d"') + "}",
    '   ' + PLAIN.replace("serve-00-0", "q31") + '}  ',                          # blanks around the object
    PLAIN.replace("serve-00-0", "q32") + '} {"a": 1}',                         # two objects
    PLAIN.replace("serve-00-0", "q33") + ', "window_start": 1790000000}',      # epoch start, repeated key
    PLAIN.replace("serve-00-0", "q34").replace("2026-10-01T00:00:00Z", "2026-10-01 00:00:00") + "}",
    PLAIN.replace("serve-00-0", "q35").replace('"v1"', '"v1:x"') + "}",        # a colon in text
    PLAIN.replace("serve-00-0", "q36").replace('"v1"', '"v1\\":"') + "}",      # a quote and colon, escaped
    PLAIN.replace("serve-00-0", "q37").replace('"svc-00"', '"\\u0020svc-00"') + "}",  # an escaped blank at an edge
]


def test_quirky_json_lines_stage_the_same(tmp_path, caplog):
    """Each quirk the lenient read could take otherwise than Python reaches the strict read or Python."""
    with caplog.at_level(logging.DEBUG, logger="ingest.serving_columnar"):
        after = assert_same(write(tmp_path / "quirky.jsonl", QUIRKY_JSON))
    assert len(after["rejects"]) >= 10 and len(after["serving_windows"]) >= 15
    with caplog.at_level(logging.DEBUG, logger="ingest.serving_columnar"):
        assert_same(write(tmp_path / "quirky_berlin.jsonl", QUIRKY_JSON), tz=ZoneInfo("Europe/Berlin"))


def test_too_long_lines_are_refused_once_and_the_next_line_decides(tmp_path, monkeypatch):
    """A too-long first line is refused with its size, once, and the next one decides JSON or CSV
    (its header): as the per-line path reads it (the loader refuses too-long lines before `parse`)."""
    from ingest.pipeline import loader
    from ingest.settings import limits

    monkeypatch.setattr(limits, "_current", limits.current())
    limits.configure(limits.Limits(max_line_bytes=400))
    other = {**BASE, "host": "h2"}
    as_csv = [",".join(BASE), ",".join(str(v) for v in BASE.values()), ",".join(str(v) for v in other.values())]
    files = {"long.jsonl": ["x" * 900, json.dumps(BASE), "y" * 900, json.dumps(other)],
             "long.csv": ["x" * 900, "", as_csv[0], as_csv[1], "y" * 900, as_csv[2]]}
    for name, lines in files.items():
        path = write(tmp_path / name, lines)
        ctx = ParseContext(str(path), UTC)
        src = staging.Source.of(path)
        old, new = staging.open_stage(), staging.open_stage()
        try:
            too_long: list = []
            parsed = serving.parse(loader._within_limit(staging.lines(src), too_long), ctx)
            parsed.rejects.extend(too_long)
            staging.insert_parsed(old, parsed, str(path))
            result = serving_columnar.stage(src, new, ctx)
            loader._name_too_long_lines(new)
            staging.keep_last(new, "serving_windows")
            assert staged(new) == staged(old), name
            assert result.accepted == parsed.accepted == 2, name
            expected_lines = [1, 3] if name.endswith(".jsonl") else [1, 5]
            got = new.execute("SELECT line, reason FROM rejects ORDER BY line").fetchall()
            assert [line for line, _ in got] == expected_lines, name
            assert all("longer than the 400" in reason for _, reason in got), name
        finally:
            old.close()
            new.close()
