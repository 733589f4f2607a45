"""Compute Engine hanging GETs: N ``wait_for_change`` requests held open at once by a real ``forewarn serve``, the
memory they cost the server, and the time from the clock step that changes their value to the last answer.

The server runs on a manual clock with a fleet of Compute Engine instances, each at its own loopback address. The
control API announces maintenance on every instance two minutes ahead (upcoming maintenance: ``maintenance-event``
stays ``NONE``). A client process (asyncio, raw sockets) opens N connections spread over the instances, asks each
instance's ``maintenance-event`` once (so it gets the 60-second notice), then sends N hanging GETs with the current
ETag. Once the server says it holds them all (``GET /v1/gce/hanging-gets`` on the control API; its RSS is then read
from /proc), one clock step of 61 seconds passes the notice
deadline, and every waiter is answered. Printed side by side: waiters, the server's RSS before and with them held,
per waiter, and the time from the clock step to the last answer.

    .venv/bin/python bench/gce_wait_for_change.py                 # 10,000 waiters over 20 instances
    .venv/bin/python bench/gce_wait_for_change.py --waiters 2000
    .venv/bin/python bench/gce_wait_for_change.py --check         # 200 waiters: fails on a broken setup only
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from benchlib import loopback_address, memory_mb  # noqa: E402

from forewarn.scenarios.server import free_ports, launch_serve  # noqa: E402

INSTANCES = 20


def fleet_text(instances: int) -> str:
    lines = ["hosts: [{name: host-a}, {name: host-b}]", "gce_instances:"]
    for index in range(instances):
        lines.append(f"  - {{name: vm-{index}, host: host-a, imds: {{address: {loopback_address(1, index + 1)}}}}}")
    return "\n".join(lines) + "\n"


async def read_answer(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    etag = b""
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.lower() == b"content-length":
            length = int(value)
        elif name.lower() == b"etag":
            etag = value.strip()
    body = await reader.readexactly(length)
    return etag if body == b"NONE" else b"CHANGED:" + body


async def held_by_server(control: str, waiters: int, within: float = 60.0) -> float:
    """Seconds until the server says (GET /v1/gce/hanging-gets) that it holds all ``waiters`` GETs: the step must
    find every one of them waiting, not still being read. SystemExit if it does not within ``within`` seconds."""
    started = time.perf_counter()
    held = -1
    while time.perf_counter() - started < within:
        held = (await asyncio.to_thread(requests.get, f"{control}/v1/gce/hanging-gets", timeout=30)).json()["held"]
        if held == waiters:
            return time.perf_counter() - started
        await asyncio.sleep(0.05)
    raise SystemExit(f"the server holds {held} of {waiters} hanging GETs after {within:g} s")


async def run(waiters: int, imds_port: int, control: str, pid: int) -> dict:
    per = -(-waiters // INSTANCES)
    idle = memory_mb(pid)["VmRSS"]
    announced = requests.post(
        f"{control}/v1/gce/maintenance",
        json={"instances": [f"vm-{i}" for i in range(INSTANCES)], "notice": "2m"},
        timeout=120,
    )
    assert announced.status_code == 201, announced.text
    connections = []
    etags = {}
    for index in range(waiters):
        address = loopback_address(1, index // per + 1)
        reader, writer = await asyncio.open_connection(address, imds_port)
        connections.append((address, reader, writer))
    path = "/computeMetadata/v1/instance/maintenance-event"
    for address, _reader, writer in connections:  # one plain GET each: the ETag, and "asked since the last event"
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {address}\r\nMetadata-Flavor: Google\r\n\r\n".encode())
    for address, reader, _writer in connections:
        etags[address] = await read_answer(reader)
    before = memory_mb(pid)["VmRSS"]
    for address, _reader, writer in connections:
        query = f"wait_for_change=true&last_etag={etags[address].decode()}"
        writer.write(f"GET {path}?{query} HTTP/1.1\r\nHost: {address}\r\nMetadata-Flavor: Google\r\n\r\n".encode())
    held_at = await held_by_server(control, waiters)
    held = memory_mb(pid)["VmRSS"]
    started = time.perf_counter()
    loop = asyncio.get_running_loop()
    step = loop.run_in_executor(
        None, lambda: requests.post(f"{control}/v1/clock/advance", json={"by": "61s"}, timeout=120)
    )
    answers = await asyncio.gather(*(read_answer(reader) for _, reader, _ in connections))
    last = time.perf_counter() - started
    response = await step
    assert response.status_code == 200, response.text
    changed = sum(answer == b"CHANGED:MIGRATE_ON_HOST_MAINTENANCE" for answer in answers)
    for _, _, writer in connections:
        writer.close()
    return {
        "waiters": waiters,
        "answered_with_the_notice": changed,
        "server_rss_mb_idle": round(idle, 1),
        "server_rss_mb_connections_open": round(before, 1),
        "server_rss_mb_held": round(held, 1),
        "kb_per_waiter_beyond_its_connection": round((held - before) * 1024 / waiters, 2),
        "kb_per_connection_and_waiter": round((held - idle) * 1024 / waiters, 2),
        "clock_step_to_last_answer_s": round(last, 3),
        "held_by_the_server_before_the_step": waiters,
        "all_held_after_s": round(held_at, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--waiters", type=int, default=10_000)
    parser.add_argument("--check", action="store_true", help="200 waiters; fails on a broken setup, never on speed")
    options = parser.parse_args()
    if options.check:
        options.waiters = 200
    with tempfile.TemporaryDirectory() as directory:
        fleet = Path(directory) / "fleet.yaml"
        fleet.write_text(fleet_text(INSTANCES))
        port, imds_port = free_ports(2)
        control = f"http://127.0.0.1:{port}"
        args = [
            "--fleet", str(fleet), "--db", ":memory:", "--port", str(port), "--imds-port", str(imds_port),
            "--arm-port", "0", "--ec2-port", "0", "--gce-port", "0", "--clock", "manual", "--log-level", "warning",
            "--imds-limit", "connections_per_source=0", "--imds-limit", f"connections={options.waiters + 1000}",
        ]  # fmt: skip
        process = launch_serve(args, Path(directory) / "server.log", control)
        try:
            result = asyncio.run(run(options.waiters, imds_port, control, process.pid))
        finally:
            process.terminate()
            process.wait(10)
    print(json.dumps(result, indent=2))
    if result["answered_with_the_notice"] != result["waiters"]:
        sys.exit(f"only {result['answered_with_the_notice']} of {result['waiters']} waiters saw the notice")


if __name__ == "__main__":
    main()
