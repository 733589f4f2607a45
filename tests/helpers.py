"""Shared test helpers: small fleets, a store commit held until released, and a real server process on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import requests
import yaml

from forewarn.app.runtime import Maintenance
from forewarn.fleet.file import parse_fleet
from forewarn.scenarios.server import START_TRIES, PortTaken, free_ports, launch_serve
from forewarn.server.stores import open_fleet_store
from forewarn.store import SQLStore, StoreError

ROOT = Path(__file__).resolve().parent.parent


def open_store(url: str) -> SQLStore:
    """A store as the server opens it: with every component's records (the writers of their changes)."""
    return open_fleet_store(url)


def takes_ctrl_c() -> None:
    """``preexec_fn`` of a child a test sends Ctrl-C (SIGINT): it takes it as from a terminal. A test run started in
    the background (a shell's ``&``) ignores SIGINT, and its children inherit that: Python then never raises
    KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class HeldLoad:
    """A store's ``load``, held until ``loaded`` is set: it notes the threads that call it and sets ``loading``
    (the rebuild of an engine, caught while it reads the database)."""

    def __init__(self, store: SQLStore):
        self.real = store.load
        self.loading, self.loaded = threading.Event(), threading.Event()
        self.threads: list[str] = []
        store.load = self  # type: ignore[method-assign]

    def __call__(self):
        self.threads.append(threading.current_thread().name)
        self.loading.set()
        assert self.loaded.wait(10)
        return self.real()

    def ran_off_the_main_thread(self) -> bool:
        return bool(self.threads) and threading.main_thread().name not in self.threads


def child_processes(pid: int) -> list[int]:
    """The processes ``pid`` started that are still running (Linux's /proc)."""
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children += [int(child) for child in (task / "children").read_text().split()]
    return children


T0 = datetime(2026, 4, 20, 22, 11, 58, tzinfo=UTC)

SMALL_FLEET = """
default_vm: solo
hosts: [{name: host-01}, {name: host-02}, {name: host-03}]
vms:
  - {name: WestNO_0, host: host-01, availability_set: westno}
  - {name: WestNO_1, host: host-01, availability_set: westno}
  - {name: WestNO_2, host: host-02, availability_set: westno}
  - {name: solo, host: host-02}
  - {name: other-tenant, host: host-02, subscription: 22222222-2222-2222-2222-222222222222}
  - {name: spotty, host: host-03, spot: true}
scale_sets:
  - {name: myvmss, instances: 3, hosts: [host-03]}
"""


PORT_OPTIONS = {
    "--port": "port",
    "--imds-port": "imds_port",
    "--arm-port": "arm_port",
    "--ec2-port": "ec2_port",
    "--gce-port": "gce_port",
}


def raw_connection(url: str):
    """A plain connection to a store's database (SQLite path or PostgreSQL URL), each statement its own transaction:
    to write or read rows as an older release left them."""
    if url.startswith("postgresql://"):
        import psycopg

        return psycopg.connect(url, autocommit=True)
    import sqlite3

    return sqlite3.connect(url, isolation_level=None)


def small_fleet():
    return parse_fleet(SMALL_FLEET, "small.yaml")


def free_port() -> int:
    return free_ports(1)[0]


def machine_ports(fleet_text: str | None) -> set[int]:
    """The ports a fleet's machines name for their own metadata endpoints (``imds: {port: N}``; a scale set's
    instances count up from it): a server given the fleet must not draw one of them for its own listeners."""
    try:
        data = yaml.safe_load(fleet_text or "")
    except yaml.YAMLError:  # a test of a bad fleet: the server will refuse it whatever its ports
        return set()
    ports: set[int] = set()
    for section in data.values() if isinstance(data, dict) else ():
        for item in section if isinstance(section, list) else ():
            imds = item.get("imds") if isinstance(item, dict) else None
            if isinstance(imds, dict) and isinstance(imds.get("port"), int):
                instances = item.get("instances")
                ports.update(range(imds["port"], imds["port"] + (instances if isinstance(instances, int) else 1)))
    return ports


class HeldCommits:
    """The store's commit, held at its start until released (each call in turn), recording what each wrote and
    when it finished."""

    def __init__(self, service: Maintenance, fail_first: bool = False):
        self.service = service
        self.real = service.store.commit
        self.fail_first = fail_first
        self.entered = threading.Event()
        self.release = threading.Event()
        self.sizes: list[int] = []
        self.finished: list[bool] = []
        service.store.commit = self  # type: ignore[method-assign]

    def __call__(self, changes, *rest, **named):
        self.sizes.append(len(changes))
        first = len(self.sizes) == 1
        if first:
            self.entered.set()
            assert self.release.wait(10)
        try:
            if first and self.fail_first:
                raise StoreError("disk full")
            self.real(changes, *rest, **named)
        finally:
            self.finished.append(True)

    async def wait_entered(self) -> None:
        assert await asyncio.get_running_loop().run_in_executor(None, self.entered.wait, 10)


# Every Server started in this process, with the test that started it (nodeid from PYTEST_CURRENT_TEST).
STARTED: list[tuple[str, Server]] = []


def servers_of_the_test(nodeid: str, lines: int = 40) -> list[tuple[str, str]]:
    """(which server, the end of its log) of each Server started by the test ``nodeid`` or still running."""
    found = []
    for started_by, server in STARTED:
        running = server.process is not None and server.process.poll() is None
        if started_by == nodeid or running:
            try:
                tail = server.log_path.read_text(errors="replace").splitlines()[-lines:]
            except OSError as error:
                tail = [f"(no log: {error})"]
            pid = server.process.pid if server.process is not None else None
            found.append((f"pid {pid}, control port {server.port}, {server.log_path}", "\n".join(tail)))
    return found


class Server:
    """A real ``forewarn serve`` process on loopback ports."""

    def __init__(
        self,
        tmp_path: Path,
        fleet_text: str | None = SMALL_FLEET,
        db: str | None = None,
        clock: str = "manual",
        start: datetime = T0,
        extra: list[str] | None = None,
    ):
        self.tmp_path = tmp_path
        ports = free_ports(5, avoid=machine_ports(fleet_text))
        self.port, self.imds_port, self.arm_port, self.ec2_port, self.gce_port = ports
        self.db = db or str(tmp_path / "forewarn.db")
        self.args = [
            "--db",
            self.db,
            "--port",
            str(self.port),
            "--imds-port",
            str(self.imds_port),
            "--arm-port",
            str(self.arm_port),
            "--ec2-port",
            str(self.ec2_port),
            "--gce-port",
            str(self.gce_port),
            "--clock",
            clock,
            "--start",
            start.isoformat(),
            "--seed",
            "test",
        ] + (extra or [])
        if fleet_text is not None:
            fleet_file = tmp_path / "fleet.yaml"
            fleet_file.write_text(fleet_text)
            self.args += ["--fleet", str(fleet_file)]
        self.process: subprocess.Popen | None = None
        self.log_path = tmp_path / "server.log"

    @property
    def control(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def arm(self) -> str:
        return f"http://127.0.0.1:{self.arm_port}"

    @property
    def ec2(self) -> str:
        return f"http://127.0.0.1:{self.ec2_port}"

    @property
    def gce(self) -> str:
        return f"http://127.0.0.1:{self.gce_port}"

    @property
    def imds(self) -> str:
        return f"http://127.0.0.1:{self.imds_port}"

    def start(self) -> Server:
        if self.process is not None and self.process.poll() is None:
            # A second process would take new ports and leave this one running, unstopped, after the test.
            raise RuntimeError(f"the server (pid {self.process.pid}) is running: stop or kill it first")
        for attempt in range(1, START_TRIES + 1):
            try:
                self.process = launch_serve(self.args, self.log_path, self.control)
                STARTED[:] = [entry for entry in STARTED if entry[1] is not self]
                STARTED.append((os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0], self))
                return self
            except PortTaken:
                if attempt == START_TRIES:
                    raise
                self._new_ports()  # as a user would pick
        raise AssertionError("unreachable")  # the loop returns or raises

    def _new_ports(self) -> None:
        for (option, attribute), port in zip(PORT_OPTIONS.items(), free_ports(len(PORT_OPTIONS))):
            if option in self.args:
                setattr(self, attribute, port)
                self.args[self.args.index(option) + 1] = str(port)

    def kill(self) -> None:
        """kill -9: no shutdown, no flush."""
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def reset(self) -> Server:
        """Back to the state of a fresh server on the same fleet (``POST /v1/reset``), and no IMDS fault left: what a
        test sharing a module's server starts from."""
        self.post("/v1/reset", expect=200)
        deleted = requests.delete(f"{self.control}/v1/imds/faults", timeout=10)
        assert deleted.status_code in (200, 204), deleted.text
        return self

    # control API shortcuts
    def post(self, path: str, body: dict | None = None, expect: int | None = None):
        response = requests.post(f"{self.control}{path}", json=body or {}, timeout=10)
        if expect is not None:
            assert response.status_code == expect, response.text
        return response

    def get(self, path: str, **params):
        response = requests.get(f"{self.control}{path}", params=params, timeout=10)
        response.raise_for_status()
        return response.json()

    def schedule(self, **body) -> list[dict]:
        response = self.post("/v1/events", body)
        assert response.status_code == 201, response.text
        return response.json()

    def advance(self, by: str) -> dict:
        return self.post("/v1/clock/advance", {"by": by}, expect=200).json()

    def scheduled_events(self, base: str | None = None, version: str = "2020-07-01", **headers):
        return requests.get(
            f"{base or self.imds}/metadata/scheduledevents",
            params={"api-version": version},
            headers={"Metadata": "true", **headers},
            timeout=10,
        )


@contextlib.contextmanager
def fresh(server: Server) -> Iterator[Server]:
    """``with fresh(shared) as server:`` where a test had ``with Server(tmp_path) as server:``: the module's server,
    reset, and left running for the next test."""
    yield server.reset()


def forewarn(server, *args, check=True):
    """Run the forewarn CLI against a test server, as a user would."""
    run = subprocess.run(
        [sys.executable, "-m", "forewarn", "--server", server.control, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(ROOT / "src")},
    )
    if check:
        assert run.returncode == 0, run.stderr
    return run
