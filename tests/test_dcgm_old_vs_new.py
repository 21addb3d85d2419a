"""TEMPORARY: the DCGM definition (ingest/formats/gpu/dcgm.py) against the old hand-written module
(tests/_old_dcgm.py, main's e7a3679 copy): the same rows, rejects (line, reason, text), records
accepted, totals, and the same whole-file refusal, on the real scrape, 150 seeded random draws
and hand-made lines for every rule. The listed wording and value changes are mapped (`_now`)."""
from __future__ import annotations

import gzip
import random
import re
from datetime import datetime, timezone
from pathlib import Path

import pytest

from ingest.engine import staging
from ingest.engine.contract import BadValue, ParseContext
from ingest.formats.gpu import dcgm
from ingest.settings import limits
from tests import _old_dcgm as old
from tests import corpus

UTC = timezone.utc
AT = datetime(2025, 11, 20, 10, 0, tzinfo=UTC)
DCGM_FILE = "nvidia_gpu/dcgm_exporter_scrape_L4_kops.prom"
TEXTS = ("gpu_uuid", "gpu_name", "pod", "namespace")


def _now(reason: str) -> str:
    """An old reason in the new wording (the changes listed in the report)."""
    reason = re.sub(r"^the gpu label ", "gpu ", reason)
    reason = re.sub(r"^(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION \d+ is too large) \(at most 1e\+15\)$",
                    r"\1 (at most 1,000,000,000,000,000)", reason)  # a whole number: a count's words
    return re.sub(r"^\S+ has no gpu label$", "no gpu label", reason)


def _stage(module, path: Path, ctx: ParseContext):
    con = staging.open_stage()
    try:
        try:
            staged = module.stage(staging.Source.of(path, str(path)), con, ctx)
        except BadValue as refused:
            return ("refused", str(refused))
        except staging.NotText as problem:  # not UTF-8: the loader's, before any line is read
            return ("not text", str(problem))
        staging.keep_last(con, "gpu_samples")
        rows = con.execute("SELECT * FROM gpu_samples ORDER BY ALL").fetchall()
        rejects = con.execute("SELECT line, reason, raw FROM rejects ORDER BY ALL").fetchall()
        return rows, rejects, staged.accepted, staged.totals
    finally:
        con.close()


def compare(path: Path, ctx: ParseContext, old_path: Path | None = None) -> None:
    """`old_path`: the input the old module reads for the same result (labels with blanks stripped)."""
    was, now = _stage(old, old_path or path, ctx), _stage(dcgm, path, ctx)
    if was[0] not in ("refused", "not text"):
        rows, rejects, accepted, totals = was
        was = (rows, sorted((line, _now(reason), raw) for line, reason, raw in rejects), accepted, totals)
    assert now == was, path


def _ctx(path: Path, at=None, host=None) -> ParseContext:
    return ParseContext(str(path), UTC, host, at)


@pytest.fixture(scope="module")
def scrape() -> str:
    root = corpus.collected()
    if root is None:
        pytest.skip("no corpus")
    return corpus.require(root, DCGM_FILE).read_text()


def scrapes(scrape: str, count: int, gpus: int) -> list[str]:
    out = []
    for k in range(count):
        for gpu in range(gpus):
            for line in scrape.splitlines():
                if line.startswith("DCGM_FI_"):
                    line = line.replace('gpu="0"', f'gpu="{gpu}"').replace('Hostname="', 'pod="p-0",namespace="ml",Hostname="')
                    if line.startswith("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"):
                        line = line.rsplit(" ", 1)[0] + f" {4_742_776 + 1_200_000 * k}"
                    line += f" {1_763_632_800_000 + 60_000 * k}"
                out.append(line)
    return out


def test_real_scrape(scrape, tmp_path):
    root = corpus.collected()
    path = corpus.require(root, DCGM_FILE)
    for ctx in (_ctx(path, AT), _ctx(path), _ctx(path, AT, "box")):
        compare(path, ctx)


HOSTILE = ["", " ", "NaN", "nan", "inf", "-Infinity", "1e308", "1e-320", "6e25", "1e12", "١٢٣", "1_000", "0x10",
           " 12 ", "12\x10", "\x00", "-0", "+1", "1.", ".5", "1e", '"', "'", ",", "\\", "\u202e", "💸", "x" * 300,
           '\\"', 'a\\nb', "-3", "1.5", "70000", "140", "1e16"]


def _break(lines: list[str], rnd: random.Random) -> list[str]:
    lines = list(lines)
    for _ in range(rnd.randint(0, 6)):
        spot = rnd.randrange(len(lines))
        line = lines[spot]
        action = rnd.choice(["field", "field", "value", "ts", "label", "truncate", "repeat", "drop", "junk",
                             "overlong", "blank", "crlf", "space"])
        if action == "field" and "," in line:
            fields = line.split(",")
            fields[rnd.randrange(len(fields))] = rnd.choice(HOSTILE)
            lines[spot] = ",".join(fields)
        elif action == "value" and "} " in line:
            head, tail = line.rsplit("} ", 1)
            parts = tail.split(" ")
            parts[0] = rnd.choice(HOSTILE)
            lines[spot] = head + "} " + " ".join(parts)
        elif action == "ts" and "} " in line:
            lines[spot] = line.split("} ")[0] + "} " + line.rsplit("} ", 1)[1].split(" ")[0] + " " + rnd.choice(
                ["", "99999999999999", "1763632800123", "0", "abc", "1763632860000", "-5"])
        elif action == "label" and 'gpu="' in line:
            lines[spot] = line.replace('gpu="0"', rnd.choice(['gpu="x"', 'gpu=""', 'gpu="70000"', 'gpu="-1"', "", 'gpu=" 1"',
                                                             'gpu="1",gpu="2"', 'gpu="99999999999999999999"']))
            lines[spot] = lines[spot].replace('modelName="NVIDIA L4"', rnd.choice(['modelName="a\\"b"', 'modelName="L4,UUID="',
                                                                                 'modelName=""', 'modelName="L\\\\4"']))
        elif action == "truncate":
            lines[spot] = line[:rnd.randint(0, len(line))]
        elif action == "repeat":
            lines.insert(spot, line)
        elif action == "drop" and len(lines) > 2:
            del lines[spot]
        elif action == "junk":
            lines.insert(spot, "".join(chr(rnd.randint(32, 0x3000)) for _ in range(rnd.randint(0, 40))))
        elif action == "overlong":
            lines.insert(spot, "DCGM_FI_DEV_POWER_USAGE" + "z" * (limits.current().max_line_bytes + 10))
        elif action == "blank":
            lines.insert(spot, rnd.choice(["", "  ", "\t"]))
        elif action == "crlf":
            lines[spot] = line + "\r"
        elif action == "space":
            lines[spot] = rnd.choice(["  ", "\t", "\u3000"]) + line + rnd.choice(["", " ", "  "])
    return lines


def _write(path: Path, lines: list[str], rnd: random.Random) -> Path:
    encoding = rnd.choice(["utf-8", "utf-8", "utf-8-sig", "latin-1"])
    data = ("\n".join(lines) + "\n").encode(encoding, errors="replace")
    if rnd.random() < 0.3:
        path = path.with_name(path.name + ".gz")
        data = gzip.compress(data)
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("seed", range(150))
def test_random_draws(scrape, tmp_path, seed):
    rnd = random.Random(seed)
    stamped = rnd.random() < 0.7
    base = scrapes(scrape, rnd.randint(1, 3), rnd.randint(1, 3)) if stamped else scrape.splitlines()
    if not stamped and rnd.random() < 0.5:  # one scrape of many GPUs without timestamps
        base = [line.rsplit(" ", 1)[0] for line in scrapes(scrape, 1, 3)]
        base = [line if line.startswith("DCGM_FI_") else line for line in base]
    name = rnd.choice(["gpu-node-4_x.prom", "scrape.prom", "node.metrics.txt"])
    path = _write(tmp_path / name, _break(base, rnd), rnd)
    compare(path, _ctx(path, rnd.choice([None, AT]), rnd.choice([None, None, "box"])))


LINE = 'DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-a",modelName="L4",Hostname="h1"} 50.5 1763632800000'
HAND = {
    "plain": [LINE],
    "label_order": ['DCGM_FI_DEV_POWER_USAGE{Hostname="h1",modelName="L4",UUID="GPU-a",gpu="0"} 50.5 1763632800000'],
    "escaped": ['DCGM_FI_DEV_POWER_USAGE{gpu="0",modelName="a\\"b\\\\c\\nd",Hostname="h1"} 5 1763632800000'],
    "comma_in_label": ['DCGM_FI_DEV_POWER_USAGE{gpu="0",modelName="L4, PCIe",Hostname="h1"} 5 1763632800000'],
    "no_gpu": ['DCGM_FI_DEV_POWER_USAGE{UUID="GPU-a"} 5 1763632800000', 'DCGM_FI_DEV_GPU_UTIL{gpu=""} 5 1763632800000'],
    "bad_gpu": ['DCGM_FI_DEV_POWER_USAGE{gpu="x"} 5 1763632800000', 'DCGM_FI_DEV_POWER_USAGE{gpu="1.5"} 5 1763632800000',
                'DCGM_FI_DEV_POWER_USAGE{gpu="70000"} 5 1763632800000', 'DCGM_FI_DEV_POWER_USAGE{gpu="-1"} 5 1763632800000'],
    "duplicate": [LINE, LINE.replace("50.5", "60"), LINE.replace("POWER_USAGE", "GPU_UTIL")],
    "duplicate_label": ['DCGM_FI_DEV_POWER_USAGE{gpu="0",gpu="1"} 5 1763632800000'],
    "timestamps": [LINE, LINE.replace("1763632800000", "1763632860123"), LINE.replace(" 1763632800000", "")],
    "bad_ts": [LINE.replace("1763632800000", "99999999999999"), LINE.replace("1763632800000", "0"),
               LINE.replace("1763632800000", "abc")],
    "no_ts": [LINE.replace(" 1763632800000", "")],
    "energy": [LINE.replace("POWER_USAGE", "TOTAL_ENERGY_CONSUMPTION").replace("50.5", v) for v in
               ("4742776", "1.5", "1e3", "-3", "1.0", "99999999999999999999")] ,
    "range": [LINE.replace("POWER_USAGE", "GPU_UTIL").replace("50.5", "140"), LINE.replace("50.5", "1e16"),
              LINE.replace("50.5", "-1").replace('gpu="0"', 'gpu="1"'), LINE.replace("50.5", "NaN"),
              LINE.replace("50.5", "+Inf"), LINE.replace('gpu="0"', 'gpu="70000"')],
    "comments": ["# HELP DCGM_FI_DEV_POWER_USAGE Power", "# TYPE DCGM_FI_DEV_POWER_USAGE gauge", LINE,
                 'DCGM_FI_DEV_SM_CLOCK{gpu="0"} 210 1763632800000', "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_POWER_USAGE 5"],
    "crlf": [LINE + "\r", LINE.replace("POWER_USAGE", "GPU_UTIL") + "\r"],
    "bom": ["\ufeff" + LINE, LINE.replace("POWER_USAGE", "GPU_UTIL")],
    "spaces": ["  " + LINE + "  ", LINE.replace("} ", "}  ").replace("POWER_USAGE", "GPU_UTIL"),
               LINE.replace("{", " {").replace("POWER_USAGE", "FB_USED")],
    "overlong": [LINE, "DCGM_FI_DEV_GPU_UTIL" + "x" * 2_000_000, "other" + "x" * 2_000_000],
    "hostname": [LINE, LINE.replace('Hostname="h1"', 'Hostname=""').replace("1763632800000", "1763632860000"),
                 LINE.replace(',Hostname="h1"', "").replace("1763632800000", "1763632920000")],
    "pod": [LINE.replace('Hostname="h1"', 'pod="",namespace="ml",Hostname="h1"'),
            LINE.replace("POWER_USAGE", "GPU_UTIL").replace('Hostname="h1"', 'pod="p",namespace="ns",Hostname="h1"')],
    "padded": [LINE.replace('modelName="L4"', 'modelName=" L4 "'),
               LINE.replace('Hostname="h1"', 'Hostname=" h1 "').replace("1763632800000", "1763632860000"),
               LINE.replace('Hostname="h1"', 'Hostname=" "').replace("1763632800000", "1763632920000"),
               LINE.replace('gpu="0"', 'gpu=" 0"').replace("1763632800000", "1763632980000")],
    "truncated": ['DCGM_FI_DEV_POWER_USAGE{gpu="0" 12', 'DCGM_FI_DEV_POWER_USAGE{gpu="0"}', "DCGM_FI_DEV_POWER_USAGE{"],
}


@pytest.mark.parametrize("case", sorted(HAND))
@pytest.mark.parametrize("packed", [False, True])
def test_hand_made(tmp_path, case, packed):
    data = ("\n".join(HAND[case]) + "\n").encode()
    for name in ("gpu-node-9_x.prom", "plain.prom"):
        path = tmp_path / (name + (".gz" if packed else ""))
        path.write_bytes(gzip.compress(data) if packed else data)
        old_path = None
        if case == "padded":  # the one change of values: a label is stripped text (a blank one absent)
            old_path = tmp_path / "stripped" / path.name
            old_path.parent.mkdir(exist_ok=True)
            stripped = re.sub(r'(UUID|modelName|Hostname|pod|namespace)="\s*([^"]*?)\s*"', r'\1="\2"',
                              data.decode()).encode()
            old_path.write_bytes(gzip.compress(stripped) if packed else stripped)
        for at in (None, AT):
            for host in (None, "box"):
                compare(path, _ctx(path, at, host), old_path)
