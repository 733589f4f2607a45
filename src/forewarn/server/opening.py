"""Opening the service: the store ``--db`` names, the fleet ``--fleet`` gives, the engine's rules and each cloud's
outboxes as the options set them, and the process's part in a shared database."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from forewarn.app.runtime import FleetMismatch, Maintenance
from forewarn.cloud import Cloud, CloudSetupError, Serving, registered
from forewarn.core.errors import CoreError
from forewarn.core.times import parse_time
from forewarn.engine.rules import Rules
from forewarn.fleet.file import FleetFileError
from forewarn.fleet.model import Fleet
from forewarn.replication.shared import FleetDiffers
from forewarn.server.config import ServeConfig, ServeError
from forewarn.server.fleet_source import fleet_sections, given_fleet, read_served_fleet, remember_fleet_file
from forewarn.server.shared import open_shared_service
from forewarn.server.stores import is_postgres, open_fleet_store
from forewarn.store import SQLStore, StoreError

if TYPE_CHECKING:
    from forewarn.replication.node import Node


@dataclass(frozen=True)
class Served:
    """A registered cloud and its part in this server."""

    cloud: Cloud
    serving: Serving


def served_clouds(config: ServeConfig) -> tuple[Served, ...]:
    return tuple(Served(cloud, cloud.serving(config)) for cloud in registered())


def rules_of(clouds: Sequence[Served]) -> Rules:
    """The engine's rules, each cloud's part as its options set it (a value refused: :class:`CloudSetupError`)."""
    rules = Rules()
    for served in clouds:
        rules = served.serving.rules(rules)
    return rules


def open_service(
    config: ServeConfig, clouds: Sequence[Served] | None = None, rules: Rules | None = None
) -> tuple[Maintenance, dict[str, Serving], Node | None]:
    """The store and the service on it, each cloud's serving (by cloud name) opened on it, and the process's part in
    a shared database (None: it serves alone). Any failure (fleet file, store, a fleet that differs from the stored
    one, a cloud's files or settings) is a :class:`ServeError`; the store is closed again then."""
    clouds = served_clouds(config) if clouds is None else clouds
    rules = rules_of(clouds) if rules is None else rules
    store: SQLStore | None = None
    try:
        fleet_file = read_served_fleet(config.fleet_source) if config.fleet_source else None
        start_time = parse_time(config.start) if config.start else None
        store = open_configured_store(config)
        given = given_fleet(fleet_file, store)
        fleet_file = None  # its text (86 MB at a million VMs) is not needed while the fleet is built
        service, node = open_on(store, config, clouds, rules, start_time, given)
    except (FleetFileError, StoreError, FleetMismatch, CoreError, CloudSetupError, FleetDiffers) as error:
        if store is not None:
            store.close()
        raise ServeError(str(error)) from None
    except BaseException:
        if store is not None:
            store.close()
        raise
    return service, {served.cloud.name: served.serving for served in clouds}, node


def open_on(
    store: SQLStore,
    config: ServeConfig,
    clouds: Sequence[Served],
    rules: Rules,
    start_time: datetime | None,
    given: tuple[Fleet | None, dict[str, Any] | None, str | None],
) -> tuple[Maintenance, Node | None]:
    """The service on the opened store, from the fleet ``--fleet`` gives (server/fleet_source.py's
    :func:`given_fleet`), with each cloud's outboxes; then each cloud's serving attached to it."""
    fleet, section, file_digest = given
    sections = fleet_sections(config.fleet_source, section)
    outboxes = [outbox for served in clouds for outbox in served.serving.opened(store, sections)]
    node: Node | None = None
    if config.role == "single":
        service = Maintenance.open(
            store, fleet, config.clock_mode, config.speed, start_time, config.seed, rules, outboxes=outboxes
        )
    else:
        service, node = open_shared_service(config, store, fleet, start_time, rules, outboxes)
    leads = node is None or node.service.role == "leader"
    for served in clouds:
        served.serving.attach(service, leads)
    if file_digest is not None and leads:
        remember_fleet_file(store, file_digest, section)
    return service, node


def open_configured_store(config: ServeConfig) -> SQLStore:
    """The store --db names, with every component's records; the one place the server opens it. A server that writes
    alone holds its database for its whole life (a SQLite file's lock, a PostgreSQL database's writer lock): a
    second writer on it is refused, instead of sharing it unawares. A shared process's leader holds the writer lock
    on its lease instead (replication/start.py)."""
    return open_fleet_store(
        config.db, exclusive=config.role == "single" or not is_postgres(config.db), sqlite_cache=config.sqlite_cache
    )
