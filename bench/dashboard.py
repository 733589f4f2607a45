"""The dashboard's cost in a real browser (Debian's chromium): page load time and JS heap at 10,000 and 100,000 VMs,
and the delay from a committed change to its appearance on the page.

    python bench/dashboard.py [--sizes 10000,100000] [--changes 20]

Load: from navigation to the fleet painted with the live stream connected. Heap: the page's used JS heap (CDP
``Runtime.getHeapUsage``) after load, and again after the changes. Delay: for each of ``--changes`` clock moves on a
scheduled event, the server stamps the message with its commit time and the page records when it has drawn it
(the same machine's clock); the figures are the median and the worst.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

from playwright.sync_api import sync_playwright  # noqa: E402

import helpers  # noqa: E402
from browser import chromium_or_skip, launch  # noqa: E402
from forewarn.scenarios.server import launch_serve  # noqa: E402
from helpers import Server  # noqa: E402


def patient_launch(args, log_path, control_url):
    return launch_serve(args, log_path, control_url, timeout=600)  # a 100,000-VM fleet takes a while to load


helpers.launch_serve = patient_launch


def generated_fleet(vms: int, folder: Path) -> str:
    out = folder / f"fleet-{vms}.yaml"
    subprocess.run(
        [sys.executable, "-m", "forewarn", "fleet", "generate", "--vms", str(vms), "--out", str(out)],
        check=True,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
    )
    return out.read_text()


def heap_mb(page) -> float:
    session = page.context.new_cdp_session(page)
    used = session.send("Runtime.getHeapUsage")["usedSize"]
    session.detach()
    return used / 1e6


def measure(browser, vms: int, changes: int, folder: Path) -> dict:
    with Server(folder, fleet_text=generated_fleet(vms, folder)) as server:
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        page = context.new_page()
        began = time.perf_counter()
        page.goto(server.control + "/")
        page.wait_for_function("() => forewarn.state.connected && forewarn.fleet.drawn > 0", timeout=120_000)
        load = time.perf_counter() - began
        fleet_bytes = len(server_get(server, "/v1/dashboard/fleet"))
        heap_loaded = heap_mb(page)
        names = page.evaluate("forewarn.fleet.data.machines.name.slice(0, 2)")
        server.schedule(type="Freeze", vms=names[:1], notice="1h")
        for n in range(1, changes + 1):  # one at a time: the delay of a change, not of a queue of them
            server.post("/v1/clock/advance", {"by": "1m"}, expect=200)
            page.wait_for_function(f"() => forewarn.state.latencies.length >= {n}", timeout=60_000)
        delays = page.evaluate("forewarn.state.latencies")
        heap_after = heap_mb(page)
        context.close()
    return {
        "vms": vms,
        "load_s": load,
        "fleet_read_mb": fleet_bytes / 1e6,
        "heap_mb": heap_loaded,
        "heap_after_mb": heap_after,
        "delay_median_ms": statistics.median(delays) * 1000,
        "delay_max_ms": max(delays) * 1000,
    }


def server_get(server, path: str) -> bytes:
    import requests

    return requests.get(server.control + path, timeout=60).content


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--changes", type=int, default=20)
    parser.add_argument(
        "--check", action="store_true", help="200 VMs, 3 changes: fails on a broken setup, never on speed"
    )
    options = parser.parse_args()
    if options.check:
        options.sizes, options.changes = "200", 3
    executable = chromium_or_skip()
    with sync_playwright() as playwright, tempfile.TemporaryDirectory() as tmp:
        browser = launch(playwright, executable)
        for vms in (int(size) for size in options.sizes.split(",")):
            folder = Path(tmp) / str(vms)
            folder.mkdir()
            result = measure(browser, vms, options.changes, folder)
            print(
                f"{result['vms']:>7,} VMs: load {result['load_s']:.2f} s, fleet read {result['fleet_read_mb']:.1f} MB, "
                f"JS heap {result['heap_mb']:.1f} MB (after {options.changes} changes {result['heap_after_mb']:.1f} MB), "
                f"change to page {result['delay_median_ms']:.0f} ms median, {result['delay_max_ms']:.0f} ms worst"
            )
        browser.close()


if __name__ == "__main__":
    main()
