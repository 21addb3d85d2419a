"""Where the lake is: $MLCOST_LAKE, else `[warehouse] lake` of the settings file ('' or unset: none)."""
from __future__ import annotations

import os
import threading
import tomllib

from ingest.settings import config

_cache: dict[tuple, str | None] = {}
_lock = threading.Lock()


def lake_url() -> str | None:
    """The lake's address (a folder or s3://bucket/prefix), or None for the embedded warehouse.
    Read on every connection, so the settings file is parsed again only when it changed."""
    named = os.environ.get("MLCOST_LAKE")
    if named is not None:
        return named.strip() or None
    try:
        path = config.user_path()
    except config.ConfigError:
        return None  # the settings' own checks say what is wrong with the file
    if path is None:
        return None
    try:
        stamp = path.stat()
    except OSError:
        return None
    key = (str(path), stamp.st_mtime_ns, stamp.st_size)
    with _lock:
        if key not in _cache:
            try:
                value = tomllib.loads(path.read_text(encoding="utf-8")).get("warehouse", {}).get("lake", "")
            except (OSError, tomllib.TOMLDecodeError, AttributeError):
                value = ""
            _cache.clear()
            _cache[key] = value.strip() or None if isinstance(value, str) else None
        return _cache[key]
