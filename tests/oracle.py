"""An independent oracle for the allocation of the bill and the idle GPU figures.

Plain Python over the input files (the sample's runs.jsonl, serving_windows.jsonl.gz,
gpu_traces/*.csv[.gz], billing/*.csv[.gz] and the settings: ingest/defaults.toml overlaid with
mlcost.toml), standard library only, and NO project code: nothing here imports ingest, metrics,
outputs, app or mlcost. The rules are the written ones (docs/allocation.md, docs/schema.md,
README "GPU power traces" and "Allocation", ingest/defaults.toml), implemented a second way:

- time is whole seconds since 1970 and intervals are [start, end) pairs: the program cuts GPU
  time into UTC minutes and SQL windows; here idle and run time are interval sets, subtracted and
  intersected with each bill line's charge period directly;
- money is exact: a line's pieces are Fractions of its EffectiveCost, summed exactly, and only
  rounded when compared (the program rounds each piece to 12 decimals; the difference is far
  below a cent).

What the oracle does not do (not in the sample, raises instead of guessing): several runs sharing
one GPU at the same time (the documented per-minute split), runs that name hosts but no GPUs
(MLflow/W&B/Slurm imports), currencies other than the lines' own (it never adds across them).

Entry point: `Oracle.of(files)` (or `sample()`), then `.allocation(start, end)` for a period's
buckets, nodes, teams and projects, and `.idle(start, end)` for idle GPU-hours. Both take UTC
datetimes or dates; a period is [start, end).
"""
from __future__ import annotations

import bisect
import csv
import gzip
import io
import json
import re
import tomllib
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from functools import lru_cache
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE_DIR = REPO_ROOT / "sample_data"
DEFAULTS = REPO_ROOT / "ingest" / "defaults.toml"
BUCKETS = ("training", "serving", "idle_gpu", "shared", "unallocated")
SAMPLE_MONTHS = ("2026-08", "2026-09", "2026-10", "2026-11")

Interval = tuple[int, int]


# --- reading the files ---------------------------------------------------------------------------

def _open_text(path: Path):
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path), encoding="utf-8", newline="")
    return path.open(encoding="utf-8", newline="")


def epoch_s(value: object) -> int:
    """Seconds since 1970 of an ISO-8601 time ('Z', an offset, or none = UTC) or epoch seconds."""
    if isinstance(value, (int, float)):
        return int(value)
    text = str(value).strip().replace(" ", "T", 1)
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    whole = moment.timestamp()
    assert whole == int(whole), f"sub-second time {value!r}: the oracle works in whole seconds"
    return int(whole)


def utc(value: date | datetime) -> int:
    """Seconds since 1970 of a UTC date (its midnight) or an aware datetime."""
    if not isinstance(value, datetime):
        value = datetime(value.year, value.month, value.day, tzinfo=timezone.utc)
    return int(value.timestamp())


def month_bounds(month: str) -> tuple[date, date]:
    """'2026-11' -> (2026-11-01, 2026-12-01)."""
    year, number = map(int, month.split("-"))
    first = date(year, number, 1)
    return first, (first + timedelta(days=32)).replace(day=1)


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def settings(path: Path | None) -> dict:
    """ingest/defaults.toml with the keys of `path` (a mlcost.toml) over it."""
    found = tomllib.loads(DEFAULTS.read_text())
    if path is not None and path.exists():
        found = _merge(found, tomllib.loads(path.read_text()))
    return found


@dataclass(frozen=True)
class Run:
    run_id: str
    project: str | None
    team: str | None
    start: int
    end: int
    host: str | None
    gpu_uuids: tuple[str, ...]
    gpu_indices: tuple[int, ...]
    tags: dict


def read_runs(path: Path) -> dict[str, Run]:
    runs = {}
    with _open_text(path) as handle:
        for text in handle:
            if not text.strip():
                continue
            r = json.loads(text)
            start = epoch_s(r["start_time"])
            end = epoch_s(r["end_time"]) if r.get("end_time") is not None else \
                start + round(float(r["duration_hours"]) * 3600)
            runs[r["run_id"]] = Run(r["run_id"], r.get("project"), r.get("team"), start, end, r.get("host"),
                                    tuple(r.get("gpu_uuids") or ()), tuple(r.get("gpu_indices") or ()),
                                    dict(r.get("tags") or {}))
    return runs


@dataclass(frozen=True)
class Window:
    service: str
    version: str
    start: int
    end: int
    cost_usd: Decimal | None


def read_windows(path: Path | None, prices: dict) -> list[Window]:
    """Serving windows; a window without cost_usd is priced as README says: the catalog's
    instance price x replicas x hours (else none)."""
    if path is None:
        return []
    found = []
    with _open_text(path) as handle:
        for text in handle:
            if not text.strip():
                continue
            w = json.loads(text)
            start, end = epoch_s(w["window_start"]), epoch_s(w["window_end"])
            cost = w.get("cost_usd")
            if cost is not None:
                cost = Decimal(str(cost))
            elif w.get("instance_type") in prices:
                cost = Decimal(str(prices[w["instance_type"]])) * int(w.get("replicas") or 1) \
                    * Decimal(end - start) / 3600
            found.append(Window(w["service"], w["model_version"], start, end, cost))
    return found


@dataclass
class Gpu:
    host: str
    index: int
    uuid: str | None = None
    times: list[int] = field(default_factory=list)
    utils: list[float | None] = field(default_factory=list)
    powers: list[float | None] = field(default_factory=list)


def read_traces(paths: list[Path]) -> dict[tuple[str, int], Gpu]:
    """mlcost collector CSVs: per (host, gpu_index), samples in time order (a sample loaded twice
    keeps the last one read). The host is the file's column, else the file name up to '_'."""
    samples: dict[tuple[str, int], dict[int, tuple]] = defaultdict(dict)
    uuids: dict[tuple[str, int], str] = {}
    for path in paths:
        with _open_text(path) as handle:
            for row in csv.DictReader(handle):
                host = row.get("host") or path.name.split("_")[0]
                key = (host, int(row["gpu_index"]))
                util = float(row["gpu_util_pct"]) if row.get("gpu_util_pct") not in (None, "") else None
                power = float(row["power_w"]) if row.get("power_w") not in (None, "") else None
                samples[key][epoch_s(row["timestamp"])] = (util, power)
                if row.get("gpu_uuid"):
                    uuids[key] = row["gpu_uuid"]
    gpus = {}
    for key, by_time in samples.items():
        gpu = Gpu(*key, uuid=uuids.get(key))
        for moment in sorted(by_time):
            gpu.times.append(moment)
            gpu.utils.append(by_time[moment][0])
            gpu.powers.append(by_time[moment][1])
        gpus[key] = gpu
    return gpus


@dataclass(frozen=True)
class Line:
    key: str
    cost: Decimal | None
    currency: str
    start: int
    end: int | None
    category: str             # lower case: usage, tax, credit, purchase, adjustment
    description: str
    service_name: str
    resource_id: str
    resource_name: str
    tags: dict


def read_bill(paths: list[Path]) -> list[Line]:
    """FOCUS 1.0 CSV lines (the sample's format)."""
    lines = []
    for path in paths:
        with _open_text(path) as handle:
            for number, row in enumerate(csv.DictReader(handle), start=2):
                cost = row.get("EffectiveCost")
                lines.append(Line(
                    key=row.get("x_LineItemId") or f"{path.name}:{number}",
                    cost=Decimal(cost) if cost not in (None, "") else None,
                    currency=row["BillingCurrency"], start=epoch_s(row["ChargePeriodStart"]),
                    end=epoch_s(row["ChargePeriodEnd"]) if row.get("ChargePeriodEnd") else None,
                    category=row["ChargeCategory"].strip().lower(),
                    description=row.get("ChargeDescription") or "", service_name=row.get("ServiceName") or "",
                    resource_id=row.get("ResourceId") or "", resource_name=row.get("ResourceName") or "",
                    tags=json.loads(row["Tags"]) if row.get("Tags") else {}))
    return lines


# --- interval sets (sorted, disjoint [start, end) pairs) ------------------------------------------

def union(intervals: list[Interval]) -> list[Interval]:
    out: list[list[int]] = []
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(a, b) for a, b in out]


def subtract(intervals: list[Interval], minus: list[Interval]) -> list[Interval]:
    """`intervals` less `minus` (both sorted and disjoint)."""
    out, j = [], 0
    for start, end in intervals:
        while j < len(minus) and minus[j][1] <= start:
            j += 1
        k, cursor = j, start
        while k < len(minus) and minus[k][0] < end:
            if minus[k][0] > cursor:
                out.append((cursor, minus[k][0]))
            cursor = max(cursor, minus[k][1])
            k += 1
        if cursor < end:
            out.append((cursor, end))
    return out


def seconds_within(intervals: list[Interval], start: int, end: int) -> int:
    """Seconds of a sorted disjoint interval set inside [start, end)."""
    i = bisect.bisect_right(intervals, (start, start)) - 1
    i = max(i, 0)
    total = 0
    while i < len(intervals) and intervals[i][0] < end:
        a, b = intervals[i]
        total += max(0, min(b, end) - max(a, start))
        i += 1
    return total


# --- the idle rule ---------------------------------------------------------------------------------

def idle_intervals(gpu: Gpu, gpu_settings: dict) -> tuple[list[Interval], list[Interval]]:
    """(idle, covered) time of one GPU by the documented rule: each sample stands for the time up
    to the GPU's next sample, or, when that is more than max_gap_s away (or there is none), for as
    long as the interval before it (none when that too is a hole). Idle: a sample at or under
    idle_util_max_pct (and idle_power_max_w when it is not 0) inside a run of such samples,
    unbroken by a hole, whose intervals add up to idle_min_s or more."""
    max_gap, util_max = gpu_settings["max_gap_s"], gpu_settings["idle_util_max_pct"]
    power_max, min_s = gpu_settings.get("idle_power_max_w") or 0, gpu_settings["idle_min_s"]
    times, n = gpu.times, len(gpu.times)
    spans, lows = [], []
    for i in range(n):
        next_s = times[i + 1] - times[i] if i + 1 < n else None
        prev_s = times[i] - times[i - 1] if i > 0 else None
        if next_s is not None and next_s <= max_gap:
            length = next_s
        elif prev_s is not None and prev_s <= max_gap:
            length = prev_s
        else:
            length = 0
        spans.append((times[i], times[i] + length))
        util, power = gpu.utils[i], gpu.powers[i]
        lows.append(util is not None and util <= util_max
                    and (not power_max or (power is not None and power <= power_max)))
    idle: list[Interval] = []
    i = 0
    while i < n:  # stretches: samples in a row, all low or all not, unbroken by a hole
        j = i + 1
        while j < n and lows[j] == lows[i] and times[j] - times[j - 1] <= max_gap:
            j += 1
        if lows[i] and sum(b - a for a, b in spans[i:j]) >= min_s:
            idle.extend(spans[i:j])
        i = j
    return union(idle), union(spans)


# --- the oracle ------------------------------------------------------------------------------------

@dataclass
class Node:
    """A GPU node's figures in a period (one billing currency)."""
    billed: Fraction = Fraction(0)
    gpu_seconds: int = 0
    training: Fraction = Fraction(0)
    idle_gpu: Fraction = Fraction(0)
    unallocated: Fraction = Fraction(0)
    idle_gpu_seconds: int = 0

    @property
    def gpu_hours(self) -> Fraction:
        return Fraction(self.gpu_seconds, 3600)

    @property
    def idle_gpu_hours(self) -> Fraction:
        return Fraction(self.idle_gpu_seconds, 3600)

    @property
    def rate_per_gpu_hour(self) -> Fraction | None:
        return self.billed / self.gpu_hours if self.gpu_seconds else None


@dataclass
class Allocation:
    """One period's allocation, per billing currency: amounts as exact Fractions."""
    billed: dict[str, Fraction]
    lines: dict[str, int]
    buckets: dict[str, dict[str, Fraction]]
    by_team: dict[str, dict[str, Fraction]]
    by_project: dict[str, dict[str, Fraction]]
    by_team_bucket: dict[str, dict[tuple[str, str], Fraction]]
    by_run: dict[str, dict[str, Fraction]]
    by_version: dict[str, dict[tuple[str, str], Fraction]]
    nodes: dict[str, dict[str, Node]]
    # Every piece: (line id, bucket, rule, run_id or None, model version or None) -> amount; the
    # line id is the bill's x_LineItemId. Pieces of no amount (a node line with no idle) are left out.
    pieces: dict[tuple[str, str, str, str | None, str | None], Fraction]
    by_rule: dict[str, dict[tuple[str, str], Fraction]]    # (bucket, rule) -> amount


@dataclass(frozen=True)
class Idle:
    """Idle GPU-hours of a period over every traced GPU, all of them and those no run held."""
    observed_gpu_hours: Fraction
    idle_gpu_hours: Fraction
    unallocated_idle_gpu_hours: Fraction
    by_host: dict[str, tuple[Fraction, Fraction]]   # host -> (idle, unallocated idle) GPU-hours

    @property
    def allocated_idle_gpu_hours(self) -> Fraction:
        return self.idle_gpu_hours - self.unallocated_idle_gpu_hours


INSTANCE_TYPE = re.compile(r"\b[a-z][a-z0-9-]*\.(?:nano|micro|small|medium|metal|[0-9]*x?large)\b", re.I)


class Oracle:
    def __init__(self, runs: dict[str, Run], windows: list[Window], gpus: dict[tuple[str, int], Gpu],
                 lines: list[Line], config: dict):
        self.runs, self.windows, self.gpus, self.lines, self.config = runs, windows, gpus, lines, config
        rec, bill = config["reconciliation"], config["billing"]
        self.run_tag, self.service_tag = rec["run_id_tag"], rec["service_tag"]
        self.team_tag, self.project_tag = rec["team_tag"], rec["project_tag"]
        self.slack_s = int(rec["match_slack_minutes"] * 60)
        self.families = {f.lower() for f in bill["gpu_instance_families"]}
        self.words = [w.lower() for w in bill["gpu_sku_words"]]
        self.idle_of, self.covered_of = {}, {}
        for key, gpu in gpus.items():
            self.idle_of[key], self.covered_of[key] = idle_intervals(gpu, config["gpu"])
        # Which runs hold each traced GPU: by uuid where both sides know it, else host and index.
        self.held_by: dict[tuple[str, int], list[Run]] = defaultdict(list)
        for key, gpu in gpus.items():
            for run in runs.values():
                if run.end <= run.start:
                    continue
                if (gpu.uuid and gpu.uuid in run.gpu_uuids) or (
                        run.host == gpu.host and gpu.index in run.gpu_indices and (not gpu.uuid or not run.gpu_uuids)):
                    self.held_by[key].append(run)
            spans = sorted((r.start, r.end) for r in self.held_by[key])
            for (_, end), (start, _) in zip(spans, spans[1:]):
                if start < end:
                    raise NotImplementedError(f"runs share {key} at once: the oracle does not split minutes")
        for run in runs.values():
            if not run.gpu_uuids and not run.gpu_indices and run.host in {h for h, _ in gpus}:
                raise NotImplementedError(f"{run.run_id} names a traced host but no GPUs")
        self.held = {key: union([(r.start, r.end) for r in held]) for key, held in self.held_by.items()}
        self.unheld_idle = {key: subtract(idle, self.held.get(key, [])) for key, idle in self.idle_of.items()}

    @classmethod
    def of(cls, runs: Path | None = None, serving: Path | None = None, traces: list[Path] = (),
           bills: list[Path] = (), config: Path | None = None) -> "Oracle":
        found = settings(config)
        return cls(read_runs(runs) if runs else {},
                   read_windows(serving, found["prices"]["instance_usd_per_hour"]),
                   read_traces(list(traces)), read_bill(list(bills)), found)

    # --- idle ---------------------------------------------------------------------------------

    def idle(self, start: date | datetime, end: date | datetime) -> Idle:
        """Idle GPU-hours of every traced GPU in [start, end): all idle time, and the idle time
        no run held (the rest is 'allocated but idle': a run held the GPU)."""
        a, b = utc(start), utc(end)
        by_host: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        observed = 0
        for key in sorted(self.gpus):
            by_host[key[0]][0] += seconds_within(self.idle_of[key], a, b)
            by_host[key[0]][1] += seconds_within(self.unheld_idle[key], a, b)
            observed += seconds_within(self.covered_of[key], a, b)
        hours = {host: (Fraction(i, 3600), Fraction(u, 3600)) for host, (i, u) in by_host.items()}
        return Idle(Fraction(observed, 3600), sum((i for i, _ in hours.values()), Fraction(0)),
                    sum((u for _, u in hours.values()), Fraction(0)), hours)

    def idle_cost(self, start: date | datetime, end: date | datetime, currency: str = "USD") -> dict[str, Fraction]:
        """Idle GPU-hours of each billed node in [start, end) at that node's rate (its usage lines'
        effective cost over GPUs x hours billed in the period): 'all' idle and 'unallocated' idle."""
        idle, rates = self.idle(start, end), {}
        for host, node in self.allocation(start, end).nodes.get(currency, {}).items():
            rates[host] = node.rate_per_gpu_hour
        out = {"all": Fraction(0), "unallocated": Fraction(0)}
        for host, rate in rates.items():
            out["all"] += idle.by_host[host][0] * rate
            out["unallocated"] += idle.by_host[host][1] * rate
        return out

    # --- allocation -----------------------------------------------------------------------------

    def _run_of(self, line: Line) -> tuple[Run | None, str | None]:
        """Rule 1: a usage line's run, by its run tag, else by resource id and time overlap
        (widened by the slack on each side), the run it overlaps longest."""
        if line.category != "usage":
            return None, None
        tagged = line.tags.get(self.run_tag)
        if tagged in self.runs:
            return self.runs[tagged], "run tag"
        end = line.end if line.end is not None else line.start
        candidates = [r for r in self.runs.values()
                      if line.resource_id and r.tags.get("resource_id") == line.resource_id
                      and line.start < r.end + self.slack_s and end > r.start - self.slack_s]
        if not candidates:
            return None, None
        return max(candidates, key=lambda r: (min(end, r.end) - max(line.start, r.start), r.run_id)), \
            "resource id + time overlap"

    def _is_compute(self, line: Line) -> bool:
        """Rule 4's compute: an instance type named in the description, or GPU spend (an instance
        family of billing.gpu_instance_families, or a whole word of billing.gpu_sku_words)."""
        if INSTANCE_TYPE.search(line.description):
            return True
        text = line.description.lower()
        return any(re.search(r"\b" + re.escape(w) + r"\b", text) for w in self.words)

    @lru_cache(maxsize=64)
    def allocation(self, start: date | datetime, end: date | datetime) -> Allocation:
        a, b = utc(start), utc(end)
        lines = [l for l in self.lines if a <= l.start < b and l.cost is not None]
        gpus_of: dict[str, list[tuple[str, int]]] = defaultdict(list)  # hosts traced in the period
        for key, covered in self.covered_of.items():
            if seconds_within(covered, a, b) > 0:
                gpus_of[key[0]].append(key)
        billed: dict[str, Fraction] = defaultdict(Fraction)
        counts: dict[str, int] = defaultdict(int)
        buckets = defaultdict(lambda: {bucket: Fraction(0) for bucket in BUCKETS})
        by_team, by_project = defaultdict(lambda: defaultdict(Fraction)), defaultdict(lambda: defaultdict(Fraction))
        by_team_bucket, by_run = defaultdict(lambda: defaultdict(Fraction)), defaultdict(lambda: defaultdict(Fraction))
        by_version = defaultdict(lambda: defaultdict(Fraction))
        nodes: dict[str, dict[str, Node]] = defaultdict(dict)
        pieces: dict[tuple, Fraction] = defaultdict(Fraction)
        by_rule = defaultdict(lambda: defaultdict(Fraction))

        def book(line: Line, bucket: str, rule: str, amount: Fraction, run: Run | None = None,
                 version: str | None = None):
            currency = line.currency
            if amount:
                pieces[(line.key, bucket, rule, run.run_id if run else None, version)] += amount
                by_rule[currency][(bucket, rule)] += amount
            buckets[currency][bucket] += amount
            team = (run.team if run and run.team else None) or line.tags.get(self.team_tag) or "(no team)"
            project = (run.project if run and run.project else None) or line.tags.get(self.project_tag) \
                or "(no project)"
            by_team[currency][team] += amount
            by_project[currency][project] += amount
            by_team_bucket[currency][(team, bucket)] += amount
            if run is not None:
                by_run[currency][run.run_id] += amount
            if bucket == "serving":
                by_version[currency][(line.tags[self.service_tag], version or "(no windows)")] += amount

        for line in lines:
            cost = Fraction(line.cost)
            billed[line.currency] += cost
            counts[line.currency] += 1
            run, rule = self._run_of(line)
            if run is not None:
                book(line, "training", rule, cost, run)
                continue
            host = next((h for h in (line.resource_name, line.resource_id) if h in gpus_of), None)
            if (host is not None and line.category == "usage" and line.end is not None and line.end > line.start):
                self._split_node_line(line, host, gpus_of[host], cost, book, nodes)
                continue
            service = line.tags.get(self.service_tag)
            if line.category == "usage" and service is not None:
                self._split_serving_line(line, service, cost, book)
                continue
            if line.category != "usage":
                book(line, "shared", line.category, cost)
            elif line.tags.get(self.run_tag) is not None:
                book(line, "unallocated", "run tag names a run that is not loaded", cost)
            elif self._is_compute(line):
                book(line, "unallocated", "compute matching no run, node or service", cost)
            else:
                book(line, "shared", "shared service", cost)

        return Allocation(dict(billed), dict(counts), {c: dict(v) for c, v in buckets.items()},
                          {c: dict(v) for c, v in by_team.items()}, {c: dict(v) for c, v in by_project.items()},
                          {c: dict(v) for c, v in by_team_bucket.items()}, {c: dict(v) for c, v in by_run.items()},
                          {c: dict(v) for c, v in by_version.items()}, dict(nodes), dict(pieces),
                          {c: dict(v) for c, v in by_rule.items()})

    def _split_node_line(self, line: Line, host: str, gpus: list, cost: Fraction, book, nodes) -> None:
        """Rule 2: the node's capacity (its GPUs traced in the period x the line's seconds) split
        into each run's GPU-seconds on it, the idle GPU-seconds no run held, and the rest."""
        start, end = line.start, line.end
        capacity = len(gpus) * (end - start)
        run_seconds: dict[str, int] = defaultdict(int)
        idle = 0
        for key in gpus:
            for run in self.held_by.get(key, []):
                overlap = min(run.end, end) - max(run.start, start)
                if overlap > 0:
                    run_seconds[run.run_id] += overlap
            idle += seconds_within(self.unheld_idle[key], start, end)
        training = sum(run_seconds.values())
        rest = max(0, capacity - training - idle)
        total = training + idle + rest
        node = nodes[line.currency].setdefault(host, Node())
        node.billed += cost
        node.gpu_seconds += capacity
        node.idle_gpu_seconds += idle
        for run_id, seconds in sorted(run_seconds.items()):
            share = cost * seconds / total
            book(line, "training", "node GPU-hours share", share, self.runs[run_id])
            node.training += share
        node.idle_gpu += cost * idle / total
        node.unallocated += cost * rest / total
        book(line, "idle_gpu", "idle GPU-hours x node rate", cost * idle / total)
        book(line, "unallocated", "node GPU-hours without a run or idle reading", cost * rest / total)

    def _split_serving_line(self, line: Line, service: str, cost: Fraction, book) -> None:
        """Rule 3: a service's line split between its model versions by the cost of their windows
        overlapping the charge period (a window's cost x its share inside it), else by seconds."""
        end = line.end if line.end is not None else line.start
        by_cost: dict[str, Fraction] = defaultdict(Fraction)
        by_time: dict[str, int] = defaultdict(int)
        for w in self.windows:
            if w.service == service and w.start < end and w.end > line.start:
                overlap = min(end, w.end) - max(line.start, w.start)
                by_time[w.version] += overlap
                if w.cost_usd is not None:
                    by_cost[w.version] += Fraction(w.cost_usd) * overlap / (w.end - w.start)
        rule = "service tag, versions by window cost" if sum(by_cost.values()) > 0 \
            else "service tag, versions by window time"
        weights = by_cost if sum(by_cost.values()) > 0 else by_time
        total = sum(weights.values())
        if not weights or total == 0:
            book(line, "serving", "service tag, no serving windows in the charge period", cost)
            return
        for version, weight in sorted(weights.items()):
            book(line, "serving", rule, cost * weight / total, version=version)


@lru_cache(maxsize=1)
def sample() -> Oracle:
    """The oracle over sample_data/ with the sample organisation's mlcost.toml."""
    return Oracle.of(runs=SAMPLE_DIR / "runs.jsonl", serving=SAMPLE_DIR / "serving_windows.jsonl.gz",
                     traces=sorted((SAMPLE_DIR / "gpu_traces").glob("*.csv*")),
                     bills=sorted((SAMPLE_DIR / "billing").glob("*.csv*")), config=SAMPLE_DIR / "mlcost.toml")


# --- comparing with what a surface shows -----------------------------------------------------------

def dec(value: Fraction, places: int = 12) -> Decimal:
    """An exact Fraction as a Decimal rounded to `places` (half even)."""
    scaled = value * 10 ** places
    return Decimal(round(scaled)).scaleb(-places)


def cents(value: Fraction) -> Decimal:
    """Rounded to the cent, half away from zero, as finance rounds."""
    return dec(value, 6).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


def shown_as(value: Fraction, places: int = 2) -> set[Decimal]:
    """The values a figure may read when shown to `places` decimals: the rounded value, and its
    neighbour too when the exact figure lies within 1e-6 of a rounding boundary (a program that
    rounds pieces to 12 decimals may land on either side)."""
    step = Decimal(1).scaleb(-places)
    exact = dec(value, 12)
    return {(exact + d).quantize(step, rounding=ROUND_HALF_UP) for d in (Decimal("-1e-6"), 0, Decimal("1e-6"))}
