"""nvidia-smi logs (ingest/formats/gpu/nvidia_smi.py, one Definition read by ingest/engine): each
line's values or reason written out here by hand, which lines the SQL pass reads and which go to
the engine's per-line reader (a spy on reader.read_lines), the GPU identity rules (index column,
uuid order, sample groups), headerless files and files refused whole, and the real log read a
second way with the csv module, float and datetime (not the code under test)."""
from __future__ import annotations

import csv
import gzip
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from ingest.engine import reader, staging
from ingest.engine.contract import ParseContext
from ingest.formats.gpu import nvidia_smi
from ingest.pipeline import loader
from ingest.settings import limits
from tests.spied_stage import stage_spied

UTC = timezone.utc
NVIDIA_SMI = "nvidia_gpu/powertracesim_burn_nvidia-smi_8gpu_first137lines.csv"
HEADER = "timestamp, index, uuid, name, power.draw [W], utilization.gpu [%], memory.used [MiB]"
T = datetime(2025, 5, 5, 20, 58, 44, 813000, tzinfo=UTC)  # 2025/05/05 20:58:44.813 read in UTC (no --tz)
S = "2025/05/05 20:58:44.813"
# (line after the header, path, expected (host, gpu_index, sampled_at, gpu_uuid, gpu_name, power_w,
# gpu_util_pct, mem_used_mib) or the reason it is refused)
LINES = [
    (f"{S}, 0, GPU-a, NVIDIA A100, 62.39 W, 45 %, 1024 MiB", "sql",
     ("node-7", 0, T, "GPU-a", "NVIDIA A100", 62.39, 45.0, 1024.0)),
    (f"{S}, 1, GPU-b, NVIDIA A100, [N/A], [Not Supported], N/A", "sql",  # absent markers: NULL
     ("node-7", 1, T, "GPU-b", "NVIDIA A100", None, None, None)),
    (f"{S}, 2, GPU-c, [N/A], 62 W, 45 %, 1024 MiB", "sql", ("node-7", 2, T, "GPU-c", None, 62.0, 45.0, 1024.0)),
    ("2025-05-05T20:58:45+02:00, 3, GPU-d, A100, 1 W, 2 %, 3 MiB", "sql",  # ISO with an offset
     ("node-7", 3, datetime(2025, 5, 5, 18, 58, 45, tzinfo=UTC), "GPU-d", "A100", 1.0, 2.0, 3.0)),
    (f"{S}, 4, GPU-e, A100, 62.5W, 45%, 1024MiB", "sql", ("node-7", 4, T, "GPU-e", "A100", 62.5, 45.0, 1024.0)),
    (f"{S}, 5, GPU-f, A100, 62.5, 45, 1024", "sql", ("node-7", 5, T, "GPU-f", "A100", 62.5, 45.0, 1024.0)),  # nounits
    (f'"{S}", 6, GPU-g,"A100, PCIe", 7 W, 8 %, 9 MiB', "reader",  # quoted, a comma inside
     ("node-7", 6, T, "GPU-g", "A100, PCIe", 7.0, 8.0, 9.0)),
    ("1746478724, 7, GPU-h, A100, 1 W, 2 %, 3 MiB", "reader",  # epoch seconds
     ("node-7", 7, datetime(2025, 5, 5, 20, 58, 44, tzinfo=UTC), "GPU-h", "A100", 1.0, 2.0, 3.0)),
    (f"{S}, 8, GPU-i, A100, abc W, 1 %, 1 MiB", "reader", "power.draw must be a number, got 'abc'"),
    (f"{S}, 9, GPU-i, A100, 10001 W, 1 %, 1 MiB", "reader", "power.draw 10001.0 is outside 0 to 10000"),
    (f"{S}, 9, GPU-i, A100, 1 W, 101 %, 1 MiB", "reader", "utilization.gpu 101.0 is outside 0 to 100"),
    (f"{S}, 70000, GPU-i, A100, 1 W, 1 %, 1 MiB", "reader", "index 70000 is outside 0 to 65535"),
    (f"{S}, -1, GPU-i, A100, 1 W, 1 %, 1 MiB", "reader", "index -1 is outside 0 to 65535"),
    ("2025/13/05 20:58:44.813, 9, GPU-i, A100, 1 W, 1 %, 1 MiB", "reader",
     "timestamp '2025/13/05 20:58:44.813' is not an ISO-8601 timestamp or epoch seconds"),
    ("1989/12/31 23:59:59.000, 9, GPU-i, A100, 1 W, 1 %, 1 MiB", "reader",
     "timestamp '1989/12/31 23:59:59.000' is outside 1990-2099"),
    (", 10, GPU-j, A100, 1 W, 1 %, 1 MiB", "sql", "timestamp is missing"),
    ("[N/A], 10, GPU-j, A100, 1 W, 1 %, 1 MiB", "sql", "timestamp is missing"),  # absent, as any value
    (f"{S}, , GPU-k, A100, 1 W, 1 %, 1 MiB", "sql", "gpu_index is missing"),
    (f"{S}, [N/A], GPU-k, A100, 1 W, 1 %, 1 MiB", "sql", "gpu_index is missing"),
    (f"{S}, 11, GPU-l, A100, 1 W", "sql", "expected 7 fields, got 5"),
    (f'"{S}", 11, GPU-l, A100, 1 W', "reader", "expected 7 fields, got 5"),
    (f'{S}, 11, GPU-l, "A100, PCIe", 1 W, 1 %, 1 MiB', "reader", "expected 7 fields, got 8"),  # csv: ` "` is no quote
    ("noon, x, GPU-l, A100, abc W, 140 %, 1 MiB", "reader",  # several bad values: the timestamp's first
     "timestamp 'noon' is not an ISO-8601 timestamp or epoch seconds"),
    (f" {S} ,12,GPU-m,A100,1 W,1 %,1 MiB", "sql", ("node-7", 12, T, "GPU-m", "A100", 1.0, 1.0, 1.0)),
    (f"{S}, 13, GPU-n, A100, 1e3 W, 1 %, 1 MiB", "reader",  # an exponent: the reader's
     ("node-7", 13, T, "GPU-n", "A100", 1000.0, 1.0, 1.0)),
    ("", None, None), ("   ", None, None),  # blank lines: skipped
]


def stage(path: Path, ctx: ParseContext) -> tuple[dict, list, list[int], object]:
    """Stage `path`: its samples by line, its rejects, the lines the reader read, and the Staged."""
    rows, rejects, by_reader, staged = stage_spied(nvidia_smi, reader, "host, gpu_index, sampled_at, gpu_uuid, gpu_name, power_w, gpu_util_pct, mem_used_mib", path, ctx)
    return rows, rejects, sorted(by_reader), staged


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def test_each_line_takes_its_path_with_its_values(tmp_path):
    path = write(tmp_path / "node-7_x.csv", [HEADER] + [text for text, _, _ in LINES])
    rows, rejects, by_reader, staged = stage(path, ParseContext(str(path), UTC))
    numbered = [(n + 2, way, want) for n, (_, way, want) in enumerate(LINES)]
    assert {line: tuple(row) for line, row in rows.items()} == {
        line: want for line, _, want in numbered if isinstance(want, tuple)}
    assert rejects == [(line, want) for line, _, want in numbered if isinstance(want, str)]
    assert by_reader == [line for line, way, _ in numbered if way == "reader"]
    assert staged.accepted == len(rows) == 10 and staged.totals["samples"] == 10 and staged.totals["gpus"] == 10


def test_power_is_the_first_spelling_a_line_gives(tmp_path):
    path = write(tmp_path / "n1_p.csv", ["timestamp, index, power.draw.instant [W], power.draw.average [W]",
                                        f"{S}, 0, 1 W, 2 W", f"{S}, 1, [N/A], 3 W", f"{S}, 2, x W, 4 W"])
    rows, rejects, by_reader, _ = stage(path, ParseContext(str(path), UTC))
    # Field names: power.draw, power.draw.average, power.draw.instant: the first a line gives is read
    assert {line: row[5] for line, row in rows.items()} == {2: 2.0, 3: 3.0, 4: 4.0}
    assert rejects == [] and by_reader == [4]  # `x W` is no number SQL reads: the reader's, which reads 4 W


def test_host_from_the_option_the_column_or_the_file_name(tmp_path):
    lines = ["hostname, timestamp, index, power.draw [W]", f"n1, {S}, 0, 1 W", f", {S}, 1, 1 W"]
    path = tmp_path / "gpu-node-3_2026-01.csv.gz"
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    rows, _, by_reader, _ = stage(path, ParseContext(str(path), UTC))
    assert {line: row[0] for line, row in rows.items()} == {2: "n1", 3: "gpu-node-3"} and by_reader == []
    rows, _, _, _ = stage(path, ParseContext(str(path), UTC, "box"))
    assert {line: row[0] for line, row in rows.items()} == {2: "box", 3: "box"}


def test_naive_times_are_read_in_the_zone_given(tmp_path):
    stamps = ["2025/07/01 12:00:00.000", "2025/10/26 02:30:00.000", "2025/03/30 02:30:00.000", "2025/07/01 12:00:00.000+00:00"]
    path = write(tmp_path / "n1_berlin.csv", ["timestamp, index, power.draw [W]"]
                 + [f"{stamp}, {n}, 5 W" for n, stamp in enumerate(stamps)])
    berlin = ZoneInfo("Europe/Berlin")
    rows, rejects, by_reader, _ = stage(path, ParseContext(str(path), berlin))
    # in SQL, but within 3 hours of a change of offset (02:30 twice in October, never in March): the reader's
    assert rejects == [] and by_reader == [3, 4]
    want = [datetime.fromisoformat(s.replace("/", "-")) for s in stamps]  # Python's rule: fold=0
    want = [(w if w.tzinfo else w.replace(tzinfo=berlin)).astimezone(UTC) for w in want]
    assert {line: row[2] for line, row in rows.items()} == dict(zip(range(2, 6), want))
    assert want[0] == datetime(2025, 7, 1, 10, tzinfo=UTC)


def loop(at: datetime, gpus: int, first_index: int = 0) -> list[str]:
    """One nvidia-smi loop: a row per GPU, each stamped 3 ms after the one before."""
    return [f"{(at + timedelta(milliseconds=3 * g)):%Y/%m/%d %H:%M:%S.%f}"[:-3] + f", {10 + g + first_index} W"
            for g in range(gpus)]


def test_without_index_or_uuid_the_gpu_is_the_rows_place_in_its_sample_group(tmp_path):
    at = datetime(2025, 5, 5, 20, 0)
    lines = ["timestamp, power.draw [W]"]
    lines += loop(at, 4) + loop(at + timedelta(seconds=1), 4)
    lines += loop(at + timedelta(seconds=2), 1) + loop(at + timedelta(seconds=2.5), 3, 1)  # 1 + 3: one loop
    lines += loop(at + timedelta(seconds=3), 2) + loop(at + timedelta(seconds=4), 4)  # 2 alone: refused
    path = write(tmp_path / "n1_g.csv", lines)
    rows, rejects, by_reader, staged = stage(path, ParseContext(str(path), UTC))
    assert by_reader == []
    want_index = {line: (line - 2) % 4 for line in range(2, 14)} | {line: line - 16 for line in range(16, 20)}
    assert {line: row[1] for line, row in rows.items()} == want_index
    reason = ("its sample group has 2 rows where this file's groups have 4 (one per GPU): without an index or uuid "
              "column, which GPU each row is cannot be told")
    assert rejects == [(14, reason), (15, reason)]
    assert staged.totals["gpus"] == 4


def test_uuids_give_the_index_in_their_order_of_first_appearance(tmp_path):
    path = write(tmp_path / "n1_u.csv", ["timestamp, uuid, power.draw"]
                 + [f"{S}, GPU-c, abc", f"{S}, GPU-a, 1", f"{S}, GPU-b, 2", "2025/05/05 20:58:45.813, GPU-c, 3",
                    "2025/05/05 20:58:45.813, GPU-b, 4"])
    rows, rejects, by_reader, _ = stage(path, ParseContext(str(path), UTC))
    # GPU-c first appears on a refused line: it still counts as the first
    assert {line: (row[3], row[1]) for line, row in rows.items()} == {
        3: ("GPU-a", 1), 4: ("GPU-b", 2), 5: ("GPU-c", 0), 6: ("GPU-b", 2)}
    assert rejects == [(2, "power.draw must be a number, got 'abc'")] and by_reader == [2]


@pytest.mark.parametrize("lines, reject", [
    (["2025/05/05 20:58:44.813, 62.39 W, 60 W, 0 %"],
     (1, "without a header, 2 columns are in W: which is power.draw cannot be told (log with the header: drop noheader)")),
    (["2025/05/05 20:58:44.813, 62.39, 0, 122"],
     (1, "without a header or units the columns cannot be told apart (log with the header: drop noheader)")),
    (["", "index, power.draw [W]", "0, 12 W"], (2, "the header has no timestamp column (add timestamp to --query-gpu)")),
    (["timestamp, index, memory.used [MiB]", f"{S}, 0, 12 MiB"],
     (1, "the header has neither power.draw nor utilization.gpu")),
    (["", "  "], (0, "the file is empty")),
])
def test_a_file_refused_whole(tmp_path, lines, reject):
    path = write(tmp_path / "n1.csv", lines)
    rows, rejects, by_reader, staged = stage(path, ParseContext(str(path), UTC))
    assert (rows, rejects, by_reader, staged.accepted) == ({}, [reject], [], 0)


def test_a_headerless_file_is_told_by_shape_and_unit(tmp_path):
    lines = [f"{S}, GPU-x, 7 %, 62.5 W, A100", f"2025/05/05 20:58:44.816, GPU-y, 8 %, 63.5 W, A100"]
    path = write(tmp_path / "n1_bare.csv", lines)
    rows, rejects, by_reader, _ = stage(path, ParseContext(str(path), UTC))
    assert rejects == [] and by_reader == []
    assert {line: (row[1], row[3], row[4], row[5], row[6]) for line, row in rows.items()} == {
        1: (0, "GPU-x", None, 62.5, 7.0), 2: (1, "GPU-y", None, 63.5, 8.0)}  # an unrecognised column is ignored


def test_a_too_long_first_line_is_refused_and_the_next_one_is_the_header(tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "_current", limits.current())
    limits.configure(limits.Limits(max_line_bytes=100))
    path = write(tmp_path / "node-1_long.csv", ["x" * 300, "timestamp, index, power.draw [W]", f"{S}, 0, 62.5 W"])
    ctx = ParseContext(str(path), UTC)
    con = staging.open_stage()
    try:
        staged = nvidia_smi.stage(staging.Source.of(path, str(path)), con, ctx)
        loader._name_too_long_lines(con)
        assert staged.accepted == 1
        assert con.execute("SELECT line, reason FROM rejects").fetchall() == [
            (1, "the line is 300 bytes, longer than the 100 allowed ([ingest] max_line_bytes); not read")]
    finally:
        con.close()


def _groups(stamps: list[datetime]) -> list[list[int]]:
    """Rows less than 0.1 s apart, in file order, as groups of row positions."""
    groups: list[list[int]] = []
    for n, stamp in enumerate(stamps):
        if not groups or not timedelta(0) <= stamp - stamps[n - 1] <= timedelta(seconds=0.1):
            groups.append([])
        groups[-1].append(n)
    return groups


@pytest.mark.parametrize("zone", ["Europe/Paris", "UTC"])
def test_the_real_log_loads_as_the_csv_module_reads_it_all_in_sql(formats_dir, tmp_path, zone):
    source = formats_dir / NVIDIA_SMI
    tz = ZoneInfo(zone)
    with source.open(newline="") as handle:
        table = list(csv.reader(handle, skipinitialspace=True))
    assert table[0] == ["timestamp", "power.draw [W]", "utilization.gpu [%]", "memory.used [MiB]"]
    stamps = [datetime.strptime(r[0], "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=tz).astimezone(UTC) for r in table[1:]]
    groups = _groups(stamps)
    assert [len(g) for g in groups].count(8) == 16 and [len(g) for g in groups if len(g) != 8] == [1, 7]
    index = {}
    for group in groups:  # 8 rows: GPUs 0-7 in order; the 1 + 7 rows: one loop split in two
        for place, row in enumerate(group):
            index[row] = place if len(group) == 8 else (0 if len(group) == 1 else place + 1)
    want = {n + 2: ("powertracesim", index[n], stamps[n], None, None, float(r[1].removesuffix(" W")),
                    float(r[2].removesuffix(" %")), float(r[3].removesuffix(" MiB"))) for n, r in enumerate(table[1:])}
    for name, lines in {"as_logged": source.read_text().splitlines(),
                        "noheader": source.read_text().splitlines()[1:]}.items():
        path = write(tmp_path / source.name, lines)
        rows, rejects, by_reader, staged = stage(path, ParseContext(str(path), tz))
        shift = 1 if name == "noheader" else 0
        assert rejects == [] and by_reader == []
        assert {line: tuple(row) for line, row in rows.items()} == {line - shift: w for line, w in want.items()}
        assert (staged.totals["samples"], staged.totals["gpus"]) == (136, 8)
        assert staged.totals["first_ts"] == min(stamps).isoformat().replace("+00:00", "Z")


def test_sniffs_a_header_with_units_and_a_headerless_first_line():
    assert nvidia_smi.sniff("x.csv", "timestamp, power.draw [W], utilization.gpu [%]\n")
    assert nvidia_smi.sniff("x.csv", "\ufeff2025/05/05 20:58:44.813, 62.39 W, 0 %\n")
    assert not nvidia_smi.sniff("x.csv", "timestamp,gpu_index,power_w\n")
