"""The narrow storage interface, and the SQL both databases share.

A store keeps: the fleet, the id seed, the clock setting, the simulated time of the last applied command, every
event at its latest state, each scope's DocumentIncarnation, and a journal of every change. ``commit`` writes the
changes of one command in one transaction; nothing is reported to a client before it returns.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from forewarn.core.changes import Change
from forewarn.core.clock import Clock
from forewarn.core.component import StoredRows
from forewarn.store.errors import StoreError
from forewarn.store.migrations import RESET, VERSION_KEY, Dialect, pending, refuse_newer
from forewarn.store.reachability import Reachability
from forewarn.store.records import (
    META_PUT,
    KeyCondition,
    Reader,
    Records,
    Registry,
    Rows,
    Touched,
    key_in_list,
    merge_touched,
)

DUE_STATUSES = ("pending", "dead-lettering")  # statuses the sender still acts on

T = TypeVar("T")


# forewarn_changes (store/migrations.py): a commit's position is one more than the last, given in its own transaction.
# Two processes that both believed they led would both take the same number; the second to commit fails on the
# primary key instead of interleaving its commits with the first's.
CHANGES_INSERT = (
    "INSERT INTO forewarn_changes (position, written_ms, keys) "
    "SELECT COALESCE(MAX(position), 0) + 1, ?, ? FROM forewarn_changes RETURNING position"
)
# How long opening a store waits for another process to leave a database it is to migrate: one migrating the same
# database holds it for the milliseconds its transaction takes (a second, on a loaded machine); one that holds it
# longer writes to it, and is no migration's to stop.
MIGRATION_WAIT = 10.0
MIGRATION_POLL = 0.05

# What every refresh reads of the meta table besides the keys its commits touched (never the fleet: it is large
# and does not change).
REFRESHED_META = ("now", "clock", "next_seq", "created_at")

# The meta keys a reset keeps: what ``initialize`` wrote, and the fleet file that gives the fleet (the Event Grid
# registry, configuration like the fleet, is in no registered part's tables and stays too).
KEPT_BY_RESET = ("fleet", "fleet_digest", "fleet_file", "seed", "created_at", "schema_version")


class WritersIn(StoreError):
    """Another process held the database for as long as a migration waited: the database is at schema version
    ``stored`` (left as it was), which this code would have brought to ``latest``."""

    def __init__(self, stored: int, latest: int):
        super().__init__(f"another process writes to the database (schema version {stored}, not migrated)")
        self.stored = stored
        self.latest = latest


def retried_on_a_new_connection(method: Callable[..., T]) -> Callable[..., T]:
    """Marks an operation that is safe to run twice (a read, or a write of absolute values): a store whose connection
    broke under it may run it again on a fresh one (PostgresStore)."""

    @functools.wraps(method)
    def run(self: SQLStore, *args: Any, **kwargs: Any) -> T:
        return self._idempotent(lambda: method(self, *args, **kwargs))

    return run


@dataclass
class StoredState:
    """What a store holds: the parts the store owns (fleet, seed, clock, times, id sequence), and ``records``, each
    component's stored state by the name the engine takes it under (what its ``Records.load`` returned).

    The fleet is read on first use of ``fleet_records``: it never changes once stored, a million-VM fleet is about
    a hundred megabytes of JSON, and whoever already holds it (a restart given the same fleet, a replica refreshing,
    an engine rebuilt after a failed commit) compares ``fleet_digest`` or keeps its own."""

    read_fleet: Callable[[], dict[str, Any]]
    seed: str
    clock: Clock
    now: datetime
    created_at: datetime
    next_seq: int
    records: dict[str, Any] = field(default_factory=dict)
    position: int = 0  # the last commit in forewarn_changes that this state includes (0: none journaled)
    fleet_digest: str | None = None  # None: a database written before digests were stored
    # The store it was read from: the engine built on it reads there what it no longer keeps in memory.
    database: StoredRows | None = None

    @functools.cached_property
    def fleet_records(self) -> dict[str, Any]:
        return self.read_fleet()


@dataclass
class StoredChanges:
    """What the commits after a position changed, read in one transaction (a consistent snapshot): the store's own
    parts in full, and ``records``, the rows the commits touched as they are now, each component's under the name
    the engine's ``replicate`` takes them by (what its ``Records.reload`` returned)."""

    position: int  # the last commit included
    commits: int  # how many commits past the position asked for (0: nothing new)
    clock: Clock
    now: datetime
    created_at: datetime
    next_seq: int
    records: dict[str, Any] = field(default_factory=dict)
    touched: Touched = field(default_factory=dict)


def records_digest(records: dict[str, Any]) -> str:
    """The digest stored beside a fleet's records: equal digests, equal fleets."""
    return hashlib.sha256(encode_records(records).encode()).hexdigest()


def encode_records(records: dict[str, Any]) -> str:
    return json.dumps(records, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Outgoing:
    """A message a command causes to be delivered (e.g. an AWS Health event to a webhook)."""

    target: str
    payload: str
    expires_at: datetime  # simulated time after which it is given up
    kind: str = "webhook"  # the sending policy: "webhook" (a plain POST) or "eventgrid" (target: a subscription key)
    next_at: datetime | None = None  # first attempt; None: at once
    detail: str | None = None


@dataclass(frozen=True)
class Delivery:
    delivery_id: int
    target: str
    payload: str
    attempts: int
    next_at: datetime
    expires_at: datetime
    kind: str = "webhook"
    status: str = "pending"
    detail: str | None = None
    created_at: datetime | None = None


@dataclass(frozen=True)
class Attempt:
    """The outcome of one attempt at a delivery, to record (several in one transaction for a batch)."""

    delivery_id: int
    status: str
    attempts: int
    next_at: datetime
    error: str | None = None
    detail: str | None = None  # None keeps the stored detail


@dataclass
class JournalEntry:
    seq: int
    at: str
    kind: str
    event_id: str | None
    detail: dict


# Rows fetched this many at a time where a whole table may be read (a load, a replica's refresh): a driver decodes
# what one fetch returns in one call that holds the interpreter, and with it the event loop, while a thread loads a
# state (psycopg's binary rows: about 30 ms a 100,000, bench/takeover_stall.py).
FETCHED_AT_ONCE = 2_000


def all_rows(cursor: Any) -> list[tuple[Any, ...]]:
    """Every row the query on ``cursor`` gives, fetched ``FETCHED_AT_ONCE`` at a time."""
    rows: list[tuple[Any, ...]] = []
    while batch := cursor.fetchmany(FETCHED_AT_ONCE):
        rows += batch
    return rows


def encode_clock(clock: Clock) -> str:
    return json.dumps(
        {
            "mode": clock.mode,
            "speed": clock.speed,
            "anchor_wall": clock.anchor_wall,
            "anchor_sim": clock.anchor_sim.isoformat(),
        }
    )


def decode_clock(text: str) -> Clock:
    data = json.loads(text)
    return Clock(data["mode"], data["speed"], data["anchor_wall"], datetime.fromisoformat(data["anchor_sim"]))


class SQLStore:
    """Shared SQL; subclasses supply the connection, the parameter marker and the DDL differences."""

    name = "sql"
    marker = "?"
    journal_id_type = "INTEGER PRIMARY KEY AUTOINCREMENT"
    key_condition: KeyCondition = staticmethod(key_in_list)

    def __init__(self, connection: Any, description: str, records: Iterable[Records] = ()):
        self.connection = connection
        self.description = description
        # One operation at a time on the connection: group commits run in a worker thread (app/runtime.py) while
        # the event loop may read (the outbox, the journal); a read waits for the transaction under way.
        self.guard = threading.RLock()
        # What each kind of change writes, and who reads the stored state back: given by the components that own
        # them (open_store). A store with none still migrates, initializes and serves the outbox and Event Grid.
        self.registry = Registry(records)
        # Whether each commit also records the rows it wrote in forewarn_changes, for replicas (a shared process's
        # store), and the position of the last commit written or loaded here.
        self.keeps_changes = False
        self.position = 0
        # The outcome of the latest operation on the database, for /healthz (a file's store stays reachable).
        self.reachability = Reachability()

    # -------------------------------------------------------------------------------------------- set-up
    def _sql(self, text: str) -> str:
        return text.replace("?", self.marker)

    def _execute(self, cursor: Any, text: str, params: Sequence[Any] = ()) -> None:
        cursor.execute(self._sql(text), params)

    def schema_version(self, cursor: Any) -> int:
        """The version the database records; 0 for one that recorded none (new, or written before versions)."""
        cursor.execute("CREATE TABLE IF NOT EXISTS forewarn_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        self._execute(cursor, "SELECT value FROM forewarn_meta WHERE key = ?", (VERSION_KEY,))
        row = cursor.fetchone()
        if row is None:
            return 0
        try:
            return int(row[0])
        except ValueError:
            raise StoreError(f"{self.description}: the database's schema version {row[0]!r} is not a number") from None

    @retried_on_a_new_connection
    def migrate(self) -> None:
        """Bring the schema to the newest version (store/migrations.py), or refuse a database newer than the code;
        then create the tables of the records that bring their own (``Records.schema``) where they are missing.

        Processes started together on a new database create its tables one at a time (``_lock_schema``): the first
        creates them, the others find them made. A migration may rename what older code writes to, so it runs only
        while no other process writes to the database (``_exclude_writers``): :class:`WritersIn` when one still does
        after ``MIGRATION_WAIT`` seconds. Each attempt is a transaction of its own, so that a process waiting for
        the others holds nothing they wait for."""
        give_up = time.monotonic() + MIGRATION_WAIT
        while True:
            with self._transaction() as cursor:
                waiting_for = self._migrate_now(cursor)
                if waiting_for is None:
                    return
            if time.monotonic() > give_up:
                raise waiting_for
            time.sleep(MIGRATION_POLL)

    def _migrate_now(self, cursor: Any) -> StoreError | None:
        """Migrate in the transaction under way; None when done (or nothing to do), else what keeps it waiting."""
        if not self._lock_schema(cursor):
            return StoreError(
                f"{self.description}: another process has been creating or migrating the schema for "
                f"{MIGRATION_WAIT:g} s"
            )
        todo = pending(stored := self.schema_version(cursor), self.description)
        if todo:
            if not self._exclude_writers(cursor):
                return WritersIn(stored, todo[-1].version)
            dialect = Dialect(self.name, self.journal_id_type)
            # Read again under the writers' lock: a release without the schema's lock may have migrated meanwhile.
            for migration in pending(self.schema_version(cursor), self.description):
                migration.apply(cursor, dialect)
                self._execute(cursor, META_PUT, (VERSION_KEY, str(migration.version)))
        # Only tables that are not there yet: no writer's rows can be in the way, so no writer is kept out.
        for statement in self.registry.schema:
            cursor.execute(statement)
        return None

    def _lock_schema(self, cursor: Any) -> bool:
        """Keep every other process's creation or migration of the schema out until the transaction under way ends;
        False while another one is in. A SQLite transaction (BEGIN IMMEDIATE) excludes the others already."""
        return True

    def _exclude_writers(self, cursor: Any) -> bool:
        """Keep every other writing process out of the database until the transaction under way ends; False while
        one is in. A SQLite transaction (BEGIN IMMEDIATE) excludes the others already."""
        return True

    # --------------------------------------------------------------------------------------------- reads
    def _meta(self, cursor: Any) -> dict[str, str]:
        """Every meta value but the fleet's records (read on their own, when needed: ``fleet_records``)."""
        self._execute(cursor, "SELECT key, value FROM forewarn_meta WHERE key <> 'fleet'")
        meta = dict(cursor.fetchall())
        self._execute(cursor, "SELECT COUNT(*) FROM forewarn_meta WHERE key = 'fleet'")
        if cursor.fetchone()[0]:
            meta["fleet"] = ""  # stored: an initialized database
        return meta

    @retried_on_a_new_connection
    def initialized(self) -> bool:
        """Whether the database holds a fleet (``initialize``): False for a new one."""
        with self._transaction() as cursor:
            self._execute(cursor, "SELECT COUNT(*) FROM forewarn_meta WHERE key = 'fleet'")
            return bool(cursor.fetchone()[0])

    @retried_on_a_new_connection
    def fleet_records(self) -> dict[str, Any]:
        """The stored fleet's records (``Fleet.to_records``)."""
        with self._transaction() as cursor:
            self._execute(cursor, "SELECT value FROM forewarn_meta WHERE key = 'fleet'")
            row = cursor.fetchone()
        if row is None:
            raise StoreError(f"{self.description}: the database holds no fleet (was it emptied while in use?)")
        return json.loads(row[0])

    @retried_on_a_new_connection
    def deployed_at(self) -> datetime:
        """When the stored fleet was deployed (``initialize``; a reset keeps it), read alone: ``load`` would read every
        record with it, and a million-VM state takes seconds to build and to free."""
        with self._transaction() as cursor:
            meta = self._meta(cursor)
        if "fleet" not in meta:
            raise StoreError(f"{self.description}: the database holds no fleet (was it emptied while in use?)")
        return datetime.fromisoformat(meta.get("created_at", meta["now"]))

    @retried_on_a_new_connection
    def fleet_file(self) -> dict[str, Any] | None:
        """What ``put_fleet_file`` stored of the fleet file the stored fleet was read from (None: nothing)."""
        with self._transaction() as cursor:
            self._execute(cursor, "SELECT value FROM forewarn_meta WHERE key = 'fleet_file'")
            row = cursor.fetchone()
        return None if row is None else json.loads(row[0])

    @retried_on_a_new_connection
    def load(self) -> StoredState | None:
        """The stored state, or None for a store that was never initialized."""
        with self._transaction() as cursor:
            self._consistent(cursor)
            meta = self._meta(cursor)
            if "fleet" not in meta:
                return None
            # A replica loads the whole state again at a migration's reset entry (forewarn_changes): one older than
            # the migration refuses the database then, rather than follow entries whose keys it would misread.
            refuse_newer(int(meta.get(VERSION_KEY, "0")), self.description)

            def query(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
                self._execute(cursor, sql, params)
                return all_rows(cursor)

            records = self.registry.load(Reader(query, meta, self.key_condition))
            self._execute(cursor, "SELECT MAX(position) FROM forewarn_changes")
            row = cursor.fetchone()
        position = 0 if row is None or row[0] is None else int(row[0])
        self.position = position
        return StoredState(
            read_fleet=self.fleet_records,
            seed=meta["seed"],
            clock=decode_clock(meta["clock"]),
            now=datetime.fromisoformat(meta["now"]),
            created_at=datetime.fromisoformat(meta.get("created_at", meta["now"])),
            next_seq=int(meta.get("next_seq", "1")),
            records=records,
            position=position,
            fleet_digest=meta.get("fleet_digest"),
            database=self,
        )

    @retried_on_a_new_connection
    def changes_since(self, position: int, also: Touched | None = None) -> StoredChanges | None:
        """What the commits after ``position`` changed: their rows as they are now, and the rows ``also`` names
        (rows a replica changed without committing them), all read in one transaction. ``commits`` 0: nothing was
        committed since (``also`` is not read then). None when they cannot be told from the journal: it was pruned
        past ``position``, a reset emptied everything, or the journal is behind ``position`` (another database): load
        the whole state then."""
        with self._transaction() as cursor:
            self._consistent(cursor)
            # One query: the commits after the position, and the last one even when it is not after it.
            self._execute(
                cursor,
                "SELECT position, keys FROM forewarn_changes WHERE position > ? "
                "OR position = (SELECT MAX(position) FROM forewarn_changes) ORDER BY position",
                (position,),
            )
            journal = cursor.fetchall()
            latest = int(journal[-1][0]) if journal else 0
            if latest < position:
                return None
            after = [(int(entry[0]), entry[1]) for entry in journal if int(entry[0]) > position]
            if after and after[0][0] != position + 1:
                return None
            touched: Touched = {}
            for _, keys in after:
                named = json.loads(keys)
                if RESET in named:
                    return None
                merge_touched(touched, named)
            if after and also:
                merge_touched(touched, also)
            wanted = list(dict.fromkeys([*REFRESHED_META, *touched.get("forewarn_meta", ())]))

            def query(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
                self._execute(cursor, sql, params)
                return all_rows(cursor)

            reader = Reader(query, {}, self.key_condition)
            reader.meta = {
                row[0]: row[1] for row in reader.keyed("SELECT key, value FROM forewarn_meta", "key", wanted)
            }
            if "clock" not in reader.meta:
                return None  # emptied under us
            records = self.registry.reload(reader, touched) if after else {}
        meta = reader.meta
        return StoredChanges(
            position=after[-1][0] if after else position,
            commits=len(after),
            clock=decode_clock(meta["clock"]),
            now=datetime.fromisoformat(meta["now"]),
            created_at=datetime.fromisoformat(meta.get("created_at", meta["now"])),
            next_seq=int(meta.get("next_seq", "1")),
            records=records,
            touched=touched,
        )

    @retried_on_a_new_connection
    def read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The rows of one query, in a read transaction of its own (``_snapshot``): what the engine reads of what it
        no longer keeps in memory (core/component.py's StoredRows)."""
        with self._snapshot() as cursor:
            self._execute(cursor, sql, params)
            return all_rows(cursor)  # a batch at a time: the read may run in a thread beside the event loop

    @retried_on_a_new_connection
    def journal(self, event_id: str | None = None, limit: int = 1000) -> list[JournalEntry]:
        with self._snapshot() as cursor:
            if event_id is None:
                self._execute(
                    cursor,
                    "SELECT seq, at, kind, event_id, detail FROM forewarn_journal ORDER BY seq DESC LIMIT ?",
                    (limit,),
                )
            else:
                self._execute(
                    cursor,
                    "SELECT seq, at, kind, event_id, detail FROM forewarn_journal WHERE event_id = ? "
                    "ORDER BY seq DESC LIMIT ?",
                    (event_id, limit),
                )
            rows = cursor.fetchall()
        return [JournalEntry(int(r[0]), r[1], r[2], r[3], json.loads(r[4])) for r in reversed(rows)]

    # -------------------------------------------------------------------------------------------- writes
    @retried_on_a_new_connection
    def initialize(self, fleet_records: dict, seed: str, clock: Clock, now: datetime) -> None:
        text = encode_records(fleet_records)
        with self._transaction() as cursor:
            for key, value in (
                ("fleet", text),
                ("fleet_digest", hashlib.sha256(text.encode()).hexdigest()),
                ("seed", seed),
                ("clock", encode_clock(clock)),
                ("now", now.isoformat()),
                ("created_at", now.isoformat()),
            ):
                self._put_meta(cursor, key, value)

    @retried_on_a_new_connection
    def put_fleet_file(self, record: dict[str, Any]) -> None:
        """Remember the fleet file that gives the stored fleet (its digest, and what else of it a start needs), so
        that a start given the same file again need not parse it. Kept by ``reset``, like the fleet."""
        with self._transaction() as cursor:
            self._put_meta(cursor, "fleet_file", json.dumps(record, sort_keys=True))

    def _put_meta(self, cursor, key: str, value: str) -> None:
        self._execute(cursor, META_PUT, (key, value))

    def commit(
        self,
        changes: Sequence[Change],
        now: datetime,
        clock: Clock | None = None,
        outbox: Sequence[Outgoing] = (),
        next_seq: int | None = None,
    ) -> None:
        """Write one command's changes atomically, with the simulated time it left the engine at (TimeMoved
        changes need no row of their own: ``now`` is that time), and the deliveries they cause (outbox)."""
        rows = self._commit_writes(changes, now, clock, outbox, next_seq)
        with self._transaction() as cursor:
            position = self._write(cursor, rows)
        self.position = position

    def _write(self, cursor: Any, rows: Rows) -> int:
        """One commit's rows, on its open transaction, and (a shared process) its entry in forewarn_changes: the
        position the commit takes (unchanged when it keeps none)."""
        for sql, params in rows.statements.items():
            cursor.executemany(self._sql(sql), params)
        if not self.keeps_changes:
            return self.position
        return self._journal_changes(cursor, {table: list(keys) for table, keys in rows.touched.items()})

    def _journal_changes(self, cursor: Any, keys: dict[str, Any]) -> int:
        self._execute(cursor, CHANGES_INSERT, (int(time.time() * 1000), json.dumps(keys, separators=(",", ":"))))
        row = cursor.fetchone()
        return int(row[0])

    def _commit_writes(
        self,
        changes: Sequence[Change],
        now: datetime,
        clock: Clock | None,
        outbox: Sequence[Outgoing],
        next_seq: int | None,
    ) -> Rows:
        """One command's rows, by statement (store/records.py, Rows). Each change is written by the writer its
        component registered; one with none raises UnregisteredChange before anything is written."""
        rows = Rows(now)
        for item in outbox:
            rows.write(
                "INSERT INTO forewarn_outbox (target, payload, status, attempts, next_at, expires_at, created_at, "
                "kind, detail) VALUES (?, ?, 'pending', 0, ?, ?, ?, ?, ?)",
                (
                    item.target,
                    item.payload,
                    (item.next_at or now).isoformat(),
                    item.expires_at.isoformat(),
                    now.isoformat(),
                    item.kind,
                    item.detail,
                ),
            )
        for change in changes:
            self.registry.write(change, rows)
        rows.write_latest()
        rows.put_meta("now", now.isoformat())
        if next_seq is not None:
            rows.put_meta("next_seq", str(next_seq))
        if clock is not None:
            rows.put_meta("clock", encode_clock(clock))
        return rows

    # ------------------------------------------------------------------------------------------------ outbox
    @retried_on_a_new_connection
    def due_deliveries(self, now: datetime, limit: int = 100) -> list[Delivery]:
        """Deliveries the sender must act on at simulated time ``now`` (an attempt, or a dead letter to write), oldest
        first."""
        with self._transaction() as cursor:
            self._execute(
                cursor,
                "SELECT id, target, payload, attempts, next_at, expires_at, kind, status, detail, created_at "
                "FROM forewarn_outbox WHERE status IN (?, ?) AND next_at <= ? ORDER BY next_at, id LIMIT ?",
                (*DUE_STATUSES, now.isoformat(), limit),
            )
            rows = cursor.fetchall()
        return [
            Delivery(
                int(r[0]),
                r[1],
                r[2],
                int(r[3]),
                datetime.fromisoformat(r[4]),
                datetime.fromisoformat(r[5]),
                r[6],
                r[7],
                r[8],
                datetime.fromisoformat(r[9]),
            )
            for r in rows
        ]

    @retried_on_a_new_connection
    def next_delivery_at(self, after: datetime | None = None) -> datetime | None:
        """When the next delivery falls due; with ``after``, the first one due later than that (the ones due already
        are being sent)."""
        with self._transaction() as cursor:
            if after is None:
                self._execute(cursor, "SELECT MIN(next_at) FROM forewarn_outbox WHERE status IN (?, ?)", DUE_STATUSES)
            else:
                self._execute(
                    cursor,
                    "SELECT MIN(next_at) FROM forewarn_outbox WHERE status IN (?, ?) AND next_at > ?",
                    (*DUE_STATUSES, after.isoformat()),
                )
            row = cursor.fetchone()
        return None if row is None or row[0] is None else datetime.fromisoformat(row[0])

    @retried_on_a_new_connection
    def record_attempts(self, attempts: Sequence[Attempt]) -> None:
        """Several outcomes in one transaction (a batch succeeds or fails as a unit)."""
        rows = [
            (item.status, item.attempts, item.next_at.isoformat(), item.error, item.detail, item.delivery_id)
            for item in attempts
        ]
        if not rows:
            return
        with self._transaction() as cursor:  # one statement for the group: a round trip, not one per outcome
            cursor.executemany(
                self._sql(
                    "UPDATE forewarn_outbox SET status = ?, attempts = ?, next_at = ?, last_error = ?, "
                    "detail = COALESCE(?, detail) WHERE id = ?"
                ),
                rows,
            )

    @retried_on_a_new_connection
    def deliveries(self, limit: int = 1000) -> list[dict]:
        with self._transaction() as cursor:
            self._execute(
                cursor,
                "SELECT id, target, status, attempts, next_at, last_error, created_at, payload, kind, detail "
                "FROM forewarn_outbox ORDER BY id DESC LIMIT ?",
                (limit,),
            )
            rows = cursor.fetchall()
        return [
            {
                "id": int(r[0]),
                "target": r[1],
                "status": r[2],
                "attempts": int(r[3]),
                "next_at": r[4],
                "last_error": r[5],
                "created_at": r[6],
                "payload": json.loads(r[7]),
                "kind": r[8],
                "detail": None if r[9] is None else json.loads(r[9]),
            }
            for r in reversed(rows)
        ]

    # ------------------------------------------------------------------------------------------ Event Grid
    @retried_on_a_new_connection
    def eventgrid_records(self) -> tuple[list[dict], list[dict]]:
        """The stored system topics and event subscriptions, as the JSON records azure/eventgrid/model.py writes."""
        with self._transaction() as cursor:
            self._execute(cursor, "SELECT data FROM forewarn_eventgrid_topics ORDER BY topic_key")
            topics = [json.loads(row[0]) for row in cursor.fetchall()]
            self._execute(cursor, "SELECT data FROM forewarn_eventgrid_subscriptions ORDER BY subscription_key")
            subscriptions = [json.loads(row[0]) for row in cursor.fetchall()]
        return topics, subscriptions

    @retried_on_a_new_connection
    def put_eventgrid_topic(self, topic_key: str, record: dict) -> None:
        with self._transaction() as cursor:
            self._execute(
                cursor,
                "INSERT INTO forewarn_eventgrid_topics (topic_key, data) VALUES (?, ?) "
                "ON CONFLICT (topic_key) DO UPDATE SET data = excluded.data",
                (topic_key, json.dumps(record, sort_keys=True)),
            )

    @retried_on_a_new_connection
    def delete_eventgrid_topic(self, topic_key: str) -> None:
        """A topic and its event subscriptions, in one transaction."""
        with self._transaction() as cursor:
            self._execute(cursor, "DELETE FROM forewarn_eventgrid_subscriptions WHERE topic_key = ?", (topic_key,))
            self._execute(cursor, "DELETE FROM forewarn_eventgrid_topics WHERE topic_key = ?", (topic_key,))

    @retried_on_a_new_connection
    def put_eventgrid_subscription(self, subscription_key: str, topic_key: str, record: dict) -> None:
        with self._transaction() as cursor:
            self._execute(
                cursor,
                "INSERT INTO forewarn_eventgrid_subscriptions (subscription_key, topic_key, data) VALUES (?, ?, ?) "
                "ON CONFLICT (subscription_key) DO UPDATE SET topic_key = excluded.topic_key, data = excluded.data",
                (subscription_key, topic_key, json.dumps(record, sort_keys=True)),
            )

    @retried_on_a_new_connection
    def delete_eventgrid_subscription(self, subscription_key: str) -> None:
        with self._transaction() as cursor:
            self._execute(
                cursor, "DELETE FROM forewarn_eventgrid_subscriptions WHERE subscription_key = ?", (subscription_key,)
            )

    @retried_on_a_new_connection
    def reset(self, clock: Clock, now: datetime) -> None:
        """Back to what ``initialize`` wrote, in one transaction: the fleet, the seed, the start time and the Event
        Grid registry (configuration) stay; everything that happened since goes, deliveries and journal included."""
        with self._transaction() as cursor:
            for table in self.registry.tables:
                cursor.execute(f"DELETE FROM {table}")
            marks = ", ".join("?" for _ in KEPT_BY_RESET)
            self._execute(cursor, f"DELETE FROM forewarn_meta WHERE key NOT IN ({marks})", KEPT_BY_RESET)
            self._put_meta(cursor, "clock", encode_clock(clock))
            self._put_meta(cursor, "now", now.isoformat())
            position = self._journal_changes(cursor, {RESET: []}) if self.keeps_changes else self.position
        self.position = position

    def journal_reset(self) -> None:
        """One entry in forewarn_changes that tells replicas to load the whole state, as a reset's does: after
        commits that were not journaled (a single server's)."""
        with self._transaction() as cursor:
            position = self._journal_changes(cursor, {RESET: []})
        self.position = position

    # ---------------------------------------------------------------------------------------- per-database
    def _transaction(self):
        raise NotImplementedError

    def _snapshot(self):
        """A transaction that only reads: the writer's, after the one under way if any, unless the database can
        read beside it (SQLiteStore)."""
        return self._transaction()

    def _idempotent(self, operation):
        return operation()

    def _consistent(self, cursor: Any) -> None:
        """Make the transaction just begun one snapshot of the database (for reads of several tables: never half a
        commit). A SQLite transaction is one already."""

    def ready(self) -> None:
        """Raise StoreUnavailable if the database cannot take a write now: called before a command changes the
        engine, so that a database out of reach refuses the command instead of failing its commit."""

    def probe(self) -> None:
        """One round trip to a networked database, recorded in ``reachability``; nothing for a file."""

    def close(self) -> None:
        self.connection.close()
