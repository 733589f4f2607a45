"""Who leads a shared PostgreSQL database, and how the others hear of its commits.

A ``Lease`` is one dedicated connection (autocommit) per process. Leadership is a session advisory lock taken on it:
PostgreSQL holds the lock as long as the session lives and frees it when the session ends (a leader killed with
``kill -9`` closes its socket, the server ends the session). The lock's key is derived from the schema the URL
selects, so that several forewarn databases (schemas) in one PostgreSQL server each have their own leader.

The leader publishes itself in ``forewarn_leader`` (its addresses and its position: the last commit it wrote in
``forewarn_changes``, updated after each commit) and sends ``NOTIFY forewarn_changes`` with the new position. A
replica listens on the same kind of connection, and also reads the journal every few seconds, so that a notification
that was lost (the leader died between its commit and its notify) only delays a replica, never leaves it behind for
good. The leader also prunes the journal (``prune``).
"""

from __future__ import annotations

import json
import logging
import select
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from forewarn.store import writer
from forewarn.store.errors import StoreError, StoreUnavailable
from forewarn.store.postgres import CONNECTION_DEFAULTS, PostgresStore, Session, redacted

log = logging.getLogger("forewarn.replication")

CHANNEL = "forewarn_changes"
FENCE_WAIT = 5.0  # seconds a new leader waits for the previous leader's store session to end


@dataclass(frozen=True)
class LeaderRow:
    """What the leader published: who (``node``), its term (one more at each new leader), its position, where its
    surfaces answer (``addresses``: surface name to ``http://host:port``) and its store session's backend pid."""

    node: str
    term: int
    position: int
    addresses: dict[str, str]
    store_pid: int | None
    since: str
    role: str = "leader"  # writer.SINGLE: a single server holds the database (it journals nothing for replicas)


class Lease:
    def __init__(self, url: str):
        self.description = redacted(url)
        options = {key: value for key, value in CONNECTION_DEFAULTS.items() if key not in url}
        options["application_name"] = "forewarn-lease"
        try:
            self.connection = psycopg.connect(make_conninfo(url, **options), autocommit=True)
            self.key = writer.lock_key(self.connection)  # the writer's lock, which a single server takes too
        except psycopg.Error as error:
            raise StoreError(f"cannot connect to PostgreSQL at {redacted(url)}: {error}".strip()) from None
        self.held = False
        self._lock = threading.Lock()  # the connection is used by the replication thread and the event loop

    def _execute(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            try:
                cursor = self.connection.execute(sql, params)
                return list(cursor.fetchall()) if cursor.description else []
            except psycopg.Error as error:
                raise StoreUnavailable(f"{self.description}: {' '.join(str(error).split())}") from None

    def alive(self) -> bool:
        """Whether the session (and so a lock it holds) still exists: one round trip."""
        try:
            self._execute("SELECT 1")
            return True
        except StoreUnavailable:
            return False

    def try_acquire(self) -> bool:
        """Take the leader's lock if no session holds it; never waits."""
        row = self._execute("SELECT pg_try_advisory_lock(%s)", (self.key,))
        self.held = bool(row and row[0][0])
        return self.held

    def publish(self, node: str, addresses: dict[str, str], store_pid: int | None, position: int) -> LeaderRow:
        """As the new leader: one more term, where to reach it, and the position of the state it holds."""
        since = datetime.now(UTC).isoformat()
        rows = self._execute(
            "INSERT INTO forewarn_leader (id, node, term, position, addresses, store_pid, since, role, lock_pid) "
            "VALUES (1, %s, 1, %s, %s, %s, %s, 'leader', pg_backend_pid()) ON CONFLICT (id) DO UPDATE SET "
            "node = EXCLUDED.node, term = forewarn_leader.term + 1, position = EXCLUDED.position, "
            "addresses = EXCLUDED.addresses, store_pid = EXCLUDED.store_pid, since = EXCLUDED.since, "
            "role = EXCLUDED.role, lock_pid = EXCLUDED.lock_pid RETURNING term, position",
            (node, position, json.dumps(addresses), store_pid, since),
        )
        term, published = rows[0]
        self._execute("SELECT pg_notify(%s, %s)", (CHANNEL, str(published)))
        return LeaderRow(node, int(term), int(published), addresses, store_pid, since)

    def bump(self, position: int) -> int:
        """After a commit: its position, and a notification carrying it."""
        rows = self._execute(
            "UPDATE forewarn_leader SET position = GREATEST(position, %s) RETURNING position", (position,)
        )
        published = int(rows[0][0]) if rows else 0
        self._execute("SELECT pg_notify(%s, %s)", (CHANNEL, str(published)))
        return published

    def prune(self, older_than_ms: int) -> int:
        """Forget the journal entries written before ``older_than_ms`` (the newest stays: it carries the position);
        how many went. A replica that was further behind loads the whole state once."""
        rows = self._execute(
            "WITH gone AS (DELETE FROM forewarn_changes WHERE written_ms < %s "
            "AND position < (SELECT MAX(position) FROM forewarn_changes) RETURNING 1) SELECT count(*) FROM gone",
            (older_than_ms,),
        )
        return int(rows[0][0]) if rows else 0

    def leader(self) -> LeaderRow | None:
        rows = self._execute("SELECT node, term, position, addresses, store_pid, since, role FROM forewarn_leader")
        if not rows:
            return None
        node, term, position, addresses, store_pid, since, role = rows[0]
        return LeaderRow(node, int(term), int(position), json.loads(addresses), store_pid, since, role or "leader")

    def holder(self) -> writer.Holder | None:
        """The session that holds the lock now, and what its process published of itself."""
        with self._lock:
            try:
                return writer.holder(self.connection, self.key)
            except psycopg.Error as error:
                raise StoreUnavailable(f"{self.description}: {' '.join(str(error).split())}") from None

    def end_session(self, row: LeaderRow) -> None:
        """End the previous leader's store session if it still runs (fencing: a leader that lost its lock must not
        commit again), and wait for it to be over, so that a commit it had under way is either in the journal or
        never will be. Only a session that started before that leader published itself: a backend pid may have
        been reused since."""
        match = "FROM pg_stat_activity WHERE pid = %s AND pid <> pg_backend_pid() AND backend_start <= %s::timestamptz"
        self._execute(f"SELECT pg_terminate_backend(pid) {match}", (row.store_pid, row.since))
        give_up = time.monotonic() + FENCE_WAIT
        while self._execute(f"SELECT 1 {match}", (row.store_pid, row.since)):
            if time.monotonic() > give_up:
                log.warning("the previous leader's database session (backend %s) still runs", row.store_pid)
                return
            time.sleep(0.02)

    def listen(self) -> None:
        self._execute(f"LISTEN {CHANNEL}")

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for notifications; whether any came. Raises StoreUnavailable when the
        connection is lost."""
        if self._drain():
            return True
        try:
            ready, _, _ = select.select([self.connection.fileno()], [], [], timeout)
        except (OSError, ValueError, psycopg.Error) as error:
            raise StoreUnavailable(f"{self.description}: {error}") from None
        return bool(ready) and (self._drain() > 0 or self.alive_or_raise())

    def alive_or_raise(self) -> bool:
        """Readable with no notification: the server may have closed the session. False when it is alive."""
        self._execute("SELECT 1")
        return False

    def _drain(self) -> int:
        with self._lock:
            try:
                return sum(1 for _ in self.connection.notifies(timeout=0, stop_after=1000))
            except psycopg.Error as error:
                raise StoreUnavailable(f"{self.description}: {' '.join(str(error).split())}") from None

    def close(self) -> None:
        try:
            self.connection.close()
        except psycopg.Error:
            pass


class SnapshotStore(PostgresStore):
    """A store whose every transaction is REPEATABLE READ: a replica's load is one consistent snapshot of what the
    leader committed, never half of a commit (under READ COMMITTED each statement sees the commits done by then)."""

    def _connect(self) -> tuple[psycopg.Connection, Session]:
        connection, session = super()._connect()
        connection.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        return connection, session
