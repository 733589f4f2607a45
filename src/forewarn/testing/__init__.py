"""forewarn for tests: a real ``forewarn serve`` on free loopback ports, and one object to drive it.

Use :class:`Forewarn` as a context manager anywhere (unittest, scripts, notebooks), or the pytest fixture
``forewarn`` (``forewarn.testing.plugin``, loaded by pytest through the ``pytest11`` entry point), which shares one
server per fleet and resets it before each test. docs/testing.md walks through both.

This package is a client of the server, like the scenario runner: it speaks the control API through the project's
one client (``net/control_client.py``) and starts servers with ``scenarios.server.launch_serve``; it never imports
the engine. It imports nothing of pytest, so that code without pytest can use it.
"""

from __future__ import annotations

import atexit
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from forewarn.fleet.file import DEMO_FLEET, FleetFileError, parse_fleet
from forewarn.net.control_client import BadJson, ControlClient, Refused, Unreachable
from forewarn.scenarios.server import (
    START_TRIES,
    ForkedServe,
    PortTaken,
    ServerError,
    free_ports,
    launch_serve,
    preload_servers,
)

if TYPE_CHECKING:  # the sandbox loads on first use: most tests never need it
    from forewarn.sandbox import Sandbox

__all__ = ["DEFAULT_SEED", "Forewarn", "ForewarnError", "SandboxUnavailable", "fleet_text", "preload_servers"]

DEFAULT_SEED = "forewarn-testing"
SCHEDULED_EVENTS_VERSION = "2020-07-01"

FleetSource = str | Path | Mapping[str, Any]


class ForewarnError(Exception):
    """forewarn refused a request (``status``, ``code`` such as Invalid, NotFound or Conflict, and ``message``), or
    could not be reached (``status`` 0), or did not start."""

    def __init__(self, message: str, status: int = 0, code: str | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


class SandboxUnavailable(ForewarnError):
    """The VM sandbox (``forewarn.sandbox``) is not part of this installation."""


def fleet_text(fleet: FleetSource) -> str:
    """The fleet's YAML text, from ``demo``, a file's path, YAML text, or a dict (the fleet file's structure)."""
    if isinstance(fleet, Mapping):
        return yaml.safe_dump(dict(fleet), sort_keys=False)
    if isinstance(fleet, Path):
        return fleet.read_text()
    if fleet == DEMO_FLEET:
        return resources.files("forewarn.data").joinpath("demo-fleet.yaml").read_text()
    try:
        parsed = yaml.safe_load(fleet)
    except yaml.YAMLError:
        parsed = None
    if isinstance(parsed, dict):  # YAML text; a bare word or path parses as a string
        return fleet
    path = Path(fleet)
    if not path.is_file():
        raise ForewarnError(f"fleet {fleet!r}: not a file, nor 'demo', nor YAML text describing a fleet")
    return path.read_text()


def _free_port_run(count: int, avoid: set[int]) -> int:
    """The first of ``count`` consecutive free loopback ports none of which is in ``avoid`` (a scale set's instances
    count up from one port). ``avoid`` holds the ports already given to the server and to other machines: they are
    free until the server binds them, so a draw could return them again."""
    for _ in range(50):
        first = free_ports(1, avoid)[0]
        run = range(first, first + count)
        if first + count > 65536 or avoid.intersection(run):
            continue
        sockets = []
        try:
            for port in run:
                sock = socket.socket()
                sockets.append(sock)
                sock.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise ForewarnError(f"found no {count} consecutive free ports for a scale set's metadata endpoints")


def _with_free_vm_ports(text: str, server_ports: Sequence[int]) -> str:
    """The fleet with every per-VM metadata port (``imds.port``) moved to a free one, none of ``server_ports`` nor
    another machine's: a fleet file's fixed ports would clash with another server (a second test process, ``make
    run``). Unchanged when it names no port, so that the server's errors keep the lines of the text as written."""
    data = yaml.safe_load(text)
    given = set(server_ports)
    for section in ("vms", "ec2_instances", "scale_sets"):
        for item in data.get(section) or ():
            imds = item.get("imds") if isinstance(item, dict) else None
            if isinstance(imds, dict) and imds.get("port") is not None:
                count = max(int(item.get("instances", 1)), 1) if section == "scale_sets" else 1
                imds["port"] = _free_port_run(count, given)
                given.update(range(imds["port"], imds["port"] + count))
    return yaml.safe_dump(data, sort_keys=False) if given != set(server_ports) else text


# Servers run in sessions of their own (launch_serve), so a Ctrl-C or the end of the test process does not reach
# them: those not stopped by their owner (a script without `with`) are stopped when the interpreter exits.
_RUNNING: set[Forewarn] = set()
# Numbers the sandboxes this process makes: with the pid, a namespace tag no other server's sandbox has at once
# (id() modulo anything could repeat between two live objects).
_SANDBOXES = itertools.count(1)


@atexit.register
def _stop_forgotten_servers() -> None:
    for server in list(_RUNNING):
        server.stop()


class Forewarn:
    """A forewarn server for a test: started on free loopback ports with an in-memory database, the manual clock
    (by default) and a fixed seed (the same commands give the same EventIds), and the calls a test makes.

    ``fleet``: ``"demo"``, a fleet file's path, YAML text, or a dict. ``clock``: ``manual`` or ``real``.
    ``start``: the simulated start time (ISO 8601; default: the wall time at start). ``args``: more options of
    ``forewarn serve`` (e.g. ``["--imds-profile", "realistic"]``). Per-VM metadata ports of the fleet are moved to
    free ports; :meth:`metadata_url` says where each VM's endpoint is.
    """

    def __init__(
        self,
        fleet: FleetSource = DEMO_FLEET,
        *,
        clock: str = "manual",
        start: str | None = None,
        seed: str = DEFAULT_SEED,
        args: Sequence[str] = (),
        startup_timeout: float = 30.0,
    ):
        self.fleet_yaml = fleet_text(fleet)  # as given; start() moves its per-VM ports to free ones
        try:
            self.fleet = parse_fleet(self.fleet_yaml, "fleet")  # its errors now, with their lines, not in a log
        except FleetFileError as error:
            raise ForewarnError(str(error)) from None
        self._given_fleet = self.fleet_yaml
        self.clock_mode = clock
        self.start_time = start
        self.seed = seed
        self.extra_args = list(args)
        self.startup_timeout = startup_timeout
        self.port = self.imds_port = self.arm_port = self.ec2_port = self.gce_port = 0
        self.startup_seconds: float | None = None  # how long start() took, for those who measure
        self._process: subprocess.Popen | ForkedServe | None = None
        self._workdir: Path | None = None
        self._client: ControlClient | None = None
        self._sandbox: Sandbox | None = None

    # ------------------------------------------------------------------------------------------ life cycle
    def start(self) -> Forewarn:
        began = time.perf_counter()
        self._workdir = Path(tempfile.mkdtemp(prefix="forewarn-testing-"))
        fleet_file = self._workdir / "fleet.yaml"
        for attempt in range(1, START_TRIES + 1):
            # Every port chosen again on each try: the one taken meanwhile may be any of them.
            ports = free_ports(5)
            self.port, self.imds_port, self.arm_port, self.ec2_port, self.gce_port = ports
            self.fleet_yaml = _with_free_vm_ports(self._given_fleet, ports)
            if self.fleet_yaml is not self._given_fleet:
                self.fleet = parse_fleet(self.fleet_yaml, "fleet")
            fleet_file.write_text(self.fleet_yaml)
            try:
                self._process = launch_serve(
                    self._serve_args(fleet_file), self._workdir / "server.log", self.control_url, self.startup_timeout
                )
                break
            except ServerError as error:
                if isinstance(error, PortTaken) and attempt < START_TRIES:
                    continue
                self.stop()
                raise ForewarnError(f"forewarn did not start: {error}") from None
            except BaseException:
                self.stop()
                raise
        self._client = ControlClient(self.control_url, timeout=30.0)
        self.startup_seconds = time.perf_counter() - began
        _RUNNING.add(self)
        return self

    def _serve_args(self, fleet_file: Path) -> list[str]:
        args = ["--fleet", str(fleet_file), "--db", ":memory:", "--host", "127.0.0.1", "--imds-host", "127.0.0.1"]
        args += ["--port", str(self.port), "--imds-port", str(self.imds_port)]
        args += ["--arm-port", str(self.arm_port), "--ec2-port", str(self.ec2_port), "--gce-port", str(self.gce_port)]
        args += ["--clock", self.clock_mode, "--seed", self.seed, "--log-level", "warning"]
        if self.start_time is not None:
            args += ["--start", self.start_time]
        return args + self.extra_args

    def stop(self) -> None:
        _RUNNING.discard(self)
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:  # a server that does not stop on SIGTERM is killed
                self._process.kill()
                self._process.wait(10)
        self._process = None
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def __enter__(self) -> Forewarn:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def reset(self) -> Forewarn:
        """Back to the state of a fresh server on the same fleet: ``POST /v1/reset`` (the clock at its start, no
        events, waves, deliveries or journal, every DocumentIncarnation 1; tests/app/test_reset.py proves it
        complete) and no IMDS fault nor queue-path fault left."""
        self.call("POST", "/v1/reset")
        self.call("DELETE", "/v1/imds/faults")
        self.call("DELETE", "/v1/ec2/faults")
        return self

    @property
    def log(self) -> str:
        """The server's log so far (warnings and errors; it runs with --log-level warning)."""
        if self._workdir is None or not (self._workdir / "server.log").exists():
            return ""
        return (self._workdir / "server.log").read_text(errors="replace")

    # ------------------------------------------------------------------------------------------------ where
    @property
    def control_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def imds_url(self) -> str:
        """The shared metadata listener: it answers as the fleet's ``default_vm``."""
        return f"http://127.0.0.1:{self.imds_port}"

    @property
    def arm_url(self) -> str:
        """Azure Resource Manager's paths (management.azure.com), for the Azure SDKs' ``base_url``."""
        return f"http://127.0.0.1:{self.arm_port}"

    @property
    def ec2_url(self) -> str:
        """The EC2 Query API, for boto3's ``endpoint_url`` (any credentials are accepted)."""
        return f"http://127.0.0.1:{self.ec2_port}"

    @property
    def gce_url(self) -> str:
        """The Compute Engine API, for google-cloud-compute's ``client_options.api_endpoint`` (no credential is
        checked)."""
        return f"http://127.0.0.1:{self.gce_port}"

    def metadata_url(self, name: str) -> str:
        """The base URL of VM or EC2 instance ``name``'s own metadata endpoint (Azure VM name, or instance id or
        Name tag, Compute Engine instance name): what its agent would reach at http://169.254.169.254."""
        machine = self.fleet.machine_called(name)
        if machine is None:
            known = sorted(self.fleet.names())
            raise ForewarnError(f"no VM or instance {name!r} in the fleet; it has {', '.join(known)}")
        if machine.imds_port is not None:
            return f"http://127.0.0.1:{machine.imds_port}"
        if machine.imds_address is not None:
            return f"http://{machine.imds_address}:{self.imds_port}"
        if self.fleet.default_vm in (name, machine.fleet_name):
            return self.imds_url
        raise ForewarnError(
            f"{name} has no metadata endpoint of its own: give it imds: {{address: 127.0.0.N}} in the fleet, or make "
            "it the fleet's default_vm"
        )

    @property
    def metadata_urls(self) -> dict[str, str]:
        """Every VM's and instance's own metadata endpoint, by name (instances by id)."""
        urls = {}
        for name in self.fleet.names():
            try:
                urls[name] = self.metadata_url(name)
            except ForewarnError:
                continue
        return urls

    # ---------------------------------------------------------------------------------------- control API
    @property
    def client(self) -> ControlClient:
        """The control-API client (``net/control_client.py``), for the calls this object has no method for."""
        if self._client is None:
            raise ForewarnError("forewarn is not running: start() it, or use it in a with block")
        return self._client

    def call(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
        """One control-API request (``/v1/...``, docs/control.md); its JSON answer. Raises :class:`ForewarnError`
        with the API's error code and message when refused."""
        try:
            return self.client.request(method, path, params=params or None, json_body=body)
        except Refused as error:
            raise ForewarnError(str(error), error.status, error.code) from None
        except Unreachable as error:
            raise ForewarnError(f"{error} (did the server stop? its log: {self.log[-500:]!r})") from None
        except BadJson as error:
            raise ForewarnError(str(error), error.status) from None

    # Azure
    def schedule(self, type: str, vms: str | Sequence[str] = (), **fields: Any) -> list[dict]:
        """Schedule Azure maintenance: ``type`` Freeze, Reboot, Redeploy, Preempt or Terminate, on ``vms`` (a name
        or names); ``fields`` as ``POST /v1/events`` takes them: ``notice="5m"``, ``not_before``, ``hosts``,
        ``source="User"``, ``duration_seconds``, ``description``, ``impact_window``... The created events (one per
        scope)."""
        names = [vms] if isinstance(vms, str) else list(vms)
        result: list[dict] = self.call("POST", "/v1/events", {"type": type, "vms": names, **fields})
        return result

    def approve(self, *event_ids: str, by: str | None = None) -> list[dict]:
        """Approve events as the control API (or as VM ``by``), as a VM's POST to its IMDS would."""
        body: dict[str, Any] = {"event_ids": list(event_ids)}
        if by is not None:
            body["by"] = by
        result: list[dict] = self.call("POST", "/v1/approvals", body)
        return result

    def cancel(self, event_id: str) -> dict:
        result: dict = self.call("POST", f"/v1/events/{event_id}/cancel")
        return result

    def events(self, all: bool = False) -> list[dict]:
        """Azure events: the live ones, or ``all`` (Completed and Canceled too)."""
        result: list[dict] = self.call("GET", "/v1/events", all=str(all).lower())
        return result

    def event(self, event_id: str) -> dict:
        result: dict = self.call("GET", f"/v1/events/{event_id}")
        return result

    def document(self, vm: str, api_version: str = SCHEDULED_EVENTS_VERSION) -> dict:
        """The scheduled-events document VM ``vm``'s IMDS serves now (same bytes, parsed)."""
        result: dict = self.call("GET", f"/v1/vms/{vm}/scheduledevents", **{"api-version": api_version})
        return result

    # EC2
    def schedule_ec2(self, code: str, instances: str | Sequence[str], **fields: Any) -> list[dict]:
        """Schedule an EC2 event: ``code`` instance-reboot, system-reboot, system-maintenance, instance-retirement
        or instance-stop, on ``instances`` (ids); ``fields`` as ``POST /v1/ec2/events`` takes them: ``notice``,
        ``not_before``, ``window``, ``deadline``..."""
        ids = [instances] if isinstance(instances, str) else list(instances)
        result: list[dict] = self.call("POST", "/v1/ec2/events", {"code": code, "instances": ids, **fields})
        return result

    def cancel_ec2(self, event_id: str) -> dict:
        result: dict = self.call("POST", f"/v1/ec2/events/{event_id}/cancel")
        return result

    def ec2_events(self, all: bool = False) -> list[dict]:
        result: list[dict] = self.call("GET", "/v1/ec2/events", all=str(all).lower())
        return result

    def ec2_document(self, instance: str, path: str = "events/maintenance/scheduled") -> Any:
        """What instance ``instance``'s metadata serves at ``/latest/meta-data/PATH`` (IMDSv1), parsed as JSON
        when it is JSON."""
        response = self.client.send("GET", f"{self.metadata_url(instance)}/latest/meta-data/{path}")
        if response.status != 200:
            raise ForewarnError(f"{instance}: /latest/meta-data/{path} answered {response.status}", response.status)
        try:
            return response.json()
        except ValueError:
            return response.text

    # The AWS queue path (docs/aws-queues.md)
    def queue_messages(self, queue: str) -> list[dict]:
        """Every message queue ``queue`` holds now, oldest first (``body``, ``receive_count``, ``in_flight``, ...),
        read without receiving any: what a test checks after its handler ran."""
        shown: dict = self.call("GET", f"/v1/ec2/queues/{queue}")
        return list(shown["messages"])

    def throttle(self, service: str, *actions: str, rate: float = 0.0, burst: int = 0) -> dict:
        """Throttle ``service``'s ``actions`` (ec2, sqs, events, autoscaling; every action when none is named):
        ``burst`` requests at once, then ``rate`` a second; the others get the service's throttling error."""
        body = {"service": service, "actions": list(actions), "rate": rate, "burst": burst}
        result: dict = self.call("POST", "/v1/ec2/faults/throttles", body)
        return result

    def delivery_faults(self, duplicate: float = 0.0, delayed: float = 0.0, delay: str | None = None) -> dict:
        """Send a fraction of the deliveries to queues twice (``duplicate``), or hold a fraction back by ``delay``
        of the simulated clock (``delayed``); replaces the previous setting."""
        body = {"duplicate": duplicate, "delayed": delayed, "delay": delay}
        result: dict = self.call("PUT", "/v1/ec2/faults/deliveries", body)
        return result

    # Compute Engine
    def maintain_gce(self, instances: str | Sequence[str], **fields: Any) -> list[dict]:
        """Schedule Compute Engine host maintenance on ``instances`` (names), one event each; ``fields`` as ``POST
        /v1/gce/maintenance`` takes them: ``kind`` (migrate, terminate), ``notice``, ``start``, ``window``,
        ``can_reschedule``, ``latest``, ``type``."""
        names = [instances] if isinstance(instances, str) else list(instances)
        result: list[dict] = self.call("POST", "/v1/gce/maintenance", {"instances": names, **fields})
        return result

    def cancel_gce(self, event_id: str) -> dict:
        result: dict = self.call("POST", f"/v1/gce/maintenance/{event_id}/cancel")
        return result

    def gce_maintenance(self, all: bool = False) -> list[dict]:
        """Compute Engine maintenance events: the live ones, or ``all`` (completed and canceled too)."""
        result: list[dict] = self.call("GET", "/v1/gce/maintenance", all=str(all).lower())
        return result

    def simulate_gce_maintenance(self, instance: str) -> dict:
        """What ``instances.simulateMaintenanceEvent`` does: the instance's own maintenance behaviour after its
        notice (60 seconds; an hour for an instance with GPUs). The outcome, with its ``events``."""
        result: dict = self.call("POST", f"/v1/gce/instances/{instance}/simulate-maintenance")
        return result

    def gce_instance(self, instance: str) -> dict:
        """A Compute Engine instance as the control API shows it (``status``, ``host``, ``maintenance_event``,
        ``upcoming``...), read without counting as the instance reading its metadata."""
        result: dict = self.call("GET", f"/v1/gce/instances/{instance}")
        return result

    def gce_maintenance_event(self, instance: str) -> str:
        """What the instance's metadata server serves at ``instance/maintenance-event`` now (NONE,
        MIGRATE_ON_HOST_MAINTENANCE, TERMINATE_ON_HOST_MAINTENANCE), read as the instance's agent reads it: a read
        that Compute Engine counts as watching, so the instance gets its notice of later maintenance."""
        response = self.client.send(
            "GET",
            f"{self.metadata_url(instance)}/computeMetadata/v1/instance/maintenance-event",
            headers={"Metadata-Flavor": "Google"},
        )
        if response.status != 200:
            raise ForewarnError(f"{instance}: maintenance-event answered {response.status}", response.status)
        return response.text

    # The clock
    @property
    def now(self) -> str:
        """The simulated time (ISO 8601, UTC)."""
        return str(self.clock()["now"])

    def clock(self) -> dict:
        """``{"mode", "speed", "now", "next_deadline"}``."""
        result: dict = self.call("GET", "/v1/clock")
        return result

    def advance(self, by: str) -> dict:
        """Move the simulated clock by a duration (``30s``, ``15m``, ``PT1H``), firing every deadline on the way."""
        result: dict = self.call("POST", "/v1/clock/advance", {"by": by})
        return result

    def step(self) -> dict:
        """Move the clock to the next deadline (an event starts, completes, leaves its document...)."""
        result: dict = self.call("POST", "/v1/clock/next")
        return result

    def set_clock(self, to: str) -> dict:
        result: dict = self.call("POST", "/v1/clock/set", {"to": to})
        return result

    # Scenarios
    def run_scenario(self, scenario: str | Path, timing: str = "fast") -> dict:
        """Run a scenario (a shipped one's name, or a file) on this server, as ``forewarn scenario run NAME
        --server URL``; its timeline (``timeline["passed"]``, ``["expectations"]``, ``["events"]``...). The
        server's fleet must have the scenario's VMs: start this object with the scenario's fleet
        (:meth:`for_scenario`)."""
        from forewarn.scenarios.runner import RunOptions, run_scenario
        from forewarn.scenarios.spec import ScenarioError, load_scenario

        try:
            resolved = load_scenario(scenario).resolve(timing)
        except ScenarioError as error:
            raise ForewarnError(str(error)) from None
        mode = "manual" if self.clock_mode == "manual" else "auto"
        return run_scenario(resolved, server=self.control_url, ec2_url=self.ec2_url, options=RunOptions(mode=mode))

    @classmethod
    def for_scenario(cls, scenario: str | Path, timing: str = "fast", **options: Any) -> Forewarn:
        """A server on the fleet of a scenario (and its start time), ready for :meth:`run_scenario`."""
        from forewarn.scenarios.spec import ScenarioError, load_scenario

        try:
            resolved = load_scenario(scenario).resolve(timing)
        except ScenarioError as error:
            raise ForewarnError(str(error)) from None
        if resolved.start is not None:
            options.setdefault("start", resolved.start.isoformat().replace("+00:00", "Z"))
        options.setdefault("args", resolved.server_args())
        return cls(resolved.fleet_text, **options)

    # The VM sandbox
    def sandbox(self) -> Sandbox:
        """The VM sandbox of this server: ``fw.sandbox().up("WestNO_0").run(["python3", "agent.py"])`` runs a program
        as that VM, with http://169.254.169.254 as its metadata endpoint and nothing else in reach (docs/sandbox.md).
        One per Forewarn, made on first use and removed when the server stops; its namespaces carry a tag of their
        own, so several servers (pytest-xdist workers) can hold the same VM names at once. Needs root and iproute2:
        :class:`SandboxUnavailable` says what is missing."""
        if self._sandbox is None:
            from forewarn import sandbox

            try:
                self._sandbox = sandbox.Sandbox(self.control_url, tag=f"t{os.getpid()}x{next(_SANDBOXES)}")
            except sandbox.SandboxUnavailable as error:
                raise SandboxUnavailable(str(error)) from None
        return self._sandbox
