"""tests/corpus.py: the real sample files found beside the checkout, or fetched at pinned commits
and checked, or a skip that says how to get them. Downloads go to a real HTTP server on
127.0.0.1 (MLCOST_CORPUS_MIRROR's role), never to the network."""
from __future__ import annotations

import hashlib
import re
import socket
import threading
from dataclasses import replace
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests import corpus
from tests.conftest import FORMATS_DIR

UPSTREAM = b"header,a\n1,2\n3,4\n5,6\n"  # a made-up upstream file for the cut tests


@pytest.fixture
def mirror(tmp_path: Path):
    """A real HTTP server on 127.0.0.1 serving tmp_path/www as raw.githubusercontent.com lays out
    files (/<owner>/<repo>/<commit>/<path>); yields (base URL, that folder)."""
    root = tmp_path / "www"
    root.mkdir()
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_QuietHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", root
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def publish(root: Path, entry: corpus.CorpusFile, data: bytes) -> None:
    """Put data where the mirror serves entry's upstream file."""
    target = root / entry.repo / entry.commit / entry.path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def made_up(lines: tuple[int, int] | None = None, **changes) -> corpus.CorpusFile:
    kept = b"".join(UPSTREAM.splitlines(keepends=True)[lines[0] - 1:lines[1]]) if lines else UPSTREAM
    entry = corpus.CorpusFile("made_up/sample.csv", sha(kept), "someone/somewhere", "0" * 40, "data/sample.csv",
                              lines=lines, upstream_sha256=sha(UPSTREAM) if lines else None)
    return replace(entry, **changes)


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_without_network_the_skip_says_how_to_get_the_files(tmp_path, monkeypatch):
    monkeypatch.setenv("MLCOST_CORPUS_DIR", str(tmp_path / "cache"))
    with pytest.raises(corpus.CorpusUnavailable) as missing:
        corpus.locate(mirror=f"http://127.0.0.1:{closed_port()}", shared=tmp_path / "no-shared-folder")
    message = str(missing.value)
    assert "could not be downloaded (ConnectionError)" in message
    assert "python -m tests.corpus" in message and "MLCOST_CORPUS_MIRROR" in message
    assert str(tmp_path / "cache" / "formats") in message
    assert not (tmp_path / "cache" / "formats").exists()


def test_the_shared_folder_wins_without_any_download(tmp_path):
    shared = tmp_path / "formats"
    shared.mkdir()
    assert corpus.locate(mirror=f"http://127.0.0.1:{closed_port()}", folder=tmp_path, shared=shared) == shared


def test_a_whole_file_is_fetched_and_checked(tmp_path, mirror):
    base, root = mirror
    entry = made_up()
    publish(root, entry, UPSTREAM)
    path = corpus.fetch(entry, tmp_path / "cache", mirror=base)
    assert path == tmp_path / "cache" / "formats" / "made_up" / "sample.csv"
    assert path.read_bytes() == UPSTREAM
    (root / entry.repo).rename(root / "gone")  # a second call uses the checked copy
    assert corpus.fetch(entry, tmp_path / "cache", mirror=base).read_bytes() == UPSTREAM


def test_a_file_that_is_not_the_pinned_one_is_refused(tmp_path, mirror):
    base, root = mirror
    entry = made_up()
    publish(root, entry, UPSTREAM.replace(b"3,4", b"3,5"))
    with pytest.raises(corpus.ChecksumMismatch, match="is not the pinned file"):
        corpus.fetch(entry, tmp_path / "cache", mirror=base)
    assert not (tmp_path / "cache" / "formats" / entry.name).exists()


def test_a_cut_file_is_checked_whole_then_cut_and_checked_again(tmp_path, mirror):
    base, root = mirror
    entry = made_up(lines=(2, 3))
    publish(root, entry, UPSTREAM)
    assert corpus.fetch(entry, tmp_path / "cache", mirror=base).read_bytes() == b"1,2\n3,4\n"
    wrong_cut = made_up(lines=(2, 3), sha256=sha(b"1,2\n"), name="made_up/other.csv")
    with pytest.raises(corpus.ChecksumMismatch, match="lines 2-3 of the download"):
        corpus.fetch(wrong_cut, tmp_path / "cache", mirror=base)
    assert not (tmp_path / "cache" / "formats" / "made_up" / "other.csv").exists()


def test_a_real_file_is_served_where_its_manifest_entry_points(tmp_path, mirror, formats_dir):
    """A copy of one real sample file, laid out as GitHub serves it at the pinned commit."""
    base, root = mirror
    entry = corpus.BY_NAME["aws_cur/koku_test_cur.csv"]
    original = (formats_dir / entry.name).read_bytes()
    publish(root, entry, original)
    assert corpus.fetch(entry, tmp_path / "cache", mirror=base).read_bytes() == original


def test_the_manifest_matches_the_pinned_table_and_the_files():
    """Every file of ../shared/formats/README.md "Pinned sources and checksums" is in the
    manifest with the same commit and sha256, and the files there have those checksums."""
    readme = FORMATS_DIR / "README.md"
    if not readme.is_file():
        pytest.skip(f"{readme} is absent (only beside the team's checkout)")
    pinned = dict(re.findall(r"^\| (\S+/\S+) \| [^|]+ \| ([0-9a-f]{64}) \|$", readme.read_text(), re.MULTILINE))
    commits = dict(re.findall(r"^\| (\S+/\S+) \| ([0-9a-f]{40}) \|", readme.read_text(), re.MULTILINE))
    assert pinned == {entry.name: entry.sha256 for entry in corpus.MANIFEST}
    assert commits == {entry.name: entry.commit for entry in corpus.MANIFEST if entry.fetchable}
    for entry in corpus.MANIFEST:
        assert corpus.sha256_of(FORMATS_DIR / entry.name) == entry.sha256, entry.name
