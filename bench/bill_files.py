"""Write big deterministic bills for timing ingest: a FOCUS 1.0 CSV, an AWS CUR CSV and a GCP
export as JSON lines (BigQuery's newline-delimited JSON).

python bench/bill_files.py OUT_DIR [--lines 1000000] [--only focus|cur|gcp_jsonl]
    ->  OUT_DIR/focus_<n>.csv, OUT_DIR/cur_<n>.csv, OUT_DIR/gcp_<n>.jsonl
Rows are drawn from random.Random(42), so the same flags give the same bytes.
"""
from __future__ import annotations

import argparse
import csv
import json
import random
from pathlib import Path

SERVICES = [("Amazon Elastic Compute Cloud", "Compute", "p4d.24xlarge"), ("Amazon Simple Storage Service", "Storage", None),
            ("Amazon SageMaker", "AI and Machine Learning", "ml.g5.12xlarge"), ("AWS Data Transfer", "Networking", None)]
TEAMS = ["genai", "relevance", "vision", "platform", "speech"]
FOCUS_HEADER = [
    "AvailabilityZone", "BilledCost", "BillingAccountId", "BillingAccountName", "BillingCurrency", "BillingPeriodEnd",
    "BillingPeriodStart", "ChargeCategory", "ChargeClass", "ChargeDescription", "ChargeFrequency", "ChargePeriodEnd",
    "ChargePeriodStart", "CommitmentDiscountCategory", "CommitmentDiscountId", "CommitmentDiscountName",
    "CommitmentDiscountStatus", "CommitmentDiscountType", "ConsumedQuantity", "ConsumedUnit", "ContractedCost",
    "ContractedUnitPrice", "EffectiveCost", "InvoiceIssuerName", "ListCost", "ListUnitPrice", "PricingCategory",
    "PricingQuantity", "PricingUnit", "ProviderName", "PublisherName", "RegionId", "RegionName", "ResourceId",
    "ResourceName", "ResourceType", "ServiceCategory", "Id", "ServiceName", "SkuId", "SkuPriceId", "SubAccountId",
    "SubAccountName", "Tags"]
CUR_HEADER = [
    "identity/LineItemId", "identity/TimeInterval", "bill/PayerAccountId", "bill/BillingPeriodStartDate",
    "bill/BillingPeriodEndDate", "lineItem/UsageAccountId", "lineItem/LineItemType", "lineItem/UsageStartDate",
    "lineItem/UsageEndDate", "lineItem/ProductCode", "lineItem/UsageType", "lineItem/ResourceId",
    "lineItem/UsageAmount", "lineItem/CurrencyCode", "lineItem/UnblendedCost", "lineItem/LineItemDescription",
    "product/ProductName", "product/instanceType", "product/regionCode", "product/sku",
    "pricing/publicOnDemandCost", "pricing/term", "pricing/unit", "resourceTags/user:run_id",
    "resourceTags/user:team", "resourceTags/aws:createdBy", "costCategory/Team"]


def focus_rows(lines: int, rng: random.Random):
    for number in range(1, lines + 1):
        service, category, instance = rng.choice(SERVICES)
        hour = rng.randrange(30 * 24)
        start = f"2026-09-{hour // 24 + 1:02d} {hour % 24:02d}:00:00"
        end = f"2026-09-{hour // 24 + 1:02d} {hour % 24:02d}:59:59"
        quantity = round(rng.uniform(0.001, 200), 6)
        price = rng.choice(["0.09", "32.7726", "0.000004", "1.212"])
        cost = f"{quantity * float(price):.10f}"
        kind = "Usage" if number % 97 else rng.choice(["Credit", "Tax", "Purchase"])
        team = rng.choice(TEAMS)
        tags = f'{{"team": "{team}", "run_id": "run-{rng.randrange(5000)}"}}' if number % 3 else "NULL"
        yield ["NULL" if number % 5 else "us-east-1a", cost, "1234567890123", "SunBird", "USD",
               "2026-10-01 00:00:00", "2026-09-01 00:00:00", kind, "NULL",
               f"${price} per On Demand Linux {instance or 'unit'} Instance Hour, us-east-1",
               "Usage-Based", end, start, "NULL", "NULL", "NULL", "NULL", "NULL", f"{quantity}", "Hours",
               cost, price, cost, "Amazon Web Services, Inc.", cost, price,
               rng.choice(["Standard", "Committed", "Dynamic"]), f"{quantity}", "Hours", "AWS",
               "Amazon Web Services, Inc.", "us-east-1", "US East (N. Virginia)",
               f"arn:aws:ec2:us-east-1:1234:instance/i-{rng.randrange(16**12):012x}", "NULL", "NULL", category,
               f"li-{number:09d}", service, f"SKU{rng.randrange(999)}", f"SKU.{rng.randrange(99999)}",
               f"{rng.randrange(10**11):011d}", f"ml-{team}", tags]


def cur_rows(lines: int, rng: random.Random):
    for number in range(1, lines + 1):
        service, _, instance = rng.choice(SERVICES)
        hour = rng.randrange(30 * 24)
        day = f"2026-09-{hour // 24 + 1:02d}"
        start, end = f"{day}T{hour % 24:02d}:00:00Z", f"{day}T{hour % 24:02d}:59:59Z"
        quantity = round(rng.uniform(0.001, 200), 6)
        cost = f"{quantity * 1.212:.10f}"
        kind = "Usage" if number % 97 else rng.choice(["Credit", "Tax", "Fee"])
        team = rng.choice(TEAMS)
        yield [f"li-{number:09d}", f"{start}/{end}", "111122223333", "2026-09-01T00:00:00Z",
               "2026-10-01T00:00:00Z", f"{rng.randrange(10**12):012d}", kind, start, end, "AmazonEC2",
               f"BoxUsage:{instance or 'x'}", f"i-{rng.randrange(16**12):012x}", f"{quantity}", "USD", cost,
               f"$1.212 per On Demand Linux {instance or 'unit'} Instance Hour", service, instance or "",
               "us-east-1", f"SKU{rng.randrange(999)}", cost, "OnDemand", "Hrs",
               f"run-{rng.randrange(5000)}" if number % 2 else "", team, "IAMUser:x", team]


GCP_SKUS = [("Compute Engine", "A2 Instance Core running in Americas", "a2-highgpu-1g"),
            ("Compute Engine", "Nvidia Tesla A100 GPU running in Americas", "a2-highgpu-1g"),
            ("Compute Engine", "Spot Preemptible Nvidia L4 GPU running in Americas", "g2-standard-8"),
            ("Cloud Storage", "Standard Storage US Multi-region", None),
            ("Vertex AI", "Vertex AI: Online/Batch Prediction", None)]


def gcp_lines(lines: int, rng: random.Random):
    """JSON lines shaped as BigQuery writes the standard usage cost export."""
    for number in range(1, lines + 1):
        service, sku, machine = rng.choice(GCP_SKUS)
        hour = rng.randrange(30 * 24)
        day = f"2026-09-{hour // 24 + 1:02d}"
        amount = round(rng.uniform(1, 3600), 3)
        cost = round(amount * rng.choice([0.000972, 0.0001, 0.00036, 0.0000123]), 6)
        team = rng.choice(TEAMS)
        credits = ([{"name": "Committed use discount: GPU", "amount": -round(cost * 0.3, 6),
                     "full_name": "Committed use discount", "id": "CUD-1", "type": "COMMITTED_USAGE_DISCOUNT"}]
                   if number % 4 == 0 else [])
        yield json.dumps({
            "billing_account_id": "0123AB-CDEF01-234567",
            "service": {"id": "6F81-5844-456A", "description": service},
            "sku": {"id": f"{rng.randrange(16**4):04X}-{rng.randrange(16**4):04X}", "description": sku},
            "usage_start_time": f"{day} {hour % 24:02d}:00:00 UTC",
            "usage_end_time": f"{day} {hour % 24:02d}:59:59 UTC",
            "project": {"id": f"ml-{team}", "name": f"ML {team}", "labels": [], "ancestry_numbers": "/123/456/"},
            "labels": [{"key": "team", "value": team}] + ([{"key": "run_id", "value": f"run-{rng.randrange(5000)}"}]
                                                          if number % 3 else []),
            "system_labels": [{"key": "compute.googleapis.com/machine_spec", "value": machine}] if machine else [],
            "location": {"location": "us-central1", "country": "US", "region": "us-central1", "zone": "us-central1-a"},
            "export_time": f"{day} 23:10:00.066000 UTC",
            "cost": cost, "currency": "USD" if number % 50 else "EUR", "currency_conversion_rate": 1.0,
            "usage": {"amount": amount, "unit": "seconds", "amount_in_pricing_units": round(amount / 3600, 6),
                      "pricing_unit": "hour"},
            "credits": credits, "invoice": {"month": "202609"},
            "cost_type": "regular" if number % 101 else "tax",
            "resource": {"name": f"vm-{rng.randrange(300)}", "global_name": f"//compute/vm-{rng.randrange(300)}"},
        })


def write_lines(path: Path, lines) -> Path:
    with open(path, "w", newline="") as handle:
        for line in lines:
            handle.write(line + "\n")
    return path


def write(path: Path, header: list[str], rows) -> Path:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--only", choices=("focus", "cur", "gcp_jsonl"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.only in (None, "focus"):
        print(write(args.out / f"focus_{args.lines}.csv", FOCUS_HEADER, focus_rows(args.lines, random.Random(42))))
    if args.only in (None, "cur"):
        print(write(args.out / f"cur_{args.lines}.csv", CUR_HEADER, cur_rows(args.lines, random.Random(42))))
    if args.only in (None, "gcp_jsonl"):
        print(write_lines(args.out / f"gcp_{args.lines}.jsonl", gcp_lines(args.lines, random.Random(42))))


if __name__ == "__main__":
    main()
