#!/usr/bin/env python3
"""Generate the mlcost demo dataset: one coherent world written as four kinds of source file.

    python sample_data/generate.py              # rewrite the committed files in sample_data/
    python sample_data/generate.py --out DIR    # write the same files somewhere else

Outputs (see README.md beside this file):
    runs.jsonl                       training run summaries
    serving_windows.jsonl.gz         hourly serving metric windows
    gpu_traces/<host>_<YYYY-MM>.csv.gz   GPU power traces, mlcost collector format
    billing/focus_<YYYY-MM>.csv.gz   cloud bill lines, FinOps FOCUS 1.0 columns
    truth.json                       what the generator knows to be true
    .mlcostignore                    truth.json is not data: `mlcost ingest` of this folder skips it

Stdlib only and byte-for-byte deterministic: a single random.Random(42) seeds one child
generator per kind in a fixed order; times are integer epoch seconds (no wall clock); nothing
iterates a set or relies on hash order; floats only meet + - * / (no libm transcendental
functions, whose last bit may differ between platforms); numbers are written with fixed
rounding; money is Decimal; gzip headers carry mtime 0 and no file name.
"""

from __future__ import annotations

import argparse
import calendar
import csv
import gzip
import io
import json
import random
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

NOT_DATA = ("# Files of this folder that are not data: `mlcost ingest` of the folder skips them and says so\n"
            "# (a file named on its own is still read). One glob per line, relative to this folder.\n"
            "truth.json\n")

# --------------------------------------------------------------------------------------------
# Constants (units in names)
# --------------------------------------------------------------------------------------------

SEED = 42


def epoch_s(text: str) -> int:
    """Epoch seconds of an ISO-8601 UTC text like 2026-08-01T00:00:00Z."""
    return calendar.timegm(datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").timetuple())


SPAN_START_S = epoch_s("2026-08-01T00:00:00Z")
SPAN_END_S = epoch_s("2026-11-22T00:00:00Z")  # exclusive; "today" is 2026-11-22
MONTHS = ("2026-08", "2026-09", "2026-10", "2026-11")
MINUTE_S = 60
HOUR_S = 3_600
DAY_S = 86_400

TRACE_INTERVAL_S = 120  # one trace row per GPU every 2 minutes (60 s would not fit the size budget)
IDLE_UTIL_MAX_PCT = 5  # a sample is idle when gpu_util_pct <= 5
IDLE_SUSTAIN_MIN_S = 300  # ... and "sustained idle" when its idle stretch lasts >= 5 minutes

WORK_START_HOUR = 7  # node runs are started by people: weekdays, 07:00-19:00 UTC
WORK_END_HOUR = 19

REGION = "us-east-1"
REGION_NAME = "US East (N. Virginia)"

COLLECTOR_GAP_HOST = "gpu-node-1"
COLLECTOR_GAP_START_S = epoch_s("2026-09-19T01:00:00Z")  # no rows with start <= timestamp < end
COLLECTOR_GAP_END_S = epoch_s("2026-09-19T04:00:00Z")

COUNTER_RESET_HOST = "gpu-node-2"
COUNTER_RESET_GPU_INDEX = 1
COUNTER_RESET_NOT_BEFORE_S = epoch_s("2026-10-13T00:00:00Z")  # the first long speech run after this
COUNTER_RESET_OFFSET_IN_INTERVAL_S = 53  # the reset lands 53 s into a trace interval

GPU_A100 = "NVIDIA A100-SXM4-40GB"
GPU_L4 = "NVIDIA L4"
GPU_A10G = "NVIDIA A10G"
GPU_V100 = "Tesla V100-SXM2-16GB"


@dataclass(frozen=True)
class GpuType:
    name: str
    idle_power_w: tuple[float, float]  # range of a GPU's idle baseline
    idle_noise_w: float  # +- around the baseline (a 2-minute average is smooth)
    busy_base_power_w: float  # busy power = base + per_util * util
    busy_power_w_per_util_pct: float
    busy_noise_w: float
    max_power_w: float
    stall_extra_power_w: float  # allocated but idle: memory held, clocks up
    dip_extra_power_w: float  # checkpoint dips inside a busy run
    run_memory_mib: tuple[int, int]
    speed_vs_a100: float  # training throughput relative to one A100


GPU_TYPES = {
    GPU_A100: GpuType(
        name=GPU_A100,
        idle_power_w=(52.0, 58.0),
        idle_noise_w=0.25,
        busy_base_power_w=100.0,
        busy_power_w_per_util_pct=2.85,
        busy_noise_w=3.0,
        max_power_w=380.0,
        stall_extra_power_w=12.0,
        dip_extra_power_w=25.0,
        run_memory_mib=(18_000, 38_000),
        speed_vs_a100=1.0,
    ),
    GPU_L4: GpuType(
        name=GPU_L4,
        idle_power_w=(15.5, 17.5),
        idle_noise_w=0.15,
        busy_base_power_w=20.0,
        busy_power_w_per_util_pct=0.5,
        busy_noise_w=1.0,
        max_power_w=70.0,
        stall_extra_power_w=4.0,
        dip_extra_power_w=6.0,
        run_memory_mib=(9_000, 21_000),
        speed_vs_a100=0.36,
    ),
    # A10G and V100 only run cloud training and serving: no traces, only speed and serving power.
    GPU_A10G: GpuType(
        name=GPU_A10G,
        idle_power_w=(22.0, 26.0),
        idle_noise_w=0.3,
        busy_base_power_w=40.0,
        busy_power_w_per_util_pct=2.2,
        busy_noise_w=3.0,
        max_power_w=300.0,
        stall_extra_power_w=10.0,
        dip_extra_power_w=15.0,
        run_memory_mib=(10_000, 22_000),
        speed_vs_a100=0.42,
    ),
    GPU_V100: GpuType(
        name=GPU_V100,
        idle_power_w=(38.0, 44.0),
        idle_noise_w=0.3,
        busy_base_power_w=60.0,
        busy_power_w_per_util_pct=2.3,
        busy_noise_w=3.0,
        max_power_w=300.0,
        stall_extra_power_w=10.0,
        dip_extra_power_w=15.0,
        run_memory_mib=(8_000, 15_500),
        speed_vs_a100=0.55,
    ),
}

# Multi-GPU data-parallel speed-up over one GPU.
SCALING_BY_GPU_COUNT = {1: 1.0, 2: 1.9, 4: 3.6, 8: 6.8}


@dataclass(frozen=True)
class InstanceType:
    name: str
    price_per_hour_usd: Decimal  # AWS EC2 on-demand, Linux, us-east-1 (README cites the source)
    gpu_type: str
    gpu_count: int


INSTANCE_TYPES = {
    "p4d.24xlarge": InstanceType("p4d.24xlarge", Decimal("32.7726"), GPU_A100, 8),
    "p3.2xlarge": InstanceType("p3.2xlarge", Decimal("3.06"), GPU_V100, 1),
    "g5.xlarge": InstanceType("g5.xlarge", Decimal("1.006"), GPU_A10G, 1),
    "g5.12xlarge": InstanceType("g5.12xlarge", Decimal("5.672"), GPU_A10G, 4),
    "g6.xlarge": InstanceType("g6.xlarge", Decimal("0.8048"), GPU_L4, 1),
    "g6.12xlarge": InstanceType("g6.12xlarge", Decimal("4.6016"), GPU_L4, 4),
}

SPOT_PRICE_FRACTION = (0.30, 0.40)  # spot lines cost 60-70 % less than on-demand
INSTANCE_BOOT_S = (30, 120)  # a cloud run's instance lives a little longer than the run
INSTANCE_TEARDOWN_S = (10, 60)


@dataclass(frozen=True)
class Node:
    host: str
    gpu_type: str
    instance_type: str
    price_per_hour_usd: Decimal  # what the node costs the company per hour (billed)
    list_price_per_hour_usd: Decimal  # on-demand equivalent (FOCUS ListCost)
    pricing_category: str  # FOCUS PricingCategory of its bill lines
    team: str


NODES = (
    # Half a p4d.24xlarge (4 of 8 A100s) under a 1-year no-upfront commitment: $9.80/h
    # (an assumed internal pool rate, 40 % under the on-demand half-price of $16.3863/h).
    Node(
        host="gpu-node-1",
        gpu_type=GPU_A100,
        instance_type="p4d-pool",
        price_per_hour_usd=Decimal("9.80"),
        list_price_per_hour_usd=Decimal("16.3863"),
        pricing_category="Committed",
        team="ml-platform",
    ),
    Node(
        host="gpu-node-2",
        gpu_type=GPU_L4,
        instance_type="g6.12xlarge",
        price_per_hour_usd=Decimal("4.6016"),
        list_price_per_hour_usd=Decimal("4.6016"),
        pricing_category="Standard",
        team="ml-platform",
    ),
)
NODE_GPU_COUNT = 4


@dataclass(frozen=True)
class Model:
    name: str
    best_value: float  # metric reached with unlimited examples
    examples_per_s_per_a100: float
    min_gpus: int = 1


@dataclass(frozen=True)
class Project:
    name: str
    team: str
    owners: tuple[str, ...]
    metric_name: str
    goal: str  # "max" or "min"
    start_value: float  # metric with no training
    half_examples: float  # examples that close half the gap from start to best
    metric_noise: float
    bad_config_penalty: tuple[float, float]  # a bad hyper-parameter choice costs this much
    batch_size: int
    models: tuple[Model, ...]
    cloud_instances: tuple[tuple[str, int], ...]  # (instance type, weight)
    cloud_duration_h: tuple[float, float]
    cloud_weight: int


PROJECTS = (
    Project(
        name="vision",
        team="perception",
        owners=("alice", "bruno"),
        metric_name="accuracy",
        goal="max",
        start_value=0.55,
        half_examples=40e6,
        metric_noise=0.004,
        bad_config_penalty=(0.02, 0.06),
        batch_size=256,
        models=(
            Model("resnet50", best_value=0.790, examples_per_s_per_a100=2400.0),
            Model("convnext-tiny", best_value=0.818, examples_per_s_per_a100=1500.0),
            Model("vit-b16", best_value=0.834, examples_per_s_per_a100=1000.0),
        ),
        cloud_instances=(("g5.12xlarge", 3), ("p3.2xlarge", 2), ("p4d.24xlarge", 1)),
        cloud_duration_h=(3.0, 20.0),
        cloud_weight=3,
    ),
    Project(
        name="search-ranking",
        team="relevance",
        owners=("chen", "dana"),
        metric_name="ndcg@10",
        goal="max",
        start_value=0.30,
        half_examples=15e6,
        metric_noise=0.004,
        bad_config_penalty=(0.015, 0.04),
        batch_size=512,
        models=(
            Model("distilbert-ranker", best_value=0.452, examples_per_s_per_a100=4000.0),
            Model("bert-base-ranker", best_value=0.478, examples_per_s_per_a100=1600.0),
            Model("monot5-small", best_value=0.489, examples_per_s_per_a100=900.0),
        ),
        cloud_instances=(("g5.xlarge", 3), ("g6.xlarge", 2), ("p3.2xlarge", 1)),
        cloud_duration_h=(1.0, 6.0),
        cloud_weight=2,
    ),
    Project(
        name="llm-finetune",
        team="genai",
        owners=("emma", "farid"),
        metric_name="eval_loss",
        goal="min",
        start_value=2.60,
        half_examples=250e3,
        metric_noise=0.02,
        bad_config_penalty=(0.08, 0.25),
        batch_size=16,
        models=(
            Model("llama-3-8b-lora", best_value=1.38, examples_per_s_per_a100=8.0),
            Model("mistral-7b-lora", best_value=1.41, examples_per_s_per_a100=9.0),
            Model("llama-3-8b-full", best_value=1.29, examples_per_s_per_a100=3.5, min_gpus=4),
        ),
        cloud_instances=(("p4d.24xlarge", 3), ("g5.12xlarge", 2)),
        cloud_duration_h=(4.0, 20.0),
        cloud_weight=3,
    ),
    Project(
        name="speech",
        team="perception",
        owners=("gita", "hugo"),
        metric_name="wer",
        goal="min",
        start_value=0.30,
        half_examples=1.5e6,
        metric_noise=0.004,
        bad_config_penalty=(0.01, 0.04),
        batch_size=32,
        models=(
            Model("whisper-small-ft", best_value=0.082, examples_per_s_per_a100=220.0),
            Model("conformer-m", best_value=0.104, examples_per_s_per_a100=350.0),
        ),
        cloud_instances=(("g6.xlarge", 2), ("g5.xlarge", 2), ("g5.12xlarge", 1)),
        cloud_duration_h=(4.0, 24.0),
        cloud_weight=2,
    ),
)
PROJECT_BY_NAME = {p.name: p for p in PROJECTS}


@dataclass(frozen=True)
class Lane:
    """A stream of node runs that always use the same GPUs of one node."""

    host: str
    gpu_indices: tuple[int, ...]
    project: str
    models: tuple[str, ...]
    duration_h: tuple[float, float]
    gap_after_h: tuple[float, float]
    util_pct: tuple[int, int]
    first_ready: str
    throughput_factor: float = 1.0  # < 1 when the GPU starves (the right-size candidate)


NODE_LANES = (
    Lane(
        host="gpu-node-1",
        gpu_indices=(0, 1),
        project="llm-finetune",
        models=("llama-3-8b-lora", "mistral-7b-lora"),
        duration_h=(12.0, 48.0),
        gap_after_h=(24.0, 110.0),
        util_pct=(70, 97),
        first_ready="2026-08-03T08:00:00Z",
    ),
    Lane(
        host="gpu-node-1",
        gpu_indices=(0, 1, 2, 3),
        project="llm-finetune",
        models=("llama-3-8b-full",),
        duration_h=(12.0, 30.0),
        gap_after_h=(330.0, 520.0),
        util_pct=(80, 98),
        first_ready="2026-08-20T08:00:00Z",
    ),
    Lane(
        host="gpu-node-1",
        gpu_indices=(2,),
        project="vision",
        models=("resnet50", "convnext-tiny", "vit-b16"),
        duration_h=(6.0, 30.0),
        gap_after_h=(30.0, 140.0),
        util_pct=(65, 95),
        first_ready="2026-08-03T09:00:00Z",
    ),
    # The right-size candidate: small ranking models on an A100, data-loader bound.
    Lane(
        host="gpu-node-1",
        gpu_indices=(3,),
        project="search-ranking",
        models=("distilbert-ranker", "bert-base-ranker"),
        duration_h=(2.0, 8.0),
        gap_after_h=(60.0, 200.0),
        util_pct=(15, 35),
        first_ready="2026-08-04T09:00:00Z",
        throughput_factor=0.30,
    ),
    Lane(
        host="gpu-node-2",
        gpu_indices=(0, 1),
        project="speech",
        models=("whisper-small-ft", "conformer-m"),
        duration_h=(10.0, 40.0),
        gap_after_h=(24.0, 110.0),
        util_pct=(65, 95),
        first_ready="2026-08-03T08:30:00Z",
    ),
    Lane(
        host="gpu-node-2",
        gpu_indices=(2,),
        project="vision",
        models=("resnet50", "convnext-tiny"),
        duration_h=(5.0, 24.0),
        gap_after_h=(36.0, 150.0),
        util_pct=(62, 94),
        first_ready="2026-08-04T10:00:00Z",
    ),
    Lane(
        host="gpu-node-2",
        gpu_indices=(3,),
        project="search-ranking",
        models=("distilbert-ranker", "bert-base-ranker"),
        duration_h=(2.0, 7.0),
        gap_after_h=(48.0, 180.0),
        util_pct=(60, 92),
        first_ready="2026-08-05T09:00:00Z",
    ),
)
RIGHT_SIZE_HOST = "gpu-node-1"
RIGHT_SIZE_GPU_INDEX = 3

CLOUD_RUNS_PER_MONTH = {"2026-08": 8, "2026-09": 22, "2026-10": 26, "2026-11": 23}
# genai scales up cloud fine-tuning month over month: extra weight for llm-finetune
CLOUD_LLM_EXTRA_WEIGHT_BY_MONTH = {"2026-08": 0, "2026-09": 2, "2026-10": 3, "2026-11": 4}
CLOUD_SPOT_SHARE = 0.30  # of cloud runs not on p4d
UNTAGGED_CLOUD_RUNS = 3  # billed without tags: spend to be flagged
RUN_FAILED_SHARE = 0.07
NODE_RUN_PREEMPTED_SHARE = 0.03  # bumped by a higher-priority job on the pool
SPOT_RUN_PREEMPTED_SHARE = 0.30
BAD_CONFIG_SHARE = 0.18
EVAL_HISTORY_SHARE = 0.40
STALLED_RUNS = 6  # node runs with an allocated-but-idle stretch (stalled data loader)
STALL_SAMPLES = (16, 45)  # 32-90 minutes
CHECKPOINT_DIP_PROBABILITY = 0.004  # per busy sample: 1-2 samples at util <= 5
IDLE_BLIP_PROBABILITY = 0.003  # per idle sample: util 6-12 (health check)
OFFSET_TIME_SHARE = 0.05  # runs whose times are written with a +02:00 offset
EPOCH_TIME_SHARE = 0.04  # runs whose times are written as epoch seconds

# ----- serving --------------------------------------------------------------------------------

TRAFFIC_BY_UTC_HOUR = (
    0.55,
    0.48,
    0.42,
    0.38,
    0.36,
    0.38,
    0.45,
    0.55,
    0.68,
    0.80,
    0.90,
    0.97,
    1.00,
    1.02,
    1.05,
    1.08,
    1.10,
    1.08,
    1.02,
    0.95,
    0.86,
    0.77,
    0.68,
    0.60,
)
TRAFFIC_BY_WEEKDAY = (1.0, 1.0, 1.0, 1.0, 0.97, 0.72, 0.66)  # Monday first
SERVING_WINDOW_S = HOUR_S
SERVING_MISSING_COST_WINDOWS = 7
SERVING_INCIDENT = (
    "search-api",
    epoch_s("2026-10-08T13:00:00Z"),
    epoch_s("2026-10-08T16:00:00Z"),
    0.09,
)  # service, start, end, error rate
REGRESSION_MIN_PCT = 30.0
CLEAN_CHANGE_MAX_PCT = 5.0


@dataclass(frozen=True)
class Version:
    name: str
    start: str
    replicas: int
    latency_p50_ms: float
    capacity_rps_per_replica: float
    error_rate: float


@dataclass(frozen=True)
class Service:
    name: str
    team: str
    host: str
    instance_type: str
    peak_rps: float
    growth_per_30_days: float
    host_power_w: float  # per replica, besides its GPUs
    reports_energy: bool
    versions: tuple[Version, ...]


SERVICES = (
    Service(
        name="search-api",
        team="relevance",
        host="serve-1",
        instance_type="g6.xlarge",
        peak_rps=62.0,
        growth_per_30_days=0.045,
        host_power_w=60.0,
        reports_energy=True,
        versions=(
            Version(
                "v1.4",
                "2026-08-01T00:00:00Z",
                replicas=4,
                latency_p50_ms=38.0,
                capacity_rps_per_replica=26.0,
                error_rate=0.004,
            ),
            Version(
                "v1.5",
                "2026-09-16T10:00:00Z",
                replicas=4,
                latency_p50_ms=34.0,
                capacity_rps_per_replica=28.0,
                error_rate=0.003,
            ),
        ),
    ),
    Service(
        name="vision-tagger",
        team="perception",
        host="serve-2",
        instance_type="g5.xlarge",
        peak_rps=21.0,
        growth_per_30_days=0.01,
        host_power_w=70.0,
        reports_energy=False,  # its exporter has no power metering: energy_kwh is never sent
        versions=(
            Version(
                "v3.0",
                "2026-08-01T00:00:00Z",
                replicas=3,
                latency_p50_ms=86.0,
                capacity_rps_per_replica=9.0,
                error_rate=0.005,
            ),
            Version(
                "v3.1",
                "2026-10-06T14:00:00Z",
                replicas=3,
                latency_p50_ms=81.0,
                capacity_rps_per_replica=9.5,
                error_rate=0.004,
            ),
            # JUMP_VERSION: a bigger model rolled out on the sample's last day, needing twice the
            # replicas: its cost per 1,000 requests over the last 24 h is over 2x the 24 h before.
            Version(
                "v3.2",
                "2026-11-21T02:00:00Z",
                replicas=6,
                latency_p50_ms=97.0,
                capacity_rps_per_replica=4.8,
                error_rate=0.004,
            ),
        ),
    ),
    # v1.0 is a bigger model: it needs a third g5.12xlarge for the same traffic -> regression.
    Service(
        name="chat-assistant",
        team="genai",
        host="serve-3",
        instance_type="g5.12xlarge",
        peak_rps=3.6,
        growth_per_30_days=0.04,
        host_power_w=250.0,
        reports_energy=True,
        versions=(
            Version(
                "v0.9",
                "2026-08-01T00:00:00Z",
                replicas=2,
                latency_p50_ms=820.0,
                capacity_rps_per_replica=2.6,
                error_rate=0.006,
            ),
            Version(
                "v1.0",
                "2026-10-27T09:00:00Z",
                replicas=3,
                latency_p50_ms=1180.0,
                capacity_rps_per_replica=1.7,
                error_rate=0.011,
            ),
        ),
    ),
)

# The alert cases of issue 22 (the seed: "Service B cost per 1,000 requests increased 2x in the
# last 24 hours; new model version: ..." and "if QPS stays near zero for a long window, scale down
# or shut down instances"). Both draw from generators of their own (seeded by name), so every
# other figure of the sample stays as it was: the jump version's extra replica slots, and the
# near-idle service's fleet and windows.
JUMP_VERSION = ("vision-tagger", "v3.2")
IDLE_SERVICE = Service(
    name="doc-embedder",  # an internal batch-embedding endpoint: a week's backfill, then left running
    team="relevance",
    host="serve-4",
    instance_type="g6.xlarge",
    peak_rps=9.0,
    growth_per_30_days=0.0,
    host_power_w=40.0,
    reports_energy=True,
    versions=(
        Version(
            "v2.0",
            "2026-11-09T00:00:00Z",
            replicas=2,
            latency_p50_ms=45.0,
            capacity_rps_per_replica=12.0,
            error_rate=0.002,
        ),
    ),
)
IDLE_FROM_S = epoch_s("2026-11-16T12:00:00Z")  # the backfill ends; only health checks after it
IDLE_REQUESTS_PER_HOUR = (0, 4)  # health checks: at most 4 requests an hour (0.0011 requests/s)

# ----- billing --------------------------------------------------------------------------------

BILLING_ACCOUNT_ID = "318846120001"
BILLING_ACCOUNT_NAME = "mlcost-demo-org"
SUB_ACCOUNTS = {  # team -> (SubAccountId, SubAccountName)
    "perception": ("318846120347", "ml-perception"),
    "relevance": ("318846120461", "ml-relevance"),
    "genai": ("318846120582", "ml-genai"),
    "ml-platform": ("318846120603", "ml-platform"),
}
S3_PRICE_PER_GB_MONTH_USD = Decimal("0.023")  # S3 Standard, first 50 TB tier, us-east-1
S3_STORED_GB = {
    "vision": 58_000,
    "search-ranking": 21_000,
    "llm-finetune": 36_000,
    "speech": 27_000,
}  # on 2026-08-01
S3_GROWTH_PER_30_DAYS = 0.04
TRANSFER_PRICE_PER_GB_USD = Decimal("0.09")  # data transfer out to the internet, first 10 TB
TRANSFER_GB_PER_DAY = {
    "vision": 150.0,
    "search-ranking": 85.0,
    "llm-finetune": 280.0,
    "speech": 60.0,
}
TAX_RATE = Decimal("0.06")
CREDIT_USD = {
    "2026-08": Decimal(-1000),
    "2026-09": Decimal(-1000),
    "2026-10": Decimal(-800),
    "2026-11": Decimal(-800),
}
ADJUSTMENT = (
    "2026-10",
    "2026-09",
    Decimal("-42.18"),
    "Correction: re-rated September data transfer",
)  # (billed in, corrects, USD, text)
FOCUS_COLUMNS = (
    "BilledCost",
    "EffectiveCost",
    "ListCost",
    "BillingCurrency",
    "ChargePeriodStart",
    "ChargePeriodEnd",
    "BillingPeriodStart",
    "BillingPeriodEnd",
    "ChargeCategory",
    "ChargeDescription",
    "ProviderName",
    "PublisherName",
    "InvoiceIssuerName",
    "ServiceName",
    "ServiceCategory",
    "SkuId",
    "ResourceId",
    "ResourceName",
    "RegionId",
    "SubAccountId",
    "SubAccountName",
    "ConsumedQuantity",
    "ConsumedUnit",
    "PricingCategory",
    "PricingQuantity",
    "PricingUnit",
    "Tags",
    # further FOCUS 1.0 columns
    "BillingAccountId",
    "BillingAccountName",
    "ChargeClass",
    "ChargeFrequency",
    "CommitmentDiscountId",
    "CommitmentDiscountType",
    "ContractedCost",
    "ContractedUnitPrice",
    "ListUnitPrice",
    "RegionName",
    "ResourceType",
    "SkuPriceId",
    "x_LineItemId",
)
CHARGE_CATEGORY_ORDER = ("Usage", "Purchase", "Adjustment", "Credit", "Tax")

TRACE_HEADER = (
    "timestamp,host,gpu_index,gpu_uuid,gpu_name,power_w,energy_mj,gpu_util_pct,mem_used_mib"
)

# --------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------

PLUS_TWO = timezone(timedelta(hours=2))
Q10 = Decimal("1E-10")
CENT = Decimal("0.01")


def iso_z(s: int) -> str:
    return datetime.fromtimestamp(s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def iso_plus_two(s: int) -> str:
    return datetime.fromtimestamp(s, PLUS_TWO).strftime("%Y-%m-%dT%H:%M:%S+02:00")


def focus_time(s: int) -> str:
    return datetime.fromtimestamp(s, UTC).strftime("%Y-%m-%d %H:%M:%S")


def day_text(s: int) -> str:
    return datetime.fromtimestamp(s, UTC).strftime("%Y-%m-%d")


def month_of(s: int) -> str:
    return datetime.fromtimestamp(s, UTC).strftime("%Y-%m")


def month_start_s(month: str) -> int:
    return epoch_s(month + "-01T00:00:00Z")


def next_month_start_s(month: str) -> int:
    year, mon = int(month[:4]), int(month[5:])
    year, mon = (year + 1, 1) if mon == 12 else (year, mon + 1)
    return epoch_s(f"{year:04d}-{mon:02d}-01T00:00:00Z")


def weekday(s: int) -> int:
    """0 = Monday (1970-01-01 was a Thursday)."""
    return (s // DAY_S + 3) % 7


def ceil_to(s: int, step: int) -> int:
    return -(-s // step) * step


def noise(rng: random.Random, sigma: float) -> float:
    """Roughly normal noise with standard deviation sigma, from plain arithmetic."""
    return (rng.random() + rng.random() + rng.random() - 1.5) * 2.0 * sigma


def clamp(x, lo, hi):
    return lo if x < lo else min(x, hi)


def hex_id(rng: random.Random, digits: int) -> str:
    return f"{rng.getrandbits(4 * digits):0{digits}x}"


def gpu_uuid(rng: random.Random) -> str:
    h = hex_id(rng, 32)
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def money(value: Decimal) -> str:
    """A decimal string with at most 10 decimals and no trailing zeros."""
    q = value.quantize(Q10, rounding=ROUND_HALF_UP)
    text = format(q.normalize(), "f")
    return "0" if text in ("-0", "") else text


def round6(x: float) -> float:
    return round(x, 6)


def gzip_bytes(data: bytes) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, compresslevel=9, mtime=0) as gz:
        gz.write(data)
    return buf.getvalue()


def json_line(obj) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(", ", ": "))


# --------------------------------------------------------------------------------------------
# The world
# --------------------------------------------------------------------------------------------


@dataclass
class Gpu:
    host: str
    index: int
    uuid: str
    type_name: str


@dataclass
class ServingFleet:
    service: Service
    instance_ids: list[str]  # one per replica slot (slot r exists while replicas > r)
    gpu_uuids: list[list[str]]  # per replica slot


@dataclass
class World:
    node_gpus: dict[str, list[Gpu]]
    node_resource_ids: dict[str, str]
    commitment_id: str
    fleets: list[ServingFleet]
    sku_ids: dict[str, str]


def build_world(rng: random.Random) -> World:
    node_gpus = {}
    node_resource_ids = {}
    for n, node in enumerate(NODES, start=1):
        node_gpus[node.host] = [
            Gpu(node.host, i, gpu_uuid(rng), node.gpu_type) for i in range(NODE_GPU_COUNT)
        ]
        node_resource_ids[node.host] = f"i-node{n}" + hex_id(rng, 10)
    commitment_id = (
        f"arn:aws:ec2:{REGION}:{SUB_ACCOUNTS['ml-platform'][0]}:reserved-instances/"
        + gpu_uuid(rng)[4:]
    )
    fleets = []
    for service in SERVICES:
        slots = max(v.replicas for v in service.versions if (service.name, v.name) != JUMP_VERSION)
        per = INSTANCE_TYPES[service.instance_type].gpu_count
        fleets.append(
            ServingFleet(
                service,
                ["i-0" + hex_id(rng, 16) for _ in range(slots)],
                [[gpu_uuid(rng) for _ in range(per)] for _ in range(slots)],
            )
        )
    sku_keys = sorted(
        [f"BoxUsage:{name}" for name in INSTANCE_TYPES]
        + [f"SpotUsage:{name}" for name in INSTANCE_TYPES]
        + [
            "HeavyUsage:p4d-pool",
            "TimedStorage-ByteHrs",
            "DataTransfer-Out-Bytes",
            "Tax",
            "Credit",
            "Support-Business",
            "Adjustment",
        ]
    )
    alphabet = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
    sku_ids = {
        k: "".join(alphabet[rng.randrange(len(alphabet))] for _ in range(16)) for k in sku_keys
    }
    own = random.Random(f"{SEED}:alert-cases")  # the issue-22 cases: nothing above draws from it
    for fleet in fleets:
        per = INSTANCE_TYPES[fleet.service.instance_type].gpu_count
        while len(fleet.instance_ids) < max(v.replicas for v in fleet.service.versions):
            fleet.instance_ids.append("i-0" + hex_id(own, 16))
            fleet.gpu_uuids.append([gpu_uuid(own) for _ in range(per)])
    per = INSTANCE_TYPES[IDLE_SERVICE.instance_type].gpu_count
    slots = max(v.replicas for v in IDLE_SERVICE.versions)
    fleets.append(ServingFleet(IDLE_SERVICE, ["i-0" + hex_id(own, 16) for _ in range(slots)],
                               [[gpu_uuid(own) for _ in range(per)] for _ in range(slots)]))
    return World(node_gpus, node_resource_ids, commitment_id, fleets, sku_ids)


# --------------------------------------------------------------------------------------------
# Training runs
# --------------------------------------------------------------------------------------------


@dataclass
class Run:
    project: Project
    model: Model
    start_s: int
    end_s: int
    host: str
    instance_type: str
    price_per_hour_usd: Decimal
    gpu_type: str
    gpu_count: int
    node: Node | None = None
    gpu_indices: tuple[int, ...] = ()
    util_pct: tuple[int, int] = (60, 98)
    throughput_factor: float = 1.0
    capacity: str = "on-demand"  # on-demand | spot | pool
    status: str = "completed"
    resource_id: str = ""
    untagged: bool = False
    run_id: str = ""
    owner: str = ""
    time_format: str = "z"  # z | offset | epoch
    bad_config: bool = False
    sweep: str = ""
    git_commit: str = ""
    throughput: float = 0.0
    examples: int = 0
    val_metric: float | None = None
    eval_history: list | None = None
    stall: tuple[int, int] | None = None  # allocated-but-idle stretch [start, end)
    failure: str = ""

    @property
    def duration_s(self) -> int:
        return self.end_s - self.start_s


def next_work_start(rng: random.Random, t: int) -> int:
    """The earliest time >= t at which someone starts a run (weekday, working hours)."""
    while True:
        day = t - t % DAY_S
        sod = t - day
        if weekday(t) < 5 and WORK_START_HOUR * HOUR_S <= sod < WORK_END_HOUR * HOUR_S:
            return ceil_to(t, TRACE_INTERVAL_S)
        if weekday(t) < 5 and sod < WORK_START_HOUR * HOUR_S:
            t = day + WORK_START_HOUR * HOUR_S + rng.randint(0, 90) * MINUTE_S
        else:
            t = day + DAY_S + WORK_START_HOUR * HOUR_S + rng.randint(0, 90) * MINUTE_S


def schedule_node_runs(rng: random.Random) -> list[Run]:
    """Runs on the two nodes; a run starts only when all its GPUs are free, so none overlap."""
    nodes = {n.host: n for n in NODES}
    free_at = {(n.host, i): SPAN_START_S for n in NODES for i in range(NODE_GPU_COUNT)}
    next_ready = [epoch_s(lane.first_ready) for lane in NODE_LANES]
    done = [False] * len(NODE_LANES)
    runs = []
    while not all(done):
        k = min(
            (i for i in range(len(NODE_LANES)) if not done[i]), key=lambda i: (next_ready[i], i)
        )
        lane = NODE_LANES[k]
        project = PROJECT_BY_NAME[lane.project]
        ready = max([next_ready[k]] + [free_at[(lane.host, g)] for g in lane.gpu_indices])
        start = next_work_start(rng, ready)
        duration = ceil_to(int(rng.uniform(*lane.duration_h) * HOUR_S), TRACE_INTERVAL_S)
        if (
            lane.host == COLLECTOR_GAP_HOST
            and start < COLLECTOR_GAP_END_S
            and start + duration > COLLECTOR_GAP_START_S
        ):
            start = next_work_start(rng, COLLECTOR_GAP_END_S)  # keep the collector gap run-free
        end = start + duration
        if end > SPAN_END_S - 2 * HOUR_S:
            done[k] = True
            continue
        node = nodes[lane.host]
        model_name = rng.choice(lane.models)
        model = next(m for m in project.models if m.name == model_name)
        per_gpu = node.price_per_hour_usd / NODE_GPU_COUNT
        runs.append(
            Run(
                project,
                model,
                start,
                end,
                lane.host,
                node.instance_type,
                per_gpu * len(lane.gpu_indices),
                node.gpu_type,
                len(lane.gpu_indices),
                node=node,
                gpu_indices=lane.gpu_indices,
                util_pct=lane.util_pct,
                throughput_factor=lane.throughput_factor,
                capacity="pool",
            )
        )
        for g in lane.gpu_indices:
            free_at[(lane.host, g)] = end
        next_ready[k] = end + int(rng.uniform(*lane.gap_after_h) * HOUR_S)
    return runs


def cut_run_at_counter_reset(runs: list[Run]) -> tuple[Run, int]:
    """The GPU reset on gpu-node-2 kills the run using that GPU: it fails at the reset."""
    candidates = [
        r
        for r in runs
        if r.host == COUNTER_RESET_HOST
        and COUNTER_RESET_GPU_INDEX in r.gpu_indices
        and r.start_s >= COUNTER_RESET_NOT_BEFORE_S
        and r.duration_s >= 4 * HOUR_S
    ]
    run = min(candidates, key=lambda r: r.start_s)
    interval_start = run.start_s + ceil_to(int(run.duration_s * 0.45), TRACE_INTERVAL_S)
    reset_s = interval_start + COUNTER_RESET_OFFSET_IN_INTERVAL_S
    run.end_s = interval_start + TRACE_INTERVAL_S
    run.status = "failed"
    run.failure = "xid-79-gpu-reset"
    return run, reset_s


def schedule_cloud_runs(rng: random.Random) -> list[Run]:
    runs = []
    for month in MONTHS:
        weights = [
            (
                p,
                p.cloud_weight
                + (CLOUD_LLM_EXTRA_WEIGHT_BY_MONTH[month] if p.name == "llm-finetune" else 0),
            )
            for p in PROJECTS
        ]
        first_day = month_start_s(month)
        last_day = min(next_month_start_s(month), SPAN_END_S) - DAY_S
        for _ in range(CLOUD_RUNS_PER_MONTH[month]):
            project = weighted_choice(rng, weights)
            itype = INSTANCE_TYPES[
                weighted_choice(
                    rng, [(INSTANCE_TYPES[n], w) for n, w in project.cloud_instances]
                ).name
            ]
            models = [m for m in project.models if m.min_gpus <= itype.gpu_count]
            model = rng.choice(models)
            lo, hi = project.cloud_duration_h
            if itype.name == "p4d.24xlarge":
                lo, hi = lo * 0.5, hi * 0.6
            while True:
                day = first_day + rng.randint(0, (last_day - first_day) // DAY_S) * DAY_S
                if weekday(day) >= 5 and rng.random() < 0.8:
                    continue
                start = day + rng.randint(6 * HOUR_S, 21 * HOUR_S)
                end = start + int(rng.uniform(lo, hi) * HOUR_S)
                if start - INSTANCE_BOOT_S[1] > SPAN_START_S and end + 3600 < SPAN_END_S:
                    break
            spot = itype.name != "p4d.24xlarge" and rng.random() < CLOUD_SPOT_SHARE
            octets = (rng.randint(0, 15), rng.randint(2, 254))
            runs.append(
                Run(
                    project,
                    model,
                    start,
                    end,
                    f"ip-10-0-{octets[0]}-{octets[1]}",
                    itype.name,
                    itype.price_per_hour_usd,
                    itype.gpu_type,
                    itype.gpu_count,
                    capacity="spot" if spot else "on-demand",
                    resource_id="i-0" + hex_id(rng, 16),
                )
            )
    return runs


def weighted_choice(rng: random.Random, pairs):
    total = sum(w for _, w in pairs)
    x = rng.randrange(total)
    for item, w in pairs:
        if x < w:
            return item
        x -= w
    raise AssertionError("unreachable")


def metric_at(project: Project, model: Model, examples: float) -> float:
    """Diminishing returns: half the gap from start to best closes after half_examples."""
    gap = project.start_value - model.best_value
    return model.best_value + gap * project.half_examples / (project.half_examples + examples)


def worse(project: Project, amount: float) -> float:
    """A signed delta that makes the metric worse by amount."""
    return -amount if project.goal == "max" else amount


def finish_runs(rng: random.Random, runs: list[Run], reset_run: Run) -> None:
    """Status, throughput, examples, metric, eval history, owner, ids, time format."""
    runs.sort(key=lambda r: (r.start_s, r.host, r.gpu_indices))
    counters = {p.name: 0 for p in PROJECTS}
    for run in runs:
        project = run.project
        counters[project.name] += 1
        run.run_id = f"{project.name}-{counters[project.name]:04d}"
        run.owner = rng.choice(project.owners)
        run.git_commit = hex_id(rng, 7)
        x = rng.random()
        run.time_format = (
            "offset"
            if x < OFFSET_TIME_SHARE
            else "epoch"
            if x < OFFSET_TIME_SHARE + EPOCH_TIME_SHARE
            else "z"
        )
        if rng.random() < 0.25:
            run.sweep = f"{project.name}-sweep-{month_of(run.start_s)[5:]}"
        # status: a failed or preempted run stops early
        if run is not reset_run:
            x = rng.random()
            preempt_share = (
                SPOT_RUN_PREEMPTED_SHARE
                if run.capacity == "spot"
                else NODE_RUN_PREEMPTED_SHARE
                if run.capacity == "pool"
                else 0.0
            )
            if x < RUN_FAILED_SHARE:
                run.status = "failed"
                run.failure = rng.choice(("oom", "nan-loss", "data-error"))
            elif x < RUN_FAILED_SHARE + preempt_share:
                run.status = "preempted"
            if run.status != "completed":
                fraction = (
                    rng.uniform(0.1, 0.4) if run.status == "failed" else rng.uniform(0.3, 0.8)
                )
                step = TRACE_INTERVAL_S if run.node else 1
                run.end_s = run.start_s + max(step, ceil_to(int(run.duration_s * fraction), step))
        run.bad_config = rng.random() < BAD_CONFIG_SHARE
        gpu = GPU_TYPES[run.gpu_type]
        throughput = (
            run.model.examples_per_s_per_a100
            * gpu.speed_vs_a100
            * SCALING_BY_GPU_COUNT[run.gpu_count]
            * run.throughput_factor
            * rng.uniform(0.92, 1.08)
        )
        run.throughput = round(throughput, 2)
        run.examples = int(run.throughput * run.duration_s + 0.5)
        penalty = (
            worse(project, rng.uniform(*project.bad_config_penalty)) if run.bad_config else 0.0
        )
        final = (
            metric_at(project, run.model, run.examples) + penalty + noise(rng, project.metric_noise)
        )
        run.val_metric = None if run.status == "failed" else round(final, 4)
        if rng.random() < EVAL_HISTORY_SHARE:
            run.eval_history = eval_history(rng, run, penalty, final)


def eval_history(rng: random.Random, run: Run, penalty: float, final: float) -> list[dict]:
    project = run.project
    points = rng.randint(4, 10)
    history = []
    for i in range(1, points + 1):
        frac = i / points
        examples = run.examples * frac
        if i == points and run.val_metric is not None:
            value = run.val_metric
        elif i == points:
            value = round(final, 4)
        else:
            value = round(
                metric_at(project, run.model, examples)
                + penalty
                + noise(rng, project.metric_noise * 0.5),
                4,
            )
        history.append(
            {
                "elapsed_s": int(run.duration_s * frac),
                "step": int(examples / project.batch_size),
                "value": value,
            }
        )
    return history


def choose_stalls(rng: random.Random, runs: list[Run]) -> None:
    eligible = [
        r for r in runs if r.node and r.status == "completed" and r.duration_s >= 3 * HOUR_S
    ]
    for run in rng.sample(eligible, STALLED_RUNS):
        samples = run.duration_s // TRACE_INTERVAL_S
        length = rng.randint(*STALL_SAMPLES)
        first = rng.randint(samples // 5, samples - length - samples // 10)
        start = run.start_s + first * TRACE_INTERVAL_S
        run.stall = (start, start + length * TRACE_INTERVAL_S)


def mark_untagged(rng: random.Random, runs: list[Run]) -> None:
    eligible = [
        r for r in runs if not r.node and r.capacity == "on-demand" and r.status == "completed"
    ]
    for run in rng.sample(eligible, UNTAGGED_CLOUD_RUNS):
        run.untagged = True


def build_runs(rng: random.Random) -> tuple[list[Run], Run, int]:
    runs = schedule_node_runs(rng)
    reset_run, reset_s = cut_run_at_counter_reset(runs)
    runs += schedule_cloud_runs(rng)
    finish_runs(rng, runs, reset_run)
    choose_stalls(rng, runs)
    mark_untagged(rng, runs)
    return runs, reset_run, reset_s


def run_time(run: Run, s: int):
    if run.time_format == "epoch":
        return s
    if run.time_format == "offset":
        return iso_plus_two(s)
    return iso_z(s)


def run_record(run: Run, world: World) -> dict:
    tags = {"git_commit": run.git_commit}
    if run.sweep:
        tags["sweep"] = run.sweep
    if run.node is None:
        tags["capacity"] = run.capacity
        tags["resource_id"] = run.resource_id
    else:
        tags["pool"] = "gpu-pool"
    if run.failure:
        tags["failure"] = run.failure
    record = {
        "run_id": run.run_id,
        "project": run.project.name,
        "team": run.project.team,
        "owner": run.owner,
        "model": run.model.name,
        "start_time": run_time(run, run.start_s),
        "end_time": run_time(run, run.end_s),
        "duration_hours": round6(run.duration_s / HOUR_S),
        "instance_type": run.instance_type,
        "price_per_hour_usd": float(run.price_per_hour_usd),
        "estimated_cost_usd": float(estimated_cost(run)),
        "throughput_examples_per_sec": run.throughput,
        "examples": run.examples,
        "val_metric": run.val_metric,
        "val_metric_name": run.project.metric_name,
        "goal": run.project.goal,
        "status": run.status,
        "region": REGION,
        "host": run.host,
        "gpu_type": run.gpu_type,
        "gpu_count": run.gpu_count,
        **seed_fields(run),
    }
    if run.node is not None:
        gpus = world.node_gpus[run.host]
        record["gpu_uuids"] = [gpus[i].uuid for i in run.gpu_indices]
        record["gpu_indices"] = list(run.gpu_indices)
    record["tags"] = {k: tags[k] for k in sorted(tags)}
    if run.eval_history is not None:
        record["eval_history"] = run.eval_history
    return record


# Fields added for the run metrics (issue 22): the examples in one epoch of each project's
# training set, and the tokens in one example of the LLM project. Batch sizes vary around the
# project's own by a per-run generator seeded with the run id, so these fields draw nothing from
# the shared generators and every other figure of the sample stays as it was.
DATASET_EXAMPLES = {"vision": 1_281_167, "search-ranking": 532_761, "llm-finetune": 52_002, "speech": 281_241}
TOKENS_PER_EXAMPLE = {"llm-finetune": 512}
BATCH_FACTORS = (Decimal("0.5"), Decimal("1"), Decimal("1"), Decimal("2"))


def seed_fields(run: Run) -> dict:
    """batch_size, epochs (examples / the training set's examples, 2 places) and, for the LLM
    project, tokens_per_sec (examples/s x tokens per example), in the seed's spellings."""
    own = random.Random(f"{SEED}:{run.run_id}")
    fields = {"batch_size": int(run.project.batch_size * own.choice(BATCH_FACTORS))}
    dataset = DATASET_EXAMPLES.get(run.project.name)
    if dataset:
        fields["epochs"] = float((Decimal(run.examples) / dataset).quantize(CENT, ROUND_HALF_UP))
    tokens = TOKENS_PER_EXAMPLE.get(run.project.name)
    if tokens:
        fields["tokens_per_sec"] = round6(run.throughput * tokens)
    return fields


def estimated_cost(run: Run) -> Decimal:
    return (Decimal(run.duration_s) * run.price_per_hour_usd / HOUR_S).quantize(CENT, ROUND_HALF_UP)


# --------------------------------------------------------------------------------------------
# GPU traces
# --------------------------------------------------------------------------------------------


@dataclass
class GpuSeries:
    gpu: Gpu
    power_cw: list[int]  # centiwatts, constant over [t, t + interval)
    util_pct: list[int]
    mem_mib: list[int]
    counter_mj: list[int]  # energy counter reading at t


def sample_count() -> int:
    return (SPAN_END_S - SPAN_START_S) // TRACE_INTERVAL_S


def sample_index(s: int) -> int:
    return (s - SPAN_START_S) // TRACE_INTERVAL_S


def observed(host: str, t: int) -> bool:
    return not (host == COLLECTOR_GAP_HOST and COLLECTOR_GAP_START_S <= t < COLLECTOR_GAP_END_S)


def simulate_gpu(rng: random.Random, gpu: Gpu, runs: list[Run], reset_s: int | None) -> GpuSeries:
    kind = GPU_TYPES[gpu.type_name]
    n = sample_count()
    idle_base_w = rng.uniform(*kind.idle_power_w)
    power_cw, util, mem = [0] * n, [0] * n, [0] * n
    for k in range(n):  # unallocated idle
        if rng.random() < IDLE_BLIP_PROBABILITY:
            util[k] = rng.randint(6, 12)
            mem[k] = 310
            power_cw[k] = int((idle_base_w + 3.0 + noise(rng, kind.idle_noise_w)) * 100 + 0.5)
        else:
            util[k] = 0 if rng.random() < 0.85 else rng.randint(1, 3)
            power_cw[k] = int((idle_base_w + rng.uniform(-1, 1) * kind.idle_noise_w) * 100 + 0.5)
    for run in runs:  # this GPU's runs
        mean_util = rng.uniform(*run.util_pct)
        run_mem = (
            rng.randint(6_000, 9_000) if run.util_pct[1] < 50 else rng.randint(*kind.run_memory_mib)
        )
        low = 8 if run.util_pct[1] < 50 else 6
        dip_left = 0
        for k in range(sample_index(run.start_s), sample_index(run.end_s)):
            t = SPAN_START_S + k * TRACE_INTERVAL_S
            mem[k] = run_mem
            if run.stall and run.stall[0] <= t < run.stall[1]:
                util[k] = rng.randint(0, 2)
                watts = idle_base_w + kind.stall_extra_power_w + noise(rng, kind.idle_noise_w)
            elif dip_left > 0 or rng.random() < CHECKPOINT_DIP_PROBABILITY:
                dip_left = (rng.randint(1, 2) if dip_left == 0 else dip_left) - 1
                util[k] = rng.randint(1, 4)
                watts = idle_base_w + kind.dip_extra_power_w + noise(rng, kind.idle_noise_w)
            else:
                u = int(clamp(mean_util + noise(rng, 3.0) + 0.5, low, 100))
                util[k] = u
                watts = clamp(
                    kind.busy_base_power_w
                    + kind.busy_power_w_per_util_pct * u
                    + noise(rng, kind.busy_noise_w),
                    idle_base_w + 5.0,
                    kind.max_power_w,
                )
            power_cw[k] = int(watts * 100 + 0.5)
    counter = [0] * n
    energy_mj = rng.randint(1_000_000_000, 60_000_000_000)  # the GPU booted before August
    for k in range(n):
        t = SPAN_START_S + k * TRACE_INTERVAL_S
        if reset_s is not None and t < reset_s <= t + TRACE_INTERVAL_S:
            counter[k] = energy_mj
            energy_mj = power_cw[k] * (t + TRACE_INTERVAL_S - reset_s) * 10  # restarts near 0
            continue
        counter[k] = energy_mj
        energy_mj += power_cw[k] * TRACE_INTERVAL_S * 10  # cW * s * 10 = mJ
    return GpuSeries(gpu, power_cw, util, mem, counter)


def simulate_traces(
    rng: random.Random, world: World, runs: list[Run], reset_s: int
) -> list[GpuSeries]:
    series = []
    for node in NODES:
        for gpu in world.node_gpus[node.host]:
            mine = [r for r in runs if r.host == node.host and gpu.index in r.gpu_indices]
            reset = (
                reset_s
                if (node.host, gpu.index) == (COUNTER_RESET_HOST, COUNTER_RESET_GPU_INDEX)
                else None
            )
            series.append(simulate_gpu(rng, gpu, mine, reset))
    return series


def trace_files(series: list[GpuSeries]) -> dict[str, bytes]:
    """One gzip CSV per host per month, rows in time order, GPUs in index order."""
    files = {}
    for node in NODES:
        mine = [s for s in series if s.gpu.host == node.host]
        for month in MONTHS:
            lines = [TRACE_HEADER]
            first = sample_index(month_start_s(month))
            last = sample_index(min(next_month_start_s(month), SPAN_END_S))
            for k in range(first, last):
                t = SPAN_START_S + k * TRACE_INTERVAL_S
                if not observed(node.host, t):
                    continue
                stamp = iso_z(t)
                for s in mine:
                    cw = s.power_cw[k]
                    lines.append(
                        f"{stamp},{node.host},{s.gpu.index},{s.gpu.uuid},{s.gpu.type_name},"
                        f"{cw // 100}.{cw % 100:02d},{s.counter_mj[k]},{s.util_pct[k]},"
                        f"{s.mem_mib[k]}"
                    )
            files[f"gpu_traces/{node.host}_{month}.csv.gz"] = gzip_bytes(
                ("\n".join(lines) + "\n").encode()
            )
    return files


def idle_truth(series: list[GpuSeries]) -> list[dict]:
    """Per GPU per UTC day: observed seconds, idle seconds (util <= 5) plain and sustained >= 5 min."""
    out = []
    n = sample_count()
    for s in series:
        host = s.gpu.host
        sustained = [False] * n
        k = 0
        while k < n:  # mark maximal stretches of consecutive observed idle samples
            t = SPAN_START_S + k * TRACE_INTERVAL_S
            if not (observed(host, t) and s.util_pct[k] <= IDLE_UTIL_MAX_PCT):
                k += 1
                continue
            j = k
            while (
                j < n
                and observed(host, SPAN_START_S + j * TRACE_INTERVAL_S)
                and s.util_pct[j] <= IDLE_UTIL_MAX_PCT
            ):
                j += 1
            if (j - k) * TRACE_INTERVAL_S >= IDLE_SUSTAIN_MIN_S:
                for m in range(k, j):
                    sustained[m] = True
            k = j
        per_day = DAY_S // TRACE_INTERVAL_S
        for d in range(n // per_day):
            obs = idle = sus = 0
            for k in range(d * per_day, (d + 1) * per_day):
                if not observed(host, SPAN_START_S + k * TRACE_INTERVAL_S):
                    continue
                obs += TRACE_INTERVAL_S
                if s.util_pct[k] <= IDLE_UTIL_MAX_PCT:
                    idle += TRACE_INTERVAL_S
                if sustained[k]:
                    sus += TRACE_INTERVAL_S
            out.append(
                {
                    "host": host,
                    "gpu_index": s.gpu.index,
                    "gpu_uuid": s.gpu.uuid,
                    "date": day_text(SPAN_START_S + d * DAY_S),
                    "observed_s": obs,
                    "idle_s": idle,
                    "idle_sustained_s": sus,
                }
            )
    return out


def run_energy_truth(runs: list[Run], series: list[GpuSeries]) -> dict:
    by_gpu = {(s.gpu.host, s.gpu.index): s for s in series}
    out = {}
    for run in runs:
        if run.node is None:
            continue
        energy_mj = 0
        utils = []
        for g in run.gpu_indices:
            s = by_gpu[(run.host, g)]
            for k in range(sample_index(run.start_s), sample_index(run.end_s)):
                energy_mj += s.power_cw[k] * TRACE_INTERVAL_S * 10
                utils.append(s.util_pct[k])
        out[run.run_id] = {
            "host": run.host,
            "gpu_indices": list(run.gpu_indices),
            "start": iso_z(run.start_s),
            "end": iso_z(run.end_s),
            "energy_kwh": round6(energy_mj / 3.6e9),
            "mean_gpu_util_pct": round(sum(utils) / len(utils), 2),
        }
    return out


# --------------------------------------------------------------------------------------------
# Serving windows
# --------------------------------------------------------------------------------------------


@dataclass
class Window:
    service: Service
    version: Version
    start_s: int
    requests_total: int
    requests_success: int
    requests_error: int
    latency_ms: tuple[float, float, float]
    gpu_util_pct: float
    cpu_util_pct: float
    cost_usd: Decimal
    energy_kwh: float
    replicas: int
    gpu_uuids: list[str]
    omit_cost: bool = False


def version_at(service: Service, t: int) -> Version:
    current = service.versions[0]
    for v in service.versions:
        if epoch_s(v.start) <= t:
            current = v
    return current


def build_serving(rng: random.Random, world: World) -> list[Window]:
    windows = []
    for fleet in world.fleets:
        service = fleet.service
        if service is IDLE_SERVICE:
            continue  # its windows come from its own generator (idle_service_windows)
        itype = INSTANCE_TYPES[service.instance_type]
        gpu_kind = GPU_TYPES[itype.gpu_type]
        for t in range(SPAN_START_S, SPAN_END_S, SERVING_WINDOW_S):
            version = version_at(service, t)
            hour = (t % DAY_S) // HOUR_S
            growth = 1.0 + service.growth_per_30_days * (t - SPAN_START_S) / (30 * DAY_S)
            rps = (
                service.peak_rps
                * TRAFFIC_BY_UTC_HOUR[hour]
                * TRAFFIC_BY_WEEKDAY[weekday(t)]
                * growth
                * (1.0 + noise(rng, 0.04))
            )
            total = int(rps * SERVING_WINDOW_S + 0.5)
            error_rate = version.error_rate * (1.0 + noise(rng, 0.25))
            if (
                service.name == SERVING_INCIDENT[0]
                and SERVING_INCIDENT[1] <= t < SERVING_INCIDENT[2]
            ):
                error_rate = SERVING_INCIDENT[3] * (1.0 + noise(rng, 0.1))
            errors = int(total * clamp(error_rate, 0.0, 1.0) + 0.5)
            load = total / SERVING_WINDOW_S / (version.replicas * version.capacity_rps_per_replica)
            gpu_util = clamp(100.0 * load * (1.0 + noise(rng, 0.03)), 2.0, 99.0)
            cpu_util = clamp(6.0 + 45.0 * load + noise(rng, 2.0), 1.0, 99.0)
            p50 = version.latency_p50_ms * (1.0 + 0.5 * load * load) * (1.0 + noise(rng, 0.03))
            p95 = p50 * (2.2 + 0.6 * load + noise(rng, 0.05))
            p99 = p95 * (1.45 + 0.3 * load + noise(rng, 0.04))
            gpus = version.replicas * itype.gpu_count
            gpu_power_w = (
                gpu_kind.idle_power_w[0]
                + (gpu_kind.max_power_w - gpu_kind.idle_power_w[0]) * gpu_util / 100.0
            )
            energy = (
                (gpus * gpu_power_w + version.replicas * service.host_power_w)
                * SERVING_WINDOW_S
                / HOUR_S
                / 1000.0
            )
            cost = itype.price_per_hour_usd * version.replicas * SERVING_WINDOW_S / HOUR_S
            uuids = [u for slot in fleet.gpu_uuids[: version.replicas] for u in slot]
            windows.append(
                Window(
                    service,
                    version,
                    t,
                    total,
                    total - errors,
                    errors,
                    (round(p50, 1), round(p95, 1), round(p99, 1)),
                    round(gpu_util, 1),
                    round(cpu_util, 1),
                    cost,
                    round6(energy),
                    version.replicas,
                    uuids,
                )
            )
    windows.sort(key=lambda w: (w.start_s, w.service.name))
    for i in sorted(rng.sample(range(len(windows)), SERVING_MISSING_COST_WINDOWS)):
        windows[i].omit_cost = True
    windows += idle_service_windows(world)
    windows.sort(key=lambda w: (w.start_s, w.service.name))
    return windows


def idle_service_windows(world: World) -> list[Window]:
    """IDLE_SERVICE's hourly windows: a backfill at business-hour traffic from its start until
    IDLE_FROM_S, then health checks only while both replicas keep running (and costing)."""
    own = random.Random(f"{SEED}:idle-service")
    fleet = next(f for f in world.fleets if f.service is IDLE_SERVICE)
    version = IDLE_SERVICE.versions[0]
    itype = INSTANCE_TYPES[IDLE_SERVICE.instance_type]
    gpu_kind = GPU_TYPES[itype.gpu_type]
    out = []
    for t in range(epoch_s(version.start), SPAN_END_S, SERVING_WINDOW_S):
        if t < IDLE_FROM_S:
            hour = (t % DAY_S) // HOUR_S
            rps = IDLE_SERVICE.peak_rps * TRAFFIC_BY_UTC_HOUR[hour] * (1.0 + noise(own, 0.05))
            total = int(rps * SERVING_WINDOW_S + 0.5)
        else:
            total = own.randint(*IDLE_REQUESTS_PER_HOUR)
        errors = int(total * version.error_rate + 0.5)
        load = total / SERVING_WINDOW_S / (version.replicas * version.capacity_rps_per_replica)
        gpu_util = clamp(100.0 * load * (1.0 + noise(own, 0.03)), 0.0, 99.0)
        p50 = version.latency_p50_ms * (1.0 + 0.5 * load * load)
        gpus = version.replicas * itype.gpu_count
        gpu_power_w = gpu_kind.idle_power_w[0] + (gpu_kind.max_power_w - gpu_kind.idle_power_w[0]) * gpu_util / 100.0
        energy = (gpus * gpu_power_w + version.replicas * IDLE_SERVICE.host_power_w) / 1000.0
        out.append(
            Window(
                IDLE_SERVICE,
                version,
                t,
                total,
                total - errors,
                errors,
                (round(p50, 1), round(p50 * 2.2, 1), round(p50 * 3.1, 1)),
                round(gpu_util, 1),
                round(clamp(3.0 + 45.0 * load, 1.0, 99.0), 1),
                itype.price_per_hour_usd * version.replicas * SERVING_WINDOW_S / HOUR_S,
                round6(energy),
                version.replicas,
                [u for slot in fleet.gpu_uuids[: version.replicas] for u in slot],
            )
        )
    return out


def window_record(w: Window) -> dict:
    record = {
        "window_start": iso_z(w.start_s),
        "window_end": iso_z(w.start_s + SERVING_WINDOW_S),
        "service": w.service.name,
        "model_version": w.version.name,
        "requests_total": w.requests_total,
        "requests_success": w.requests_success,
        "requests_error": w.requests_error,
        "latency_ms_p50": w.latency_ms[0],
        "latency_ms_p95": w.latency_ms[1],
        "latency_ms_p99": w.latency_ms[2],
        "throughput_rps": round6(w.requests_total / SERVING_WINDOW_S),
        "avg_gpu_util": w.gpu_util_pct,
        "avg_cpu_util": w.cpu_util_pct,
    }
    if not w.omit_cost:
        record["cost_usd"] = float(w.cost_usd.quantize(Decimal("0.000001")))
    if w.service.reports_energy:
        record["energy_kwh"] = w.energy_kwh
    record.update(
        {
            "instance_type": w.service.instance_type,
            "replicas": w.replicas,
            "host": w.service.host,
            "gpu_uuids": w.gpu_uuids,
        }
    )
    return record


def version_changes(windows: list[Window]) -> list[dict]:
    out = []
    for service in SERVICES:
        mine = [w for w in windows if w.service is service]
        for before, after in zip(service.versions, service.versions[1:]):
            costs = []
            for v in (before, after):
                ws = [w for w in mine if w.version is v]
                cost = sum((w.cost_usd for w in ws), Decimal(0))
                success = sum(w.requests_success for w in ws)
                costs.append((float(cost * 1000 / success), ws))
            change_pct = (costs[1][0] / costs[0][0] - 1.0) * 100.0
            out.append(
                {
                    "service": service.name,
                    "from_version": before.name,
                    "to_version": after.name,
                    "start": after.start,
                    "start_date": after.start[:10],
                    "before_windows": len(costs[0][1]),
                    "after_windows": len(costs[1][1]),
                    "cost_per_1k_success_before_usd": round6(costs[0][0]),
                    "cost_per_1k_success_after_usd": round6(costs[1][0]),
                    "change_pct": round(change_pct, 2),
                    "is_regression": change_pct >= REGRESSION_MIN_PCT,
                }
            )
    return out


# --------------------------------------------------------------------------------------------
# Billing (FOCUS 1.0)
# --------------------------------------------------------------------------------------------


def split_by_day(a: int, b: int):
    """(day start, seconds inside [a, b)) for each UTC day that [a, b) touches."""
    day = a - a % DAY_S
    while day < b:
        secs = min(b, day + DAY_S) - max(a, day)
        if secs > 0:
            yield day, secs
        day += DAY_S


def tags_text(tags: dict | None) -> str:
    if not tags:
        return ""
    return json.dumps({k: tags[k] for k in sorted(tags)}, separators=(",", ":"))


def base_line(month: str, team: str) -> dict:
    period_end = next_month_start_s(month)
    account_id, account_name = SUB_ACCOUNTS[team]
    line = {c: "" for c in FOCUS_COLUMNS}
    line.update(
        {
            "BillingCurrency": "USD",
            "BillingPeriodStart": focus_time(month_start_s(month)),
            "BillingPeriodEnd": focus_time(period_end),
            "ProviderName": "AWS",
            "PublisherName": "AWS",
            "InvoiceIssuerName": "AWS",
            "RegionId": REGION,
            "RegionName": REGION_NAME,
            "SubAccountId": account_id,
            "SubAccountName": account_name,
            "BillingAccountId": BILLING_ACCOUNT_ID,
            "BillingAccountName": BILLING_ACCOUNT_NAME,
        }
    )
    return line


def instance_line(
    world: World,
    day: int,
    secs: int,
    *,
    team: str,
    instance_type: str,
    sku: str,
    resource_id: str,
    resource_name: str,
    list_price: Decimal,
    unit_price: Decimal,
    pricing: str,
    tags: dict | None,
    description: str,
) -> dict:
    hours = Decimal(secs) / HOUR_S
    line = base_line(month_of(day), team)
    billed = hours * unit_price
    line.update(
        {
            "BilledCost": money(billed),
            "EffectiveCost": money(billed),
            "ListCost": money(hours * list_price),
            "ContractedCost": money(billed),
            "ChargePeriodStart": focus_time(day),
            "ChargePeriodEnd": focus_time(day + DAY_S),
            "ChargeCategory": "Usage",
            "ChargeFrequency": "Usage-Based",
            "ChargeDescription": description,
            "ServiceName": "Amazon Elastic Compute Cloud",
            "ServiceCategory": "Compute",
            "SkuId": world.sku_ids[sku],
            "SkuPriceId": world.sku_ids[sku] + "." + pricing[:2].upper(),
            "ResourceId": resource_id,
            "ResourceName": resource_name,
            "ResourceType": "Instance",
            "ConsumedQuantity": money(hours),
            "ConsumedUnit": "Hours",
            "PricingCategory": pricing,
            "PricingQuantity": money(hours),
            "PricingUnit": "Hours",
            "ListUnitPrice": money(list_price),
            "ContractedUnitPrice": money(unit_price),
            "Tags": tags_text(tags),
        }
    )
    return line


def cloud_run_lines(rng: random.Random, world: World, runs: list[Run]) -> list[dict]:
    lines = []
    for run in runs:
        if run.node is not None:
            continue
        itype = INSTANCE_TYPES[run.instance_type]
        launched = run.start_s - rng.randint(*INSTANCE_BOOT_S)
        terminated = run.end_s + rng.randint(*INSTANCE_TEARDOWN_S)
        tags = (
            None
            if run.untagged
            else {"project": run.project.name, "run_id": run.run_id, "team": run.project.team}
        )
        for day, secs in split_by_day(launched, terminated):
            if run.capacity == "spot":
                unit = (
                    itype.price_per_hour_usd
                    * Decimal(str(round(rng.uniform(*SPOT_PRICE_FRACTION), 4)))
                ).quantize(Decimal("0.000001"))
                pricing, sku, what = "Dynamic", f"SpotUsage:{itype.name}", "Spot"
            else:
                unit, pricing, sku, what = (
                    itype.price_per_hour_usd,
                    "Standard",
                    f"BoxUsage:{itype.name}",
                    "On Demand",
                )
            lines.append(
                instance_line(
                    world,
                    day,
                    secs,
                    team=run.project.team,
                    instance_type=itype.name,
                    sku=sku,
                    resource_id=run.resource_id,
                    resource_name=run.host,
                    list_price=itype.price_per_hour_usd,
                    unit_price=unit,
                    pricing=pricing,
                    tags=tags,
                    description=f"{what} Linux {itype.name} Instance Hour",
                )
            )
    return lines


def node_lines(world: World) -> list[dict]:
    lines = []
    for node in NODES:
        for day in range(SPAN_START_S, SPAN_END_S, DAY_S):
            committed = node.pricing_category == "Committed"
            line = instance_line(
                world,
                day,
                DAY_S,
                team=node.team,
                instance_type=node.instance_type,
                sku="HeavyUsage:p4d-pool" if committed else f"BoxUsage:{node.instance_type}",
                resource_id=world.node_resource_ids[node.host],
                resource_name=node.host,
                list_price=node.list_price_per_hour_usd,
                unit_price=node.price_per_hour_usd,
                pricing=node.pricing_category,
                tags={"pool": "gpu-pool", "team": node.team},
                description=(
                    f"Reserved GPU pool node {node.host} (4x A100 40GB), 1-year commitment"
                    if committed
                    else f"On Demand Linux {node.instance_type} Instance Hour"
                ),
            )
            if committed:
                line["CommitmentDiscountId"] = world.commitment_id
                line["CommitmentDiscountType"] = "Reservation"
            lines.append(line)
    return lines


def serving_lines(world: World, windows: list[Window]) -> list[dict]:
    lines = []
    for fleet in world.fleets:
        service = fleet.service
        itype = INSTANCE_TYPES[service.instance_type]
        mine = [w for w in windows if w.service is service]
        for slot, resource_id in enumerate(fleet.instance_ids):
            for day in range(SPAN_START_S, SPAN_END_S, DAY_S):
                secs = sum(
                    SERVING_WINDOW_S
                    for w in mine
                    if day <= w.start_s < day + DAY_S and w.replicas > slot
                )
                if secs == 0:
                    continue
                lines.append(
                    instance_line(
                        world,
                        day,
                        secs,
                        team=service.team,
                        instance_type=itype.name,
                        sku=f"BoxUsage:{itype.name}",
                        resource_id=resource_id,
                        resource_name=f"{service.host}-r{slot}",
                        list_price=itype.price_per_hour_usd,
                        unit_price=itype.price_per_hour_usd,
                        pricing="Standard",
                        tags={"service": service.name, "team": service.team},
                        description=f"On Demand Linux {itype.name} Instance Hour",
                    )
                )
    return lines


def storage_and_transfer_lines(rng: random.Random, world: World) -> list[dict]:
    lines = []
    for project in PROJECTS:
        bucket = f"mlcost-{project.name}-data"
        tags = {"project": project.name, "team": project.team}
        for day in range(SPAN_START_S, SPAN_END_S, DAY_S):
            month = month_of(day)
            days_in_month = (next_month_start_s(month) - month_start_s(month)) // DAY_S
            stored_gb = S3_STORED_GB[project.name] * (
                1.0 + S3_GROWTH_PER_30_DAYS * (day - SPAN_START_S) / (30 * DAY_S)
            )
            gb_month = (Decimal(str(round(stored_gb, 3))) / days_in_month).quantize(Q10)
            line = base_line(month, project.team)
            cost = gb_month * S3_PRICE_PER_GB_MONTH_USD
            line.update(
                {
                    "BilledCost": money(cost),
                    "EffectiveCost": money(cost),
                    "ListCost": money(cost),
                    "ContractedCost": money(cost),
                    "ChargePeriodStart": focus_time(day),
                    "ChargePeriodEnd": focus_time(day + DAY_S),
                    "ChargeCategory": "Usage",
                    "ChargeFrequency": "Usage-Based",
                    "ChargeDescription": "$0.023 per GB - first 50 TB / month of storage used",
                    "ServiceName": "Amazon Simple Storage Service",
                    "ServiceCategory": "Storage",
                    "SkuId": world.sku_ids["TimedStorage-ByteHrs"],
                    "SkuPriceId": world.sku_ids["TimedStorage-ByteHrs"] + ".ST",
                    "ResourceId": bucket,
                    "ResourceName": bucket,
                    "ResourceType": "Bucket",
                    "ConsumedQuantity": money(gb_month),
                    "ConsumedUnit": "GB-Mo",
                    "PricingCategory": "Standard",
                    "PricingQuantity": money(gb_month),
                    "PricingUnit": "GB-Mo",
                    "ListUnitPrice": money(S3_PRICE_PER_GB_MONTH_USD),
                    "ContractedUnitPrice": money(S3_PRICE_PER_GB_MONTH_USD),
                    "Tags": tags_text(tags),
                }
            )
            lines.append(line)
            gb = (
                TRANSFER_GB_PER_DAY[project.name]
                * TRAFFIC_BY_WEEKDAY[weekday(day)]
                * (1.0 + noise(rng, 0.15))
            )
            gb_text = Decimal(str(round(max(gb, 1.0), 3)))
            cost = gb_text * TRANSFER_PRICE_PER_GB_USD
            line = base_line(month, project.team)
            line.update(
                {
                    "BilledCost": money(cost),
                    "EffectiveCost": money(cost),
                    "ListCost": money(cost),
                    "ContractedCost": money(cost),
                    "ChargePeriodStart": focus_time(day),
                    "ChargePeriodEnd": focus_time(day + DAY_S),
                    "ChargeCategory": "Usage",
                    "ChargeFrequency": "Usage-Based",
                    "ChargeDescription": "$0.09 per GB - first 10 TB / month data transfer out",
                    "ServiceName": "AWS Data Transfer",
                    "ServiceCategory": "Networking",
                    "SkuId": world.sku_ids["DataTransfer-Out-Bytes"],
                    "SkuPriceId": world.sku_ids["DataTransfer-Out-Bytes"] + ".ST",
                    "ResourceId": bucket,
                    "ResourceName": bucket,
                    "ResourceType": "Bucket",
                    "ConsumedQuantity": money(gb_text),
                    "ConsumedUnit": "GB",
                    "PricingCategory": "Standard",
                    "PricingQuantity": money(gb_text),
                    "PricingUnit": "GB",
                    "ListUnitPrice": money(TRANSFER_PRICE_PER_GB_USD),
                    "ContractedUnitPrice": money(TRANSFER_PRICE_PER_GB_USD),
                    "Tags": tags_text(tags),
                }
            )
            lines.append(line)
    return lines


def account_lines(world: World, month: str, usage: Decimal) -> list[dict]:
    """The month's Purchase (support fee), Adjustment, Credit and Tax lines."""
    start = month_start_s(month)
    end = min(next_month_start_s(month), SPAN_END_S)

    def line(category, amount, description, service, sku, period=(start, end), **extra):
        out = base_line(month, "ml-platform")
        out.update(
            {
                "SubAccountId": BILLING_ACCOUNT_ID,
                "SubAccountName": BILLING_ACCOUNT_NAME,
                "BilledCost": money(amount),
                "EffectiveCost": money(amount),
                "ListCost": money(amount if category != "Credit" else Decimal(0)),
                "ChargePeriodStart": focus_time(period[0]),
                "ChargePeriodEnd": focus_time(period[1]),
                "ChargeCategory": category,
                "ChargeDescription": description,
                "ServiceName": service,
                "ServiceCategory": "Other"
                if category != "Purchase"
                else "Management and Governance",
                "SkuId": world.sku_ids[sku],
                "RegionId": "",
                "RegionName": "",
            }
        )
        out.update(extra)
        return out

    support = min(usage, Decimal(10_000)) * Decimal("0.10") + max(
        Decimal(0), min(usage, Decimal(80_000)) - Decimal(10_000)
    ) * Decimal("0.07")
    support = support.quantize(CENT, ROUND_HALF_UP)
    lines = [
        line(
            "Purchase",
            support,
            "AWS Support (Business) monthly fee",
            "AWS Support (Business)",
            "Support-Business",
            ChargeFrequency="Recurring",
            PricingCategory="Standard",
            ContractedCost=money(support),
            PricingQuantity="1",
            PricingUnit="Month",
            ConsumedQuantity="",
            ConsumedUnit="",
        )
    ]
    adjustment = Decimal(0)
    if month == ADJUSTMENT[0]:
        adjustment = ADJUSTMENT[2]
        corrected = ADJUSTMENT[1]
        lines.append(
            line(
                "Adjustment",
                adjustment,
                ADJUSTMENT[3],
                "AWS Data Transfer",
                "Adjustment",
                period=(month_start_s(corrected), next_month_start_s(corrected)),
                ChargeClass="Correction",
                ChargeFrequency="One-Time",
                ServiceCategory="Networking",
            )
        )
    credit = CREDIT_USD[month]
    lines.append(
        line(
            "Credit",
            credit,
            "AWS Activate promotional credit",
            "AWS Promotional Credits",
            "Credit",
            ChargeFrequency="One-Time",
        )
    )
    tax = ((usage + support + adjustment + credit) * TAX_RATE).quantize(CENT, ROUND_HALF_UP)
    lines.append(line("Tax", tax, "US sales tax (6 %)", "Tax", "Tax", ChargeFrequency="Recurring"))
    return lines


def build_billing(
    rng: random.Random, world: World, runs: list[Run], windows: list[Window]
) -> dict[str, list[dict]]:
    usage = (
        cloud_run_lines(rng, world, runs)
        + node_lines(world)
        + serving_lines(world, windows)
        + storage_and_transfer_lines(rng, world)
    )
    by_month = {m: [] for m in MONTHS}
    for line in usage:
        by_month[line["BillingPeriodStart"][:7]].append(line)
    for month in MONTHS:
        total = sum((Decimal(line["BilledCost"]) for line in by_month[month]), Decimal(0))
        by_month[month] += account_lines(world, month, total)
        by_month[month].sort(
            key=lambda l: (
                l["ChargePeriodStart"],
                CHARGE_CATEGORY_ORDER.index(l["ChargeCategory"]),
                l["ServiceName"],
                l["ResourceId"],
                l["ChargePeriodEnd"],
            )
        )
        for i, line in enumerate(by_month[month], start=1):
            line["x_LineItemId"] = f"li-{month.replace('-', '')}-{i:06d}"
    return by_month


def billing_files(by_month: dict[str, list[dict]]) -> dict[str, bytes]:
    files = {}
    for month in MONTHS:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=FOCUS_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(by_month[month])
        files[f"billing/focus_{month}.csv.gz"] = gzip_bytes(buf.getvalue().encode())
    return files


# --------------------------------------------------------------------------------------------
# Truth and checks
# --------------------------------------------------------------------------------------------


def pareto_counts(runs: list[Run]) -> dict[str, dict]:
    out = {}
    for project in PROJECTS:
        pts = [
            (estimated_cost(r), r.val_metric, r.run_id)
            for r in runs
            if r.project is project and r.status == "completed"
        ]
        better = (lambda a, b: a > b) if project.goal == "max" else (lambda a, b: a < b)
        dominated = []
        for cost, value, run_id in pts:
            if any(
                c <= cost and (better(v, value) or v == value) and (c < cost or better(v, value))
                for c, v, other in pts
                if other != run_id
            ):
                dominated.append(run_id)
        frontier = sorted(rid for _, _, rid in pts if rid not in dominated)
        out[project.name] = {
            "completed_runs": len(pts),
            "frontier": frontier,
            "dominated_count": len(dominated),
        }
    return out


def build_truth(world, runs, reset_run, reset_s, series, windows, changes, billing) -> dict:
    reset_series = next(
        s
        for s in series
        if s.gpu.host == COUNTER_RESET_HOST and s.gpu.index == COUNTER_RESET_GPU_INDEX
    )
    k_reset = sample_index(reset_s)
    billed_by_resource = {}
    monthly = {}
    for month in MONTHS:
        totals = {c: Decimal(0) for c in CHARGE_CATEGORY_ORDER}
        for line in billing[month]:
            totals[line["ChargeCategory"]] += Decimal(line["BilledCost"])
            if line["ChargeCategory"] == "Usage":
                rid = line["ResourceId"]
                billed_by_resource[rid] = billed_by_resource.get(rid, Decimal(0)) + Decimal(
                    line["BilledCost"]
                )
        monthly[month] = {
            c.lower() + "_usd": float(totals[c].quantize(CENT)) for c in CHARGE_CATEGORY_ORDER
        }
        monthly[month]["total_usd"] = float(sum(totals.values(), Decimal(0)).quantize(CENT))
        monthly[month]["lines"] = len(billing[month])
    cloud = [r for r in runs if r.node is None]
    regression = [c for c in changes if c["is_regression"] and (c["service"], c["to_version"]) != JUMP_VERSION]
    stalls = sorted(
        (
            {
                "run_id": r.run_id,
                "host": r.host,
                "gpu_indices": list(r.gpu_indices),
                "start": iso_z(r.stall[0]),
                "end": iso_z(r.stall[1]),
                "seconds": r.stall[1] - r.stall[0],
            }
            for r in runs
            if r.stall
        ),
        key=lambda d: d["start"],
    )
    right_size = [
        r for r in runs if r.host == RIGHT_SIZE_HOST and r.gpu_indices == (RIGHT_SIZE_GPU_INDEX,)
    ]
    energy = run_energy_truth(runs, series)
    rs_series = next(
        s for s in series if (s.gpu.host, s.gpu.index) == (RIGHT_SIZE_HOST, RIGHT_SIZE_GPU_INDEX)
    )
    rs_utils = [
        rs_series.util_pct[k]
        for r in right_size
        for k in range(sample_index(r.start_s), sample_index(r.end_s))
    ]
    return {
        "about": {
            "seed": SEED,
            "span_start": iso_z(SPAN_START_S),
            "span_end_exclusive": iso_z(SPAN_END_S),
            "today": day_text(SPAN_END_S),
            "trace_interval_s": TRACE_INTERVAL_S,
            "serving_window_s": SERVING_WINDOW_S,
            "idle_util_max_pct": IDLE_UTIL_MAX_PCT,
            "idle_sustain_min_s": IDLE_SUSTAIN_MIN_S,
        },
        "counts": {
            "runs": len(runs),
            "node_runs": len(runs) - len(cloud),
            "cloud_runs": len(cloud),
            "runs_by_status": {
                s: sum(r.status == s for r in runs) for s in ("completed", "failed", "preempted")
            },
            "runs_with_eval_history": sum(r.eval_history is not None for r in runs),
            "serving_windows": len(windows),
            "serving_windows_without_cost": sum(w.omit_cost for w in windows),
            "trace_rows": sum(
                1
                for s in series
                for k in range(sample_count())
                if observed(s.gpu.host, SPAN_START_S + k * TRACE_INTERVAL_S)
            ),
            "billing_lines": sum(len(v) for v in billing.values()),
        },
        "node_gpus": [
            {"host": g.host, "gpu_index": g.index, "gpu_uuid": g.uuid, "gpu_name": g.type_name}
            for node in NODES
            for g in world.node_gpus[node.host]
        ],
        "node_runs": energy,
        "gpu_idle_by_day": idle_truth(series),
        "collector_gap": {
            "host": COLLECTOR_GAP_HOST,
            "start": iso_z(COLLECTOR_GAP_START_S),
            "end": iso_z(COLLECTOR_GAP_END_S),
            "missing_samples_per_gpu": (COLLECTOR_GAP_END_S - COLLECTOR_GAP_START_S)
            // TRACE_INTERVAL_S,
        },
        "counter_reset": {
            "host": COUNTER_RESET_HOST,
            "gpu_index": COUNTER_RESET_GPU_INDEX,
            "gpu_uuid": reset_series.gpu.uuid,
            "time": iso_z(reset_s),
            "last_row_before": iso_z(SPAN_START_S + k_reset * TRACE_INTERVAL_S),
            "first_row_after": iso_z(SPAN_START_S + (k_reset + 1) * TRACE_INTERVAL_S),
            "counter_before_mj": reset_series.counter_mj[k_reset],
            "counter_after_mj": reset_series.counter_mj[k_reset + 1],
            "run_id": reset_run.run_id,
        },
        "allocated_idle": stalls,
        "right_size_candidate": {
            "host": RIGHT_SIZE_HOST,
            "gpu_index": RIGHT_SIZE_GPU_INDEX,
            "gpu_uuid": world.node_gpus[RIGHT_SIZE_HOST][RIGHT_SIZE_GPU_INDEX].uuid,
            "run_ids": [r.run_id for r in right_size],
            "mean_gpu_util_pct": round(sum(rs_utils) / len(rs_utils), 2),
        },
        "serving_version_changes": changes,
        "regression": regression[0] if regression else None,
        "alert_cases": alert_cases(windows),
        "billed_cost_by_run_usd": {
            r.run_id: float(billed_by_resource[r.resource_id].quantize(Decimal("0.000001")))
            for r in sorted(cloud, key=lambda r: r.run_id)
        },
        "untagged_run_ids": sorted(r.run_id for r in cloud if r.untagged),
        "billing_by_month": monthly,
        "pareto": pareto_counts(runs),
    }


def alert_cases(windows: list[Window]) -> dict:
    """The issue-22 alert cases in figures: the jump version's service over the last 24 hours of
    data against the 24 before (cost in USD per 1,000 requests), and the idle service's stretch."""
    last_day = SPAN_END_S - DAY_S

    def day(service: str, start: int) -> dict:
        ws = [w for w in windows if w.service.name == service and start <= w.start_s < start + DAY_S]
        cost = sum((w.cost_usd for w in ws), Decimal(0))  # a window sent without cost is priced alike
        requests = sum(w.requests_total for w in ws)
        return {"windows": len(ws), "requests_total": sum(w.requests_total for w in ws),
                "cost_usd": float(cost.quantize(Decimal("0.000001"))),
                "cost_per_1k_requests_usd": round6(float(cost * 1000 / requests))}

    service, version = JUMP_VERSION
    after, before = day(service, last_day), day(service, last_day - DAY_S)
    idle = [w for w in windows if w.service is IDLE_SERVICE and w.start_s >= IDLE_FROM_S]
    return {
        "cost_per_1k_jump": {
            "service": service, "new_version": version,
            "version_start": next(v.start for s in SERVICES if s.name == service for v in s.versions if v.name == version),
            "last_24h_start": iso_z(last_day), "last_24h": after, "previous_24h": before,
            "ratio": round(after["cost_per_1k_requests_usd"] / before["cost_per_1k_requests_usd"], 4),
        },
        "idle_service": {
            "service": IDLE_SERVICE.name, "idle_from": iso_z(IDLE_FROM_S), "idle_until": iso_z(SPAN_END_S),
            "hours": len(idle), "requests_total": sum(w.requests_total for w in idle),
            "max_window_rps": round6(max(w.requests_total for w in idle) / SERVING_WINDOW_S),
            "cost_usd": float(sum((w.cost_usd for w in idle), Decimal(0))),
        },
    }


def check_world(truth: dict) -> None:
    """Fail loudly if the story the README tells is not in the data."""
    changes = [c for c in truth["serving_version_changes"] if (c["service"], c["to_version"]) != JUMP_VERSION]
    assert sum(c["is_regression"] for c in changes) == 1, changes
    jump = truth["alert_cases"]["cost_per_1k_jump"]
    assert jump["ratio"] >= 2.0 and jump["last_24h"]["requests_total"] >= 10_000, jump
    assert truth["alert_cases"]["idle_service"]["hours"] >= 72, truth["alert_cases"]
    assert any(c["change_pct"] <= CLEAN_CHANGE_MAX_PCT for c in changes), changes
    assert all(c["is_regression"] or c["change_pct"] <= CLEAN_CHANGE_MAX_PCT for c in changes), (
        changes
    )
    assert 150 <= truth["counts"]["runs"] <= 250, truth["counts"]
    for name, p in truth["pareto"].items():
        assert p["dominated_count"] >= 3 and len(p["frontier"]) >= 3, (name, p)
    rs = truth["right_size_candidate"]["mean_gpu_util_pct"]
    assert 15 <= rs <= 35, rs
    months = truth["billing_by_month"]
    totals = [months[m]["total_usd"] for m in MONTHS[:3]]
    assert totals == sorted(totals) and 10_000 < totals[0] < 100_000, totals  # full months grow
    per_day = [
        months[m]["usage_usd"]
        / ((min(next_month_start_s(m), SPAN_END_S) - month_start_s(m)) // DAY_S)
        for m in MONTHS
    ]
    assert per_day == sorted(per_day), per_day  # and so does the daily rate, November included


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def generate() -> dict[str, bytes]:
    master = random.Random(SEED)
    rngs = {
        name: random.Random(master.getrandbits(64))
        for name in ("world", "runs", "traces", "serving", "billing")
    }
    world = build_world(rngs["world"])
    runs, reset_run, reset_s = build_runs(rngs["runs"])
    series = simulate_traces(rngs["traces"], world, runs, reset_s)
    windows = build_serving(rngs["serving"], world)
    changes = version_changes(windows)
    billing = build_billing(rngs["billing"], world, runs, windows)
    truth = build_truth(world, runs, reset_run, reset_s, series, windows, changes, billing)
    check_world(truth)

    files = {"runs.jsonl": "".join(json_line(run_record(r, world)) + "\n" for r in runs).encode()}
    files["serving_windows.jsonl.gz"] = gzip_bytes(
        "".join(json_line(window_record(w)) + "\n" for w in windows).encode()
    )
    files.update(trace_files(series))
    files.update(billing_files(billing))
    files["truth.json"] = (json.dumps(truth, indent=1, sort_keys=True) + "\n").encode()
    # truth.json is the answer key, not data: `mlcost ingest <this folder>` skips what this lists
    files[".mlcostignore"] = NOT_DATA.encode()
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parent,
        help="output folder (default: the folder of this script)",
    )
    args = parser.parse_args(argv)
    files = generate()
    for name in sorted(files):
        path = args.out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(files[name])
    total = sum(len(b) for b in files.values())
    for name in sorted(files):
        print(f"{len(files[name]):>10,d}  {name}")
    print(f"{total:>10,d}  total bytes in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
