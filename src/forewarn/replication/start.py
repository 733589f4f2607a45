"""Opening a process of a shared forewarn: the leader if it gets the lock (and ``role`` allows), else a replica."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from forewarn.app.runtime import Maintenance
from forewarn.engine.rules import Rules
from forewarn.fleet.model import Fleet
from forewarn.fleet.section import stored_fleet
from forewarn.replication.forward import Leaders
from forewarn.replication.node import SHARED, Node, NodeSettings
from forewarn.replication.shared import LEADER, FleetDiffers, SharedService
from forewarn.store import DatabaseInUse, Outgoing, SQLStore, StoreError
from forewarn.store.lease import Lease
from forewarn.store.writer import SINGLE

log = logging.getLogger("forewarn.replication")

FIRST_STATE_WAIT = 60.0  # seconds a process started on an empty database waits for a leader to initialize it
FIRST_STATE_POLL = 0.2  # seconds between two looks at an empty database


def open_shared(
    url: str,
    store: SQLStore,
    open_leader: Callable[[], SharedService],
    open_reader: Callable[[], SQLStore],
    fleet: Fleet | None,
    rules: Rules,
    outboxes: list[Callable[..., list[Outgoing]]],
    settings: NodeSettings,
    control_token: str | None,
) -> tuple[Maintenance, Node]:
    """The runtime the surfaces serve from, and its node (which holds it, with its roles, as a ``SharedService``).
    The leader's is opened as ``Maintenance.open`` opens one (initializing an empty database, catching up deadlines);
    a replica's is built from what the database holds, writing nothing."""
    if not url.startswith(("postgresql://", "postgres://")):
        raise StoreError(
            "a shared forewarn (--role shared or replica) needs PostgreSQL (--db postgresql://...): SQLite serves one "
            "process only"
        )
    store.keeps_changes = True  # whichever process leads journals its commits for the others
    lease = Lease(url)
    try:
        service = _lead_or_follow(store, lease, open_leader, fleet, rules, settings.role)
        if service.role != LEADER:
            for derive in outboxes:  # used once this process takes over
                service.runtime.add_outbox(derive)
    except BaseException:
        lease.close()
        raise
    node = Node(service, url, lease, open_reader, settings, Leaders(control_token))
    return service.runtime, node


def _lead_or_follow(
    store: SQLStore,
    lease: Lease,
    open_leader: Callable[[], SharedService],
    fleet: Fleet | None,
    rules: Rules,
    role: str,
) -> SharedService:
    """Lead if this process may and the lock is free, else follow. An empty database is led only by a process given
    a fleet, which initializes it: processes started together in any order wait for it (up to FIRST_STATE_WAIT
    seconds) rather than lead a database they cannot fill, or load one not filled yet."""
    give_up = time.monotonic() + FIRST_STATE_WAIT
    waiting = False
    while True:
        initialized = store.initialized()
        if role == SHARED and (initialized or fleet is not None) and lease.try_acquire():
            return _leader(store, lease, open_leader)
        _refuse_beside_single(lease, store.description)
        if initialized:
            service = _replica(store, fleet, rules)
            log.info("a replica of the shared database (lock %s held by another process)", lease.key)
            return service
        if time.monotonic() > give_up:
            raise StoreError(
                f"{store.description}: the database is empty, and no process given a fleet initialized it within "
                f"{FIRST_STATE_WAIT:g} s: start one with --fleet FILE (or --fleet demo)"
            )
        if not waiting:
            log.info("the database is empty: waiting for a process given a fleet (--fleet) to initialize it")
            waiting = True
        time.sleep(FIRST_STATE_POLL)


def _leader(store: SQLStore, lease: Lease, open_leader: Callable[[], SharedService]) -> SharedService:
    previous = lease.leader()
    service = open_leader()
    if previous is not None and previous.role == SINGLE:
        store.journal_reset()  # replicas that followed an earlier leader miss the single server's commits
    # It holds the lock and just loaded the state: the engine is current, and its deadlines are as loaded.
    service.promote(store.position, reschedule=False)
    log.info("leading the shared database (lock %s)", lease.key)
    return service


def _refuse_beside_single(lease: Lease, description: str) -> None:
    """A single server journals nothing for replicas: a process that would follow it would serve its first state
    for ever. Refused, naming the server."""
    held_by = lease.holder()
    if held_by is not None and held_by.role == SINGLE:
        raise DatabaseInUse(
            f"{description}: {held_by.describe()} writes to this database alone; a shared process can only follow "
            "a leader (--role shared). Stop that server, or restart it with --role shared"
        )


def _replica(store: SQLStore, fleet: Fleet | None, rules: Rules) -> SharedService:
    state = store.load()
    if state is None:  # initialized databases stay so (a reset keeps the fleet); emptied by hand meanwhile
        raise StoreError(f"{store.description}: the database was emptied while this process started")
    stored = stored_fleet(state.fleet_records)
    if fleet is not None and fleet != stored:
        raise FleetDiffers("the database holds a different fleet than --fleet gives; start the replica without --fleet")
    return SharedService.replica_of(store, state, rules, stored)
