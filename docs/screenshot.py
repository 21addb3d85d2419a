"""Retake the README's screenshot: the Overview page of `mlcost demo` in headless Chromium.

    python docs/screenshot.py [--out docs/img/overview.png] [--width 1280] [--height 860]

Runs `mlcost demo` in a temporary folder (its own warehouse and mlcost.toml, on a free port),
opens the Overview page with Playwright driving Debian's Chromium (/usr/bin/chromium, as
tests/test_browser.py does), waits for its charts, and writes a palette PNG small enough to commit.
"""
from __future__ import annotations

import argparse
import io
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
START_LIMIT_S = 600  # the demo loads the sample data before it serves: slow on a busy machine
WAIT_MS = 120_000


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until_healthy(base_url: str, demo: subprocess.Popen) -> None:
    deadline = time.monotonic() + START_LIMIT_S
    while time.monotonic() < deadline:
        if demo.poll() is not None:
            raise SystemExit(f"mlcost demo exited with {demo.returncode}")
        try:
            with urllib.request.urlopen(f"{base_url}/_stcore/health", timeout=2) as answer:
                if answer.read().decode().strip() == "ok":
                    return
        except OSError:
            pass
        time.sleep(1)
    raise SystemExit(f"mlcost demo did not answer on {base_url} within {START_LIMIT_S} s")


def shoot(base_url: str, width: int, height: int) -> bytes:
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.set_default_timeout(WAIT_MS)
            expect.set_options(timeout=WAIT_MS)
            page.goto(base_url)
            expect(page.get_by_role("heading", name="Overview", exact=True)).to_be_visible()
            expect(page.get_by_test_id("stPlotlyChart").locator(".main-svg").first).to_be_visible()
            expect(page.get_by_test_id("stException")).to_have_count(0)
            page.wait_for_timeout(3000)  # the last charts finish drawing
            return page.screenshot(full_page=False)
        finally:
            browser.close()


def small_png(png: bytes, out: Path) -> None:
    """Quantize to a 128-colour palette: a dashboard has few colours, and the file shrinks ~4×."""
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    image.quantize(colors=128, method=Image.Quantize.MEDIANCUT).save(out, optimize=True)


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--out", type=Path, default=REPO_ROOT / "docs" / "img" / "overview.png",
                         help="the PNG to write")
    options.add_argument("--width", type=int, default=1280, help="viewport width in pixels")
    options.add_argument("--height", type=int, default=860, help="viewport height in pixels")
    args = options.parse_args()
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="mlcost-screenshot-") as folder:
        env = {key: value for key, value in os.environ.items() if key not in ("MLCOST_CONFIG", "MLCOST_DB")}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        with open(Path(folder) / "demo.log", "w") as log:
            demo = subprocess.Popen([sys.executable, "-m", "mlcost", "demo", "--port", str(port)],
                                    cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            base_url = f"http://127.0.0.1:{port}"
            wait_until_healthy(base_url, demo)
            png = shoot(base_url, args.width, args.height)
        finally:
            demo.send_signal(signal.SIGTERM)  # mlcost demo stops its dashboard on SIGTERM
            try:
                demo.wait(timeout=30)
            except subprocess.TimeoutExpired:
                demo.kill()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    small_png(png, args.out)
    print(f"wrote {args.out} ({args.out.stat().st_size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
