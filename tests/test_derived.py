"""What loads store for pages to read (per-run GPU energy, each bill line's run) equals what the
live views (or, for the energy, a plain join of the stored run minutes) compute, and follows the
data when runs are loaded again."""
from __future__ import annotations

import json
from decimal import Decimal
import shutil
from pathlib import Path

import pandas as pd
import pytest

from ingest.derived import derived, gpu_rollups
from ingest.engine import warehouse as wh
from ingest.pipeline import loader
from ingest.settings import config


def frames_equal(stored: str, live: str, key: str) -> None:
    left = wh.query(f"SELECT * FROM {stored} ORDER BY ALL").reset_index(drop=True)
    right = wh.query(f"SELECT * FROM {live} ORDER BY ALL").reset_index(drop=True)
    assert len(left) > 0
    pd.testing.assert_frame_equal(left, right, check_dtype=False)
    assert left[key].is_unique


# Per run, from the stored run_gpu_time, gpu_minutes and gpu_minutes_allocated joined on their text
# keys: not the numbered statements of ingest/derived/run_minutes.py that store run_gpu_energy.
RUN_ENERGY = """(
    SELECT t.run_id, count(DISTINCT (t.host, t.gpu_index)) AS gpus_traced,
           sum(m.energy_kwh * t.run_s / greatest(60, a.held_s)) AS gpu_energy_kwh,
           sum(m.energy_s * t.run_s / 60.0) AS gpu_energy_s
    FROM run_gpu_time t JOIN gpu_minutes m USING (host, gpu_index, minute)
    JOIN gpu_minutes_allocated a USING (host, gpu_index, minute)
    GROUP BY t.run_id
)"""
RUN_ENERGY_LIVE = f"""(
    SELECT p.*, 100.0 * p.gpu_energy_s / nullif(r.duration_s * coalesce(nullif(len(r.gpu_uuids), 0),
                    nullif(len(r.gpu_indices), 0), r.gpu_count, p.gpus_traced), 0) AS gpu_energy_coverage_pct,
           CASE WHEN r.examples > 0 THEN p.gpu_energy_kwh * 1e6 / r.examples END AS gpu_energy_wh_per_1k_examples
    FROM {RUN_ENERGY} AS p JOIN runs r USING (run_id))"""


def test_stored_energy_and_bill_matches_equal_the_live_views(demo_warehouse: Path, tmp_path: Path) -> None:
    frames_equal("run_gpu_energy", RUN_ENERGY_LIVE, "run_id")
    frames_equal("billing_line_runs", "billing_run_lines_live('run_id', 3600.0)", "line_key")
    assert wh.query("SELECT run_id_tag, match_slack_s FROM billing_match_settings").values.tolist() == [["run_id", 3600.0]]

    # a run loaded again without its GPUs and its resource: its energy and its bill lines go
    traced = wh.query("SELECT e.run_id FROM run_gpu_energy e JOIN runs r USING (run_id) "
                      "WHERE r.source_kind = 'runs' ORDER BY e.run_id LIMIT 1")["run_id"][0]
    path = tmp_path / "again.jsonl"
    path.write_text(json.dumps({"run_id": traced, "project": "moved", "start_time": "2026-08-03T08:00:00Z",
                                "duration_hours": 1, "price_per_hour_usd": 1}) + "\n")
    assert loader.ingest_file(path).rows_loaded == 1
    assert traced not in set(wh.query("SELECT run_id FROM run_gpu_energy")["run_id"])
    frames_equal("run_gpu_energy", RUN_ENERGY_LIVE, "run_id")
    frames_equal("billing_line_runs", "billing_run_lines_live('run_id', 3600.0)", "line_key")


# --- stored incrementally = computed from scratch -------------------------------------------------
# Small files whose loads reach every path of ingest/derived/derived.py: runs sharing a GPU minute, runs
# matched by uuid and by host and index, a GPU swapped for another (a new uuid on the same
# slot), samples loaded out of order and again over stored ones, runs and bill lines replaced,
# bill lines matched by tag and by resource (two runs competing for one resource), unloads.

DAY = "2026-09-14"
FOCUS_HEADER = ("BilledCost,EffectiveCost,ListCost,BillingCurrency,ChargePeriodStart,ChargePeriodEnd,"
                "ChargeCategory,ChargeDescription,ProviderName,ServiceName,ResourceId,Tags,x_LineItemId")


def at(minutes: float) -> str:
    """The day's UTC time `minutes` after midnight, ISO-8601."""
    hours, rest = divmod(int(minutes * 60), 3600)
    return f"{DAY}T{hours:02d}:{rest // 60:02d}:{rest % 60:02d}Z"


def trace(path: Path, host: str, gpus: dict[int, str], begin_min: float, end_min: float,
          power_w: float, every_s: int = 20, idle: bool = False) -> Path:
    """A gpu-collector CSV: each GPU (index -> uuid) sampled every `every_s` seconds; `idle`: at
    0 % utilization."""
    lines = ["timestamp,host,gpu_index,gpu_uuid,gpu_name,power_w,energy_mj,gpu_util_pct,mem_used_mib"]
    for step in range(int(begin_min * 60) // every_s, int(end_min * 60) // every_s):
        for index, uuid in gpus.items():
            watts = power_w + 7 * index + (step % 5)
            lines.append(f"{at(step * every_s / 60)},{host},{index},{uuid},NVIDIA A100,{watts},,"
                         f"{0 if idle else (step * 13 + index) % 100},1000")
    path.write_text("\n".join(lines) + "\n")
    return path


def run(run_id: str, begin_min: float, end_min: float, **fields) -> dict:
    return {"run_id": run_id, "project": "p", "start_time": at(begin_min), "end_time": at(end_min),
            "price_per_hour_usd": 2, **fields}


def jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


def bill(path: Path, lines: list[tuple]) -> Path:
    """A FOCUS CSV: (line id, begin minute, end minute, category, resource, tags) each; a begin
    or end given as text is an ISO-8601 time (another day)."""
    rows = [FOCUS_HEADER]
    for line_id, begin, end, category, resource, tags in lines:
        tags_text = json.dumps(tags).replace('"', '""')
        begin, end = (when if isinstance(when, str) else at(when) for when in (begin, end))
        rows.append(f'1.5,1.5,1.5,USD,{begin},{end},{category},x,AWS,EC2,{resource},"{tags_text}",{line_id}')
    path.write_text("\n".join(rows) + "\n")
    return path


def windows(path: Path, spans: list[tuple[str, str, float, float, float]]) -> Path:
    """Serving windows JSON lines: (service, model version, begin minute, end minute, cost) each."""
    return jsonl(path, [{"window_start": at(begin), "window_end": at(end), "service": service,
                         "model_version": version, "requests_total": 100, "requests_success": 99,
                         "requests_error": 1, "cost_usd": cost, "host": "serve-1"}
                        for service, version, begin, end, cost in spans])


def fixture_files(folder: Path) -> dict[str, Path]:
    u0, u1, swapped, other = "GPU-u0", "GPU-u1", "GPU-u0-swapped", "GPU-h2-0"
    return {
        "early": trace(folder / "early.csv", "h1", {0: u0, 1: u1}, 0, 120, 200),
        "late": trace(folder / "late.csv", "h1", {0: u0, 1: u1}, 120, 180, 220),
        # GPU 0 of h1 swapped: a new uuid in the same slot from 180 min on
        "swap": trace(folder / "swap.csv", "h1", {0: swapped, 1: u1}, 180, 240, 240),
        # part of the early span again, other readings (replaces the stored samples)
        "again": trace(folder / "again.csv", "h1", {0: u0}, 60, 90, 300),
        "h2": trace(folder / "h2.csv", "h2", {0: other}, 30, 150, 40, every_s=30, idle=True),
        "runs": jsonl(folder / "runs.jsonl", [
            run("r1", 10, 80, host="h1", gpu_indices=[0], gpu_uuids=[u0], examples=1000),
            run("r2", 60, 200.5, host="h1", gpu_indices=[0, 1]),  # no uuids: by host and index
            run("r3", 170, 235, host="elsewhere", gpu_indices=[7], gpu_uuids=[swapped]),  # by uuid
            run("r4", 29.5, 100, host="h2", gpu_indices=[0], gpu_count=1),
            run("r5", 0, 130, tags={"resource_id": "res-1"}),
            run("r6", 100, 300, tags={"resource_id": "res-1"}),
            run("r7", 0, 60, host="h1", gpu_indices=[1], gpu_uuids=[u1]),
        ]),
        "runs_again": jsonl(folder / "runs_again.jsonl", [
            run("r2", 90, 220.25, host="h1", gpu_indices=[0, 1]),   # moved
            run("r1", 10, 80, host="h1", gpu_indices=[0], gpu_uuids=[swapped]),  # now the swapped GPU
            run("r6", 100, 300, tags={"resource_id": "res-2"}),   # another resource
            run("r8", 110, 170, host="h1", gpu_indices=[1], gpu_uuids=[u1], examples=50),
        ]),
        "bill": bill(folder / "bill.csv", [
            *[(f"res1-{h}", 60 * h, 60 * h + 60, "Usage", "res-1", {}) for h in range(5)],
            *[(f"res2-{h}", 60 * h, 60 * h + 60, "Usage", "res-2", {}) for h in range(5)],
            ("tagged", 0, 60, "Usage", "res-9", {"run_id": "r7"}),
            ("tagged-later", 0, 60, "Usage", "res-9", {"run_id": "r8"}),
            ("credit", 0, 60, "Credit", "res-1", {"run_id": "r5"}),
            # hours of the traced nodes: split between the runs on them, idle GPUs and the rest
            *[(f"node-h1-{h}", 60 * h, 60 * h + 60, "Usage", "h1", {"team": "t"}) for h in range(4)],
            ("node-h2", 30, 150, "Usage", "h2", {}),
            # a service's hours: split between its model versions by their windows
            *[(f"chat-{h}", 60 * h, 60 * h + 60, "Usage", "res-chat", {"service": "chat"}) for h in range(4)],
            # another month (allocated on its own)
            ("october", "2026-10-02T00:00:00Z", "2026-10-02T01:00:00Z", "Usage", "res-1", {}),
        ]),
        "bill_again": bill(folder / "bill_again.csv", [
            ("res1-2", 120, 180, "Usage", "res-2", {}),  # the same line id, now another resource
            ("tagged", 0, 60, "Usage", "res-9", {"run_id": "r1"}),
            ("new", 200, 260, "Usage", "res-1", {}),
            ("node-h1-1", 60, 120, "Usage", "h2", {}),  # the same line, now the other node
            ("node-h1-late", 200, 230, "Usage", "h1", {}),
            # a run's line in a month with no node or service line (stays when the runs go)
            ("october-r5", "2026-10-02T00:00:00Z", "2026-10-02T01:00:00Z", "Usage", "res-9", {"run_id": "r5"}),
        ]),
        "serving": windows(folder / "serving.jsonl", [
            ("chat", "v1", 0, 90, 3.0), ("chat", "v2", 60, 150, 1.0), ("chat", "v2", 150, 240, 2.5)]),
    }


DERIVED = {"run_gpu_time": ("run_id", "host", "gpu_index", "minute"),
           "gpu_minutes_allocated": ("host", "gpu_index", "minute"), "run_gpu_energy": ("run_id",),
           "run_gpu_days": ("run_id", "host", "gpu_index", "day"), "gpu_days": ("host", "gpu_index", "day"),
           "billing_line_runs": ("line_key",)}


# the allocation's days have no key: every row compared, in one order (tags as text to order by)
ALLOCATION_DAYS = "SELECT * REPLACE (CAST(tags AS VARCHAR) AS tags) FROM bill_allocation_days ORDER BY ALL"


def stored(path: Path) -> dict[str, pd.DataFrame]:
    found = {table: wh.query(f"SELECT * FROM {table} ORDER BY {', '.join(key)}", path=path).reset_index(drop=True)
             for table, key in DERIVED.items()}
    found["bill_allocation_days"] = wh.query_exact(ALLOCATION_DAYS, path=path).reset_index(drop=True)
    return found


ROLLUPS = {"gpu_minutes": ("host", "gpu_index", "minute"), "gpu_gaps": ("host", "gpu_index", "gap_start")}


def assert_as_from_scratch(path: Path, tmp_path: Path, step: str, rollups: bool = False) -> None:
    """The derived tables of warehouse `path` equal those a full refresh stores in a copy of it;
    with `rollups`, so do the GPU rollups (the copy's computed again from all its samples first)."""
    copy = tmp_path / "scratch.duckdb"
    shutil.copyfile(path, copy)
    with wh.connect(copy) as con:
        con.execute("BEGIN TRANSACTION")
        if rollups:
            db = con.execute("SELECT current_database()").fetchone()[0]
            gpu_rollups.rebuild(con, db, config.load().gpu, gpu_rollups.stored_settings(con, db))
        derived.refresh_run_energy(con)
        derived.refresh_billing_runs(con)
        derived.refresh_allocation(con)
        con.execute("COMMIT")
    incremental, scratch = stored(path), stored(copy)
    if rollups:
        for table, key in ROLLUPS.items():
            order = f"SELECT * FROM {table} ORDER BY {', '.join(key)}"
            pd.testing.assert_frame_equal(wh.query(order, path=path), wh.query(order, path=copy),
                                          check_dtype=False, obj=f"{step}: {table}")
    for table in [*DERIVED, "bill_allocation_days"]:
        pd.testing.assert_frame_equal(incremental[table], scratch[table], check_dtype=False, obj=f"{step}: {table}")
    copy.unlink()


ORDERS = [
    ["early", "late", "swap", "h2", "runs", "bill", "serving", "again", "runs_again", "bill_again"],
    ["runs", "serving", "bill", "swap", "again", "late", "early", "h2", "bill_again", "runs_again"],
    ["bill", "runs_again", "h2", "runs", "early", "swap", "bill_again", "late", "serving", "again"],
]


@pytest.mark.parametrize("order", ORDERS, ids=["traces first", "runs first", "out of order"])
def test_incremental_derived_tables_equal_a_full_refresh(order: list[str], tmp_path: Path, warehouse: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # these few runs and lines change by more than the share past which a load refreshes all:
    # picking what changed is what is tested here
    monkeypatch.setattr(derived, "FULL_REFRESH_SHARE", float("inf"))
    files = fixture_files(tmp_path)
    load_ids = {}
    for name in order:
        summary = loader.ingest_file(files[name])
        assert summary.status == "loaded" and summary.rows_rejected == 0, summary.to_json()
        load_ids[name] = int(wh.query("SELECT max(load_id) AS id FROM loads")["id"][0])
        assert_as_from_scratch(warehouse, tmp_path, f"after {name}")
    energy = wh.query("SELECT count(*) AS n, count(*) FILTER (WHERE gpu_energy_kwh > 0) AS measured "
                      "FROM run_gpu_energy")
    assert energy["measured"][0] >= 4  # the fixture reaches the energy path, not only empty tables
    assert len(wh.query("SELECT * FROM billing_line_runs WHERE matched_by = 'resource'")) > 0
    # the allocation's every kind of piece: node lines split (kept by line), versions, two months
    days = wh.query("SELECT bucket, rule, line_key, month FROM bill_allocation_days")
    assert {"training", "idle_gpu", "unallocated", "serving"} <= set(days["bucket"])
    assert "node GPU-hours share" in set(days["rule"]) and days["line_key"].notna().any()
    assert days["month"].nunique() == 2
    # unloads: runs, bill lines, samples (the rollups of the GPUs they were of again), in an order of their own
    for name in ("runs_again", "serving", "bill", "again", "runs", "swap", "h2"):
        assert wh.unload(load_ids[name]) is not None
        assert_as_from_scratch(warehouse, tmp_path, f"after unloading {name}", rollups=True)


def pending_gpus() -> int:
    return int(wh.query("SELECT count(*) AS n FROM derived_pending_gpus")["n"][0])


def test_a_load_of_many_files_stores_the_derived_tables_once_at_its_end(tmp_path: Path, warehouse: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """loader.batch(): trace files leave the tables that depend on their GPUs to the batch's end
    (or to a file of another kind), which stores what loading them one by one stores."""
    monkeypatch.setattr(derived, "FULL_REFRESH_SHARE", float("inf"))  # the picking is what is tested
    files = fixture_files(tmp_path)
    batches = [["runs", "bill", "early", "swap", "h2"],  # traces last: left to the batch's end
               ["late", "serving", "again"],              # a file of another kind between them
               ["runs_again", "bill_again", "early"]]     # early: already loaded, nothing noted
    for names in batches:
        with loader.batch([files[name] for name in names]):
            for name in names:
                summary = loader.ingest_file(files[name])
                assert summary.status in ("loaded", "already_loaded"), summary.to_json()
                traces_only = name in ("early", "late", "swap", "again", "h2") and summary.status == "loaded"
                # deferred after a trace file; a file of another kind stores them at its merge
                assert (pending_gpus() > 0) == traces_only, name
        assert pending_gpus() == 0
        assert_as_from_scratch(warehouse, tmp_path, f"after the batch {names}")
    # the rows match those of loading the same files one by one
    batched = stored(warehouse)
    one_by_one = tmp_path / "one_by_one.duckdb"
    monkeypatch.setenv("MLCOST_DB", str(one_by_one))
    for name in [name for names in batches for name in names]:
        assert loader.ingest_file(files[name]).status in ("loaded", "already_loaded")
        assert pending_gpus() == 0  # outside a batch every load stores them itself
    for table, frame in stored(one_by_one).items():
        pd.testing.assert_frame_equal(batched[table], frame, check_dtype=False, obj=table)


def test_a_batch_cut_short_leaves_its_notes_to_the_next_write(tmp_path: Path, warehouse: Path) -> None:
    files = fixture_files(tmp_path)
    for name in ("runs", "bill"):
        loader.ingest_file(files[name])
    with pytest.raises(KeyboardInterrupt):
        with loader.batch([files["early"], files["late"]]):
            loader.ingest_file(files["early"])
            raise KeyboardInterrupt
    assert pending_gpus() > 0  # kept in the warehouse: a page sees the tables of before the batch
    assert len(wh.query("SELECT * FROM run_gpu_time")) == 0
    before = int(wh.query("SELECT rollups FROM gpu_rollup_settings")["rollups"][0])
    assert wh.settle_derived() is True and pending_gpus() == 0
    assert int(wh.query("SELECT rollups FROM gpu_rollup_settings")["rollups"][0]) == before + 1  # data version
    assert wh.settle_derived() is False
    assert len(wh.query("SELECT * FROM run_gpu_time")) > 0
    assert_as_from_scratch(warehouse, tmp_path, "after the settle")
    # the file of a batch cut short loaded again (already loaded): the batch's end stores what was left
    with pytest.raises(KeyboardInterrupt):
        with loader.batch([files["swap"], files["h2"]]):
            loader.ingest_file(files["swap"])
            raise KeyboardInterrupt
    assert pending_gpus() > 0
    with loader.batch([files["swap"]]):
        assert loader.ingest_file(files["swap"]).status == "already_loaded"
    assert pending_gpus() == 0
    assert_as_from_scratch(warehouse, tmp_path, "after loading the file again")
    # an unload settles what is left first, then redoes its own
    with pytest.raises(KeyboardInterrupt):
        with loader.batch([files["late"], files["h2"]]):
            loader.ingest_file(files["late"])
            raise KeyboardInterrupt
    assert pending_gpus() > 0
    runs_load = int(wh.query("SELECT load_id FROM loads WHERE path LIKE '%runs.jsonl'")["load_id"][0])
    assert wh.unload(runs_load) is not None
    assert pending_gpus() == 0
    assert_as_from_scratch(warehouse, tmp_path, "after the unload")


# --- the stored allocation = the allocation computed now, to the cent ------------------------------

# Per UTC day and line group: what bill_allocation (the un-stored macro, its own run matching)
# gives, summed from its pieces, and what bill_allocation_days stores for the month.
LIVE_GROUPS = """
SELECT utc_day(p.charge_period_start) AS day, p.billing_currency, p.bucket, p.rule, p.run_id, p.host, p.service,
       p.model_version, CAST(p.tags AS VARCHAR) AS tags, b.provider, p.charge_category, p.service_name,
       p.instance_type, sum(p.effective_cost) AS cost, round(sum(p.gpu_hours), 9) AS gpu_hours, count(*) AS pieces,
       count(DISTINCT p.line_key) AS lines
FROM bill_allocation($start, $end, $run_tag, $slack_s, $service_tag, $families::VARCHAR[], $words::VARCHAR[],
                     stored := false) p JOIN billing_lines b USING (line_key)
GROUP BY ALL ORDER BY ALL
"""
STORED_GROUPS = """
SELECT day, billing_currency, bucket, rule, run_id, host, service, model_version, CAST(tags AS VARCHAR) AS tags,
       provider, charge_category, service_name, instance_type, sum(effective_cost) AS cost,
       round(sum(gpu_hours), 9) AS gpu_hours, sum(lines) AS pieces,
       coalesce(sum(lines) FILTER (WHERE line_key IS NULL), 0) + count(DISTINCT line_key) AS lines
FROM bill_allocation_days WHERE month = $month
GROUP BY ALL ORDER BY ALL
"""


def assert_stored_allocation_is_computed(monkeypatch: pytest.MonkeyPatch) -> int:
    """Every month of the warehouse: the stored days equal the un-stored macro's pieces summed, and
    every figure metrics/allocation.py and the budget drivers give from them equals the one they
    give computing the allocation now. Returns the months compared."""
    from metrics import allocation, budget_drivers

    rules = allocation.Rules.of(config.load())
    months = allocation.bill_months()
    assert months
    budgets = [config.Budget("all", "all", None, "month", Decimal(1000), "USD"),
               config.Budget("team", "team", "genai", "month", Decimal(1000), "USD"),
               config.Budget("bucket", "bucket", "idle_gpu", "month", Decimal(1000), "USD"),
               config.Budget("other currency", "all", None, "month", Decimal(1000), "EUR")]
    real = allocation.stored_days
    for month in months:
        start, end = allocation.month_span(month)
        params = {"start": pd.Timestamp(start, tz="UTC"), "end": pd.Timestamp(end, tz="UTC"),
                  "run_tag": rules.run_tag, "slack_s": rules.slack_s, "service_tag": rules.service_tag,
                  "families": list(rules.families), "words": list(rules.words)}
        live = wh.query_exact(LIVE_GROUPS, params)
        kept = wh.query_exact(STORED_GROUPS, {"month": month})
        assert len(live) > 0
        pd.testing.assert_frame_equal(kept, live, check_dtype=False, obj=f"{month}: days")

        def figures() -> list:
            return [allocation.summary(start, end, key, rules) for key in ("team", "project", "run_id")] + [
                allocation.runs(start, end, rules), allocation.versions(start, end, rules),
                allocation.figures(start, end, "namespace", rules),
                [(d.total, d.buckets, d.items, d.projects)
                 for d in budget_drivers.drivers_of([(b, start, end) for b in budgets], rules)],
                [budget_drivers.daily(b, rules, start, end) for b in budgets]]

        assert real(start, end, rules)[1], "the month is not read from the stored days"
        stored_figures = figures()
        monkeypatch.setattr(allocation, "stored_days", lambda s, e, r: (real(s, e, r)[0], False))
        computed_figures = figures()
        monkeypatch.setattr(allocation, "stored_days", real)
        assert_same(stored_figures, computed_figures, str(month))
    return len(months)


def assert_same(left: object, right: object, where: str) -> None:
    """Equal, frames by value (Decimal exactly; floats to 1e-9), lists and dicts item by item."""
    if isinstance(left, pd.DataFrame):
        pd.testing.assert_frame_equal(left.reset_index(drop=True), right.reset_index(drop=True),
                                      check_dtype=False, rtol=1e-9, obj=where)
    elif isinstance(left, (list, tuple)):
        assert len(left) == len(right), where
        for number, (a, b) in enumerate(zip(left, right)):
            assert_same(a, b, f"{where}[{number}]")
    elif isinstance(left, dict):
        assert left.keys() == right.keys(), where
        for key in left:
            assert_same(left[key], right[key], f"{where}.{key}")
    elif isinstance(left, float):
        assert left == pytest.approx(right, rel=1e-9), where
    else:
        assert left == right, where


def test_stored_allocation_equals_the_macro_on_the_sample(demo_warehouse: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    assert assert_stored_allocation_is_computed(monkeypatch) >= 2
    node = wh.query("SELECT count(*) AS n FROM bill_allocation_days WHERE rule = 'node GPU-hours share'")
    assert node["n"][0] > 0  # the sample's nodes are split, so the split lines' path is compared


def test_stored_allocation_equals_the_macro_on_a_fleet_like_warehouse(warehouse: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import fleet_warehouse

    fleet_warehouse.build(warehouse, scale=0.01, days=3)
    assert assert_stored_allocation_is_computed(monkeypatch) >= 1
    buckets = set(wh.query("SELECT DISTINCT bucket FROM bill_allocation_days")["bucket"])
    assert {"training", "idle_gpu", "unallocated", "shared"} <= buckets
