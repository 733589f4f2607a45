"""The narrow storage interface, and the SQL both databases share.

A store keeps: the fleet, the id seed, the clock setting, the simulated time of the last applied command, every
event at its latest state, each scope's DocumentIncarnation, and a journal of every change. ``commit`` writes the
changes of one command in one transaction; nothing is reported to a client before it returns.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from forewarn.aws.changes import Ec2EventChanged, Ec2NotificationAttributesChanged, Ec2StateChanged, Ec2WindowChanged
from forewarn.aws.model import Ec2Event, Ec2State, NotificationAttributes
from forewarn.aws.windows import EventWindow
from forewarn.azure.changes import EventChanged, IncarnationChanged, PolicyChanged, ScopeEnabled, VmChanged
from forewarn.azure.model import Event
from forewarn.azure.vms import Policy, VmState
from forewarn.core.clock import Clock
from forewarn.engine.engine import Change
from forewarn.store.codec import (
    decode_clock,
    decode_ec2_event,
    decode_ec2_state,
    decode_event,
    decode_policy,
    decode_vm_state,
    decode_wave,
    decode_window,
    encode_clock,
    encode_ec2_event,
    encode_ec2_state,
    encode_event,
    encode_policy,
    encode_vm_state,
    encode_wave_plan,
    encode_wave_progress,
    encode_window,
)
from forewarn.waves.component import Wave, WaveChanged

SCHEMA_VERSION = "1"
OUTBOX_KIND_COLUMN = "kind TEXT NOT NULL DEFAULT 'webhook'"  # which sending policy delivers a message
OUTBOX_DETAIL_COLUMN = (
    "detail TEXT"  # state a policy keeps beyond attempts and errors (JSON), e.g. a dead-letter reason
)
DUE_STATUSES = ("pending", "dead-lettering")  # statuses the sender still acts on


JOURNAL_INSERT = "INSERT INTO forewarn_journal (at, kind, event_id, detail) VALUES (?, ?, ?, ?)"
META_PUT = "INSERT INTO forewarn_meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value"


# What ``reset`` deletes: every table of state, not the Event Grid registry (configuration, like the fleet).
RESET_TABLES = (
    "forewarn_events",
    "forewarn_scopes",
    "forewarn_vms",
    "forewarn_policies",
    "forewarn_enabled",
    "forewarn_ec2_events",
    "forewarn_ec2_instances",
    "forewarn_ec2_windows",
    "forewarn_waves",
    "forewarn_outbox",
    "forewarn_journal",
)
KEPT_BY_RESET = ("fleet", "seed", "created_at", "schema_version")


class StoreError(Exception):
    """The database refused or failed; the message says which database and why."""

    retry_after = 1  # seconds a client is told to wait before retrying (the surfaces' Retry-After)


class StoreUnavailable(StoreError):
    """The database cannot be reached now; nothing was changed, and the store is reconnecting."""

    def __init__(self, message: str, retry_after: int = 1):
        super().__init__(message)
        self.retry_after = retry_after


def retried_on_a_new_connection(method):
    """Marks an operation that is safe to run twice (a read, or a write of absolute values): a store whose connection
    broke under it may run it again on a fresh one (PostgresStore)."""

    @functools.wraps(method)
    def run(self, *args, **kwargs):
        return self._idempotent(lambda: method(self, *args, **kwargs))

    return run


@dataclass
class StoredState:
    fleet_records: dict
    seed: str
    clock: Clock
    now: datetime
    created_at: datetime
    events: list[Event]
    incarnations: dict[str, int]
    vm_states: list[VmState]
    policies: list[Policy]
    enabled: dict[str, datetime]  # scope -> when its Scheduled Events were last enabled
    ec2_events: list[Ec2Event]
    ec2_states: list[Ec2State]  # instances whose state changed, and replacements Auto Scaling launched
    ec2_windows: list[EventWindow]
    notification_attributes: NotificationAttributes | None
    next_seq: int
    waves: list[Wave]


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


def _attributes(text: str | None) -> NotificationAttributes | None:
    if text is None:
        return None
    data = json.loads(text)
    return NotificationAttributes(data["include_all"], tuple(data["keys"]))


class SQLStore:
    """Shared SQL; subclasses supply the connection, the parameter marker and the DDL differences."""

    name = "sql"
    marker = "?"
    journal_id_type = "INTEGER PRIMARY KEY AUTOINCREMENT"

    def __init__(self, connection: Any, description: str):
        self.connection = connection
        self.description = description

    # -------------------------------------------------------------------------------------------- set-up
    def _ddl(self) -> list[str]:
        return [
            "CREATE TABLE IF NOT EXISTS forewarn_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
            "CREATE TABLE IF NOT EXISTS forewarn_events (event_id TEXT PRIMARY KEY, seq BIGINT NOT NULL, "
            "scope TEXT NOT NULL, status TEXT NOT NULL, data TEXT NOT NULL)",
            "CREATE TABLE IF NOT EXISTS forewarn_scopes (scope TEXT PRIMARY KEY, incarnation BIGINT NOT NULL)",
            "CREATE TABLE IF NOT EXISTS forewarn_vms (name TEXT PRIMARY KEY, data TEXT NOT NULL)",
            "CREATE TABLE IF NOT EXISTS forewarn_policies (owner TEXT PRIMARY KEY, data TEXT NOT NULL)",
            "CREATE TABLE IF NOT EXISTS forewarn_enabled (scope TEXT PRIMARY KEY, at TEXT NOT NULL)",
            "CREATE TABLE IF NOT EXISTS forewarn_ec2_events (event_id TEXT PRIMARY KEY, seq BIGINT NOT NULL, "
            "instance_id TEXT NOT NULL, data TEXT NOT NULL)",
            "CREATE TABLE IF NOT EXISTS forewarn_ec2_instances (instance_id TEXT PRIMARY KEY, data TEXT NOT NULL)",
            "CREATE TABLE IF NOT EXISTS forewarn_ec2_windows (window_id TEXT PRIMARY KEY, data TEXT NOT NULL)",
            "CREATE TABLE IF NOT EXISTS forewarn_waves (wave_id TEXT PRIMARY KEY, plan TEXT NOT NULL, "
            "progress TEXT NOT NULL)",
            f"CREATE TABLE IF NOT EXISTS forewarn_outbox (id {self.journal_id_type}, target TEXT NOT NULL, "
            "payload TEXT NOT NULL, status TEXT NOT NULL, attempts INTEGER NOT NULL, next_at TEXT NOT NULL, "
            "expires_at TEXT NOT NULL, last_error TEXT, created_at TEXT NOT NULL, "
            f"{OUTBOX_KIND_COLUMN}, {OUTBOX_DETAIL_COLUMN})",
            "CREATE INDEX IF NOT EXISTS forewarn_outbox_due ON forewarn_outbox (status, next_at)",
            # Event Grid system topics and event subscriptions (azure/eventgrid/registry.py), as JSON records.
            "CREATE TABLE IF NOT EXISTS forewarn_eventgrid_topics (topic_key TEXT PRIMARY KEY, data TEXT NOT NULL)",
            "CREATE TABLE IF NOT EXISTS forewarn_eventgrid_subscriptions (subscription_key TEXT PRIMARY KEY, "
            "topic_key TEXT NOT NULL, data TEXT NOT NULL)",
            f"CREATE TABLE IF NOT EXISTS forewarn_journal (seq {self.journal_id_type}, at TEXT NOT NULL, "
            "kind TEXT NOT NULL, event_id TEXT, detail TEXT NOT NULL)",
        ]

    def _sql(self, text: str) -> str:
        return text.replace("?", self.marker)

    def _execute(self, cursor, text: str, params: Sequence = ()) -> None:
        cursor.execute(self._sql(text), params)

    @retried_on_a_new_connection
    def migrate(self) -> None:
        with self._transaction() as cursor:
            for statement in self._ddl():
                cursor.execute(statement)
            # Outboxes created before deliveries had a kind and a detail gain the two columns (both databases accept
            # ADD COLUMN with a constant default; cursor.description names the columns on both).
            cursor.execute("SELECT * FROM forewarn_outbox WHERE 1 = 0")
            columns = {column[0].lower() for column in cursor.description}
            for name, definition in (("kind", OUTBOX_KIND_COLUMN), ("detail", OUTBOX_DETAIL_COLUMN)):
                if name not in columns:
                    cursor.execute(f"ALTER TABLE forewarn_outbox ADD COLUMN {definition}")
            self._execute(
                cursor,
                "INSERT INTO forewarn_meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING",
                ("schema_version", SCHEMA_VERSION),
            )

    # --------------------------------------------------------------------------------------------- reads
    def _meta(self, cursor) -> dict[str, str]:
        self._execute(cursor, "SELECT key, value FROM forewarn_meta")
        return dict(cursor.fetchall())

    @retried_on_a_new_connection
    def load(self) -> StoredState | None:
        """The stored state, or None for a store that was never initialized."""
        with self._transaction() as cursor:
            meta = self._meta(cursor)
            if "fleet" not in meta:
                return None
            self._execute(cursor, "SELECT data FROM forewarn_events ORDER BY seq")
            events = [decode_event(row[0]) for row in cursor.fetchall()]
            self._execute(cursor, "SELECT scope, incarnation FROM forewarn_scopes")
            incarnations = {scope: int(value) for scope, value in cursor.fetchall()}
            self._execute(cursor, "SELECT data FROM forewarn_vms")
            vm_states = [decode_vm_state(row[0]) for row in cursor.fetchall()]
            self._execute(cursor, "SELECT data FROM forewarn_policies")
            policies = [decode_policy(row[0]) for row in cursor.fetchall()]
            self._execute(cursor, "SELECT scope, at FROM forewarn_enabled")
            enabled = {scope: datetime.fromisoformat(at) for scope, at in cursor.fetchall()}
            self._execute(cursor, "SELECT data FROM forewarn_ec2_events ORDER BY seq")
            ec2_events = [decode_ec2_event(row[0]) for row in cursor.fetchall()]
            self._execute(cursor, "SELECT data FROM forewarn_ec2_instances")
            ec2_states = [decode_ec2_state(row[0]) for row in cursor.fetchall()]
            self._execute(cursor, "SELECT data FROM forewarn_ec2_windows")
            ec2_windows = [decode_window(row[0]) for row in cursor.fetchall()]
            self._execute(cursor, "SELECT plan, progress FROM forewarn_waves ORDER BY wave_id")
            waves = [decode_wave(plan, progress) for plan, progress in cursor.fetchall()]
        return StoredState(
            fleet_records=json.loads(meta["fleet"]),
            seed=meta["seed"],
            clock=decode_clock(meta["clock"]),
            now=datetime.fromisoformat(meta["now"]),
            created_at=datetime.fromisoformat(meta.get("created_at", meta["now"])),
            events=events,
            incarnations=incarnations,
            vm_states=vm_states,
            policies=policies,
            enabled=enabled,
            ec2_events=ec2_events,
            ec2_states=ec2_states,
            ec2_windows=ec2_windows,
            notification_attributes=_attributes(meta.get("ec2_notification_attributes")),
            next_seq=int(meta.get("next_seq", "1")),
            waves=waves,
        )

    @retried_on_a_new_connection
    def journal(self, event_id: str | None = None, limit: int = 1000) -> list[JournalEntry]:
        with self._transaction() as cursor:
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
        with self._transaction() as cursor:
            for key, value in (
                ("fleet", json.dumps(fleet_records, sort_keys=True)),
                ("seed", seed),
                ("clock", encode_clock(clock)),
                ("now", now.isoformat()),
                ("created_at", now.isoformat()),
            ):
                self._put_meta(cursor, key, value)

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
        writes = self._commit_writes(changes, now, clock, outbox, next_seq)
        with self._transaction() as cursor:
            for sql, rows in writes.items():
                cursor.executemany(self._sql(sql), rows)

    def _commit_writes(
        self,
        changes: Sequence[Change],
        now: datetime,
        clock: Clock | None,
        outbox: Sequence[Outgoing],
        next_seq: int | None,
    ) -> dict[str, list[tuple]]:
        """One command's rows, by statement (built before the transaction starts, so a retried commit reuses them)."""
        # Rows are queued per statement and written with one executemany each, in the order each statement first
        # appears: a 100,000-VM wave step writes thousands of rows, and one round trip per row was most of its cost.
        # Statements on one table keep their order (each table has one statement, or, for waves and event windows,
        # statements whose order of first appearance is the order they must run in).
        writes: dict[str, list[tuple]] = {}

        def write(sql: str, params: tuple) -> None:
            writes.setdefault(sql, []).append(params)

        def journal(kind: str, event_id: str | None, detail: dict) -> None:
            write(JOURNAL_INSERT, (now.isoformat(), kind, event_id, json.dumps(detail, sort_keys=True)))

        for item in outbox:
            write(
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
        waves: dict[str, Wave] = {}  # a wave's latest progress in this command; its steps go to the journal
        for change in changes:
            if isinstance(change, WaveChanged):
                wave = change.wave
                if change.what == "started":
                    write(
                        "INSERT INTO forewarn_waves (wave_id, plan, progress) VALUES (?, ?, '{}')",
                        (wave.wave_id, encode_wave_plan(wave)),
                    )
                waves[wave.wave_id] = wave
                journal(f"wave {change.what}", None, {"wave": wave.wave_id, "reason": change.reason})
            elif isinstance(change, EventChanged):
                event = change.event
                write(
                    "INSERT INTO forewarn_events (event_id, seq, scope, status, data) VALUES (?, ?, ?, ?, ?) "
                    "ON CONFLICT (event_id) DO UPDATE SET status = excluded.status, data = excluded.data",
                    (event.event_id, event.seq, event.scope, event.status.value, encode_event(event)),
                )
                journal(change.what, event.event_id, {"reason": change.reason, "scope": event.scope})
            elif isinstance(change, VmChanged):
                state = change.state
                write(
                    "INSERT INTO forewarn_vms (name, data) VALUES (?, ?) "
                    "ON CONFLICT (name) DO UPDATE SET data = excluded.data",
                    (state.name, encode_vm_state(state)),
                )
                journal(f"vm {change.what}", None, {"vm": state.name, "reason": change.reason})
            elif isinstance(change, PolicyChanged):
                write(
                    "INSERT INTO forewarn_policies (owner, data) VALUES (?, ?) "
                    "ON CONFLICT (owner) DO UPDATE SET data = excluded.data",
                    (change.policy.owner, encode_policy(change.policy)),
                )
                journal("policy", None, {"owner": change.policy.owner})
            elif isinstance(change, ScopeEnabled):
                write(
                    "INSERT INTO forewarn_enabled (scope, at) VALUES (?, ?) "
                    "ON CONFLICT (scope) DO UPDATE SET at = excluded.at",
                    (change.scope, change.at.isoformat()),
                )
                journal("enabled", None, {"scope": change.scope})
            elif isinstance(change, Ec2EventChanged):
                event = change.event
                write(
                    "INSERT INTO forewarn_ec2_events (event_id, seq, instance_id, data) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT (event_id) DO UPDATE SET data = excluded.data",
                    (event.event_id, event.seq, event.instance_id, encode_ec2_event(event)),
                )
                journal(f"ec2 {change.what}", event.event_id, {"instance": event.instance_id, "reason": change.reason})
            elif isinstance(change, Ec2StateChanged):
                state = change.state
                write(
                    "INSERT INTO forewarn_ec2_instances (instance_id, data) VALUES (?, ?) "
                    "ON CONFLICT (instance_id) DO UPDATE SET data = excluded.data",
                    (state.instance_id, encode_ec2_state(state)),
                )
                journal(f"instance {change.what}", None, {"instance": state.instance_id, "reason": change.reason})
            elif isinstance(change, Ec2NotificationAttributesChanged):
                attributes = change.attributes
                write(
                    META_PUT,
                    (
                        "ec2_notification_attributes",
                        json.dumps({"include_all": attributes.include_all, "keys": list(attributes.keys)}),
                    ),
                )
                journal("notification attributes", None, {})
            elif isinstance(change, Ec2WindowChanged):
                window = change.window
                if window.state == "deleted":
                    write("DELETE FROM forewarn_ec2_windows WHERE window_id = ?", (window.window_id,))
                else:
                    write(
                        "INSERT INTO forewarn_ec2_windows (window_id, data) VALUES (?, ?) "
                        "ON CONFLICT (window_id) DO UPDATE SET data = excluded.data",
                        (window.window_id, encode_window(window)),
                    )
                journal(f"window {change.what}", None, {"window": window.window_id})
            elif isinstance(change, IncarnationChanged):
                write(
                    "INSERT INTO forewarn_scopes (scope, incarnation) VALUES (?, ?) "
                    "ON CONFLICT (scope) DO UPDATE SET incarnation = excluded.incarnation",
                    (change.scope, change.incarnation),
                )
        for wave in waves.values():
            write(
                "UPDATE forewarn_waves SET progress = ? WHERE wave_id = ?", (encode_wave_progress(wave), wave.wave_id)
            )
        write(META_PUT, ("now", now.isoformat()))
        if next_seq is not None:
            write(META_PUT, ("next_seq", str(next_seq)))
        if clock is not None:
            write(META_PUT, ("clock", encode_clock(clock)))
        return writes

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
        with self._transaction() as cursor:
            for item in attempts:
                self._execute(
                    cursor,
                    "UPDATE forewarn_outbox SET status = ?, attempts = ?, next_at = ?, last_error = ?, "
                    "detail = COALESCE(?, detail) WHERE id = ?",
                    (item.status, item.attempts, item.next_at.isoformat(), item.error, item.detail, item.delivery_id),
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
            for table in RESET_TABLES:
                cursor.execute(f"DELETE FROM {table}")
            self._execute(cursor, "DELETE FROM forewarn_meta WHERE key NOT IN (?, ?, ?, ?)", KEPT_BY_RESET)
            self._put_meta(cursor, "clock", encode_clock(clock))
            self._put_meta(cursor, "now", now.isoformat())

    # ---------------------------------------------------------------------------------------- per-database
    def _transaction(self):
        raise NotImplementedError

    def _idempotent(self, operation):
        return operation()

    def ready(self) -> None:
        """Raise StoreUnavailable if the database cannot take a write now: called before a command changes the
        engine, so that a database out of reach refuses the command instead of failing its commit."""

    def close(self) -> None:
        self.connection.close()
