"""Several ``forewarn serve`` processes on one PostgreSQL schema (docs/replicas.md), for the replication tests."""

from __future__ import annotations

import time
from pathlib import Path

import requests

from forewarn.app.runtime import Maintenance
from forewarn.engine.engine import Engine
from forewarn.fleet.file import load_fleet
from forewarn.replication.shared import SharedService
from forewarn.store import SQLStore
from helpers import T0, Server, open_store

# Each VM its own scope, reached at its own loopback address on whichever process's metadata port it dials.
SHARED_FLEET = """
hosts: [{name: host-01}, {name: host-02}, {name: host-03}]
vms:
""" + "".join(f"  - {{name: vm{i}, host: host-0{i % 3 + 1}, imds: {{address: 127.0.0.{40 + i}}}}}\n" for i in range(6))
VMS = [f"vm{i}" for i in range(6)]
FAST = ["--failover-poll", "0.2s", "--catch-up-interval", "0.5s"]


def shared_server(tmp_path: Path, name: str, url: str, role: str = "shared", extra: list[str] | None = None) -> Server:
    where = tmp_path / name
    where.mkdir(exist_ok=True)
    return Server(where, fleet_text=SHARED_FLEET, db=url, extra=["--role", role, *FAST, *(extra or [])])


def health(server: Server) -> dict:
    return requests.get(f"{server.control}/healthz", timeout=5).json()


def role(server: Server) -> str | None:
    try:
        return health(server)["role"]
    except (requests.RequestException, ValueError):
        return None


def vm_url(server: Server, vm: str) -> str:
    """vm's own metadata address, on this process's metadata port."""
    return f"http://127.0.0.{40 + int(vm[2:])}:{server.imds_port}/metadata/scheduledevents?api-version=2020-07-01"


def document(server: Server, vm: str) -> requests.Response:
    return requests.get(vm_url(server, vm), headers={"Metadata": "true"}, timeout=5)


def until(condition, timeout: float = 15.0, what: str = "condition"):
    """Poll ``condition()`` until it returns something truthy; fail after ``timeout`` seconds."""
    give_up = time.monotonic() + timeout
    while True:
        found = condition()
        if found:
            return found
        if time.monotonic() > give_up:
            raise AssertionError(f"{what}: not met within {timeout:g} s")
        time.sleep(0.05)


def converged(servers: list[Server], vms: list[str] = VMS) -> bool:
    """Every process answers every VM's document with the same bytes."""
    for vm in vms:
        bodies = set()
        for server in servers:
            try:
                answer = document(server, vm)
            except requests.RequestException:
                return False
            if answer.status_code != 200:
                return False
            bodies.add(answer.content)
        if len(bodies) != 1:
            return False
    return True


class FakeWall:
    """A wall clock that moves only when told (``value``)."""

    def __init__(self, start: float):
        self.value = start

    def __call__(self) -> float:
        return self.value


class Pair:
    """A leader's service and a replica's, in process, on one PostgreSQL schema (the demo fleet), with a reader of
    what the leader commits."""

    def __init__(self, url: str, clock: str = "manual", wall: FakeWall | None = None):
        self.url = url
        self.fleet = load_fleet("demo")
        self.wall = wall or FakeWall(1_000_000.0)
        writer = open_store(url)
        writer.keeps_changes = True
        self.leader = Maintenance.open(writer, self.fleet, clock, 1.0, T0, "seed", wall=self.wall)
        self.reader: SQLStore = open_store(url)
        state = self.reader.load()
        assert state is not None
        self.replica = SharedService.replica_of(open_store(url), state, None, self.fleet)
        self.replica.wall = self.wall
        self.position = state.position

    def fresh(self) -> Engine:
        """The engine a fresh load of the database builds."""
        state = self.reader.load()
        assert state is not None
        return SharedService.replica_of(self.reader, state, None, self.fleet).settled_engine()

    def close(self) -> None:
        for store in (self.leader.store, self.reader, self.replica.store):
            store.close()
