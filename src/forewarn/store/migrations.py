"""The schema, as numbered migrations: a store is brought from the version it records (``schema_version`` in
``forewarn_meta``) to the newest one, in order, in one transaction, on SQLite and PostgreSQL alike.

A database whose version is newer than this code knows is refused (:class:`SchemaTooNew`): this code would not know
what the later migrations changed. To change the schema, append a migration with the next number; never edit one
that has been released, since databases already record that it ran.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from forewarn.store.errors import SchemaTooNew

OUTBOX_KIND_COLUMN = "kind TEXT NOT NULL DEFAULT 'webhook'"  # which sending policy delivers a message
OUTBOX_DETAIL_COLUMN = (
    "detail TEXT"  # state a policy keeps beyond attempts and errors (JSON), e.g. a dead-letter reason
)
VERSION_KEY = "schema_version"


@dataclass(frozen=True)
class Dialect:
    """The DDL differences between the databases."""

    name: str
    identity_key: str  # an auto-numbered primary key column's type


@dataclass(frozen=True)
class Migration:
    version: int
    summary: str
    apply: Callable[[Any, Dialect], None]  # (an open cursor in the migrating transaction, the database's dialect)


def _tables(cursor: Any, dialect: Dialect) -> None:
    for statement in (
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
        f"CREATE TABLE IF NOT EXISTS forewarn_outbox (id {dialect.identity_key}, target TEXT NOT NULL, "
        "payload TEXT NOT NULL, status TEXT NOT NULL, attempts INTEGER NOT NULL, next_at TEXT NOT NULL, "
        "expires_at TEXT NOT NULL, last_error TEXT, created_at TEXT NOT NULL, "
        f"{OUTBOX_KIND_COLUMN}, {OUTBOX_DETAIL_COLUMN})",
        "CREATE INDEX IF NOT EXISTS forewarn_outbox_due ON forewarn_outbox (status, next_at)",
        # Event Grid system topics and event subscriptions (azure/eventgrid/registry.py), as JSON records.
        "CREATE TABLE IF NOT EXISTS forewarn_eventgrid_topics (topic_key TEXT PRIMARY KEY, data TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS forewarn_eventgrid_subscriptions (subscription_key TEXT PRIMARY KEY, "
        "topic_key TEXT NOT NULL, data TEXT NOT NULL)",
        f"CREATE TABLE IF NOT EXISTS forewarn_journal (seq {dialect.identity_key}, at TEXT NOT NULL, "
        "kind TEXT NOT NULL, event_id TEXT, detail TEXT NOT NULL)",
    ):
        cursor.execute(statement)


def _outbox_kind_and_detail(cursor: Any, dialect: Dialect) -> None:
    # Both databases accept ADD COLUMN with a constant default; cursor.description names the columns on both.
    cursor.execute("SELECT * FROM forewarn_outbox WHERE 1 = 0")
    columns = {column[0].lower() for column in cursor.description}
    for name, definition in (("kind", OUTBOX_KIND_COLUMN), ("detail", OUTBOX_DETAIL_COLUMN)):
        if name not in columns:
            cursor.execute(f"ALTER TABLE forewarn_outbox ADD COLUMN {definition}")


def _gce_tables(cursor: Any, dialect: Dialect) -> None:
    for statement in (
        "CREATE TABLE IF NOT EXISTS forewarn_gce_events (event_id TEXT PRIMARY KEY, seq BIGINT NOT NULL, "
        "instance TEXT NOT NULL, data TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS forewarn_gce_instances (name TEXT PRIMARY KEY, data TEXT NOT NULL)",
    ):
        cursor.execute(statement)


def _leader(cursor: Any, dialect: Dialect) -> None:
    # One row at most: the process that leads a shared PostgreSQL database (replication/), where the others reach
    # it, and the position it has published (bumped after each commit). SQLite gets the table too and never uses it.
    cursor.execute(
        "CREATE TABLE IF NOT EXISTS forewarn_leader (id INTEGER PRIMARY KEY CHECK (id = 1), node TEXT NOT NULL, "
        "term BIGINT NOT NULL, position BIGINT NOT NULL, addresses TEXT NOT NULL, store_pid BIGINT, "
        "since TEXT NOT NULL)"
    )


def _changes(cursor: Any, dialect: Dialect) -> None:
    # What each commit of a shared leader changed, for the replicas (replication/): a position given in the commit's
    # own transaction (one more than the last: gap-free, in commit order), when it was written (milliseconds since
    # the epoch, for pruning), and the rows it wrote, named by table and key (JSON). Only shared processes write it.
    cursor.execute(
        "CREATE TABLE IF NOT EXISTS forewarn_changes (position BIGINT PRIMARY KEY, written_ms BIGINT NOT NULL, "
        "keys TEXT NOT NULL)"
    )


def _fleet_in_columns(cursor: Any, dialect: Dialect) -> None:
    # No table changes: from this version the fleet's record in forewarn_meta may be in columns (fleet format 2, with
    # its digest beside it), which releases before it would misread. Records of the old format stay readable.
    return None


def _writer_columns(cursor: Any, dialect: Dialect) -> None:
    # Who holds the writer's lock (store/writer.py): the row's process is a single server or a shared leader
    # (NULL: a leader written before roles were recorded), and the backend that holds the lock, so that a process
    # refused the lock can name the holder.
    cursor.execute("SELECT * FROM forewarn_leader WHERE 1 = 0")
    columns = {column[0].lower() for column in cursor.description}
    for name, definition in (("role", "role TEXT"), ("lock_pid", "lock_pid BIGINT")):
        if name not in columns:
            cursor.execute(f"ALTER TABLE forewarn_leader ADD COLUMN {definition}")


MIGRATIONS: Sequence[Migration] = (
    # Every table, as written before versions were read. Tables already there are kept as they are (a database
    # that never recorded a version, version 0, may hold some of them).
    Migration(1, "the tables of events, VMs, policies, EC2, waves, the outbox, Event Grid and the journal", _tables),
    # Databases recorded as version 1 by releases before outbox deliveries had a kind and a detail lack the two
    # columns; the rest have them already and are left unchanged.
    Migration(2, "outbox deliveries gain their sending policy (kind) and its state (detail)", _outbox_kind_and_detail),
    Migration(3, "Compute Engine maintenance events and instance states (gcp/records.py)", _gce_tables),
    Migration(4, "forewarn_leader: which process leads a shared PostgreSQL database, and where", _leader),
    Migration(5, "forewarn_changes: the rows each commit of a shared leader wrote, for its replicas", _changes),
    Migration(6, "the fleet's record may be in columns, with its digest (fleet format 2)", _fleet_in_columns),
    Migration(7, "forewarn_leader: the writer's role and the backend holding its lock", _writer_columns),
)
LATEST = MIGRATIONS[-1].version


def pending(stored: int, description: str) -> list[Migration]:
    """The migrations a database at version ``stored`` needs, in order; SchemaTooNew for one newer than the code."""
    if stored > LATEST:
        raise SchemaTooNew(
            f"{description}: the database has schema version {stored}, newer than this forewarn knows (up to "
            f"{LATEST}); it was written by a newer forewarn: upgrade forewarn, or give another database"
        )
    return [migration for migration in MIGRATIONS if migration.version > stored]
