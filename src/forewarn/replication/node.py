"""One process of a shared forewarn: which role it has, how a replica follows the leader, how it takes over.

A thread (``forewarn-replication``) owns the lease connection. As a replica it waits for the leader's NOTIFY, or
``catch_up_interval`` seconds; then reads, on its own connection and in one REPEATABLE READ transaction (a consistent
snapshot, never half a commit), the journal entries past the position it holds and the rows they name
(``SQLStore.changes_since``), and hands them to the event loop, which applies them between two requests
(``SharedService.replicate``). When the journal cannot tell (pruned past that position, a reset) or applying fails, it
loads the whole state instead, builds an engine off the event loop, and swaps it in. Every ``failover_poll`` seconds
(role ``shared``) it tries the leader's lock; once it has it, it ends the old leader's store session if it somehow
still runs, reads the last commits as a refresh does, and the event loop promotes the service
(``SharedService.promote``: the engine it holds is kept), publishes this process as the leader and starts what only a
leader runs (the outbox). As the leader, the thread checks every ``failover_poll`` seconds that its session (and so
its lock) is alive, and prunes the journal; a leader whose lock may have passed to another process exits at once
(status 70), as committing on would split the brain.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from forewarn import __version__
from forewarn.core.changes import Change
from forewarn.core.scheduler import Heap
from forewarn.engine.engine import Engine
from forewarn.replication.counts import Counts
from forewarn.replication.forward import Leaders
from forewarn.replication.shared import LEADER, SharedService
from forewarn.store import SQLStore, StoredChanges, StoredState, StoreError
from forewarn.store.lease import LeaderRow, Lease
from forewarn.store.writer import SINGLE, node_name

log = logging.getLogger("forewarn.replication")
T = TypeVar("T")

SHARED = "shared"  # leads when it can, else follows and takes over
REPLICA = "replica"  # follows, never leads
JOURNAL_RETENTION = 600.0  # seconds the leader keeps journal entries: a replica further behind loads everything
PRUNE_EVERY = 30.0  # seconds between two prunings of the journal


@dataclass(frozen=True)
class NodeSettings:
    role: str = SHARED
    failover_poll: float = 2.0
    catch_up_interval: float = 1.0
    journal_retention: float = JOURNAL_RETENTION


class Node:
    def __init__(
        self,
        service: SharedService,
        url: str,
        lease: Lease,
        open_reader: Callable[[], SQLStore],
        settings: NodeSettings,
        leaders: Leaders,
    ):
        self.service = service
        self.url = url
        self.lease = lease
        self.open_reader = open_reader
        self.settings = settings
        self.leaders = leaders
        self.name = node_name()
        self.addresses: dict[str, str] = {}
        self.advertise_host: str | None = None  # the host others reach this process at; None: its listening host
        self.counts = Counts()
        self.leader_row: LeaderRow | None = None
        # (term, position) of the state this replica holds: the leader's term when it read it, and the last commit
        # in the journal it includes (the leader holds its store's position)
        self.loaded: tuple[int, int] = (0, service.store.position)
        self.synced = False  # a replica has read the journal at least once (or leads)
        self.behind_since: float | None = None
        # The latest outcome of a real operation on the database: the replication thread's reads, the service's
        # commits and the server's periodic probe (one object: the store's).
        self.reachability = service.store.reachability
        self.on_promoted: list[Callable[[], None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None
        self._bumping = False
        self._to_publish = 0  # the newest committed position the leader's thread is to publish
        self._wake = threading.Event()  # set when there is one, or when closing
        self._next_prune = 0.0
        leaders.held = self.held
        try:  # a replica knows its leader before it serves (the thread reads the row again at once)
            self._saw(lease.leader())
        except StoreError:
            pass

    # ------------------------------------------------------------------------------------------- start
    def lead_now(self) -> None:
        """At start-up, with the lock held: publish this process as the leader (the service already leads)."""
        self._publish()

    def held(self) -> tuple[int, int]:
        """The (term, position) of the state this process holds."""
        if self.service.role == LEADER:
            return self.loaded[0], self.service.store.position
        return self.loaded

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread = threading.Thread(target=self._follow, name="forewarn-replication", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closing.set()
        self._wake.set()

    # ------------------------------------------------------------------------------------------ thread
    def _follow(self) -> None:
        reader: SQLStore | None = None
        next_try = 0.0
        listening = False
        while not self._closing.is_set():
            if self.service.role == LEADER:
                self._watch_lease()
                continue
            try:
                if not listening:
                    self.lease.listen()
                    listening = True
                if reader is None:
                    reader = self.open_reader()
                if self.settings.role == SHARED and time.monotonic() >= next_try:
                    next_try = time.monotonic() + self.settings.failover_poll
                    if self.lease.try_acquire():
                        self._promote(reader)
                        continue
                row = self.lease.leader()
                self._saw(row)
                self._refresh(reader, row)
                self._reachable()
                wait = self.settings.catch_up_interval
                if self.settings.role == SHARED:
                    wait = max(0.0, min(wait, next_try - time.monotonic()))
                self.lease.wait(wait)
            except StoreError as error:
                self._unreachable(error)
                listening = False
                if reader is not None:
                    reader.close()
                    reader = None
                if self._closing.wait(self.settings.catch_up_interval):
                    return
                self._reconnect()

    def _saw(self, row: LeaderRow | None) -> None:
        if row is not None and row.role == SINGLE and (self.leader_row is None or self.leader_row.role != SINGLE):
            log.error("a single server (%s) writes to the database: it journals nothing to follow", row.node)
            self.service.no_leader_reason = f"a single server ({row.node}) writes to the database"
        self.leader_row = row
        self.leaders.addresses = {} if row is None else dict(row.addresses)
        if row is not None and row.position > self.loaded[1] and self.behind_since is None:
            self.behind_since = time.monotonic()

    def _refresh(self, reader: SQLStore, row: LeaderRow | None) -> None:
        """Take what was committed since the position this replica holds: the rows the journal names (one
        transaction), or the whole state when the journal cannot tell. Nothing when nothing was committed."""
        started = time.perf_counter()
        term = row.term if row is not None else self.loaded[0]
        changed = self._changes(reader)
        self.synced = True
        if changed is not None and changed.commits == 0:
            return
        if changed is not None and self._apply(changed):
            position = changed.position
        else:
            with self.service.engine_building():
                state = reader.load()
                if state is None:
                    return
                engine = self.service.engine_of(state)
            self._on_loop(lambda: self.service.replace(engine, state))
            position = state.position
            self.counts.full_reloads += 1
        self.loaded = (term, position)
        if row is None or position >= row.position:
            self.behind_since = None
        self.counts.refreshes += 1
        self.counts.refresh_seconds += time.perf_counter() - started

    def _changes(self, reader: SQLStore) -> StoredChanges | None:
        """The commits past the position held, and the rows they (and this replica's projections) touched; None
        when the whole state is to be loaded (the journal cannot tell)."""
        return reader.changes_since(self.loaded[1], self.service.projected_rows())

    def _apply(self, changed: StoredChanges) -> bool:
        """Apply a refresh on the event loop; False when it failed (the whole state is loaded instead: the engine
        may hold half of it)."""
        try:
            self._on_loop(lambda: self.service.replicate(changed))
        except Exception:  # a refresh the engine cannot take must not stop the replica from following
            log.exception("applying the leader's commits %s failed; loading the whole state", changed.position)
            return False
        return True

    def _on_loop(self, action: Callable[[], T]) -> T:
        assert self._loop is not None

        async def run() -> T:
            return action()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result()

    def _promote(self, reader: SQLStore) -> None:
        started = time.monotonic()
        old = self.leader_row
        try:
            self._fence()
            previous = self.lease.leader()
            single = previous.node if previous is not None and previous.role == SINGLE else None
            after_single = single is not None
            changed: StoredChanges | None = None
            if after_single:
                log.warning("a single server (%s) wrote last, journaling nothing: loading the whole state", single)
            else:
                try:
                    changed = self._changes(reader)
                except StoreError as error:
                    log.warning("reading the last commits failed (%s); loading the whole state", error)
            self._lead(changed, after_single, reader)
        except Exception as error:  # holding the lock without leading would stop every other process taking over
            log.critical("taking over as the leader failed (%s); exiting so that another process can", error)
            logging.shutdown()
            os._exit(70)
        self.counts.failovers += 1
        log.warning(
            "became the leader in %.2f s (term %s; the previous leader was %s)",
            time.monotonic() - started,
            self.leader_row.term if self.leader_row else "?",
            old.node if old else "none",
        )

    def _fence(self) -> None:
        """End the old leader's store session if it still runs: a leader that lost its lock must not commit again,
        and a commit it had under way is in the journal or never will be, before this process reads it."""
        old = self.lease.leader()
        if old is not None and old.store_pid and old.store_pid != self._store_pid():
            self.lease.end_session(old)

    def _lead(self, changed: StoredChanges | None, after_single: bool, reader: SQLStore) -> None:
        """Lead with the engine held, once it took the last commits and its deadlines are set again from the state
        they leave; or, when it cannot be kept (the journal could not tell, or a projection of this replica's is
        left in it), with an engine built from the database. What costs the whole state (the pass over every event,
        or the load and the build: seconds at a million) runs in this thread while the event loop answers. No
        deadline is applied here meanwhile: the state stays as it is."""
        following = self.service.following
        following.held = True
        try:
            if changed is not None:
                position = self._on_loop(lambda: self._take_last(changed, after_single))
                if position is None:  # taken over already, with the database's state
                    return
                if not self._on_loop(lambda: self.service.projected):
                    apart = self._deadlines_apart()
                    self._on_loop(lambda: self._take_over(position, after_single, apart=apart))
                    return
            with self.service.engine_building():
                state = reader.load()
                if state is None:
                    raise StoreError(f"{reader.description}: the database holds no fleet")
                built = (state, self.service.engine_of(state))
            self._on_loop(lambda: self._take_over(None, after_single, built=built))
        finally:
            following.held = False

    def _deadlines_apart(self) -> tuple[Engine, Heap] | None:
        """The engine held, and its deadlines set again in this thread; None if the pass failed (a container changed
        under it: a read's lazy index), for the loop to set them."""
        engine = self._on_loop(self.service.settled_engine)
        try:
            with self.service.engine_building():
                return engine, engine.deadlines_again()
        except Exception:
            log.exception("setting the deadlines again off the event loop failed; setting them on it")
            return None

    def _take_last(self, changed: StoredChanges, after_single: bool) -> int | None:
        """On the event loop: the last commits taken, and their position. None when applying them failed: then, in
        the same go (no request sees half of them), this process leads with an engine rebuilt from the database."""
        try:
            if changed.commits:
                self.service.replicate(changed, catch_up=False)
            return changed.position
        except Exception:  # the engine may hold half of them: the database's state instead
            log.exception("applying the last commits failed; loading the whole state to lead")
        self._take_over(None, after_single)
        return None

    def _take_over(
        self,
        position: int | None,
        after_single: bool,
        apart: tuple[Engine, Heap] | None = None,
        built: tuple[StoredState, Engine] | None = None,
    ) -> None:
        """On the event loop: lead with the engine held, its deadlines set again (``apart``: set in a thread from
        that engine, which nothing has changed since), or (``position`` None) with an engine built from the database
        (``built``: in a thread; otherwise here)."""
        deadlines = apart[1] if apart is not None and apart[0] is self.service.settled_engine() else None
        self.service.promote(position, deadlines=deadlines, built=built)
        if after_single:  # the other replicas load the whole state too: the journal misses the single's commits
            self.service.store.journal_reset()
        self._publish()
        for hook in self.on_promoted:
            hook()

    def _publish(self) -> None:
        store = self.service.store
        self.leader_row = self.lease.publish(self.name, self.addresses, self._store_pid(), store.position)
        self.loaded = (self.leader_row.term, store.position)
        self.behind_since = None
        if not self._bumping:
            self._bumping = True
            self.service.subscribe(self._bump)

    def _store_pid(self) -> int | None:
        connection = getattr(self.service.store, "connection", None)
        info = getattr(connection, "info", None)
        return getattr(info, "backend_pid", None)

    def _bump(self, changes: list[Change]) -> None:
        """After each commit, on the event loop: hand its position to the thread that publishes it. The lease's
        connection is the thread's (its checks, the journal's pruning), and a round trip on the loop would wait
        for them."""
        position = self.service.store.position
        if position <= self.loaded[1]:
            return  # nothing journaled (a reset announces itself and has its own position; a rebuild has none)
        self._to_publish = max(self._to_publish, position)
        self._wake.set()

    def _publish_position(self) -> None:
        position = self._to_publish
        if position <= self.loaded[1]:
            return
        try:
            self.lease.bump(position)
        except StoreError as error:  # the lease thread finds out whether the lock is still ours
            log.error("could not publish a committed change to the replicas: %s", error)
            return
        self.loaded = (self.loaded[0], position)

    def _watch_lease(self) -> None:
        """The leader's thread: publishes the positions the loop hands over as they come (several commits meanwhile
        are one notification, of the newest), and every ``failover_poll`` checks that the session holding its lock
        lives and prunes the journal."""
        deadline = time.monotonic() + self.settings.failover_poll
        while (left := deadline - time.monotonic()) > 0:
            self._wake.wait(left)
            if self._closing.is_set():
                return
            if self._wake.is_set():
                self._wake.clear()
                self._publish_position()
        if not self.lease.alive():
            log.critical("lost the database session that holds the leader's lock; exiting (another process may lead)")
            logging.shutdown()
            os._exit(70)
        if time.monotonic() >= self._next_prune:
            self._next_prune = time.monotonic() + PRUNE_EVERY
            try:
                pruned = self.lease.prune(int((time.time() - self.settings.journal_retention) * 1000))
            except StoreError as error:
                log.warning("could not prune the journal of changes: %s", error)
                return
            if pruned:
                log.info("pruned %s journal entries older than %g s", pruned, self.settings.journal_retention)

    def _reconnect(self) -> None:
        try:
            lease = Lease(self.url)
        except StoreError as error:
            self._unreachable(error)
            return
        self.lease.close()
        self.lease = lease

    def _reachable(self) -> None:
        if not self.reachability.reachable:
            log.warning("the database is reachable again; following the leader")
        self.reachability.succeeded()

    def _unreachable(self, error: Exception) -> None:
        if self.reachability.reachable:
            log.error("database unreachable (%s); serving the last state replicated, as it was", error)
        self.reachability.failed(error)

    # ------------------------------------------------------------------------------------------ probes
    def describe(self) -> str:
        if self.service.role == LEADER:
            return f"the leader of the shared database (other processes forward their writes here; {self.name})"
        following = "follows" if self.settings.role == REPLICA else "follows, takes over when the leader dies"
        leader = self.leader_row.node if self.leader_row else "none yet"
        return f"a metadata replica (leader: {leader}; {following}; {self.name})"

    def health(self) -> dict[str, Any]:
        row = self.leader_row
        leader = self.service.role == LEADER
        lag_changes = 0 if leader else None if row is None else max(0, row.position - self.loaded[1])
        lag_seconds = 0.0 if leader or self.behind_since is None else time.monotonic() - self.behind_since
        return {
            "status": "ok",
            "version": __version__,
            "pid": os.getpid(),
            "role": self.service.role,
            "node": self.name,
            "leader": None if row is None else {"node": row.node, "term": row.term, "since": row.since},
            "position": self.held()[1],
            "lag": {"changes": lag_changes, "seconds": round(lag_seconds, 3)},
            "database": self.reachability.report(),
            "projected": self.service.projected,
            "failovers": self.counts.failovers,
        }

    def ready(self) -> bool:
        """Whether to send traffic here: a leader that reached its database in its latest operation on it, or a
        replica holding a state."""
        if self.service.role == LEADER:
            return self.reachability.reachable and not self.reachability.stale
        return self.synced

    def probe(self, path: str) -> tuple[int, bytes, bytes] | None:
        """The answer to ``GET /healthz``, ``/readyz`` or ``/metrics`` on the control port; None for other paths."""
        if path == "/healthz":
            return 200, b"application/json", json.dumps(self.health()).encode()
        if path == "/readyz":
            body = self.health()
            ready = self.ready()
            body["status"] = "ready" if ready else "not ready"
            return (200 if ready else 503), b"application/json", json.dumps(body).encode()
        if path == "/metrics":
            from forewarn.replication.metrics import exposition

            content_type, text = exposition(self)
            return 200, content_type.encode(), text
        return None
