"""One training run: validate a record in the run-summary vocabulary and derive its figures.

Both run parsers (JSON run summaries and CodeCarbon) map their input to the vocabulary of
the seed documents (run_id, start_time, end_time, duration_hours, price_per_hour_usd,
estimated_cost_usd, ...) and call build_run, so validation and derivation live here once.
"""
from __future__ import annotations

import hashlib
import json
import re
from datetime import timedelta
from decimal import Decimal

from ingest.engine import values
from ingest.engine.contract import BadValue, ParseContext, Parsed, Reject
from ingest.settings import config

STATUSES = {"completed", "failed", "preempted", "running"}
STATUS_SYNONYMS = {"success": "completed", "succeeded": "completed", "finished": "completed",
                   "error": "failed", "crashed": "failed"}
MIN_GOAL_WORDS = ("loss", "error", "wer", "cer", "perplexity", "mae", "mse", "rmse", "latency")
GOAL_SYNONYMS = {"max": "max", "maximize": "max", "higher": "max",
                 "min": "min", "minimize": "min", "lower": "min"}
CENT = Decimal("0.01")
MICRO_USD = Decimal("0.000001")
MAX_RUN_HOURS = 10 * 366 * 24  # a run of more than ten years is a unit mistake (1e12 s)
DURATION_TOLERANCE = 0.01  # a given duration_hours within 1% of end - start agrees
MAX_GPUS = 1_000_000

# The run-summary vocabulary: every field build_run reads under its own name.
FIELDS = ("run_id", "project", "team", "owner", "model", "status", "region", "host", "instance_type", "gpu_type",
          "val_metric_name", "goal", "duration_hours", "throughput_examples_per_sec", "val_metric", "target_metric",
          "energy_kwh", "emissions_kg", "price_per_hour_usd", "estimated_cost_usd", "gpu_count", "examples",
          "start_time", "end_time", "gpu_uuids", "gpu_indices", "gpu_uuid", "gpu_index", "tags", "eval_history")
# The seed documents' own spellings of those fields (../shared/seeds: `price_per_hour`, `best_val_metric`).
ALIASES = {"price_per_hour": "price_per_hour_usd", "best_val_metric": "val_metric"}
# Fields the seed documents name that have no column yet: read as numbers in their unit and kept as
# tags under the name that says the unit (a run's tags are shown and exported with the run).
MEASURES = {"tokens_per_sec": "throughput_tokens_per_s", "gpu_utilization_percent": "gpu_util_pct",
            "avg_gpu_util": "gpu_util_pct", "avg_cpu_util": "cpu_util_pct", "avg_mem_util": "mem_util_pct",
            "average_power_watts": "average_power_w", "batch_size": "batch_size", "epochs": "epochs",
            "num_epochs": "epochs",
            # figures the seed derives, kept as logged (the product derives its own from the run)
            "cost_per_1k_examples": "logged_cost_per_1k_examples_usd",
            "energy_kwh_per_1k_examples": "logged_energy_kwh_per_1k_examples"}


def build_run(record: dict, line: int, ctx: ParseContext, source_kind: str,
              prices: config.Prices | None = None, unknown: set[str] | None = None) -> tuple[dict, list[dict]]:
    """The `runs` row and `run_evals` rows for one record; raises BadValue with the reason.

    A run with neither a cost nor a price is priced from the catalog `prices` when it can be
    (catalog_price): cost_source `catalog`, price_per_hour_usd the catalog's. The seed documents'
    spellings (ALIASES) are read as the fields they name, their measures (MEASURES) kept as tags in
    their unit, and any other field kept as a tag of its own name, added to `unknown`."""
    tz = ctx.tz
    flags: list[str] = []
    record, extra_tags = _in_vocabulary(record, unknown)
    started = values.timestamp(record.get("start_time"), "start_time", tz)
    ended = values.timestamp(record.get("end_time"), "end_time", tz)
    duration_h = values.number(record.get("duration_hours"), "duration_hours", maximum=MAX_RUN_HOURS)
    if duration_h is not None and duration_h < 0:
        raise BadValue(f"duration_hours is negative ({duration_h})")
    if started and ended:
        if ended < started:
            raise BadValue(f"end_time {ended.isoformat()} is before start_time {started.isoformat()}")
        measured_h = (ended - started).total_seconds() / 3600
        if duration_h is not None and abs(duration_h - measured_h) > max(DURATION_TOLERANCE * measured_h, 0.01):
            flags.append(f"duration_hours {duration_h:g} differs from end_time - start_time ({measured_h:.4g} h); used the timestamps")
        duration_h = measured_h
    elif started and duration_h is not None:
        ended = started + timedelta(hours=duration_h)
    elif ended and duration_h is not None:
        started = ended - timedelta(hours=duration_h)
    if started is None:
        raise BadValue("no start_time (and no end_time with duration_hours to derive it)")

    price = _non_negative(values.money(record.get("price_per_hour_usd"), "price_per_hour_usd"), "price_per_hour_usd")
    given_cost = _non_negative(values.money(record.get("estimated_cost_usd"), "estimated_cost_usd"), "estimated_cost_usd")
    expected = None
    if price is not None and duration_h is not None:
        expected = values.fit_money(price * Decimal(repr(duration_h)), "duration x price").quantize(MICRO_USD)
    if given_cost is not None:
        cost, cost_source = given_cost, "given"
        if expected is not None and abs(given_cost - expected) > max(CENT, expected / 100):
            flags.append(f"estimated_cost_usd {given_cost} differs from duration x price = {expected.quantize(CENT)}")
    elif expected is not None:
        cost, cost_source = expected, "derived"
    else:
        cost, cost_source = None, None
    uuids = _text_list(record.get("gpu_uuids", record.get("gpu_uuid")), "gpu_uuids")
    indices = _int_list(record.get("gpu_indices", record.get("gpu_index")), "gpu_indices")
    gpu_count = _non_negative(values.integer(record.get("gpu_count"), "gpu_count", MAX_GPUS), "gpu_count")
    if gpu_count is None and (uuids or indices):
        gpu_count = len(uuids or indices)
    if cost is None and price is None and duration_h is not None and prices is not None:
        price = catalog_price(prices, values.text(record.get("instance_type"), "instance_type"),
                              values.text(record.get("gpu_type"), "gpu_type"), gpu_count, bool(uuids or indices))
        if price is not None:
            cost = values.fit_money(price * Decimal(repr(duration_h)), "catalog price x duration").quantize(MICRO_USD)
            cost_source = "catalog"

    if cost is None and prices is not None and source_kind == "runs":
        flags.append(_why_no_cost(record, duration_h))
    energy_kwh = _non_negative(values.number(record.get("energy_kwh"), "energy_kwh"), "energy_kwh")
    power_w = extra_tags.get("average_power_w")
    if energy_kwh is None and power_w is not None and duration_h is not None:
        energy_kwh = float(power_w) * duration_h / 1000  # the seed's energy = average_power_watts x duration_hours
        flags.append(f"energy_kwh derived: average_power_watts {power_w} W x {duration_h:.4g} h")

    throughput = _non_negative(values.number(record.get("throughput_examples_per_sec"), "throughput_examples_per_sec"), "throughput_examples_per_sec")
    examples = _non_negative(values.integer(record.get("examples"), "examples"), "examples")
    examples_source = "given" if examples is not None else None
    if examples is None and throughput is not None and duration_h is not None:
        examples, examples_source = round(throughput * duration_h * 3600), "derived"
        if examples > values.BIGINT_MAX:  # a throughput in the wrong unit; a BIGINT cannot hold it
            raise BadValue(f"throughput_examples_per_sec {throughput:g} x {duration_h:g} h is more examples "
                           f"than the warehouse holds (at most {values.BIGINT_MAX:,})")


    metric_name = values.text(record.get("val_metric_name"), "val_metric_name") or "val_metric"
    run_id = values.text(record.get("run_id"), "run_id")
    if run_id in (None, "unknown"):
        run_id = _derived_run_id(record, started)
    row = {
        "run_id": run_id,
        "project": values.text(record.get("project"), "project"),
        "team": values.text(record.get("team"), "team"),
        "owner": values.text(record.get("owner"), "owner"),
        "model": values.text(record.get("model"), "model"),
        "status": _status(record.get("status")),
        "region": values.text(record.get("region"), "region"),
        "host": values.text(record.get("host"), "host"),
        "instance_type": values.text(record.get("instance_type"), "instance_type"),
        "gpu_type": values.text(record.get("gpu_type"), "gpu_type"),
        "gpu_count": gpu_count,
        "gpu_uuids": uuids,
        "gpu_indices": indices,
        "started_at": started,
        "ended_at": ended,
        "duration_s": None if duration_h is None else duration_h * 3600,
        "price_per_hour_usd": price,
        "cost_usd": cost,
        "cost_source": cost_source,
        "cost_given_usd": given_cost,
        "flags": flags or None,
        "throughput_examples_per_s": throughput,
        "examples": examples,
        "examples_source": examples_source,
        "val_metric": values.number(record.get("val_metric"), "val_metric"),
        "val_metric_name": metric_name,
        "metric_goal": _goal(record.get("goal"), metric_name),
        "target_metric": values.number(record.get("target_metric"), "target_metric"),
        "energy_kwh": energy_kwh,
        "emissions_kg": _non_negative(values.number(record.get("emissions_kg"), "emissions_kg"), "emissions_kg"),
        "tags": _with_tags(_tags(record.get("tags")), extra_tags),
        "source_kind": source_kind,
        "source_line": line,
    }
    return row, _evals(record.get("eval_history"), run_id, started, tz)


def _in_vocabulary(record: dict, unknown: set[str] | None) -> tuple[dict, dict[str, str]]:
    """The record with the seed's spellings read as the fields they name, and the tags to add:
    each seed measure as a number in its unit, each field outside the vocabulary as its text."""
    if all(key in FIELDS for key in record):
        return record, {}
    read, extra = {}, {}
    for key, value in record.items():
        if key in FIELDS:
            read[key] = value
        elif key in ALIASES:
            name = ALIASES[key]
            if name in record and not values.is_absent(record[name]) and not values.is_absent(value) \
                    and values.number(record[name], name) != values.number(value, key):
                raise BadValue(f"{key} {value} and {name} {record[name]} disagree")
            read.setdefault(name, value)
        elif key in MEASURES:
            number = _non_negative(values.number(value, key), key)
            if number is not None:
                extra[MEASURES[key]] = f"{number:g}"
        else:
            if unknown is not None:
                unknown.add(key)
            if not values.is_absent(value):
                extra[key] = value if isinstance(value, str) else json.dumps(value, default=str, sort_keys=True)
    return read, extra


def _with_tags(tags: list[tuple[str, str]] | None, extra: dict[str, str]) -> list[tuple[str, str]] | None:
    """The record's own tags, then the extra fields whose names its tags do not already hold."""
    if not extra:
        return tags
    own = dict(tags or [])
    return sorted({**{k: v for k, v in extra.items() if k not in own}, **own}.items())


def _why_no_cost(record: dict, duration_h: float | None) -> str:
    """The flag of a run the product could not price: what it would have needed."""
    if duration_h is None:
        return "no cost: the run has no end_time or duration_hours yet"
    named = [f"{field} {record[field]!r}" for field in ("instance_type", "gpu_type") if not values.is_absent(record.get(field))]
    return ("no cost: neither estimated_cost_usd nor price_per_hour_usd is given, and the price catalog has no price for "
            + (" or ".join(named) if named else "a run that names no instance_type or gpu_type"))


def unknown_fields_warning(unknown: set[str]) -> list[str]:
    """The summary's word on fields outside the run vocabulary (kept as tags)."""
    if not unknown:
        return []
    names = sorted(unknown)
    shown = ", ".join(names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "")
    return [f"fields not recognised, kept as the runs' tags: {shown}"]


def json_record(line: int, text: str) -> object:
    """One line of a JSON-lines file read as JSON (exact decimals), or the Reject saying why not."""
    try:
        return json.loads(text, parse_float=Decimal)
    except json.JSONDecodeError as error:
        return Reject(line, f"not valid JSON: {error.msg} at column {error.colno}", text)
    except RecursionError:
        return Reject(line, "JSON nested too deeply to read", text[:500])


def catalog_price(prices: config.Prices, instance_type: str | None, gpu_type: str | None,
                  gpu_count: int | None, names_gpus: bool) -> Decimal | None:
    """USD per hour of a run from the catalog: a run that names its GPUs (a share of a node) pays
    the GPU price x its GPUs; else its instance's price; else the GPU price x its GPUs; None
    when the catalog knows neither."""
    per_gpu = prices.gpu(gpu_type) if gpu_count else None
    if names_gpus and per_gpu is not None:
        return per_gpu * gpu_count
    per_instance = prices.instance(instance_type)
    if per_instance is not None:
        return per_instance
    return per_gpu * gpu_count if per_gpu is not None else None


def collect(latest: dict[str, tuple[dict, list[dict]]], run: dict, evals: list[dict]) -> None:
    """Remember a run; a later record of the same run_id in the same file replaces it
    (CodeCarbon, for one, rewrites a run's row with growing totals as it goes)."""
    latest.pop(run["run_id"], None)
    latest[run["run_id"]] = (run, evals)


def to_parsed(latest: dict[str, tuple[dict, list[dict]]], parsed: Parsed) -> Parsed:
    """Put the collected runs and their eval points into `parsed`, in file order."""
    parsed.tables["runs"] = [run for run, _ in latest.values()]
    parsed.tables["run_evals"] = [point for _, evals in latest.values() for point in evals]
    return parsed


def run_totals(parsed: Parsed) -> dict:
    """The runs summary: run count, cost and energy totals over the runs that carry them."""
    runs = parsed.tables.get("runs", [])
    costs = [r["cost_usd"] for r in runs if r["cost_usd"] is not None]
    energies = [r["energy_kwh"] for r in runs if r["energy_kwh"] is not None]
    return {
        "runs": len(runs),
        "cost_usd_total": str(sum(costs, Decimal(0)).quantize(CENT)) if costs else None,
        "runs_with_cost": len(costs),
        "energy_kwh_total": round(sum(energies), 9) if energies else None,
        "runs_with_energy": len(energies),
    }


def staged_run_totals(con) -> dict:
    """run_totals of the runs staged in `con` (a run_id repeated keeps its last line), in SQL."""
    from ingest.engine import staging

    staging.keep_last(con, "runs")
    runs, cost, with_cost, energy, with_energy = con.execute(
        "SELECT count(*), sum(cost_usd), count(cost_usd), fsum(energy_kwh), count(energy_kwh) FROM runs").fetchall()[0]
    return {
        "runs": runs,
        "cost_usd_total": str(Decimal(cost).quantize(CENT)) if with_cost else None,
        "runs_with_cost": with_cost,
        "energy_kwh_total": round(energy, 9) if with_energy else None,
        "runs_with_energy": with_energy,
    }


def _evals(history: object, run_id: str, started, tz) -> list[dict]:
    if values.is_absent(history):
        return []
    if not isinstance(history, list):
        raise BadValue("eval_history must be a list of {elapsed_s or time, step, value} objects")
    rows = []
    for seq, point in enumerate(history):
        where = f"eval_history[{seq}]"
        if not isinstance(point, dict):
            raise BadValue(f"{where} must be an object")
        value = values.number(point.get("value"), f"{where}.value")
        if value is None:
            raise BadValue(f"{where} has no value")
        elapsed = values.number(point.get("elapsed_s"), f"{where}.elapsed_s")
        at = values.timestamp(point.get("time"), f"{where}.time", tz)
        if elapsed is None and at is not None:
            elapsed = (at - started).total_seconds()
        if elapsed is not None and elapsed < 0:
            raise BadValue(f"{where} is before the run started")
        rows.append({"run_id": run_id, "seq": seq, "step": values.integer(point.get("step"), f"{where}.step"),
                     "elapsed_s": elapsed, "value": value})
    return rows


def _derived_run_id(record: dict, started) -> str:
    identity = "|".join(str(record.get(k, "")) for k in ("project", "host", "instance_type"))
    digest = hashlib.sha256(f"{identity}|{started.isoformat()}".encode()).hexdigest()[:12]
    return f"auto-{digest}"


def _non_negative(value, name: str):
    if value is not None and value < 0:
        raise BadValue(f"{name} is negative ({value})")
    return value


def _status(value: object) -> str | None:
    status = values.text(value, "status")
    if status is None:
        return None
    status = STATUS_SYNONYMS.get(status.lower(), status.lower())
    if status not in STATUSES:
        raise BadValue(f"status {value!r} is not one of {', '.join(sorted(STATUSES))}")
    return status


def _goal(value: object, metric_name: str) -> str:
    goal = values.text(value, "goal")
    if goal is None:
        words = re.split(r"[^a-z0-9]+", metric_name.lower())
        return "min" if any(word in MIN_GOAL_WORDS for word in words) else "max"
    if goal.lower() not in GOAL_SYNONYMS:
        raise BadValue(f"goal {value!r} must be max or min")
    return GOAL_SYNONYMS[goal.lower()]


def _tags(value: object) -> list[tuple[str, str]] | None:
    if values.is_absent(value):
        return None
    if not isinstance(value, dict):
        raise BadValue("tags must be an object of name: value")
    pairs = []
    for key, tag in sorted(value.items()):
        if isinstance(tag, (dict, list)):
            raise BadValue(f"tag {key!r} must be a single value")
        pairs.append((str(key), "" if tag is None else str(tag)))
    return pairs


def _text_list(value: object, name: str) -> list[str] | None:
    if values.is_absent(value):
        return None
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list):
        raise BadValue(f"{name} must be a list")
    return [values.text(item, name) for item in items if not values.is_absent(item)]


def _int_list(value: object, name: str) -> list[int] | None:
    if values.is_absent(value):
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = [value]
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list):
        raise BadValue(f"{name} must be a list of GPU indices")
    return [values.integer(item, name, MAX_GPUS) for item in items if not values.is_absent(item)]
