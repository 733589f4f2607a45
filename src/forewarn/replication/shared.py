"""The service of a process that shares its PostgreSQL database with others: a leader, or a metadata replica.

A leader is ``Maintenance`` as it is everywhere else: it runs every command and commits it. A replica holds an
engine built from what the leader committed, replaced whole each time the leader publishes a new position
(``replace``), and runs no command: a write that reaches it is forwarded to the leader before a surface sees it
(``replication/forward.py``); one that cannot be (no leader answers) reaches the surface, which gets
:class:`NotLeader`, an ``Unavailable``, and answers with its own retryable error.

Time on a replica: a manual clock moves only by the leader's commands, so a replica shows exactly what was committed.
A real clock's deadline can pass before the leader's commit of it arrives (or while there is no leader). A replica
then applies it to its own engine without committing (``catch_up``): the engine is deterministic, so this is what
the leader commits for the same instant, and a document never shows an event as Scheduled after its NotBefore. The
next state the leader publishes replaces the projection. (The alternative, answering 503 as IMDS does when it cannot
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
from forewarn.app.runtime import Maintenance
from forewarn.core.changes import Change, Rebuilt
from forewarn.core.clock import MANUAL, Clock
from forewarn.engine.engine import Engine
from forewarn.store import SQLStore, StoredState, StoreError

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
        self.command_seconds: list[float] = []  # latencies of the commands run here, drained by the metrics

    @classmethod
    def replica_of(cls, store: SQLStore, state: StoredState, rules: Any, fleet: Any) -> SharedService:
        """A replica's service over what the database holds (nothing is written)."""
        return cls(store, cls._engine_from(state, rules, fleet), state.clock.within_bounds()[0])

    # -------------------------------------------------------------------------------------------- replica
    def _run(self, command: Callable[[Engine], list[Change]], clock: Clock | None = None) -> list[Change]:
        if self.role != LEADER:
            raise NotLeader(f"this forewarn is a replica and no leader took the command ({self.no_leader_reason})")
        started = time.perf_counter()
        try:
            return super()._run(command, clock)
        finally:
            self._took(started)

    def _took(self, started: float) -> None:
        if len(self.command_seconds) < 100_000:
            self.command_seconds.append(time.perf_counter() - started)

    def perform_soon(self, command: Callable[[Engine], list[Change]]) -> asyncio.Future[list[Change]]:
        # The group commit of approvals is a write like any other: at a replica, the leader's to make.
        if self.role != LEADER:
            refused: asyncio.Future[list[Change]] = asyncio.get_running_loop().create_future()
            refused.set_exception(
                NotLeader(f"this forewarn is a replica and no leader took the command ({self.no_leader_reason})")
            )
            return refused
        started = time.perf_counter()
        future = super().perform_soon(command)
        future.add_done_callback(lambda _: self._took(started))  # from handed in to durable (or failed)
        return future

    def reset(self) -> None:
        if self.role != LEADER:
            raise NotLeader(f"this forewarn is a replica and no leader took the reset ({self.no_leader_reason})")
        super().reset()

    def request_seen(self, scope: str) -> None:
        # Enabling a scope is a write; a replica leaves it to the leader (a VM's first GET there enables it). A
        # replica's first answer to a scope the leader never saw is the one of a scope not yet enabled.
        if self.role == LEADER:
            super().request_seen(scope)

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
            self._refresh_due()
        self._announce(changes)
        return changes

    def engine_of(self, state: StoredState) -> Engine:
        """An engine over a state the leader committed (built off the event loop: the costly part of a refresh)."""
        return self._engine_from(state, self.engine.rules, self.engine.fleet)

    def replace(self, engine: Engine, state: StoredState) -> None:
        """A replica takes what the leader committed (called on the event loop, so no request sees half of it)."""
        if self.role == LEADER:
            return
        with self._lock:
            self.engine = engine
            self.clock = state.clock.within_bounds()[0]
            self.projected = False
            self._refresh_due()
        replaced: list[Change] = [Rebuilt("replicated from the leader")]
        for listener in self._listeners:
            listener(replaced)
        self.catch_up()  # deadlines that passed since the leader's commit (real clocks)

    # ------------------------------------------------------------------------------------------- failover
    def promote(self) -> None:
        """Become the leader (the caller holds the lock): rebuild the engine from the database, then commit the
        deadlines that passed while nobody led."""
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
            self.role = LEADER
            self._refresh_due()
        rebuilt: list[Change] = [Rebuilt("became the leader")]
        for listener in self._listeners:
            listener(rebuilt)
        self.catch_up()
