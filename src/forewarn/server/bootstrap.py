"""Assembling and running the server: one process, one event loop, every surface on its own listeners.

The control API listens on ``--host``/``--port`` (uvicorn). Azure IMDS listens on ``--imds-host``/``--imds-port``,
plus on each VM's own ``imds.port`` and on each VM's loopback ``imds.address`` (so that ``http://127.0.0.10:8169``
is WestNO_0's metadata endpoint), served by the lean HTTP/1.1 server of ``http1.py``.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import ipaddress
import json
import logging
import os
import signal
import socket
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import uvicorn

from forewarn.app.errors import Unavailable
from forewarn.app.outbox import OutboxSender
from forewarn.app.runtime import FleetMismatch, Maintenance
from forewarn.aws.component import Ec2Component
from forewarn.aws.ec2_api.app import create_ec2_app
from forewarn.aws.ec2_api.backend import Ec2Backend
from forewarn.aws.eventbridge.delivery import QueueDelivery
from forewarn.aws.health.events import HealthSettings, health_outbox
from forewarn.aws.imds.metadata import Ec2Imds, Ec2ImdsSettings
from forewarn.aws.model import Ec2Instance
from forewarn.azure.arm.access import AccessControl, AccessFileError, load_access
from forewarn.azure.arm.compute import ArmApi
from forewarn.azure.arm.router import ManagementApi, create_management_app
from forewarn.azure.component import AzureComponent
from forewarn.azure.eventgrid.config import EventGridFileError, load_event_grid_file, parse_event_grid
from forewarn.azure.eventgrid.settings import EventGridSettings
from forewarn.azure.eventgrid.topics import EventGrid
from forewarn.azure.imds.scheduled_events import PROFILES, AzureImds, ImdsSettings
from forewarn.azure.maintenance.acknowledge import MaintenanceApi
from forewarn.azure.model import EventType
from forewarn.azure.resource_graph.api import ResourceGraphApi, ResourceGraphSettings
from forewarn.azure.rules import AzureRules
from forewarn.cloud import MetadataSurface, registered
from forewarn.control.access import ControlGate, exposure
from forewarn.control.app import create_control_app
from forewarn.control.dashboard import LiveFeed, SurfaceViews
from forewarn.control.scenario_runs import ScenarioRuns
from forewarn.core.changes import Change, Rebuilt
from forewarn.core.errors import CoreError
from forewarn.core.times import parse_time
from forewarn.engine.rules import Rules
from forewarn.fleet.file import FleetFile, FleetFileError, read_fleet_file
from forewarn.fleet.model import VM, Fleet
from forewarn.gcp.component import GcpComponent
from forewarn.gcp.compute_api.app import create_compute_app
from forewarn.gcp.metadata.server import GceMetadata, etag_of
from forewarn.gcp.model import GceRules
from forewarn.net.browser_guard import BrowserGuard, HostNames, MetadataGuard, listens_beyond_loopback
from forewarn.net.callers import CallerResolver
from forewarn.net.callers import Machine as Caller
from forewarn.net.http import Request
from forewarn.net.own_listeners import OwnListeners
from forewarn.replication.shared import FleetDiffers
from forewarn.server.config import ServeConfig, ServeError, SettingError
from forewarn.server.http1 import Http1Server, Limits, listening_socket
from forewarn.server.stores import is_postgres, open_fleet_store, open_snapshot_store
from forewarn.server.uvicorn_guard import MANAGEMENT_LIMITS, ApiLimits, UvicornGuard
from forewarn.store import SQLStore, StoreError

if TYPE_CHECKING:
    from forewarn.replication.node import Node

log = logging.getLogger("forewarn.server")

PROBE_EVERY = 2.0  # seconds between two probes of the database (/healthz reports the latest outcome)


@dataclass
class Listeners:
    control: tuple[str, int]
    imds: tuple[str, int]
    arm: tuple[str, int] | None = None
    ec2_api: tuple[str, int] | None = None
    gce_api: tuple[str, int] | None = None
    vm_ports: dict[int, str] = field(default_factory=dict)
    vm_addresses: dict[str, str] = field(default_factory=dict)
    open_vm_ports: bool = True  # the fleet's per-VM imds.port listeners (serve --vm-ports/--no-vm-ports)
    hosts: str | None = None  # the metadata listeners serve the machines on these hosts only (a glob; serve --hosts)


class ListenError(OSError):
    """One of the server's own listeners could not be bound: which one (``role``: control, imds, arm, ec2_api, or
    vm_port with the ``machine`` whose fleet entry names the port) and where, so that the message can name the
    address and the setting that chose it."""

    def __init__(self, role: str, address: tuple[str, int], cause: OSError, machine: str | None = None):
        super().__init__(cause.errno, cause.strerror or str(cause))
        self.role = role
        self.address = address
        self.machine = machine


def _listen(role: str, address: tuple[str, int], machine: str | None = None) -> socket.socket:
    try:
        return listening_socket(*address)
    except (OSError, OverflowError) as error:  # OverflowError: a port outside 0-65535
        cause = error if isinstance(error, OSError) else OSError(None, str(error))
        raise ListenError(role, address, cause, machine) from None


class DeadlineTimer:
    """For real clocks: wakes when the next deadline falls due, or when a command changes the deadlines."""

    def __init__(self, service: Maintenance):
        self.service = service
        self._wake = asyncio.Event()
        self._armed: float | None = None  # the due time the timer sleeps towards
        service.subscribe(self._changed)

    def _changed(self, changes: list[Change]) -> None:
        # Most commits (every approval group) leave the next deadline where it was: no need to wake and re-arm.
        if isinstance(changes[0], Rebuilt) or self.service.due_wall != self._armed:
            self._wake.set()

    async def run(self) -> None:
        while True:
            self._armed = self.service.due_wall
            delay = min(max(self._armed - time.time(), 0.0), 3600.0)
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=delay)
                continue
            except TimeoutError:
                pass
            try:
                self.service.catch_up()
            except Unavailable as error:  # the database is out of reach: the deadlines are applied once it is back
                log.warning("applying due deadlines failed (%s); retrying in 1 s", error)
                await asyncio.sleep(1)
            except Exception:  # a store failure must not stop the timer; the service already rebuilt its engine
                log.exception("applying due deadlines failed; retrying in 1 s")
                await asyncio.sleep(1)


class MetadataRouter:
    """One metadata address for every cloud, as on a real VM: each registered cloud's surface claims its own paths
    (forewarn/cloud.py: Azure's /metadata, EC2's /latest, a dated version or /1.0, Compute Engine's
    /computeMetadata), and a path no cloud claims is answered by the first registered cloud's surface (Azure's 404).
    What a web page could send (and a rebound name) is refused first, by ``guard``, in the style of the surface the
    path names."""

    def __init__(self, surfaces: Sequence[MetadataSurface], guard: MetadataGuard):
        self.surfaces = tuple(surfaces)
        self.fallback = self.surfaces[0]
        self.guard = guard

    def handle(self, request: Request):
        path = request.path
        surface = self.fallback
        for candidate in self.surfaces:
            if candidate.claims(path):
                surface = candidate
                break
        refused = self.guard.check(request.headers)
        return surface.serve(request) if refused is None else surface.refuse(path, refused)


class Machine(Protocol):
    """What the listeners need of an Azure VM, an EC2 or a Compute Engine instance: where its own metadata endpoint
    answers."""

    @property
    def name(self) -> str: ...
    @property
    def imds_port(self) -> int | None: ...
    @property
    def imds_address(self) -> str | None: ...


def host_now(service: Maintenance) -> Callable[[Caller], str]:
    """The host a machine runs on now (a redeploy moves an Azure VM, a stop and start an EC2 instance)."""

    def host_of(machine: Caller) -> str:
        engine = service.engine
        state: Any
        if isinstance(machine, VM):
            state = engine.component(AzureComponent).vm_states.get(machine.name)
        elif isinstance(machine, Ec2Instance):
            state = engine.component(Ec2Component).ec2_states.get(machine.instance_id)
        else:
            state = engine.component(GcpComponent).gce_states.get(machine.name)
        return machine.host if state is None else state.host

    return host_of


def machines(service: Maintenance) -> list[Machine]:
    """Azure VMs, EC2 and Compute Engine instances alike."""
    fleet = service.engine.fleet
    return [*fleet.vms.values(), *fleet.ec2.values(), *fleet.gce.values()]


ASGIApp = Callable[..., Awaitable[None]]


@dataclass
class Built:
    management_app: ByPort  # the control, ARM and EC2 APIs, by the port a request arrived on
    management_sockets: list[socket.socket]
    imds: AzureImds
    imds_sockets: list[socket.socket]
    metadata: MetadataRouter
    live_feed: LiveFeed  # the dashboard's streams, ended when the server stops


class ByPort:
    """One ASGI app per listening port, for the surfaces uvicorn serves."""

    def __init__(self, apps: dict[int, ASGIApp]):
        self.apps = apps

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            return
        await self.apps[scope["server"][1]](scope, receive, send)


@dataclass(frozen=True)
class AzureManagementSettings:
    """The ARM port beyond Microsoft.Compute: who may call it, and the central scheduled-events surfaces."""

    access: AccessControl | None = None  # None: no token needed (azure_access.py)
    resource_graph: ResourceGraphSettings = ResourceGraphSettings()
    event_grid: EventGrid | None = None  # Microsoft.EventGrid system topics (azure/eventgrid/topics.py)


@dataclass(frozen=True)
class PortAccess:
    """Who the control, ARM and EC2 ports answer: the Host names beyond the default ones (net/browser_guard.py)
    and the control API's token (control/access.py)."""

    allowed_hosts: tuple[str, ...] = ()
    control_token: str | None = None


def build(
    service: Maintenance,
    listeners: Listeners,
    imds_settings: ImdsSettings = ImdsSettings(),
    ec2_settings: Ec2ImdsSettings = Ec2ImdsSettings(),
    ec2_credentials: dict[str, str] | None = None,
    azure: AzureManagementSettings = AzureManagementSettings(),
    access: PortAccess = PortAccess(),
) -> Built:
    """The surfaces and their bound sockets. A VM's own port (the fleet's ``imds.port``) that cannot be bound stops
    the start (:class:`ListenError`): skipped, its agent would read whichever server holds the port, another
    forewarn's documents. A VM's own loopback address that cannot be bound is skipped with a warning (the system may
    have no such address; nothing else answers there then)."""
    fleet = service.engine.fleet
    management_sockets = [_listen("control", listeners.control)]
    for role, extra in (("arm", listeners.arm), ("ec2_api", listeners.ec2_api), ("gce_api", listeners.gce_api)):
        if extra is not None:
            management_sockets.append(_listen(role, extra))
    imds_sockets = [_listen("imds", listeners.imds)]
    taken = {
        address[1]
        for address in (listeners.imds, listeners.control, listeners.arm, listeners.ec2_api, listeners.gce_api)
        if address
    }
    for machine in machines(service):
        name, port, address = machine.name, machine.imds_port, machine.imds_address
        if port is not None and port not in taken and listeners.open_vm_ports:
            try:
                imds_sockets.append(_listen("vm_port", (listeners.imds[0], port), name))
            except ListenError:
                for opened in [*management_sockets, *imds_sockets]:
                    opened.close()
                raise
            listeners.vm_ports[port] = name
        if address is not None and address != listeners.imds[0]:
            if ipaddress.ip_address(address).is_loopback and listeners.imds[0] not in ("0.0.0.0", "::"):
                try:
                    imds_sockets.append(listening_socket(address, listeners.imds[1]))
                    listeners.vm_addresses[address] = name
                except OSError as error:
                    log.warning("%s: cannot listen on %s (%s); skipped", name, address, error.strerror)
    resolver = CallerResolver(fleet, shared_ports={listeners.imds[1]})
    if listeners.hosts is not None:
        resolver.serve_hosts(listeners.hosts, host_now(service))
    settings: dict[str, object] = {"azure": imds_settings, "aws": ec2_settings}
    surfaces = {cloud.name: cloud.metadata_surface(service, resolver, settings) for cloud in registered()}
    imds = cast(AzureImds, surfaces["azure"])
    hosts = HostNames.for_server(listeners.control[0], access.allowed_hosts)
    json_guard = BrowserGuard(hosts, json_api=True)
    ec2_imds = cast(Ec2Imds, surfaces["aws"])
    ec2_backend = Ec2Backend(service)
    resource_graph = ResourceGraphApi(service, azure.resource_graph) if listeners.arm is not None else None
    gce_metadata = cast(GceMetadata, surfaces["gcp"])
    views = SurfaceViews(
        ec2_metadata=_metadata_answer(ec2_imds),
        ec2_status=lambda instance_id: ec2_backend.view(instance_id, service.now()).xml(),
        central_row=resource_graph.row_of if resource_graph is not None else None,
        gce_metadata=_gce_metadata_answer(gce_metadata),
    )
    ec2_url = _own_url(listeners.ec2_api) if listeners.ec2_api is not None else None
    runs = ScenarioRuns(service, _own_url(listeners.control), ec2_url, access.control_token)
    control_app = create_control_app(service, imds=imds, imds_listener=listeners.imds, views=views, scenario_runs=runs)
    apps: dict[int, ASGIApp] = {listeners.control[1]: ControlGate(control_app, json_guard, access.control_token)}
    if listeners.arm is not None and resource_graph is not None:
        arm = ManagementApi(ArmApi(service), azure.access, guard=json_guard)
        arm.add_provider("microsoft.maintenance", MaintenanceApi(service).handle)
        arm.add_provider("microsoft.resourcegraph", resource_graph.handle)
        if azure.event_grid is not None:
            azure.event_grid.register(arm)
        apps[listeners.arm[1]] = create_management_app(arm)
    if listeners.ec2_api is not None:
        apps[listeners.ec2_api[1]] = create_ec2_app(
            service, credentials=ec2_credentials, guard=BrowserGuard(hosts, json_api=False)
        )
    if listeners.gce_api is not None:
        apps[listeners.gce_api[1]] = create_compute_app(service, guard=json_guard)
    return Built(
        ByPort(apps),
        management_sockets,
        imds,
        imds_sockets,
        MetadataRouter(list(surfaces.values()), MetadataGuard.for_listener(listeners.imds[0], access.allowed_hosts)),
        control_app.state.live_feed,
    )


async def serve(
    service: Maintenance,
    listeners: Listeners,
    imds_settings: ImdsSettings,
    ec2_settings: Ec2ImdsSettings = Ec2ImdsSettings(),
    ec2_credentials: dict[str, str] | None = None,
    announce=print,
    azure: AzureManagementSettings = AzureManagementSettings(),
    metadata_limits: Limits = Limits(),
    management_limits: ApiLimits = MANAGEMENT_LIMITS,
    access: PortAccess = PortAccess(),
    node: Node | None = None,
    exit_with_parent: bool = False,
) -> None:
    """Run until SIGINT or SIGTERM: the control and ARM APIs on uvicorn, the metadata listeners on the lean HTTP/1.1
    server. ``node``: this process shares its database with others (replication/), as the leader or a replica.
    ``exit_with_parent``: also once the process that started this one has exited."""
    built = build(service, listeners, imds_settings, ec2_settings, ec2_credentials, azure, access)
    settle_heap()
    own = own_listeners(built, listeners)
    handler = built.metadata.handle if node is None else shared_surfaces(node, built, listeners, access)
    metadata = Http1Server(handler, metadata_limits)
    await metadata.start(built.imds_sockets)
    timer = asyncio.create_task(DeadlineTimer(service).run())
    event_grid = azure.event_grid
    background: list[asyncio.Task] = []  # the outbox, the seen-scopes reports, the parent watch

    def start_outbox() -> None:  # only a leader delivers: a replica starts it when it takes over
        policies = [event_grid.delivery] if event_grid is not None and event_grid.delivery is not None else []
        background.append(
            asyncio.create_task(OutboxSender(service, policies=[*policies, QueueDelivery(service)], own=own).run())
        )

    if node is None or node.service.role == "leader":
        start_outbox()
    if node is not None:
        node.on_promoted.append(start_outbox)
        if node.service.role == "leader":
            node.lead_now()
        node.start(asyncio.get_running_loop())
        from forewarn.replication.forward import SeenReporter

        background.append(asyncio.create_task(SeenReporter(node.service, node.leaders).run()))
    if event_grid is not None:
        event_grid.keep_away_from(
            own
        )  # handshakes of the --event-grid file's subscriptions (the ARM port serves validationUrl)
        event_grid.start_validating(f"http://{listeners.arm[0]}:{listeners.arm[1]}" if listeners.arm else None)
    if exit_with_parent:
        background.append(asyncio.create_task(_exit_with(os.getppid())))
    background.append(asyncio.create_task(_probe_database(service.store)))
    # uvicorn bounds neither header sizes, nor slow requests, nor connections
    guard = UvicornGuard(management_limits, ports=len(built.management_sockets))
    sweeper = asyncio.create_task(guard.run())
    config = uvicorn.Config(
        built.management_app,
        http=guard.protocol,
        lifespan="off",
        access_log=False,
        server_header=False,
        log_config=None,
        timeout_keep_alive=30,
        proxy_headers=False,
    )
    tune_collector()
    announce(describe(service, listeners) + ("" if node is None else f"\n  shared        {node.describe()}"))
    try:
        await _Uvicorn(config, built.live_feed).serve(sockets=built.management_sockets)
    finally:
        if node is not None:
            node.close()
        timer.cancel()
        for task in background:
            task.cancel()
        sweeper.cancel()
        await metadata.close()


async def _probe_database(store: SQLStore, every: float = PROBE_EVERY) -> None:
    """A round trip to the database every ``every`` seconds, off the event loop: /healthz reports its outcome when
    no commit has told more recently, and a connection lost while idle is replaced (a single server takes its
    writer lock again) before the next command needs it."""
    while True:
        await asyncio.sleep(every)
        try:
            await asyncio.to_thread(store.probe)
        except Exception:  # the probe records its outcome; a defect must not end it
            log.exception("probing the database failed")


async def _exit_with(parent: int, every: float = 0.5) -> None:
    """SIGTERM to this process once ``parent`` has exited: the kernel then hands this one to another parent (init or
    a subreaper), so the parent process id changes. The same shutdown as a user's SIGTERM."""
    while os.getppid() == parent:
        await asyncio.sleep(every)
    log.warning("the process that started this server (pid %d) has exited: stopping", parent)
    os.kill(os.getpid(), signal.SIGTERM)


def tune_collector() -> None:
    """Run the garbage collector's young collections every 10,000 allocations instead of 700.

    The metadata requests leave no reference cycles (a closed connection drops its parser; a group commit's callback
    names no group): what a young collection finds there is objects that live on (events, VM states), walked for
    nothing. 160 young collections during 6,000 approvals against 4 (bench/commands.py), about 5 µs of an
    approval's CPU; cyclic garbage (the control API makes some) waits a little longer. Full collections keep their
    own rule (a quarter more long-lived objects than at the last)."""
    gc.set_threshold(10_000, *gc.get_threshold()[1:])


def settle_heap() -> None:
    """Once the fleet and every surface are built. What start-up made (the fleet, its indexes, the engine) lives as
    long as the process: frozen (``gc.freeze``), the cyclic collector never walks it again, so a collection costs what
    the objects made since cost, not a million VMs. The memory the start-up freed (the fleet file's text and data)
    goes back to the system where the C library can give it back."""
    gc.freeze()
    gc.enable()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: its allocator keeps what it keeps
        pass


def _own_url(address: tuple[str, int]) -> str:
    """How the server's own clients (scenario runs) reach one of its ports: a wildcard address by loopback."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(address[0], address[0])
    return f"http://[{host}]:{address[1]}" if ":" in host else f"http://{host}:{address[1]}"


def _metadata_answer(ec2_imds: Ec2Imds) -> Callable[[str, str], tuple[int, bytes, str]]:
    def answer(instance_id: str, path: str) -> tuple[int, bytes, str]:
        status, body, content_type, _ = ec2_imds.answer(instance_id, path)
        return status, body, content_type.decode()

    return answer


def _gce_metadata_answer(gce: GceMetadata) -> Callable[[str, str], tuple[int, bytes, str, str | None]]:
    def answer(name: str, path: str) -> tuple[int, bytes, str, str | None]:
        status, body, content_type, headers = gce.read(name, path)
        tag = etag_of((status, body, content_type, headers))
        return status, body, content_type.decode(), None if tag is None else tag.decode()

    return answer


class _Uvicorn(uvicorn.Server):
    """uvicorn waits, when stopping, for every response to end: the dashboard's streams never would on their own."""

    def __init__(self, config: uvicorn.Config, live_feed: LiveFeed):
        super().__init__(config)
        self.live_feed = live_feed

    async def shutdown(self, sockets=None) -> None:
        self.live_feed.close()
        await super().shutdown(sockets)


def shared_surfaces(node: Node, built: Built, listeners: Listeners, access: PortAccess) -> Callable[[Request], Any]:
    """A shared process's surfaces: writes at a replica go to the leader (replication/forward.py), the control port
    answers the probes and metrics and takes a replica's forwarded metadata writes; and the addresses this process
    publishes when it leads. Returns the metadata handler."""
    from forewarn.replication.forward import LeaderEndpoint, ReplicaMetadata, ReplicaPort

    service, leaders, counts = node.service, node.leaders, node.counts.requests
    local = built.metadata.handle
    apps = built.management_app.apps
    control = listeners.control[1]
    apps[control] = LeaderEndpoint(
        ReplicaPort(apps[control], service, leaders, "control", counts),
        local,
        access.control_token,
        node.probe,
        leaders,
        service,
    )
    surfaces = (("arm", listeners.arm), ("ec2_api", listeners.ec2_api), ("gce_api", listeners.gce_api))
    for surface, address in surfaces:
        if address is not None:
            apps[address[1]] = ReplicaPort(apps[address[1]], service, leaders, surface, counts)
    host = node.advertise_host or listeners.control[0]
    imds_host = node.advertise_host or listeners.imds[0]
    node.addresses = {"control": f"http://{host}:{control}", "imds": f"http://{imds_host}:{listeners.imds[1]}"}
    for surface, address in surfaces:
        if address is not None:
            node.addresses[surface] = f"http://{host}:{address[1]}"
    return ReplicaMetadata(local, service, leaders, listeners.imds[1], counts, built.imds.resolver.serves).handle


def own_listeners(built: Built, listeners: Listeners) -> OwnListeners:
    """Every port this server listens on, named for the messages of refused outgoing requests."""
    roles = {port: f"the metadata endpoint of {name}" for port, name in listeners.vm_ports.items()}
    roles[listeners.imds[1]] = "the metadata endpoint"
    if listeners.ec2_api is not None:
        roles[listeners.ec2_api[1]] = "the EC2 API"
    if listeners.gce_api is not None:
        roles[listeners.gce_api[1]] = "the Compute Engine API"
    if listeners.arm is not None:
        roles[listeners.arm[1]] = "the ARM port"
    roles[listeners.control[1]] = "the control API"
    return OwnListeners.of([*built.management_sockets, *built.imds_sockets], roles)


def counted(number: int, noun: str, plural: str | None = None) -> str:
    """``1 host``, ``4 hosts``."""
    return f"{number:,} {noun if number == 1 else plural or noun + 's'}"


def describe(service: Maintenance, listeners: Listeners) -> str:
    """The banner ``serve`` prints: what is served, and where each surface and each machine's endpoint answers."""
    control = f"http://{listeners.control[0]}:{listeners.control[1]}"
    imds = f"http://{listeners.imds[0]}:{listeners.imds[1]}"
    fleet = service.engine.fleet
    clock = service.clock
    lines = [
        f"forewarn serving {counted(len(fleet.vms), 'Azure VM')} ({counted(len(fleet.scopes), 'scope')}), "
        f"{counted(len(fleet.ec2), 'EC2 instance')} and {counted(len(fleet.gce), 'Compute Engine instance')} on "
        f"{counted(len(fleet.hosts), 'host')}, store {service.store.description}, clock {clock.mode}"
        + (f" x{clock.speed:g}" if clock.mode == "real" and clock.speed != 1 else "")
        + f", simulated time {service.now().replace(microsecond=0).isoformat()}",
        f"  control API   {control}   (OpenAPI: {control}/openapi.json; CLI: export FOREWARN_SERVER={control})",
        f"  dashboard     {control}/   (the fleet, its events and a timeline, live; docs/dashboard.md)",
        *(
            [
                f"  Azure ARM     http://{listeners.arm[0]}:{listeners.arm[1]}   (management.azure.com paths: Compute, "
                "Resource Graph, Maintenance acknowledge, Event Grid; docs/azure-arm.md, docs/azure-central.md)"
            ]
            if listeners.arm
            else []
        ),
        f"  Azure IMDS    {imds}/metadata/scheduledevents"
        + (f"   (answers as {fleet.default_vm})" if fleet.default_vm else ""),
    ]
    if listeners.ec2_api:
        lines.append(
            f"  EC2 API       http://{listeners.ec2_api[0]}:{listeners.ec2_api[1]}   (boto3/aws CLI "
            "endpoint_url; docs/aws-api.md)"
        )
    if fleet.ec2:
        lines.append(f"  EC2 IMDS      {imds}/latest/meta-data/   (at each instance's own address or port)")
    if listeners.gce_api and fleet.gce:
        lines.append(
            f"  GCE API       http://{listeners.gce_api[0]}:{listeners.gce_api[1]}   (google-cloud-compute "
            "api_endpoint, anonymous credentials; docs/gcp.md)"
        )
    if fleet.gce:
        lines.append(
            f"  GCE metadata  {imds}/computeMetadata/v1/   (Metadata-Flavor: Google; at each instance's own address "
            "or port; docs/gcp.md)"
        )
    lines += own_endpoints(service, listeners)
    lines.append(f"  try: curl -s -H Metadata:true '{imds}/metadata/scheduledevents?api-version=2020-07-01'")
    return "\n".join(lines)


def own_endpoints(service: Maintenance, listeners: Listeners, shown: int = 20) -> list[str]:
    """Each machine's own metadata endpoint (its address or port), with its cloud: at most ``shown`` of them."""
    reachable = []
    for machine in machines(service):
        where = []
        if machine.imds_address in listeners.vm_addresses:
            where.append(f"http://{machine.imds_address}:{listeners.imds[1]}")
        if machine.imds_port in listeners.vm_ports:
            where.append(f"http://{listeners.imds[0]}:{machine.imds_port}")
        if where:
            kind = (
                "Azure VM"
                if isinstance(machine, VM)
                else "EC2 instance"
                if isinstance(machine, Ec2Instance)
                else "GCE instance"
            )
            reachable.append(f"    {machine.name:<20} {kind:<13} {'  or  '.join(where)}")
    if not reachable:
        return []
    lines = ["  each machine's own metadata endpoint (what its agent reads as 169.254.169.254):", *reachable[:shown]]
    if len(reachable) > shown:
        lines.append(f"    ... and {len(reachable) - shown} more (forewarn fleet lists them all)")
    return lines


# ------------------------------------------------------------------------------------- from a ServeConfig
def run_server(config: ServeConfig, announce: Callable[[str], object] = print) -> None:
    """Open the store, build the service and every surface, and serve until SIGINT or SIGTERM.

    Raises :class:`ServeError` (why it cannot start), :class:`SettingError` (a setting it cannot use, with the
    option that set it) or :class:`ListenError` (a listener that could not be bound)."""
    logging.basicConfig(level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    refusal, warnings = exposure(
        config.host,
        config.control_token,
        config.insecure,
        open_arm=bool(config.arm_port) and not config.access_file,
        open_ec2=bool(config.ec2_port) and not config.ec2_credentials,
    )
    if refusal is not None:
        raise ServeError(f"refusing to start: {refusal}")
    for warning in warnings:
        log.warning(warning)
    if config.gce_port and listens_beyond_loopback(config.host):
        log.warning(
            "the Compute Engine API port listens on %s and checks no credential: anyone who can reach it can start "
            "maintenance and change instances' scheduling (--gce-port 0 turns it off)",
            config.host,
        )
    imds_settings = imds_settings_of(config)
    # No cyclic collection while the fleet loads: a million-VM fleet is millions of objects, and the collector would
    # walk them over and over as they are made (it was most of the start-up time). serve() settles the heap once the
    # surfaces are built.
    gc.disable()
    service, azure, node = open_service(config)
    store = service.store
    try:
        try:
            metadata_limits = Limits().updated(config.imds_limits)
            management_limits = MANAGEMENT_LIMITS.updated(config.api_limits)
        except ValueError as error:
            raise SettingError(str(error), "--imds-limit/--api-limit") from None
        listeners = Listeners(
            control=(config.host, config.port),
            imds=(config.imds_host, config.imds_port),
            arm=(config.host, config.arm_port) if config.arm_port else None,
            ec2_api=(config.host, config.ec2_port) if config.ec2_port else None,
            open_vm_ports=config.vm_ports,
            gce_api=(config.host, config.gce_port) if config.gce_port else None,
            hosts=config.hosts,
        )
        ec2_settings = Ec2ImdsSettings(tokens=config.ec2_imds_tokens, while_down=imds_settings.while_down)
        try:
            event_loop_runner()(
                serve(
                    service,
                    listeners,
                    imds_settings,
                    ec2_settings,
                    config.ec2_credentials,
                    announce=announce,
                    azure=azure,
                    metadata_limits=metadata_limits,
                    management_limits=management_limits,
                    access=PortAccess(config.allowed_hosts, config.control_token),
                    node=node,
                    exit_with_parent=config.exit_with_parent,
                )
            )
        except ListenError:
            raise
        except OSError as error:
            raise ServeError(f"cannot listen: {error.strerror or error}") from None
        except KeyboardInterrupt:
            pass
    finally:
        store.close()


def imds_settings_of(config: ServeConfig) -> ImdsSettings:
    """The --imds-profile, with the single settings given over it."""
    overrides: dict[str, Any] = {
        "unknown_event_ids": config.unknown_event_ids,
        "rate_limit": config.rate_limit,
        "while_down": config.while_down,
        "first_call_delay": config.first_call_delay,
    }
    return replace(
        PROFILES[config.imds_profile], **{key: value for key, value in overrides.items() if value is not None}
    )


def rules_of(config: ServeConfig) -> Rules:
    enabling = config.imds_profile == "realistic" if config.require_enabling is None else config.require_enabling
    extra: dict[str, Any] = {"enabling_required": enabling}
    if config.disable_after is not None:
        extra["disable_after"] = timedelta(seconds=config.disable_after)
    if config.hardware_failure_type is not None:
        extra["hardware_failure_type"] = EventType(config.hardware_failure_type)
    rules = Rules()
    if config.gce_timings:
        rules = rules.with_part(replace(rules.of(GceRules), **config.gce_timings))
    return rules.with_part(rules.of(AzureRules).with_overrides(config.notice, config.impact_window, **extra))


def open_service(config: ServeConfig) -> tuple[Maintenance, AzureManagementSettings, Node | None]:
    """The store and the service on it, with the Event Grid and Resource Graph settings of the ARM port, and the
    process's part in a shared database (None: it serves alone). Any failure (fleet file, store, a fleet that
    differs from the stored one, access or Event Grid files) is a :class:`ServeError`; the store is closed again
    then."""
    rules = rules_of(config)
    store: SQLStore | None = None
    try:
        fleet_file = read_fleet_file(config.fleet_source) if config.fleet_source else None
        start_time = parse_time(config.start) if config.start else None
        store = open_configured_store(config)
        fleet, section, file_digest = given_fleet(fleet_file, store)
        fleet_file = None  # its text (86 MB at a million VMs) is not needed while the fleet is built
        declared = None
        if section is not None:
            if config.event_grid_file:
                raise ServeError("Event Grid is declared in the fleet file (event_grid:) and in --event-grid; keep one")
            declared = (f"{config.fleet_source}: event_grid", section)
        event_grid = event_grid_of(store, config, declared)
        azure = AzureManagementSettings(
            event_grid=event_grid,
            access=load_access(config.access_file) if config.access_file else None,
            resource_graph=ResourceGraphSettings(
                retention=config.resource_graph_retention,
                delay=config.resource_graph_delay,
                query_timeout=config.resource_graph_query_timeout,
                memory_limit=config.resource_graph_memory,
            ),
        )
        health = HealthSettings(targets=config.health_webhooks, entity=config.health_entity)
        outboxes = [health_outbox(health)] if health.targets else []
        outboxes.append(event_grid.outbox)
        node: Node | None = None
        if config.role == "single":
            service = Maintenance.open(
                store, fleet, config.clock_mode, config.speed, start_time, config.seed, rules, outboxes=outboxes
            )
        else:
            service, node = open_shared_service(config, store, fleet, start_time, rules, outboxes)
            if node.service.role != "leader":
                event_grid.declared = None  # the leader applies the file; a replica only reads what it stored
        event_grid.attach(service)
        if file_digest is not None and (node is None or node.service.role == "leader"):
            remember_fleet_file(store, file_digest, section)
    except (
        FleetFileError,
        StoreError,
        FleetMismatch,
        CoreError,
        AccessFileError,
        EventGridFileError,
        FleetDiffers,
    ) as error:
        if store is not None:
            store.close()
        raise ServeError(str(error)) from None
    except BaseException:
        if store is not None:
            store.close()
        raise
    return service, azure, node


def given_fleet(
    fleet_file: FleetFile | None, store: SQLStore
) -> tuple[Fleet | None, dict[str, Any] | None, str | None]:
    """The fleet --fleet gives, the file's event_grid section and the file's digest. The fleet is None when there is
    no --fleet, and when the file is the very one the database's fleet was read from (same digest): the stored fleet
    is served then, and the file is not parsed (20 s at a million VMs, to find the fleet the database holds)."""
    if fleet_file is None:
        return None, None, None
    digest = fleet_file.digest
    known = store.fleet_file()
    if known is not None and known.get("digest") == digest:
        log.info("fleet: %s is the file the database's fleet was read from; not parsed again", fleet_file.filename)
        return None, known.get("event_grid"), digest
    document = fleet_file.parse()
    return document.fleet, document.event_grid, digest


def remember_fleet_file(store: SQLStore, digest: str, section: dict[str, Any] | None) -> None:
    """Store the digest of a fleet file the database's fleet was found equal to (with its event_grid section, which
    a start that does not parse the file still applies), unless it is stored already."""
    record = {"digest": digest, "event_grid": section}
    try:
        if json.loads(json.dumps(record)) != record:
            return  # values JSON does not keep as they are (YAML dates, say): this file is parsed at every start
    except (TypeError, ValueError):
        return
    if store.fleet_file() != record:
        store.put_fleet_file(record)


def open_shared_service(
    config: ServeConfig, store: SQLStore, fleet: Any, start_time: Any, rules: Rules, outboxes: list
) -> tuple[Maintenance, Node]:
    from forewarn.replication.node import NodeSettings
    from forewarn.replication.shared import SharedService
    from forewarn.replication.start import open_shared

    def open_leader() -> SharedService:
        opened = SharedService.open(
            store, fleet, config.clock_mode, config.speed, start_time, config.seed, rules, outboxes=outboxes
        )
        assert isinstance(opened, SharedService)
        return opened

    settings = NodeSettings(config.role, config.failover_poll, config.catch_up_interval)
    service, node = open_shared(
        config.db,
        store,
        open_leader,
        lambda: open_snapshot_store(config.db),
        fleet,
        rules,
        outboxes,
        settings,
        config.control_token,
    )
    node.advertise_host = config.advertise_host
    return service, node


def open_configured_store(config: ServeConfig) -> SQLStore:
    """The store --db names, with every component's records; the one place the server opens it. A server that writes
    alone holds its database for its whole life (a SQLite file's lock, a PostgreSQL database's writer lock): a
    second writer on it is refused, instead of sharing it unawares. A shared process's leader holds the writer lock
    on its lease instead (replication/start.py)."""
    return open_fleet_store(config.db, exclusive=config.role == "single" or not is_postgres(config.db))


def event_grid_of(store: SQLStore, config: ServeConfig, section: tuple[str, Any] | None) -> EventGrid:
    """The Event Grid emulation: the settings and resources of the --event-grid file or of the fleet file's
    event_grid section (``(where, data)``), with the flags over its settings."""
    path = config.event_grid_file
    declared = load_event_grid_file(path) if path else parse_event_grid(section[1], section[0]) if section else None
    overrides: dict[str, Any] = {}
    if config.event_grid_dead_letters:
        overrides["dead_letter_dir"] = Path(config.event_grid_dead_letters)
    if config.event_grid_duplicates is not None:
        overrides["duplicate_rate"] = config.event_grid_duplicates
    if config.event_grid_no_retry is not None:
        overrides["non_retried_codes"] = config.event_grid_no_retry
    try:
        settings = replace(declared.settings if declared else EventGridSettings(), **overrides)
    except ValueError as error:
        raise EventGridFileError(f"Event Grid settings: {error}") from None
    if declared is None:  # no file: the stored topics and subscriptions stay as they are
        return EventGrid(store, settings)
    return EventGrid(store, declared=replace(declared, settings=settings))


def event_loop_runner() -> Callable[[Coroutine[Any, Any, None]], None]:
    """uvloop when installed (uvicorn[standard] brings it): the IMDS hot path is much faster on it."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run
    return uvloop.run
