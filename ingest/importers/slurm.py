"""Slurm jobs from `sacct --parsable2` output as training runs (a parser of the file contract, so
`mlcost ingest` reads saved output too; `run_sacct` runs sacct where it is on the PATH).

Columns read: JobID, JobName, User, Account, Partition, AllocTRES, Start, End, Elapsed, State,
NodeList (others are ignored). Steps (`1234.batch`, `1234.0`) fold into their job, which holds the
allocation; the tasks of a job array (`1235_1`, `1235_2`) fold into one run `slurm-1235` from the
first start to the last end, their GPU-hours added up. GPUs are AllocTRES' `gres/gpu` count (the
model from a typed `gres/gpu:a100=4`); GPU-hours are GPUs x elapsed. The cost is GPU-hours x the
partition's rate ([slurm.partition_gpu_usd_per_hour]), else x the catalog's GPU-hour price of the
typed model, labelled `partition_rate` or `catalog`; a job still running has no cost yet. Times
without an offset (sacct prints the cluster's local time) are read in --tz.

NodeList (`gpu-node[01-03,07]`) is expanded with python-hostlist into the tag `nodes`, which joins
the job to its nodes' GPU traces (schema.sql run_gpus): sacct names no GPU indices, so a job takes
its share of each traced GPU of its nodes over its window (an estimate), for its GPU energy and,
when neither a rate nor the catalog priced it, its cost (ingest/derived/run_trace_costs.py).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

import hostlist

from ingest.engine import values
from ingest.engine.contract import BadValue, Lines, ParseContext, Parsed, Reject
from ingest.formats.runs.run_record import build_run, collect, run_totals, to_parsed
from ingest.settings import config

KIND = "slurm"
TABLES = ("runs", "run_evals")
FORMAT = "JobID,JobName,User,Account,Partition,AllocTRES,Start,End,Elapsed,State,NodeList"
REQUIRED = ("JobID", "AllocTRES", "Start", "State")
STATES = {"COMPLETED": "completed", "FAILED": "failed", "TIMEOUT": "failed", "OUT_OF_MEMORY": "failed",
          "NODE_FAIL": "failed", "CANCELLED": "failed", "BOOT_FAIL": "failed", "DEADLINE": "failed",
          "PREEMPTED": "preempted", "RUNNING": "running", "SUSPENDED": "running", "REQUEUED": "running",
          "COMPLETING": "running", "RESIZING": "running"}
NOT_STARTED = {"PENDING", "REQUEUE_HOLD", "REQUEUE_FED"}
UNKNOWN_TIMES = {"", "unknown", "none", "n/a"}
JOB_ID = re.compile(r"^(\d+)(?:_(\[[^\]]*\]|\d+))?(?:\+\d+)?(?:\.(.+))?$")
ELAPSED = re.compile(r"^(?:(\d+)-)?(\d+):(\d{2}):(\d{2})$")
MICRO_USD = Decimal("0.000001")
SACCT_TIMEOUT_S = 300


def sniff(name: str, head: str) -> bool:
    """sacct --parsable2 output: a `|`-separated header naming JobID and AllocTRES."""
    first = head.lstrip("\ufeff").split("\n", 1)[0].split("|")
    return "JobID" in first and "AllocTRES" in first


@dataclass
class _Job:
    """A job (or array) being folded: its allocation lines and what they add up to."""

    run_id: str
    line: int
    raw: str
    fields: dict[str, str]
    tasks: int = 0
    starts: list[datetime] = field(default_factory=list)
    ends: list[datetime | None] = field(default_factory=list)
    gpu_hours: float = 0.0
    gpus: int | None = None
    gpu_type: str | None = None
    states: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)


@dataclass
class SlurmParsed(Parsed):
    """Parsed runs plus what was folded or skipped, for the summary."""

    steps_folded: int = 0
    jobs_pending_skipped: int = 0
    gpu_hours_total: float = 0.0


def parse(lines: Lines, ctx: ParseContext, settings: config.Config | None = None) -> Parsed:
    """One run per job or job array; step lines fold into their job, pending jobs are counted, not loaded."""
    settings = settings if settings is not None else config.load()
    parsed = SlurmParsed()
    header: list[str] | None = None
    jobs: dict[str, _Job] = {}
    for number, text in lines:
        if not text.strip():
            continue
        fields = text.split("|")
        if header is None:
            header = [f.strip().lstrip("\ufeff") for f in fields]
            missing = [c for c in REQUIRED if c not in header]
            if missing:
                parsed.rejects.append(Reject(number, f"not sacct --parsable2 output: no {', '.join(missing)} column "
                                                     f"(run sacct --parsable2 --format={FORMAT})", text))
                break
            continue
        if len(fields) != len(header):
            parsed.rejects.append(Reject(number, f"has {len(fields)} fields, the header has {len(header)} "
                                                 "(a | inside a job name?)", text))
            continue
        row = dict(zip(header, (f.strip() for f in fields)))
        found = JOB_ID.match(row["JobID"])
        if not found:
            parsed.rejects.append(Reject(number, f"JobID {row['JobID']!r} is not a Slurm job id", text))
            continue
        job_id, task, step = found[1], found[2], found[3]
        if step is not None:
            parsed.steps_folded += 1  # the job's own line holds the allocation
            continue
        state = row["State"].split()[0].upper() if row["State"] else ""
        if state in NOT_STARTED or (task or "").startswith("["):
            parsed.jobs_pending_skipped += 1
            continue
        try:
            start = _time(row["Start"], "Start", ctx)
            if start is None:
                raise BadValue(f"no Start time (State {row['State']!r})")
            end = _time(row.get("End"), "End", ctx)
            elapsed_s = _elapsed(row.get("Elapsed"))
            if end is None and elapsed_s is not None and state not in ("RUNNING", "SUSPENDED", "COMPLETING"):
                end = start + timedelta(seconds=elapsed_s)
            if elapsed_s is None:
                elapsed_s = None if end is None else (end - start).total_seconds()
            gpus, gpu_type = _gpus(row["AllocTRES"])
        except BadValue as error:
            parsed.rejects.append(Reject(number, f"job {row['JobID']}: {error}", text))
            continue
        run_id = f"slurm-{job_id}"
        job = jobs.setdefault(run_id, _Job(run_id, number, text, row))
        job.tasks += 1
        job.starts.append(start)
        job.ends.append(end)
        job.states.append(state)
        if gpus is not None:
            job.gpus = max(job.gpus or 0, gpus)
        job.gpu_type = job.gpu_type or gpu_type
        if row.get("NodeList"):
            job.nodes.append(row["NodeList"])
        if gpus and elapsed_s is not None:
            job.gpu_hours += gpus * elapsed_s / 3600
    latest: dict = {}
    for job in jobs.values():
        try:
            run, evals = _run(job, ctx, settings)
        except BadValue as error:
            parsed.rejects.append(Reject(job.line, f"job {job.fields['JobID']}: {error}", job.raw))
            continue
        collect(latest, run, evals)
        parsed.accepted += 1
        parsed.gpu_hours_total += job.gpu_hours
    to_parsed(latest, parsed)
    parsed.rejects.sort(key=lambda r: r.line)
    return parsed


def totals(parsed: Parsed) -> dict:
    """The runs summary plus GPU-hours, and how many step lines were folded and pending jobs skipped."""
    return {**run_totals(parsed), "gpu_hours_total": round(getattr(parsed, "gpu_hours_total", 0.0), 6),
            "steps_folded": getattr(parsed, "steps_folded", 0),
            "jobs_pending_skipped": getattr(parsed, "jobs_pending_skipped", 0)}


def _run(job: _Job, ctx: ParseContext, settings: config.Config) -> tuple[dict, list[dict]]:
    fields = job.fields
    running = any(end is None for end in job.ends)
    states = set(job.states)
    status = ("running" if running or states & {"RUNNING", "SUSPENDED", "COMPLETING", "REQUEUED", "RESIZING"}
              else "failed" if any(STATES.get(s) == "failed" for s in states)
              else "preempted" if "PREEMPTED" in states else STATES.get(job.states[-1], None))
    if status is None:
        raise BadValue(f"State {fields['State']!r} is not a Slurm job state")
    partition = fields.get("Partition") or None
    rate = settings.slurm.rate(partition)
    source = "partition_rate"
    if rate is None:
        rate, source = settings.prices.gpu(job.gpu_type), "catalog"
    cost = None
    if rate is not None and not running and job.gpus:
        cost = (rate * Decimal(repr(job.gpu_hours))).quantize(MICRO_USD)
    nodes = sorted(set(job.nodes))
    hosts, unreadable = expand_nodes(nodes)
    single_host = hosts[0] if len(hosts) == 1 else None
    record = {
        "run_id": job.run_id, "status": status, "owner": fields.get("User") or None,
        "team": fields.get("Account") or None, "project": fields.get("JobName") or None,
        "start_time": min(job.starts).isoformat(), "end_time": None if running else max(job.ends).isoformat(),
        "gpu_count": job.gpus, "gpu_type": job.gpu_type, "host": single_host,
        "estimated_cost_usd": cost,
        "tags": {"partition": partition or "", "account": fields.get("Account", ""), "nodelist": ",".join(nodes),
                 "gpu_hours": repr(round(job.gpu_hours, 6)), "slurm_job_id": job.run_id.removeprefix("slurm-"),
                 # the nodes' GPU traces count for one window only: a folded array's tasks each had their own
                 **({"nodes": ",".join(hosts)} if hosts and job.tasks == 1 else {}),
                 **({"array_tasks": str(job.tasks)} if job.tasks > 1 else {})},
    }
    run, evals = build_run(record, job.line, ctx, KIND)
    flags = list(run["flags"] or [])
    if unreadable:
        flags.append(f"NodeList {unreadable!r} is not a Slurm host list: its nodes' GPU traces are not joined")
    if job.tasks > 1 and job.gpus:
        flags.append("array tasks ran in windows and on nodes of their own: no GPU energy from node traces")
    if cost is not None:
        run["cost_source"] = source
        if job.tasks > 1:
            flags.append(f"{job.tasks} array tasks: the cost is their GPU-hours added up, not span x GPUs")
    elif not running:
        flags.append("no cost: " + ("no GPUs allocated" if not job.gpus else
                                    f"no GPU-hour rate for partition {partition!r} in [slurm.partition_gpu_usd_per_hour]"
                                    " and no catalog price for its GPU model"))
    run["flags"] = flags or None
    return run, evals


def expand_nodes(node_lists: list[str]) -> tuple[list[str], str | None]:
    """The host names of Slurm host lists (`gpu-node[01-03,07]` -> gpu-node01, gpu-node02, …),
    sorted and distinct, and the first list that could not be read (None when all could)."""
    hosts: set[str] = set()
    for text in node_lists:
        if text.strip().lower() in ("", "none", "none assigned", "(null)"):
            continue
        try:
            hosts.update(h for h in hostlist.expand_hostlist(text.strip()) if h)
        except hostlist.BadHostlist:
            return sorted(hosts), text
    return sorted(hosts), None


def _time(text: str | None, name: str, ctx: ParseContext) -> datetime | None:
    if text is None or text.strip().lower() in UNKNOWN_TIMES:
        return None
    return values.timestamp(text, name, ctx.tz)


def _elapsed(text: str | None) -> float | None:
    """Seconds from sacct's [DD-]HH:MM:SS."""
    if not text or not text.strip():
        return None
    found = ELAPSED.match(text.strip())
    if not found:
        raise BadValue(f"Elapsed {text!r} is not [DD-]HH:MM:SS")
    days, hours, minutes, seconds = (int(found[1] or 0), int(found[2]), int(found[3]), int(found[4]))
    return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)


def _gpus(tres: str) -> tuple[int | None, str | None]:
    """GPUs and GPU model in AllocTRES (`cpu=8,gres/gpu=4,gres/gpu:a100=4,mem=64G`)."""
    count, typed, model = None, 0, None
    for item in filter(None, (part.strip() for part in tres.split(","))):
        key, _, value = item.partition("=")
        if key == "gres/gpu" or key.startswith("gres/gpu:"):
            number = values.integer(value, key)
            if number is None or number < 0:
                raise BadValue(f"AllocTRES {key}={value!r} is not a GPU count")
            if key == "gres/gpu":
                count = number
            else:
                typed += number
                model = model or key.split(":", 1)[1]
    return (count if count is not None else typed or None), model


def run_sacct(since: datetime, until: datetime | None, tz) -> str:
    """sacct's --parsable2 output for every user's allocations between since and until (given to
    sacct in the cluster's zone `tz`)."""
    since, until = since.astimezone(tz), until.astimezone(tz) if until else None
    binary = shutil.which("sacct")
    if binary is None:
        raise FileNotFoundError("sacct is not on the PATH: run on a Slurm login node, or save "
                                "`sacct --parsable2 --format=" + FORMAT + "` output and pass --file")
    command = [binary, "--allusers", "--parsable2", f"--format={FORMAT}",
               f"--starttime={since.strftime('%Y-%m-%dT%H:%M:%S')}"]
    if until is not None:
        command.append(f"--endtime={until.strftime('%Y-%m-%dT%H:%M:%S')}")
    result = subprocess.run(command, capture_output=True, text=True, timeout=SACCT_TIMEOUT_S,
                            env={**os.environ, "SLURM_TIME_FORMAT": "standard"})
    if result.returncode != 0:
        raise RuntimeError(f"sacct failed (exit {result.returncode}): {' '.join(result.stderr.split())[:300]}")
    return result.stdout
