"""A shared forewarn on PostgreSQL (docs/replicas.md): throughput, replication lag, failover, memory, side by side.

    .venv/bin/python bench/replicas.py                       # 10,000 VMs, 5 kill cycles, then 1,000,000 VMs
    .venv/bin/python bench/replicas.py --vms 1000 --kill-cycles 20 --db postgresql://127.0.0.1/test

In one run:
  1. a generated fleet (``forewarn fleet generate``) on a fresh schema of ``--db``; two processes with
     ``--role shared``, the leader pinned to CPU 0 and the replica to CPU 1 (taskset), and their start-up times;
  2. metadata GETs per second (wrk, keep-alive, the default VM's scheduled-events document) of the leader alone,
     then of both processes at once, with each server's CPU seconds per request: on a 2-core machine the wrk
     clients share the cores with the servers, which is the limit the figures show;
  3. replication lag under a wave over the whole fleet: for each of ``--lag-samples`` clock steps at the leader, the
     time until the replica holds the position the leader published after it (its ``/healthz``); the replica's
     refreshes (how many loaded the whole state rather than the rows the commits touched), the time it spent in
     them (``forewarn_replica_refresh_seconds_total``), and the CPU time of both processes over the steps;
  4. failover: ``--kill-cycles`` times, kill -9 the leader, time until the other process leads, restart the killed
     one (it comes back as a replica); the median and worst;
  5. resident memory of the leader and the replica, per VM;
  6. the very large fleet (``--million``, default 1,000,000 VMs; 0 skips it) on a fresh schema: the leader's first
     start, a replica serving a tenth of the hosts (``--hosts 'host-*0'``), a kill -9 of the leader and the time until
     the replica leads (it catches up the committed state), the killed process back as a replica: the times, and
     each process's resident memory when ready and at its peak; the memory goals are judged on the peak.

The timed rounds (the wrk runs, the lag samples, the kill cycles, the very large fleet's starts and failover) are
measured with bench/benchlib.py:
the servers, the PostgreSQL backends serving them and this script with the wrk it ran are the benchmark; a round where
other processes used more than its allowance, or the hypervisor stole more, is printed INVALID beside its figure.

Needs PostgreSQL (the schema is dropped afterwards) and wrk (``apt-get install wrk``; without it step 2 is skipped).
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import httpx
import psycopg
from benchlib import Meter, forewarn_environment, memory_mb, postgres_backends, process_cpu, verdict, wait_healthy

from forewarn.scenarios.server import free_ports

T = TypeVar("T")
LEADER_PEAK_GOAL_MB = 3 * 1024  # a leader of the very large fleet
REPLICA_PEAK_GOAL_MB = 1024  # a replica serving a tenth of its hosts


class Process:
    def __init__(self, name: str, url: str, fleet: Path, cpu: int | None, tmp: Path, extra: tuple[str, ...] = ()):
        self.name, self.url, self.fleet, self.cpu, self.tmp, self.extra = name, url, fleet, cpu, tmp, extra
        self.port, self.imds_port = free_ports(2)
        self.proc: subprocess.Popen | None = None

    @property
    def control(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def imds(self) -> str:
        return f"http://127.0.0.1:{self.imds_port}/metadata/scheduledevents?api-version=2020-07-01"

    def start(self) -> float:
        argv = [sys.executable, "-m", "forewarn", "serve", "--db", self.url, "--fleet", str(self.fleet)]
        argv += ["--role", "shared", "--failover-poll", "0.5s", "--clock", "manual", "--seed", "bench"]
        argv += [
            "--port",
            str(self.port),
            "--imds-port",
            str(self.imds_port),
            "--arm-port",
            "0",
            "--ec2-port",
            "0",
            "--gce-port",
            "0",
        ]
        argv += ["--log-level", "warning", *self.extra]
        if self.cpu is not None and shutil.which("taskset"):
            argv = ["taskset", "-c", str(self.cpu), *argv]
        started = time.perf_counter()
        log = self.tmp / f"{self.name}.log"
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env=forewarn_environment(), start_new_session=True
            )
        return wait_healthy(self.proc, self.control, started, log=log, what=self.name)

    def health(self) -> dict:
        return httpx.get(f"{self.control}/healthz", timeout=5).json()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


def wrk(url: str, seconds: float, connections: int) -> subprocess.Popen:
    argv = ["wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", "-H", "Metadata: true", url]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def requests_of(output: str) -> tuple[float, int, int]:
    rps = re.search(r"^Requests/sec:\s+([\d.]+)", output, re.M)
    total = re.search(r"^\s+(\d+) requests in", output, re.M)
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    if rps is None or total is None:
        raise SystemExit(f"wrk printed no figures:\n{output}")
    return float(rps.group(1)), int(total.group(1)), int(bad.group(1)) if bad else 0


def throughput(servers: list[Process], seconds: float, connections: int) -> list[tuple[float, float, int]]:
    """(req/s, CPU seconds per request, non-2xx) of each server, all loaded at once."""
    before = [process_cpu(s.proc.pid) for s in servers if s.proc]
    runs = [wrk(s.imds, seconds, connections) for s in servers]
    outputs = [run.communicate()[0] for run in runs]
    after = [process_cpu(s.proc.pid) for s in servers if s.proc]
    figures = []
    for output, cpu_before, cpu_after in zip(outputs, before, after):
        rps, total, bad = requests_of(output)
        figures.append((rps, (cpu_after - cpu_before) / max(total, 1), bad))
    return figures


def judged(servers: list[Process], run: Callable[[], T], check: bool) -> tuple[T, str]:
    """``run`` as one round under benchlib's Meter, and why it does not count ("" when it does). The servers (those
    started during the round too), the PostgreSQL backends serving them and this script with the children it reaped
    (wrk) are the benchmark; the rest of the machine is other load."""

    def pids() -> list[int]:
        return [s.proc.pid for s in servers if s.proc is not None and s.proc.poll() is None]

    before = os.times()
    with Meter({"servers": pids, "postgres": lambda: postgres_backends(pids())}) as meter:
        value = run()
    after = os.times()
    usage = meter.usage
    assert usage is not None
    children = after.children_user + after.children_system - before.children_user - before.children_system
    # A server killed and reaped in the round is among the children with its whole life's CPU, of which the Meter
    # had read what it used before the round (``gone``): the rest, and wrk's, is the benchmark's own.
    ours = max(0.0, children - usage.gone.get("servers", 0.0))
    usage.cpu["client"] = usage.cpu.get("client", 0.0) + ours
    usage.others_cores = max(0.0, usage.others_cores - (ours / usage.wall if usage.wall > 0 else 0.0))
    reasons = [] if check else verdict(usage)
    return value, "" if not reasons else "  INVALID: " + "; ".join(reasons)


def leader_of(servers: list[Process]) -> Process | None:
    for server in servers:
        try:
            if server.proc and server.proc.poll() is None and server.health()["role"] == "leader":
                return server
        except httpx.HTTPError:
            continue
    return None


def wait(condition, timeout: float, what: str):
    give_up = time.monotonic() + timeout
    while time.monotonic() < give_up:
        found = condition()
        if found:
            return found
        time.sleep(0.01)
    raise SystemExit(f"{what}: not within {timeout:g} s")


def metrics(server: Process) -> dict[str, float]:
    text = httpx.get(f"{server.control}/metrics", timeout=5).text
    return {name: float(value) for name, value in re.findall(r"^(forewarn_replica_\w+) ([\d.e+-]+)$", text, re.M)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", default="postgresql://postgres@127.0.0.1:5432/test", help="a PostgreSQL database")
    parser.add_argument("--vms", type=int, default=10_000, help="fleet size (default 10,000)")
    parser.add_argument("--kill-cycles", type=int, default=5)
    parser.add_argument("--lag-samples", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each wrk run")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument(
        "--million",
        type=int,
        default=1_000_000,
        help="VMs of the very large fleet served by a leader and a replica of a tenth of the hosts (0: skip)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="200 VMs, one kill cycle, two lag samples, no wrk: fails on a broken setup, never on speed",
    )
    args = parser.parse_args()
    if args.check:
        args.vms, args.kill_cycles, args.lag_samples, args.million = 200, 1, 2, min(args.million, 2_000)
    schema = f"forewarn_bench_{secrets.token_hex(4)}"
    admin = psycopg.connect(args.db, autocommit=True)
    admin.execute(f"CREATE SCHEMA {schema}")
    separator = "&" if "?" in args.db else "?"
    url = f"{args.db}{separator}options=-csearch_path%3D{schema}"
    servers: list[Process] = []
    try:
        with tempfile.TemporaryDirectory(prefix="forewarn-bench-") as directory:
            return run(args, url, Path(directory), servers)
    finally:
        for server in servers:
            server.stop()
        admin.execute(f"DROP SCHEMA {schema} CASCADE")
        admin.close()


def run(args: argparse.Namespace, url: str, tmp: Path, servers: list[Process]) -> int:
    fleet = tmp / "fleet.yaml"
    env = forewarn_environment()
    subprocess.run(
        [sys.executable, "-m", "forewarn", "fleet", "generate", "--vms", str(args.vms), "--out", str(fleet)],
        check=True,
        env=env,
        capture_output=True,
    )
    vms = fleet.read_text().split("\nvms:\n", 1)
    first_vm = re.search(r"^\s*- \{?name: ([\w.-]+)", vms[1], re.M) if len(vms) == 2 else None
    if first_vm:  # a plain request to the metadata port answers as this VM
        fleet.write_text(f"default_vm: {first_vm.group(1)}\n" + fleet.read_text())
    leader, replica = Process("a", url, fleet, 0, tmp), Process("b", url, fleet, 1, tmp)
    servers += [leader, replica]
    first_start = leader.start()
    replica_start = replica.start()
    print(
        f"fleet: {args.vms:,} VMs; first start (initializes the database) {first_start:.1f} s, a replica "
        f"{replica_start:.1f} s  (2 cores shared with other work: figures are for a loaded machine)"
    )
    client = httpx.Client(timeout=30)
    vm = first_vm.group(1) if first_vm else None
    if vm:
        client.post(f"{leader.control}/v1/events", json={"type": "Reboot", "vms": [vm], "notice": "15m"})
    wait(
        lambda: (
            httpx.get(replica.imds, headers={"Metadata": "true"}).content
            == httpx.get(leader.imds, headers={"Metadata": "true"}).content
        ),
        60,
        "the replica follows",
    )

    if shutil.which("wrk") and not args.check:
        (alone,), alone_note = judged(
            [leader], lambda: throughput([leader], args.seconds, args.connections), args.check
        )
        both, both_note = judged(
            [leader, replica], lambda: throughput([leader, replica], args.seconds, args.connections), args.check
        )
        print(
            f"\nmetadata GETs (wrk -t1 -c{args.connections}, {args.seconds:g}s; wrk shares the 2 cores with the "
            "servers)"
        )
        print(f"  {'':28} {'req/s':>9} {'CPU µs/req':>11} {'non-2xx':>8}")
        print(f"  {'one process (CPU 0)':28} {alone[0]:>9,.0f} {alone[1] * 1e6:>11.1f} {alone[2]:>8}{alone_note}")
        for name, figures in zip(("leader (CPU 0), together", "replica (CPU 1), together"), both):
            print(f"  {name:28} {figures[0]:>9,.0f} {figures[1] * 1e6:>11.1f} {figures[2]:>8}")
        print(f"  {'two processes, total':28} {sum(f[0] for f in both):>9,.0f}{both_note}")
    else:
        why = "--check" if args.check else "wrk is not installed: apt-get install wrk"
        print(f"\nmetadata GETs: skipped ({why})")

    wave = client.post(f"{leader.control}/v1/waves", json={"type": "Reboot", "by": "host", "concurrency": 100})
    lags: list[float] = []
    before = metrics(replica)
    cpu_before = [process_cpu(s.proc.pid) for s in (leader, replica) if s.proc]

    def lag_samples() -> None:
        for _ in range(args.lag_samples):
            client.post(f"{leader.control}/v1/clock/advance", json={"by": "5m"}).raise_for_status()
            position = leader.health()["position"]
            started = time.monotonic()
            wait(lambda: replica.health()["position"] >= position, 120, "the replica catches up")  # noqa: B023
            lags.append(time.monotonic() - started)

    _, lag_note = judged([leader, replica], lag_samples, args.check)
    cpu_leader, cpu_replica = (process_cpu(s.proc.pid) - b for s, b in zip((leader, replica), cpu_before) if s.proc)
    after = metrics(replica)

    def delta(name: str) -> str:
        if name not in after:
            return "n/a"  # a forewarn without that metric
        return f"{after[name] - before.get(name, 0.0):.3g}"

    print(
        f"\nreplication lag under a wave over {args.vms:,} VMs (wave {wave.status_code}), {len(lags)} clock steps: "
        f"median {statistics.median(lags) * 1000:.0f} ms, worst {max(lags) * 1000:.0f} ms\n"
        f"  the replica: {delta('forewarn_replica_refreshes_total')} refreshes "
        f"({delta('forewarn_replica_full_reloads_total')} loading the whole state), "
        f"{delta('forewarn_replica_refresh_seconds_total')} s in them, {cpu_replica:.2f} s of CPU; "
        f"the leader: {cpu_leader:.2f} s of CPU for the steps{lag_note}"
    )

    failovers, restarts = [], []

    def kill_cycles() -> None:
        for _ in range(args.kill_cycles):
            current = wait(lambda: leader_of(servers), 30, "a leader")
            current.kill()
            killed = time.monotonic()
            others = [s for s in servers if s is not current]
            wait(lambda: leader_of(others), 60, "a new leader")  # noqa: B023
            failovers.append(time.monotonic() - killed)
            restarts.append(current.start())

    # The killed processes are reaped by this script: judged counts their CPU as the benchmark's own.
    _, failover_note = judged(servers, kill_cycles, args.check)
    if failovers:
        print(
            f"\nfailover over {len(failovers)} kill -9 cycles (--failover-poll 0.5s): median "
            f"{statistics.median(failovers):.2f} s, worst {max(failovers):.2f} s; a killed process back as a "
            f"replica in median {statistics.median(restarts):.1f} s{failover_note}"
        )

    print("\nresident memory")
    for server in servers:
        if server.proc and server.proc.poll() is None:
            role = server.health()["role"]
            memory = memory_mb(server.proc.pid)
            rss, peak = memory["VmRSS"], memory["VmHWM"]
            print(
                f"  {role:8} {rss:8.0f} MB now, {peak:,.0f} MB at its peak  ({peak * 1024 / args.vms:.1f} KB per VM "
                "at the peak)"
            )
    if args.million:
        for server in servers:
            server.stop()
        very_large(args, tmp)
    return 0


def very_large(args: argparse.Namespace, tmp: Path) -> None:
    """The very large fleet on a fresh schema: a leader's first start, a replica serving a tenth of the hosts
    (``--hosts 'host-*0'``), a failover to it, and the killed leader's restart as a replica: times and memory."""
    vms = args.million
    fleet = tmp / "very-large.yaml"
    env = forewarn_environment()
    generate = [sys.executable, "-m", "forewarn", "fleet", "generate", "--vms", str(vms), "--out", str(fleet)]
    subprocess.run(generate, check=True, env=env, capture_output=True)
    schema = f"forewarn_bench_{secrets.token_hex(4)}"
    admin = psycopg.connect(args.db, autocommit=True)
    admin.execute(f"CREATE SCHEMA {schema}")
    url = f"{args.db}{'&' if '?' in args.db else '?'}options=-csearch_path%3D{schema}"
    leader = Process("large-leader", url, fleet, 0, tmp)
    replica = Process("large-replica", url, fleet, 1, tmp, ("--hosts", "host-*0"))
    try:
        first, first_note = judged([leader], leader.start, args.check)
        leader_rss = proc_memory(leader, LEADER_PEAK_GOAL_MB)
        replica_start, replica_note = judged([leader, replica], replica.start, args.check)
        replica_rss = proc_memory(replica, REPLICA_PEAK_GOAL_MB)

        def failover_to_replica() -> float:
            leader.kill()
            killed = time.monotonic()
            wait(lambda: leader_of([replica]), 120, "the replica takes over")
            return time.monotonic() - killed

        failover, failover_note = judged([leader, replica], failover_to_replica, args.check)
        restart, restart_note = judged([leader, replica], leader.start, args.check)
        restarted_rss = proc_memory(leader, LEADER_PEAK_GOAL_MB)  # the whole fleet again
    finally:
        for server in (leader, replica):
            server.stop()
        admin.execute(f"DROP SCHEMA {schema} CASCADE")
        admin.close()
    print(
        f"\n{vms:,}-VM fleet on PostgreSQL (RSS ready / peak; goals, on the peak: leader under 3 GB, a replica of a "
        "tenth of the hosts under 1 GB; first start under 60 s, restart under 20 s)\n"
        f"  leader, first start (writes the fleet)   {first:6.1f} s   {leader_rss}{first_note}\n"
        f"  replica, --hosts 'host-*0' (a tenth)     {replica_start:6.1f} s   {replica_rss}{replica_note}\n"
        f"  failover to the replica (kill -9 of the leader, the replica leads)   {failover:.1f} s{failover_note}\n"
        f"  the killed leader back as a replica      {restart:6.1f} s   {restarted_rss}{restart_note}"
    )


def proc_memory(server: Process, goal_mb: float) -> str:
    """Ready and peak memory, judged on the peak: a process that once held more than its goal needs that much."""
    if server.proc is None:
        return "n/a"
    memory = memory_mb(server.proc.pid)
    judged_on_peak = "met" if memory["VmHWM"] < goal_mb else "NOT MET"
    return f"{memory['VmRSS']:,.0f} / {memory['VmHWM']:,.0f} MB (peak under {goal_mb:,.0f} MB: {judged_on_peak})"


if __name__ == "__main__":
    sys.exit(main())
