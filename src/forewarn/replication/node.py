"""One process of a shared forewarn: which role it has, how a replica follows the leader, how it takes over.

A thread (``forewarn-replication``) owns the lease connection. As a replica it waits for the leader's NOTIFY, or
``catch_up_interval`` seconds; then reads the leader's row and, when the position moved, loads the committed state on
its own connection (one REPEATABLE READ transaction: a consistent snapshot), builds the engine, and hands it to the
event loop, which swaps it in between two requests. Every ``failover_poll`` seconds (role ``shared``) it tries the
leader's lock; once it has it, the event loop promotes the service (``SharedService.promote``), ends the old
leader's store session if it somehow still runs, publishes this process as the leader and starts what only a leader
runs (the outbox). As the leader, the thread checks every ``failover_poll`` seconds that its session (and so its lock)
is alive; a leader whose lock may have passed to another process exits at once (status 70), as committing on would
split the brain.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from forewarn import __version__
from forewarn.app.errors import Unavailable
from forewarn.core.changes import Change
from forewarn.replication.forward import Leaders
from forewarn.replication.shared import LEADER, SharedService
from forewarn.store import SQLStore, StoreError
from forewarn.store.lease import LeaderRow, Lease, node_name

log = logging.getLogger("forewarn.replication")

SHARED = "shared"  # leads when it can, else follows and takes over
REPLICA = "replica"  # follows, never leads


@dataclass(frozen=True)
class NodeSettings:
    role: str = SHARED
    failover_poll: float = 2.0
    catch_up_interval: float = 1.0


@dataclass
class Counts:
    """What the metrics report, counted in plain ints on the paths that serve requests."""

    requests: dict[tuple[str, int], int] = field(default_factory=dict)
    failovers: int = 0
    refreshes: int = 0
    refresh_seconds: float = 0.0


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
        self.loaded: tuple[int, int] = (0, 0)  # (term, position) of the state this replica holds
        self.behind_since: float | None = None
        self.database_ok = True
        self.database_error = ""
        self.on_promoted: list[Callable[[], None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None
        self._bumping = False
        leaders.held = lambda: self.loaded

    # ------------------------------------------------------------------------------------------- start
    def lead_now(self) -> None:
        """At start-up, with the lock held: publish this process as the leader (the service already leads)."""
        self._publish()

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread = threading.Thread(target=self._follow, name="forewarn-replication", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closing.set()

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
                if self.settings.role == SHARED and time.monotonic() >= next_try:
                    next_try = time.monotonic() + self.settings.failover_poll
                    if self.lease.try_acquire():
                        self._promote()
                        continue
                row = self.lease.leader()
                self._saw(row)
                if row is not None and (row.term, row.position) != self.loaded:
                    if reader is None:
                        reader = self.open_reader()
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
        self.leader_row = row
        self.leaders.addresses = {} if row is None else dict(row.addresses)
        if row is not None and (row.term, row.position) != self.loaded and self.behind_since is None:
            self.behind_since = time.monotonic()

    def _refresh(self, reader: SQLStore, row: LeaderRow) -> None:
        started = time.perf_counter()
        state = reader.load()
        if state is None:
            return
        engine = self.service.engine_of(state)
        self._on_loop(lambda: self.service.replace(engine, state))
        self.loaded = (row.term, row.position)
        self.behind_since = None
        self.counts.refreshes += 1
        self.counts.refresh_seconds += time.perf_counter() - started

    def _on_loop(self, action: Callable[[], None]) -> None:
        assert self._loop is not None

        async def run() -> None:
            action()

        asyncio.run_coroutine_threadsafe(run(), self._loop).result()

    def _promote(self) -> None:
        started = time.monotonic()
        old = self.leader_row
        try:
            self._on_loop(self._take_over)
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

    def _take_over(self) -> None:
        old = self.lease.leader()
        own_pid = self._store_pid()
        if old is not None and old.store_pid and old.store_pid != own_pid:
            self.lease.end_session(old)  # fencing: a leader that lost its lock must not commit again
        self.service.promote()
        self._publish()
        for hook in self.on_promoted:
            hook()

    def _publish(self) -> None:
        self.leader_row = self.lease.publish(self.name, self.addresses, self._store_pid())
        self.loaded = (self.leader_row.term, self.leader_row.position)
        self.behind_since = None
        if not self._bumping:
            self._bumping = True
            self.service.subscribe(self._bump)

    def _store_pid(self) -> int | None:
        connection = getattr(self.service.store, "connection", None)
        info = getattr(connection, "info", None)
        return getattr(info, "backend_pid", None)

    def _bump(self, changes: list[Change]) -> None:
        try:
            position = self.lease.bump()
        except StoreError as error:  # the lease thread finds out whether the lock is still ours
            log.error("could not publish a committed change to the replicas: %s", error)
            return
        if self.leader_row is not None:
            self.loaded = (self.leader_row.term, position)

    def _watch_lease(self) -> None:
        if self._closing.wait(self.settings.failover_poll):
            return
        if not self.lease.alive():
            log.critical("lost the database session that holds the leader's lock; exiting (another process may lead)")
            logging.shutdown()
            os._exit(70)

    def _reconnect(self) -> None:
        try:
            lease = Lease(self.url)
        except StoreError as error:
            self._unreachable(error)
            return
        self.lease.close()
        self.lease = lease

    def _reachable(self) -> None:
        if not self.database_ok:
            log.warning("the database is reachable again; following the leader")
        self.database_ok = True
        self.database_error = ""

    def _unreachable(self, error: Exception) -> None:
        if self.database_ok:
            log.error("database unreachable (%s); serving the last state replicated, as it was", error)
        self.database_ok = False
        self.database_error = str(error)

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
        seen = row.position if row is not None else 0
        lag_changes = 0 if leader else max(0, seen - self.loaded[1]) if row and row.term == self.loaded[0] else None
        lag_seconds = 0.0 if leader or self.behind_since is None else time.monotonic() - self.behind_since
        return {
            "status": "ok",
            "version": __version__,
            "role": self.service.role,
            "node": self.name,
            "leader": None if row is None else {"node": row.node, "term": row.term, "since": row.since},
            "position": self.loaded[1],
            "lag": {"changes": lag_changes, "seconds": round(lag_seconds, 3)},
            "database": {"reachable": self.database_ok and self._store_reachable(), "error": self.database_error},
            "projected": self.service.projected,
            "failovers": self.counts.failovers,
        }

    def _store_reachable(self) -> bool:
        if self.service.role != LEADER:
            return True
        try:
            self.service.store.ready()
            return True
        except (StoreError, Unavailable):
            return False

    def ready(self) -> bool:
        """Whether to send traffic here: a leader that reaches its database, or a replica holding a state."""
        if self.service.role == LEADER:
            return self._store_reachable()
        return self.loaded != (0, 0)

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
