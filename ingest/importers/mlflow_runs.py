"""Runs from MLflow: a tracking server's REST API or a local `mlruns/` file store read directly.

Incremental: the watermark is the latest start or end time (epoch ms) among the runs seen; the
next import reads runs that started or ended after it, and every run still RUNNING (its metrics
and end are still coming). Deleted runs (lifecycle_stage `deleted`, or under `.trash`) are
skipped and counted.
"""
from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from ingest.importers.tracked_runs import TrackedRun, val_metric_name

KIND = "mlflow"
PAGE = 1000
TIMEOUT_S = 120.0
FILE_STATUSES = {1: "RUNNING", 2: "SCHEDULED", 3: "FINISHED", 4: "FAILED", 5: "KILLED"}
ERROR_TEXT_MAX = 300


class MlflowError(RuntimeError):
    """The tracking server or store could not be read; the message says which and why."""


@dataclass
class Fetched:
    """The runs changed since the watermark, how many deleted runs were skipped, and the new watermark."""

    runs: list[TrackedRun]
    deleted: int
    watermark_ms: int | None


def is_server(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


def display_uri(uri: str) -> str:
    """The URI without credentials or query: what may be shown and stored."""
    if not is_server(uri):
        return str(Path(uri.removeprefix("file://")).expanduser())
    parts = urllib.parse.urlsplit(uri)
    netloc = (parts.hostname or "") + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def fetch(uri: str, since_ms: int | None) -> Fetched:
    """Runs of every experiment that changed after since_ms (all runs when None)."""
    try:
        return (_fetch_server(uri, since_ms) if is_server(uri)
                else _fetch_files(Path(uri.removeprefix("file://")), since_ms))
    except (KeyError, TypeError, ValueError, AttributeError) as error:  # an answer not shaped like MLflow's
        raise MlflowError(f"{display_uri(uri)}: unexpected content ({type(error).__name__}: {error}); "
                          "is it an MLflow tracking server or mlruns/ folder?") from None
    except OSError as error:
        raise MlflowError(f"{display_uri(uri)}: cannot be read ({error.strerror or error})") from None


def _changed(run: TrackedRun, since_ms: int | None) -> bool:
    if since_ms is None or run.status in ("RUNNING", "SCHEDULED"):
        return True
    return any(t is not None and t > since_ms for t in (run.start_ms, run.end_ms))


def _watermark(runs: list[TrackedRun], since_ms: int | None) -> int | None:
    times = [t for run in runs for t in (run.start_ms, run.end_ms) if t is not None]
    return max(times + ([since_ms] if since_ms is not None else []), default=None)


# --- the REST API ---------------------------------------------------------------------------

class _Server:
    def __init__(self, uri: str) -> None:
        parts = urllib.parse.urlsplit(uri)
        self.display = display_uri(uri)
        token = os.environ.get("MLCOST_MLFLOW_TOKEN") or os.environ.get("MLFLOW_TRACKING_TOKEN")
        user = urllib.parse.unquote(parts.username or "") or os.environ.get("MLFLOW_TRACKING_USERNAME")
        password = urllib.parse.unquote(parts.password or "") or os.environ.get("MLFLOW_TRACKING_PASSWORD", "")
        self.auth = (f"Bearer {token}" if token else
                     "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode() if user else None)

    def call(self, method: str, path: str, body: dict | None = None, params: dict | None = None) -> dict:
        url = f"{self.display}/api/2.0/mlflow/{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if self.auth:
            request.add_header("Authorization", self.auth)
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as error:
            raise MlflowError(f"{self.display} answered HTTP {error.code}: {_error_text(error.read())}") from None
        except (urllib.error.URLError, OSError) as error:
            raise MlflowError(f"cannot reach {self.display}: {getattr(error, 'reason', error)}") from None
        except ValueError:
            raise MlflowError(f"{self.display} did not answer JSON: is it an MLflow tracking server?") from None


def _fetch_server(uri: str, since_ms: int | None) -> Fetched:
    server = _Server(uri)
    experiments, token = {}, None
    while True:
        body = {"max_results": PAGE, "view_type": "ALL", **({"page_token": token} if token else {})}
        answer = server.call("POST", "experiments/search", body)
        for experiment in answer.get("experiments", []):
            experiments[experiment["experiment_id"]] = experiment
        token = answer.get("next_page_token")
        if not token:
            break
    active = [e for e, x in experiments.items() if x.get("lifecycle_stage") != "deleted"]
    filters = [None] if since_ms is None else [f"attributes.start_time > {since_ms}",
                                               f"attributes.end_time > {since_ms}",
                                               "attributes.status = 'RUNNING'"]
    found: dict[str, dict] = {}
    deleted = 0
    for start in range(0, len(active), 100):  # runs/search takes at most 100 experiments
        for filter_text in filters:
            token = None
            while True:
                body = {"experiment_ids": active[start:start + 100], "max_results": PAGE, "run_view_type": "ALL",
                        **({"filter": filter_text} if filter_text else {}), **({"page_token": token} if token else {})}
                answer = server.call("POST", "runs/search", body)
                for run in answer.get("runs", []):
                    found[run["info"]["run_id"]] = run
                token = answer.get("next_page_token")
                if not token:
                    break
    runs = []
    for raw in found.values():
        info, data = raw["info"], raw.get("data", {})
        if info.get("lifecycle_stage") == "deleted":
            deleted += 1
            continue
        run = TrackedRun(
            run_id=info["run_id"], name=info.get("run_name"),
            experiment=experiments.get(info.get("experiment_id"), {}).get("name"),
            status=info.get("status"), start_ms=_int(info.get("start_time")), end_ms=_int(info.get("end_time")),
            params={p["key"]: p.get("value", "") for p in data.get("params", [])},
            tags={t["key"]: t.get("value", "") for t in data.get("tags", [])},
            metrics={m["key"]: float(m["value"]) for m in data.get("metrics", [])})
        run.val_metric = val_metric_name(run)
        if run.val_metric and run.val_metric in run.metrics:
            run.history = _server_history(server, run.run_id, run.val_metric)
        runs.append(run)
    runs.sort(key=lambda r: (r.start_ms or 0, r.run_id))
    return Fetched(runs, deleted, _watermark(runs, since_ms))


def _server_history(server: _Server, run_id: str, key: str) -> list[tuple[int | None, int | None, float]]:
    points, token = [], None
    while True:
        params = {"run_id": run_id, "metric_key": key, "max_results": 25000, **({"page_token": token} if token else {})}
        answer = server.call("GET", "metrics/get-history", params=params)
        points += [(_int(m.get("step")), _int(m.get("timestamp")), float(m["value"])) for m in answer.get("metrics", [])]
        token = answer.get("next_page_token")
        if not token:
            break
    return sorted(points, key=lambda p: (p[0] or 0, p[1] or 0))


# --- the file store (mlruns/) ----------------------------------------------------------------

def _fetch_files(root: Path, since_ms: int | None) -> Fetched:
    root = root.expanduser()
    if not root.is_dir():
        raise MlflowError(f"{root}: no such folder (an MLflow file store is the mlruns/ folder)")
    runs, deleted = [], 0
    experiments = sorted(p for p in root.iterdir() if p.is_dir() and (p / "meta.yaml").is_file())
    if not experiments and not (root / ".trash").is_dir():
        raise MlflowError(f"{root}: not an MLflow file store (no experiment folders with meta.yaml)")
    if (root / ".trash").is_dir():  # deleted experiments and runs
        deleted += sum(1 for exp in (root / ".trash").iterdir() if exp.is_dir()
                       for run in exp.iterdir() if (run / "meta.yaml").is_file())
    for experiment in experiments:
        meta = _yaml(experiment / "meta.yaml")
        name = str(meta.get("name")) if meta.get("name") is not None else experiment.name
        experiment_deleted = meta.get("lifecycle_stage") == "deleted"
        for folder in sorted(p for p in experiment.iterdir() if p.is_dir() and (p / "meta.yaml").is_file()):
            info = _yaml(folder / "meta.yaml")
            if experiment_deleted or info.get("lifecycle_stage") == "deleted":
                deleted += 1
                continue
            status = info.get("status")
            run = TrackedRun(
                run_id=str(info.get("run_id") or info.get("run_uuid") or folder.name),
                name=info.get("run_name"), experiment=name,
                status=FILE_STATUSES.get(status, str(status) if status is not None else None),
                start_ms=_int(info.get("start_time")), end_ms=_int(info.get("end_time")))
            if not _changed(run, since_ms):
                continue
            run.params = _values(folder / "params")
            run.tags = _values(folder / "tags")
            histories = {}
            for key, path in _files(folder / "metrics"):
                histories[key], problem = _history(path)
                run.problem = run.problem or (problem and f"metric {key}: {problem}")
            run.metrics = {key: max(points, key=lambda p: (p[0] or 0, p[1] or 0))[2]
                           for key, points in histories.items() if points}
            run.name = run.name or run.tags.get("mlflow.runName")
            run.val_metric = val_metric_name(run)
            run.history = sorted(histories.get(run.val_metric or "", []), key=lambda p: (p[0] or 0, p[1] or 0))
            runs.append(run)
    runs.sort(key=lambda r: (r.start_ms or 0, r.run_id))
    return Fetched(runs, deleted, _watermark(runs, since_ms))


def _yaml(path: Path) -> dict:
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise MlflowError(f"{path}: cannot be read as YAML ({error})") from None
    return loaded if isinstance(loaded, dict) else {}


def _files(folder: Path):
    """(key, path) of every file under folder; keys with '/' are nested folders in the store."""
    if not folder.is_dir():
        return []
    return sorted((path.relative_to(folder).as_posix(), path) for path in folder.rglob("*") if path.is_file())


def _values(folder: Path) -> dict[str, str]:
    """Params or tags: one file per key holding the value (MLflow writes no trailing newline)."""
    return {key: path.read_text(encoding="utf-8").removesuffix("\n").removesuffix("\r") for key, path in _files(folder)}


def _history(path: Path) -> tuple[list[tuple[int | None, int | None, float]], str | None]:
    """A metric file's lines `timestamp_ms value [step]`, and the first line that is not one."""
    points = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue
        try:
            if len(fields) not in (2, 3):
                raise ValueError
            points.append((int(fields[2]) if len(fields) > 2 else None, int(fields[0]), float(fields[1])))
        except ValueError:
            return points, f"line {number} {line[:80]!r} is not 'timestamp value step'"
    return points, None


def _int(value: object) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _error_text(body: bytes) -> str:
    try:
        answer = json.loads(body)
        text = f"{answer.get('error_code', '')}: {answer.get('message', '')}".strip(": ")
    except ValueError:
        text = body.decode("utf-8", "replace")
    text = " ".join(text.split())
    return text[:ERROR_TEXT_MAX] + ("…" if len(text) > ERROR_TEXT_MAX else "")
