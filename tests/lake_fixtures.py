"""Shared by the lake tests: a moto_server S3 endpoint, lakes of the sample data, the embedded twin."""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, SAMPLE_DIR
from tests.moto import moto_server

SAMPLE_FILES = ("runs.jsonl", "serving_windows.jsonl.gz", "gpu_traces", "billing")
SETTINGS = SAMPLE_DIR / "mlcost.toml"


@pytest.fixture(scope="session")
def moto_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A moto_server on a free local port; the environment that points s3fs and boto3 at it
    (fake credentials, no user AWS config)."""
    folder = tmp_path_factory.mktemp("moto")
    with moto_server(folder) as url:
        yield {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
               "AWS_CONFIG_FILE": str(folder / "no-aws-config"),
               "AWS_SHARED_CREDENTIALS_FILE": str(folder / "no-aws-credentials"), "AWS_ENDPOINT_URL_S3": url}


_buckets = iter(range(1, 10**6))


def new_bucket(env: dict[str, str]) -> str:
    """A fresh bucket on the moto server; its s3:// lake address (a prefix inside it)."""
    import boto3

    name = f"lake-{os.getpid()}-{next(_buckets)}"
    client = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL_S3"], region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    client.create_bucket(Bucket=name)
    return f"s3://{name}/mlcost"


def lake_of(folder: Path, kind: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The sample lake in `folder` as `kind` gives it: the folder itself, or ("s3") a copy in a new
    bucket of the moto_server, with this test's environment pointed at it."""
    if kind != "s3":
        return str(folder)
    moto = request.getfixturevalue("moto_s3")
    url = new_bucket(moto)
    upload_folder(moto, folder, url)
    for name, value in moto.items():
        monkeypatch.setenv(name, value)
    return url


def mlcost(env: dict[str, str], *args: str, timeout_s: float = 600) -> subprocess.CompletedProcess:
    """`python -m mlcost ARGS` of this worktree in a child process with `env` laid over ours."""
    return subprocess.run([sys.executable, "-m", "mlcost", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **env}, timeout=timeout_s)


def upload_folder(env: dict[str, str], folder: Path, url: str) -> None:
    """Copy a local lake to an s3:// lake, ledger entries and the derived pointer last (as a load writes them)."""
    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=env["AWS_ENDPOINT_URL_S3"], key="testing", secret="testing")
    root = url.removeprefix("s3://")
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    last = [p for p in files if "_ledger" in p.parts or p.name == "_current.json"]
    for path in [p for p in files if p not in last] + last:
        fs.put_file(str(path), f"{root}/{path.relative_to(folder).as_posix()}")


@pytest.fixture(scope="module")
def sample_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The sample data loaded twice with the demo's settings: into an embedded DuckDB file (`mlcost
    ingest`) and into a lake folder (`mlcost load --lake`, then `mlcost derive --lake`)."""
    folder = tmp_path_factory.mktemp("pair")
    db, lake = folder / "embedded.duckdb", folder / "lake"
    paths = [str(SAMPLE_DIR / name) for name in SAMPLE_FILES]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "MLCOST_CONFIG": str(SETTINGS)}
    env.pop("MLCOST_LAKE", None)
    embedded = subprocess.Popen([sys.executable, "-m", "mlcost", "ingest", *paths], cwd=REPO_ROOT,
                                env={**env, "MLCOST_DB": str(db)},
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    loaded = subprocess.run([sys.executable, "-m", "mlcost", "load", "--lake", str(lake), *paths], cwd=REPO_ROOT,
                            env=env, capture_output=True, text=True)
    assert loaded.returncode == 0, loaded.stdout + loaded.stderr
    derived = subprocess.run([sys.executable, "-m", "mlcost", "derive", "--lake", str(lake)], cwd=REPO_ROOT,
                             env=env, capture_output=True, text=True)
    assert derived.returncode == 0, derived.stdout + derived.stderr
    _, err = embedded.communicate(timeout=600)
    assert embedded.returncode == 0, err
    return db, lake
