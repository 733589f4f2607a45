"""The service of a process that shares its PostgreSQL database with others: a leader, or a metadata replica.

The runtime (``Maintenance``) is the same in every process; the part it plays is its ``Role``. A leader
(``Leading``) runs every command and commits it, as a process serving alone does. A replica (``Following``) holds an
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

import contextlib
import threading
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime
from typing import Any

from forewarn.app.errors import Unavailable
from forewarn.app.runtime import Alone, Maintenance
from forewarn.core.changes import Change, Rebuilt
from forewarn.core.clock import MANUAL, Clock
from forewarn.core.scheduler import Heap
from forewarn.engine.engine import Engine
from forewarn.engine.rules import Rules
from forewarn.engine.teardown import empty_in_slices
from forewarn.fleet.model import Fleet
from forewarn.store import Outgoing, SQLStore, StoredChanges, StoredState, StoreError
from forewarn.store.records import Touched

LEADER = "leader"
REPLICA = "replica"
MAX_LATENCIES = 100_000  # command latencies kept between two scrapes of the metrics


class FleetDiffers(Exception):
    """A replica was given a fleet other than the one the database holds."""


class NotLeader(Unavailable):
    """A command reached a replica and no leader took it: nothing was changed; retry."""


class Leading(Alone):
    """The leader's role: as a process serving alone, it makes every write and commits what falls due; it also times
    its commands for the metrics."""

    def __init__(self) -> None:
        self.command_seconds: list[float] = []  # latencies of the commands run here, drained by the metrics

    def took(self, seconds: float) -> None:
        if len(self.command_seconds) < MAX_LATENCIES:
            self.command_seconds.append(seconds)


class Following:
    """A replica's role: it refuses every write (the leader's to make), notes the scopes read here for the leader,
    and applies the deadlines that pass in memory only (projections), noting the rows they changed."""

    def __init__(self) -> None:
        self.no_leader_reason = "no leader has published itself yet"
        self.projected = False  # a deadline the leader had not committed was applied here (real clocks)
        # No deadline is applied here meanwhile (a replica about to lead sets its deadlines in a thread).
        self.held = False
        # The scopes whose VMs asked this replica for their events since its last report to the leader.
        self.seen_here: set[str] = set()
        # The rows such deadlines changed, to read back from the database: table -> key -> the number of the
        # projection that last changed it (counted in ``projections``), so that a refresh read before a later
        # projection leaves that projection's rows to the next one.
        self._projection: dict[str, dict[str, int]] = {}
        self._projections = 0
        self._read_through = 0  # the projections the last projected_rows() covered
        self._lock = threading.Lock()  # projected_rows is read from the replication thread

    def admit(self, write: str) -> None:
        if write == "report":
            raise NotLeader(f"this forewarn is a replica ({self.no_leader_reason})")
        raise NotLeader(f"this forewarn is a replica and no leader took the {write} ({self.no_leader_reason})")

    def took(self, seconds: float) -> None:
        return None

    def relays_read(self, scope: str) -> bool:
        # Enabling a scope is a write, and the idle timer that disables it is the leader's: the SeenReporter
        # (replication/forward.py) hands the leader what was noted twice a second. Until the enabling comes back
        # with the next refresh, the replica answers as for a scope not yet enabled.
        self.seen_here.add(scope)
        return True

    def catch_up(self, service: Maintenance) -> list[Change]:
        if service.clock.mode == MANUAL or self.held:
            return []
        now = service.clock.now(service.wall())
        changes = service.follow(lambda engine: self._project(service.store, engine, now))
        service.announce(changes)
        return changes

    def _project(self, store: SQLStore, engine: Engine, now: datetime) -> list[Change]:
        if now <= engine.now:
            return []
        due = engine.next_deadline()
        changes = engine.advance(now)
        if due is not None and due <= now:
            with self._lock:
                self.projected = True
                self._projections += 1
                for table, keys in store.registry.touched_by(changes, engine.now).items():
                    self._projection.setdefault(table, {}).update(dict.fromkeys(keys, self._projections))
        return changes

    def projected_rows(self) -> Touched:
        with self._lock:
            self._read_through = self._projections
            return {table: dict.fromkeys(keys) for table, keys in self._projection.items() if keys}

    def read_back(self, touched: Touched) -> None:
        """The rows a refresh read again from the database: projections up to the one it covered are done."""
        with self._lock:
            for table, keys in touched.items():
                left = self._projection.get(table)
                if left:
                    for key in keys:
                        if left.get(key, self._read_through + 1) <= self._read_through:
                            del left[key]
            self.projected = any(self._projection.values())

    def forget(self) -> None:
        """A whole state was taken from the database: no projection is left in the engine."""
        with self._lock:
            self.projected = False
            self._projection = {}


class SharedService:
    """A process of a shared database: its runtime (``Maintenance``), which plays the leader's role (``Leading``) or
    a replica's (``Following``), and what the replication node asks of it."""

    def __init__(self, runtime: Maintenance, following: Following):
        self.runtime = runtime
        self.following = following
        self.leading = Leading()

    @classmethod
    def open(
        cls,
        store: SQLStore,
        fleet: Fleet | None,
        clock_mode: str | None = None,
        speed: float | None = None,
        start: datetime | None = None,
        seed: str | None = None,
        rules: Rules | None = None,
        outboxes: Iterable[Callable[[list[Change], Engine], list[Outgoing]]] = (),
    ) -> SharedService:
        """As ``Maintenance.open``, following until it is promoted: a leader is one once it holds the lock
        (``promote``)."""
        following = Following()
        runtime = Maintenance.open(
            store, fleet, clock_mode, speed, start, seed, rules, outboxes=outboxes, role=following
        )
        return cls(runtime, following)

    @classmethod
    def replica_of(cls, store: SQLStore, state: StoredState, rules: Any, fleet: Any) -> SharedService:
        """A replica's service over what the database holds (nothing is written)."""
        following = Following()
        engine = Maintenance.engine_from(state, rules, fleet)
        return cls(Maintenance(store, engine, state.clock.within_bounds()[0], role=following), following)

    # ----------------------------------------------------------------------------------------- the runtime
    @property
    def role(self) -> str:
        return LEADER if self.runtime.role is self.leading else REPLICA

    @property
    def store(self) -> SQLStore:
        return self.runtime.store

    def settled_engine(self) -> Engine:
        return self.runtime.settled_engine()

    @property
    def clock(self) -> Clock:
        return self.runtime.clock

    @property
    def wall(self) -> Callable[[], float]:
        return self.runtime.wall

    @wall.setter
    def wall(self, wall: Callable[[], float]) -> None:
        self.runtime.wall = wall

    @property
    def engine_building(self) -> Callable[[], contextlib.AbstractContextManager[None]]:
        """What surrounds building a whole engine, or anything as large, in a thread (``Maintenance``'s)."""
        return self.runtime.engine_building

    @engine_building.setter
    def engine_building(self, around: Callable[[], contextlib.AbstractContextManager[None]]) -> None:
        self.runtime.engine_building = around

    def subscribe(self, listener: Callable[[list[Change]], None]) -> None:
        self.runtime.subscribe(listener)

    def catch_up(self) -> list[Change]:
        return self.runtime.catch_up()

    # ------------------------------------------------------------------------------------ the roles' state
    @property
    def no_leader_reason(self) -> str:
        return self.following.no_leader_reason

    @no_leader_reason.setter
    def no_leader_reason(self, reason: str) -> None:
        self.following.no_leader_reason = reason

    @property
    def seen_here(self) -> set[str]:
        return self.following.seen_here

    @seen_here.setter
    def seen_here(self, scopes: set[str]) -> None:
        self.following.seen_here = scopes

    @property
    def projected(self) -> bool:
        return self.following.projected

    @property
    def command_seconds(self) -> list[float]:
        return self.leading.command_seconds

    @command_seconds.setter
    def command_seconds(self, latencies: list[float]) -> None:
        self.leading.command_seconds = latencies

    def seen_at_replica(self, scopes: list[str]) -> list[Awaitable[object]]:
        """The leader's side of a replica's report: the scopes its VMs asked for, each as if asked here (the commits
        that makes, to await)."""
        return self.runtime.reads_relayed(scopes)

    def _loaded(self) -> tuple[StoredState, Engine]:
        """The state the database holds, and an engine built from it."""
        try:
            state = self.store.load()
        except StoreError as error:
            raise Unavailable(str(error), error.retry_after) from error
        if state is None:
            raise Unavailable("the database holds no fleet")
        return state, self.engine_of(state)

    # -------------------------------------------------------------------------------------------- replica
    def engine_of(self, state: StoredState) -> Engine:
        """An engine over a state the leader committed (built off the event loop: the costly part of a refresh)."""
        return Maintenance.engine_from(state, self.settled_engine().rules, self.settled_engine().fleet)

    def replace(self, engine: Engine, state: StoredState) -> None:
        """A replica takes a whole state the leader committed (called on the event loop, so no request sees half of
        it)."""
        if self.role == LEADER:
            return
        self.following.forget()
        self.runtime.adopt(engine, state.clock.within_bounds()[0], Rebuilt("replicated from the leader"))
        self.catch_up()  # deadlines that passed since the leader's commit (real clocks)

    def projected_rows(self) -> Touched:
        """The rows this replica's projections changed since its last refresh (a copy: read from another thread,
        for the refresh about to be read, which ``replicate`` then takes)."""
        return self.following.projected_rows()

    def replicate(self, changed: StoredChanges, catch_up: bool = True) -> None:
        """A replica takes the rows the leader's commits touched (and those its own projections changed, read back),
        on the event loop: each request sees the engine before or after, never half of it. The read models hear of
        what moved, so that only the touched scopes' documents are rendered again. ``catch_up``: then apply the
        deadlines that passed since (real clocks)."""
        if self.role == LEADER:
            return

        def take(engine: Engine) -> list[Change]:
            changes = engine.replicate(changed.now, changed.next_seq, changed.created_at, changed.records)
            self.following.read_back(changed.touched)
            return changes

        changes = self.runtime.follow(take, changed.clock.within_bounds()[0])
        if any(isinstance(change, Rebuilt) for change in changes):
            changes = [Rebuilt("replicated from the leader")]
        self.runtime.tell(changes)
        if catch_up:
            self.catch_up()

    # ------------------------------------------------------------------------------------------- failover
    def promote(
        self,
        position: int | None = None,
        reschedule: bool = True,
        deadlines: Heap | None = None,
        built: tuple[StoredState, Engine] | None = None,
    ) -> None:
        """Become the leader (the caller holds the lock), then commit the deadlines that passed while nobody led.

        ``position``: the engine holds exactly what was committed up to that position of the journal (a replica
        that has just read the last commits): it is kept, with its deadlines set again from its state
        (``reschedule``; ``deadlines``: as ``Engine.deadlines_again`` set them from this state, in a thread), as
        loading the state would set them. Without it, or when a projection of this replica's is left in the engine,
        the engine is rebuilt from the database (``built``: the state loaded and its engine, built in a thread)."""
        if position is not None and not self.projected:
            if reschedule:
                replaced = self.runtime.follow(lambda engine: engine.reschedule(deadlines))
                threading.Thread(
                    target=empty_in_slices, args=(replaced,), name="forewarn-dismantle", daemon=True
                ).start()
            self.store.position = position
            self.runtime.role = self.leading
            self.catch_up()
            return
        state, engine = self._loaded() if built is None else built
        self.store.position = state.position
        self.following.forget()
        self.runtime.role = self.leading
        self.runtime.adopt(engine, state.clock.within_bounds()[0], Rebuilt("became the leader"))
        self.catch_up()
