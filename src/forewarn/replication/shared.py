"""The service of a process that shares its PostgreSQL database with others: a leader, or a metadata replica.

A leader is ``Maintenance`` as it is everywhere else: it runs every command and commits it. A replica holds an
engine built from what the leader committed, and keeps it current with the rows each later commit touched
(``replicate``: the cost of the commits, not of the fleet; ``replace`` takes a whole state when the journal cannot
tell what changed), and runs no command: a write that reaches it is forwarded to the leader before a surface sees it
(``replication/forward.py``); one that cannot be (no leader answers) reaches the surface, which gets
:class:`NotLeader`, an ``Unavailable``, and answers with its own retryable error.

Time on a replica: a manual clock moves only by the leader's commands, so a replica shows exactly what was committed.
A real clock's deadline can pass before the leader's commit of it arrives (or while there is no leader). A replica
then applies it to its own engine without committing (``catch_up``): the engine is deterministic, so this is what
the leader commits for the same instant, and a document never shows an event as Scheduled after its NotBefore. The
rows a projection changed are noted (``projected_rows``), and the next refresh reads them back from the database with
the leader's commits, so that what the leader committed replaces the projection. (The alternative, answering 503 as IMDS does when it cannot
vouch for its answer, would give every agent an error at every deadline, for the few milliseconds the leader's commit
takes to arrive.)
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from forewarn.app.errors import Unavailable
from forewarn.app.runtime import Check, Command, Maintenance
from forewarn.azure.component import AzureComponent
from forewarn.azure.fleet import azure_fleet
from forewarn.azure.rules import AzureRules
from forewarn.core.changes import Change, Rebuilt
from forewarn.core.clock import MANUAL, Clock
from forewarn.engine.engine import Engine
from forewarn.store import SQLStore, StoredChanges, StoredState, StoreError
from forewarn.store.records import Touched

log = logging.getLogger("forewarn.replication")

LEADER = "leader"
REPLICA = "replica"


class FleetDiffers(Exception):
    """A replica was given a fleet other than the one the database holds."""


class NotLeader(Unavailable):
    """A command reached a replica and no leader took it: nothing was changed; retry."""


class SharedService(Maintenance):
    def __init__(self, store: SQLStore, engine: Engine, clock: Clock, wall: Callable[[], float] = time.time):
        super().__init__(store, engine, clock, wall)
        self.role = REPLICA
        self.no_leader_reason = "no leader has published itself yet"
        self.projected = False  # a replica applied a deadline the leader had not committed (real clocks)
        # The scopes whose VMs asked this replica for their events since its last report to the leader.
        self.seen_here: set[str] = set()
        # The rows such deadlines changed, to read back from the database: table -> key -> the number of the
        # projection that last changed it (counted in _projections), so that a refresh read before a later projection
        # leaves that projection's rows to the next one.
        self._projection: dict[str, dict[str, int]] = {}
        self._projections = 0
        self._read_through = 0  # the projections the last projected_rows() covered
        self.command_seconds: list[float] = []  # latencies of the commands run here, drained by the metrics

    @classmethod
    def replica_of(cls, store: SQLStore, state: StoredState, rules: Any, fleet: Any) -> SharedService:
        """A replica's service over what the database holds (nothing is written)."""
        return cls(store, cls._engine_from(state, rules, fleet), state.clock.within_bounds()[0])

    # -------------------------------------------------------------------------------------------- replica
    def _run(self, command: Command, clock: Clock | None = None, check: Check | None = None) -> list[Change]:
        if self.role != LEADER:
            raise NotLeader(f"this forewarn is a replica and no leader took the command ({self.no_leader_reason})")
        started = time.perf_counter()
        try:
            return super()._run(command, clock, check)
        finally:
            self._took(started)

    def _took(self, started: float) -> None:
        if len(self.command_seconds) < 100_000:
            self.command_seconds.append(time.perf_counter() - started)

    def perform_soon(self, command: Command, check: Check | None = None) -> asyncio.Future[list[Change]]:
        # The group commit of approvals is a write like any other: at a replica, the leader's to make.
        if self.role != LEADER:
            refused: asyncio.Future[list[Change]] = asyncio.get_running_loop().create_future()
            refused.set_exception(
                NotLeader(f"this forewarn is a replica and no leader took the command ({self.no_leader_reason})")
            )
            return refused
        started = time.perf_counter()
        future = super().perform_soon(command, check)
        future.add_done_callback(lambda _: self._took(started))  # from handed in to durable (or failed)
        return future

    def reset(self) -> None:
        if self.role != LEADER:
            raise NotLeader(f"this forewarn is a replica and no leader took the reset ({self.no_leader_reason})")
        super().reset()

    def request_seen(self, scope: str) -> None:
        # Enabling a scope is a write, and the idle timer that disables it is the leader's: a replica notes the scope,
        # and its SeenReporter (replication/forward.py) hands the leader what it noted twice a second. Until the
        # enabling comes back with the next refresh, the replica answers as for a scope not yet enabled.
        if self.role == LEADER:
            super().request_seen(scope)
        else:
            self.seen_here.add(scope)

    def seen_at_replica(self, scopes: list[str]) -> None:
        """The leader's side of a replica's report: the scopes its VMs asked for, each as if asked here (enabling
        committed, the idle timer moved); names that are no scope of the fleet are passed over."""
        if self.role != LEADER:
            raise NotLeader(f"this forewarn is a replica ({self.no_leader_reason})")
        if not self.rules.of(AzureRules).enabling_required:
            return
        known = azure_fleet(self.engine.fleet).vms_by_scope
        asked = [scope for scope in dict.fromkeys(scopes) if scope in known]
        if not asked:
            return
        self.catch_up()
        unseen = []
        with self._lock:  # as request_seen: an enabled scope's idle timer moves in memory, with no commit
            engine = self._engine
            for scope in asked:
                if engine.component(AzureComponent).is_enabled(scope):
                    engine.component(AzureComponent).last_seen[scope] = engine.now
                else:
                    unseen.append(scope)
        if unseen:  # one commit for all the scopes the report enables
            self._run(
                lambda engine: [
                    change for scope in unseen for change in engine.component(AzureComponent).request_seen(scope)
                ]
            )

    def catch_up(self) -> list[Change]:
        if self.role == LEADER:
            return super().catch_up()
        if self.clock.mode == MANUAL:
            return []
        now = self.clock.now(self.wall())
        with self._lock:
            if now <= self.engine.now:
                return []
            due = self.engine.next_deadline()
            changes = self.engine.advance(now)
            if due is not None and due <= now:
                self.projected = True
                self._projections += 1
                for table, keys in self.store.registry.touched_by(changes, self.engine.now).items():
                    self._projection.setdefault(table, {}).update(dict.fromkeys(keys, self._projections))
            self._refresh_due()
        self._announce(changes)
        return changes

    def engine_of(self, state: StoredState) -> Engine:
        """An engine over a state the leader committed (built off the event loop: the costly part of a refresh)."""
        return self._engine_from(state, self.engine.rules, self.engine.fleet)

    def replace(self, engine: Engine, state: StoredState) -> None:
        """A replica takes a whole state the leader committed (called on the event loop, so no request sees half of
        it)."""
        if self.role == LEADER:
            return
        with self._lock:
            self.engine = engine
            self.clock = state.clock.within_bounds()[0]
            self.projected = False
            self._projection = {}
            self._refresh_due()
        replaced: list[Change] = [Rebuilt("replicated from the leader")]
        for listener in self._listeners:
            listener(replaced)
        self.catch_up()  # deadlines that passed since the leader's commit (real clocks)

    def projected_rows(self) -> Touched:
        """The rows this replica's projections changed since its last refresh (a copy: read from another thread,
        for the refresh about to be read, which ``replicate`` then takes)."""
        with self._lock:
            self._read_through = self._projections
            return {table: dict.fromkeys(keys) for table, keys in self._projection.items() if keys}

    def replicate(self, changed: StoredChanges, catch_up: bool = True) -> None:
        """A replica takes the rows the leader's commits touched (and those its own projections changed, read back),
        on the event loop: each request sees the engine before or after, never half of it. The read models hear of
        what moved, so that only the touched scopes' documents are rendered again. ``catch_up``: then apply the
        deadlines that passed since (real clocks)."""
        if self.role == LEADER:
            return
        with self._lock:
            changes = self.engine.replicate(changed.now, changed.next_seq, changed.created_at, changed.records)
            self.clock = changed.clock.within_bounds()[0]
            for table, keys in changed.touched.items():  # read back: committed rows again
                left = self._projection.get(table)
                if left:
                    for key in keys:
                        if left.get(key, self._read_through + 1) <= self._read_through:
                            del left[key]
            self.projected = any(self._projection.values())
            self._refresh_due()
        if any(isinstance(change, Rebuilt) for change in changes):
            changes = [Rebuilt("replicated from the leader")]
        for listener in self._listeners:
            listener(changes)
        if catch_up:
            self.catch_up()

    # ------------------------------------------------------------------------------------------- failover
    def promote(self, position: int | None = None, reschedule: bool = True) -> None:
        """Become the leader (the caller holds the lock), then commit the deadlines that passed while nobody led.

        ``position``: the engine holds exactly what was committed up to that position of the journal (a replica
        that has just read the last commits): it is kept, with its deadlines set again from its state
        (``reschedule``), as loading the state would set them. Without it, or when a projection of this replica's
        is left in the engine, the engine is rebuilt from the database."""
        if position is not None and not self.projected:
            with self._lock:
                if reschedule:
                    self.engine.reschedule()
                self.store.position = position
                self.role = LEADER
                self._refresh_due()
            self.catch_up()
            return
        try:
            state = self.store.load()
        except StoreError as error:
            raise Unavailable(str(error), error.retry_after) from error
        if state is None:
            raise Unavailable("the database holds no fleet")
        with self._lock:
            self.engine = self._engine_from(state, self.engine.rules, self.engine.fleet)
            self.clock = state.clock.within_bounds()[0]
            self.projected = False
            self._projection = {}
            self.role = LEADER
            self._refresh_due()
        rebuilt: list[Change] = [Rebuilt("became the leader")]
        for listener in self._listeners:
            listener(rebuilt)
        self.catch_up()
