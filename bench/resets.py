"""Memory across resets: a server's resident memory after each of several rounds of a whole-fleet schedule, the
clock step that starts it and ``POST /v1/reset`` (issue 26: memory that stays flat).

A platform team's shared server, or a CI job's, is reset between runs many times a day. Each reset replaces the
engine; what the old one held must go. The script starts ``forewarn serve`` (a generated fleet, 10 VMs a host, a
SQLite file, the manual clock) and, round after round: a Freeze over every host (``POST /v1/events``, one event a
VM), the clock step that starts those events, the reset; then, once the reset answered and a second has passed, the
server's VmRSS. Verdict, on the second half of the rounds (the first ones are where the allocator, SQLite's cache and
the WAL's mapping grow to their working size, a little less each round): memory that grows, on average, by less than
2% a round. An engine left behind by each reset grows it by about a third a round at 100,000 VMs (the 100,000
events it held); the allocator's settling, by under 1%.

    .venv/bin/python bench/resets.py                  # 100,000 VMs, 8 rounds (about two minutes)
    .venv/bin/python bench/resets.py --vms 20000 --rounds 10
    .venv/bin/python bench/resets.py --check          # 2,000 VMs, 2 rounds: fails on a broken setup only
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from benchlib import forewarn_environment, memory_mb, wait_healthy

from forewarn.fleet.generate import FleetShape, fleet_yaml
from forewarn.scenarios.server import free_ports

GROWTH_PER_ROUND = 0.02  # the second half's average growth a round, against the memory at its start
READY_WITHIN = 300  # seconds: a broken server, not a slow one
SETTLE = 1.0  # seconds after a reset before memory is read: the replaced engine is freed by a thread of its own


def call(url: str, method: str, path: str, body: dict | None = None) -> bytes:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{url}{path}", data, {"content-type": "application/json"}, method=method)
    with urllib.request.urlopen(request, timeout=600) as answer:
        return answer.read()


def rounds_of(url: str, pid: int, hosts: list[str], rounds: int) -> list[float]:
    """VmRSS (MB) after each round of schedule, step and reset."""
    found = []
    for _ in range(rounds):
        call(url, "POST", "/v1/events", {"type": "Freeze", "hosts": hosts, "notice": "15m"})
        call(url, "POST", "/v1/clock/next")
        call(url, "POST", "/v1/reset")
        time.sleep(SETTLE)
        found.append(memory_mb(pid)["VmRSS"])
    return found


@contextlib.contextmanager
def served(fleet_text: str) -> Iterator[tuple[subprocess.Popen, str, float]]:
    """``forewarn serve`` on ``fleet_text`` (a SQLite file, the manual clock, every surface on free ports), ready:
    the process, its control URL and its VmRSS at ready (MB). Stopped on leaving."""
    with tempfile.TemporaryDirectory() as tmp:
        fleet = Path(tmp) / "fleet.yaml"
        fleet.write_text(fleet_text)
        control, imds, arm, ec2, gce = free_ports(5)
        log = Path(tmp) / "serve.log"
        argv = [sys.executable, "-m", "forewarn", "serve", "--fleet", str(fleet), "--db", str(Path(tmp) / "r.db")]
        argv += ["--clock", "manual", "--port", str(control), "--imds-port", str(imds), "--arm-port", str(arm)]
        argv += ["--ec2-port", str(ec2), "--gce-port", str(gce)]
        with open(log, "wb") as out:
            process = subprocess.Popen(argv, env=forewarn_environment(), stdout=out, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{control}"
        try:
            wait_healthy(process, url, time.perf_counter(), READY_WITHIN, log)
            yield process, url, memory_mb(process.pid)["VmRSS"]
        finally:
            process.terminate()
            process.wait(30)


def report(found: list[float], ready: float, after_each: str, check: bool) -> None:
    """VmRSS after each round, and (not ``check``) the verdict on the second half's growth a round."""
    rounds = len(found)
    half = rounds // 2
    growth = (found[-1] / found[half - 1] - 1) / (rounds - half)
    print(f"VmRSS: ready {ready:.0f} MB; after each {after_each} " + ", ".join(f"{v:.0f}" for v in found) + " MB")
    if check:
        print("check: no verdict")
        return
    met = growth < GROWTH_PER_ROUND
    print(
        f"{'MET' if met else 'NOT met'}: {growth:+.1%} a round over rounds {half} to {rounds} "
        f"({found[half - 1]:.0f} to {found[-1]:.0f} MB; goal: under {GROWTH_PER_ROUND:.0%} a round)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vms", type=int, default=100_000, help="VMs of the generated fleet (10 a host)")
    parser.add_argument("--rounds", type=int, default=8, help="rounds of schedule, step and reset (at least 2)")
    parser.add_argument("--check", action="store_true", help="2,000 VMs, 2 rounds: fails on a broken setup only")
    args = parser.parse_args()
    vms, rounds = (2_000, 2) if args.check else (args.vms, max(2, args.rounds))
    with served(fleet_yaml(FleetShape(vms=vms, seed="bench"))) as (process, url, ready):
        hosts = [f"host-{index:05d}" for index in range(-(-vms // 10))]
        found = rounds_of(url, process.pid, hosts, rounds)
    print(f"{vms:,} VMs, {rounds} rounds of a Freeze over every host, the step that starts it and a reset")
    report(found, ready, "reset", args.check)


if __name__ == "__main__":
    main()
