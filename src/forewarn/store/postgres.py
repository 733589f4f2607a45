"""PostgreSQL store, for deployments that share one database. The URL is a libpq URL (``postgresql://...``).

A server's connection can drop under it: the database restarts, an operator runs ``pg_terminate_backend``, the network
breaks. The store then reconnects, so that a database that comes back is used again, and it never guesses:

- **Before a command changes the engine** (``ready``), a connection the server closed is noticed (its socket turned
  readable while idle) and replaced. If no new connection can be made, the command is refused with
  ``StoreUnavailable`` before anything changed, and a background thread reconnects with backoff; until it succeeds,
  every operation is refused at once, without blocking the event loop on the network.
- **A connection lost under a commit** leaves the outcome open only if the break hit its ``COMMIT``. The store
  reconnects (trying for up to ``RESOLVE_WITHIN`` seconds), ends the lost session on the server if it still runs (so
  its transaction is over and holds no locks), then asks PostgreSQL for the transaction's status
  (``txid_status``, which PostgreSQL documents for exactly this): committed, the commit succeeded; aborted, the same
  rows are written again on the new connection.
- **Other operations** are reads, or writes of absolute values: one lost under its connection runs once more on the
  new connection.
"""

from __future__ import annotations

import contextlib
import logging
import math
import select
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import NoReturn

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from forewarn.core.changes import Change
from forewarn.core.clock import Clock
from forewarn.store import writer
from forewarn.store.base import Outgoing, SQLStore, WritersIn
from forewarn.store.errors import DatabaseInUse, StoreError, StoreUnavailable
from forewarn.store.records import Key, Records, Rows

log = logging.getLogger("forewarn.store")

# libpq settings a URL may override. The name lets operators (and tests) find forewarn's session in
# pg_stat_activity. The time limits bound how long the event loop can wait on an unresponsive network: connecting
# (libpq's minimum is 2 s), data left unacknowledged (TCP_USER_TIMEOUT), and an idle connection whose peer vanished
# (keepalives: 10 s idle, then 3 probes 5 s apart).
CONNECTION_DEFAULTS = {
    "application_name": "forewarn",
    "connect_timeout": "3",
    "tcp_user_timeout": "10000",
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
}
# The key of the lock under which the schema is created and migrated, one per schema as the writer's is (a URL
# whose search_path names no existing schema has none: it is then refused by the first CREATE TABLE, naming why).
SCHEMA_LOCK_KEY = "SELECT hashtext('forewarn-schema:' || COALESCE(current_schema(), ''))"
RECONNECT_FIRST_DELAY = 0.1  # seconds before the background thread's first attempt; doubled after each failure
RECONNECT_LONGEST_DELAY = 5.0  # the longest wait between two attempts
RESOLVE_WITHIN = 10.0  # seconds a commit whose connection broke may wait for the database to learn its outcome
FENCE_WAIT = 5.0  # seconds to wait for the server to end the lost session
COMMIT_ATTEMPTS = 3  # a commit written again at most twice after losing its connection


@dataclass(frozen=True)
class Session:
    """A server session: the backend's pid, and its start (a pid alone may be reused by a later session)."""

    pid: int
    started: datetime


@dataclass(frozen=True)
class _Lost:
    since: float  # time.monotonic() when the connection was found lost
    session: Session | None


class _Reconnected(StoreUnavailable):
    """The connection broke under an operation and a new one is ready: an idempotent operation may run again."""


def _any_of(column: str, keys: Sequence[Key]) -> list[tuple[str, Sequence[object]]]:
    """One condition for any number of keys: the list is sent as one array parameter."""
    return [(f"{column} = ANY(?)", [list(keys)])]


class PostgresStore(SQLStore):
    name = "postgresql"
    marker = "%s"
    journal_id_type = "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY"
    key_condition = staticmethod(_any_of)

    def __init__(self, url: str, records: Iterable[Records] = (), exclusive: bool = False):
        """``exclusive``: hold the database's writer lock on this store's connection (store/writer.py), taken again on
        every new connection before anything is written: :class:`DatabaseInUse` when another process holds it
        here; once the store is open, a lock lost to another process leaves the store stale (every operation
        refused with :class:`WriterLost`)."""
        self._url = url
        given = conninfo_to_dict(url)
        self._options = {key: value for key, value in CONNECTION_DEFAULTS.items() if key not in given}
        description = redacted(url)  # a libpq URL names its database already (postgresql://...)
        self._writer_key: int | None = None
        try:
            connection, session = self._connect()
        except psycopg.Error as error:
            raise StoreError(f"cannot connect to PostgreSQL at {redacted(url)}: {error}".strip()) from None
        if exclusive:
            self._writer_key = self._take_first(connection, description)
        super().__init__(connection, description, records)
        self._stale: writer.WriterLost | None = None
        self._published = False
        self._session: Session | None = session
        self._lost: _Lost | None = None
        self._handover: tuple[psycopg.Connection, Session] | None = None  # from the reconnecting thread
        self._handover_lock = threading.Lock()
        self._next_attempt = 0.0  # time.monotonic() of the reconnecting thread's next attempt
        self._closing = threading.Event()

    # ------------------------------------------------------------------------------------------ connections
    @staticmethod
    def _take_first(connection: psycopg.Connection, description: str) -> int:
        try:
            key = writer.lock_key(connection)
            if writer.try_take(connection, key):
                return key
            held_by = writer.holder(connection, key)
        except psycopg.Error as error:
            connection.close()
            raise StoreError(f"{description}: cannot take the writer's lock: {_one_line(error)}") from None
        connection.close()
        raise DatabaseInUse(writer.refusal(description, held_by))

    def _take_again(self, connection: psycopg.Connection, lost: Session | None) -> None:
        """On a new connection, before anything is written: the writer's lock, and this store's row saying so.
        WriterLost when another process took the lock meanwhile."""
        if self._writer_key is None:
            return
        if writer.try_take(connection, self._writer_key):
            if self._published:  # the table has its columns by then (migrate)
                writer.publish_single(connection, writer.node_name())
            return
        held_by = writer.holder(connection, self._writer_key)
        if held_by is None or (lost is not None and held_by.pid == lost.pid):
            # Released in between, or still held by this store's lost session that the fence could not end: retry.
            raise psycopg.OperationalError("the writer's lock is not free yet")
        raise writer.WriterLost(
            f"{self.description}: this server lost the database while another process took its writer's lock "
            f"({held_by.describe()}); it writes no more: restart it once that process has stopped"
        )

    def _connect(self) -> tuple[psycopg.Connection, Session]:
        # The settings merged into the URL as psycopg.connect would merge them as keywords (typed per option there).
        connection = psycopg.connect(make_conninfo(self._url, **self._options), autocommit=False)
        try:
            row = connection.execute(
                "SELECT pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()"
            ).fetchone()
            connection.rollback()
        except psycopg.Error:
            connection.close()
            raise
        if row is None:  # pg_stat_activity always lists the asking session; a server that does not is refused
            connection.close()
            raise psycopg.OperationalError("the server does not list this session in pg_stat_activity")
        return connection, Session(int(row[0]), row[1] or datetime.fromtimestamp(0, UTC))

    def _fence(self, connection: psycopg.Connection, lost: Session | None) -> None:
        """End the lost session on the server if it still runs: its transaction is then over (committed or rolled
        back, for good) and its locks are released before anything is written again."""
        if lost is None:
            return
        match = "FROM pg_stat_activity WHERE pid = %s AND backend_start = %s"
        try:
            connection.execute(f"SELECT pg_terminate_backend(pid) {match}", (lost.pid, lost.started))
        except psycopg.errors.InsufficientPrivilege as error:
            connection.rollback()
            log.warning("cannot end the lost database session (backend %s): %s", lost.pid, error)
            return
        connection.rollback()
        give_up = time.monotonic() + FENCE_WAIT
        while True:
            # Each look in its own transaction: pg_stat_activity is a snapshot taken once per transaction.
            running = connection.execute(f"SELECT 1 {match}", (lost.pid, lost.started)).fetchone()
            connection.rollback()
            if running is None:
                return
            if time.monotonic() >= give_up:
                log.warning("the lost database session (backend %s) still runs after %g s", lost.pid, FENCE_WAIT)
                return
            time.sleep(0.02)

    def _open_replacing(self, lost: Session | None) -> tuple[psycopg.Connection, Session]:
        connection, session = self._connect()
        try:
            self._fence(connection, lost)
            self._take_again(connection, lost)
        except (psycopg.Error, writer.WriterLost):
            connection.close()
            raise
        return connection, session

    def _ensure(self, deadline: float | None = None) -> psycopg.Connection:
        """A connection that was alive a moment ago, or StoreUnavailable. ``deadline`` (time.monotonic()): keep
        trying to reconnect until then; None: one attempt."""
        if self._stale is not None:
            raise self._stale
        if self._lost is not None:
            self._adopt_handover()
        connection = self.connection
        if connection.closed or connection.broken:
            cause: object = "the connection was closed"
        elif not _stirred(connection):
            return connection  # the usual case: one poll of an idle socket, no round trip
        else:
            # An idle connection has nothing to read unless the server closed it (or told why it is about to).
            try:
                connection.execute("SELECT 1")
                connection.rollback()
                return connection
            except psycopg.Error as error:
                cause = error
        self._replace(cause, deadline)
        return self.connection

    def _replace(self, cause: object, deadline: float | None) -> None:
        """Reconnect in place of a lost connection, or start reconnecting in the background and raise
        StoreUnavailable."""
        lost = self._session
        since = time.monotonic()
        log.warning("database connection lost (%s); reconnecting", _one_line(cause))
        self.reachability.failed(cause)
        with contextlib.suppress(psycopg.Error):
            self.connection.close()
        self._session = None
        delay = RECONNECT_FIRST_DELAY
        while True:
            try:
                self.connection, self._session = self._open_replacing(lost)
                log.warning("reconnected to the database after %.1f s", time.monotonic() - since)
                self.reachability.succeeded()
                return
            except writer.WriterLost as taken:
                self._go_stale(taken)
                raise
            except psycopg.Error as error:
                if deadline is None or time.monotonic() + delay > deadline:
                    self._lose(_Lost(since, lost), error)
                time.sleep(delay)
                delay = min(delay * 2, RECONNECT_LONGEST_DELAY)

    def _lose(self, lost: _Lost, error: Exception) -> NoReturn:
        self._lost = lost
        self._next_attempt = time.monotonic() + RECONNECT_FIRST_DELAY
        threading.Thread(
            target=self._reconnect_in_background, args=(lost,), name="forewarn-db-reconnect", daemon=True
        ).start()
        log.warning("database unreachable (%s); reconnecting in the background", _one_line(error))
        raise self._unavailable()

    def _reconnect_in_background(self, lost: _Lost) -> None:
        delay = RECONNECT_FIRST_DELAY
        while True:
            self._next_attempt = time.monotonic() + delay
            if self._closing.wait(delay):
                return
            try:
                handed = self._open_replacing(lost.session)
            except writer.WriterLost as taken:
                self._go_stale(taken)
                return
            except psycopg.Error as error:
                delay = min(delay * 2, RECONNECT_LONGEST_DELAY)
                log.info(
                    "database still unreachable after %.1f s (%s); next attempt in %.1f s",
                    time.monotonic() - lost.since,
                    _one_line(error),
                    delay,
                )
                continue
            if self._closing.is_set():
                handed[0].close()
                return
            with self._handover_lock:
                self._handover = handed
            log.warning("reconnected to the database after %.1f s", time.monotonic() - lost.since)
            return

    def _go_stale(self, taken: writer.WriterLost) -> None:
        self._stale = taken
        self.reachability.lost_writer(str(taken))
        log.critical("%s", taken)

    def _adopt_handover(self) -> None:
        with self._handover_lock:
            handed, self._handover = self._handover, None
        if handed is None:
            raise self._unavailable()
        self.connection, self._session = handed
        self._lost = None
        self.reachability.succeeded()

    def _unavailable(self) -> StoreUnavailable:
        lost = self._lost
        since = 0.0 if lost is None else time.monotonic() - lost.since
        wait = max(self._next_attempt - time.monotonic(), 0.0)
        unavailable = StoreUnavailable(
            f"{self.description}: the database connection was lost {since:.1f} s ago; reconnecting (next attempt "
            f"in {wait:.1f} s)",
            retry_after=max(1, math.ceil(wait)),
        )
        self.reachability.failed(unavailable)
        return unavailable

    # ------------------------------------------------------------------------------------------ operations
    def ready(self) -> None:
        with self.guard:
            self._ensure()

    def migrate(self) -> None:
        """As SQLStore.migrate; a writer then publishes itself in ``forewarn_leader`` (store/writer.py). A database
        another process writes to is migrated only once it has stopped: :class:`DatabaseInUse` names it."""
        try:
            super().migrate()
        except WritersIn as refused:
            raise DatabaseInUse(self._migration_refusal(refused)) from None
        if self._writer_key is None:
            return
        with self.guard:
            try:
                writer.publish_single(self._ensure(), writer.node_name())
            except psycopg.Error as error:
                raise StoreError(f"{self.description}: {_one_line(error)}") from None
            self._published = True

    def _lock_schema(self, cursor: psycopg.Cursor) -> bool:
        # A lock of its own, for the transaction only, not the writer's: a single server holds the writer's lock
        # while it migrates, and processes started together on a new database would otherwise each create the same
        # tables at once, which PostgreSQL refuses to all but one (a duplicate key in its catalog, pg_type).
        [taken] = cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", (self._schema_key(cursor),)).fetchall()[0]
        return bool(taken)

    @staticmethod
    def _schema_key(cursor: psycopg.Cursor) -> int:
        [key] = cursor.execute(SCHEMA_LOCK_KEY).fetchall()[0]
        return int(key)

    def _exclude_writers(self, cursor: psycopg.Cursor) -> bool:
        # The writer's lock for the transaction only (a session that holds it already, an exclusive store's, is
        # granted it again): no single server or shared leader can start writing before the migration commits, and
        # none that writes now (of an older version: the database is older than this code) has its tables changed
        # under it. Older replicas hold no lock: the migration leaves them a journal entry that stops them.
        key = self._writer_key
        if key is None:
            [key] = cursor.execute(writer.LOCK_KEY).fetchall()[0]
        [taken] = cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", (key,)).fetchall()[0]
        return bool(taken)

    def _migration_refusal(self, refused: WritersIn) -> str:
        with self.guard:
            try:
                connection = self._ensure()
                held_by = writer.holder(connection, writer.lock_key(connection))
            except psycopg.Error as error:
                raise StoreError(f"{self.description}: {_one_line(error)}") from None
        who = held_by.describe() if held_by is not None else "a process that has just stopped"
        return (
            f"{self.description}: the database has schema version {refused.stored}, which this forewarn migrates "
            f"to {refused.latest} only while no other process writes to it, and another one does ({who}): stop it "
            "and its replicas (they read what the migration changes), then start this one again"
        )

    def probe(self) -> None:
        """One round trip to the database, whose outcome ``reachability`` then reports; a lost connection is
        replaced (or reconnected in the background) as for any operation."""
        try:
            with self._transaction() as cursor:
                cursor.execute("SELECT 1")
        except _Reconnected:
            self.reachability.succeeded()  # a new connection answered
        except StoreError:
            pass  # recorded

    @contextlib.contextmanager
    def _transaction(self):
        with self.guard:
            connection = self._ensure()
            try:
                with connection.transaction():
                    with connection.cursor() as cursor:
                        yield cursor
                self.reachability.succeeded()
            except psycopg.Error as error:
                if connection.closed or connection.broken:
                    self.reachability.failed(error)
                    self._replace(error, None)
                    message = f"{self.description}: the connection broke ({_one_line(error)}); reconnected"
                    raise _Reconnected(message) from None
                raise StoreError(f"{self.description}: {error}".strip()) from None

    def _idempotent(self, operation):
        try:
            return operation()
        except _Reconnected:
            return operation()

    def _consistent(self, cursor) -> None:
        # Under READ COMMITTED each statement sees the commits done by then; the first statement of the transaction
        # may set it to take one snapshot for all of them.
        cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")

    def commit(
        self,
        changes: Sequence[Change],
        now: datetime,
        clock: Clock | None = None,
        outbox: Sequence[Outgoing] = (),
        next_seq: int | None = None,
    ) -> None:
        """As SQLStore.commit; a connection lost under it is resolved (module docstring) before this returns or
        raises. A StoreError raised here means the changes are not in the database."""
        rows = self._commit_writes(changes, now, clock, outbox, next_seq)
        with self.guard:
            self._commit_rows(rows)

    def _commit_rows(self, rows: Rows) -> None:
        # The engine already holds these changes: give the database a few seconds to come back rather than fail.
        resolve_by = time.monotonic() + RESOLVE_WITHIN
        for attempt in range(1, COMMIT_ATTEMPTS + 1):
            connection = self._ensure(resolve_by)
            transaction_id = None
            try:
                with connection.cursor() as cursor:
                    row = cursor.execute("SELECT txid_current()").fetchone()
                    transaction_id = None if row is None else row[0]
                    position = self._write(cursor, rows)
                connection.commit()
                self.position = position
                self.reachability.succeeded()
                return
            except psycopg.Error as error:
                if not (connection.closed or connection.broken):
                    with contextlib.suppress(psycopg.Error):
                        connection.rollback()
                    raise StoreError(f"{self.description}: {error}".strip()) from None
                cause = error
            self._replace(cause, resolve_by)
            status = "aborted" if transaction_id is None else self._status(transaction_id)
            if status == "committed":
                log.warning("the connection broke during a commit; transaction %s had committed", transaction_id)
                if self.keeps_changes:  # its position: the last, as nothing else commits while this leads
                    self.position = self._latest_position()
                return
            if status != "aborted":
                raise StoreError(
                    f"{self.description}: the connection broke during a commit and its outcome is "
                    f"unknown (transaction {transaction_id}: {status})"
                )
            log.warning(
                "the connection broke before a commit completed; writing it again (attempt %s of %s)",
                attempt + 1,
                COMMIT_ATTEMPTS,
            )
        raise StoreUnavailable(f"{self.description}: the connection broke under {COMMIT_ATTEMPTS} attempts to commit")

    def _latest_position(self) -> int:
        try:
            row = self.connection.execute("SELECT MAX(position) FROM forewarn_changes").fetchone()
            self.connection.rollback()
        except psycopg.Error as error:
            raise StoreError(f"{self.description}: {_one_line(error)}") from None
        return 0 if row is None or row[0] is None else int(row[0])

    def _status(self, transaction_id: int) -> str:
        """'committed', 'aborted', 'in progress', or why it is unknown."""
        try:
            row = self.connection.execute("SELECT txid_status(%s)", (transaction_id,)).fetchone()
            self.connection.rollback()
        except psycopg.Error as error:
            return f"status unreadable: {_one_line(error)}"
        return row[0] or "too old to tell"

    def close(self) -> None:
        self._closing.set()
        with self._handover_lock:
            handed, self._handover = self._handover, None
        if handed is not None:
            handed[0].close()
        with self.guard:
            self.connection.close()


def _stirred(connection: psycopg.Connection) -> bool:
    """Whether an idle connection's socket has something to read (or an error): the server closed it."""
    try:
        poller = select.poll()  # not select.select: a server with many listeners can hold descriptors above 1024
        poller.register(connection.fileno(), select.POLLIN | select.POLLPRI)
        return bool(poller.poll(0))
    except (OSError, ValueError, psycopg.Error):
        return True


def _one_line(error: object) -> str:
    """libpq's messages span lines (a hint after a tab); a log line or an error body keeps one."""
    return " ".join(str(error).split()) or type(error).__name__


def redacted(url: str) -> str:
    """The URL without its password, for messages and logs."""
    if "@" not in url or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    credentials, host = rest.rsplit("@", 1)
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in credentials else url
