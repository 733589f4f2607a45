"""forewarn-agent's cost at one poll a second: its resident memory and CPU, one agent per cloud, against a real
``forewarn serve``, judged against issue 24's budget (under 30 MB RSS and under 1% of a core).

Three agents (an Azure VM, an EC2 instance, a Compute Engine instance, each at its own loopback address) run as real
processes beside one server; after a warm-up, a round of ``--seconds`` (60 by default) measures each agent's CPU time
from its CPU clock and its RSS (now and at its peak, from /proc), and the polls it made (its own /metrics). The server
is a named participant; a round where other processes used more than benchlib's OTHERS_MAX of the machine, or with too
much steal, is run again and then reported INVALID, never as met.

Then, on each cloud, one event (an Azure Freeze, an EC2 system-reboot, a Compute Engine migration) and the time from
its appearance (the control API has answered that it is scheduled) to the moment its drain hook starts (the hook
writes the time): a poll's interval at most on Azure and EC2, the held GET's answer on Compute Engine.

    .venv/bin/python bench/agent.py                  # a 60-second round
    .venv/bin/python bench/agent.py --seconds 300
    .venv/bin/python bench/agent.py --check          # a few seconds: fails on a broken setup only
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from benchlib import free_ports, loopback_address, machine_note, markdown_table, measured, memory_mb  # noqa: E402

from forewarn.scenarios.server import launch_serve  # noqa: E402

AGENT_SOURCE = ROOT / "agent" / "src"
RSS_BUDGET_MB = 30.0
CPU_BUDGET = 0.01  # of one core
WARM_UP = 5.0  # seconds: the imports, the probe of the three metadata services, the first polls
MACHINES = {
    "azure": ("vms", "bench-vm", loopback_address(42, 10)),
    "aws": ("ec2_instances", "i-0b1e2c3d4a5f60718", loopback_address(42, 11)),
    "gcp": ("gce_instances", "bench-gce", loopback_address(42, 12)),
}


def fleet_text() -> str:
    lines = ["hosts: [{name: host-01}]"]
    for section, name, address in MACHINES.values():
        key = "id" if section == "ec2_instances" else "name"
        lines += [f"{section}:", f"  - {{{key}: {name}, host: host-01, imds: {{address: {address}}}}}"]
    return "\n".join(lines) + "\n"


def start_agent(cloud: str, imds_port: int, directory: Path, interval: float) -> tuple[subprocess.Popen, str]:
    [port] = free_ports(1)
    address = MACHINES[cloud][2]
    command = [sys.executable, "-m", "forewarn_agent", "--cloud", cloud, "--endpoint", f"http://{address}:{imds_port}"]
    command += ["--state", str(directory / f"{cloud}.json"), "--listen", f"127.0.0.1:{port}"]
    hook = f"date +%s.%N > {directory / (cloud + '.drained')}"
    command += ["--interval", str(interval), "--on-drain", hook, "--on-restore", "true"]
    env = {**os.environ, "PYTHONPATH": str(AGENT_SOURCE)}
    with open(directory / f"{cloud}.log", "ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    return process, f"http://127.0.0.1:{port}"


def polls(url: str) -> int:
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return sum(int(float(line.split()[-1])) for line in text.splitlines() if line.startswith("forewarn_agent_polls"))


def wait_listening(process: subprocess.Popen, url: str, log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"an agent exited with status {process.returncode}:\n{log.read_text()[-2000:]}")
        try:
            polls(url)
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"an agent did not answer at {url}:\n{log.read_text()[-2000:]}")


def measure(agents: dict[str, tuple[subprocess.Popen, str]], server_pid: int, seconds: float, check: bool) -> list:
    before: dict[str, int] = {}
    after: dict[str, int] = {}

    def round_of_polls() -> None:
        before.update({cloud: polls(url) for cloud, (_, url) in agents.items()})
        time.sleep(seconds)
        after.update({cloud: polls(url) for cloud, (_, url) in agents.items()})

    participants = {cloud: [process.pid] for cloud, (process, _) in agents.items()}
    result = measured(round_of_polls, {**participants, "server": [server_pid]}, check=check)
    rows = []
    for cloud, (process, _) in agents.items():
        memory = memory_mb(process.pid)
        share = result.usage.share(cloud)
        verdict = "met" if memory["VmHWM"] < RSS_BUDGET_MB and share < CPU_BUDGET else "NOT MET"
        rows.append(
            [
                cloud,
                f"{memory['VmRSS']:.1f}",
                f"{memory['VmHWM']:.1f}",
                f"{result.usage.cpu[cloud] * 1000:.0f}",
                f"{share * 100:.3f}%",
                after[cloud] - before[cloud],
                "(a check: no verdict)" if check else verdict if result.valid else result.note(),
            ]
        )
    print(
        f"a round of {result.usage.wall:.1f} s; other processes {result.usage.others_cores:.2f} cores; {machine_note()}"
    )
    return rows


TRIGGERS = {
    "azure": ["schedule", "--type", "Freeze", "--vm", MACHINES["azure"][1], "--notice", "15m"],
    "aws": ["schedule", "--code", "system-reboot", "--instance", MACHINES["aws"][1], "--notice", "1h"],
    "gcp": ["gce", "maintain", MACHINES["gcp"][1]],
}


def first_hook_seconds(cloud: str, control: str, directory: Path) -> float:
    """Seconds from the event's appearance to its drain hook's start, on the wall clock of both."""
    env = {**os.environ, "FOREWARN_SERVER": control, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([sys.executable, "-m", "forewarn", *TRIGGERS[cloud]], capture_output=True, text=True, env=env)
    appeared = time.time()  # the event is in the metadata once the control API has answered
    if done.returncode != 0:
        raise SystemExit(f"forewarn {' '.join(TRIGGERS[cloud])}: {done.stderr}")
    drained = directory / f"{cloud}.drained"
    deadline = time.monotonic() + 30
    while not drained.exists() or not drained.read_text().strip():
        if time.monotonic() > deadline:
            raise SystemExit(f"{cloud}: no drain hook within 30 s of the event")
        time.sleep(0.01)
    return float(drained.read_text()) - appeared


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="the measured round (default 60)")
    parser.add_argument("--interval", type=float, default=1.0, help="the agents' seconds between polls (default 1)")
    parser.add_argument("--check", action="store_true", help="a 3-second round; fails on a broken setup only")
    options = parser.parse_args()
    seconds = 3.0 if options.check else options.seconds
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        (directory / "fleet.yaml").write_text(fleet_text())
        port, imds_port = free_ports(2)
        control = f"http://127.0.0.1:{port}"
        args = [
            "--fleet", str(directory / "fleet.yaml"), "--db", ":memory:", "--port", str(port),
            "--imds-port", str(imds_port), "--arm-port", "0", "--ec2-port", "0", "--gce-port", "0",
            "--log-level", "warning",
        ]  # fmt: skip
        server = launch_serve(args, directory / "server.log", control)
        agents = {cloud: start_agent(cloud, imds_port, directory, options.interval) for cloud in MACHINES}
        try:
            for cloud, (process, url) in agents.items():
                wait_listening(process, url, directory / f"{cloud}.log")
            time.sleep(1.0 if options.check else WARM_UP)
            rows = measure(agents, server.pid, seconds, options.check)
            for row in rows:
                row.append(f"{first_hook_seconds(row[0], control, directory) * 1000:.0f}")
        finally:
            for process, _ in agents.values():
                process.terminate()
                process.wait(10)
            server.terminate()
            server.wait(10)
    headers = ["cloud", "RSS MB", "peak RSS MB", "CPU ms", "of a core", "polls", "verdict (< 30 MB, < 1%)"]
    headers.append("event to first hook, ms")
    print(markdown_table(headers, rows))
    expected = seconds / options.interval
    short = [row[0] for row in rows if row[5] < expected * 0.5]
    if short:
        sys.exit(f"these agents polled less than half as often as asked: {', '.join(short)}")
    if not options.check and any(row[6] != "met" for row in rows):
        sys.exit("over budget, or no valid round")


if __name__ == "__main__":
    main()
