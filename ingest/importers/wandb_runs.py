"""Weights & Biases runs without the network: the runs-table CSV export of the W&B UI (a parser
of the file contract, so `mlcost ingest` detects it too) and local run folders
(`wandb/run-<date>-<id>/files/`: config.yaml, wandb-summary.json, wandb-metadata.json).

CSV export: `Name`, `State`, `Notes`, `User`, `Tags`, `Created` (UTC), `Runtime` (seconds),
`Sweep`, then one column per config key and summary metric. A run folder: the id is the folder
name's last part; the start is the metadata's `startedAt` (UTC), the end start + the summary's
`_runtime` seconds; GPU model and count from the metadata (`gpu`, `gpu_count`).
"""
from __future__ import annotations

import csv
import json
from datetime import timezone
from pathlib import Path


from ingest.engine import values
from ingest.engine.contract import BadValue, Lines, ParseContext, Parsed, Reject
from ingest.formats.runs.run_record import run_totals
from ingest.importers.tracked_runs import TrackedRun, parse_runs

KIND = "wandb"
TABLES = ("runs", "run_evals")
HEADER = ("Name", "State", "Created", "Runtime")
FIXED = {"Name", "State", "Notes", "User", "Tags", "Created", "Runtime", "Sweep", "ID", "Run ID",
         "GPU Type", "GPU Count"}


def sniff(name: str, head: str) -> bool:
    """A CSV whose header has the W&B runs table's own columns."""
    first = next(csv.reader([head.lstrip("\ufeff").split("\n", 1)[0]]), [])
    return all(column in first for column in HEADER)


def parse(lines: Lines, ctx: ParseContext) -> Parsed:
    """Runs of a W&B runs-table export; a row that cannot be read is a reject with its line."""
    numbered = list(lines)
    texts = iter(text + "\n" for _, text in numbered)
    reader = csv.reader(texts)
    header = [c.strip() for c in next(reader, [])]
    if header:
        header[0] = header[0].lstrip("\ufeff")
    runs, lines_of, rejects = [], [], []
    line = 1
    for fields in reader:
        start_line, line = line + 1, reader.line_num
        if not any(f.strip() for f in fields):
            continue
        if len(fields) != len(header):
            rejects.append(Reject(start_line, f"has {len(fields)} fields, the header has {len(header)}",
                                  ",".join(fields)[:500]))
            continue
        row = dict(zip(header, fields))
        try:
            runs.append(_csv_run(row, ctx))
            lines_of.append(start_line)
        except BadValue as error:
            rejects.append(Reject(start_line, str(error), ",".join(fields)[:500]))
    parsed = parse_runs(runs, ctx, KIND)
    by_position = {n: line for n, line in enumerate(lines_of, start=1)}
    for row in parsed.tables.get("runs", []):  # parse_runs numbers runs by position: back to lines
        row["source_line"] = by_position[row["source_line"]]
    parsed.rejects = sorted(rejects + [Reject(by_position[r.line], r.reason, r.raw) for r in parsed.rejects],
                            key=lambda r: r.line)
    return parsed


totals = run_totals


def _csv_run(row: dict[str, str], ctx: ParseContext) -> TrackedRun:
    name = row.get("Name", "").strip()
    run_id = (row.get("ID") or row.get("Run ID") or "").strip() or (f"wandb-{name}" if name else "")
    if not run_id:
        raise BadValue("no Name (or ID): a run needs one")
    created = values.timestamp(row.get("Created"), "Created", ctx.tz)
    runtime = values.number(row.get("Runtime"), "Runtime")
    if runtime is not None and runtime < 0:
        raise BadValue(f"Runtime is negative ({runtime:g})")
    extra = {k: v for k, v in row.items() if k not in FIXED and v.strip() != ""}
    tags = {"owner": row.get("User", "").strip()} if row.get("User", "").strip() else {}
    if row.get("Tags", "").strip():
        tags["wandb_tags"] = row["Tags"].strip()
    if row.get("Sweep", "").strip():
        tags["sweep"] = row["Sweep"].strip()
    run = TrackedRun(run_id=run_id, name=name or None, experiment=None, status=(row.get("State") or "").strip() or None,
                     start_ms=None if created is None else int(created.timestamp() * 1000), end_ms=None,
                     params={k: v for k, v in extra.items() if _float(v) is None},
                     tags=tags, metrics={k: f for k, v in extra.items() if (f := _float(v)) is not None},
                     gpu_type=(row.get("GPU Type") or "").strip() or None,
                     gpu_count=values.integer(row.get("GPU Count"), "GPU Count"), runtime_s=runtime)
    if run.start_ms is not None and runtime is not None and run.status != "running":
        run.end_ms = run.start_ms + int(round(runtime * 1000))
    return run


def read_run_folders(root: Path) -> tuple[list[TrackedRun], list[Reject], bytes]:
    """The runs of W&B run folders under root (root itself may be one), the folders that could not
    be read, and their files' bytes (the import's content for the ledger)."""
    folders = sorted({p.parent.parent for p in root.rglob("wandb-metadata.json") if p.parent.name == "files"}
                     | {p.parent.parent for p in root.rglob("wandb-summary.json") if p.parent.name == "files"})
    runs, rejects, content = [], [], []
    for number, folder in enumerate(folders, start=1):
        files = folder / "files"
        try:
            metadata = _json(files / "wandb-metadata.json")
            summary = _json(files / "wandb-summary.json")
            config = _config(files / "config.yaml")
        except BadValue as error:
            rejects.append(Reject(number, f"{folder}: {error}", str(folder)))
            continue
        content += [(files / n).read_bytes() for n in ("wandb-metadata.json", "wandb-summary.json", "config.yaml")
                    if (files / n).is_file()]
        run_id = folder.name.rsplit("-", 1)[-1]
        started = metadata.get("startedAt")
        start_ms = None
        try:
            start = values.timestamp(started, "startedAt", timezone.utc)
            start_ms = None if start is None else int(start.timestamp() * 1000)
        except BadValue as error:
            rejects.append(Reject(number, f"{folder}: {error}", str(folder)))
            continue
        runtime = summary.get("_runtime")
        metrics = {k: float(v) for k, v in summary.items()
                   if not k.startswith("_") and isinstance(v, (int, float)) and not isinstance(v, bool)}
        run = TrackedRun(run_id=run_id, name=None, experiment=None, status=None, start_ms=start_ms,
                         end_ms=(start_ms + int(round(float(runtime) * 1000))
                                 if start_ms is not None and isinstance(runtime, (int, float)) else None),
                         params={k: json.dumps(v) if isinstance(v, (dict, list)) else str(v) for k, v in config.items()},
                         tags={"host": metadata["host"]} if metadata.get("host") else {},
                         metrics=metrics, gpu_type=metadata.get("gpu") or None,
                         gpu_count=metadata.get("gpu_count") if isinstance(metadata.get("gpu_count"), int) else None)
        devices = metadata.get("gpu_nvidia") or metadata.get("gpu_devices")
        if isinstance(devices, list):
            run.gpu_uuids = [str(d["uuid"]) for d in devices if isinstance(d, dict) and d.get("uuid")] or None
        if metadata.get("username"):
            run.tags["owner"] = str(metadata["username"])
        runs.append(run)
    return runs, rejects, b"\0".join(content)


def _json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise BadValue(f"{path.name} is not valid JSON ({error})") from None
    if not isinstance(loaded, dict):
        raise BadValue(f"{path.name} is not a JSON object")
    return loaded


def _config(path: Path) -> dict:
    """config.yaml's keys and values: W&B writes each as {desc: ..., value: ...}; `_wandb` is its own."""
    if not path.is_file():
        return {}
    import yaml  # here: detection imports this module for every file (runs and serving files too)

    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (UnicodeDecodeError, yaml.YAMLError) as error:
        raise BadValue(f"config.yaml cannot be read as YAML ({error})") from None
    if not isinstance(loaded, dict):
        raise BadValue("config.yaml is not a mapping")
    return {str(k): (v.get("value") if isinstance(v, dict) and "value" in v else v)
            for k, v in loaded.items() if not str(k).startswith("_") and k != "wandb_version"}


def _float(text: str) -> float | None:
    try:
        return values.number(text, "value")
    except BadValue:
        return None
