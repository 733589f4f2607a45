#!/usr/bin/env python3
"""The durable command path: approvals per second through the metadata POST from many VMs at once, and schedules per
second through the control API, on SQLite and on PostgreSQL.

    .venv/bin/python bench/commands.py                      # 4,000 VMs, 32 at once, SQLite and PostgreSQL
    .venv/bin/python bench/commands.py --vms 1000 --clients 64 --stores sqlite
    .venv/bin/python bench/commands.py --check              # small and fast: fails on a broken setup only

For each store, ``forewarn serve`` runs as a real process (manual clock; SQLite: a file, ``synchronous=FULL`` as serve
runs it; PostgreSQL: a fresh schema in ``--postgres``, dropped afterwards) with a fleet of N standalone VMs, each on
its own host and with its own metadata address (127.0.x.y, or as FOREWARN_TEST_NET moves them; a VM's client binds it as its source address, so the server
knows the caller). Then:

1. **schedules**: one Freeze per VM through ``POST /v1/events`` (``{"vms": [name]}``), ``--clients`` requests in
   flight at once;
2. **approvals**: every VM POSTs ``{"StartRequests": [{"EventId": ...}]}`` to its metadata endpoint, ``--clients``
   VMs at once, each from its own address (a connection each).

Both go through the group commit (``Maintenance.perform_soon``): a group's transaction runs in a worker thread while
the commands that arrive meanwhile form the next group; each command is answered once its transaction is durable.

Each phase records the server's CPU time (CPU µs per command: robust on a busy machine), this script's (the client:
raw non-blocking sockets under one selector, requests encoded beforehand, so that it costs little per request), and
the machine's other load (bench/benchlib.py; on PostgreSQL, the backends serving the server count as its own work,
not as other load). A phase where the server did not use its core, where the client used
its own (then the client set the rate, and the round says so), or where other processes used the machine, is run
again (up to 3 times, on a new server) and then reported INVALID. The goal (issue 16): at least
5,000 approvals/s on SQLite, with nothing acknowledged before it is durable.
"""

from __future__ import annotations

import argparse
import json
import secrets
import selectors
import socket
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from benchlib import machine_note, markdown_table, measured, numbered_address, postgres_backends
from imds_vs_nginx import VENV_BIN, BenchError, Proc, free_port, guarded, http, say

POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"
START = "2026-04-20T22:00:00Z"
GOAL_APPROVALS = 5000
PATH = "/metadata/scheduledevents?api-version=2020-07-01"


def vm_address(index: int) -> str:
    return numbered_address(index)


def fleet_text(vms: int) -> str:
    lines = ["defaults: {subscription: 6f1c9b2e-5d4a-4e0b-9c3f-2a7d8e1b4c01, resource_group: rg, location: westeurope}"]
    lines.append("vms:")
    lines += [f"  - {{name: vm-{i:05d}, host: host-{i:05d}, imds: {{address: {vm_address(i)}}}}}" for i in range(vms)]
    return "\n".join(lines) + "\n"


class Server:
    def __init__(self, db: str, fleet: Path, tmp: Path, name: str):
        self.port, self.imds_port = free_port(), free_port()
        argv = [str(VENV_BIN / "python"), "-m", "forewarn", "serve", "--fleet", str(fleet), "--db", db]
        argv += ["--host", "127.0.0.1", "--port", str(self.port), "--imds-host", "127.0.0.1"]
        argv += [
            "--imds-port",
            str(self.imds_port),
            "--arm-port",
            "0",
            "--ec2-port",
            "0",
            "--gce-port",
            "0",
            "--clock",
            "manual",
        ]
        argv += ["--start", START, "--seed", "bench", "--log-level", "warning"]
        self.proc = Proc(f"forewarn-{name}", argv, tmp / f"forewarn-{name}.log")
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc.wait_ready(f"{self.base}/healthz", 180)


# ------------------------------------------------------------------------------------------- HTTP/1.1 clients
# The client shares the machine's two cores with the server, so what it spends per request is taken from the rate it
# can show: raw non-blocking sockets under one selector, requests encoded before the timed part, and of each answer
# only the status and Content-Length read (asyncio's streams cost about three times as much CPU per approval).
def request_bytes(method: str, path: str, body: bytes) -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nMetadata: true\r\nContent-Type: application/json\r\n"
    return f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


class Slot:
    """One connection in flight: the job it carries, what it has still to send, and what it has read of the answer."""

    __slots__ = ("sock", "source", "job", "out", "buffer", "end", "length")

    def __init__(self) -> None:
        self.sock: socket.socket | None = None
        self.source: str | None = None
        self.job: tuple[str | None, bytes] = (None, b"")
        self.out = memoryview(b"")
        self.buffer = b""
        self.end = -1  # where the head ends in buffer (-1: not read yet)
        self.length = 0


def run_clients(jobs: list[tuple[str | None, bytes]], port: int, clients: int) -> float:
    """Send ``(source address, request)`` jobs, ``clients`` at once. A job with a source address opens a connection of
    its own from that address (a VM calling its metadata endpoint); jobs without one reuse a kept-alive connection.
    Every answer must be 2xx. Returns the wall seconds."""
    selector = selectors.DefaultSelector()
    target = ("127.0.0.1", port)
    pending = iter(jobs)
    left = len(jobs)

    def begin(slot: Slot) -> None:
        job = next(pending, None)
        if job is None:
            if slot.sock is not None:
                selector.unregister(slot.sock)
                slot.sock.close()
                slot.sock = None
            return
        source, request = slot.job = job
        slot.out, slot.buffer, slot.end = memoryview(request), b"", -1
        if slot.sock is not None and (source is not None or slot.source is not None):
            selector.unregister(slot.sock)
            slot.sock.close()
            slot.sock = None
        if slot.sock is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            if source is not None:
                sock.bind((source, 0))
            sock.connect_ex(target)  # EINPROGRESS: writable once connected
            slot.sock, slot.source = sock, source
            selector.register(sock, selectors.EVENT_WRITE, slot)
        else:
            selector.modify(slot.sock, selectors.EVENT_WRITE, slot)

    def fail(slot: Slot, why: str) -> BenchError:
        return BenchError(f"{slot.job[1].split(b' ', 2)[1].decode()} from {slot.job[0]}: {why}")

    started = time.perf_counter()
    slots = [Slot() for _ in range(min(clients, len(jobs)))]
    for slot in slots:
        begin(slot)
    while left:
        ready = selector.select(60)
        if not ready:
            raise BenchError(f"no answer in 60 s ({left} requests outstanding)")
        for key, events in ready:
            slot = key.data
            sock = slot.sock
            if events & selectors.EVENT_WRITE:
                try:
                    sent = sock.send(slot.out)
                except OSError as error:
                    raise fail(slot, f"send: {error}") from None
                slot.out = slot.out[sent:]
                if not slot.out:
                    selector.modify(sock, selectors.EVENT_READ, slot)
                continue
            try:
                data = sock.recv(65536)
            except OSError as error:
                raise fail(slot, f"recv: {error}") from None
            if not data:
                raise fail(slot, "connection closed before the answer")
            buffer = slot.buffer = slot.buffer + data
            if slot.end < 0:
                slot.end = buffer.find(b"\r\n\r\n")
                if slot.end < 0:
                    continue
                head = buffer[: slot.end].lower()
                at = head.find(b"\r\ncontent-length:")
                if at >= 0:
                    stop = head.find(b"\r\n", at + 2)
                    slot.length = int(head[at + 17 : stop if stop >= 0 else len(head)])
                else:
                    slot.length = 0
            if len(buffer) < slot.end + 4 + slot.length:
                continue
            status = int(buffer[9:12])
            if not 200 <= status < 300:
                raise fail(slot, f"HTTP {status} {buffer[slot.end + 4 :][:200]!r}")
            left -= 1
            begin(slot)
    for slot in slots:
        if slot.sock is not None:
            slot.sock.close()
    selector.close()
    return time.perf_counter() - started


# ----------------------------------------------------------------------------------------------------- phases
def one_store(args: argparse.Namespace, store: str, tmp: Path, procs: list, attempt: list[int]) -> dict:
    """A fresh server on ``store``; schedules then approvals; the figures of both."""
    attempt[0] += 1
    fleet = tmp / "fleet.yaml"
    fleet.write_text(fleet_text(args.vms))
    schema = None
    if store == "sqlite":
        db = str(tmp / f"commands-{attempt[0]}.db")
    else:
        import psycopg

        schema = f"forewarn_bench_{secrets.token_hex(4)}"
        with psycopg.connect(args.postgres, autocommit=True) as admin:
            admin.execute(f"CREATE SCHEMA {schema}")
        db = f"{args.postgres}{'&' if '?' in args.postgres else '?'}options=-csearch_path%3D{schema}"
    server = Server(db, fleet, tmp, f"{store}-{attempt[0]}")
    procs.append(server.proc)
    participants = {"server": server.proc.pids}
    if schema is not None:
        port = urlsplit(args.postgres).port or 5432
        participants["postgres"] = lambda: postgres_backends(server.proc.pids(), port)
    try:
        names = [f"vm-{i:05d}" for i in range(args.vms)]
        schedules = [
            (
                None,
                request_bytes(
                    "POST", "/v1/events", json.dumps({"type": "Freeze", "vms": [name], "notice": "1h"}).encode()
                ),
            )
            for name in names
        ]
        scheduled = measured(
            lambda: run_clients(schedules, server.port, args.clients),
            participants,
            saturated=("server",),
            drivers=("client",),
            attempts=1,
            check=args.check,
        )
        events = json.loads(http("GET", f"{server.base}/v1/events")[1])
        by_vm = {event["resources"][0]: event["event_id"] for event in events}
        if len(by_vm) != args.vms:
            raise BenchError(f"{store}: {len(by_vm)} VMs have an event, not {args.vms}")
        approvals = [
            (
                vm_address(i),
                request_bytes("POST", PATH, json.dumps({"StartRequests": [{"EventId": by_vm[name]}]}).encode()),
            )
            for i, name in enumerate(names)
        ]
        approved = measured(
            lambda: run_clients(approvals, server.imds_port, args.clients),
            participants,
            saturated=("server",),
            drivers=("client",),
            attempts=1,
            check=args.check,
        )
        after = json.loads(http("GET", f"{server.base}/v1/events")[1])
        started = sum(1 for event in after if event["status"] == "Started")
        if started != args.vms:
            raise BenchError(f"{store}: {started} events Started after the approvals, not {args.vms}")
    finally:
        server.proc.stop()
        procs.remove(server.proc)
        if schema is not None:
            import psycopg

            with psycopg.connect(args.postgres, autocommit=True) as admin:
                admin.execute(f"DROP SCHEMA {schema} CASCADE")
    return {"schedules": scheduled, "approvals": approved}


def run(args: argparse.Namespace, procs: list, tmp: Path) -> int:
    rows = []
    for store in args.stores.split(","):
        attempt = [0]
        for _ in range(1 if args.check else 3):
            figures = one_store(args, store, tmp, procs, attempt)
            if all(phase.valid for phase in figures.values()):
                break
            say(f"# {store}: refused, " + "; ".join(p.note() for p in figures.values() if not p.valid))
        for phase, result in figures.items():
            usage = result.usage
            per_second = args.vms / result.value
            status = result.note() if not result.valid else ""
            if not status and phase == "approvals" and store == "sqlite" and not args.check:
                status = "met" if per_second >= GOAL_APPROVALS else "not met"
            rows.append(
                [
                    store,
                    phase,
                    f"{args.vms:,}",
                    f"{per_second:,.0f}",
                    f"{result.value / args.vms * 1e6 * args.clients / 1000:,.1f}",
                    f"{usage.cpu.get('server', 0.0) / args.vms * 1e6:,.0f}",
                    f"{usage.share('server'):.2f}",
                    f"{usage.cpu.get('client', 0.0) / args.vms * 1e6:,.0f}",
                    f"{usage.share('client'):.2f}",
                    f"{usage.cpu['postgres'] / args.vms * 1e6:,.0f}" if "postgres" in usage.cpu else "-",
                    status,
                ]
            )
    headers = ["store", "commands", "count", "per second", "mean latency ms", "server CPU µs each", "server CPU/wall"]
    headers += ["client CPU µs each", "client CPU/wall", "PostgreSQL backends' CPU µs each"]
    headers.append(f"≥ {GOAL_APPROVALS:,} approvals/s (SQLite)")
    say()
    say(markdown_table(headers, rows))
    say(
        f"\n{args.clients} requests in flight. Group commit (the commands that arrive while a transaction is under way "
        f"go in the next one; each answered once its transaction is durable). {machine_note()}"
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vms", type=int, default=4000, help="VMs: one schedule and one approval each (default 4,000)")
    parser.add_argument("--clients", type=int, default=32, help="requests in flight at once (default 32)")
    parser.add_argument("--stores", default="sqlite,postgresql", help="comma-separated: sqlite, postgresql")
    parser.add_argument("--postgres", default=POSTGRES, help=f"PostgreSQL database (default {POSTGRES})")
    parser.add_argument("--check", action="store_true", help="small and fast (20 VMs): fails on a broken setup only")
    parser.add_argument("--keep-tmp", action="store_true", help="keep the temporary directory (databases, logs)")
    args = parser.parse_args()
    if args.check:
        args.vms, args.clients = 20, 4
    if not 1 <= args.vms <= 60_000:
        parser.error("--vms must be 1..60000 (one loopback address each)")
    return guarded(run, args, "forewarn-bench-commands-")


if __name__ == "__main__":
    sys.exit(main())
