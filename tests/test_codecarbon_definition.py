"""The CodeCarbon definition (ingest/formats/runs/codecarbon.py) read by the engine: which lines
take the SQL pass and which the generic reader (a spy on reader.read_lines), hand-made lines for
every rule checked against values worked out here in plain Python (csv module, datetime, hashlib,
Decimal), the derived ids of rows without run_id (the same as before the definition, so a file
loaded again replaces its runs), the catalog's price, and the two engine paths agreeing on seeded
fuzz cases built as tests/test_fuzz.py breaks the CodeCarbon family."""
from __future__ import annotations

import csv
import hashlib
import random
import re
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from ingest.engine import reader, staging
from ingest.engine import warehouse as wh
from ingest.engine.contract import ParseContext
from ingest.formats.runs import codecarbon
from ingest.pipeline import loader
from ingest.settings import config
from tests.test_fuzz import HOSTILE

UTC = timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")
REAL = ("codecarbon_examples_emissions.csv", "codecarbon_tests_emissions_invalid_headers_oldschema.csv",
        "greenmlbench_emissions_RTX4070_cc3.2.3_first200KB.csv")
HEADER = ("timestamp,project_name,run_id,experiment_id,duration,emissions,emissions_rate,energy_consumed,"
          "country_name,country_iso_code,region,cloud_provider,cloud_region,os,codecarbon_version,cpu_model,"
          "gpu_count,gpu_model,tracking_mode,on_cloud,pue")
GOOD = "2024-05-31T10:39:13,proj,r{n},e1,355.5,3.4e-05,1e-07,0.0004,France,FRA,idf,,,Linux,2.4.3,Xeon,,,process,N,1.0"
# A value SQL reads as Python does (written here again, not taken from the engine).
PLAIN_NUMBER = re.compile(r"[0-9]{1,15}(\.[0-9]{1,17})?([eE][+-]?[0-9]{1,3})?")
MEASURES = ("duration", "energy_consumed", "emissions")


def rows_of(path: Path) -> list[tuple[int, dict]]:
    """(line, row) of every data row, by the csv module."""
    with open(path, newline="", encoding="utf-8-sig") as handle:
        rows = csv.DictReader(handle)
        return [(rows.line_num, row) for row in rows]


def derived_id(row: dict) -> str:
    """The id of a row without run_id, as CodeCarbon rows got it before the definition."""
    identity = "|".join(row.get(column, "") for column in ("project_name", "timestamp", "duration"))
    return "codecarbon-" + hashlib.sha256(identity.encode()).hexdigest()[:12]


def stage_file(path: Path, tz=UTC) -> tuple[list[dict], dict[int, str], list[int]]:
    """(runs by source_line, rejects {line: reason}, the lines the generic reader was given)."""
    given: list[int] = []
    original = reader.read_lines

    def spy(definition, lines, *args, **kwargs):
        given.extend(line for line, _ in lines)
        return original(definition, lines, *args, **kwargs)

    con = staging.open_stage()
    try:
        reader.read_lines = spy
        codecarbon.stage(staging.Source.of(path), con, ParseContext(str(path), tz))
        cursor = con.execute("SELECT * EXCLUDE (load_id, tags), map_entries(tags) AS tags FROM runs ORDER BY source_line")
        names = [d[0] for d in cursor.description]
        runs = [dict(zip(names, row)) for row in cursor.fetchall()]
        rejects = dict(con.execute("SELECT line, reason FROM rejects").fetchall())
    finally:
        reader.read_lines = original
        con.close()
    return runs, rejects, sorted(given)


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# --- the real files: which path each line takes ---------------------------------------------------
@pytest.mark.parametrize("name", REAL)
def test_real_files_plain_lines_stay_in_sql(formats_dir, name):
    """The reader gets only complete rows SQL cannot settle: no run_id (its id is made of the values
    as written) or a measure spelled beyond SQL's plain numbers (more than 17 decimals)."""
    path = formats_dir / "codecarbon" / name
    runs, rejects, given = stage_file(path)
    complete = [(line, row) for line, row in rows_of(path) if all(row[c].strip() for c in ("timestamp", *MEASURES))]
    expected = [line for line, row in complete
                if not (row.get("run_id") or "").strip() or not all(PLAIN_NUMBER.fullmatch(row[c]) for c in MEASURES)]
    assert given == expected
    assert sorted(rejects) == [line for line, row in rows_of(path) if (line, row) not in complete]
    latest = {}
    for line, row in complete:
        latest.pop(row.get("run_id") or derived_id(row), None)
        latest[row.get("run_id") or derived_id(row)] = line
    assert [r["source_line"] for r in runs] == sorted(latest.values())
    assert [r["run_id"] for r in runs] == [k for k, _ in sorted(latest.items(), key=lambda item: item[1])]


# --- hand-made lines, one per rule --------------------------------------------------------------
def line(n: int, **changes: str) -> str:
    fields = dict(zip(HEADER.split(","), GOOD.format(n=n).split(",")))
    fields.update(changes)
    return ",".join(fields.values())


REFUSED = {  # the line's changes -> the reason it is refused with
    "timestamp=": "timestamp is empty: CodeCarbon wrote an incomplete row",
    "energy_consumed=": "energy_consumed is empty: CodeCarbon wrote an incomplete row",
    "emissions= ": "emissions is empty: CodeCarbon wrote an incomplete row",
    "duration=": "duration is empty: CodeCarbon wrote an incomplete row",
    "duration=x": "duration must be a number, got 'x'",
    "duration=-1": "duration is negative (-1)",
    "duration=1e12": "duration '1e12' is too large (at most 3.16224e+08)",
    "timestamp=noon": "timestamp",  # a part of the reason: the engine's wording of times
    "energy_consumed=-1": "energy_consumed is negative (-1)",
    "emissions=-0.5": "emissions is negative (-0.5)",
    "energy_consumed=abc": "energy_consumed must be a number, got 'abc'",
    "gpu_count=1.5": "gpu_count",
    "gpu_count=-1": "gpu_count is negative (-1)",
    "duration= 12 ": "duration must be a number, got ' 12 '",  # blanks around a number: as float() alone would not say
}
LOADED = ["duration=0", "duration=3600", "timestamp=2024-05-31 10:39:13",
          "timestamp=2024-05-31T10:39:13+02:00", "timestamp=2024-05-31T10:39:13.123456", "run_id=;duration=100",
          "run_id=unknown;duration=200", "on_cloud=Y;cloud_region=us-east-1", "on_cloud= y ;cloud_region=eu-west-1",
          "on_cloud=N;cloud_region=us-east-1", "on_cloud=Y;cloud_region=", "region=;country_name=Spain",
          "region= ;country_name=Spain", "cpu_model= padded ", "os=", "gpu_count=1.0;gpu_model=RTX 4070",
          "gpu_count=2;gpu_model=NVIDIA A100-SXM4-80GB", "gpu_count=0;gpu_model=T4", "gpu_model=T4", "emissions=1e-320"]


def changes_of(spec: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in spec.split(";"))


def expected_run(row: dict, tz) -> dict:
    """The runs row of a CodeCarbon row, worked out here."""
    stamp = datetime.fromisoformat(row["timestamp"].strip())
    ended = (stamp if stamp.tzinfo else stamp.replace(tzinfo=tz)).astimezone(UTC)
    hours = float(row["duration"]) / 3600
    cloud = row["on_cloud"].strip().upper() == "Y" and row["cloud_region"].strip()
    region = row["cloud_region"] if cloud else (row["region"].strip() or row["country_name"].strip() or None)
    run_id = row["run_id"].strip()
    gpus = int(float(row["gpu_count"])) if row["gpu_count"].strip() else None
    model = row["gpu_model"].strip() or None
    price = config.load().prices.gpu(model) if model and gpus else None
    tags = {c: row[c] for c in codecarbon.TAG_COLUMNS if c in row and row[c].strip()}
    return {"run_id": run_id if run_id and run_id != "unknown" else derived_id(row), "project": row["project_name"],
            "ended_at": ended, "started_at": ended - timedelta(hours=hours), "duration_s": pytest.approx(hours * 3600),
            "energy_kwh": float(row["energy_consumed"]), "emissions_kg": float(row["emissions"]), "region": region,
            "gpu_type": model, "gpu_count": gpus, "tags": [{"key": k, "value": v} for k, v in sorted(tags.items())],
            "cost_usd": None if price is None else (price * gpus * Decimal(repr(hours))).quantize(Decimal("0.000001")),
            "cost_source": None if price is None else "catalog", "price_per_hour_usd": None if price is None else price * gpus,
            "val_metric_name": "val_metric", "metric_goal": "max", "source_kind": "codecarbon"}


@pytest.mark.parametrize("tz", [UTC, BERLIN], ids=["no --tz", "berlin"])
def test_every_rule_against_plain_python(tmp_path, tz):
    specs = list(REFUSED) + LOADED
    lines = [HEADER] + [line(n, **changes_of(spec)) for n, spec in enumerate(specs)]
    lines += [line(90)[:-4], line(91) + ",extra", "", '"unterminated,' + line(92)]
    path = write(tmp_path / "rules.csv", lines)
    runs, rejects, given = stage_file(path, tz)
    by_line = {r["source_line"]: r for r in runs}
    for n, spec in enumerate(specs):
        at = n + 2
        if spec in REFUSED:
            assert REFUSED[spec] in rejects.get(at, ""), (spec, rejects.get(at))
            continue
        assert at not in rejects, (spec, rejects[at])
        row = dict(zip(HEADER.split(","), next(csv.reader([lines[at - 1]]))))
        expected = expected_run(row, tz)
        assert {k: by_line[at][k] for k in expected} == expected, spec
    width = len(HEADER.split(","))
    assert rejects[len(specs) + 2] == f"has {width - 1} fields, the header has {width}"
    assert rejects[len(specs) + 3] == f"has {width + 1} fields, the header has {width}"
    assert len(runs) + len(rejects) == len(specs) + 3  # the blank line is skipped; the unterminated one is read or refused
    # the reader: refused lines whose reason it words, rows without run_id, texts with blanks at their edges,
    # GPUs the catalog prices; never a plain row (a GPU without a count, or the catalog does not know it, included)
    plain = {n + 2 for n, spec in enumerate(specs)
             if spec in ("duration=0", "duration=3600", "os=", "gpu_model=T4", "gpu_count=0;gpu_model=T4", "region=;country_name=Spain",
                         "on_cloud=Y;cloud_region=us-east-1", "gpu_count=1.0;gpu_model=RTX 4070", "emissions=1e-320")}
    assert not plain & set(given)
    priced = {n + 2 for n, spec in enumerate(specs) if "A100" in spec}
    assert priced <= set(given)


def test_header_and_empty_files(tmp_path):
    missing = write(tmp_path / "no_energy.csv", ["timestamp,project_name,duration,emissions", "2024-01-01T00:00:00,p,1,1"])
    assert stage_file(missing)[:2] == ([], {1: "not a CodeCarbon header: missing energy_consumed"})
    empty = tmp_path / "empty.csv"
    empty.write_text("", encoding="utf-8")
    assert stage_file(empty)[:2] == ([], {0: "not a CodeCarbon header: missing " + ", ".join(codecarbon.REQUIRED)})
    blank_first = write(tmp_path / "blank_first.csv", ["", "\ufeff" + HEADER, line(1)])  # the first non-blank line is the header
    runs, rejects, _ = stage_file(blank_first)
    assert (len(runs), rejects) == (1, {})


# --- ids: the same as before, so a file loaded again replaces its runs ------------------------------
def test_derived_ids_are_the_old_ones(formats_dir, warehouse, tmp_path):
    oldest = formats_dir / "codecarbon" / REAL[1]
    [(_, row)] = rows_of(oldest)
    runs, _, _ = stage_file(oldest)
    assert [r["run_id"] for r in runs] == [derived_id(row)]
    # a copy under another name with one run more: the shared run is replaced, not doubled
    text = oldest.read_text(encoding="utf-8").rstrip("\n").splitlines()
    later = write(tmp_path / "emissions_again.csv", text + [text[1].replace("210.39603400230408", "15.5")])
    for path in (oldest, later):
        assert loader.ingest_file(path).status == "loaded"
    with wh.connect() as con:
        ids = [r for (r,) in con.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall()]
    second = dict(rows_of(later))[3]
    assert ids == sorted({derived_id(row), derived_id(second)})


# --- the engine's two paths agree on fuzz cases -------------------------------------------------
def fuzzed(base: list[str], seed: int) -> list[str]:
    """The base lines with a few breakages, as tests/test_fuzz.py draws them (seeded)."""
    rng = random.Random(seed)
    lines = list(base)
    for _ in range(rng.randint(1, 4)):
        spot = rng.randint(1, len(lines) - 1)
        action = rng.choice(["field", "field", "field", "truncate", "repeat", "drop", "junk", "blank"])
        text = lines[spot]
        if action == "field":
            fields = text.split(",")
            value = rng.choice(HOSTILE[:-1] + ["".join(rng.choice("0123456789.-eE x,\"") for _ in range(rng.randint(0, 8)))])
            fields[rng.randrange(len(fields))] = value
            lines[spot] = ",".join(fields)
        elif action == "truncate":
            lines[spot] = text[: rng.randint(0, len(text))]
        elif action == "repeat":
            lines.insert(spot, text)
        elif action == "drop" and len(lines) > 2:
            del lines[spot]
        elif action == "junk":
            lines.insert(spot, "".join(chr(rng.randint(32, 126)) for _ in range(rng.randint(1, 40))))
        elif action == "blank":
            lines.insert(spot, " " * rng.randint(0, 3))
    return lines


def test_sql_pass_and_reader_agree_on_fuzz_cases(formats_dir, tmp_path):
    bases = [(formats_dir / "codecarbon" / name).read_text(encoding="utf-8").splitlines()[:6] for name in (REAL[0], REAL[2])]
    for seed in range(80):
        path = write(tmp_path / f"fuzz_{seed}.csv", fuzzed(bases[seed % 2], seed))
        tz = BERLIN if seed % 3 else UTC
        runs, rejects, _ = stage_file(path, tz)
        parsed = codecarbon.parse(staging.lines(staging.Source.of(path)), ParseContext(str(path), tz))
        con = staging.open_stage()
        try:
            staging.insert_parsed(con, parsed, str(path))
            staging.keep_last(con, "runs")
            cursor = con.execute("SELECT * EXCLUDE (load_id, tags), map_entries(tags) AS tags FROM runs ORDER BY source_line")
            names = [d[0] for d in cursor.description]
            assert [dict(zip(names, row)) for row in cursor.fetchall()] == runs, seed
            assert dict(con.execute("SELECT line, reason FROM rejects").fetchall()) == rejects, seed
        finally:
            con.close()
