"""Start-up cost of the forewarn command: what a user waits for on every call.

Three figures, each the median of several runs, beside its target:

- ``forewarn --help``: process time (user + sys) of the whole process, interpreter start included.
- ``forewarn events``: the same, for a client command against a running server (the server's own time is not
  counted, only the CLI process's).
- ``serve`` ready: wall time from starting ``forewarn serve`` (the demo fleet, in-memory database, manual clock) to
  the first 200 from ``GET /healthz``, and beside it the server's process time (user + sys) at that moment, which
  is what the wall time comes to on an idle machine and what to compare when the machine is busy.

Process time is read from the child's resource usage (``os.wait4``), so other load on the machine does not inflate
it the way wall time would. The script starts its own server on free loopback ports and stops it at the end.

    .venv/bin/python bench/startup.py              # 7 runs of each
    .venv/bin/python bench/startup.py --runs 15
"""

from __future__ import annotations

import argparse
import compileall
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import forewarn_environment, process_cpu, wait_healthy

from forewarn.scenarios.server import free_ports

ROOT = Path(__file__).resolve().parent.parent
HELP_TARGET = 0.15  # seconds of process time (user + sys)
CLIENT_TARGET = 0.15
SERVE_TARGET = 0.8  # seconds of wall time until /healthz answers


def process_time(args: list[str], env: dict[str, str]) -> float:
    """User + sys seconds of one run of ``forewarn ARGS``; fails loudly if the command fails."""
    process = subprocess.Popen(
        [sys.executable, "-m", "forewarn", *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        error = process.stderr.read().decode(errors="replace") if process.stderr else ""
        raise SystemExit(f"forewarn {' '.join(args)} failed ({process.returncode}): {error.strip()}")
    if process.stderr:
        process.stderr.close()
    return usage.ru_utime + usage.ru_stime


READY_WITHIN = 120  # seconds: a broken server, not a slow one (the --check run shares the machine with others)


def serve(env: dict[str, str], db: str, log) -> tuple[subprocess.Popen, str, float, float]:
    """Start ``forewarn serve`` on free ports: the process, its control URL, the wall seconds until /healthz said 200
    and the server's process time by then."""
    control, imds, arm, ec2, gce = free_ports(5)
    args = [
        *("--fleet", "demo", "--db", db, "--clock", "manual", "--seed", "bench"),
        *("--port", str(control), "--imds-port", str(imds), "--arm-port", str(arm), "--ec2-port", str(ec2)),
        *("--gce-port", str(gce)),
    ]
    url = f"http://127.0.0.1:{control}"
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "forewarn", "serve", *args], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    ready = wait_healthy(process, url, started, READY_WITHIN, poll=0.005)  # polled often: the wait is the figure
    return process, url, ready, process_cpu(process.pid)


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def row(name: str, values: list[float], target: float, unit: str) -> str:
    median = statistics.median(values)
    verdict = "ok" if median <= target else "OVER"
    spread = f"{min(values):.3f}..{max(values):.3f}"
    return f"  {name:<22} {median:7.3f} s  (runs {spread})   target {target:.2f} s {unit:<13} {verdict}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="runs of each measurement (the median is reported)")
    parser.add_argument("--check", action="store_true", help="one run of each: fails on a broken setup only")
    args = parser.parse_args()
    runs = 1 if args.check else args.runs
    env = forewarn_environment()
    # What an installed forewarn has: its modules' bytecode. Without it (PYTHONDONTWRITEBYTECODE, set on CI machines)
    # every run would compile them again and measure the compiler.
    compileall.compile_dir(ROOT / "src", quiet=1)
    with tempfile.TemporaryDirectory() as tmp:
        log_path = Path(tmp) / "serve.log"
        ready: list[float] = []
        ready_cpu: list[float] = []
        with open(log_path, "ab") as log:
            for _ in range(runs):
                process, _, seconds, cpu = serve(env, ":memory:", log)
                ready.append(seconds)
                ready_cpu.append(cpu)
                stop(process)
            process, url, _, _ = serve(env, ":memory:", log)
            try:
                help_times = [process_time(["--help"], env) for _ in range(runs)]
                events_times = [process_time(["--server", url, "events"], env) for _ in range(runs)]
            finally:
                stop(process)
    load = Path("/proc/loadavg").read_text().split()[0]
    print(
        f"forewarn start-up ({runs} runs each, median; {sys.executable}; load average {load} on {os.cpu_count()} cores)"
    )
    print(row("forewarn --help", help_times, HELP_TARGET, "(user+sys)"))
    print(row("forewarn events", events_times, CLIENT_TARGET, "(user+sys)"))
    print(row("serve: /healthz ready", ready, SERVE_TARGET, "(wall)"))
    print(row("serve: its CPU by then", ready_cpu, SERVE_TARGET, "(user+sys)"))


if __name__ == "__main__":
    main()
