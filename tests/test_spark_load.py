"""`mlcost-spark load` (mlcost/spark_load.py, docs/spark.md): raw files loaded into a lake as Spark
tasks (PySpark local[2]), one file per task, each by mlcost's own lake load, give the lake that
`mlcost load --lake` gives for the same files: every loaded table row for row, the same rejects (path,
line, reason), the same ledger; a second run loads nothing; a garbage file fails alone, with its reason.

The inputs are the sample files plus a file of random bytes and a runs file with two broken lines at
known line numbers. Expected counts come from the files themselves (lines, CSV records), not from
the program. Spark tests skip when pyspark or java is missing here, and fail under CI=true.
"""
from __future__ import annotations

import csv
import gzip
import json
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from ingest.lake import layout
from tests.conftest import REPO_ROOT, SAMPLE_DIR, need_spark
from tests.lake_fixtures import SETTINGS, mlcost, moto_s3, new_bucket  # noqa: F401  (moto_s3: a fixture)

TRACES = sorted((SAMPLE_DIR / "gpu_traces").glob("*.csv.gz"))
BILLS = sorted((SAMPLE_DIR / "billing").glob("*.csv.gz"))
BROKEN = ('{"run_id": broken', "not json at all")  # two lines no runs reader takes


# --- the inputs and what they hold, by plain Python over the files --------------------------

@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The raw files (absolute paths, in the order given to both loaders) and, per file, the rows
    it should load and the line numbers it should reject."""
    folder = tmp_path_factory.mktemp("raw")
    garbage = folder / "garbage.csv"
    garbage.write_bytes(bytes(random.Random(42).randrange(256) for _ in range(4096)))
    runs = [line for line in (SAMPLE_DIR / "runs.jsonl").read_text().splitlines() if line.strip()]
    lines = runs[:5] + [BROKEN[0]] + runs[5:10] + [BROKEN[1]] + runs[10:12]
    bad = folder / "bad_runs.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    expected = {str(SAMPLE_DIR / "runs.jsonl"): len(runs),
                str(SAMPLE_DIR / "serving_windows.jsonl.gz"): _lines(SAMPLE_DIR / "serving_windows.jsonl.gz"),
                **{str(path): _lines(path) - 1 for path in TRACES},  # one sample a line, after the header
                **{str(path): _csv_records(path) for path in BILLS},
                str(bad): len(lines)}  # every line: loaded or rejected
    assert [n for n, line in enumerate(lines, 1) if line in BROKEN] == [6, 12]
    return {"paths": [str(SAMPLE_DIR / "runs.jsonl"), str(SAMPLE_DIR / "serving_windows.jsonl.gz"),
                      *map(str, TRACES), *map(str, BILLS), str(garbage), str(bad)],
            "rows": expected, "garbage": str(garbage), "bad": str(bad), "bad_lines": [6, 12]}


def _lines(path: Path) -> int:
    with gzip.open(path, "rt") as source:
        return sum(1 for line in source if line.strip())


def _csv_records(path: Path) -> int:
    with gzip.open(path, "rt", newline="") as source:
        return sum(1 for _ in csv.reader(source)) - 1


# --- running the loaders ------------------------------------------------------------------------

def spark_env(extra: dict | None = None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable, **(extra or {})}
    env.pop("MLCOST_LAKE", None)
    env.pop("MLCOST_CONFIG", None)  # the settings travel by --config only
    return env


def mlcost_spark(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m mlcost.spark_job ARGS` (what the `mlcost-spark` script runs), Spark local[2]."""
    return subprocess.run([sys.executable, "-m", "mlcost.spark_job", *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, env=spark_env(env), timeout=900)


@pytest.fixture(scope="module")
def cli_lake(inputs: dict, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same files through `mlcost load --lake` (one process, the embedded loader per file)."""
    lake = tmp_path_factory.mktemp("cli") / "lake"
    done = mlcost({"MLCOST_CONFIG": str(SETTINGS)}, "load", "--lake", str(lake), *inputs["paths"])
    assert done.returncode == 1, done.stdout + done.stderr  # the garbage file and the broken lines
    return lake


@pytest.fixture(scope="module")
def spark_run(inputs: dict, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    need_spark()
    lake = tmp_path_factory.mktemp("spark") / "lake"
    return lake, mlcost_spark("load", "--lake", str(lake), "--config", str(SETTINGS), *inputs["paths"])


# --- reading a lake directly (not through mlcost's readers) -------------------------------------

def ledger(lake: Path) -> dict[str, dict]:
    return {path.stem: json.loads(path.read_text()) for path in (lake / layout.LEDGER).glob("*.json")}


def con_over(lake: Path, name: str, con: duckdb.DuckDBPyConnection | None = None) -> duckdb.DuckDBPyConnection:
    """Views `<name>_<table>` over the files the ledger entries of `lake` list for each table."""
    con = con or duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    entries = ledger(lake).values()
    for table in layout.LOADED:
        files = [str(lake / f) for entry in entries for f in entry["files"].get(table, [])]
        assert files, (name, table)
        con.execute(f"CREATE VIEW {name}_{table} AS SELECT * FROM read_parquet({files!r}, union_by_name = true)")
    return con


def headlines(stdout: str) -> list[str]:
    """One line per file: the lines that do not start with two spaces, less the totals line."""
    return [line for line in stdout.splitlines() if line and not line.startswith("  ")
            and not line.startswith("mlcost-spark:")]


def json_of(stdout: str) -> dict:
    """The --json document: spark-submit's Python runner merges the driver's stderr (a pyspark
    FutureWarning here) into stdout, so it starts at the first line that is "{"."""
    lines = stdout.splitlines()
    return json.loads("\n".join(lines[lines.index("{"):]))


# --- the tests ----------------------------------------------------------------------------------

def test_each_file_reports_its_outcome_and_the_totals_add_up(spark_run, inputs: dict) -> None:
    _, done = spark_run
    assert done.returncode == 1, done.stdout + done.stderr  # a failed file and rejected lines
    assert "Traceback" not in done.stdout + done.stderr
    lines = headlines(done.stdout)
    assert len(lines) == len(inputs["paths"])
    loaded_total = 0
    for path, line in zip(inputs["paths"], lines):
        assert path in line, (path, line)
        if path == inputs["garbage"]:
            assert line.startswith(f"FAILED {path}: ") and len(line) > len(f"FAILED {path}: ") + 5
            continue
        found = re.search(r"\]: ([\d,]+) rows loaded, ([\d,]+) rejected", line)
        assert found, line
        loaded, rejected = (int(x.replace(",", "")) for x in found.groups())
        expected = inputs["rows"][path]
        bad = len(inputs["bad_lines"]) if path == inputs["bad"] else 0
        assert (loaded, rejected) == (expected - bad, bad), line
        assert line.startswith("PARTLY LOADED" if bad else "OK"), line
        loaded_total += loaded
    totals = [line for line in done.stdout.splitlines() if line.startswith("mlcost-spark: ")]
    files = len(inputs["paths"])
    assert totals and totals[-1].startswith(
        f"mlcost-spark: {files} files: {files - 1} loaded, 0 already loaded, 0 rejected, 0 not data, 1 failed; "
        f"{loaded_total:,} rows loaded, {len(inputs['bad_lines'])} rejected;"), totals
    assert loaded_total == sum(inputs["rows"].values()) - len(inputs["bad_lines"])


def test_the_spark_lake_equals_the_cli_lake_row_for_row(spark_run, cli_lake: Path, inputs: dict) -> None:
    spark_lake, _ = spark_run
    con = con_over(cli_lake, "cli", con_over(spark_lake, "spark"))
    for table in layout.LOADED:
        # load ids come from content, kind and options: equal too, so whole rows are compared
        counts = con.execute(f"SELECT (SELECT count(*) FROM spark_{table}), (SELECT count(*) FROM cli_{table}), "
                             f"(SELECT count(*) FROM (FROM spark_{table} EXCEPT ALL FROM cli_{table})), "
                             f"(SELECT count(*) FROM (FROM cli_{table} EXCEPT ALL FROM spark_{table}))").fetchone()
        assert counts[0] == counts[1] > 0 and counts[2:] == (0, 0), (table, counts)
    # and against the files themselves
    assert con.execute("SELECT count(*) FROM spark_gpu_samples").fetchone()[0] == sum(
        inputs["rows"][str(path)] for path in TRACES)
    assert con.execute("SELECT count(*) FROM spark_billing_lines").fetchone()[0] == sum(
        inputs["rows"][str(path)] for path in BILLS)
    rejects = con.execute("SELECT path, line, reason FROM spark_rejects ORDER BY ALL").fetchall()
    assert rejects == con.execute("SELECT path, line, reason FROM cli_rejects ORDER BY ALL").fetchall()
    assert [(path, line) for path, line, _ in rejects] == [(inputs["bad"], n) for n in inputs["bad_lines"]]
    assert all(reason for _, _, reason in rejects)


def test_the_ledger_has_one_entry_per_good_file_as_the_cli_writes_it(spark_run, cli_lake: Path, inputs: dict) -> None:
    spark_lake, _ = spark_run
    spark, cli = ledger(spark_lake), ledger(cli_lake)
    good = [path for path in inputs["paths"] if path != inputs["garbage"]]
    assert sorted(entry["path"] for entry in spark.values()) == sorted(good)
    assert spark.keys() == cli.keys()
    same = ("path", "sha256", "kind", "options", "rows_loaded", "rows_rejected", "rows", "files", "supersedes")
    for load_id, entry in spark.items():
        assert {key: entry[key] for key in same} == {key: cli[load_id][key] for key in same}
        assert entry["rows_loaded"] + entry["rows_rejected"] == inputs["rows"][entry["path"]]


def test_a_second_spark_load_through_spark_submit_loads_nothing(spark_run, inputs: dict) -> None:
    """The same files again, through `spark-submit mlcost/spark_job.py load` this time: every good file
    is already loaded, the garbage file fails again, the lake's files do not change."""
    spark_lake, _ = spark_run
    submit = shutil.which("spark-submit")
    assert submit, "pyspark brings spark-submit"
    before = sorted(p.relative_to(spark_lake) for p in spark_lake.rglob("*") if p.is_file())
    done = subprocess.run([submit, "--master", "local[2]", "mlcost/spark_job.py", "load", "--json", "--lake",
                           str(spark_lake), "--config", str(SETTINGS), *inputs["paths"]], cwd=REPO_ROOT,
                          capture_output=True, text=True, env=spark_env(), timeout=900)
    assert done.returncode == 1, done.stdout + done.stderr
    report = json_of(done.stdout)
    statuses = {record["path"]: record["status"] for record in report["files"]}
    assert statuses == {path: "failed" if path == inputs["garbage"] else "already_loaded" for path in inputs["paths"]}
    assert report["totals"]["rows_loaded"] == report["totals"]["rows_rejected"] == 0
    assert report["totals"]["already_loaded"] == len(inputs["paths"]) - 1 and report["totals"]["failed"] == 1
    assert sorted(p.relative_to(spark_lake) for p in spark_lake.rglob("*") if p.is_file()) == before


def test_raw_files_on_s3_into_a_lake_on_s3(moto_s3: dict, cli_lake: Path, inputs: dict) -> None:
    """The sample folder and the two extra files as objects under an s3:// prefix, loaded by Spark tasks
    into an s3a:// lake (the derive job's spelling): the same load ids and rows as the CLI's local lake,
    objects named by their URLs, the prefix's .mlcostignore honoured (truth.json not read)."""
    need_spark()
    import s3fs

    raw = new_bucket(moto_s3).replace("/mlcost", "/raw")
    fs = s3fs.S3FileSystem(endpoint_url=moto_s3["AWS_ENDPOINT_URL_S3"], key="testing", secret="testing")
    root = raw.removeprefix("s3://")
    for path in [SAMPLE_DIR / ".mlcostignore", SAMPLE_DIR / "truth.json", SAMPLE_DIR / "runs.jsonl",
                 SAMPLE_DIR / "serving_windows.jsonl.gz", *TRACES, *BILLS]:
        fs.put_file(str(path), f"{root}/sample/{path.relative_to(SAMPLE_DIR).as_posix()}")
    for name in (inputs["garbage"], inputs["bad"]):
        fs.put_file(name, f"{root}/extra/{Path(name).name}")
    lake = new_bucket(moto_s3)
    done = mlcost_spark("load", "--json", "--lake", lake.replace("s3://", "s3a://"), "--config", str(SETTINGS),
                        f"{raw}/sample/", f"{raw}/extra/", env=moto_s3)
    assert done.returncode == 1, done.stdout + done.stderr
    report = json_of(done.stdout)
    by_name = {record["path"].rsplit("/", 1)[-1]: record for record in report["files"]}
    assert by_name["truth.json"]["status"] == "not_data"
    assert by_name["garbage.csv"]["status"] == "failed" and by_name["garbage.csv"]["error"]
    local = {Path(path).name: rows for path, rows in inputs["rows"].items()}
    assert {name: r["rows_loaded"] + r["rows_rejected"] for name, r in by_name.items()
            if r["status"] == "loaded"} == local
    assert [r["line"] for r in by_name["bad_runs.jsonl"]["rejects"]] == inputs["bad_lines"]
    totals = report["totals"]  # add up over the files
    assert totals["files"] == len(report["files"]) == len(local) + 2
    assert (totals["loaded"], totals["not_data"], totals["failed"]) == (len(local), 1, 1)
    assert totals["rows_loaded"] == sum(r["rows_loaded"] for r in report["files"]) == sum(local.values()) - 2
    assert totals["rows_rejected"] == sum(r["rows_rejected"] for r in report["files"]) == 2

    entries = {int(Path(name).stem): json.loads(fs.cat_file(name))
               for name in fs.find(f"{lake.removeprefix('s3://')}/_ledger") if name.endswith(".json")}
    cli = ledger(cli_lake)
    assert {str(load) for load in entries} == cli.keys()
    assert all(entry["path"].startswith(f"{raw}/") for entry in entries.values())
    con = con_over(cli_lake, "cli")
    con.register_filesystem(fs)
    for table in layout.LOADED:
        files = [f"{lake}/{f}" for entry in entries.values() for f in entry["files"].get(table, [])]
        con.execute(f"CREATE VIEW s3_{table} AS SELECT * FROM read_parquet({files!r}, union_by_name = true)")
        columns = [name for (name, *_) in con.execute(f"DESCRIBE cli_{table}").fetchall()]
        named = [c for c in ("source_file", "path") if c in columns]  # the file's name: an s3:// URL here
        rows = f"SELECT * EXCLUDE ({', '.join(named)}) FROM" if named else "SELECT * FROM"
        counts = con.execute(f"SELECT (SELECT count(*) FROM s3_{table}), (SELECT count(*) FROM cli_{table}), "
                             f"(SELECT count(*) FROM ({rows} s3_{table} EXCEPT ALL {rows} cli_{table}))").fetchone()
        assert counts[0] == counts[1] > 0 and counts[2] == 0, (table, counts)
        for column in named:  # the object's name where the CLI has the local file's
            pairs = con.execute(f"SELECT DISTINCT {column} FROM s3_{table}").fetchall()
            assert pairs and all(value.startswith(f"{raw}/") for (value,) in pairs), (table, column)


# --- the task function alone (no Spark) ---------------------------------------------------------

def test_a_task_never_raises(tmp_path: Path, inputs: dict) -> None:
    """load_one (what each Spark task runs) turns a garbage file and a lake that cannot be written into
    failed summaries with their reasons: nothing escapes a task to stop the job."""
    from mlcost import spark_load

    lake = tmp_path / "lake"
    settings = spark_load.LoadSettings(str(lake))
    garbage = spark_load.load_one(spark_load.RawFile(inputs["garbage"]), settings)
    assert garbage.status == "failed" and inputs["garbage"] in garbage.error
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    stuck = spark_load.load_one(spark_load.RawFile(str(SAMPLE_DIR / "runs.jsonl")),
                                spark_load.LoadSettings(str(blocked / "lake")))
    assert stuck.status == "failed" and "runs.jsonl" in stuck.error and stuck.rows_loaded == 0
    missing = spark_load.load_one(spark_load.RawFile(str(tmp_path / "gone.csv")), settings)
    assert missing.status == "failed" and "gone.csv" in missing.error
    assert not (lake / layout.LEDGER).exists() or not list((lake / layout.LEDGER).iterdir())


def test_the_settings_file_reaches_the_tasks(tmp_path: Path) -> None:
    """--config's [ingest] max_line_bytes, read on the driver, rules on the executors (whose
    environment names no settings file): exactly the runs lines longer than it are rejected."""
    need_spark()
    settings = tmp_path / "tight.toml"
    settings.write_text("[ingest]\nmax_line_bytes = 1024\n")
    lines = [line for line in (SAMPLE_DIR / "runs.jsonl").read_bytes().decode().splitlines() if line.strip()]
    long = [n for n, line in enumerate(lines, 1) if len(line.encode()) > 1024]
    assert 0 < len(long) < len(lines)
    done = mlcost_spark("load", "--json", "--lake", str(tmp_path / "lake"), "--config", str(settings),
                        str(SAMPLE_DIR / "runs.jsonl"))
    assert done.returncode == 1, done.stdout + done.stderr
    (record,) = json_of(done.stdout)["files"]
    assert (record["rows_loaded"], record["rows_rejected"]) == (len(lines) - len(long), len(long))
    con = duckdb.connect()
    files = [str(tmp_path / "lake" / f) for entry in ledger(tmp_path / "lake").values()
             for f in entry["files"]["rejects"]]
    rejected = con.execute(f"SELECT line, reason FROM read_parquet({files!r}) ORDER BY line").fetchall()
    assert [line for line, _ in rejected] == long
    assert all("max_line_bytes" in reason for _, reason in rejected)


@pytest.mark.parametrize("zone", ["utc", " Europe/Paris "])
def test_a_task_names_the_load_as_the_cli_does(tmp_path: Path, zone: str) -> None:
    """The same file and zone give the same load id through a task as through lake_load.load_files
    (what `mlcost load --lake --tz` runs), however the zone is spelt, and a task finds the CLI's load
    of it: a file is never loaded twice."""
    from ingest.engine import values
    from ingest.pipeline import lake_load
    from mlcost import spark_load

    path = SAMPLE_DIR / "runs.jsonl"
    task = spark_load.load_one(spark_load.RawFile(str(path)), spark_load.LoadSettings(str(tmp_path / "task"), tz=zone))
    (cli,) = lake_load.load_files(str(tmp_path / "cli"), [path], tz=values.zone(zone))
    assert task.status == cli.status == "loaded"
    assert ledger(tmp_path / "task").keys() == ledger(tmp_path / "cli").keys() and len(ledger(tmp_path / "cli")) == 1
    again = spark_load.load_one(spark_load.RawFile(str(path)), spark_load.LoadSettings(str(tmp_path / "cli"), tz=zone))
    assert (again.status, again.rows_loaded) == ("already_loaded", 0)
    assert len(ledger(tmp_path / "cli")) == 1
