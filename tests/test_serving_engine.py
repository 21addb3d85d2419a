"""Serving windows through the definition engine (ingest/formats/serving.py): the SQL pass and the
generic per-line reader, checked against figures this test computes itself with plain Python
(ISO times with datetime, costs as Decimal from ingest/defaults.toml read with tomllib, the
reason each bad value gives written out by hand), and against which lines took which path:
plain lines are settled in SQL, odd and bad ones by the reader (its log names their lines)."""
from __future__ import annotations

import csv
import gzip
import io
import json
import logging
import random
import tomllib
from datetime import datetime, timedelta, timezone
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path
from zoneinfo import ZoneInfo

from ingest.engine import staging
from ingest.engine.contract import ParseContext
from ingest.formats import serving
from tests.conftest import REPO_ROOT, SAMPLE_DIR

UTC = timezone.utc
BASE = {"window_start": "2026-10-01T00:00:00Z", "window_end": "2026-10-01T00:08:00Z", "service": "svc-00",
        "model_version": "v1", "host": "serve-00-0", "requests_total": 459, "requests_success": 454}
with open(REPO_ROOT / "ingest" / "defaults.toml", "rb") as _handle:
    _CATALOG = tomllib.load(_handle, parse_float=Decimal)["prices"]
INSTANCE = {k.lower(): v for k, v in _CATALOG["instance_usd_per_hour"].items()}
GPU = {k.lower(): v for k, v in _CATALOG["gpu_usd_per_hour"].items()}
PLACES = Decimal("1e-12")
LOGGER = "ingest.engine.batch_sql"


# --- the expectation, computed here --------------------------------------------------------
def instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def gpu_price(name: str | None) -> Decimal | None:
    if name is None:
        return None
    key = name.strip().lower().removeprefix("nvidia ").removeprefix("tesla ")
    return GPU.get(key)


def expected_row(record: dict, line: int) -> dict:
    """The window a plain record (every value readable, every rule met) makes, computed here."""
    start = instant(record.get("window_start") or record["start_time"])
    if record.get("window_end"):
        end = instant(record["window_end"])
        seconds = (end - start).total_seconds()
    else:
        seconds = float(record["window_seconds"])
        end = start + timedelta(seconds=seconds)
    uuids = record.get("gpu_uuids")
    gpus = int(record["gpu_count"]) if record.get("gpu_count") is not None else (len(uuids) if uuids else None)
    replicas = int(record["replicas"]) if record.get("replicas") is not None else None
    instance = str(record["instance_type"]).strip() if record.get("instance_type") is not None else None
    cost, price, source = None, None, None
    if record.get("cost_usd") is not None:
        cost, source = Decimal(str(record["cost_usd"])).quantize(PLACES), "given"
    elif instance is not None and instance.lower() in INSTANCE and replicas is not None:
        price = INSTANCE[instance.lower()] * replicas
    elif gpu_price(record.get("gpu_type")) is not None and gpus is not None:
        price = gpu_price(record.get("gpu_type")) * gpus
    if price is not None:
        cost = (price * Decimal(repr(seconds)) / 3600).quantize(PLACES, rounding=ROUND_HALF_EVEN)
        price, source = price.quantize(PLACES), "derived"
    energy = float(record["energy_kwh"]) if record.get("energy_kwh") is not None else None
    return {"window_key": f"{record['service']}|{record['model_version']}|{record.get('host', '')}|{start.isoformat()}",
            "window_end": end, "window_s": seconds, "requests_total": record["requests_total"],
            "cost_usd": cost, "cost_source": source, "price_per_hour_usd": price, "energy_kwh": energy,
            "gpu_count": gpus, "replicas": replicas, "instance_type": instance, "source_line": line}


COLUMNS = ("window_key", "window_end", "window_s", "requests_total", "cost_usd", "cost_source", "price_per_hour_usd",
           "energy_kwh", "gpu_count", "replicas", "instance_type", "source_line")


def stage(path: Path, caplog, tz=UTC) -> tuple[dict[str, dict], dict[int, str], set[int], staging.Staged]:
    """The file staged: rows by key, rejects by line, the lines the generic reader took, the result."""
    con = staging.open_stage()
    try:
        with caplog.at_level(logging.DEBUG, logger=LOGGER):
            caplog.clear()
            result = serving.stage(staging.Source.of(path), con, ParseContext(str(path), tz))
        rows = con.execute(f"SELECT {', '.join(COLUMNS)} FROM serving_windows").fetchall()
        rejects = con.execute("SELECT line, reason FROM rejects").fetchall()
    finally:
        con.close()
    reader = {line for r in caplog.records if r.name == LOGGER for line in getattr(r, "reader_lines", [])}
    return {row[0]: dict(zip(COLUMNS, row)) for row in rows}, dict(rejects), reader, result


def write(path: Path, records: list) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n", encoding="utf-8")
    return path


def kept_last(expected: list[dict]) -> dict[str, dict]:
    """Rows by key, a repeated key keeping its last line's row."""
    return {row["window_key"]: row for row in sorted(expected, key=lambda r: r["source_line"])}


# --- JSON lines: good, odd and bad values ----------------------------------------------------
GOOD = {
    "instance_type": ["g5.12xlarge", "g4dn.xlarge", "G5.2XLARGE", "nowhere"],
    "gpu_type": ["NVIDIA A10G", "L4", "H100", "made-up"],
    "replicas": [1, 2, 16],
    "gpu_count": [0, 1, 8],
    "window_s": [60, 300.5, 0.001, 86400.123456],
    "cost_usd": [0.1, 12, 0.000001],
    "energy_kwh": [0.5, 0],
}
# An odd value and what it does: a reason (the line is refused), else None (read by the reader).
ODD = {
    ("replicas", -1): "replicas is negative (-1)",
    ("replicas", 1.0): None,
    ("replicas", "2"): None,
    ("replicas", 2**40): "replicas 1099511627776 is too large (at most 2,147,483,647)",
    ("gpu_count", -2): "gpu_count is negative (-2)",
    ("gpu_count", 2.5): "gpu_count must be a whole number, got Decimal('2.5')",
    ("window_s", 0): "window_seconds must be more than 0, got 0",
    ("window_s", -5): "window_seconds must be more than 0, got -5",
    ("window_s", "60"): None,
    ("window_s", 1e12): "window_seconds 1e+12 is too long",
    ("cost_usd", -1): "cost_usd is negative (-1)",
    ("cost_usd", "x"): "cost_usd must be an amount, got 'x'",
    ("cost_usd", 1e20): "cost_usd 1E+20 is too large (under 10^15)",
    ("cost_usd", 0.1234567): None,
    ("energy_kwh", -1): "energy_kwh is negative (-1)",
    ("energy_kwh", "0.5"): None,
    ("instance_type", " g5.12xlarge"): None,
    ("instance_type", 5): None,
}


IN_SQL = {("replicas", -1), ("gpu_count", -2)}


def random_window(rng: random.Random, n: int) -> tuple[dict, tuple | None]:
    """A window with random good values and, one time in ten, one odd value (returned with it)."""
    day_hour = f"2026-10-{1 + n % 28:02d}T{n % 24:02d}"
    record = {**BASE, "host": f"h{n % 1500}", "window_start": f"{day_hour}:00:00Z", "window_end": f"{day_hour}:08:00Z"}
    if rng.random() < 0.6:
        del record["window_end"]
        record["window_seconds"] = rng.choice(GOOD["window_s"])
    for name, choices in GOOD.items():
        if name != "window_s" and rng.random() < 0.5:
            record[name] = rng.choice(choices)
    odd = None
    if rng.random() < 0.1:
        odd = rng.choice(list(ODD))
        name, value = odd
        if name == "window_s":
            record.pop("window_end", None)
        record["window_seconds" if name == "window_s" else name] = value
    return record, odd


def test_random_windows_load_as_computed_here_and_only_odd_lines_reach_the_reader(tmp_path, caplog):
    rng = random.Random(42)
    made = [random_window(rng, n) for n in range(3000)]
    rows, rejects, reader, result = stage(write(tmp_path / "random.jsonl", [r for r, _ in made]), caplog)
    want_rejects = {line: ODD[odd] for line, (_, odd) in enumerate(made, 1) if odd and ODD[odd]}
    good = [expected_row(r, line) for line, (r, odd) in enumerate(made, 1) if not (odd and ODD[odd])]
    assert rejects == want_rejects
    assert rows == kept_last(good)
    assert result.accepted == len(good)
    # the odd tenth goes to the reader, but for negative counts, which SQL refuses with the reader's words
    assert reader == {line for line, (_, odd) in enumerate(made, 1) if odd and odd not in IN_SQL}
    assert 200 < len(reader) < 400 and len(rows) > 1000
    assert result.totals["windows"] == len(rows)
    assert result.totals["cost_usd_total"] == str(sum(r["cost_usd"] for r in rows.values() if r["cost_usd"] is not None)
                                                  .quantize(Decimal("0.01")))
    assert result.totals["windows_cost_derived"] == sum(r["cost_source"] == "derived" for r in rows.values())
    # the generic reader alone, line by line, reads the same definition to the same windows
    parsed = serving.parse(staging.lines(staging.Source.of(tmp_path / "random.jsonl")), ParseContext("r", UTC))
    assert {r["window_key"]: {c: r[c] for c in COLUMNS} for r in parsed.rows("serving_windows")} == rows
    assert {r.line: r.reason for r in parsed.rejects} == rejects


def test_the_sample_loads_in_sql_as_computed_here_and_its_csv_rendering_too(tmp_path, caplog):
    with gzip.open(SAMPLE_DIR / "serving_windows.jsonl.gz", "rt", encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle if line.strip()]
    want = kept_last([expected_row(r, line) for line, r in enumerate(records, 1)])
    rows, rejects, reader, result = stage(SAMPLE_DIR / "serving_windows.jsonl.gz", caplog)
    assert (rows, rejects, reader) == (want, {}, set())
    assert result.totals["requests_total"] == sum(r["requests_total"] for r in want.values())
    names = list(dict.fromkeys(k for r in records for k in r))
    out = io.StringIO()
    writer = csv.DictWriter(out, names, lineterminator="\n")
    writer.writeheader()
    for record in records:
        writer.writerow({k: ";".join(v) if isinstance(v, list) else v for k, v in record.items()})
    (tmp_path / "sample.csv").write_text(out.getvalue(), encoding="utf-8")
    rows, rejects, reader, _ = stage(tmp_path / "sample.csv", caplog)
    assert rejects == {} and reader == set()  # plain CSV is settled in SQL
    assert rows == {k: {**row, "source_line": row["source_line"] + 1} for k, row in want.items()}  # the header


PLAIN = json.dumps(BASE)[:-1]  # an object missing its closing brace, to add one field and close
# (line text, what it gives: a reason, or None for a window; whether SQL settles it)
JSON_CASES = [
    (json.dumps(BASE), None, "sql"),
    (PLAIN.replace('"svc-00"', '"svc-01"') + ', "service": "svc-02"}', None, "reader"),  # repeated key: the last
    (PLAIN.replace("serve-00-0", "q1") + ', "region": "eu"}', None, "sql"),              # an unknown key: the strict read
    (PLAIN.replace("serve-00-0", "q3") + ', "energy_kwh" : 0.5}', None, "sql"),          # blank before the colon
    (PLAIN.replace("serve-00-0", "q4") + ', "energy_\\u006bwh": 0.5}', None, "sql"),     # an escaped key
    (PLAIN.replace("serve-00-0", "q5").replace("459", '"459"') + "}", None, "reader"),   # a count as text
    (PLAIN.replace("serve-00-0", "q6").replace("459", "459.0") + "}", None, "reader"),
    (PLAIN.replace("serve-00-0", "q8").replace("454", "true") + "}",
     "requests_success must be a number, got True", "reader"),
    (PLAIN.replace("serve-00-0", "q9").replace("454", "1.5") + "}",
     "requests_success must be a whole number, got Decimal('1.5')", "reader"),
    (PLAIN.replace("serve-00-0", "q12").replace('"svc-00"', '" svc-00"') + "}", None, "reader"),  # stripped
    (PLAIN.replace("serve-00-0", "q15") + ", }", "not valid JSON: Expecting property name enclosed in double quotes at column",
     "reader"),
    (PLAIN.replace("serve-00-0", "q17") + ', "energy_kwh": NaN}', "energy_kwh must be a finite number, got nan",
     "reader"),
    (PLAIN.replace("serve-00-0", "q19") + ', "energy_kwh": null, "cost_usd": null}', None, "sql"),
    (PLAIN.replace("serve-00-0", "q25") + ', "gpu_uuids": ["GPU-a", "GPU-b"], "gpu_type": "L4"}', None, "sql"),
    (PLAIN.replace("serve-00-0", "q27").replace("459", "-459") + "}", "requests_total is negative (-459)", "sql"),
    (PLAIN.replace("serve-00-0", "q29") + ', "avg_gpu_util": 100.5}',
     "avg_gpu_util 100.5 is not a percentage from 0 to 100", "reader"),
    (PLAIN.replace("serve-00-0", "q30") + ', "requests_error": 6}',
     "requests_success 454 + requests_error 6 is more than requests_total 459", "sql"),
    (PLAIN.replace("serve-00-0", "q31").replace("2026-10-01T00:08:00Z", "2026-10-01T00:00:00Z") + "}",
     "window_end equals window_start (2026-10-01T00:00:00+00:00): the window has no length", "reader"),
    ('["not", "an", "object"]', "expected a JSON object, got list", "reader"),
    ('{"service": "broken", ', "not valid JSON:", "reader"),
]


def test_json_cases_give_their_window_or_reason_on_their_path(tmp_path, caplog):
    path = write(tmp_path / "cases.jsonl", [text for text, _, _ in JSON_CASES])
    rows, rejects, reader, _ = stage(path, caplog)
    for line, (text, reason, way) in enumerate(JSON_CASES, 1):
        if reason is None:
            assert any(r["source_line"] == line for r in rows.values()), text
        else:
            assert rejects[line].startswith(reason), (text, rejects.get(line))
        assert (line in reader) == (way == "reader"), text
    repeated = next(r for r in rows.values() if r["source_line"] == 2)
    assert repeated["window_key"].startswith("svc-02|")  # a repeated key keeps its last value, as json.loads
    gpus = next(r for r in rows.values() if r["window_key"].startswith("svc-00|v1|q25|"))
    assert gpus["gpu_count"] == 2 and gpus["cost_usd"] == (GPU["l4"] * 2 * 480 / 3600).quantize(PLACES)


HEADER = ("window_start,window_end,window_seconds,service,model_version,host,requests_total,requests_success,"
          "requests_error,latency_ms_p50,avg_gpu_util,estimated_cost_usd,energy_kwh,instance_type,replicas,"
          "gpu_type,gpu_count,gpu_uuids,prompt_tokens")
GOOD_LINE = "2026-10-01T00:00:00Z,2026-10-01T00:08:00Z,,svc-a,v1,h0,459,454,5,12.5,40,0.75,0.1,,,,,,1000"
# (line, what it gives: a reason, or None for a window; the path: sql, reader, or sql-refused)
CSV_CASES = [
    ("\ufeff" + HEADER, "header", None),
    (GOOD_LINE, None, "sql"),
    ("", "blank", None),
    ('2026-10-01T00:00:00Z,2026-10-01T00:08:00Z,,"svc, eu",v1,h2,10,9,1,,,,,g5.12xlarge,2,,,,', None, "reader"),
    (GOOD_LINE.replace("h0", "h3") + ",extra", "has 20 fields, the header has 19", "sql"),
    (GOOD_LINE.replace("h0", "h4").rsplit(",", 3)[0], "has 16 fields, the header has 19", "sql"),
    (GOOD_LINE.replace("h0", "h5") + ',"x', "has 20 fields, the header has 19", "reader"),
    (GOOD_LINE.replace(",459,", ",١٢,").replace("h0", "h6"), "requests_total must be a number, got '١٢'", "reader"),
    (GOOD_LINE.replace(",454,", ",-4,").replace("h0", "h7"), "requests_success is negative (-4)", "reader"),
    ("2026-10-01T00:00:00Z,,,svc-a,v1,h8,10,9,1,,,,,,,,,,", "no window_end or window_seconds", "sql"),
    ("2026-10-01T00:00:00Z,,300.5,svc-a,v1,h9,10,9,1,,,,,g4dn.xlarge,3,,,,", None, "sql"),
    ("2026-10-01T00:00:00Z,,60,svc-a,v1,h10,10,9,1,,,,,,,L4,,GPU-a;GPU-b; ;,", None, "reader"),  # a blank item
    (GOOD_LINE.replace(",40,", ",101,").replace("h0", "h13"), "avg_gpu_util 101 is not a percentage from 0 to 100",
     "reader"),
    (GOOD_LINE.replace(",0.75,", ",1234567.123456789012,").replace("h0", "h15"), None, "sql"),
    (GOOD_LINE.replace("2026-10-01T00:00:00Z", "1790000000").replace("h0", "h18"), None, "reader"),  # epoch
    (GOOD_LINE.replace("2026-10-01T00:08:00Z", "2026-09-30T00:08:00Z").replace("h0", "h20"),
     "window_end 2026-09-30T00:08:00+00:00 is before window_start 2026-10-01T00:00:00+00:00", "reader"),
    (GOOD_LINE.replace(",12.5,", ",nan,").replace("h0", "h30"), "latency_ms_p50 must be a number, got 'nan'", "reader"),
]


def test_csv_cases_give_their_window_or_reason_on_their_path(tmp_path, caplog):
    for newline in ("\n", "\r\n"):
        path = tmp_path / f"cases{len(newline)}.csv"
        path.write_text(newline.join(text for text, _, _ in CSV_CASES) + newline, encoding="utf-8", newline="")
        rows, rejects, reader, _ = stage(path, caplog)
        loaded = {r["source_line"] for r in rows.values()}
        for line, (text, reason, way) in enumerate(CSV_CASES, 1):
            if reason is None:
                assert line in loaded, text
            elif way is not None:
                assert rejects[line] == reason, (text, rejects.get(line))
            assert (line in reader) == (way == "reader"), text
        assert set(rejects) == {line for line, (_, reason, way) in enumerate(CSV_CASES, 1) if reason and way}
        priced = next(r for r in rows.values() if r["source_line"] == 11)
        assert priced["cost_usd"] == (INSTANCE["g4dn.xlarge"] * 3 * Decimal("300.5") / 3600).quantize(PLACES)
        exact = next(r for r in rows.values() if r["source_line"] == 14)
        assert exact["cost_usd"] == Decimal("1234567.123456789012")


def test_naive_times_in_a_zone_are_read_there(tmp_path, caplog):
    line = GOOD_LINE.replace("2026-10-01T00:00:00Z", "2026-10-01 00:00:00")
    path = tmp_path / "naive.csv"
    path.write_text(HEADER + "\n" + line + "\n", encoding="utf-8")
    rows, _, reader, _ = stage(path, caplog, tz=ZoneInfo("Europe/Berlin"))
    [row] = rows.values()
    assert row["window_key"] == "svc-a|v1|h0|2026-09-30T22:00:00+00:00" and reader == set()  # a zone DuckDB knows: in SQL
    rows, _, reader, _ = stage(path, caplog)
    assert next(iter(rows)) == "svc-a|v1|h0|2026-10-01T00:00:00+00:00" and reader == set()  # UTC: in SQL


def test_headers_that_cannot_be_serving_refuse_the_file(tmp_path, caplog):
    cases = {"bad_header.csv": ("window_start,service,requests_total\n" + GOOD_LINE + "\n",
                                {1: "not a serving-window header: missing requests_success, model_version"}),
             "header_only.csv": ("\n\n" + HEADER + "\n", {}),
             "aliases.csv": ("start_time,end_time,service,model_version,requests_total,requests_success,avg_cpu_util,"
                             "cost_usd\n2026-10-01T00:00:00+02:00,2026-10-01T00:08:00+02:00,s,v,5,5,50,1.5\n", {}),
             "empty.csv": ("", {})}
    for name, (text, want) in cases.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
        rows, rejects, _, _ = stage(tmp_path / name, caplog)
        assert rejects == want, name
        assert len(rows) == (1 if name == "aliases.csv" else 0), name


def test_too_long_lines_are_refused_once_and_the_next_line_decides(tmp_path, monkeypatch):
    """A too-long first line is refused with its size, once, and the next one decides JSON or CSV."""
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
        con = staging.open_stage()
        try:
            result = serving.stage(staging.Source.of(path), con, ParseContext(str(path), UTC))
            loader._name_too_long_lines(con)
            assert result.accepted == 2, name
            got = con.execute("SELECT line, reason FROM rejects ORDER BY line").fetchall()
            assert [line for line, _ in got] == ([1, 3] if name.endswith(".jsonl") else [1, 5]), name
            assert all("longer than the 400" in reason for _, reason in got), name
        finally:
            con.close()


# --- the engine is the format's definition, nothing else ---------------------------------------
def test_another_definition_reads_its_own_spellings_and_rules(tmp_path, caplog):
    """A made-up format (other names, no catalog) loads through the same engine: the definition
    alone decides the spellings, the required fields and the reasons, in SQL and in the reader."""
    from ingest.engine import batch_sql
    from ingest.engine.definition import (COUNT, NUMBER, TEXT, TIME, Definition, Detect, Field, Key, Required, Span,
                                          SumAtMost, Total)

    toy = Definition(
        kind="serving", table="serving_windows", detect=Detect(("n",), ("svc",)),
        header_requires=("window_start", "service", "model_version", "requests_total", "requests_success"),
        header_reason="not a toy header",
        steps=(Field("window_start", TIME, names=("begin",)), Field("window_end", TIME, names=("finish",)),
               Field("window_s", NUMBER, names=("secs",), minimum=None),
               Span("window_start", "window_end", "window_s", tolerance_s=0.5, missing="no finish or secs"),
               Field("service", TEXT, names=("svc",)), Field("model_version", TEXT, names=("ver",)),
               Required("service", "no svc"), Required("model_version", "no ver"),
               Field("requests_total", COUNT, names=("n",)), Field("requests_success", COUNT, names=("ok",)),
               Required("requests_total", "no n"), Required("requests_success", "no ok"),
               SumAtMost(("requests_success",), "requests_total", "ok {requests_success} over n {requests_total}")),
        key=Key("window_key", ("service", "model_version", "window_start")),
        totals=(Total("windows", "rows"), Total("requests_total", "sum", "requests_total")))
    lines = ["begin,secs,svc,ver,n,ok",
             "2026-10-01T00:00:00Z,60,a,v1,10,9",       # loads in SQL
             "2026-10-01T00:01:00Z,,a,v1,10,9",         # no finish or secs: refused in SQL
             "2026-10-01T00:02:00Z,60,a,v1,10,11",      # ok over n: refused in SQL
             "2026-10-01T00:03:00Z,60,,v1,10,9",        # no svc: refused in SQL
             '2026-10-01T00:04:00Z,60,"a",v1,10,9',     # quoted: the reader loads it
             "2026-10-01T00:05:00Z,60,a,v1,10,x9"]      # not a count: the reader says why
    path = tmp_path / "toy.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    con = staging.open_stage()
    try:
        with caplog.at_level(logging.DEBUG, logger=LOGGER):
            result = batch_sql.stage(toy, staging.Source.of(path), con, ParseContext(str(path), UTC))
        rows = con.execute("SELECT window_key, window_end, requests_total, source_line FROM serving_windows "
                           "ORDER BY source_line").fetchall()
        rejects = dict(con.execute("SELECT line, reason FROM rejects").fetchall())
    finally:
        con.close()
    start = datetime(2026, 10, 1, tzinfo=UTC)
    assert rows == [("a|v1|2026-10-01T00:00:00+00:00", start + timedelta(seconds=60), 10, 2),
                    ("a|v1|2026-10-01T00:04:00+00:00", start + timedelta(seconds=300), 10, 6)]
    assert rejects == {3: "no finish or secs", 4: "ok 11 over n 10", 5: "no svc",
                       7: "ok must be a number, got 'x9'"}
    reader = {line for r in caplog.records for line in getattr(r, "reader_lines", [])}
    assert reader == {6, 7}
    assert result.totals == {"windows": 2, "requests_total": 20}
    bad = tmp_path / "bad.csv"
    bad.write_text("begin,svc,n\n", encoding="utf-8")
    con = staging.open_stage()
    try:
        batch_sql.stage(toy, staging.Source.of(bad), con, ParseContext(str(bad), UTC))
        assert con.execute("SELECT line, reason FROM rejects").fetchall() == [
            (1, "not a toy header: missing ver, ok")]
    finally:
        con.close()
