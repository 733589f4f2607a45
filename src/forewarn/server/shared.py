"""A process that shares its PostgreSQL database with others (replication/): opening it as the leader or a replica,
and the surfaces of a shared process (a replica forwards writes to the leader)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from forewarn.app.runtime import Maintenance
from forewarn.engine.rules import Rules
from forewarn.net.callers import CallerResolver
from forewarn.net.http import Request
from forewarn.server.config import ServeConfig
from forewarn.server.listeners import ByPort, Listeners
from forewarn.server.stores import open_snapshot_store
from forewarn.store import SQLStore

if TYPE_CHECKING:
    from forewarn.replication.node import Node
    from forewarn.replication.shared import SharedService


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


def shared_surfaces(
    node: Node,
    ports: ByPort,
    local: Callable[[Request], Any],
    resolver: CallerResolver,
    listeners: Listeners,
    control_token: str | None,
) -> Callable[[Request], Any]:
    """A shared process's surfaces: writes at a replica go to the leader (replication/forward.py), the control port
    answers the probes and metrics and takes a replica's forwarded metadata writes; and the addresses this process
    publishes when it leads. ``local``: this process's own metadata handler. Returns the metadata handler."""
    from forewarn.replication.forward import LeaderEndpoint, ReplicaMetadata, ReplicaPort

    service, leaders, counts = node.service, node.leaders, node.counts.requests
    apps = ports.apps
    control = listeners.control[1]
    apps[control] = LeaderEndpoint(
        ReplicaPort(apps[control], service, leaders, "control", counts),
        local,
        control_token,
        node.probe,
        leaders,
        service,
    )
    for role, address in listeners.apis.items():
        apps[address[1]] = ReplicaPort(apps[address[1]], service, leaders, role, counts)
    host = node.advertise_host or listeners.control[0]
    imds_host = node.advertise_host or listeners.imds[0]
    node.addresses = {"control": f"http://{host}:{control}", "imds": f"http://{imds_host}:{listeners.imds[1]}"}
    for role, address in listeners.apis.items():
        node.addresses[role] = f"http://{host}:{address[1]}"
    return ReplicaMetadata(local, service, leaders, listeners.imds[1], counts, resolver.serves).handle
