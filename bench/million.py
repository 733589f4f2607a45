"""A very large fleet served by one ``forewarn serve``: resident memory, first start, restart, and the cost of a clock
step, at 10,000 to 1,000,000 VMs (issue 14's goals: 1,000,000 VMs under 3 GB resident, first start under 60 s, restart
under 20 s, and a clock step with the same work due costing the same as at 10,000 VMs).

For each fleet size, in its own temporary database (a SQLite file, or a fresh schema of ``--db postgresql://...``):

1. the fleet generator (``forewarn fleet generate``'s, from Python) writes a fleet of N machines: a twentieth of
   them EC2 instances, a twentieth Compute Engine instances, the rest Azure VMs (its size and the time it took are
   printed);
2. **first start**: ``forewarn serve --fleet FILE --db DB --clock manual`` with every surface on (control, IMDS,
   ARM with Resource Graph, EC2, Compute Engine), timed from the process start to the first 200 of ``/healthz``;
   beside the wall time, the server's CPU time (user + sys) by then, its resident memory (VmRSS) and its peak
   (VmHWM). A scheduled-events GET through the metadata port (the caller registered as one of the VMs) must answer
   200 with the document of that VM's scope;
3. **probe**: a Freeze wave by host, 50 hosts at a time (500 VMs a round at any size), through the control API
   (``POST /v1/waves``), then 18 clock steps (``POST /v1/clock/next``): the server's CPU time per step. The work due
   at each step is the same at every size, so the figure should not grow with the fleet (1.0 against the smallest
   size);
4. **every surface used**: an ARM GET of a VM, a Resource Graph query, an EC2 DescribeInstanceStatus page, a
   Compute Engine API listing, a GET of the EC2 and of the Compute Engine metadata as one of their instances (each
   builds what it builds on first use), then the server's memory now and at its peak: the memory goal is judged on
   this peak, not on the figure at ready;
5. **restart** from the same database without ``--fleet`` (what a restarted service does), then **restart with
   --fleet** (the same command run twice: the file is hashed and recognized as the one the stored fleet was read
   from, not parsed), each timed and measured like the first start, each answering the same GET.

Every server is stopped (SIGTERM) before the next starts; each size runs after the previous one's processes ended.

    .venv/bin/python bench/million.py                           # 10,000, 100,000 and 1,000,000 VMs (minutes, ~3 GB)
    .venv/bin/python bench/million.py --sizes 10000,100000
    .venv/bin/python bench/million.py --db postgresql://postgres@127.0.0.1:5432/test
    .venv/bin/python bench/million.py --check                   # 2,000 VMs: fails on a broken setup only

Timings are wall time on whatever else the machine runs (the load average is printed); the CPU columns compare runs
on a busy machine. Results also go to ``bench/results/million.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from benchlib import forewarn_environment, loopback_address, memory_mb, process_cpu, wait_healthy

from forewarn.scenarios.server import free_ports

ROOT = Path(__file__).resolve().parent.parent
T0 = "2026-04-20T22:00:00Z"
READY_WITHIN = 600.0  # seconds: a broken server, not a slow one
PROBE_HOSTS = 50
PROBE_STEPS = (
    18  # six rounds of the wave: each round is a start, a completion (and the next unit's events) and a recovery
)
GOAL_VMS = 1_000_000
GOALS = {"rss_mb": 3 * 1024, "first_s": 60.0, "restart_s": 20.0}


CALLER = loopback_address(253, 9)  # the address this script asks the metadata port from (FOREWARN_TEST_NET moves it)


class Server:
    """One ``forewarn serve`` process on free loopback ports."""

    def __init__(self, db: str, log: Path, fleet: Path | None, first: bool):
        names = ("port", "imds-port", "arm-port", "ec2-port", "gce-port")
        self.ports = dict(zip(names, free_ports(len(names))))
        argv = [sys.executable, "-m", "forewarn", "serve", "--db", db, "--log-level", "warning"]
        if fleet is not None:
            argv += ["--fleet", str(fleet)]
        if first:
            argv += ["--clock", "manual", "--start", T0, "--seed", "bench"]
        for name, port in self.ports.items():
            argv += [f"--{name}", str(port)]
        self.control = f"http://127.0.0.1:{self.ports['port']}"
        self.imds = f"http://127.0.0.1:{self.ports['imds-port']}/metadata/scheduledevents?api-version=2020-07-01"
        self.log = log
        started = time.perf_counter()
        with open(log, "ab") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=forewarn_environment())
        self.ready_s = wait_healthy(self.process, self.control, started, READY_WITHIN, log)
        self.ready_cpu = process_cpu(self.process.pid)
        self.ready_memory = memory_mb(self.process.pid)

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        response = httpx.request(method, f"{self.control}{path}", json=body, timeout=600)
        if response.status_code >= 300:
            raise SystemExit(f"{method} {path}: {response.status_code} {response.text[:500]}")
        return response.json()

    def document(self, vm: str) -> dict:
        """The scheduled-events document the metadata port serves to ``vm``."""
        return self.metadata(vm, self.imds, {"Metadata": "true"}).json()

    def metadata(self, machine: str, url: str, headers: dict[str, str]) -> httpx.Response:
        """A GET of the metadata port as ``machine``: asked from a loopback address of this script's own, registered
        as that machine (127.0.0.1 is every local program's, which the server refuses to give one machine)."""
        self.call("PUT", f"/v1/imds/callers/{CALLER}", {"machine": machine})
        with httpx.Client(transport=httpx.HTTPTransport(local_address=CALLER), timeout=30) as client:
            response = client.get(url, headers=headers)
        if response.status_code != 200:
            raise SystemExit(f"metadata GET as {machine}: {response.status_code} {response.text[:300]}")
        return response

    def memory(self) -> dict[str, float]:
        return memory_mb(self.process.pid)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def probe(server: Server, steps: int) -> dict[str, float]:
    """CPU and wall time per clock step of a Freeze wave, PROBE_HOSTS hosts at a time."""
    outcome = server.call(
        "POST",
        "/v1/waves",
        {
            "type": "Freeze",
            "by": "host",
            "concurrency": PROBE_HOSTS,
            "notice": "15m",
            "impact_window": "5m",
            "duration_seconds": 5,
            "name": "probe",
        },
    )
    wave_id = outcome["wave"]["wave_id"]
    pid = server.process.pid
    cpu_before, wall_before = process_cpu(pid), time.perf_counter()
    changes = 0
    for _ in range(steps):
        changes += server.call("POST", "/v1/clock/next")["changes_total"]
    cpu, wall = process_cpu(pid) - cpu_before, time.perf_counter() - wall_before
    server.call("POST", f"/v1/waves/{wave_id}/cancel")
    while server.call("GET", "/v1/clock")["next_deadline"] is not None:  # what was Started completes
        server.call("POST", "/v1/clock/next")
    return {"cpu_ms_per_step": cpu / steps * 1000, "wall_ms_per_step": wall / steps * 1000, "changes": changes}


def use_every_surface(server: Server, vm: str) -> dict[str, int]:
    """One call to each surface that builds something on first use: an ARM GET of ``vm``, a Resource Graph query, a
    page of EC2 DescribeInstanceStatus, a Compute Engine API listing, the EC2 and Compute Engine metadata as one of
    their instances (Azure's metadata is asked before and after). Each must answer 200."""
    subscription, group, _ = server.call("GET", f"/v1/vms/{vm}")["scope"].removeprefix("vm:").split("/")
    arm = f"http://127.0.0.1:{server.ports['arm-port']}"
    ec2 = f"http://127.0.0.1:{server.ports['ec2-port']}"
    gce = f"http://127.0.0.1:{server.ports['gce-port']}"
    vm_path = (
        f"/subscriptions/{subscription}/resourceGroups/{group}/providers/Microsoft.Compute/"
        f"virtualMachines/{vm}?api-version=2024-07-01"
    )
    instance = server.call("GET", "/v1/gce/instances/gce-00000")
    calls = {
        "arm_vm": httpx.get(arm + vm_path, timeout=600),
        "resource_graph": httpx.post(
            f"{arm}/providers/Microsoft.ResourceGraph/resources?api-version=2022-10-01",
            json={"query": "maintenanceresources | summarize count()"},
            timeout=600,
        ),
        "ec2_describe_instance_status": httpx.post(
            ec2 + "/",
            content=b"Action=DescribeInstanceStatus&Version=2016-11-15&IncludeAllInstances=true&MaxResults=1000",
            headers={
                "Content-Type": "application/x-www-form-urlencoded; charset=utf-8",
                "X-Amz-Date": "20261130T120000Z",
                "Authorization": "AWS4-HMAC-SHA256 Credential=AKIDBENCH/20261130/us-east-1/ec2/aws4_request, "
                "SignedHeaders=content-type;host;x-amz-date, Signature=" + "0" * 64,
            },
            timeout=600,
        ),
        "gce_instances": httpx.get(
            f"{gce}/compute/v1/projects/{instance['project']}/zones/{instance['zone']}/instances", timeout=600
        ),
    }
    for name, answer in calls.items():
        if answer.status_code != 200:
            raise SystemExit(f"{name}: {answer.status_code} {answer.text[:300]}")
    metadata = f"http://127.0.0.1:{server.ports['imds-port']}"
    ec2_events = f"{metadata}/latest/meta-data/events/maintenance/scheduled"
    calls["ec2_metadata"] = server.metadata("ec2-00000", ec2_events, {})
    gce_event = f"{metadata}/computeMetadata/v1/instance/maintenance-event"
    calls["gce_metadata"] = server.metadata("gce-00000", gce_event, {"Metadata-Flavor": "Google"})
    return {name: len(answer.content) for name, answer in calls.items()}


def start_figures(server: Server, vms: int) -> dict[str, float]:
    return {
        "ready_s": server.ready_s,
        "ready_cpu_s": server.ready_cpu,
        "rss_mb": server.ready_memory.get("VmRSS", float("nan")),
        "peak_mb": server.ready_memory.get("VmHWM", float("nan")),
        "kb_per_vm": server.ready_memory.get("VmRSS", float("nan")) * 1024 / vms,
    }


def one_size(vms: int, db_url: str | None, tmp: Path, steps: int) -> dict:
    result: dict = {"vms": vms}
    fleet = tmp / f"fleet-{vms}.yaml"
    started = time.perf_counter()
    others = vms // 20
    shape = f"FleetShape(vms={vms - 2 * others}, ec2={others}, gce={others}, seed='bench')"
    write = f"from forewarn.fleet.generate import *; open({str(fleet)!r}, 'w').write(fleet_yaml({shape}))"
    subprocess.run([sys.executable, "-c", write], check=True, env=forewarn_environment(), capture_output=True)
    result["generate_s"] = time.perf_counter() - started
    result["file_mb"] = fleet.stat().st_size / 2**20
    vm = "vm-00000"  # the first standalone VM: every generated fleet of more than a few VMs has one
    db = db_url or str(tmp / f"million-{vms}.db")
    log = tmp / f"serve-{vms}.log"
    server = Server(db, log, fleet, first=True)
    try:
        result["first"] = start_figures(server, vms)
        before = server.document(vm)
        result["probe"] = probe(server, steps)
        result["after_probe"] = server.memory()
        result["surfaces"] = use_every_surface(server, vm)
        result["after_surfaces"] = server.memory()
        after = server.document(vm)
        if after["DocumentIncarnation"] < before["DocumentIncarnation"]:
            raise SystemExit("DocumentIncarnation went backwards")
    finally:
        server.stop()
    for name, with_fleet in (("restart", None), ("restart_fleet", fleet)):
        server = Server(db, log, with_fleet, first=False)
        try:
            result[name] = start_figures(server, vms)
            if server.document(vm) != after:
                raise SystemExit(f"{name}: the document differs from the one served before the restart")
        finally:
            server.stop()
    if db_url is None:
        result["db_mb"] = sum(path.stat().st_size for path in tmp.glob(f"million-{vms}.db*")) / 2**20
    return result


def postgres_schema(url: str) -> tuple[str, str]:
    import psycopg

    schema = f"forewarn_million_{secrets.token_hex(4)}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    separator = "&" if "?" in url else "?"
    return schema, f"{url}{separator}options=-csearch_path%3D{schema}"


def drop_schema(url: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"DROP SCHEMA {schema} CASCADE")


def table(rows: list[dict], database: str) -> str:
    header = (
        "machines | file MB | first start s (CPU s) | RSS MB | peak MB | KB/VM | surfaces used: RSS MB | peak MB "
        "| restart s (CPU s) | RSS MB | peak MB | restart --fleet s | probe CPU ms/step | probe wall ms/step"
    )
    lines = [
        f"One forewarn serve, {database}, every surface on; machines: 90% Azure VMs, 5% EC2, 5% Compute Engine; "
        "memory at /healthz ready, then after the probe and a call to every surface\n",
        header,
    ]
    lines.append(" | ".join("---" for _ in header.split(" | ")))
    for row in rows:
        first, restart, again, step = row["first"], row["restart"], row["restart_fleet"], row["probe"]
        lines.append(
            " | ".join(
                (
                    f"{row['vms']:,}",
                    f"{row['file_mb']:.0f}",
                    f"{first['ready_s']:.1f} ({first['ready_cpu_s']:.1f})",
                    f"{first['rss_mb']:.0f}",
                    f"{first['peak_mb']:.0f}",
                    f"{first['kb_per_vm']:.2f}",
                    f"{row['after_surfaces']['VmRSS']:.0f}",
                    f"{row['after_surfaces']['VmHWM']:.0f}",
                    f"{restart['ready_s']:.1f} ({restart['ready_cpu_s']:.1f})",
                    f"{restart['rss_mb']:.0f}",
                    f"{restart['peak_mb']:.0f}",
                    f"{again['ready_s']:.1f}",
                    f"{step['cpu_ms_per_step']:.1f}",
                    f"{step['wall_ms_per_step']:.1f}",
                )
            )
        )
    return "\n".join(lines)


def verdicts(rows: list[dict]) -> list[str]:
    lines = []
    base = rows[0]
    for row in rows[1:]:
        ratio = row["probe"]["cpu_ms_per_step"] / max(base["probe"]["cpu_ms_per_step"], 0.1)
        lines.append(
            f"  {row['vms']:,} VMs: probe step CPU x{ratio:.2f} against {base['vms']:,} VMs (same work due; 1.0 is "
            "independent of the fleet)"
        )
    for row in rows:
        if row["vms"] != GOAL_VMS:
            continue
        peak = max(row[name]["peak_mb"] for name in ("first", "restart", "restart_fleet"))
        used = row["after_surfaces"]
        checks = (
            ("resident at ready", row["first"]["rss_mb"], GOALS["rss_mb"], "MB"),
            ("resident after every surface was used", used["VmRSS"], GOALS["rss_mb"], "MB"),
            ("peak resident (every surface used, any start)", max(peak, used["VmHWM"]), GOALS["rss_mb"], "MB"),
            ("first start", row["first"]["ready_s"], GOALS["first_s"], "s"),
            ("restart", row["restart"]["ready_s"], GOALS["restart_s"], "s"),
        )
        for what, value, goal, unit in checks:
            lines.append(
                f"  1,000,000 VMs, {what}: {value:,.1f} {unit} (goal < {goal:,.0f} {unit}): "
                f"{'met' if value < goal else 'NOT met'}"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000,1000000", help="fleet sizes, comma-separated")
    parser.add_argument("--db", default="sqlite", help="'sqlite' (a temporary file) or a postgresql:// URL")
    parser.add_argument("--check", action="store_true", help="2,000 VMs, a short probe: fails on a broken setup only")
    args = parser.parse_args()
    sizes = [2000] if args.check else [int(size) for size in args.sizes.split(",")]
    steps = 6 if args.check else PROBE_STEPS
    rows = []
    with tempfile.TemporaryDirectory(prefix="forewarn-million-") as directory:
        for size in sizes:
            print(f"{size:,} VMs ...", file=sys.stderr, flush=True)
            schema = None
            url = None
            if args.db != "sqlite":
                schema, url = postgres_schema(args.db)
            try:
                rows.append(one_size(size, url, Path(directory), steps))
            finally:
                if schema is not None:
                    drop_schema(args.db, schema)
    load = Path("/proc/loadavg").read_text().split()[0]
    database = "SQLite file" if args.db == "sqlite" else "PostgreSQL"
    print(table(rows, database))
    print(f"\nload average {load} on {os.cpu_count()} cores; {sys.executable}")
    for line in verdicts(rows):
        print(line)
    results = ROOT / "bench" / "results"
    results.mkdir(exist_ok=True)
    (results / "million.json").write_text(json.dumps({"database": database, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
