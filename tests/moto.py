"""A real S3 endpoint for the tests: `moto_server` (moto[server]) on a free port of 127.0.0.1."""
from __future__ import annotations

import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import IN_CI, free_port

START_S = 30


@contextmanager
def moto_server(folder: Path) -> Iterator[str]:
    """A moto_server subprocess logging into `folder`, answering within START_S; its URL. Skips when
    moto_server is missing here, fails under CI=true."""
    command = shutil.which("moto_server")
    if command is None:
        if IN_CI:
            pytest.fail("moto_server is missing in CI: pip install -e '.[test]'")
        pytest.skip("moto_server is missing (pip install 'moto[server]')")
    port = free_port()
    log = folder / "moto.log"
    with log.open("w") as output:
        server = subprocess.Popen([command, "-H", "127.0.0.1", "-p", str(port)], stdout=output,
                                  stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_S
        while True:
            try:
                urllib.request.urlopen(f"{url}/moto-api/", timeout=2).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"moto_server did not start:\n{log.read_text()}")
                time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)
