"""Pull cloud bills from S3 into a local folder, incrementally, for `mlcost fetch` to ingest.

Objects land at `<dest>/<bucket>/<name>`, one flat file per key: the key's tail made safe
(letters, digits, `.`, `_` and `-` kept, anything else `_`, at most 100 characters), a hash of
the whole key, and the key's file suffix (`.csv.gz`, `.parquet`). Any set of legal S3 keys thus
maps to distinct files that stay inside that folder: `a.csv` and `a.csv/b.csv`, keys of 1,024
bytes, `..` parts, backslashes and any Unicode alike.
Incremental: `<dest>/.mlcost-fetch.json` records each object fetched (by bucket, key and ETag)
and whether it was ingested, or why it could not be; an object whose ETag is unchanged and whose
file is still there is not transferred again, nor loaded again after a failure. Resumable: each object is written to `<name>.part` and renamed when
complete, and the state file is rewritten (atomically) after every object, so a fetch stopped
half-way leaves no half file under a real name and the next run fetches only what is missing,
then ingests whatever was fetched but not yet ingested.

CUR manifests (`*Manifest.json`): when the prefix holds any, they decide what is fetched: the
files their `reportKeys` (legacy CUR: keys in the manifest's `bucket`) or `dataFiles` (CUR 2.0:
`s3://bucket/key` URIs) list, the current delivery of each report. A manifest is followed only
inside the bucket and prefix asked for: a listed file elsewhere is refused, not fetched. Data files under the prefix
that no manifest lists belong to superseded deliveries and are left alone. Without manifests,
every data file under the prefix (the loader's file suffixes) is fetched.

The S3 client is handed in (boto3's, from the standard credential chain in the CLI), so tests
can point it at a local endpoint.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from ingest.pipeline.loader import FILE_SUFFIXES

STATE_FILE = ".mlcost-fetch.json"
MANIFEST_SUFFIX = "Manifest.json"
CHUNK_BYTES = 1 << 20
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.\-_]{1,254}$")


class UnsafeKey(ValueError):
    """An object key that would be written outside the download folder."""


@dataclass
class FetchResult:
    """What one fetch did: objects transferred, left as they were, refused, and what to ingest."""

    downloaded: list[str] = field(default_factory=list)      # s3:// URIs transferred this time
    bytes_downloaded: int = 0
    unchanged: list[str] = field(default_factory=list)       # same ETag, already here
    refused: list[tuple[str, str]] = field(default_factory=list)  # (URI, reason)
    not_in_manifest: list[str] = field(default_factory=list)  # data files no manifest lists
    pending: list[tuple[str, Path]] = field(default_factory=list)  # (URI, local file) not yet ingested
    failed_before: list[tuple[str, str]] = field(default_factory=list)  # (URI, reason): unchanged since it failed


def parse_uri(uri: str) -> tuple[str, str]:
    """(bucket, prefix) of `s3://bucket/prefix`; ValueError for anything else."""
    match = re.fullmatch(r"s3://([^/]+)/?(.*)", uri.strip())
    if not match or not _BUCKET.match(match[1]):
        raise ValueError(f"{uri!r} is not an S3 location (s3://bucket/prefix)")
    return match[1], match[2]


def local_path(dest: Path, bucket: str, key: str) -> Path:
    """Where an object goes under dest: `<dest>/<bucket>/<safe tail>-<hash><suffix>`, distinct
    per key and always inside dest; UnsafeKey for an invalid bucket name or an empty key."""
    if not _BUCKET.match(bucket):
        raise UnsafeKey(f"bucket name {bucket!r} is not a valid S3 bucket name")
    if not key:
        raise UnsafeKey("an empty key")
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    name = PurePosixPath(key.replace("\\", "/")).name
    suffixes = [s for s in PurePosixPath(name).suffixes[-2:] if re.fullmatch(r"\.[A-Za-z0-9]{1,10}", s)]
    if len(suffixes) == 2 and suffixes[-1].lower() != ".gz":
        suffixes = suffixes[-1:]  # "report.2026.csv": only ".csv"
    suffix = "".join(suffixes)
    stem = key[: len(key) - len(suffix)] if suffix and key.endswith(suffix) else key
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", stem).strip("._-")[-100:] or "object"
    return dest.resolve() / bucket / f"{safe}-{digest}{suffix.lower()}"


def _inside(where: str, key: str, bucket: str, prefix: str) -> bool:
    """Whether a manifest's file is in the bucket and under the prefix that was asked for."""
    return where == bucket and key.startswith(prefix)


def fetch(client: Any, bucket: str, prefix: str, dest: Path) -> FetchResult:
    """Bring `s3://bucket/prefix` up to date in dest (see the module docstring)."""
    dest.mkdir(parents=True, exist_ok=True)
    state = _read_state(dest)
    result = FetchResult()
    listed = _list(client, bucket, prefix)
    manifests = [key for key in listed if key.endswith(MANIFEST_SUFFIX)]
    if manifests:
        wanted: dict[tuple[str, str], str | None] = {}
        for key in manifests:
            for target in _manifest_targets(client, bucket, key, listed[key], dest, state, result):
                if not _inside(*target, bucket, prefix):
                    result.refused.append((_uri(*target), f"refused: listed by {_uri(bucket, key)} but outside "
                                                          f"{_uri(bucket, prefix)}, the location asked for"))
                    continue
                wanted.setdefault(target, listed.get(target[1]))
        result.not_in_manifest = [_uri(bucket, k) for k in listed
                                  if _is_data(k) and (bucket, k) not in wanted]
    else:
        wanted = {(bucket, key): etag for key, etag in listed.items() if _is_data(key)}
    for (where, key), etag in wanted.items():
        _fetch_one(client, where, key, etag, dest, state, result)
    waiting = [(uri, entry) for uri, entry in sorted(state["objects"].items())
               if entry.get("data") and not entry.get("ingested") and (dest / entry["path"]).is_file()]
    result.pending = [(uri, dest / entry["path"]) for uri, entry in waiting if "failed" not in entry]
    result.failed_before = [(uri, entry["failed"]) for uri, entry in waiting if "failed" in entry]
    return result


def mark_ingested(dest: Path, uris: list[str]) -> None:
    """Record that these fetched objects were ingested (the next fetch will not ingest them again)."""
    _mark(dest, uris, ingested=True)


def mark_failed(dest: Path, uri: str, reason: str) -> None:
    """Record that this fetched object could not be loaded, and why: the next fetch reports it
    without trying again, until the object changes (a new ETag fetches and tries it afresh)."""
    _mark(dest, [uri], failed=reason)


def _mark(dest: Path, uris: list[str], **fields) -> None:
    state = _read_state(dest)
    for uri in uris:
        if uri in state["objects"]:
            state["objects"][uri].update(fields)
    _write_state(dest, state)


def _list(client: Any, bucket: str, prefix: str) -> dict[str, str]:
    """key -> ETag of every object under the prefix (folder markers left out)."""
    found: dict[str, str] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            if not item["Key"].endswith("/"):
                found[item["Key"]] = item["ETag"]
    return found


def _is_data(key: str) -> bool:
    name = PurePosixPath(key).name.lower()
    return not name.endswith(MANIFEST_SUFFIX.lower()) and PurePosixPath(name).suffix in FILE_SUFFIXES


def _manifest_targets(client: Any, bucket: str, key: str, etag: str, dest: Path, state: dict,
                      result: FetchResult) -> list[tuple[str, str]]:
    """(bucket, key) of each file a manifest lists; the manifest is fetched like any object."""
    path = _fetch_one(client, bucket, key, etag, dest, state, result, data=False)
    if path is None:
        return []
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        result.refused.append((_uri(bucket, key), f"manifest is not valid JSON ({error})"))
        return []
    if not isinstance(manifest, dict):
        result.refused.append((_uri(bucket, key), "manifest is not a JSON object"))
        return []
    targets = []
    home = manifest.get("bucket") if isinstance(manifest.get("bucket"), str) else bucket
    for report_key in manifest.get("reportKeys") or []:
        targets.append((home, str(report_key)))
    for data_file in manifest.get("dataFiles") or []:
        try:
            where, data_key = parse_uri(str(data_file))
        except ValueError as error:
            result.refused.append((str(data_file), str(error)))
            continue
        targets.append((where, data_key))
    return targets


def _fetch_one(client: Any, bucket: str, key: str, etag: str | None, dest: Path, state: dict,
               result: FetchResult, data: bool = True) -> Path | None:
    """Download one object unless the state has it with this ETag; the local path, or None if refused."""
    uri = _uri(bucket, key)
    try:
        path = local_path(dest, bucket, key)
    except UnsafeKey as unsafe:
        result.refused.append((uri, f"refused: {unsafe}"))
        return None
    if etag is None:  # listed by a manifest but not (yet) in the listing: ask for its ETag
        try:
            etag = client.head_object(Bucket=bucket, Key=key)["ETag"]
        except Exception as error:  # noqa: BLE001 (botocore's errors; a missing file is not fatal)
            result.refused.append((uri, f"refused: cannot be read ({type(error).__name__})"))
            return None
    known = state["objects"].get(uri)
    if known and known.get("etag") == etag and path.is_file():
        result.unchanged.append(uri)
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".part")
    answer = client.get_object(Bucket=bucket, Key=key)
    size = 0
    with partial.open("wb") as out:
        for chunk in answer["Body"].iter_chunks(CHUNK_BYTES):
            out.write(chunk)
            size += len(chunk)
    os.replace(partial, path)
    state["objects"][uri] = {"etag": answer.get("ETag", etag), "size": size,
                             "path": path.relative_to(dest.resolve()).as_posix(), "data": data,
                             "ingested": False}
    _write_state(dest, state)
    result.downloaded.append(uri)
    result.bytes_downloaded += size
    return path


def _uri(bucket: str, key: str) -> str:
    return f"s3://{bucket}/{key}"


def _read_state(dest: Path) -> dict:
    path = dest / STATE_FILE
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"version": 1, "objects": {}}
    except (OSError, json.JSONDecodeError):  # damaged: start over (files are fetched again, the ledger dedupes)
        return {"version": 1, "objects": {}}
    if not isinstance(state, dict) or not isinstance(state.get("objects"), dict):
        return {"version": 1, "objects": {}}
    return state


def _write_state(dest: Path, state: dict) -> None:
    path = dest / STATE_FILE
    temporary = path.with_name(path.name + ".part")
    temporary.write_text(json.dumps(state, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(temporary, path)
