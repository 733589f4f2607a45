#!/usr/bin/env python3
"""EC2 DescribeInstanceStatus over a 1,000-instance fleet: forewarn against moto's server, side by side.

Run from the repository root:  .venv/bin/python bench/ec2_vs_moto.py

  1. installs moto[server] into the venv if it is missing (pip), and starts moto's standalone server;
  2. creates the fleet in moto with boto3 (run_instances in batches of 100, us-east-1a/b/c), and writes a fleet file
     with as many ``ec2_instances`` for ``forewarn serve`` (manual clock, :memory: store);
  3. schedules system-reboot events on some of forewarn's instances through its control API (moto does not implement
     scheduled events, so its answers carry none and are smaller);
  4. lists every instance with boto3's describe_instance_status paginator (IncludeAllInstances=True, PageSize 1000)
     against both servers, alternating round by round, and reports listings/s, p50 and p99 per server and the ratio
     forewarn/moto; then the same with the raw HTTP request (no botocore: its parsing cost taken out);
  5. times forewarn's listings cold as well: after a change (``POST /v1/reset`` and the same events scheduled again,
     so every instance's cached item is made anew and the answer is the same bytes), the first raw listing, then the
     next one (warm), side by side with moto's raw listing (which caches nothing: every listing of it is cold), and
     judged against the same goal: moto's listings are all cold, so forewarn meets it only if its cold ones do too.

Both servers run on CPU 0, this script (the client) on CPU 1. Results also go to bench/results/ec2_vs_moto.json. The exit
status is 0 whatever the figures; non-zero means the run itself failed (including a server not answering every
instance).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from http.client import HTTPConnection
from pathlib import Path

# Shared with the IMDS benchmark beside this file: process handling, CPU accounting, small HTTP helpers.
from benchlib import Meter, machine_note, markdown_table, process_cpu, verdict
from imds_vs_nginx import (
    ROOT,
    VENV_BIN,
    BenchError,
    Proc,
    control,
    cpu_jiffies,
    cpu_seconds,
    free_port,
    guarded,
    pinned,
    say,
    steal_share,
)

RESULTS = ROOT / "bench" / "results" / "ec2_vs_moto.json"
PYTHON = VENV_BIN / "python"
START = "2026-04-20T22:00:00Z"
REGION = "us-east-1"
ZONES = ["us-east-1a", "us-east-1b", "us-east-1c"]
AMI = "ami-12c6146b"  # in moto's default AMI list
BATCH = 100  # run_instances MinCount = MaxCount
PAGE_SIZE = 1000  # MaxResults: the largest EC2 allows (moto ignores it and answers everything in one page)
API_VERSION = "2016-11-15"
# The raw request: what botocore sends for the paginator's first page, byte for byte in the body.
RAW_BODY = (
    f"Action=DescribeInstanceStatus&Version={API_VERSION}&IncludeAllInstances=true&MaxResults={PAGE_SIZE}"
).encode()
# Neither server verifies signatures. The credential scope routes the request to EC2 in moto and scopes it to the
# region in forewarn, as botocore's signed requests do.
RAW_HEADERS = {
    "Content-Type": "application/x-www-form-urlencoded; charset=utf-8",
    "X-Amz-Date": "20261130T120000Z",
    "Authorization": f"AWS4-HMAC-SHA256 Credential=AKIDBENCH/20261130/{REGION}/ec2/aws4_request, "
    "SignedHeaders=content-type;host;x-amz-date, Signature=" + "0" * 64,
}

#: Before issue 16 (bench/README.md, 2026-11-30): raw listings/s ratio forewarn/moto, and forewarn's server CPU.
BEFORE_RAW_RATIO = 21.05
BEFORE_SERVER_CPU_MS = 12.5
GOAL_RATIO = 30.0

try:
    import boto3
    from botocore.config import Config
except ImportError:  # pragma: no cover - the venv has them (forewarn's dev dependencies)
    boto3 = None


# ------------------------------------------------------------------------------------------------- moto
def moto_installed() -> bool:
    probe = [str(PYTHON), "-c", "import moto.server, flask"]
    return subprocess.run(probe, capture_output=True).returncode == 0


def ensure_moto() -> tuple[str, bool]:
    """moto's version in the venv, installing moto[server] with pip first when it (or its server's Flask) is missing."""
    probe = [
        str(PYTHON),
        "-c",
        "import moto.server, flask; from importlib.metadata import version; print(version('moto'))",
    ]
    done = subprocess.run(probe, capture_output=True, text=True)
    if done.returncode == 0:
        return done.stdout.strip(), False
    say(f"# moto[server] not in the venv: {PYTHON} -m pip install 'moto[server]'")
    install = subprocess.run([str(PYTHON), "-m", "pip", "install", "-q", "moto[server]"])
    done = subprocess.run(probe, capture_output=True, text=True)
    if install.returncode != 0 or done.returncode != 0:
        raise BenchError(f"pip install 'moto[server]' failed (exit {install.returncode}):\n{done.stderr[-800:]}")
    say("# installed")
    return done.stdout.strip(), True


def client(url: str):
    return boto3.client(
        "ec2",
        endpoint_url=url,
        region_name=REGION,
        aws_access_key_id="AKIDBENCH",
        aws_secret_access_key="bench",
        config=Config(retries={"total_max_attempts": 1}, read_timeout=120, connect_timeout=10),
    )


def start_moto(tmp: Path, cpu: int | None) -> tuple[Proc, str]:
    port = free_port()
    proc = Proc(
        "moto", pinned(cpu, [str(PYTHON), "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]), tmp / "moto.log"
    )
    url = f"http://127.0.0.1:{port}"
    proc.wait_ready(url + "/moto-api/data.json", 60)
    return proc, url


def populate_moto(url: str, count: int) -> list[str]:
    ec2 = client(url)
    ids: list[str] = []
    for batch, first in enumerate(range(0, count, BATCH)):
        n = min(BATCH, count - first)
        answer = ec2.run_instances(
            ImageId=AMI,
            MinCount=n,
            MaxCount=n,
            InstanceType="m5.large",
            Placement={"AvailabilityZone": ZONES[batch % len(ZONES)]},
        )
        ids += [i["InstanceId"] for i in answer["Instances"]]
    if len(set(ids)) != count:
        raise BenchError(f"moto created {len(set(ids))} distinct instances, not {count}")
    return ids


# ------------------------------------------------------------------------------------------------- forewarn
def fleet_text(count: int) -> tuple[str, list[str]]:
    rng = random.Random(20261130)
    ids: list[str] = []
    while len(ids) < count:
        candidate = f"i-{rng.getrandbits(68):017x}"
        if candidate not in ids:
            ids.append(candidate)
    lines = [f"# forewarn bench fleet: {count} EC2 instances (generated by bench/ec2_vs_moto.py)", "ec2_instances:"]
    lines += [
        f"  - {{id: {iid}, name: bench-{k:04d}, availability_zone: {ZONES[k % len(ZONES)]}}}"
        for k, iid in enumerate(ids)
    ]
    return "\n".join(lines) + "\n", ids


@dataclass
class Forewarn:
    proc: Proc
    control: str
    ec2_url: str


def start_forewarn(fleet_file: Path, tmp: Path, cpu: int | None) -> Forewarn:
    port, ec2_port, imds_port = free_port(), free_port(), free_port()
    argv = [
        str(VENV_BIN / "forewarn"),
        "serve",
        "--fleet",
        str(fleet_file),
        "--db",
        ":memory:",
        "--clock",
        "manual",
        "--start",
        START,
        "--seed",
        "bench",
        "--port",
        str(port),
        "--ec2-port",
        str(ec2_port),
        "--imds-port",
        str(imds_port),
        "--arm-port",
        "0",
        "--gce-port",
        "0",
        "--log-level",
        "warning",
    ]
    proc = Proc("forewarn", pinned(cpu, argv), tmp / "forewarn.log")
    server = Forewarn(proc, f"http://127.0.0.1:{port}", f"http://127.0.0.1:{ec2_port}")
    proc.wait_ready(server.control + "/healthz", 180)
    return server


def schedule_events(server: Forewarn, ids: list[str], every: int) -> list[str]:
    """A system-reboot a day ahead on every ``every``-th instance (one control-API request per 50)."""
    chosen = ids[::every] if every > 0 else []
    for first in range(0, len(chosen), 50):
        control(
            server.control,
            "POST",
            "/v1/ec2/events",
            {"code": "system-reboot", "instances": chosen[first : first + 50], "notice": "1d"},
            expect=201,
        )
    return chosen


# ------------------------------------------------------------------------------------------------- load
@dataclass
class Target:
    name: str
    url: str
    proc: Proc
    expected_ids: set[str]
    ec2: object = None
    connection: HTTPConnection | None = None
    pids: list[int] | None = None


def list_boto3(target: Target) -> tuple[int, int, int]:
    """One full listing through the paginator: (instances, instances with events, pages)."""
    instances = with_events = pages = 0
    paginator = target.ec2.get_paginator("describe_instance_status")
    for page in paginator.paginate(IncludeAllInstances=True, PaginationConfig={"PageSize": PAGE_SIZE}):
        pages += 1
        statuses = page["InstanceStatuses"]
        instances += len(statuses)
        with_events += sum(1 for s in statuses if s.get("Events"))
    if instances != len(target.expected_ids):
        raise BenchError(f"{target.name} listed {instances} instances, not {len(target.expected_ids)}")
    return instances, with_events, pages


def post_raw(target: Target) -> bytes:
    """The raw request on a kept-alive connection (http.client reconnects by itself if the server closed it)."""
    if target.connection is None:
        host, port = target.url.removeprefix("http://").split(":")
        target.connection = HTTPConnection(host, int(port), timeout=120)
    target.connection.request("POST", "/", body=RAW_BODY, headers=RAW_HEADERS)
    response = target.connection.getresponse()
    body = response.read()
    if response.status != 200:
        raise BenchError(f"{target.name} answered the raw request {response.status}: {body[:300]!r}")
    return body


def check_boto3(target: Target) -> dict:
    """One listing, checked: exactly the expected instance IDs, and how many carry events."""
    seen: list[str] = []
    with_events = pages = 0
    for page in target.ec2.get_paginator("describe_instance_status").paginate(
        IncludeAllInstances=True, PaginationConfig={"PageSize": PAGE_SIZE}
    ):
        pages += 1
        seen += [s["InstanceId"] for s in page["InstanceStatuses"]]
        with_events += sum(1 for s in page["InstanceStatuses"] if s.get("Events"))
    if len(seen) != len(target.expected_ids) or set(seen) != target.expected_ids:
        raise BenchError(
            f"{target.name} listed {len(seen)} instances ({len(set(seen) & target.expected_ids)} of the "
            f"{len(target.expected_ids)} expected)"
        )
    return {"instances": len(seen), "with_events": with_events, "pages": pages}


def check_raw(target: Target) -> dict:
    body = post_raw(target)
    items = body.count(b"<instanceId>")
    if items != len(target.expected_ids) or b"<nextToken>" in body:
        raise BenchError(
            f"{target.name}'s raw answer has {items} instances (expected {len(target.expected_ids)}, in one page)"
        )
    return {"instances": items, "bytes": len(body), "events": body.count(b"<instanceEventId>")}


def measure(targets: list[Target], once, warmup: int, rounds: int, server_cpu: int | None) -> dict:
    """``warmup`` untimed then ``rounds`` timed calls of ``once`` per target, alternating (the order flips each round).

    Per target: latencies, its server's CPU time over them, and this client's CPU time over them.
    """
    for target in targets:
        for _ in range(warmup):
            once(target)
    samples = {t.name: [] for t in targets}
    server_cpu_s = {t.name: 0.0 for t in targets}
    client_cpu_s = {t.name: 0.0 for t in targets}
    jiffies_before = cpu_jiffies(server_cpu)
    for round_index in range(rounds):
        for target in targets if round_index % 2 == 0 else reversed(targets):
            cpu_before, client_before = cpu_seconds(target.pids), time.process_time()
            started = time.perf_counter()
            once(target)
            elapsed = time.perf_counter() - started
            client_cpu_s[target.name] += time.process_time() - client_before
            server_cpu_s[target.name] += cpu_seconds(target.pids) - cpu_before
            samples[target.name].append(elapsed)
    steal = steal_share(jiffies_before, cpu_jiffies(server_cpu))
    out = {"steal": None if steal is None else round(steal, 3)}
    for target in targets:
        values = samples[target.name]
        cuts = statistics.quantiles(values, n=100, method="inclusive") if len(values) > 1 else values * 99
        out[target.name] = {
            "listings": len(values),
            "listings_per_s": len(values) / sum(values),
            "p50_ms": statistics.median(values) * 1e3,
            "p99_ms": cuts[98] * 1e3,
            "min_ms": min(values) * 1e3,
            "mean_ms": statistics.fmean(values) * 1e3,
            "max_ms": max(values) * 1e3,
            "server_cpu_ms_per_listing": server_cpu_s[target.name] / len(values) * 1e3,
            "client_cpu_ms_per_listing": client_cpu_s[target.name] / len(values) * 1e3,
            "samples_ms": [round(v * 1e3, 3) for v in values],
        }
    return out


def measure_cold(target: Target, rounds: int, change: Callable[[], object], check: bool) -> dict:
    """``rounds`` times: ``change`` (untimed), then the first raw listing (cold: every item rendered anew) and the
    next (warm), each timed with the server's CPU from its CPU clock (a listing is a few ms: ticks would not do).
    The rounds are one benchlib round: ``refused`` says why they do not count (empty: they do)."""
    cold: list[float] = []
    warm: list[float] = []
    cold_cpu: list[float] = []
    warm_cpu: list[float] = []
    assert target.pids is not None
    with Meter({target.name: target.pids}) as meter:
        for _ in range(rounds):
            change()
            for walls, cpus in ((cold, cold_cpu), (warm, warm_cpu)):
                cpu_before, started = sum(map(process_cpu, target.pids)), time.perf_counter()
                post_raw(target)
                walls.append(time.perf_counter() - started)
                cpus.append(sum(map(process_cpu, target.pids)) - cpu_before)
    assert meter.usage is not None
    return {
        "rounds": rounds,
        "refused": [] if check else verdict(meter.usage),
        "cold_listings_per_s": len(cold) / sum(cold),
        "cold_p50_ms": statistics.median(cold) * 1e3,
        "cold_max_ms": max(cold) * 1e3,
        "cold_server_cpu_ms": statistics.median(cold_cpu) * 1e3,
        "warm_p50_ms": statistics.median(warm) * 1e3,
        "warm_server_cpu_ms": statistics.median(warm_cpu) * 1e3,
    }


def report_cold(cold: dict, moto_raw: dict | None) -> None:
    say("")
    say(f"raw HTTP POST after a change that touched every instance ({cold['rounds']} rounds: change, cold, warm)")
    say(
        f"  forewarn cold: p50 {cold['cold_p50_ms']:.2f} ms (max {cold['cold_max_ms']:.2f} ms), server CPU "
        f"{cold['cold_server_cpu_ms']:.1f} ms; warm right after: p50 {cold['warm_p50_ms']:.2f} ms, server CPU "
        f"{cold['warm_server_cpu_ms']:.1f} ms"
    )
    if cold["refused"]:
        say(f"  INVALID: {'; '.join(cold['refused'])}")
    if moto_raw is not None:
        ratio = cold["cold_listings_per_s"] / moto_raw["listings_per_s"]
        say(
            f"  moto (no cache: every listing cold): p50 {moto_raw['p50_ms']:.2f} ms, server CPU "
            f"{moto_raw['server_cpu_ms_per_listing']:.1f} ms; forewarn cold/moto: listings/s "
            f"{ratio:.2f}x, server CPU "
            f"{moto_raw['server_cpu_ms_per_listing'] / max(cold['cold_server_cpu_ms'], 1e-6):.1f}x less"
        )
        say(f"  cold listings/s, forewarn/moto: {ratio:.2f}x (goal ≥ {GOAL_RATIO:.0f}x): {cold_verdict(cold, ratio)}")


def cold_verdict(cold: dict, ratio: float) -> str:
    """The goal's verdict on the cold listings: moto's every listing is cold, so the goal holds for forewarn's only
    if its cold listings meet it too."""
    if cold["refused"]:
        return "INVALID"
    return "met" if ratio >= GOAL_RATIO else "not met"


def cold_row(cold: dict | None, moto_raw: dict, check: bool) -> list[list[str]]:
    """The summary's row for the cold listings (none when they were not timed)."""
    if cold is None:
        return []
    ratio = cold["cold_listings_per_s"] / moto_raw["listings_per_s"]
    return [
        [
            "cold raw listings/s (after a change), forewarn/moto",
            "-",
            f"{ratio:.2f}x",
            "" if check else cold_verdict(cold, ratio),
        ]
    ]


def report(title: str, result: dict, names: list[str]) -> dict:
    ours, theirs = result["forewarn"], result["moto"]
    ratio = {
        "listings_per_s": ours["listings_per_s"] / theirs["listings_per_s"],
        "p50": ours["p50_ms"] / theirs["p50_ms"],
        "p99": ours["p99_ms"] / theirs["p99_ms"],
    }
    say("")
    say(title)
    say(f"  {'server':<9} {'listings/s':>10} {'p50':>11} {'p99':>11} {'server CPU':>12} {'client CPU':>12}")
    for name in names:
        r = result[name]
        say(
            f"  {name:<9} {r['listings_per_s']:>10.2f} {r['p50_ms']:>8.2f} ms {r['p99_ms']:>8.2f} ms "
            f"{r['server_cpu_ms_per_listing']:>9.1f} ms {r['client_cpu_ms_per_listing']:>9.1f} ms"
        )
    say(
        f"  forewarn/moto: listings/s {ratio['listings_per_s']:.2f}x, p50 {ratio['p50']:.3f}, p99 {ratio['p99']:.3f} "
        f"(latency: lower is better)"
    )
    if (result.get("steal") or 0) >= 0.01:
        say(f"  steal {result['steal']:.0%} on the servers' CPU during these rounds")
    return ratio


# ------------------------------------------------------------------------------------------------- main
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instances", type=int, default=1_000, help="fleet size, 1..1000 (default 1000: one page)")
    parser.add_argument(
        "--event-every",
        type=int,
        default=10,
        help="a system-reboot event on every N-th forewarn instance (default 10; 0: none)",
    )
    parser.add_argument("--rounds", type=int, default=30, help="timed boto3 listings per server (default 30)")
    parser.add_argument(
        "--raw-rounds",
        type=int,
        default=100,
        help="timed raw-HTTP listings per server (default 100; 0: skip the raw variant)",
    )
    parser.add_argument("--warmup", type=int, default=3, help="untimed listings per server first (default 3)")
    parser.add_argument(
        "--cold-rounds", type=int, default=10, help="forewarn's listings timed right after a change (default 10)"
    )
    parser.add_argument("--keep-tmp", action="store_true", help="keep the temp dir (fleet file, server logs)")
    parser.add_argument(
        "--check",
        action="store_true",
        help="small and fast (50 instances, 2 listings; moto only if installed): fails on a broken setup only",
    )
    parser.add_argument(
        "--results", type=Path, default=RESULTS, help=f"JSON output (default {RESULTS.relative_to(ROOT)})"
    )
    args = parser.parse_args()
    if args.check:
        args.instances, args.rounds, args.raw_rounds, args.warmup, args.cold_rounds = 50, 2, 2, 0, 2
    if not 1 <= args.instances <= PAGE_SIZE:
        parser.error(f"--instances must be 1..{PAGE_SIZE} (a listing is then one page on both servers)")
    if args.rounds < 2 or args.raw_rounds < 0 or args.raw_rounds == 1 or args.warmup < 0:
        parser.error("--rounds must be at least 2, --raw-rounds 0 or at least 2, --warmup at least 0")

    return guarded(run, args, "forewarn-bench-ec2-")


def run(args: argparse.Namespace, procs: list[Proc], tmp: Path) -> int:
    if boto3 is None:
        raise BenchError("boto3 is not importable: run with the venv's python (.venv/bin/python)")
    if not (VENV_BIN / "forewarn").exists():
        raise BenchError(f"{VENV_BIN / 'forewarn'} not found: create the venv first (make bench does)")
    if args.check and not moto_installed():
        moto_version, installed = "", False
        say("# --check: moto is not installed; checking forewarn alone (a full run installs moto)")
    else:
        moto_version, installed = ensure_moto()
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) >= 2 and shutil.which("taskset"):
        server_cpu, client_cpu = cpus[0], cpus[1]
        pinning = f"servers pinned to CPU {server_cpu}, client (this script) to CPU {client_cpu}"
    else:
        server_cpu = client_cpu = None
        pinning = "NOT pinned (fewer than 2 CPUs or no taskset): servers and client share the CPU"
    import botocore

    versions = {
        "moto": moto_version,
        "boto3": boto3.__version__,
        "botocore": botocore.__version__,
        "python": platform.python_version(),
    }
    say(f"forewarn EC2 DescribeInstanceStatus vs moto: {platform.node()} ({os.cpu_count()} CPUs), {pinning}")
    say(
        f"  moto {moto_version}{' (just installed)' if installed else ''}, boto3 {versions['boto3']}, "
        f"botocore {versions['botocore']}, Python {versions['python']}"
    )
    if client_cpu is not None:
        os.sched_setaffinity(0, {client_cpu})  # the children below are pinned by taskset explicitly

    # ---------------------------------------------------------------------- servers and fleets
    text, fleet_ids = fleet_text(args.instances)
    fleet_file = tmp / "fleet.yaml"
    fleet_file.write_text(text)
    started = time.monotonic()
    forewarn = start_forewarn(fleet_file, tmp, server_cpu)
    procs.append(forewarn.proc)
    say(
        f"forewarn: up in {time.monotonic() - started:.1f} s (pid {forewarn.proc.pid}), {args.instances} instances "
        f"in {', '.join(ZONES)}"
    )
    with_events = schedule_events(forewarn, fleet_ids, args.event_every)
    say(f"  scheduled system-reboot (notice 1d) on {len(with_events)} instances through POST /v1/ec2/events")

    targets = [Target("forewarn", forewarn.ec2_url, forewarn.proc, set(fleet_ids))]
    if moto_version:
        started = time.monotonic()
        moto_proc, moto_url = start_moto(tmp, server_cpu)
        procs.append(moto_proc)
        ready = time.monotonic() - started
        started = time.monotonic()
        moto_ids = populate_moto(moto_url, args.instances)
        say(
            f"moto: up in {ready:.1f} s (pid {moto_proc.pid}); {len(moto_ids)} instances created with run_instances "
            f"in batches of {BATCH} in {time.monotonic() - started:.1f} s"
        )
        targets.append(Target("moto", moto_url, moto_proc, set(moto_ids)))
    names = [t.name for t in targets]
    for target in targets:
        target.ec2 = client(target.url)
        target.pids = target.proc.pids()

    # ---------------------------------------------------------------------- checks
    checked = {t.name: check_boto3(t) for t in targets}
    raw_checked = {t.name: check_raw(t) for t in targets} if args.raw_rounds else {}
    for name in names:
        c = checked[name]
        extra = ""
        if raw_checked:
            r = raw_checked[name]
            extra = (
                f"; raw answer {r['bytes']:,} bytes ({r['bytes'] / r['instances']:.0f} per instance), "
                f"{r['events']} events"
            )
        say(
            f"checked {name}: all {c['instances']} instances in {c['pages']} page(s), {c['with_events']} with events"
            + extra
        )
    if checked["forewarn"]["with_events"] != len(with_events):
        raise BenchError(
            f"forewarn showed events on {checked['forewarn']['with_events']} instances, "
            f"not the {len(with_events)} scheduled"
        )
    say(
        "NOTE: moto does not implement scheduled events (its answers never carry eventsSet), so its answers are "
        "smaller than forewarn's."
    )

    # ---------------------------------------------------------------------- load
    say("")
    say(
        f"load: one full listing = describe_instance_status paginator, IncludeAllInstances=True, PageSize "
        f"{PAGE_SIZE}; {args.warmup} warm-up + {args.rounds} timed listings per server, alternating; one client, "
        "back to back"
    )
    boto = measure(targets, list_boto3, args.warmup, args.rounds, server_cpu)
    raw, refused = None, []
    for _attempt in range(1 if args.check or not args.raw_rounds else 3):
        if not args.raw_rounds:
            break
        # The raw round counts only if each server used its core while it answered (the client does little else
        # than wait) and nothing else used the machine: otherwise it measures the machine (issue 16).
        with Meter({t.name: t.pids for t in targets}) as meter:
            raw = measure(targets, post_raw, args.warmup, args.raw_rounds, server_cpu)
        assert meter.usage is not None
        reasons = [] if args.check else verdict(meter.usage)
        for name in names:
            share = raw[name]["server_cpu_ms_per_listing"] / raw[name]["mean_ms"]
            raw[name]["server_share"] = share
            if not args.check and share < 0.85:
                reasons.append(f"{name} used {share:.2f} of its core while answering (< 0.85)")
        raw["usage"] = meter.usage.as_dict()
        if not reasons:
            break
        refused.append(reasons)
        say(f"# raw round refused: {'; '.join(reasons)}")

    def change() -> None:
        control(forewarn.control, "POST", "/v1/reset", {})
        schedule_events(forewarn, fleet_ids, args.event_every)

    cold = measure_cold(targets[0], args.cold_rounds, change, args.check) if args.cold_rounds else None
    if cold is not None and check_raw(targets[0])["events"] != raw_checked.get("forewarn", {}).get("events", 0):
        raise BenchError("after the reset and the same events again, forewarn's answer has other events")
    for target in targets:
        if target.connection is not None:
            target.connection.close()
    if cold is not None:
        report_cold(cold, raw["moto"] if raw is not None and "moto" in raw else None)
    if len(names) < 2:
        say("")
        for name, result in (("boto3", boto), ("raw", raw)):
            if result:
                r = result["forewarn"]
                say(
                    f"{name}: forewarn {r['listings_per_s']:.2f} listings/s, {r['server_cpu_ms_per_listing']:.1f} ms CPU"
                )
        say(machine_note())
        return 0

    boto_ratio = report(f"boto3 paginator ({args.rounds} listings per server)", boto, names)
    raw_ratio = None
    if raw is not None:
        raw_ratio = report(
            f"raw HTTP POST, same body, http.client keep-alive, no parsing ({args.raw_rounds} listings per server)",
            raw,
            names,
        )
        invalid = len(refused) >= (1 if args.check else 3)
        ours_cpu = raw["forewarn"]["server_cpu_ms_per_listing"]
        # /proc counts CPU in 10 ms ticks: a short run (--check) can see none at all
        cpu_ratio = f"{raw['moto']['server_cpu_ms_per_listing'] / ours_cpu:.1f}x" if ours_cpu else "below one tick"
        status = (
            "INVALID: " + "; ".join(refused[-1])
            if invalid
            else ("met" if raw_ratio["listings_per_s"] >= GOAL_RATIO else "not met")
        )
        say("")
        say(
            markdown_table(
                ["measure", "before", "now", f"goal ≥ {GOAL_RATIO:.0f}x"],
                [
                    [
                        "raw listings/s, forewarn/moto",
                        f"{BEFORE_RAW_RATIO:.2f}x",
                        f"{raw_ratio['listings_per_s']:.2f}x",
                        status,
                    ],
                    ["server CPU per listing, moto/forewarn", "21.8x", cpu_ratio, ""],
                    *cold_row(cold, raw["moto"], args.check),
                    [
                        "forewarn server CPU per listing",
                        f"{BEFORE_SERVER_CPU_MS} ms",
                        f"{raw['forewarn']['server_cpu_ms_per_listing']:.1f} ms",
                        "",
                    ],
                ],
            )
        )
        say(machine_note())
    say("")
    say(
        "listings/s = listings / time spent in them (one client, sequential); p99 of "
        f"{args.rounds} boto3 samples is close to their maximum."
    )
    say(
        "server CPU = the server process's CPU time per listing (/proc, 10 ms ticks summed over the rounds); "
        "client CPU = this script's (botocore's parsing, for boto3)."
    )
    say(
        f"fleet {args.instances} instances; forewarn: {len(with_events)} with a system-reboot event; moto: none "
        "(no events in moto); " + pinning
    )

    results = {
        "benchmark": "ec2_vs_moto",
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"host": platform.node(), "cpus": os.cpu_count(), "kernel": platform.release()},
        "versions": versions,
        "pinning": pinning,
        "call": {
            "action": "DescribeInstanceStatus",
            "IncludeAllInstances": True,
            "MaxResults": PAGE_SIZE,
            "raw_body": RAW_BODY.decode(),
            "region": REGION,
        },
        "load": {"warmup": args.warmup, "rounds": args.rounds, "raw_rounds": args.raw_rounds},
        "fleet": {
            "instances": args.instances,
            "zones": ZONES,
            "forewarn_instances_with_events": len(with_events),
            "moto_ami": AMI,
            "moto_batch": BATCH,
        },
        "checks": {"boto3": checked, "raw": raw_checked},
        "boto3": boto,
        "boto3_ratio_forewarn_over_moto": boto_ratio,
        "raw": raw,
        "raw_ratio_forewarn_over_moto": raw_ratio,
        "cold": cold,
        "note": "moto does not implement scheduled events: its answers carry no eventsSet and are smaller",
    }
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(results, indent=2) + "\n")
    try:
        shown = args.results.resolve().relative_to(ROOT)
    except ValueError:
        shown = args.results
    say(f"results written to {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
