#!/usr/bin/env python3
"""Azure IMDS scheduled-events GET throughput: forewarn against nginx serving the same bytes as a static file.

Run from the repository root:  .venv/bin/python bench/imds_vs_nginx.py   (or: make bench)

What it does, in one run:
  1. writes a fleet of 10,000 VMs (availability sets, standalone VMs, scale sets with placement groups of 100) into
     a temporary directory; ``default_vm`` is a VM whose scope has live events;
  2. starts ``forewarn serve`` as a real process (manual clock, :memory: store), creates >= 1,000 live events through
     the control API and approves some of them, so documents mix Scheduled and Started;
  3. fetches the exact bytes the default VM gets from
     ``GET /metadata/scheduledevents?api-version=2020-07-01`` and has nginx (one worker) serve them at the same path;
  4. runs wrk with the same settings against both, alternately, several rounds; reports medians of requests/s and
     p50/p99 latency, and the throughput ratio forewarn/nginx against the target (>= 0.5).

Both servers are pinned to CPU 0 (taskset -c 0) and wrk to CPU 1: one core and one worker each. Missing nginx or
wrk are installed with apt-get. The results are also written to bench/results/imds_vs_nginx.json. The exit status
is 0 whether or not the target is met (a benchmark, not a test); it is non-zero only when the run itself failed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
RESULTS = BENCH / "results" / "imds_vs_nginx.json"
VENV_BIN = Path(sys.executable).parent if (Path(sys.executable).parent / "forewarn").exists() else ROOT / ".venv" / "bin"

PATH = "/metadata/scheduledevents"
QUERY = "api-version=2020-07-01"
TARGET_RATIO = 0.5
VARIANT_OPTIONS = {"nodelay", "uvloop", "h11", "noproxy"}
START = "2026-04-20T22:00:00Z"


def say(message: str = "") -> None:
    print(message, flush=True)


class BenchError(Exception):
    """The run could not be carried out (not: the target was missed)."""


# ------------------------------------------------------------------------------------------------- tools
def find_nginx() -> str | None:
    for candidate in (shutil.which("nginx"), "/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/local/nginx/sbin/nginx"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def ensure_tools() -> tuple[str, str]:
    """nginx and wrk, installed with apt-get when missing."""
    nginx, wrk = find_nginx(), shutil.which("wrk")
    missing = [name for name, path in (("nginx", nginx), ("wrk", wrk)) if path is None]
    if missing:
        if shutil.which("apt-get") is None:
            raise BenchError(f"{' and '.join(missing)} not found and apt-get is not available; install them by hand")
        prefix = [] if os.geteuid() == 0 else (["sudo", "-n"] if shutil.which("sudo") else None)
        if prefix is None:
            raise BenchError(f"{' and '.join(missing)} not found; run as root or install: apt-get install -y {' '.join(missing)}")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        say(f"# {' and '.join(missing)} not on PATH: installing with apt-get (apt-get update; apt-get install -y {' '.join(missing)})")
        subprocess.run(prefix + ["apt-get", "update", "-qq"], check=False, env=env)
        done = subprocess.run(prefix + ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], env=env)
        if done.returncode != 0:
            raise BenchError(f"apt-get install {' '.join(missing)} failed (exit {done.returncode})")
        nginx, wrk = find_nginx(), shutil.which("wrk")
        if nginx is None or wrk is None:
            raise BenchError("nginx or wrk still not found after apt-get install")
        say("# installed")
    return nginx, wrk


def tool_version(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    text = (done.stdout + done.stderr).strip().splitlines()
    return text[0] if text else "?"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ------------------------------------------------------------------------------------------------- fleet
@dataclass
class FleetPlan:
    text: str
    vm_count: int
    hosts: list[str]
    default_vm: str
    avsets: dict[str, list[tuple[str, str]]]  # name -> [(vm, host)]
    standalone: list[tuple[str, str, bool]]  # (vm, host, spot)
    scale_sets: dict[str, dict]  # name -> {instances, hosts, spot}
    counts: dict[str, int] = field(default_factory=dict)


def make_fleet(total_vms: int = 10_000) -> FleetPlan:
    """A fleet shaped like a real subscription mix; 20 VMs per host.

    30% in availability sets of 20, 10% standalone (a tenth of them spot, a tenth in a second subscription), 60% in
    five scale sets (placement groups of 100), each on its own block of hosts; the availability sets and standalone
    VMs share the remaining hosts.
    """
    if total_vms % 100:
        raise BenchError("--vms must be a multiple of 100")
    per_host = 20
    host_count = total_vms // per_host
    hosts = [f"host-{i:04d}" for i in range(host_count)]
    avset_vms = total_vms * 3 // 10
    standalone_count = total_vms // 10
    scale_total = total_vms - avset_vms - standalone_count
    # Five scale sets: web 5/12, batch (spot) 3/12, api 2/12, cache and jobs 1/12 each.
    shares = [("web", 5, False, ["1", "2", "3"]), ("batch", 3, True, []), ("api", 2, False, ["1", "2", "3"]),
              ("cache", 1, False, ["1"]), ("jobs", 1, False, [])]
    unit = scale_total // 12
    sizes = [unit * share for _, share, _, _ in shares]
    sizes[0] += scale_total - sum(sizes)
    scale_sets: dict[str, dict] = {}
    next_host = 0
    for (name, _, spot, zones), size in zip(shares, sizes):
        span = max(1, size // per_host)
        scale_sets[name] = {"instances": size, "hosts": hosts[next_host:next_host + span], "spot": spot, "zones": zones}
        next_host += span
    shared = hosts[next_host:] or hosts
    avsets: dict[str, list[tuple[str, str]]] = {}
    for index in range(avset_vms // 20):
        name = f"avset-{index:03d}"
        avsets[name] = [
            (f"{name}-vm{member:02d}", shared[(index * 20 + member) % len(shared)]) for member in range(20)
        ]
    standalone = [(f"vm-{k:04d}", shared[(k * 7 + 3) % len(shared)], k % 10 == 9) for k in range(standalone_count)]
    default_vm = "avset-000-vm00"

    lines = [
        f"# forewarn bench fleet: {total_vms} VMs on {host_count} hosts (generated by bench/imds_vs_nginx.py)",
        "defaults:",
        "  subscription: 6f1c9b2e-5d4a-4e0b-9c3f-2a7d8e1b4c01",
        "  resource_group: bench-rg",
        "  location: westeurope",
        "  size: Standard_D2s_v3",
        f"default_vm: {default_vm}",
        "hosts:",
        *[f"  - {{name: {h}}}" for h in hosts],
        "availability_sets:",
        *[f"  - {{name: {name}, fault_domains: 2, update_domains: 5}}" for name in avsets],
        "vms:",
    ]
    for name, members in avsets.items():
        for vm, host in members:
            lines.append(f"  - {{name: {vm}, host: {host}, availability_set: {name}}}")
    for k, (vm, host, spot) in enumerate(standalone):
        extra = ", spot: true" if spot else ""
        if k % 10 == 4:  # another tenant on the same hardware
            extra += ", subscription: 0b8e7d6c-3a2f-4c1e-8d9b-5f4a3e2d1c02, resource_group: fabrikam-rg, size: Standard_E4s_v5"
        if k % 2 == 0:
            extra += f', zone: "{k % 3 + 1}"'
        lines.append(f"  - {{name: {vm}, host: {host}{extra}}}")
    lines.append("scale_sets:")
    for name, spec in scale_sets.items():
        zones = f", zones: [{', '.join(repr(z) for z in spec['zones'])}]" if spec["zones"] else ""
        spot = ", spot: true" if spec["spot"] else ""
        lines.append(
            f"  - {{name: {name}, instances: {spec['instances']}, placement_group_size: 100{spot}{zones}, "
            f"hosts: [{', '.join(spec['hosts'])}]}}"
        )
    counts = {
        "availability_set_vms": avset_vms,
        "availability_sets": len(avsets),
        "standalone_vms": standalone_count,
        "scale_set_vms": scale_total,
        "scale_sets": len(scale_sets),
        "placement_groups": sum(-(-s["instances"] // 100) for s in scale_sets.values()),
        "hosts": host_count,
    }
    return FleetPlan("\n".join(lines) + "\n", total_vms, hosts, default_vm, avsets, standalone, scale_sets, counts)


# ------------------------------------------------------------------------------------------------- HTTP
def http(method: str, url: str, body=None, headers: dict | None = None, timeout: float = 60) -> tuple[int, bytes, dict]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read(), {k.lower(): v for k, v in response.headers.items()}
    except urllib.error.HTTPError as error:
        return error.code, error.read(), {k.lower(): v for k, v in error.headers.items()}


def control(base: str, method: str, path: str, body=None, expect: int = 200):
    status, data, _ = http(method, base + path, body)
    if status != expect:
        raise BenchError(f"{method} {path} answered {status} (expected {expect}): {data[:300]!r}")
    return json.loads(data)


# ------------------------------------------------------------------------------------------------- processes
class Proc:
    """A child process in its own process group (so Ctrl-C reaches only us, and we stop it and its workers)."""

    def __init__(self, name: str, argv: list[str], log: Path, env: dict | None = None):
        self.name = name
        self.argv = argv
        self.log = log
        self._log_file = open(log, "wb")
        self.popen = subprocess.Popen(
            argv, stdout=self._log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, cwd=str(ROOT), start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def pids(self) -> list[int]:
        """This process and its direct children (nginx's worker)."""
        found = [self.pid]
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text()
                except OSError:
                    continue
                if int(stat.rsplit(")", 1)[1].split()[1]) == self.pid:
                    found.append(int(entry.name))
        return found

    def stop(self) -> None:
        if self.popen.poll() is None:
            try:
                os.killpg(self.pid, signal.SIGTERM)  # the group we created: the process and its own children
            except ProcessLookupError:
                pass
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.popen.wait(timeout=10)
        self._log_file.close()


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of the given processes, in seconds."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / tick


def loaded_modules(pid: int) -> dict[str, bool]:
    """Which native modules the server process has mapped: proof of what uvicorn really uses."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return {}
    return {
        "httptools": "/httptools/parser/parser." in maps,
        "uvloop": "/uvloop/loop." in maps,
    }


def accepted_nodelay(pid: int, url: str) -> bool | None:
    """Whether the server sets TCP_NODELAY on the connections it accepts (None: could not tell).

    Opens one keep-alive connection, finds the server's end of it in /proc/PID/fd, takes a copy of that descriptor
    with pidfd_getfd(2) (Linux 5.6+, needs ptrace rights over the server: we started it, as the same user) and
    reads the option. Nagle's algorithm on the server's side, with the client's delayed ACKs, holds a response
    written in two pieces (uvicorn writes headers, then body) for ~40 ms.
    """
    import ctypes
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=5)
    pidfd = copy = None
    try:
        connection.request("GET", f"{parts.path}?{parts.query}", headers={"Metadata": "true"})
        connection.getresponse().read()
        client_port = connection.sock.getsockname()[1]
        inode = None
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            try:
                rows = Path(table).read_text().splitlines()[1:]
            except OSError:
                continue
            for row in rows:
                fields = row.split()
                local_port = int(fields[1].rsplit(":", 1)[1], 16)
                remote_port = int(fields[2].rsplit(":", 1)[1], 16)
                if local_port == parts.port and remote_port == client_port:
                    inode = fields[9]
        if inode is None:
            return None
        for entry in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(entry)
            except OSError:
                continue
            if target == f"socket:[{inode}]":
                libc = ctypes.CDLL(None, use_errno=True)
                pidfd = os.pidfd_open(pid)
                copy = libc.syscall(438, pidfd, int(entry.name), 0)  # SYS_pidfd_getfd on x86_64 and arm64
                if copy < 0:
                    return None
                with socket.socket(fileno=os.dup(copy)) as sock:
                    return bool(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        return None
    except (OSError, AttributeError, ValueError, http.client.HTTPException):
        return None
    finally:
        connection.close()
        for fd in (copy, pidfd):
            if fd is not None and fd >= 0:
                os.close(fd)


def pinned(cpu: int | None, argv: list[str]) -> list[str]:
    return argv if cpu is None else ["taskset", "-c", str(cpu), *argv]


# ------------------------------------------------------------------------------------------------- forewarn
@dataclass
class Forewarn:
    label: str
    proc: Proc
    control: str
    imds_url: str
    options: set[str]
    events: dict = field(default_factory=dict)


def start_forewarn(label: str, fleet_file: Path, tmp: Path, cpu: int | None, options: set[str]) -> Forewarn:
    port, imds_port = free_port(), free_port()
    serve_args = [
        "serve", "--fleet", str(fleet_file), "--db", ":memory:", "--clock", "manual", "--start", START,
        "--seed", "bench", "--port", str(port), "--imds-port", str(imds_port), "--log-level", "warning",
    ]
    env = dict(os.environ)
    if options:  # a variant: the same CLI, started through bench/_forewarn_variant.py
        argv = [str(VENV_BIN / "python"), str(BENCH / "_forewarn_variant.py"), *serve_args]
        env["FOREWARN_BENCH_LOOP"] = "uvloop" if "uvloop" in options else ""
        env["FOREWARN_BENCH_HTTP"] = "h11" if "h11" in options else ""
        env["FOREWARN_BENCH_NODELAY"] = "1" if "nodelay" in options else ""
        env["FOREWARN_BENCH_NOPROXY"] = "1" if "noproxy" in options else ""
    else:
        argv = [str(VENV_BIN / "forewarn"), *serve_args]
    proc = Proc(label, pinned(cpu, argv), tmp / f"{label}.log", env)
    server = Forewarn(label, proc, f"http://127.0.0.1:{port}", f"http://127.0.0.1:{imds_port}{PATH}?{QUERY}", options)
    deadline = time.monotonic() + 180
    while True:
        if not proc.alive():
            raise BenchError(f"{label} exited during start-up (exit {proc.popen.returncode}):\n{proc.tail()}")
        try:
            status, _, _ = http("GET", server.control + "/healthz", timeout=2)
            if status == 200:
                return server
        except (urllib.error.URLError, ConnectionError, socket.timeout):
            pass
        if time.monotonic() > deadline:
            raise BenchError(f"{label}: /healthz did not answer within 180 s:\n{proc.tail()}")
        time.sleep(0.1)


def populate(server: Forewarn, plan: FleetPlan, wanted: int) -> dict:
    """Create at least ``wanted`` live events through the control API; approve about a third, so some are Started.

    Deterministic (fixed seed, manual clock, --seed bench): every forewarn started from the same fleet file ends
    with the same events and the same documents.
    """
    rng = random.Random(20260420)
    base = server.control
    created = 0
    approved = 0
    requests_made = 0

    def schedule(body: dict) -> list[dict]:
        nonlocal created, requests_made
        events = control(base, "POST", "/v1/events", body, expect=201)
        created += len(events)
        requests_made += 1
        return events

    def approve(events: list[dict]) -> None:
        nonlocal approved
        if events:
            control(base, "POST", "/v1/approvals", {"event_ids": [e["event_id"] for e in events]})
            approved += len(events)

    # The default VM's scope (availability set avset-000): a live migration of two members (on two hosts: two
    # events), approved for one of them (Started), and a host reboot of the host of a third member.
    default_set = plan.avsets["avset-000"]
    first = schedule({"type": "Freeze", "vms": [default_set[0][0]]})
    second = schedule({"type": "Freeze", "vms": [default_set[1][0]]})
    approve(second)
    schedule({"type": "Reboot", "hosts": [default_set[2][1]]})
    del first

    standalone = [vm for vm, _, spot in plan.standalone if not spot]
    spot_vms = [vm for vm, _, spot in plan.standalone if spot]
    batch = plan.scale_sets["batch"]["instances"]
    web = plan.scale_sets["web"]["instances"]
    avset_names = list(plan.avsets)[1:]
    used_hosts = {default_set[2][1]}
    kinds = ["host", "freeze_pair", "user_reboot", "preempt", "terminate", "redeploy", "host_freeze"]
    weights = [2, 4, 4, 3, 3, 2, 1]
    turn = 0
    while created < wanted:
        turn += 1
        kind = rng.choices(kinds, weights)[0]
        if kind in ("host", "host_freeze"):
            host = rng.choice(plan.hosts)
            if host in used_hosts:
                continue
            used_hosts.add(host)
            body = {"type": "Freeze" if kind == "host_freeze" else rng.choice(["Reboot", "Redeploy"]), "hosts": [host]}
        elif kind == "freeze_pair":
            members = plan.avsets[rng.choice(avset_names)]
            body = {"type": "Freeze", "vms": [vm for vm, _ in rng.sample(members, 2)]}
        elif kind == "user_reboot":
            body = {"type": "Reboot", "source": "User", "vms": [rng.choice(standalone)]}
        elif kind == "preempt":
            body = {"type": "Preempt",
                    "vms": [rng.choice(spot_vms)] if rng.random() < 0.3 else [f"batch_{rng.randrange(batch)}"]}
        elif kind == "terminate":
            body = {"type": "Terminate", "vms": [f"web_{rng.randrange(web)}"]}
        else:
            body = {"type": "Redeploy", "source": "User", "vms": [rng.choice(standalone)]}
        events = schedule(body)
        if turn % 3 == 0:
            approve(events)  # every event of these operations is approved: they start now
    live = control(base, "GET", "/v1/events")
    statuses: dict[str, int] = {}
    types: dict[str, int] = {}
    for event in live:
        statuses[event["status"]] = statuses.get(event["status"], 0) + 1
        types[event["type"]] = types.get(event["type"], 0) + 1
    return {
        "live": len(live),
        "by_status": dict(sorted(statuses.items())),
        "by_type": dict(sorted(types.items())),
        "schedule_requests": requests_made,
        "approved": approved,
        "scopes_with_events": len({e["scope"] for e in live}),
    }


# ------------------------------------------------------------------------------------------------- nginx
def start_nginx(nginx: str, tmp: Path, body: bytes, cpu: int | None) -> tuple[Proc, str]:
    port = free_port()
    root = tmp / "nginx"
    for sub in ("www", "logs", "client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    document = root / "www" / "scheduledevents.json"
    document.write_bytes(body)
    # nginx's worker may run as 'nobody': let it read the document.
    for path in (tmp, root, root / "www"):
        path.chmod(0o755)
    document.chmod(0o644)
    conf = root / "nginx.conf"
    conf.write_text(f"""# generated by bench/imds_vs_nginx.py
worker_processes 1;
daemon off;
pid {root}/nginx.pid;
error_log {root}/logs/error.log warn;
events {{
    worker_connections 1024;
}}
http {{
    access_log off;
    default_type application/json;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_timeout 65s;
    keepalive_requests 1000000;
    client_body_temp_path {root}/client_body;
    proxy_temp_path {root}/proxy;
    fastcgi_temp_path {root}/fastcgi;
    uwsgi_temp_path {root}/uwsgi;
    scgi_temp_path {root}/scgi;
    server {{
        listen 127.0.0.1:{port} backlog=1024;
        server_name localhost;
        location = {PATH} {{
            alias {document};
        }}
        location / {{
            return 404;
        }}
    }}
}}
""")
    check = subprocess.run([nginx, "-t", "-q", "-p", str(root), "-c", str(conf), "-e", str(root / "logs" / "error.log")],
                           capture_output=True, text=True)
    if check.returncode != 0:
        raise BenchError(f"nginx -t refused the generated configuration:\n{check.stderr}")
    proc = Proc("nginx", pinned(cpu, [nginx, "-p", str(root), "-c", str(conf), "-e", str(root / "logs" / "error.log")]),
                tmp / "nginx.log")
    url = f"http://127.0.0.1:{port}{PATH}?{QUERY}"
    deadline = time.monotonic() + 20
    while True:
        if not proc.alive():
            raise BenchError(f"nginx exited during start-up:\n{proc.tail()}")
        try:
            status, _, _ = http("GET", url, headers={"Metadata": "true"}, timeout=2)
            if status == 200:
                return proc, url
        except (urllib.error.URLError, ConnectionError, socket.timeout):
            pass
        if time.monotonic() > deadline:
            raise BenchError(f"nginx did not answer within 20 s:\n{proc.tail()}")
        time.sleep(0.05)


# ------------------------------------------------------------------------------------------------- wrk
UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0, "h": 3_600_000.0}


def to_ms(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s|m|h)", text.strip())
    if not match:
        raise BenchError(f"cannot read wrk latency {text!r}")
    return float(match.group(1)) * UNITS_MS[match.group(2)]


def parse_wrk(output: str) -> dict:
    rps = re.search(r"^Requests/sec:\s+([\d.]+)", output, re.M)
    if not rps:
        raise BenchError(f"wrk printed no Requests/sec:\n{output}")
    percentiles = {float(p): to_ms(v) for p, v in re.findall(r"^\s+([\d.]+)%\s+(\S+)\s*$", output, re.M)}
    total = re.search(r"^\s+(\d+) requests in ([\d.]+\w+)", output, re.M)
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output)
    return {
        "rps": float(rps.group(1)),
        "p50_ms": percentiles.get(50.0),
        "p75_ms": percentiles.get(75.0),
        "p90_ms": percentiles.get(90.0),
        "p99_ms": percentiles.get(99.0),
        "requests": int(total.group(1)) if total else None,
        "non_2xx": int(non2xx.group(1)) if non2xx else 0,
        "socket_errors": sum(map(int, errors.groups())) if errors else 0,
    }


def run_wrk(wrk: str, url: str, args: argparse.Namespace, seconds: float, cpu: int | None, server_pids: list[int]) -> dict:
    argv = pinned(cpu, [wrk, f"-t{args.threads}", f"-c{args.connections}", f"-d{seconds:g}s", "--latency",
                        "-H", "Metadata: true", url])
    before = cpu_seconds(server_pids)
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60, start_new_session=True)
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        raise BenchError(f"wrk failed (exit {done.returncode}):\n{done.stdout}\n{done.stderr}")
    result = parse_wrk(done.stdout)
    result["server_cpu"] = round((cpu_seconds(server_pids) - before) / elapsed, 3)  # cores busy, ~1.0 = saturated
    result["raw"] = done.stdout
    return result


# ------------------------------------------------------------------------------------------------- main
def fmt_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vms", type=int, default=10_000, help="fleet size (default 10000)")
    parser.add_argument("--events", type=int, default=1_000, help="live events to create, at least (default 1000)")
    parser.add_argument("--duration", type=float, default=10, help="seconds per wrk run (default 10)")
    parser.add_argument("--warmup", type=float, default=2, help="seconds of unmeasured wrk load per server first (default 2)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; medians are reported (default 3)")
    parser.add_argument("--threads", type=int, default=1, help="wrk threads (default 1)")
    parser.add_argument("--connections", type=int, default=32, help="wrk connections (default 32)")
    parser.add_argument("--variants", default="nodelay,uvloop",
                        help="comma-separated extra forewarn rows, not the shipped configuration, each a '+'-joined "
                             "set of: nodelay (TCP_NODELAY on accepted sockets), uvloop (uvloop event loop), h11 "
                             "(uvicorn's h11 parser instead of httptools), noproxy (uvicorn proxy_headers=False); 'none' for none "
                             "(default: nodelay,uvloop)")
    parser.add_argument("--keep-tmp", action="store_true", help="keep the temporary directory (fleet, logs, nginx.conf)")
    parser.add_argument("--results", type=Path, default=RESULTS, help=f"JSON output (default {RESULTS.relative_to(ROOT)})")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    variants = [] if args.variants.strip() in ("", "none") else [v.strip() for v in args.variants.split(",")]
    for variant in variants:
        if not variant or not set(variant.split("+")) <= VARIANT_OPTIONS:
            parser.error(f"unknown variant {variant!r}; use a '+'-joined set of {', '.join(sorted(VARIANT_OPTIONS))}")

    # SIGTERM (e.g. from a CI timeout) cleans up like Ctrl-C does.
    def on_sigterm(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_sigterm)

    procs: list[Proc] = []
    tmp = Path(tempfile.mkdtemp(prefix="forewarn-bench-"))
    try:
        return run(args, variants, procs, tmp)
    except KeyboardInterrupt:
        say("\ninterrupted: stopping servers")
        return 130
    except BenchError as error:
        say(f"\nbench failed: {error}")
        return 1
    finally:
        for proc in reversed(procs):
            proc.stop()
        if args.keep_tmp:
            say(f"# kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def run(args: argparse.Namespace, variants: list[str], procs: list[Proc], tmp: Path) -> int:
    nginx_bin, wrk_bin = ensure_tools()
    if not (VENV_BIN / "forewarn").exists():
        raise BenchError(f"{VENV_BIN / 'forewarn'} not found: create the venv first (make bench does)")
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) >= 2 and shutil.which("taskset"):
        server_cpu, client_cpu = cpus[0], cpus[1]
        pinning = f"servers pinned to CPU {server_cpu} (taskset -c {server_cpu}), wrk pinned to CPU {client_cpu}; one worker each"
    else:
        server_cpu = client_cpu = None
        pinning = "NOT pinned (fewer than 2 CPUs or no taskset): servers and wrk share the CPU"

    say(f"forewarn IMDS vs nginx: {platform.node()} ({os.cpu_count()} CPUs), {pinning}")
    say(f"  nginx: {tool_version([nginx_bin, '-v'])}; wrk: {tool_version([wrk_bin, '-v'])}")

    plan = make_fleet(args.vms)
    fleet_file = tmp / "fleet.yaml"
    fleet_file.write_text(plan.text)
    c = plan.counts
    say(f"fleet: {plan.vm_count} VMs on {c['hosts']} hosts: {c['availability_set_vms']} in {c['availability_sets']} "
        f"availability sets, {c['standalone_vms']} standalone, {c['scale_set_vms']} in {c['scale_sets']} scale sets "
        f"({c['placement_groups']} placement groups of 100); default_vm {plan.default_vm}")

    # -------------------------------------------------------------------- forewarn (shipped), then variants
    servers: list[Forewarn] = []
    for variant in [""] + variants:
        label = f"forewarn+{variant}" if variant else "forewarn"
        started = time.monotonic()
        server = start_forewarn(label, fleet_file, tmp, server_cpu, set(variant.split("+")) - {""})
        procs.append(server.proc)
        ready = time.monotonic() - started
        server.events = populate(server, plan, args.events)
        servers.append(server)
        say(f"{label}: up in {ready:.1f} s (pid {server.proc.pid}); {server.events['live']} live events "
            f"{server.events['by_status']} in {server.events['scopes_with_events']} scopes, "
            f"from {server.events['schedule_requests']} schedule requests")
        if server.events["live"] < args.events:
            raise BenchError(f"{label}: only {server.events['live']} live events (wanted >= {args.events})")
    shipped = servers[0]

    status, body, headers = http("GET", shipped.imds_url, headers={"Metadata": "true"})
    if status != 200:
        raise BenchError(f"forewarn IMDS answered {status}: {body[:300]!r}")
    document = json.loads(body)
    doc_statuses = sorted({e["EventStatus"] for e in document["Events"]})
    say(f"document of {plan.default_vm}: {len(body)} bytes, DocumentIncarnation {document['DocumentIncarnation']}, "
        f"{len(document['Events'])} events ({', '.join(doc_statuses) or 'none'}); Content-Type {headers.get('content-type')}")
    if not document["Events"]:
        raise BenchError("the default VM's document has no events")

    nginx_proc, nginx_url = start_nginx(nginx_bin, tmp, body, server_cpu)
    procs.append(nginx_proc)

    # Same status, same bytes, from every server, before anything is measured.
    targets = [("nginx", nginx_url, nginx_proc)] + [(s.label, s.imds_url, s.proc) for s in servers]
    for name, url, _ in targets:
        got_status, got_body, _ = http("GET", url, headers={"Metadata": "true"})
        if got_status != 200 or got_body != body:
            raise BenchError(f"{name} answered {got_status} with {len(got_body)} bytes, not the same 200 and {len(body)} bytes")
    say(f"checked: all {len(targets)} servers answer 200 with the identical {len(body)}-byte body")

    modules = {s.label: loaded_modules(s.proc.pid) for s in servers}
    nodelay = {s.label: accepted_nodelay(s.proc.pid, s.imds_url) for s in servers}
    for s in servers:
        m = modules[s.label]
        nd = {True: "on", False: "OFF", None: "unknown"}[nodelay[s.label]]
        say(f"  {s.label}: uvicorn HTTP parser {'httptools' if m.get('httptools') else 'h11'}, event loop "
            f"{'uvloop' if m.get('uvloop') else 'asyncio (uvloop not loaded)'}, TCP_NODELAY on accepted sockets {nd}")

    # -------------------------------------------------------------------- load
    wrk_settings = f"wrk -t{args.threads} -c{args.connections} -d{args.duration:g}s --latency -H 'Metadata: true'"
    say(f"load: {wrk_settings}; {args.rounds} alternating rounds after a {args.warmup:g} s warm-up each; medians")
    pids = {name: proc.pids() for name, _, proc in targets}
    if args.warmup > 0:
        for name, url, _ in targets:
            run_wrk(wrk_bin, url, args, args.warmup, client_cpu, pids[name])
    runs: dict[str, list[dict]] = {name: [] for name, _, _ in targets}
    for round_index in range(args.rounds):
        for name, url, _ in targets:
            result = run_wrk(wrk_bin, url, args, args.duration, client_cpu, pids[name])
            runs[name].append(result)
            flags = ""
            if result["non_2xx"] or result["socket_errors"]:
                flags = f"  (non-2xx {result['non_2xx']}, socket errors {result['socket_errors']})"
            say(f"  round {round_index + 1} {name:<20} {result['rps']:>10,.0f} req/s  p50 {fmt_ms(result['p50_ms']):>9}"
                f"  p99 {fmt_ms(result['p99_ms']):>9}  server CPU {result['server_cpu']:.2f}{flags}")

    def median(name: str, key: str):
        values = [r[key] for r in runs[name] if r[key] is not None]
        return statistics.median(values) if values else None

    summary = {
        name: {
            "rps": median(name, "rps"),
            "p50_ms": median(name, "p50_ms"),
            "p90_ms": median(name, "p90_ms"),
            "p99_ms": median(name, "p99_ms"),
            "server_cpu": median(name, "server_cpu"),
            "non_2xx": sum(r["non_2xx"] for r in runs[name]),
            "socket_errors": sum(r["socket_errors"] for r in runs[name]),
        }
        for name in runs
    }
    ratio = summary["forewarn"]["rps"] / summary["nginx"]["rps"]
    met = ratio >= TARGET_RATIO

    # -------------------------------------------------------------------- report
    say("")
    say(f"{'server':<20} {'req/s':>10} {'p50':>10} {'p99':>10} {'CPU':>5}  {'ours/nginx':>10}")
    for name in runs:
        s = summary[name]
        rel = s["rps"] / summary["nginx"]["rps"]
        note = "" if name in ("nginx", "forewarn") else "   (variant, not shipped)"
        say(f"{name:<20} {s['rps']:>10,.0f} {fmt_ms(s['p50_ms']):>10} {fmt_ms(s['p99_ms']):>10} {s['server_cpu']:>5.2f}"
            f"  {rel:>10.3f}{note}")
    say("")
    say(f"throughput ratio forewarn/nginx: {ratio:.3f}  (target >= {TARGET_RATIO}): "
        + ("MET" if met else f"MISSED (forewarn would need {TARGET_RATIO * summary['nginx']['rps']:,.0f} req/s)"))
    say(f"p99: forewarn {fmt_ms(summary['forewarn']['p99_ms'])}, nginx {fmt_ms(summary['nginx']['p99_ms'])}")
    say(f"fleet {plan.vm_count} VMs, {shipped.events['live']} live events {shipped.events['by_status']}, "
        f"document {len(body)} bytes ({len(document['Events'])} events), {pinning}")
    if any(s["non_2xx"] or s["socket_errors"] for s in summary.values()):
        say("WARNING: some runs had non-2xx responses or socket errors (see above)")
    say("CPU = server cores busy during the run (utime+stime / wall; 1.00 = its one core saturated)")

    results = {
        "benchmark": "imds_vs_nginx",
        "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
                    "kernel": platform.release()},
        "pinning": pinning,
        "tools": {"nginx": tool_version([nginx_bin, "-v"]), "wrk": tool_version([wrk_bin, "-v"])},
        "request": f"GET {PATH}?{QUERY} (Metadata: true)",
        "wrk": {"threads": args.threads, "connections": args.connections, "duration_s": args.duration,
                "warmup_s": args.warmup, "rounds": args.rounds},
        "fleet": {"vms": plan.vm_count, **plan.counts, "default_vm": plan.default_vm},
        "events": shipped.events,
        "document": {"bytes": len(body), "events": len(document["Events"]), "statuses": doc_statuses,
                     "incarnation": document["DocumentIncarnation"]},
        "uvicorn": {s.label: {"http": "httptools" if modules[s.label].get("httptools") else "h11",
                              "loop": "uvloop" if modules[s.label].get("uvloop") else "asyncio",
                              "tcp_nodelay": nodelay[s.label]} for s in servers},
        "summary": summary,
        "ratio": ratio,
        "target_ratio": TARGET_RATIO,
        "target_met": met,
        "runs": {name: [{k: v for k, v in r.items() if k != "raw"} for r in rs] for name, rs in runs.items()},
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
