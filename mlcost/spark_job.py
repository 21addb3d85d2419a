"""The Spark entry point (docs/spark.md): compute a lake's derived tables with Spark SQL.

    spark-submit --master <master> mlcost/spark_job.py derive --lake s3a://bucket/prefix [--config mlcost.toml]
    mlcost-spark derive --lake /path/to/lake            (local[2] when no master is set)

Reads the committed files of the lake's base tables (<lake>/tables/<table>/..., only loads named
in <lake>/_ledger/ and not superseded) and keeps the rows readers see (the latest committed load
winning per key: ingest/lake/visible.py, the SELECT DuckDB readers run), runs ingest/derived/sql's
SELECTs translated to Spark SQL (ingest/derived/sql/spark.py), writes each derived table to
<lake>/derived/<table>/generation=<generation>/ and then, last, <lake>/derived/_current.json naming
that generation and its tables: readers see the old generation or the new one, never part of one.
Paths go through Hadoop's FileSystem, so a folder, file://, hdfs:// and s3a:// all work.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from ingest.derived import sql as derived_sql
from ingest.derived.sql import spark as spark_sql
from ingest.lake import visible
from ingest.settings import config

BASE_TABLES = ("runs", "gpu_samples", "billing_lines", "serving_windows")
LOADS_SCHEMA = "load_id BIGINT, seq INT"
WANTED_SCHEMA = ("budget_no INT, scope STRING, value STRING, tag_key STRING, tag_value STRING, "
                 "currency STRING, start_day DATE, end_day DATE")


def session(master: str | None = None, memory: str = "1g"):
    """A SparkSession with derived_sql's settings (UTC, DuckDB-like NULLs and decimals); `master`
    only when given or when no master is configured (then local[2])."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("mlcost-derive")
    for key, value in spark_sql.SESSION_CONF.items():
        builder = builder.config(key, value)
    from pyspark import SparkConf

    if master or not SparkConf().contains("spark.master"):
        builder = (builder.master(master or "local[2]").config("spark.driver.memory", memory)
                   .config("spark.sql.shuffle.partitions", "4").config("spark.ui.enabled", "false")
                   .config("spark.ui.showConsoleProgress", "false"))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


class Lake:
    """A lake's files through Hadoop's FileSystem (any scheme Spark is configured for)."""

    def __init__(self, spark, root: str):
        self.spark, self.root = spark, root.rstrip("/")
        jvm = spark.sparkContext._jvm
        self._path = jvm.org.apache.hadoop.fs.Path
        self.fs = self._path(self.root).getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())

    def _files(self, folder: str) -> list[str]:
        path = self._path(f"{self.root}/{folder}")
        if not self.fs.exists(path):
            return []
        found, files = self.fs.listFiles(path, True), []
        while found.hasNext():
            files.append(found.next().getPath().toString())
        return files

    def read_text(self, path: str) -> str:
        stream = self.fs.open(self._path(path))
        try:
            scanner = self.spark.sparkContext._jvm.java.util.Scanner(stream, "UTF-8").useDelimiter("\\A")
            return scanner.next() if scanner.hasNext() else ""
        finally:
            stream.close()

    def write_text(self, path: str, text: str) -> None:
        stream = self.fs.create(self._path(path), True)
        try:
            stream.write(bytearray(text.encode("utf-8")))
        finally:
            stream.close()

    def visible_loads(self) -> list[tuple[int, int]]:
        """(load_id, seq) of the visible loads: in the ledger, not superseded, in commit order
        (ingest/lake/visible.visible_loads, the order every reader gives them)."""
        return visible.visible_loads([json.loads(self.read_text(p)) for p in self._files("_ledger")
                                      if p.endswith(".json")])

    def loads(self) -> set[str]:
        """The visible load ids (decimal text): in the ledger, not superseded by another load."""
        return {str(load) for load, _ in self.visible_loads()}

    def committed(self, table: str, loads: set[str]) -> list[str]:
        """The Parquet files of `table` that committed loads wrote."""
        return sorted(p for p in self._files(f"tables/{table}") if p.endswith(".parquet")
                      and p.rsplit("/", 1)[-1].rsplit("-", 1)[0] in loads)


def query(spark, sql: str, prefix: str):
    """A derived_sql SELECT as a Spark DataFrame: its MATERIALIZED CTEs computed once each
    (localCheckpoint) and registered as temp views named `prefix` + their name, then the query."""
    for name, text in spark_sql.staged(sql, prefix):
        if name is None:
            return spark.sql(text)
        spark.sql(text).localCheckpoint(eager=True).createOrReplaceTempView(name)
    raise AssertionError("staged() ends with the query")


def derive(spark, lake_root: str, settings: derived_sql.Settings, budgets=(), generation: str | None = None,
           timings: dict | None = None) -> dict:
    """Compute and write every derived table of the lake at `lake_root`; returns the pointer
    written to <lake>/derived/_current.json. `timings` (if given) gets each stage's seconds."""
    timings = {} if timings is None else timings
    lake = Lake(spark, lake_root)
    generation = generation or datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    started = time.perf_counter()
    written = {}

    def store(name: str, frame, kept: bool) -> None:
        at = time.perf_counter()
        # intermediates (sample intervals, run GPUs, bill lines with days) are written too, apart:
        # at scale they do not fit an executor's memory, and later steps read them several times
        folder = f"derived/{'' if kept else '_work/'}{name}/generation={generation}"
        frame.write.mode("overwrite").parquet(f"{lake.root}/{folder}")
        spark.read.parquet(f"{lake.root}/{folder}").createOrReplaceTempView(name)
        if kept:
            written[name] = folder
        timings[name] = time.perf_counter() - at

    loads = lake.visible_loads()
    spark.createDataFrame(loads, LOADS_SCHEMA).createOrReplaceTempView("lake_loads")
    names = {str(load) for load, _ in loads}
    for table in BASE_TABLES:
        files = lake.committed(table, names)
        if not files:
            raise SystemExit(f"{lake_root}: no committed files of table {table}")
        frame = spark.read.option("basePath", f"{lake.root}/tables/{table}").parquet(*files)
        frame.drop("month").createOrReplaceTempView(f"lake_rows_{table}")
        # the rows readers see: latest committed load wins per key (the SELECT views.py runs on DuckDB)
        rows = spark.sql(spark_sql.to_spark(visible.visible(table, f"lake_rows_{table}")))
        rows = rows.drop(*visible.HELPER_COLUMNS)
        if table == "gpu_samples":  # read once (by sample_intervals, which is written)
            rows.createOrReplaceTempView(table)
        else:  # read by several steps: computed once
            store(table, rows, kept=False)
    timings["read"] = time.perf_counter() - started

    for step in derived_sql.base_steps(settings):
        store(step.name, query(spark, step.sql, f"{step.name}_"), step.stored)
    months = derived_sql.months_of(spark.sql(spark_sql.to_spark(derived_sql.MONTHS)).collect())
    # one month at a time (a month is allocated on its own): one plan per month stays small
    at, folder = time.perf_counter(), f"derived/bill_allocation_days/generation={generation}"
    for number, month in enumerate(months or [datetime(1970, 1, 1).date()]):
        frame = query(spark, derived_sql.allocation_month(month, settings), f"allocation_{month:%Y%m}_")
        frame = frame if months else frame.limit(0)
        frame.write.mode("overwrite" if number == 0 else "append").parquet(f"{lake.root}/{folder}")
    spark.read.parquet(f"{lake.root}/{folder}").createOrReplaceTempView("bill_allocation_days")
    written["bill_allocation_days"] = folder
    timings["bill_allocation_days"] = time.perf_counter() - at
    days = spark.sql("SELECT min(day) AS first, max(day) AS last FROM billing_costs").collect()[0]
    rows = []
    if days["first"] is not None:
        from datetime import timedelta

        rows = derived_sql.wanted_rows(budgets, days["first"], days["last"] + timedelta(days=1))
    spark.createDataFrame([tuple(r.values()) for r in rows], WANTED_SCHEMA).createOrReplaceTempView("wanted")
    prices = derived_sql.price_rows(settings, spark.sql(spark_sql.to_spark(derived_sql.GPU_NAMES)).collect())
    spark.createDataFrame(prices, "gpu_name STRING, price STRING").createOrReplaceTempView("gpu_prices")
    for step in derived_sql.late_steps(settings):
        store(step.name, query(spark, step.sql, f"{step.name}_"), step.stored)
    pointer = {"format": 1, "generation": generation, "tables": written, "loads": [str(load) for load, _ in loads],
               "written_at": datetime.now(timezone.utc).isoformat(), "engine": f"spark {spark.version}"}
    lake.write_text(f"{lake.root}/derived/_current.json", json.dumps(pointer, indent=1))
    timings["total"] = time.perf_counter() - started
    return pointer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mlcost-spark", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("derive", help="compute the lake's derived tables with Spark SQL and write them back")
    run.add_argument("--lake", required=True, help="the lake's root: a folder, file://, hdfs:// or s3a:// URL")
    run.add_argument("--config", help="the settings file (default: $MLCOST_CONFIG, else ./mlcost.toml)")
    run.add_argument("--master", help="Spark master when not set by spark-submit (default local[2])")
    run.add_argument("--driver-memory", default="1g", help="driver memory for a local master (default 1g)")
    from mlcost import spark_load  # `load`: raw files into the lake as Spark tasks (mlcost/spark_load.py)

    spark_load.add_parser(commands)
    args = parser.parse_args(argv)
    if args.command == "load":
        return spark_load.main(args, session)
    try:
        settings = config.load(Path(args.config)) if args.config else config.load()
    except config.ConfigError as problem:
        print(f"mlcost-spark: {problem}", file=sys.stderr)
        return 2
    try:
        spark = session(args.master, args.driver_memory)
    except ImportError:
        print("mlcost-spark: pyspark is not installed: pip install 'mlcost[spark]' (and Java 17)", file=sys.stderr)
        return 2
    timings: dict = {}
    pointer = derive(spark, args.lake, derived_sql.Settings.of(settings), settings.budgets, timings=timings)
    print(json.dumps({**pointer, "seconds": {k: round(v, 2) for k, v in timings.items()}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
