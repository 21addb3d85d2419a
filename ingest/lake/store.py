"""A lake's storage: a local folder or an s3:// prefix, through one fsspec filesystem.

S3 goes through s3fs (the standard AWS credential chain; an S3-compatible endpoint from
$AWS_ENDPOINT_URL_S3 or $AWS_ENDPOINT_URL, as the AWS SDKs read them). DuckDB reads the same
filesystem (register_filesystem), so no httpfs extension is needed. Credentials are never printed.
"""
from __future__ import annotations

import json
import os
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ingest.lake import layout

LISTING_TTL_S = 2.0  # a process looks for new ledger entries at most this often


class LakeError(RuntimeError):
    """A lake that cannot be used (a bad address, storage refusing access); one sentence."""


@dataclass(frozen=True)
class Entry:
    """One committed load (the ledger file _ledger/<load_id>.json)."""

    load_id: int
    record: dict

    @property
    def committed_at(self) -> str:
        return self.record["committed_at"]

    @property
    def files(self) -> dict[str, list[str]]:
        return self.record.get("files", {})

    @property
    def supersedes(self) -> list[int]:
        # ids are decimal strings in JSON (60-bit integers exceed the 2^53 a JSON number keeps exactly)
        return [int(x) for x in self.record.get("supersedes", [])]


class Lake:
    """One lake: `url` is a folder or s3://bucket/prefix."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.s3 = self.url.startswith("s3://")
        if self.s3:
            bucket_prefix = self.url[len("s3://"):]
            if not bucket_prefix or bucket_prefix.startswith("/"):
                raise LakeError(f"{url!r} is not an s3://bucket/prefix address")
            try:
                import s3fs  # noqa: PLC0415  (only lakes on S3 need it)
            except ImportError:
                raise LakeError("a lake on S3 needs s3fs: pip install s3fs (or mlcost[lake])") from None

            endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
            self.fs: Any = s3fs.S3FileSystem(endpoint_url=endpoint or None, use_listings_cache=False)
            self.root = bucket_prefix
        else:
            self.fs = LocalFiles()
            self.root = str(Path(self.url.removeprefix("file://")).expanduser().resolve())
        self._entries: dict[int, Entry] = {}
        self._generations: dict[str, list[str]] = {}  # a derived folder's Parquet files (folders never change)
        self._listed_at = -1e9
        self._current: tuple[float, dict] = (-1e9, {})
        self._lock = threading.Lock()

    # paths
    def path(self, relative: str) -> str:
        """The filesystem path of a file in the lake (for self.fs)."""
        return f"{self.root}/{relative}"

    def duckdb_path(self, relative: str) -> str:
        """The path DuckDB reads (s3://... through register() on S3)."""
        return f"s3://{self.root}/{relative}" if self.s3 else self.path(relative)

    def register(self, con: Any) -> None:
        """Let a DuckDB connection read this lake's s3:// paths."""
        if self.s3 and not con.filesystem_is_registered(self.fs.protocol[0] if isinstance(self.fs.protocol, tuple)
                                                        else self.fs.protocol):
            con.register_filesystem(self.fs)

    # writes
    def put_file(self, local: Path, relative: str) -> None:
        """Copy a local file to the lake (locally: beside it, then renamed, so never half there)."""
        target = self.path(relative)
        if self.s3:
            self.fs.put_file(str(local), target)
            return
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        partial = f"{target}.{uuid.uuid4().hex}.partial"
        if _same_device(local, Path(target).parent):
            os.replace(local, partial)
        else:
            _copy(local, partial)
        os.replace(partial, target)

    def put_json(self, relative: str, record: dict) -> None:
        """Write one JSON document atomically: one PUT on S3, write-then-rename locally."""
        data = json.dumps(record, indent=1, sort_keys=True).encode()
        target = self.path(relative)
        if self.s3:
            self.fs.pipe_file(target, data)
            return
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        partial = f"{target}.{uuid.uuid4().hex}.partial"
        with open(partial, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, target)

    def read_json(self, relative: str) -> dict | None:
        try:
            with self.fs.open(self.path(relative), "rb") as source:
                return json.loads(source.read())
        except FileNotFoundError:
            return None

    def exists(self, relative: str) -> bool:
        return self.fs.exists(self.path(relative))

    def remove(self, relative: str) -> None:
        self.fs.rm_file(self.path(relative))

    def listing(self, relative: str) -> list[tuple[str, float]]:
        """Every file under a folder of the lake, recursively: (path relative to the lake, mtime as epoch s)."""
        base = self.path(relative)
        if not self.fs.exists(base):
            return []
        found = []
        for name, info in self.fs.find(base, detail=True).items():
            modified = info.get("mtime") or info.get("LastModified") or info.get("created")
            stamp = modified.timestamp() if hasattr(modified, "timestamp") else float(modified or 0)
            found.append((name[len(self.root) + 1:], stamp))
        return found

    def current(self, fresh: bool = False) -> dict:
        """derived/_current.json (the generation readers use; {} before the first derive), read
        again at most every LISTING_TTL_S."""
        with self._lock:
            read_at, record = self._current
            if fresh or time.monotonic() - read_at >= LISTING_TTL_S:
                record = self.read_json(layout.CURRENT) or {}
                self._current = (time.monotonic(), record)
            return record

    def derived_files(self, listed: str | list[str]) -> list[str]:
        """The Parquet files of one derived table as _current.json names them: a folder (listed
        once per process) or a list of files; relative to the lake."""
        if isinstance(listed, list):
            return listed
        with self._lock:
            if listed not in self._generations:
                self._generations[listed] = sorted(name for name, _ in self.listing(listed)
                                                   if name.endswith(".parquet"))
            return self._generations[listed]

    # the ledger
    def entries(self, fresh: bool = False) -> dict[int, Entry]:
        """Every committed load, by load id (superseded ones too; see visible()). Entries never
        change once written, so each is read once per process; the folder is listed again at most
        every LISTING_TTL_S (or now with `fresh`)."""
        with self._lock:
            if fresh or time.monotonic() - self._listed_at >= LISTING_TTL_S:
                names = [name for name, _ in self.listing(layout.LEDGER) if name.endswith(".json")]
                for name in names:
                    load = name.rsplit("/", 1)[-1].removesuffix(".json")
                    if load.isdigit() and int(load) not in self._entries:
                        record = self.read_json(name)
                        if record is not None:
                            self._entries[int(load)] = Entry(int(load), record)
                self._listed_at = time.monotonic()
            return dict(self._entries)

    def visible(self, fresh: bool = False) -> list[Entry]:
        """The loads readers see, in commit order: committed and not superseded by another."""
        entries = self.entries(fresh)
        superseded = {old for entry in entries.values() for old in entry.supersedes}
        return sorted((entry for load, entry in entries.items() if load not in superseded),
                      key=lambda entry: (entry.committed_at, entry.load_id))


class LocalFiles:
    """The few filesystem calls a lake makes (fsspec's names), for a local folder: no fsspec needed."""

    protocol = "file"

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def open(self, path: str, mode: str = "rb"):
        return open(path, mode)

    def rm_file(self, path: str) -> None:
        Path(path).unlink(missing_ok=True)

    def find(self, base: str, detail: bool = False) -> dict[str, dict]:
        found = {}
        for folder, _, names in os.walk(base):
            for name in names:
                path = os.path.join(folder, name)
                try:
                    found[path] = {"mtime": os.stat(path).st_mtime}
                except FileNotFoundError:  # removed meanwhile (a vacuum, a rename)
                    continue
        return found


_lakes: dict[str, Lake] = {}
_lakes_lock = threading.Lock()


def open_lake(url: str) -> Lake:
    """The process's Lake object for `url` (its ledger cache is shared)."""
    with _lakes_lock:
        if url not in _lakes:
            _lakes[url] = Lake(url)
        return _lakes[url]


def _same_device(local: Path, folder: Path) -> bool:
    try:
        return os.stat(local).st_dev == os.stat(folder).st_dev
    except OSError:
        return False


def _copy(local: Path, target: str) -> None:
    import shutil  # noqa: PLC0415

    shutil.copyfile(local, target)
    local.unlink()
