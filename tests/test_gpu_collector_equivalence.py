"""TEMPORARY (issue 23): the collector CSV's old hand-written reader (tests/old_gpu_collector.py, the
module as it was at 94ffba4: `parse` and the SQL `stage`) against its definition read by the engine
(ingest/formats/gpu/gpu_collector.py), over every collector-CSV file of the corpus: the sample
traces, the fleet benchmark's trace file when it is on this machine, the fuzz family's draws and
the hand-made lines of each rule. Same rows in gpu_samples, same totals, same rejects (line,
reason, raw) but for the changes listed in KNOWN below. Deleted with the old module."""
from __future__ import annotations

import csv
import gzip
import re
from datetime import timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.engine import staging
from ingest.engine.contract import ParseContext
from ingest.formats.gpu import gpu_collector as new
from tests import old_gpu_collector as old
from tests.conftest import SAMPLE_DIR
from tests.test_columnar_lines import BLANKS, STAMPS
from tests.test_fuzz import FAMILIES, broken_lines
from tests.test_ingest_engine import COLLECTOR_QUIRKS

UTC, BERLIN, PARIS = timezone.utc, ZoneInfo("Europe/Berlin"), ZoneInfo("Europe/Paris")
HEADER = ",".join(new.COLUMNS)
TRACES = sorted((SAMPLE_DIR / "gpu_traces").glob("*.csv.gz"))
FLEET = Path("/root/.cache/mlcost/fleet/scale-0.05/trace_4hosts.csv")


def known(reason: str) -> str:
    """A reason as the old reader would word it where the wording changed on purpose (listed in the note)."""
    # a time's value is shown as written (`2025/13/05`), no longer with its date's slashes turned to dashes
    return re.sub(r"^timestamp '(\d{4})/(\d{2})/(\d{2})", r"timestamp '\1-\2-\3", reason)


def staged(con) -> dict:
    staging.keep_last(con, "gpu_samples")
    return {"rows": con.execute("SELECT * EXCLUDE (load_id) FROM gpu_samples ORDER BY source_line").fetchall(),
            "rejects": [(line, known(reason), raw) for line, reason, raw in
                        con.execute("SELECT line, reason, raw FROM rejects ORDER BY line, reason").fetchall()]}


def by_stage(module, path: Path, ctx: ParseContext) -> dict:
    con = staging.open_stage()
    try:
        result = module.stage(staging.Source.of(path, str(path)), con, ctx)
        return {**staged(con), "accepted": result.accepted, "totals": result.totals}
    finally:
        con.close()


def by_parse(module, path: Path, ctx: ParseContext) -> dict:
    parsed = module.parse(staging.lines(staging.Source.of(path, str(path))), ctx)
    con = staging.open_stage()
    try:
        staging.insert_parsed(con, parsed, str(path))
        return {**staged(con), "accepted": parsed.accepted, "totals": module.totals(parsed)}
    finally:
        con.close()


def header_raw(result: dict) -> dict:
    """The header's reject carries the line as written (the old one: its names joined with commas)."""
    rejects = [(line, reason, raw if not reason.startswith("the header lacks") else "") for line, reason, raw in result["rejects"]]
    return {**result, "rejects": rejects}


OLD_DISAGREED: list[str] = []  # files where the old `stage` and the old `parse` gave different answers


def same(path: Path, tz=UTC, host=None, parse: bool = True) -> None:
    """The new path's answer is the old one's: the old `parse` (the old reference) and the old
    `stage` wherever the two agreed (where they did not, the new one must be the old `parse`'s)."""
    ctx = ParseContext(str(path), tz, host)
    new_staged = header_raw(by_stage(new, path, ctx))
    try:
        old_staged = header_raw(by_stage(old, path, ctx))
        old_parsed = header_raw(by_parse(old, path, ctx)) if parse else old_staged
    except csv.Error as error:  # the old reader's traceback (a quoted field over 128 KiB): now a reject
        assert any(reason == f"unreadable CSV: {error}" for _, reason, _ in new_staged["rejects"]), error
        return
    if parse:
        assert header_raw(by_parse(new, path, ctx)) == new_staged == old_parsed, path
    if old_staged != old_parsed:
        OLD_DISAGREED.append(str(path))
        for key in old_staged:
            if old_staged[key] != old_parsed[key]:
                if isinstance(old_parsed[key], list):
                    print("old stage / old parse disagreed:", key, set(old_staged[key]) ^ set(old_parsed[key]))
                else:
                    print("old stage / old parse disagreed:", key, old_staged[key], old_parsed[key])
        return
    assert new_staged == old_staged, path


def write(folder: Path, name: str, lines: list[str], packed: bool = False) -> Path:
    path = folder / name
    data = ("\n".join(lines) + "\n").encode()
    path.write_bytes(gzip.compress(data) if packed else data)
    return path


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_sample_traces(path):
    same(path, parse=path == TRACES[0])


@pytest.mark.skipif(not FLEET.exists(), reason="the fleet benchmark's data is not on this machine")
def test_fleet_trace_file():
    same(FLEET, parse=False)


HAND = [
    "2026-01-01T00:00:00Z,n1,0,GPU-a,L4,50.5,1000,40,10",
    " 2026-01-01T00:00:01Z , n1 , 1 , GPU-a , L4 , 12 , 5 , 1 , 2 ",    # blanks around every value
    "\t2026-01-01T00:00:02Z,\u3000n1,0,GPU-a\u00a0,L4,\t50,1000,40,10",  # Unicode blanks
    "2026-01-01T00:00:03Z,n1,0,GPU-a,L4,1e16,1000,40,10",    # beyond 10^15
    "2026-01-01T00:00:04Z,n1,0,GPU-a,L4,5e3,1000,40,10",     # 5000 W: in range
    "2026-01-01T00:00:05Z,n1,0,GPU-a,L4,2e4,1000,40,10",     # 20000 W: out of range
    "2026-01-01T00:00:06Z,n1,0,GPU-a,L4,-0,1000,40,10",
    "2026-01-01T00:00:07Z,n1,0,GPU-a,L4,+5,1000,40,10",
    "2026-01-01T00:00:08Z,n1,0,GPU-a,L4,.5,1000,40,10",
    "2026-01-01T00:00:09Z,n1,0,GPU-a,L4,5.,1000,40,10",
    "2026-01-01T00:00:10Z,n1,0,GPU-a,L4,inf,1000,40,10",
    "2026-01-01T00:00:11Z,n1,0,GPU-a,L4,١٢٣,1000,40,10",
    "2026-01-01T00:00:12Z,n1,0,GPU-a,L4,50,1.5,40,10",       # counter not whole
    "2026-01-01T00:00:13Z,n1,0,GPU-a,L4,50,1.0,40,10",       # counter whole as a float
    "2026-01-01T00:00:14Z,n1,0,GPU-a,L4,50,9223372036854775807,40,10",
    "2026-01-01T00:00:15Z,n1,0,GPU-a,L4,50,9223372036854775808,40,10",
    "2026-01-01T00:00:16Z,n1,0,GPU-a,L4,50,1000,-1,10",
    "2026-01-01T00:00:17Z,n1,0,GPU-a,L4,50,1000,100.0,10",
    "2026-01-01T00:00:18Z,n1,0,GPU-a,L4,50,1000,40,10000001",
    "2026-01-01T00:00:19Z,n1,65535,GPU-a,L4,50,1000,40,10",
    "2026-01-01T00:00:20Z,n1,65536,GPU-a,L4,50,1000,40,10",
    "2026-01-01T00:00:21Z,n1,-1,GPU-a,L4,50,1000,40,10",
    "2026-01-01T00:00:22Z,n1,x,GPU-a,L4,50,1000,40,10",
    ",n1,0,GPU-a,L4,50,1000,40,10",                          # no time
    "2026-01-01T00:00:24Z,n1,0,GPU-a,L4,abc,1000,140,10",    # two bad values: the first column's reason
    "noon,n1,x,GPU-a,L4,abc,1000,140,10",                    # the time's reason first
    '"2026-01-01T00:00:26Z","n1","0","GPU-a","L4","50","1000","40","10"',  # every value quoted
    '2026-01-01T00:00:27Z,n1,0,GPU-a,"L4, PCIe",50,1000,40',  # quoted, one field short
    "2026-01-01T00:00:28Z,n1,0,GPU-a,L4,50,1000,40,10,extra",
    '2026-01-01T00:00:29Z,n1,0,GPU-a,"L4',                   # a stray quote
    "2026-01-01T00:00:30Z,n1,0,,,,,,",                       # only the required values
    "2025/06/01 12:00:31,n1,0,GPU-a,L4,50,1000,40,10",
    "2025/13/01 12:00:32,n1,0,GPU-a,L4,50,1000,40,10",       # a slashed date that is none
    "1767225645,n1,0,GPU-a,L4,50,1000,40,10",                # epoch seconds
    "1767225645000,n1,0,GPU-a,L4,50,1000,40,10",             # milliseconds
    "2026-01-01T00:00:35Z,n1,0,GPU-a,L4,NULL,1000,40,10",
    "2026-01-01T00:00:36Z,n1,0,GPU-a,=HYPERLINK(\"x\"),50,1000,40,10",
    "2026-01-01T00:00:37Z,n1\x10,0,GPU-a,L4,50,1000,40,10",  # a control character
    "9999-12-31T23:00:00-05:00,n1,0,GPU-a,L4,50,1000,40,10",
    "0001-01-01T00:00:00Z,n1,0,GPU-a,L4,50,1000,40,10",
]


@pytest.mark.parametrize("tz", [UTC, BERLIN, timezone(timedelta(hours=-3))], ids=["utc", "berlin", "fixed"])
@pytest.mark.parametrize("host", [None, "box-1"])
def test_hand_made_lines(tmp_path, tz, host):
    lines = list(BLANKS) + [HEADER] + HAND + COLLECTOR_QUIRKS
    for n, stamp in enumerate(STAMPS):
        lines += [f"{stamp},n1,{n % 4},GPU-{n % 4},L4,{50 + n},{1000 * n},{n},{n * 10}", BLANKS[n % len(BLANKS)]]
    same(write(tmp_path, "node-7_x.csv", lines), tz, host)


@pytest.mark.parametrize("header", [
    HEADER, "\ufeff" + HEADER, "gpu_index,power_w,timestamp", "power_w,timestamp,gpu_index,notes,host",
    "timestamp,gpu_index", "timestamp,power_w", "gpu_index,power_w", "time,gpu,power", "timestamp",
    ' "timestamp" ,"gpu_index",power_w', '{"timestamp": 1}', "timestamp;gpu_index;power_w",
])
@pytest.mark.parametrize("name", ["node-7_x.csv", "plain.csv", "_lead.csv.gz", "a_b_c.log.txt"])
def test_headers_and_file_names(tmp_path, header, name):
    columns = [c.strip().strip('"').lstrip("\ufeff") for c in header.split(",")]
    values = {"timestamp": "2026-01-01T00:00:00Z", "gpu_index": "3", "power_w": "70", "host": "", "notes": "n"}
    row = ",".join(values.get(c, "") for c in columns)
    same(write(tmp_path, name, ["", header, row, row.replace("2026", "2027")], packed=name.endswith(".gz")))


@pytest.mark.parametrize("lines", [[], [""], ["   ", "\u3000"], [HEADER], [HEADER, "", " "]],
                         ids=["empty", "newline", "blanks", "header", "header-blanks"])
def test_empty_files(tmp_path, lines):
    path = tmp_path / "n1_e.csv"
    path.write_text("\n".join(lines))
    same(path)


SUFFIX, BASE, SHAPE = FAMILIES["gpu-collector"]


@settings(max_examples=150, deadline=None, derandomize=True)
@given(data=st.data(), packed=st.booleans())
def test_fuzz_family_draws(tmp_path_factory, data, packed):
    lines = data.draw(broken_lines(BASE(), SHAPE))
    folder = tmp_path_factory.mktemp("fuzz")
    same(write(folder, "gpu-node-1_f.csv" + (".gz" if packed else ""), lines, packed))


@pytest.mark.parametrize("extra", [
    ['"', "z" * 5_000_000], [",,,,,,,,"], ["9999-12-31T23:00:00-05:00,gpu-node-1,0,GPU-x,A100,1e308,1,1,1"],
    ["2026-08-01T00:00:00Z,gpu-node-1,0,GPU-x,A100,١٢٣,1,1,1"]])
def test_fuzz_trace_findings(tmp_path, extra):
    base = BASE()[:6]
    same(write(tmp_path, "f.csv", [base[0], *extra, *base[1:]]))
