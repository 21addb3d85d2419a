"""The fleet dataset of issue 12, generated deterministically at a scale (1.0 = the issue's sizes).

At scale 1.0: GPU traces of 64 GPUs (16 hosts x 4) sampled every 10 s for 30 days in mlcost's
collector CSV, one file per host (16.6M rows), plus one file of 4 hosts' samples (4.1M rows,
the "one big file"); one month's FOCUS 1.0 bill of 1M hourly lines (amounts with up to 11
decimals, USD and EUR, tags as JSON); 100k training runs and 500k serving windows as JSONL.
Traces span 30 x scale days from 2026-10-01; runs, windows and the bill span the month, and
the runs on fleet hosts fall inside the traced span.

One random.Random(42) seeds one child generator per kind in a fixed order (numpy's generator,
seeded from it, draws the traces in columns); no wall clock, no set or hash order.
"""
from __future__ import annotations

import csv
import json
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv

GENERATOR_VERSION = 2  # bump when the files change, so cached datasets are regenerated
START_EPOCH_S = 1_790_812_800  # 2026-10-01T00:00:00Z
MONTH_S = 30 * 86400
SAMPLE_INTERVAL_S = 10
HOSTS = 16
GPUS_PER_HOST = 4
BIG_FILE_HOSTS = 4
FULL = {"bill_lines": 1_000_000, "runs": 100_000, "windows": 500_000}
TRACE_HEADER = ("timestamp", "host", "gpu_index", "gpu_uuid", "gpu_name", "power_w", "energy_mj",
                "gpu_util_pct", "mem_used_mib")
GPU_MODELS = (("NVIDIA A100-SXM4-40GB", 400.0, 55.0), ("NVIDIA L4", 72.0, 16.0))  # name, busy W max, idle W
PROJECTS = (("vision", "perception", "accuracy", "max"), ("search-ranking", "relevance", "ndcg@10", "max"),
            ("llm-finetune", "genai", "eval_loss", "min"), ("speech", "perception", "wer", "min"),
            ("recsys", "ads", "auc", "max"), ("forecasting", "supply", "mape", "min"))
FOCUS_HEADER = ("BilledCost", "EffectiveCost", "ListCost", "BillingCurrency", "ChargePeriodStart",
                "ChargePeriodEnd", "BillingPeriodStart", "BillingPeriodEnd", "ChargeCategory",
                "ChargeDescription", "ProviderName", "PublisherName", "InvoiceIssuerName", "ServiceName",
                "ServiceCategory", "SkuId", "ResourceId", "ResourceName", "RegionId", "SubAccountId",
                "SubAccountName", "ConsumedQuantity", "ConsumedUnit", "PricingCategory", "PricingQuantity",
                "PricingUnit", "Tags", "BillingAccountId", "BillingAccountName", "ChargeClass",
                "ChargeFrequency", "CommitmentDiscountId", "CommitmentDiscountType", "ContractedCost",
                "ContractedUnitPrice", "ListUnitPrice", "RegionName", "ResourceType", "SkuPriceId",
                "x_LineItemId")
# (service, description, sku, unit, USD per unit in 1e-11, GPU instance type or None)
BILL_ITEMS = (
    ("Amazon Elastic Compute Cloud", "On Demand Linux p4d.24xlarge Instance Hour", "P4D24XL", "Hrs",
     3_277_260_000_000, "p4d.24xlarge"),
    ("Amazon Elastic Compute Cloud", "On Demand Linux g5.12xlarge Instance Hour", "G512XL", "Hrs",
     567_200_000_000, "g5.12xlarge"),
    ("Amazon Elastic Compute Cloud", "On Demand Linux g6.12xlarge Instance Hour", "G612XL", "Hrs",
     460_160_000_000, "g6.12xlarge"),
    ("Amazon Simple Storage Service", "$0.023 per GB-Mo for storage", "S3STD", "GB-Mo", 3_194_444, None),
    ("AWS Data Transfer", "$0.09 per GB - first 10 TB / month data transfer out", "DTOUT", "GB",
     9_000_000_000, None),
    ("Amazon Elastic Block Store", "$0.08 per GB-month of gp3 provisioned storage", "EBSGP3", "GB-Mo",
     11_111_111, None),
)


@dataclass(frozen=True)
class Sizes:
    """Row counts and spans of the dataset at one scale."""

    scale: float
    trace_steps: int  # samples per GPU
    bill_lines: int
    runs: int
    windows: int

    @classmethod
    def at(cls, scale: float) -> "Sizes":
        steps = max(60, round(MONTH_S * scale / SAMPLE_INTERVAL_S))
        return cls(scale, steps, max(200, round(FULL["bill_lines"] * scale)),
                   max(50, round(FULL["runs"] * scale)), max(200, round(FULL["windows"] * scale)))

    @property
    def trace_rows(self) -> int:
        """Rows of the 16 per-host files together, before the few coverage holes are cut."""
        return HOSTS * GPUS_PER_HOST * self.trace_steps

    @property
    def trace_span_s(self) -> int:
        return self.trace_steps * SAMPLE_INTERVAL_S


def generate(folder: Path, scale: float) -> dict:
    """Write the dataset into `folder`; returns the manifest (files and their data rows)."""
    sizes = Sizes.at(scale)
    master = random.Random(42)
    seeds = {kind: master.getrandbits(64) for kind in ("traces", "bill", "runs", "serving")}
    folder.mkdir(parents=True, exist_ok=True)
    traces = folder / "traces"
    traces.mkdir(exist_ok=True)
    trace_rows = write_traces(traces, sizes, seeds["traces"])
    big = folder / "trace_4hosts.csv"
    big_rows = concatenate_csv([traces / f"{host_name(h)}.csv" for h in range(BIG_FILE_HOSTS)], big)
    manifest = {
        "generator_version": GENERATOR_VERSION, "scale": scale,
        "files": {
            "traces": {"path": "traces", "rows": sum(trace_rows), "files": HOSTS},
            "trace_big": {"path": big.name, "rows": big_rows, "files": 1},
            "bill": {"path": "focus_2026-10.csv", "files": 1,
                     "rows": write_bill(folder / "focus_2026-10.csv", sizes, seeds["bill"])},
            "runs": {"path": "runs.jsonl", "rows": write_runs(folder / "runs.jsonl", sizes, seeds["runs"]), "files": 1},
            "serving": {"path": "serving.jsonl",
                        "rows": write_serving(folder / "serving.jsonl", sizes, seeds["serving"]), "files": 1},
        },
    }
    for entry in manifest["files"].values():
        target = folder / entry["path"]
        entry["bytes"] = sum(p.stat().st_size for p in (target.glob("*.csv") if target.is_dir() else [target]))
    return manifest


def settings_toml(scale: float) -> str:
    """An mlcost.toml with budgets sized to the bill at this scale (some end over budget), so the
    Budgets, Alerts and Retrospective pages have work to do."""
    budgets = [("fleet", "all", 6_000_000, "USD"), ("fleet EUR", "all", 400_000, "EUR")]
    budgets += [(project, f"project:{project}", 900_000, "USD") for project, *_ in PROJECTS]
    budgets += [("team genai", "team:genai", 1_000_000, "USD")]
    return "".join(f'[[budgets]]\nname = "{name}"\nscope = "{scope}"\nperiod = "month"\n'
                   f'amount = {max(1, round(amount * scale))}\ncurrency = "{currency}"\n\n'
                   for name, scope, amount, currency in budgets)


def host_name(index: int) -> str:
    return f"fleet-node-{index + 1:02d}"


def gpu_uuid(rng: random.Random) -> str:
    digits = f"{rng.getrandbits(128):032x}"
    return f"GPU-{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"


def fleet_gpus() -> list[tuple[str, int, str, str]]:
    """(host, gpu_index, uuid, model) of every traced GPU, the same at every scale."""
    rng = random.Random(4242)
    return [(host_name(h), i, gpu_uuid(rng), GPU_MODELS[h % 2][0])
            for h in range(HOSTS) for i in range(GPUS_PER_HOST)]


def busy_mask(rng: np.random.Generator, steps: int) -> np.ndarray:
    """Alternating busy and idle stretches (busy ~3 h, idle ~1 h on average), True = busy."""
    lengths, busy, total = [], [], 0
    state = bool(rng.integers(0, 2))
    while total < steps:
        length = int(rng.exponential(1080 if state else 360)) + 6
        lengths.append(length)
        busy.append(state)
        total += length
        state = not state
    return np.repeat(np.array(busy), np.array(lengths))[:steps]


def write_traces(folder: Path, sizes: Sizes, seed: int) -> list[int]:
    """One collector CSV per host; one GPU per host has a 15-minute coverage hole. Rows per file."""
    rng = np.random.default_rng(seed)
    gpus = fleet_gpus()
    steps = sizes.trace_steps
    times = START_EPOCH_S + SAMPLE_INTERVAL_S * np.arange(steps, dtype=np.int64)
    stamps = np.datetime_as_string(times.astype("datetime64[s]"), unit="s", timezone="UTC")
    counts = []
    for h in range(HOSTS):
        name, busy_max_w, idle_w = GPU_MODELS[h % 2]
        columns: dict[str, list] = {c: [] for c in TRACE_HEADER}
        hole_gpu, hole_at = int(rng.integers(0, GPUS_PER_HOST)), int(rng.integers(0, max(1, steps - 90)))
        for i in range(GPUS_PER_HOST):
            busy = busy_mask(rng, steps)
            util = np.where(busy, rng.integers(55, 101, steps), rng.integers(0, 4, steps))
            power = np.where(busy, idle_w + (busy_max_w - idle_w) * util / 100 * rng.uniform(0.85, 1.0, steps),
                             idle_w + rng.uniform(-2.0, 2.0, steps)).round(2)
            joules_mj = (power * SAMPLE_INTERVAL_S * 1000).astype(np.int64)
            energy = int(rng.integers(10**10, 6 * 10**10)) + np.cumsum(joules_mj)
            mem = np.where(busy, rng.integers(8_000, 38_000, steps), 0)
            keep = np.ones(steps, dtype=bool)
            if i == hole_gpu and steps > 180:
                keep[hole_at:hole_at + 90] = False
            uuid = gpus[h * GPUS_PER_HOST + i][2]
            kept = int(keep.sum())
            for column, values in (("timestamp", stamps[keep]), ("host", np.full(kept, host_name(h))),
                                   ("gpu_index", np.full(kept, i)), ("gpu_uuid", np.full(kept, uuid)),
                                   ("gpu_name", np.full(kept, name)), ("power_w", power[keep]),
                                   ("energy_mj", energy[keep]), ("gpu_util_pct", util[keep]),
                                   ("mem_used_mib", mem[keep])):
                columns[column].append(np.asarray(values))
        merged = {c: np.concatenate(parts) for c, parts in columns.items()}
        # time-major, then GPU, as the collector writes: a stable sort keeps GPU order per time
        order = np.argsort(merged["timestamp"], kind="stable")
        table = pa.table({c: merged[c][order] for c in TRACE_HEADER})
        with (folder / f"{host_name(h)}.csv").open("wb") as out:
            out.write((",".join(TRACE_HEADER) + "\n").encode())
            pa_csv.write_csv(table, out, pa_csv.WriteOptions(include_header=False, quoting_style="none"))
        counts.append(table.num_rows)
    return counts


def concatenate_csv(parts: list[Path], target: Path) -> int:
    """One CSV of several with the same header (the first header kept); returns its data rows."""
    rows = 0
    with target.open("wb") as out:
        for index, part in enumerate(parts):
            with part.open("rb") as source:
                header = source.readline()
                if index == 0:
                    out.write(header)
                for line in source:
                    out.write(line)
                    rows += 1
    return rows


def decimal_text(units: int) -> str:
    """An amount held in 1e-11 units as decimal text without trailing zeros: 12.5, -0.00000000001."""
    sign = "-" if units < 0 else ""
    whole, fraction = divmod(abs(units), 10**11)
    digits = f"{fraction:011d}".rstrip("0")
    return f"{sign}{whole}.{digits}" if digits else f"{sign}{whole}"


def stamp(epoch_s: int) -> str:
    return np.datetime_as_string(np.datetime64(epoch_s, "s"), unit="s").replace("T", " ")


def write_bill(path: Path, sizes: Sizes, seed: int) -> int:
    """One month of hourly FOCUS lines over many resources; ~8 % in EUR, credits and tax. Lines."""
    rng = random.Random(seed)
    hours = MONTH_S // 3600
    per_hour = -(-sizes.bill_lines // hours)
    accounts = [(f"3188461{a:05d}", f"ml-{PROJECTS[a % len(PROJECTS)][1]}-{a}",
                 "EUR" if a % 12 == 11 else "USD") for a in range(24)]
    resources = []
    for r in range(per_hour):
        item = BILL_ITEMS[r % len(BILL_ITEMS)] if r % 7 else BILL_ITEMS[r % 3]
        project, team, *_ = PROJECTS[r % len(PROJECTS)]
        account = accounts[r % len(accounts)]
        prefix = "i-0" if item[5] else "vol-0" if "Block" in item[0] else "mlcost-"
        resources.append((item, project, team, account, f"{prefix}{rng.getrandbits(64):016x}"))
    period = (stamp(START_EPOCH_S), stamp(START_EPOCH_S + MONTH_S + 86400))
    written = 0
    with path.open("w", newline="") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(FOCUS_HEADER)
        for hour in range(hours):
            begin, end = stamp(START_EPOCH_S + hour * 3600), stamp(START_EPOCH_S + hour * 3600 + 3600)
            for item, project, team, account, resource in resources:
                if written == sizes.bill_lines:
                    return written
                service, description, sku, unit, unit_price, instance = item
                quantity_milli = 1000 if instance else rng.randrange(1, 500_000)
                billed = unit_price * quantity_milli // 1000
                roll = rng.random()
                category, pricing, effective = "Usage", "Standard", billed
                if roll < 0.004:
                    category, pricing, billed, effective = "Credit", None, -billed, -billed
                    description = "EDP credit"
                elif roll < 0.007:
                    category, pricing, effective = "Tax", None, billed
                    billed = effective = billed * 8 // 100
                    description = "Sales tax"
                elif instance and roll < 0.3:
                    pricing, effective = "Committed", billed * 60 // 100
                tags = {"project": project, "team": team}
                if instance and roll < 0.5:
                    tags["run_id"] = f"fleet-run-{rng.randrange(sizes.runs):06d}"
                written += 1
                writer.writerow((
                    decimal_text(billed), decimal_text(effective),
                    decimal_text(abs(billed) if category == "Usage" else billed),
                    account[2], begin, end, *period, category, description, "AWS", "AWS", "AWS", service,
                    "Compute" if instance else "Storage", sku, resource, resource, "us-east-1", account[0],
                    account[1], f"{quantity_milli / 1000:g}", unit, pricing or "", f"{quantity_milli / 1000:g}",
                    unit, json.dumps(tags, separators=(",", ":")), "318846120001", "fleet-org", "",
                    "Usage-Based", "", "", decimal_text(billed), decimal_text(unit_price),
                    decimal_text(unit_price), "US East (N. Virginia)", "Instance" if instance else "Volume",
                    f"{sku}.ST", f"li-202610-{written:07d}"))
    return written


def iso(epoch_s: float) -> str:
    return np.datetime_as_string(np.datetime64(int(epoch_s), "s"), unit="s") + "Z"


def write_runs(path: Path, sizes: Sizes, seed: int) -> int:
    """Training runs: 10 % on fleet GPUs inside the traced span, the rest cloud instances. Runs."""
    rng = random.Random(seed)
    gpus = fleet_gpus()
    with path.open("w") as out:
        for r in range(sizes.runs):
            project, team, metric, goal = PROJECTS[r % len(PROJECTS)]
            hours = round(rng.uniform(0.1, 12.0), 4)
            record = {"run_id": f"fleet-run-{r:06d}", "project": project, "team": team,
                      "owner": f"user{r % 37}", "model": f"{project}-model-{r % 5}",
                      "val_metric": round(rng.uniform(0.2, 0.95), 5), "val_metric_name": metric, "goal": goal,
                      "status": "completed" if rng.random() < 0.9 else "failed", "region": "us-east-1",
                      "throughput_examples_per_sec": round(rng.uniform(50, 3000), 2)}
            if r % 10 == 0:
                h = rng.randrange(HOSTS)
                count = rng.choice((1, 2, 4))
                first = rng.randrange(0, GPUS_PER_HOST - count + 1)
                span_h = sizes.trace_span_s / 3600
                hours = round(min(hours, span_h * 0.5), 4)
                begin = START_EPOCH_S + rng.uniform(0, max(0.0, span_h - hours)) * 3600
                chosen = gpus[h * GPUS_PER_HOST + first: h * GPUS_PER_HOST + first + count]
                record.update(host=host_name(h), instance_type="fleet-pool", gpu_type=chosen[0][3],
                              gpu_count=count, gpu_indices=[g[1] for g in chosen],
                              gpu_uuids=[g[2] for g in chosen], price_per_hour_usd=round(2.45 * count, 2))
            else:
                begin = START_EPOCH_S + rng.uniform(0, MONTH_S / 3600 - hours) * 3600
                record.update(host=f"ip-10-0-{r % 250}-{r // 250 % 250}", instance_type="g5.12xlarge",
                              gpu_type="NVIDIA A10G", gpu_count=4, price_per_hour_usd=5.672,
                              tags={"resource_id": f"i-0{rng.getrandbits(64):016x}"})
            record["start_time"] = iso(begin)
            record["end_time"] = iso(begin + hours * 3600)
            if r % 3 == 0:
                final = record["val_metric"]
                record["eval_history"] = [{"elapsed_s": round(hours * 3600 * k / 4, 1), "step": k * 500,
                                           "value": round(final * (0.7 + 0.075 * k), 5)} for k in range(1, 5)]
            out.write(json.dumps(record) + "\n")
    return sizes.runs


def write_serving(path: Path, sizes: Sizes, seed: int) -> int:
    """Serving windows of 12 services x 2 hosts (fewer services below 24k windows: a small
    fleet), back to back over the month; each service changes version twice. Windows."""
    rng = random.Random(seed)
    services = max(2, min(12, sizes.windows // 2000))
    streams = [(f"svc-{s:02d}", f"serve-{s:02d}-{h}") for s in range(services) for h in range(2)]
    slots = -(-sizes.windows // len(streams))
    window_s = max(60, MONTH_S // slots // 60 * 60)
    written = 0
    with path.open("w") as out:
        for slot in range(slots):
            start = START_EPOCH_S + slot * window_s
            version = 1 + 3 * slot // slots
            for s, (service, host) in enumerate(streams):
                if written == sizes.windows:
                    return written
                total = rng.randrange(200, 20_000) * window_s // 3600 + 1
                errors = rng.randrange(0, total // 50 + 1)
                record = {"window_start": iso(start), "window_end": iso(start + window_s), "service": service,
                          "model_version": f"v{version}", "host": host, "requests_total": total,
                          "requests_success": total - errors, "requests_error": errors,
                          "latency_ms_p50": round(rng.uniform(40, 400), 1),
                          "latency_ms_p95": round(rng.uniform(400, 1500), 1),
                          "latency_ms_p99": round(rng.uniform(1500, 4000), 1),
                          "throughput_rps": round(total / window_s, 6),
                          "avg_gpu_util": round(rng.uniform(5, 95), 1), "avg_cpu_util": round(rng.uniform(5, 80), 1),
                          "instance_type": "g5.12xlarge", "replicas": 1 + s % 3, "gpu_type": "NVIDIA A10G",
                          "gpu_count": 4 * (1 + s % 3)}
                if s % 2 == 0:  # half the services report their cost and energy; the rest are derived
                    record["cost_usd"] = round(5.672 * (1 + s % 3) * window_s / 3600 * (1 + 0.15 * (version == 3)), 6)
                    record["energy_kwh"] = round(rng.uniform(0.3, 1.2) * (1 + s % 3) * window_s / 3600, 6)
                out.write(json.dumps(record) + "\n")
                written += 1
    return written
