"""Benchmark budget burn and alert evaluation against baselines in the same process (ratios).

    python bench/bench_budgets.py [--lines N] [--budgets B]

A synthetic FOCUS bill of N daily lines over 120 days (tags project/team, two currencies) is
loaded, then:
- burn: metrics.budgets.burn of one budget (tag scope) vs a plain SELECT sum(billed_cost) over every line
- evaluate: outputs.alerts.evaluate with B budgets (no traces, no serving) vs B of those plain sums
"""
from __future__ import annotations

import argparse
import csv
import os
import random
import tempfile
from datetime import date, datetime, timedelta
from pathlib import Path

from bench_runs import best_of  # this script's folder is on sys.path when run as a script

HEADER = ["BilledCost", "EffectiveCost", "BillingCurrency", "ChargePeriodStart", "ChargePeriodEnd",
          "ChargeCategory", "ProviderName", "ServiceName", "ResourceId", "Tags"]


def synthetic_bill(path: Path, lines: int) -> None:
    rng = random.Random(11)
    first = datetime(2026, 8, 1)
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(HEADER)
        for i in range(lines):
            day = first + timedelta(days=rng.randrange(120))
            cost = f"{rng.uniform(0.01, 50):.6f}"
            tags = f'{{"project":"p{i % 12}","team":"t{i % 4}"}}'
            writer.writerow([cost, cost, "EUR" if i % 20 == 0 else "USD", f"{day:%Y-%m-%d} 00:00:00",
                             f"{day + timedelta(days=1):%Y-%m-%d} 00:00:00", "Usage", "AWS", "Amazon EC2",
                             f"i-{i:08x}", tags])


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--lines", type=int, default=200_000)
    options.add_argument("--budgets", type=int, default=10)
    args = options.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        os.environ["MLCOST_DB"] = str(Path(folder) / "bench.duckdb")
        settings_path = Path(folder) / "mlcost.toml"
        settings_path.write_text("[alerts]\nidle_waste_usd_per_week = 0\n" + "".join(
            f'[[budgets]]\nname = "b{i}"\nscope = "project:p{i % 12}"\namount = 50000\n' for i in range(args.budgets)))
        os.environ["MLCOST_CONFIG"] = str(settings_path)
        from metrics import budgets
        from outputs import alerts
        from ingest.engine import warehouse
        from ingest.pipeline import loader
        from ingest.settings import config

        bill = Path(folder) / "bill.csv"
        synthetic_bill(bill, args.lines)
        summary = loader.ingest_file(bill, kind="billing_focus")
        assert summary.ok and summary.rows_loaded == args.lines, summary.to_json()
        settings = config.load()
        as_of = date(2026, 11, 22)

        plain_sum = best_of(5, lambda: warehouse.query("SELECT billing_currency, sum(billed_cost) FROM billing_lines "
                                                       "GROUP BY 1"))
        burn = best_of(5, lambda: budgets.burn(settings.budgets[0], settings, as_of))
        evaluate = best_of(3, lambda: alerts.evaluate(settings, as_of))

    print(f"bill lines: {args.lines:,}; budgets: {args.budgets}")
    print(f"plain sum over every line        {plain_sum:8.3f} s")
    print(f"burn of one budget / plain sum   {burn / plain_sum:8.2f} x")
    print(f"evaluate / ({args.budgets} x plain sum)      {evaluate / (args.budgets * plain_sum):8.2f} x")


if __name__ == "__main__":
    main()
