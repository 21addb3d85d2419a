"""The CodeCarbon definition (codecarbon.CODECARBON, read by the engine: new_stage the SQL pass,
new_parse the generic reader) against the old path (codecarbon.stage: its own SQL and parse) over
every CodeCarbon file of the corpus: the real files of ../shared/formats/codecarbon, seeded fuzz
cases built as tests/test_fuzz.py breaks the CodeCarbon family, and hand-made lines for every rule;
with --tz UTC, Europe/Berlin and none.

A temporary test of the switch: the same runs rows, totals and rejects (line, reason, raw) on both,
except the wording changes listed in WORDING (each rule's once). The engine's two paths (SQL pass and
reader) must agree with each other too."""
from __future__ import annotations

import hashlib
import random
import re
from datetime import timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from ingest.engine import staging
from ingest.engine.contract import ParseContext
from ingest.formats.runs import codecarbon
from tests.test_fuzz import HOSTILE

UTC = timezone.utc
ZONES = {"no --tz": UTC, "berlin": ZoneInfo("Europe/Berlin"), "new_york": ZoneInfo("America/New_York")}  # the loader's default is UTC
REAL = ("codecarbon_examples_emissions.csv", "codecarbon_tests_emissions_invalid_headers_oldschema.csv",
        "greenmlbench_emissions_RTX4070_cc3.2.3_first200KB.csv")
NEW_HEADER = ("timestamp,project_name,run_id,experiment_id,duration,emissions,emissions_rate,energy_consumed,"
              "country_name,country_iso_code,region,cloud_provider,cloud_region,os,codecarbon_version,cpu_model,"
              "gpu_count,gpu_model,tracking_mode,on_cloud,pue")
GOOD = "2024-05-31T10:39:13,proj,r{n},e1,355.5,3.4e-05,1e-07,0.0004,France,FRA,idf,,,Linux,2.4.3,Xeon,,,process,N,1.0"
OLD_HEADER = "timestamp,project_name,duration,emissions,energy_consumed,country_name,country_iso_code,region,on_cloud"
OLD_GOOD = "2021-06-29T11:00:38,codecarbon,210.39,0.001,0.0013,Morocco,MAR,casablanca,N"
# (old reason, new reason) patterns that differ in wording only: each rule's once.
WORDING = [
    (r"duration_hours is negative \(-[0-9.e-]+\)", r"duration is negative \(-[0-9.e-]+\)", "the duration as written, in seconds"),
    (r"duration_hours [0-9.e+]+ is too large \(at most 87840\)", r"duration '[^']*' is too large \(at most 3.16224e\+08\)",
     "the duration as written, in seconds"),
    (r"energy_kwh is negative \(-[0-9.e-]+\)", r"energy_consumed is negative \(-[0-9.e-]+\)", "CodeCarbon's column name"),
    (r"emissions_kg is negative \(-[0-9.e-]+\)", r"emissions is negative \(-[0-9.e-]+\)", "CodeCarbon's column name"),
]
# Behaviour changes (changes.csv and blank_first.csv), each checked in test_behaviour_changes.



def hand_made() -> dict[str, list[str]]:
    """A file per group of rules: each field's bad value, each derivation, the header reject."""
    def row(n: int, **changes: str) -> str:
        fields = dict(zip(NEW_HEADER.split(","), GOOD.format(n=n).split(",")))
        fields.update(changes)
        return ",".join(fields.values())

    lines = [NEW_HEADER]
    cases = [dict(timestamp=""), dict(energy_consumed=""), dict(emissions=" "), dict(duration=""),
             dict(timestamp="garbage", energy_consumed=""), dict(duration="x"), dict(duration="-1"), dict(duration="1e12"),
             dict(duration="0"), dict(duration="1e-9"), dict(duration="3600"), dict(timestamp="2024-05-31 10:39:13"),
             dict(timestamp="2024-05-31T10:39:13+02:00"), dict(timestamp="2024-05-31T10:39:13.123456"),
             dict(timestamp="1717151953"), dict(timestamp="0001-01-01T00:00:00"), dict(energy_consumed="-1"),
             dict(energy_consumed="abc"), dict(emissions="-0.5"), dict(emissions="inf"), dict(gpu_count="1.5"),
             dict(gpu_count="-1"), dict(gpu_count="2", gpu_model="NVIDIA A100-SXM4-80GB"), dict(gpu_count="8", gpu_model="H100"),
             dict(gpu_count="1", gpu_model="Tesla T4"), dict(gpu_count="0", gpu_model="H100"), dict(gpu_model="H100"),
             dict(gpu_count="2000000"), dict(run_id=""), dict(run_id=" spaced "),
             dict(on_cloud="Y", cloud_region="us-east-1"), dict(on_cloud=" y ", cloud_region="eu-west-1"),
             dict(on_cloud="N", cloud_region="us-east-1"), dict(on_cloud="Y", cloud_region=""), dict(region="", country_name="Spain"), dict(cpu_model=" padded "), dict(os=""), dict(project_name=""),
             dict(project_name='"quoted, name"'), dict(pue="1.2"), dict(duration=" 12 "), dict(energy_consumed="1_000"),
             dict(duration="1."), dict(duration=".5"), dict(emissions="1e308")]
    lines += [row(n, **case) for n, case in enumerate(cases)]
    lines += [row(100)[:-4], row(101) + ",extra", "", "   ", '"unterminated,' + row(102), row(1)]  # width, blank, repeat
    old = [OLD_HEADER, OLD_GOOD, OLD_GOOD, OLD_GOOD.replace("210.39", "210.390"), OLD_GOOD.replace(",codecarbon,", ",,"),
           OLD_GOOD.replace("0.0013", "")]
    changes = [NEW_HEADER, row(1, run_id=" ", duration="100"), row(2, run_id="unknown", duration="200"), row(3, region=" ", country_name="Spain")]
    return {"rules.csv": lines, "changes.csv": changes, "oldest.csv": old,
            "no_energy_header.csv": ["timestamp,project_name,duration,emissions", "2024-01-01T00:00:00,p,1,1"],
            "bom.csv": ["\ufeff" + OLD_HEADER, "", OLD_GOOD], "empty.csv": [], "blank_first.csv": ["", OLD_HEADER, OLD_GOOD],
            "only_header.csv": [NEW_HEADER]}


def fuzzed(base: list[str], seed: int) -> list[str]:
    """The base lines with a few breakages, as tests/test_fuzz.py draws them (seeded)."""
    rng = random.Random(seed)
    lines = list(base)
    for _ in range(rng.randint(1, 4)):
        spot = rng.randint(1, len(lines) - 1)
        action = rng.choice(["field", "field", "field", "truncate", "repeat", "drop", "junk", "blank"])
        line = lines[spot]
        if action == "field":
            fields = line.split(",")
            value = rng.choice(HOSTILE[:-1] + ["".join(rng.choice("0123456789.-eE x,\"") for _ in range(rng.randint(0, 8)))])
            fields[rng.randrange(len(fields))] = value
            lines[spot] = ",".join(fields)
        elif action == "truncate":
            lines[spot] = line[: rng.randint(0, len(line))]
        elif action == "repeat":
            lines.insert(spot, line)
        elif action == "drop" and len(lines) > 2:
            del lines[spot]
        elif action == "junk":
            lines.insert(spot, "".join(chr(rng.randint(32, 126)) for _ in range(rng.randint(1, 40))))
        elif action == "blank":
            lines.insert(spot, " " * rng.randint(0, 3))
    return lines


CHANGED = ("changes.csv", "blank_first.csv")


def write_hand_made(tmp_path: Path) -> list[Path]:
    files = []
    for name, lines in hand_made().items():
        files.append(tmp_path / name)
        files[-1].write_text("\n".join(lines) + ("\n" if lines else ""), encoding="utf-8")
    return files


def corpus(formats_dir: Path, tmp_path: Path) -> list[Path]:
    files = [formats_dir / "codecarbon" / name for name in REAL]
    files += [path for path in write_hand_made(tmp_path) if path.name not in CHANGED]
    base = (formats_dir / "codecarbon" / REAL[0]).read_text(encoding="utf-8").splitlines()[:6]
    base_new = (formats_dir / "codecarbon" / REAL[2]).read_text(encoding="utf-8").splitlines()[:6]
    for seed in range(120):
        path = tmp_path / f"fuzz_{seed}.csv"
        path.write_text("\n".join(fuzzed(base if seed % 2 else base_new, seed)) + "\n", encoding="utf-8")
        files.append(path)
    return files


def loaded(con, totals: dict) -> dict:
    cursor = con.execute("SELECT * EXCLUDE (load_id, tags), map_entries(tags) AS tags FROM runs ORDER BY run_id, source_line")
    names = [d[0] for d in cursor.description]
    runs = [dict(zip(names, row)) for row in cursor.fetchall()]
    rejects = con.execute("SELECT line, reason, raw FROM rejects ORDER BY line, reason").fetchall()
    return {"runs": runs, "rejects": rejects, "totals": totals}


def three_ways(path: Path, tz) -> tuple[dict, dict, dict]:
    """(old, new in SQL, new by the reader) of one file."""
    ctx = ParseContext(str(path), tz)
    cons = [staging.open_stage() for _ in range(3)]
    try:
        old = loaded(cons[0], codecarbon.stage(staging.Source.of(path), cons[0], ctx).totals)
        new = loaded(cons[1], codecarbon.new_stage(staging.Source.of(path), cons[1], ctx).totals)
        parsed = codecarbon.new_parse(staging.lines(staging.Source.of(path)), ctx)
        staging.insert_parsed(cons[2], parsed, str(path))
        return old, new, loaded(cons[2], codecarbon.CODECARBON and staged_totals(cons[2]))
    finally:
        for con in cons:
            con.close()


def staged_totals(con) -> dict:
    from ingest.formats.runs import run_record

    return run_record.staged_run_totals(con)


def worded(old: list, new: list) -> list:
    """The rejects that differ other than by a listed wording change."""
    left = []
    for a, b in zip(old, new):
        if a != b and not (a[0] == b[0] and a[2] == b[2] and any(
                re.fullmatch(o, a[1]) and re.fullmatch(n, b[1]) for o, n, _ in WORDING)):
            left.append((a, b))
    if len(old) != len(new):
        left.append((old[len(new):], new[len(old):]))
    return left


@pytest.mark.parametrize("zone", sorted(ZONES))
def test_definition_loads_as_the_old_path(formats_dir, tmp_path, zone):
    differing = []
    for path in corpus(formats_dir, tmp_path):
        old, new, read = three_ways(path, ZONES[zone])
        assert new["runs"] == read["runs"] and new["rejects"] == read["rejects"], f"SQL pass and reader differ on {path.name}"
        if old["runs"] != new["runs"] or old["totals"] != new["totals"] or worded(old["rejects"], new["rejects"]):
            differing.append((path.name, [(a, b) for a, b in zip(old["runs"], new["runs"]) if a != b][:2] or
                              (len(old["runs"]), len(new["runs"])), worded(old["rejects"], new["rejects"])[:3],
                              old["totals"], new["totals"]))
    assert not differing, "\n".join(map(repr, differing))


def test_behaviour_changes(tmp_path):
    """The old path's accidents the definition does not keep: a run_id of blanks or 'unknown' got
    an id hashed from the run-summary's (project, host, instance_type, started_at), so two such
    runs of one project and start replaced each other, and now gets CodeCarbon's id (project,
    timestamp, duration); a region of blanks gave no region, now the country's name; a blank
    first line was read as the header (the whole file refused), now the header is the first
    non-blank line."""
    paths = {path.name: path for path in write_hand_made(tmp_path)}
    old, new, read = three_ways(paths["changes.csv"], UTC)
    assert new == read
    hashed = ["codecarbon-" + hashlib.sha256(f"proj|2024-05-31T10:39:13|{d}".encode()).hexdigest()[:12] for d in (100, 200)]
    assert sorted((r["source_line"], r["run_id"][:5], r["region"]) for r in old["runs"]) == [
        (2, "auto-", "idf"), (3, "auto-", "idf"), (4, "r3", None)]
    assert sorted((r["source_line"], r["run_id"], r["region"]) for r in new["runs"]) == [
        (2, hashed[0], "idf"), (3, hashed[1], "idf"), (4, "r3", "Spain")]
    old, new, _ = three_ways(paths["blank_first.csv"], UTC)
    assert [reason for _, reason, _ in old["rejects"]] == ["not a CodeCarbon header: missing " + ", ".join(codecarbon.REQUIRED)]
    assert (new["rejects"], len(new["runs"])) == ([], 1)
