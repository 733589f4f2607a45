"""One writer per PostgreSQL database: the lock every writing process holds, and who holds it.

Two processes writing one database would each run an engine over the other's commits: both hand out the same
EventId for different events, and the later commit overwrites the earlier. So every process that writes (a
``--role single`` server, and the leader of a shared database) holds a PostgreSQL session advisory lock while it
writes, keyed by the schema the URL selects, so that several forewarn databases (schemas) in one PostgreSQL server
each have their own writer. PostgreSQL frees the lock when the session ends (a process killed with ``kill -9``
closes its socket; a network cut ends it once the server notices).

A single server takes the lock on its store's own connection: its writes and its lock live and die together, so no
write can reach the database from a session that does not hold the lock. A shared leader takes it on its lease
connection (store/lease.py), and fences the previous leader's store session. Either publishes itself in
``forewarn_leader`` (``role`` and ``lock_pid``, the backend holding the lock), so that a process refused the lock
can name the one that holds it.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from forewarn.store.errors import StoreUnavailable

if TYPE_CHECKING:  # imported where used: SINGLE and node_name serve replication without PostgreSQL's driver loaded
    import psycopg

SINGLE = "single"  # the row's role of a server that writes alone (a shared leader's is "leader")
LOCK_KEY = "SELECT hashtext('forewarn:' || current_schema())"  # the lock's key (lock_key)

# The session holding the advisory lock on a single bigint key: PostgreSQL splits the key into classid (high 32
# bits) and objid (low 32 bits), objsubid 1.
_HOLDER = (
    "SELECT l.pid, a.application_name, host(a.client_addr), a.backend_start FROM pg_locks l "
    "LEFT JOIN pg_stat_activity a ON a.pid = l.pid "
    "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
    "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    "AND ((l.classid::bigint << 32) | l.objid::bigint) = %s"
)
_PUBLISH_SINGLE = (
    "INSERT INTO forewarn_leader (id, node, term, position, addresses, store_pid, since, role, lock_pid) "
    "VALUES (1, %s, 0, 0, '{}', pg_backend_pid(), %s, %s, pg_backend_pid()) ON CONFLICT (id) DO UPDATE SET "
    "node = EXCLUDED.node, addresses = '{}', store_pid = EXCLUDED.store_pid, since = EXCLUDED.since, "
    "role = EXCLUDED.role, lock_pid = EXCLUDED.lock_pid"
)


class WriterLost(StoreUnavailable):
    """The connection that held the writer's lock was lost, and another process took the lock meanwhile: this
    process must not write again (it is stale) until it is restarted."""

    def __init__(self, message: str):
        super().__init__(message, retry_after=60)


@dataclass(frozen=True)
class Holder:
    """The session holding the writer's lock, and what its process published of itself (``role`` None: nothing)."""

    pid: int
    application: str | None
    client: str | None
    started: datetime | None
    role: str | None = None
    node: str | None = None
    since: str | None = None

    def describe(self) -> str:
        if self.role is not None:
            return (
                f"a forewarn server (role {self.role}, {self.node}, since {self.since}; PostgreSQL backend {self.pid})"
            )
        where = f" from {self.client}" if self.client else ""
        name = f" ({self.application})" if self.application else ""
        return f"PostgreSQL backend {self.pid}{name}{where}, which published no forewarn_leader row"


def node_name() -> str:
    """How this process names itself in the leader row and in logs: host and pid."""
    return f"{socket.gethostname()}:{os.getpid()}"


def lock_key(connection: psycopg.Connection) -> int:
    """The lock's key: from the schema the connection's search_path selects."""
    row = connection.execute(LOCK_KEY).fetchone()
    connection.commit()
    assert row is not None
    return int(row[0])


def try_take(connection: psycopg.Connection, key: int) -> bool:
    """Take the lock for the connection's session if no session holds it; never waits. Held across the session's
    transactions, until it ends."""
    row = connection.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
    connection.commit()
    return bool(row and row[0])


def holder(connection: psycopg.Connection, key: int) -> Holder | None:
    """Who holds the lock now (None: nobody)."""
    found = connection.execute(_HOLDER, (key,)).fetchone()
    connection.commit()
    if found is None:
        return None
    pid, application, client, started = found
    import psycopg

    try:
        row = connection.execute(
            "SELECT role, node, since FROM forewarn_leader WHERE lock_pid = %s", (int(pid),)
        ).fetchone()
        connection.commit()
    except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn):  # a database not migrated yet
        connection.rollback()
        row = None
    if row is None:
        return Holder(int(pid), application, client, started)
    return Holder(int(pid), application, client, started, row[0] or "leader", row[1], row[2])


def refusal(description: str, found: Holder | None) -> str:
    held_by = found.describe() if found is not None else "a session that has just ended"
    return (
        f"{description}: another process writes to this database ({held_by}); two writers would hand out the same "
        "event ids and overwrite each other's commits. Stop it, or give this server another database (or schema)"
    )


def publish_single(connection: psycopg.Connection, node: str) -> None:
    """As a single server that holds the lock on this connection: say so in ``forewarn_leader``."""
    connection.execute(_PUBLISH_SINGLE, (node, datetime.now(UTC).isoformat(), SINGLE))
    connection.commit()
