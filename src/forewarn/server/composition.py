"""The composition root: a :class:`ServeConfig` in, a running server out. One process, one event loop, every surface
on its own listeners: the control API and each registered cloud's APIs on uvicorn, every cloud's metadata surface on
the lean HTTP/1.1 server of ``http1.py`` (server/listeners.py says where).

Each cloud takes part through ``Cloud.serving`` (forewarn/cloud.py): its APIs, outboxes, settings and banner lines.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import uvicorn

from forewarn.app.outbox import OutboxSender
from forewarn.app.runtime import Maintenance
from forewarn.cloud import CloudSetupError, Listening, MetadataSurface
from forewarn.control.access import ControlGate, exposure
from forewarn.control.app import build_routes, create_control_app
from forewarn.control.dashboard import LiveFeed, SurfaceViews
from forewarn.control.scenario_runs import ScenarioRuns
from forewarn.net.browser_guard import BrowserGuard, HostNames, MetadataGuard, listens_beyond_loopback
from forewarn.net.callers import CallerResolver
from forewarn.net.callers import Machine as Caller
from forewarn.net.http import Request
from forewarn.net.own_listeners import own_url
from forewarn.server.banner import describe
from forewarn.server.config import ServeConfig, ServeError, SettingError
from forewarn.server.http1 import Http1Server, Limits
from forewarn.server.listeners import (
    ASGIApp,
    Bound,
    ByPort,
    ListenError,
    Listeners,
    bind_machines,
    bind_own,
    own_listeners,
)
from forewarn.server.loop_holds import loop_holds_file, loop_stacks_file, note_stacks_while_late, record_loop_holds
from forewarn.server.metadata_router import MetadataRouter
from forewarn.server.opening import Served, open_service, rules_of, served_clouds
from forewarn.server.shared import shared_surfaces
from forewarn.server.timer import DeadlineTimer
from forewarn.server.tuning import (
    collector_paused,
    event_loop_runner,
    exit_with,
    freeze_after_bulk,
    import_first_request_modules,
    probe_database,
    settle_heap,
    tune_collector,
    tune_thread_switching,
)
from forewarn.server.uvicorn_guard import MANAGEMENT_LIMITS, ApiLimits, UvicornGuard

if TYPE_CHECKING:
    from forewarn.replication.node import Node

log = logging.getLogger("forewarn.server")

__all__ = ["ListenError", "open_service", "run_server", "serve"]


@dataclass(frozen=True)
class PortAccess:
    """Who the control and the clouds' API ports answer: the Host names beyond the default ones
    (net/browser_guard.py) and the control API's token (control/access.py)."""

    allowed_hosts: tuple[str, ...] = ()
    control_token: str | None = None


@dataclass
class Built:
    management_app: ByPort  # the control API and each cloud's APIs, by the port a request arrived on
    bound: Bound
    resolver: CallerResolver
    metadata: MetadataRouter
    live_feed: LiveFeed  # the dashboard's streams, ended when the server stops


# ------------------------------------------------------------------------------------- from a ServeConfig
def run_server(config: ServeConfig, announce: Callable[[str], object] = print) -> None:
    """Open the store, build the service and every surface, and serve until SIGINT or SIGTERM.

    Raises :class:`ServeError` (why it cannot start), :class:`SettingError` (a setting it cannot use, with the
    option that set it) or :class:`ListenError` (a listener that could not be bound)."""
    logging.basicConfig(level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    clouds = served_clouds(config)
    try:
        rules = rules_of(clouds)
    except CloudSetupError as error:
        raise SettingError(str(error), error.option or "") from None
    warn_of_exposure(config, clouds)
    # No cyclic collection while the fleet loads: a million-VM fleet is millions of objects, and the collector would
    # walk them over and over as they are made (it was most of the start-up time). serve() settles the heap once the
    # surfaces are built.
    gc.disable()
    listeners = listeners_of(config, clouds)
    own = bind_own(listeners)
    try:
        service, _, node = open_service(config, clouds, rules)
    except BaseException:
        own.close()
        raise
    try:
        try:
            metadata_limits = Limits().updated(config.imds_limits)
            management_limits = MANAGEMENT_LIMITS.updated(config.api_limits)
        except ValueError as error:
            raise SettingError(str(error), "--imds-limit/--api-limit") from None
        server = serve(
            service,
            listeners,
            clouds,
            announce=announce,
            metadata_limits=metadata_limits,
            management_limits=management_limits,
            access=PortAccess(config.allowed_hosts, config.control_token),
            node=node,
            exit_with_parent=config.exit_with_parent,
            bound=own,
        )
        try:
            event_loop_runner()(server)
        except ListenError:
            raise
        except OSError as error:
            raise ServeError(f"cannot listen: {error.strerror or error}") from None
        except KeyboardInterrupt:
            pass
    finally:
        service.store.close()


def warn_of_exposure(config: ServeConfig, clouds: Sequence[Served]) -> None:
    """Refuse a control API beyond loopback without a token; warn of what else listens there unguarded."""
    refusal, warnings = exposure(config.host, config.control_token, config.insecure)
    if refusal is not None:
        raise ServeError(f"refusing to start: {refusal}")
    if listens_beyond_loopback(config.host):
        for served in clouds:
            warnings += served.serving.exposure(config.host)
    for warning in warnings:
        log.warning(warning)


def listeners_of(config: ServeConfig, clouds: Sequence[Served]) -> Listeners:
    listeners = Listeners(
        control=(config.host, config.port),
        imds=(config.imds_host, config.imds_port),
        open_vm_ports=config.vm_ports,
        hosts=config.hosts,
    )
    for served in clouds:
        for api in served.serving.apis():
            if api.port:
                listeners.apis[api.role] = (config.host, api.port)
                listeners.api_titles[api.role] = api.title
    return listeners


# ------------------------------------------------------------------------------------- the surfaces
def host_now(service: Maintenance, clouds: Sequence[Served]) -> Callable[[Caller], str]:
    """The host a machine runs on now (a redeploy moves an Azure VM, a stop and start an EC2 instance)."""

    def host_of(machine: Caller) -> str:
        for served in clouds:
            host = served.serving.current_host(service, machine)
            if host is not None:
                return host
        return machine.host

    return host_of


def listening_of(listeners: Listeners, access: PortAccess) -> Listening:
    return Listening(listeners.control, listeners.imds, dict(listeners.apis), access.allowed_hosts)


def build(
    service: Maintenance, listeners: Listeners, clouds: Sequence[Served], access: PortAccess, bound: Bound | None
) -> Built:
    """The surfaces and their bound sockets: ``bound`` (the server's own, bound before the store opened; None: bound
    here) with each machine's added (server/listeners.py says which)."""
    machines = [machine for served in clouds for machine in served.serving.machines(service)]
    bound = bound or bind_own(listeners)
    bind_machines(listeners, machines, bound)
    resolver = CallerResolver(service.settled_engine().fleet, shared_ports={listeners.imds[1]})
    if listeners.hosts is not None:
        resolver.serve_hosts(listeners.hosts, host_now(service, clouds))
    settings = {served.cloud.name: served.serving.metadata_settings() for served in clouds}
    surfaces = {served.cloud.name: served.cloud.metadata_surface(service, resolver, settings) for served in clouds}
    listening = listening_of(listeners, access)
    control_app = control_app_of(service, listeners, clouds, surfaces, listening, access)
    build_routes(control_app.router.routes)
    json_guard = BrowserGuard(HostNames.for_server(listeners.control[0], access.allowed_hosts), json_api=True)
    apps: dict[int, ASGIApp] = {listeners.control[1]: ControlGate(control_app, json_guard, access.control_token)}
    for served in clouds:
        for api in served.serving.apis():
            if api.role in listeners.apis:
                surface = surfaces[served.cloud.name]
                apps[listeners.apis[api.role][1]] = served.serving.app(api.role, service, surface, listening)
    guard = MetadataGuard.for_listener(listeners.imds[0], access.allowed_hosts)
    router = MetadataRouter(list(surfaces.values()), guard)
    return Built(ByPort(apps), bound, resolver, router, control_app.state.live_feed)


def control_app_of(
    service: Maintenance,
    listeners: Listeners,
    clouds: Sequence[Served],
    surfaces: dict[str, MetadataSurface],
    listening: Listening,
    access: PortAccess,
) -> Any:
    views: dict[str, Any] = {}
    urls: dict[str, str] = {}
    for served in clouds:
        views.update(served.serving.views(service, surfaces[served.cloud.name], listening))
        urls.update(served.serving.client_urls(listening))
    runs = ScenarioRuns(service, own_url(listeners.control), token=access.control_token, **urls)
    return create_control_app(
        service, metadata=surfaces, imds_listener=listeners.imds, views=SurfaceViews(**views), scenario_runs=runs
    )


# ------------------------------------------------------------------------------------- running
async def serve(
    service: Maintenance,
    listeners: Listeners,
    clouds: Sequence[Served],
    announce: Callable[[str], object] = print,
    metadata_limits: Limits = Limits(),
    management_limits: ApiLimits = MANAGEMENT_LIMITS,
    access: PortAccess = PortAccess(),
    node: Node | None = None,
    exit_with_parent: bool = False,
    bound: Bound | None = None,
) -> None:
    """Run until SIGINT or SIGTERM: the control and the clouds' APIs on uvicorn, the metadata listeners on the lean
    HTTP/1.1 server. ``node``: this process shares its database with others (replication/), as the leader or a
    replica. ``exit_with_parent``: also once the process that started this one has exited. ``bound``: the server's
    own sockets, if bound already (``bind_own``)."""
    built = build(service, listeners, clouds, access, bound)
    await import_first_request_modules()
    settle_heap()
    service.subscribe(freeze_after_bulk)
    service.engine_building = collector_paused
    tune_thread_switching()
    own = own_listeners(built.bound, listeners)
    handler: Callable[[Request], Any] = built.metadata.handle
    if node is not None:
        ports, token = built.management_app, access.control_token
        handler = shared_surfaces(node, ports, handler, built.resolver, listeners, token)
    # A metadata service tells its cloud's time in its Date header: here, the simulated time (a handler may read
    # it as the cloud's clock, as forewarn-agent does). Every commit may have moved it.
    metadata = Http1Server(handler, metadata_limits, clock=lambda: service.now().timestamp())
    service.subscribe(lambda _changes: metadata.clock_moved())
    await metadata.start(built.bound.metadata)
    background = [asyncio.create_task(DeadlineTimer(service).run())]
    background += start_background(service, clouds, own, node, exit_with_parent)
    listening = listening_of(listeners, access)
    for served in clouds:
        served.serving.started(own, listening)
    # uvicorn bounds neither header sizes, nor slow requests, nor connections
    guard = UvicornGuard(management_limits, ports=len(built.bound.management))
    background.append(asyncio.create_task(guard.run()))
    tune_collector()
    banner = describe(service, listeners, [served.serving for served in clouds], listening)
    announce(banner + ("" if node is None else f"\n  shared        {node.describe()}"))
    try:
        await Uvicorn(uvicorn_config(built, guard), built.live_feed).serve(sockets=built.bound.management)
    finally:
        if node is not None:
            node.close()
        for task in background:
            task.cancel()
        await metadata.close()


def start_background(
    service: Maintenance, clouds: Sequence[Served], own: Any, node: Node | None, exit_with_parent: bool
) -> list[asyncio.Task]:
    """The outbox sender (a leader's only: a replica starts it when it takes over), the seen-scopes reports of a
    shared process, the parent watch, the database probe, (FOREWARN_LOOP_HOLDS) the record of loop holds and
    (FOREWARN_LOOP_STACKS) the threads' stacks while the loop is late."""
    background: list[asyncio.Task] = []
    policies = [policy for served in clouds for policy in served.serving.delivery_policies()]

    def start_outbox() -> None:
        background.append(asyncio.create_task(OutboxSender(service, policies=policies, own=own).run()))

    if node is None or node.service.role == "leader":
        start_outbox()
    if node is not None:
        node.on_promoted.append(start_outbox)
        if node.service.role == "leader":
            node.lead_now()
        node.start(asyncio.get_running_loop())
        from forewarn.replication.forward import SeenReporter

        background.append(asyncio.create_task(SeenReporter(node.service, node.leaders).run()))
    if exit_with_parent:
        background.append(asyncio.create_task(exit_with(os.getppid())))
    background.append(asyncio.create_task(probe_database(service.store)))
    holds = loop_holds_file()
    if holds is not None:
        background.append(asyncio.create_task(record_loop_holds(holds)))
    stacks = loop_stacks_file()
    if stacks is not None:
        background.append(asyncio.create_task(note_stacks_while_late(stacks)))
    return background


def uvicorn_config(built: Built, guard: UvicornGuard) -> uvicorn.Config:
    return uvicorn.Config(
        built.management_app,
        http=guard.protocol,
        lifespan="off",
        access_log=False,
        server_header=False,
        log_config=None,
        timeout_keep_alive=30,
        proxy_headers=False,
    )


class Uvicorn(uvicorn.Server):
    """uvicorn waits, when stopping, for every response to end: the dashboard's streams never would on their own."""

    def __init__(self, config: uvicorn.Config, live_feed: LiveFeed):
        super().__init__(config)
        self.live_feed = live_feed

    async def shutdown(self, sockets: Any = None) -> None:
        self.live_feed.close()
        await super().shutdown(sockets)
