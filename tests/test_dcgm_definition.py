"""DCGM (ingest/formats/gpu/dcgm.py, one Definition read by ingest/engine's Prometheus line shape):
each line's values or reason written out here by hand, which lines the SQL pass reads and which go
to the engine's line reader (a spy on prom_text.read_lines), and real scrapes read a second way
with prometheus_client's parser and a plain-Python pivot (not the code under test)."""
from __future__ import annotations

import gzip
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ingest.engine import prom_text
from ingest.engine.contract import FileRefused, ParseContext
from ingest.formats.gpu import dcgm
from ingest.pipeline import loader
from ingest.settings import limits
from tests import corpus
from tests.spied_stage import stage_spied

UTC = timezone.utc
T0 = datetime(2025, 11, 20, 10, 0, tzinfo=UTC)
MS = 1_763_632_800_000  # T0 in epoch milliseconds
COLUMNS = ("host", "gpu_index", "sampled_at", "gpu_uuid", "gpu_name", "power_w", "energy_mj", "gpu_util_pct",
           "mem_used_mib", "pod", "namespace")
SCRAPE = "nvidia_gpu/dcgm_exporter_scrape_L4_kops.prom"
NO_TIME = "its samples carry no timestamps: pass --at with the time of the scrape"


def sample(host, gpu, at=T0, uuid=None, name=None, power=None, energy=None, util=None, mem=None, pod=None, ns=None):
    return (host, gpu, at, uuid, name, power, energy, util, mem, pod, ns)


# (line, the path it takes: "sql", "reader" or None (skipped), the sample it starts (a tuple, at its
# first line), or the reason it is refused)
LINES = [
    ("# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).", None, None),
    (f'DCGM_FI_DEV_POWER_USAGE{{gpu="0",UUID="GPU-a",modelName="NVIDIA L4",Hostname="h1"}} 50.5 {MS}', "sql",
     sample("h1", 0, uuid="GPU-a", name="NVIDIA L4", power=50.5, energy=4742776, util=40.0, mem=1024.0, pod="p",
            ns="ml")),
    (f'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{gpu="0",UUID="GPU-a",Hostname="h1"}} 4742776 {MS}', "sql", None),
    (f'DCGM_FI_DEV_GPU_UTIL{{Hostname="h1",namespace="ml",pod="p",gpu="0"}} 40 {MS}', "sql", None),  # label order
    (f'DCGM_FI_DEV_FB_USED{{gpu="0",pod="",Hostname="h1"}} 1024 {MS}', "sql", None),  # an empty label is absent
    (f'DCGM_FI_DEV_SM_CLOCK{{gpu="0",Hostname="h1"}} 210 {MS}', None, None),  # a metric not read
    (f'DCGM_FI_DEV_POWER_USAGE{{gpu="0",Hostname="h1"}} 60 {MS}', "sql",
     "a second DCGM_FI_DEV_POWER_USAGE for GPU 0 at 2025-11-20T10:00:00+00:00: many scrapes in one file need "
     "sample timestamps"),
    (f'DCGM_FI_DEV_POWER_USAGE{{gpu="1",modelName="L4 \\"PCIe\\"",Hostname="h1"}} 70 {MS}', "reader",  # escapes
     sample("h1", 1, name='L4 "PCIe"', power=70.0)),
    (f'DCGM_FI_DEV_POWER_USAGE{{gpu="2",modelName="L4, PCIe"}} 30 {MS}', "reader",  # a comma; the file name's host
     sample("gpu-node-7", 2, name="L4, PCIe", power=30.0)),
    (f'  DCGM_FI_DEV_POWER_USAGE{{gpu="3",Hostname=" h2 "}} 31 {MS + 123}  ', "reader",  # blanks; milliseconds
     sample("h2", 3, at=T0 + timedelta(milliseconds=123), power=31.0)),
    (f'DCGM_FI_DEV_POWER_USAGE{{gpu="4"}} 1e2 {MS}', "sql", sample("gpu-node-7", 4, power=100.0, energy=1)),
    (f'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{gpu="4"}} 1.0 {MS}', "reader", None),  # a count written 1.0
    (f'DCGM_FI_DEV_POWER_USAGE{{gpu="5"}} 20 {MS}', "sql", "gpu_util_pct 140.0 is outside 0 to 100"),  # the sample's first line
    (f'DCGM_FI_DEV_GPU_UTIL{{gpu="5"}} 140 {MS}', "sql", None),
    (f'DCGM_FI_DEV_POWER_USAGE{{gpu="6"}} NaN {MS}', "reader", "DCGM_FI_DEV_POWER_USAGE must be a finite number, got nan"),
    (f'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{gpu="6"}} 1.5 {MS}', "reader",
     "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION must be a whole number, got 1.5"),
    (f'DCGM_FI_DEV_POWER_USAGE{{UUID="GPU-z"}} 5 {MS}', "reader", "no gpu label"),
    (f'DCGM_FI_DEV_POWER_USAGE{{gpu="x"}} 5 {MS}', "reader", "gpu must be a number, got 'x'"),
    ('DCGM_FI_DEV_POWER_USAGE{gpu="7"} 5 99999999999999', "reader",
     f"the sample timestamp {99999999999999 / 1000!r} is outside 1990-2099"),
    (f'DCGM_FI_DEV_GPU_UTIL{{gpu="70000"}} 5 {MS}', "sql", "gpu_index 70000 is outside 0 to 65535"),
    (f'DCGM_FI_DEV_POWER_USAGE{{gpu="9"}} -3 {MS}', "sql", "power_w -3.0 is outside 0 to 10000"),
    (f'DCGM_FI_DEV_POWER_USAGE{{gpu="10"}} 1e16 {MS}', "reader", "DCGM_FI_DEV_POWER_USAGE 1e+16 is too large (at most 1e+15)"),
    ("", None, None),
    (f'DCGM_FI_DEV_POWER_USAGE{{gpu="11"}} 5 {MS}\r', "sql", sample("gpu-node-7", 11, power=5.0)),  # CRLF: a line ends before \r\n
]


def stage(path: Path, ctx: ParseContext) -> tuple[dict, list, list[int], object]:
    """Stage `path`: its samples by first line, its rejects, the lines the reader read, and the Staged."""
    rows, rejects, by_reader, staged = stage_spied(dcgm, prom_text, ", ".join(COLUMNS), path, ctx)
    return rows, rejects, by_reader, staged


def test_each_line_takes_its_path_with_its_values(tmp_path):
    path = tmp_path / "gpu-node-7_x.prom"
    path.write_text("\n".join(text for text, _, _ in LINES) + "\n", newline="")
    rows, rejects, by_reader, staged = stage(path, ParseContext(str(path), UTC))
    numbered = [(n + 1, way, want) for n, (_, way, want) in enumerate(LINES)]
    assert rows == {line: want for line, _, want in numbered if isinstance(want, tuple)}
    assert rejects == [(line, want) for line, _, want in numbered if isinstance(want, str)]
    assert sorted(by_reader) == [line for line, way, _ in numbered if way == "reader"]
    assert staged.accepted == len(rows) == 6 and staged.totals["gpus"] == 6


def test_the_time_is_the_samples_else_at_else_the_file_fails(tmp_path, warehouse):
    lines = [f'DCGM_FI_DEV_POWER_USAGE{{gpu="0"}} 5 {MS}', 'DCGM_FI_DEV_POWER_USAGE{gpu="1"} 6']
    path = tmp_path / "n1_x.prom"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(FileRefused, match=NO_TIME):  # no timestamp and no --at: SQL hands it to the reader, which says so
        stage(path, ParseContext(str(path), UTC))
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    rows, rejects, by_reader, _ = stage(path, ParseContext(str(path), UTC, None, at))
    assert rows == {1: sample("n1", 0, power=5.0), 2: sample("n1", 1, at=at, power=6.0)} and by_reader == []
    failed = loader.ingest_file(path)  # the loader's word: the file fails, nothing recorded
    assert failed.status == "failed" and failed.error.endswith(NO_TIME)


def test_host_from_the_option_the_label_or_the_file_name(tmp_path):
    lines = [f'DCGM_FI_DEV_POWER_USAGE{{gpu="0",Hostname="h1"}} 5 {MS}', f'DCGM_FI_DEV_POWER_USAGE{{gpu="0",Hostname=""}} 5 {MS}',
             f'DCGM_FI_DEV_POWER_USAGE{{gpu="0"}} 5 {MS + 1000}']
    path = tmp_path / "gpu-node-3_2026-01.prom.gz"
    path.write_bytes(gzip.compress(("\ufeff" + "\n".join(lines) + "\n").encode()))  # gzip, and a BOM
    rows, rejects, by_reader, _ = stage(path, ParseContext(str(path), UTC))
    assert {line: row[0] for line, row in rows.items()} == {1: "h1", 2: "gpu-node-3", 3: "gpu-node-3"}
    assert (rejects, by_reader) == ([], [])
    rows, rejects, _, _ = stage(path, ParseContext(str(path), UTC, "box"))  # --host: one key for the first two
    assert {line: row[0] for line, row in rows.items()} == {1: "box", 3: "box"}
    assert rejects == [(2, "a second DCGM_FI_DEV_POWER_USAGE for GPU 0 at 2025-11-20T10:00:00+00:00: many scrapes "
                           "in one file need sample timestamps")]


def test_an_over_long_line_is_refused_and_the_rest_read(tmp_path):
    path = tmp_path / "n1.prom"
    long = "DCGM_FI_DEV_POWER_USAGE{" + "x" * (limits.current().max_line_bytes + 10)
    path.write_text(f'{long}\nDCGM_FI_DEV_POWER_USAGE{{gpu="0"}} 5 {MS}\n')
    rows, rejects, by_reader, _ = stage(path, ParseContext(str(path), UTC))
    assert rows == {2: sample("n1", 0, power=5.0)} and rejects == [(1, "too long")] and by_reader == []


def expected_samples(text: str, ctx_at: datetime | None, file_host: str) -> dict[int, tuple]:
    """The samples of `text` read with prometheus_client and plain Python, by first line (no rejects expected)."""
    metrics = {"DCGM_FI_DEV_POWER_USAGE": "power_w", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "energy_mj",
               "DCGM_FI_DEV_GPU_UTIL": "gpu_util_pct", "DCGM_FI_DEV_FB_USED": "mem_used_mib"}
    labels = {"UUID": "gpu_uuid", "modelName": "gpu_name", "pod": "pod", "namespace": "namespace"}
    found: dict[tuple, dict] = {}
    for number, line in enumerate(text.split("\n"), 1):
        if not line.startswith(tuple(metrics)):
            continue
        (family,) = text_string_to_metric_families(line)
        (s,) = family.samples
        at = datetime.fromtimestamp(float(s.timestamp), UTC) if s.timestamp is not None else ctx_at
        key = (s.labels.get("Hostname") or file_host, int(s.labels["gpu"]), at)
        record = found.setdefault(key, {"line": number})
        record[metrics[s.name]] = int(s.value) if s.name.endswith("ENERGY_CONSUMPTION") else float(s.value)
        for label, column in labels.items():
            if s.labels.get(label):
                record.setdefault(column, s.labels[label])
    return {r["line"]: (*key, *(r.get(c) for c in COLUMNS[3:])) for key, r in found.items()}


def scrapes(scrape: str, count: int, gpus: int) -> str:
    """`count` scrapes a minute apart of `gpus` GPUs, each sample stamped (ms), the energy counter rising."""
    out = []
    for k in range(count):
        for gpu in range(gpus):
            for line in scrape.splitlines():
                if line.startswith("DCGM_FI_"):
                    line = line.replace('gpu="0"', f'gpu="{gpu}"').replace('Hostname="', 'pod="p-0",namespace="ml",Hostname="')
                    if line.startswith("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"):
                        line = line.rsplit(" ", 1)[0] + f" {4_742_776 + 1_200_000 * k}"
                    line += f" {MS + 60_000 * k}"
                out.append(line)
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def scrape() -> Path:
    root = corpus.collected()
    if root is None:
        corpus.absent(f"The real sample files could not be had. {corpus.how_to_get()}")
    return corpus.require(root, SCRAPE)


def test_the_real_scrape_loads_as_prometheus_client_reads_it_all_in_sql(scrape, tmp_path):
    at = datetime(2025, 11, 20, 10, 0, tzinfo=UTC)
    rows, rejects, by_reader, _ = stage(scrape, ParseContext(str(scrape), UTC, None, at))
    want = expected_samples(scrape.read_text(), at, "x")
    assert rows == want and len(rows) == 1 and rejects == [] and by_reader == []
    assert rows[15][4:9] == ("NVIDIA L4", 16.365, 4742776, 0.0, 0.0)  # the file's own figures, read by eye
    with pytest.raises(FileRefused, match=NO_TIME):
        stage(scrape, ParseContext(str(scrape), UTC))
    many = tmp_path / "many.prom"  # 3 scrapes of 4 GPUs, stamped
    many.write_text(scrapes(scrape.read_text(), 3, 4))
    rows, rejects, by_reader, staged = stage(many, ParseContext(str(many), UTC))
    assert rows == expected_samples(many.read_text(), None, "many") and len(rows) == 12
    assert (rejects, by_reader, staged.totals["gpus"], staged.totals["samples"]) == ([], [], 4, 12)


def test_sniff_reads_prometheus_text_naming_a_metric():
    assert dcgm.sniff("x.prom", '# HELP DCGM_FI_DEV_GPU_UTIL x\nDCGM_FI_DEV_GPU_UTIL{gpu="0"} 5\n')
    assert not dcgm.sniff("x.prom", 'DCGM_FI_DEV_SM_CLOCK{gpu="0"} 210\n')
    assert not dcgm.sniff("x.csv", "timestamp,gpu_index,power_w\n")
