"""TEMPORARY (issue 23): nvidia-smi's old module (tests/_old_nvidia_smi.py, the code before the
definition) against the definition read by the engine, over the real log and its variants, random
breakages and hand-made lines for every rule, each with no --tz, --tz Europe/Berlin and a fixed
offset. Rows (every column), rejects (line, reason, text), records accepted, totals and warnings
must be identical but for the wording changes listed in RENAMED. Deleted with the old module."""
from __future__ import annotations

import gzip
import random
import re
from datetime import timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from ingest.engine import staging
from ingest.engine.contract import ParseContext
from ingest.formats.gpu import nvidia_smi, traces
from tests import _old_nvidia_smi as old_smi

NVIDIA_SMI = "nvidia_gpu/powertracesim_burn_nvidia-smi_8gpu_first137lines.csv"
ZONES = {"utc": timezone.utc, "berlin": ZoneInfo("Europe/Berlin"), "fixed": timezone(timedelta(hours=5, minutes=30))}


ABSENT = re.compile(r"\[.*\]|N/A")


def renamed(reason: str, raw: str) -> str:
    """An old reason in the new wording (the changes the report lists): a timestamp is quoted as
    written (the old path quoted it with its date's slashes turned to dashes); an absent marker
    where a timestamp or index goes is absent (was unreadable)."""
    quoted = re.match(r"(timestamp|index) '(.*)' (is not|is outside|must be)", reason)
    if quoted:
        value = quoted[2]
        if ABSENT.fullmatch(value):
            return "timestamp is missing" if quoted[1] == "timestamp" else "gpu_index is missing"
        slashed = re.sub(r"^(\d{4})-(\d{2})-(\d{2})", r"\1/\2/\3", value)
        if quoted[1] == "timestamp" and slashed != value and slashed in raw:
            return reason.replace(repr(value), repr(slashed), 1)
    return reason


def stage(module, path: Path, ctx: ParseContext):
    con = staging.open_stage()
    try:
        staged = module.stage(staging.Source.of(path, str(path)), con, ctx)
        staging.keep_last(con, traces.TABLE)
        samples = con.execute(f"SELECT * FROM {traces.TABLE} ORDER BY ALL").fetchall()
        rejects = con.execute("SELECT line, reason, raw FROM rejects ORDER BY ALL").fetchall()
        return staged.accepted, staged.totals, staged.warnings, samples, rejects
    finally:
        con.close()


OLD_FAILED: list[str] = []


def compare(path: Path, tz, host=None) -> None:
    ctx = ParseContext(str(path), tz, host, None)
    try:
        old = stage(old_smi, path, ctx)
    except Exception:  # the old module's own failure (a quoted line pyarrow cannot split): new must read it
        OLD_FAILED.append(path.name)
        if hasattr(nvidia_smi, "NVIDIA_SMI"):  # the definition
            stage(nvidia_smi, path, ctx)
        return
    new = stage(nvidia_smi, path, ctx)
    old_rejects = sorted((line, renamed(reason, raw), raw) for line, reason, raw in old[4])
    assert new[3] == old[3], "rows"
    assert new[4] == old_rejects, "rejects"
    assert new[:3] == old[:3]


def write(path: Path, lines: list[str], newline: str = "\n", bom: bool = False, gz: bool = False) -> Path:
    data = (("\ufeff" if bom else "") + newline.join(lines) + newline).encode()
    if gz:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


def variants(lines: list[str]) -> dict[str, list[str]]:
    head, data = lines[0], lines[1:]
    return {
        "as_logged": lines,
        "noheader": data,
        "nounits": [head] + [line.replace(" W", "").replace(" %", "").replace(" MiB", "") for line in data],
        "index": ["index, " + head] + [f"{n % 8 if n < 120 else (0 if n == 120 else n - 120)}, {line}"
                                       for n, line in enumerate(data)],
        "uuid": ["timestamp, uuid, name, " + head.split(", ", 1)[1]]
        + [line.replace(", ", f", GPU-{n % 8:04d}, NVIDIA A100-SXM4-80GB, ", 1) for n, line in enumerate(data)],
        "uuid_noheader": [line.replace(", ", f", GPU-{n % 8:04d}, NVIDIA A100-SXM4-80GB, ", 1) for n, line in enumerate(data)],
        "offset": [head] + [line.replace(",", "+02:00,", 1) for line in data],
        "average": [head.replace("power.draw", "power.draw.average")] + data,
        "host": ["hostname, " + head] + [f"node-{n % 3}, {line}" for n, line in enumerate(data)],
    }


HOSTILE = ["", " ", "[N/A]", "[Not Supported]", "N/A", "abc W", "140 %", "-5 W", "1e3 W", "nan W", "12 %", " 62.5  W",
           "70000", "-1", "x", " 3 ", "2025/13/05 20:58:44.813", "noon", "2025-05-05T20:58:44.9Z", "1746471524",
           "2025/05/05 20:58:45", "1989/01/01 00:00:00", "2100/01/01 00:00:00", "١٢٣", "1_000", "0x10", "12\x10",
           '"', '"1 W"', "1 MiB", "5 W", "GPU-zz", "inf", "1e400 W", "0.5", "12.", ".5 W", "62W", "W",
           "2025/05/05 20:58:44.8131234", "2025/03/30 02:30:00.000", "2025/10/26 02:30:00.000"]


def broken(lines: list[str], rnd: random.Random, first_data: int) -> list[str]:
    out = list(lines)
    for _ in range(rnd.randrange(1, 6)):
        spot = rnd.randrange(first_data, len(out))
        action = rnd.choice(["field", "field", "field", "truncate", "repeat", "drop", "junk", "blank", "quote", "crlf"])
        line = out[spot]
        if action == "field":
            fields = line.split(",")
            fields[rnd.randrange(len(fields))] = rnd.choice(HOSTILE)
            out[spot] = ",".join(fields)
        elif action == "truncate":
            out[spot] = line[:rnd.randrange(len(line) + 1)]
        elif action == "repeat":
            out.insert(spot, line)
        elif action == "drop" and len(out) > first_data + 1:
            del out[spot]
        elif action == "junk":
            out.insert(spot, "".join(rnd.choice("ab,\" 1W%\t") for _ in range(rnd.randrange(12))))
        elif action == "blank":
            out.insert(spot, rnd.choice(["", "   ", "\t"]))
        elif action == "quote":
            out[spot] = ",".join(f'"{f}"' if rnd.random() < 0.5 else f for f in line.split(","))
        elif action == "crlf":
            out[spot] = line + "\r"
    return out


@pytest.fixture(scope="module")
def real(formats_dir) -> list[str]:
    return (formats_dir / NVIDIA_SMI).read_text().splitlines()


@pytest.mark.parametrize("zone", list(ZONES))
@pytest.mark.parametrize("variant", ["as_logged", "noheader", "nounits", "index", "uuid", "uuid_noheader", "offset",
                                     "average", "host"])
def test_real_log_and_its_variants(real, tmp_path, variant, zone):
    lines = variants(real)[variant]
    compare(write(tmp_path / f"gpu-node-9_{variant}.csv", lines), ZONES[zone])
    if variant in ("as_logged", "noheader"):
        compare(write(tmp_path / "crlf.csv", lines, "\r\n", bom=True), ZONES[zone], host="h1")
        compare(write(tmp_path / "zipped.csv", lines, gz=True), ZONES[zone])


@pytest.mark.parametrize("seed", range(150))
def test_random_breakages(real, tmp_path, seed):
    rnd = random.Random(seed)
    name = rnd.choice(["as_logged", "noheader", "nounits", "index", "uuid", "uuid_noheader", "offset", "host"])
    lines = variants(real)[name]
    lines = lines[:rnd.choice([9, 17, 40, len(lines)])]
    first = 0 if "noheader" in name else 1
    path = write(tmp_path / f"node-{seed}_{name}.csv", broken(lines, rnd, first))
    compare(path, ZONES[rnd.choice(list(ZONES))], host=rnd.choice([None, None, "box"]))


STAMP = "2025/05/05 20:58:{:06.3f}"


def loops(count: int, gpus: int, row, start: float = 10.0) -> list[str]:
    return [row(k, g, STAMP.format(start + k + g * 0.001)) for k in range(count) for g in range(gpus)]


HAND = {
    "units_in_header_and_values": ["timestamp, power.draw [W], utilization.gpu [%], memory.used [MiB]"]
    + loops(3, 2, lambda k, g, t: f"{t}, {60 + g}.5 W, {g} %, {100 * g} MiB"),
    "absent_markers": ["timestamp, uuid, name, power.draw [W], utilization.gpu [%], memory.used [MiB]"]
    + loops(3, 2, lambda k, g, t: f"{t}, GPU-{g}, [N/A], {'[N/A]' if k else '5 W'}, {'[Not Supported]' if g else 'N/A'}, 1 MiB"),
    "noheader_two_columns_in_one_unit": ["2025/05/05 20:58:44.813, 62.39 W, 60 W, 0 %"],
    "noheader_without_units": ["2025/05/05 20:58:44.813, 62.39, 0, 122"],
    "noheader_uuid": loops(3, 3, lambda k, g, t: f"{t}, GPU-{7 - g}, {50 + k} W, 9 %"),
    "no_timestamp_column": ["index, power.draw [W]", "0, 12 W"],
    "no_reading_column": ["timestamp, index, memory.used [MiB]", "2025/05/05 20:58:44.813, 0, 12 MiB"],
    "short_groups": ["timestamp, power.draw [W]"]
    + loops(2, 4, lambda k, g, t: f"{t}, {g} W") + [f"{STAMP.format(20)}, 1 W", f"{STAMP.format(21)}, 2 W",
                                                       f"{STAMP.format(21.001)}, 3 W", f"{STAMP.format(21.002)}, 4 W"]
    + [f"{STAMP.format(22)}, 1 W", f"{STAMP.format(23)}, 2 W"] + loops(2, 4, lambda k, g, t: f"{t}, {g} W", 30),
    "uuid_order": ["timestamp, uuid, power.draw"]
    + loops(3, 3, lambda k, g, t: f"{t}, GPU-{'cab'[g]}, {g}") + [f"{STAMP.format(40)}, , 3", "x, GPU-d, 4"],
    "constant_index_gpu_column": ["timestamp, gpu, index, memory.used, utilization.gpu, power.draw"]
    + loops(3, 4, lambda k, g, t: f"{t}, {g}, 0, 100, 10, 60"),
    "constant_index_bus": ["timestamp, pci.bus_id, index, power.draw"]
    + loops(2, 3, lambda k, g, t: f"{t}, 00000000:{'3A1'[g]}B:00.0, 0, 60"),
    "constant_index_nothing": ["timestamp, index, power.draw, name"] + [f"{STAMP.format(10 + k)}, 0, {g}, A100"
                                                                         for k in range(3) for g in range(2)],
    "bad_timestamps": ["timestamp, index, power.draw [W]", "2025/05/05 20:58:44.813, 0, 1 W", "noon, 1, 1 W",
                       "2025/13/05 20:58:44.813, 2, 1 W", ", 3, 1 W", "1989/12/31 23:59:59.000, 4, 1 W",
                       "2025-05-05T20:58:44Z, 5, 1 W", "2025/05/05 20:58:44.813+02:00, 6, 1 W", "1746471524, 7, 1 W"],
    "out_of_range": ["timestamp, index, power.draw [W], utilization.gpu [%], memory.used [MiB]",
                     "2025/05/05 20:58:44.813, 0, 10001 W, 0 %, 1 MiB", "2025/05/05 20:58:44.813, 1, 1 W, 101 %, 1 MiB",
                     "2025/05/05 20:58:44.813, 2, 1 W, 1 %, 10000001 MiB", "2025/05/05 20:58:44.813, 70000, 1 W, 1 %, 1 MiB",
                     "2025/05/05 20:58:44.813, -1, -1 W, 1 %, 1 MiB", "2025/05/05 20:58:44.813, x, 1 W, 1 %, 1 MiB",
                     "2025/05/05 20:58:44.813, 3, 1e3 W, 1 %, 1 MiB", "2025/05/05 20:58:44.813, 4, nan W, 1 %, 1 MiB"],
    "quoted_fields": ["timestamp, index, power.draw [W]", '"2025/05/05 20:58:44.813", "0", "1 W"',
                      '2025/05/05 20:58:44.813, 1, "2 W"', '"2025/05/05 20:58:44.813, 2, 1 W', '2025/05/05 20:58:44.813, 3'],
    "wrong_width": ["timestamp, index, power.draw [W]", "2025/05/05 20:58:44.813, 0, 1 W, 4",
                    "2025/05/05 20:58:44.813", "2025/05/05 20:58:44.813, 1, 1 W"],
    "empty": ["", "  "],
    "header_only": ["timestamp, power.draw [W]"],
    "other_columns": ["timestamp, clocks.sm [MHz], power.draw [W], temperature.gpu",
                      "2025/05/05 20:58:44.813, 1410 MHz, 1 W, 45", "2025/05/05 20:58:44.820, 1410 MHz, 2 W, 46"],
    "power_spellings": ["timestamp, index, power.draw.instant [W], power.draw.average [W]",
                        "2025/05/05 20:58:44.813, 0, 1 W, 2 W", "2025/05/05 20:58:44.813, 1, [N/A], 3 W"],
    "summer_time": ["timestamp, index, power.draw", "2025/03/30 02:30:00.000, 0, 1", "2025/10/26 02:30:00.000, 0, 1",
                    "2025/03/30 01:30:00.000, 0, 1", "2025/10/26 03:30:00.000, 0, 1"],
}


CHANGED = {"power_spellings"}  # the first power spelling a line gives (was: the first the header names)


@pytest.mark.parametrize("zone", list(ZONES))
@pytest.mark.parametrize("case", [case for case in HAND if case not in CHANGED])
def test_hand_made_lines(tmp_path, case, zone):
    compare(write(tmp_path / f"gpu-3_{case}.csv", HAND[case]), ZONES[zone])
    compare(write(tmp_path / f"gpu-3_{case}.csv", HAND[case], "\r\n", bom=True), ZONES[zone], host="box")
