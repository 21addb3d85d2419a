"""Shared fixtures: a fresh warehouse per test, the real sample files, clean Streamlit caches."""
from __future__ import annotations

import csv
import gzip
import os
import re
import shutil
from decimal import Decimal
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
FORMATS_DIR = REPO_ROOT.parent / "shared" / "formats"
SAMPLE_DIR = REPO_ROOT / "sample_data"
IN_CI = os.environ.get("CI") == "true"


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now (for the servers the tests start)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def need_spark() -> None:
    """Skip a Spark test when pyspark or Java is missing here; under CI=true fail instead (.ci/run
    installs both), so CI never passes by skipping the Spark path."""
    missing = None
    try:
        import pyspark  # noqa: F401
    except ImportError:
        missing = "pyspark is not installed (pip install '.[spark]')"
    if missing is None and shutil.which("java") is None:
        missing = "java is not installed (apt-get install openjdk-17-jre-headless)"
    if missing:
        if IN_CI:
            pytest.fail(missing)
        pytest.skip(missing)


@pytest.fixture
def warehouse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty warehouse file in tmp_path, set as MLCOST_DB for this test."""
    path = tmp_path / "test.duckdb"
    monkeypatch.setenv("MLCOST_DB", str(path))
    return path


@pytest.fixture(scope="session")
def formats_dir() -> Path:
    """The real sample files: ../shared/formats, else fetched at pinned commits into a cache
    (tests/corpus.py); skipped, saying how to get them, when neither works (a failure in CI)."""
    from tests import corpus

    try:
        return corpus.locate(shared=FORMATS_DIR)
    except corpus.CorpusUnavailable as missing:
        if IN_CI:
            pytest.fail(str(missing))
        pytest.skip(str(missing))


@pytest.fixture(scope="session")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A warehouse holding every sample file, as `mlcost demo` loads them, built once per test
    session; tests read it, or copy it (demo_warehouse) to write."""
    from ingest.pipeline import loader
    from mlcost.commands.serve import SAMPLE_FILES

    if not (SAMPLE_DIR / "billing").is_dir():
        if IN_CI:
            pytest.fail("sample_data is incomplete in CI")
        pytest.skip("sample_data is not generated yet")
    path = tmp_path_factory.mktemp("demo") / "demo.duckdb"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLCOST_DB", str(path))
        summaries = [s for _, s in loader.ingest_paths([str(SAMPLE_DIR / name) for name in SAMPLE_FILES])]
    assert all(s.ok for s in summaries), [s.to_json() for s in summaries if not s.ok]
    return path


@pytest.fixture
def demo_warehouse(demo_db: Path, warehouse: Path) -> Path:
    """A copy of demo_db as this test's warehouse (MLCOST_DB)."""
    shutil.copyfile(demo_db, warehouse)
    return warehouse


@pytest.fixture(autouse=True, scope="session")
def _streamlit_config_of_the_repository():
    """Streamlit reads .streamlit/config.toml from the working folder the first time an option is
    asked for: read it from the repository's before any test moves elsewhere (tmp_path), so pages
    under AppTest see the shipped settings (server.address 127.0.0.1) whichever test runs first."""
    import streamlit as st

    here = Path.cwd()
    os.chdir(REPO_ROOT)
    try:
        st.get_option("server.address")
    finally:
        os.chdir(here)
    yield


@pytest.fixture(autouse=True)
def _clear_streamlit_caches():
    """st.cache_data and st.cache_resource outlive an AppTest run inside one pytest process;
    start each test clean."""
    import streamlit as st

    st.cache_data.clear()
    st.cache_resource.clear()
    yield
    st.cache_data.clear()
    st.cache_resource.clear()


def as_read(markdown: str) -> str:
    """What a reader sees of a Markdown string whose untrusted parts present.format.md escaped."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown)


def sample_node_rates(first_day: str, last_day: str) -> dict[str, Decimal]:
    """Per GPU node of the sample bill (ResourceName gpu-node-N, 4 GPUs each): Σ EffectiveCost
    over 4 x Σ ConsumedQuantity hours of its lines whose charge period starts from `first_day` to
    `last_day` (ISO dates, both included): its cost per GPU-hour from the bill, read with csv."""
    cost: dict[str, Decimal] = {}
    hours: dict[str, Decimal] = {}
    for path in sorted((SAMPLE_DIR / "billing").glob("*.csv.gz")):
        with gzip.open(path, "rt", newline="") as handle:
            for row in csv.DictReader(handle):
                host, day = row["ResourceName"], row["ChargePeriodStart"][:10]
                if host.startswith("gpu-node-") and first_day <= day <= last_day:
                    cost[host] = cost.get(host, Decimal(0)) + Decimal(row["EffectiveCost"])
                    hours[host] = hours.get(host, Decimal(0)) + Decimal(row["ConsumedQuantity"])
    return {host: cost[host] / (4 * hours[host]) for host in cost}
